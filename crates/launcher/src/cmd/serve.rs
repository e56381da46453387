//! `strata serve`: everything running until SIGINT/SIGTERM.

use strata_engine::config::LoadedConfig;
use strata_runtime::EnvExt;

use super::context::*;
use super::tools::layer_summary;
use crate::Exit;

/// `Some(hint)` when no agent can reach a model.
pub(crate) fn provider_hint(c: &LoadedConfig) -> Option<&'static str> {
    let any = c.config.defaults.llm.is_some() || c.config.agents.values().any(|a| a.llm.is_some());
    (!any).then_some(
        "No LLM provider is configured, so agents cannot answer yet; tools still work \
         (`strata tools`, `strata invoke`). To add one, set `defaults.llm` in \
         config/config.yaml, e.g.\n  defaults:\n    llm:\n      provider: openai\n      \
         model: gpt-4o-mini\n      api_key: vault:openai-key\n(see README, \"Providers\", for \
         Anthropic, Gemini, a local llama.cpp/Ollama server or the Claude Code CLI).",
    )
}

/// The per-instance lock `data/strata-<profile>.lock` (`main` without a profile), held with
/// `flock` for the life of the process; its text is the holder's pid.
pub(crate) fn instance_lock(
    data_dir: &std::path::Path,
    profile: Option<&str>,
) -> anyhow::Result<std::fs::File> {
    use std::io::Write as _;
    crate::wiring::ensure_data_dir(data_dir)?;
    let name = profile.unwrap_or("main");
    let path = data_dir.join(format!("strata-{name}.lock"));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        anyhow::bail!(
            "another `strata serve` of profile `{name}` is running on {} (pid {}, lock {}); \
             stop it first, or start this one with another --profile",
            data_dir.display(),
            holder.trim(),
            path.display()
        );
    }
    f.set_len(0)?;
    writeln!(f, "{}", std::process::id())?;
    Ok(f)
}

pub(crate) fn serve(l: Context, global: &crate::cli::GlobalArgs) -> anyhow::Result<Exit> {
    let level = global.log_level(&l.config.config.log.level);
    let json = l.config.config.log.format == strata_engine::config::LogFormat::Json;
    if let Some(e) = &l.config.config.telemetry.otlp_endpoint
        && !(e.starts_with("http://") || e.starts_with("https://"))
    {
        anyhow::bail!(
            "`telemetry.otlp_endpoint` = `{e}` is not an http:// or https:// URL (an OTLP/HTTP \
             collector, e.g. http://127.0.0.1:4318)"
        );
    }
    let log_guard = init_logging(&level, json, Some(&l.config.config.telemetry));
    let rt = tokio_runtime()?;
    let c = &l.config;
    let problems = c.config.cluster.problems(&c.config.storage);
    if !problems.is_empty() {
        anyhow::bail!("cannot start as a cluster member: {}", problems.join("; "));
    }
    let missing = crate::features::missing(c);
    if !missing.is_empty() {
        anyhow::bail!(missing.join("; "));
    }
    let schedules = strata_runtime::schedule::from_config(&c.config)
        .map_err(|p| anyhow::anyhow!("schedules: {}", p.join("; ")))?;
    let skill_problems = crate::schedules::skill_problems(&schedules, &l.skills);
    if !skill_problems.is_empty() {
        anyhow::bail!("schedules: {}", skill_problems.join("; "));
    }
    tracing::info!(
        overlay = %c.overlay_dir.display(),
        profile = c.profile.as_deref().unwrap_or("-"),
        data_dir = %c.data_dir.display(),
        "config loaded"
    );
    // One instance per profile: a second `serve` of the same profile on the same data dir
    // stops here (the lock is released by the kernel when this process ends, however).
    let _instance = instance_lock(&c.data_dir, c.profile.as_deref())?;
    crate::wiring::PASSPHRASE_FROM_STDIN.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in l.registry.shadowed() {
        tracing::info!(tool = %s.name, winner = %s.winner, hidden = %s.hidden, "tool shadowed");
    }
    let listener = rt.block_on(crate::http::bind(c))?;
    let metrics_listener = match crate::metrics::bind_addr(c)? {
        Some(addr) => Some(
            rt.block_on(tokio::net::TcpListener::bind(addr))
                .map_err(|e| anyhow::anyhow!("cannot bind {addr} (`metrics.bind`): {e}"))?,
        ),
        None => None,
    };
    {
        let _rt = rt.enter();
        crate::metrics::install(c)?;
    }
    let local = listener.local_addr()?;
    let mcp_host = if local.ip().is_unspecified() {
        "127.0.0.1".to_owned()
    } else {
        local.ip().to_string()
    };
    let mcp_url = format!("http://{mcp_host}:{}/mcp", local.port());
    let wired = rt.block_on(crate::wiring::build(c, l.registry.clone(), Some(&mcp_url)))?;
    // A cluster member hands its turns to the work queue and takes others' (`cluster.*`).
    let member = rt.block_on(crate::cluster::join(
        c,
        &wired,
        wired.invoker.env().vault.as_deref(),
        &format!("http://{mcp_host}:{}", local.port()),
    ))?;
    crate::wiring::warn_missing_vault_refs(c, wired.invoker.env().vault.as_deref());
    tracing::info!(
        tools = l.registry.len(),
        layers = %layer_summary(&l.registry),
        modules = %l.registry.modules().join(","),
        audit = %wired.audit.path().display(),
        store = %wired.store.backend(),
        sessions = %wired.store.location(),
        "registry loaded"
    );
    tracing::info!(agents = %wired.manager.agent_ids().join(","), "agents ready");
    // Requests left pending by a previous run whose time is up: their callers are gone.
    match rt.block_on(wired.approvals.sweep()) {
        Ok(0) => {}
        Ok(n) => tracing::info!(requests = n, "stale approval requests marked timeout"),
        Err(e) => tracing::warn!(error = %e, "approval requests not swept"),
    }
    for (id, why) in &wired.skipped {
        tracing::warn!(agent = %id, "agent not started: {why}");
    }
    if let Some(hint) = provider_hint(c) {
        tracing::warn!("{hint}");
    }
    let skills = l.skills.clone();
    tracing::info!(skills = skills.snapshot().len(), "skills loaded");
    let _watcher = crate::cmd::skill::watch(skills.clone(), l.registry.clone());
    // Signal handlers before the first child process starts (and after the vault, whose
    // terminal prompt Ctrl-C must still interrupt): a SIGTERM from here on is kept and handled
    // by the orderly shutdown below, which also stops the MCP servers.
    let signal = {
        let _rt = rt.enter();
        shutdown_signal()
    };
    // `install_mcp` starts servers beside these while serve runs.
    let mcp_servers = rt.block_on(crate::wiring::McpServers::start(
        c,
        l.registry.clone(),
        wired.invoker.env(),
    ));
    if !c.config.mcp.servers.is_empty() {
        tracing::info!(
            servers = c.config.mcp.servers.len(),
            tools = l.registry.len(),
            "MCP servers started"
        );
    }
    // The scheduler: the built-in jobs and `schedules.*`, each due time run by one instance.
    let instance = member
        .as_ref()
        .map(|m| m.instance().to_owned())
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));
    let scheduler = std::sync::Arc::new(
        strata_runtime::schedule::Scheduler::new(
            schedules,
            wired.store.clone(),
            std::sync::Arc::new(crate::schedules::Runner::new(
                &wired,
                skills.clone(),
                crate::integrity::Watch::new(c),
            )),
            &instance,
        )
        .with_alerts(vec![std::sync::Arc::new(crate::schedules::InvokerAlerts(
            wired.invoker.clone(),
        ))])
        .with_audit(wired.audit.clone()),
    );
    rt.block_on(scheduler.start(strata_runtime::schedule::Timestamp::now()))
        .map_err(|e| anyhow::anyhow!("schedules' state: {e}"))?;
    tracing::info!(
        schedules = scheduler.schedules().iter().filter(|s| s.enabled).count(),
        "scheduler ready"
    );
    let http_state = crate::http::state(
        c,
        &wired,
        &local,
        member.as_ref().and_then(crate::cluster::Member::view),
        Some(scheduler.clone()),
        Some(skills.clone()),
    )?;
    tracing::info!(address = %local, "control API on http://{local}/api, MCP on http://{local}/mcp");
    // Like the per-boot token: a plain line for the person at the terminal — not with
    // `log.format: json`, whose stderr is a log pipeline's (and whose readers sign in with a
    // token).
    if c.config.log.format == strata_engine::config::LogFormat::Text
        && let Some(link) = crate::http::sign_in_link(&http_state, &local)?
    {
        eprintln!("dashboard: {link}  (one-time sign-in link for this boot)");
    }
    let env = wired.invoker.env().clone();
    let skill_turns: std::sync::Arc<dyn strata_runtime::skills::SkillTurns> =
        std::sync::Arc::new(crate::wiring::SkillTurns {
            site: crate::wiring::Site::of(&l.config),
            invoker: wired.invoker.clone(),
            env: env.clone(),
        });
    let discord =
        crate::discord::Discord::prepare(c, &wired, &env, &skills, skill_turns, member.as_ref());
    // One node resumes the turns its previous run did not finish; in a cluster the queue
    // redelivers them (to whichever instance takes them), so nobody resumes them twice.
    let resume = member.is_none().then(|| wired.manager.clone());
    rt.block_on(async move {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        // Goal channels (routed to their participants): read before the connectors start,
        // then every 30 s for the channels other instances make.
        if let Some(goals) = env.goals() {
            if let Err(e) = goals.refresh_channels().await {
                tracing::warn!(error = %e, "goal channels not read");
            }
            let mut stop = stop_rx.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.changed() => break,
                        () = tokio::time::sleep(std::time::Duration::from_secs(30)) => {}
                    }
                    if let Err(e) = goals.refresh_channels().await {
                        tracing::warn!(error = %e, "goal channels not read");
                    }
                }
            });
        }
        // Discord accounts (none unless `connectors.discord.accounts` lists some).
        let discord = discord.start(stop_rx.clone());
        if !discord.is_empty() {
            tracing::info!(accounts = discord.len(), "Discord connector started");
        }
        let ticking = tokio::spawn(scheduler.run_until(stop_rx.clone()));
        if let Some(l) = metrics_listener {
            let addr = l.local_addr().ok();
            let st = http_state.clone();
            let mut rx = stop_rx.clone();
            tokio::spawn(async move {
                let shutdown = async move {
                    let _ = rx.wait_for(|s| *s).await;
                };
                if let Err(e) = strata_http::serve_metrics(l, st, shutdown).await {
                    tracing::error!(error = %e, "metrics listener failed");
                }
            });
            if let Some(a) = addr {
                tracing::info!(address = %a, "metrics on http://{a}/metrics (no token; loopback only)");
            }
        }
        let http = tokio::spawn(async move {
            let mut rx = stop_rx;
            let shutdown = async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            if let Err(e) = strata_http::serve(listener, http_state, shutdown).await {
                tracing::error!(error = %e, "HTTP server failed");
            }
        });
        if let Some(manager) = resume {
            match manager.resume_unfinished().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    turns = n,
                    "resuming turns the previous run did not finish (their recorded steps are not done again)"
                ),
                Err(e) => tracing::warn!(error = %e, "unfinished turns not resumed"),
            }
        }
        tracing::info!("strata is running; stop with Ctrl-C or SIGTERM");
        signal.await;
        tracing::info!("shutting down; finishing in-flight requests");
        // A member first stops taking turns and finishes the ones it runs (the others
        // are taken by the other instances), then closes its doors.
        if let Some(m) = member {
            m.leave().await;
        }
        let _ = stop_tx.send(true);
        if tokio::time::timeout(std::time::Duration::from_secs(30), http)
            .await
            .is_err()
        {
            tracing::warn!("in-flight requests did not finish within 30 s");
        }
        for d in discord {
            if tokio::time::timeout(std::time::Duration::from_secs(5), d)
                .await
                .is_err()
            {
                tracing::warn!("a Discord account did not close within 5 s");
            }
        }
        ticking.abort();
        mcp_servers.stop().await;
    });
    rt.block_on(wired.finish());
    tracing::info!("stopped");
    log_guard.finish();
    Ok(Exit::Ok)
}

/// Installs SIGINT/SIGTERM handlers now and returns a future that resolves on either.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                (t, i) => {
                    if let Err(e) = t.and(i) {
                        tracing::warn!(error = %e, "cannot listen for signals; Ctrl-C only");
                    }
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
