//! `strata doctor [--online]`: the deployment preflight.

use super::context::*;
use super::serve::provider_hint;
use super::tools::layer_summary;
use crate::Exit;

pub(crate) fn doctor(l: &Context, online: bool) -> Exit {
    let findings = findings(l, online);
    let colour = colour_on_stdout();
    let text: Vec<String> = findings
        .iter()
        .map(|f| format!("{} {}", level_shown(f.level, colour), f.message))
        .collect();
    let code = out(&text.join("\n"));
    if findings.iter().any(|f| f.level == "FAIL") {
        Exit::Failure
    } else {
        code
    }
}

/// The level padded to four columns, coloured on a terminal (`NO_COLOR` turns it off):
/// ok green, info blue, warn yellow, FAIL bold red.
fn level_shown(level: &str, colour: bool) -> String {
    let padded = format!("{level:<4}");
    if !colour {
        return padded;
    }
    let code = match level {
        "ok" => "32",
        "info" => "34",
        "warn" => "33",
        "FAIL" => "1;31",
        _ => return padded,
    };
    format!("\x1b[{code}m{padded}\x1b[0m")
}

/// One line of the doctor's report: `level` is `ok`, `info`, `warn` or `FAIL`.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Finding {
    pub(crate) level: &'static str,
    pub(crate) message: String,
}

/// Every check, in the order the report shows them: what holds and what is informational
/// first, then warnings, then failures.
pub(crate) fn findings(l: &Context, online: bool) -> Vec<Finding> {
    let mut lines = Vec::new();
    let mut ok = |m: String| lines.push(format!("ok   {m}"));
    let c = &l.config;
    ok(format!(
        "config loads (overlay {})",
        c.overlay_dir.display()
    ));
    let mut warns = Vec::new();
    let mut fails = Vec::new();
    if !c.overlay_dir.join("config").is_dir() {
        warns.push(format!(
            "no config/ directory in {}",
            c.overlay_dir.display()
        ));
    }
    for id in c.config.agents.keys() {
        let p = c.overlay_dir.join("agents").join(id).join("AGENTS.md");
        if !p.is_file() {
            warns.push(format!("agent `{id}` has no {}", p.display()));
        }
    }
    for r in c.config.tools.roots.iter().map(|r| c.overlay_dir.join(r)) {
        if !r.is_dir() {
            warns.push(format!(
                "tool root {} does not exist (file tools skip it)",
                r.display()
            ));
        }
    }
    match strata_runtime::schedule::from_config(&c.config) {
        Ok(all) => {
            let problems = crate::schedules::skill_problems(&all, &l.skills);
            if problems.is_empty() {
                lines.push(format!(
                    "ok   {} schedules ({} on)",
                    all.len(),
                    all.iter().filter(|s| s.enabled).count()
                ));
            }
            fails.extend(problems.into_iter().map(|p| format!("schedules: {p}")));
        }
        Err(problems) => fails.extend(problems.into_iter().map(|p| format!("schedules: {p}"))),
    }
    fails.extend(budget_problems(c, &mut warns, &mut lines));
    // Read-only: doctor compares, it never takes a baseline.
    let watch = crate::integrity::Watch::new(c);
    match crate::integrity::load(&c.data_dir).and_then(|b| Ok((b, crate::integrity::take(&watch)?)))
    {
        Ok((None, now)) => lines.push(format!(
            "ok   no integrity baseline yet ({} files; `strata integrity accept` takes one, \
             the first integrity_check run too)",
            now.files.len()
        )),
        Ok((Some(then), now)) => {
            let drift = crate::integrity::compare(&then, &now);
            if drift.is_empty() {
                lines.push(format!(
                    "ok   {} files as in the integrity baseline of {}",
                    now.files.len(),
                    then.taken_at
                ));
            } else {
                warns.push(format!(
                    "files differ from the integrity baseline of {}: {} (`strata integrity accept` if intended)",
                    then.taken_at,
                    drift.describe()
                ));
            }
        }
        Err(e) => warns.push(format!("integrity: {e}")),
    }
    match check_writable(&c.data_dir) {
        Ok(()) => lines.push(format!(
            "ok   data dir {} is writable",
            c.data_dir.display()
        )),
        Err(e) => fails.push(format!("data dir {}: {e}", c.data_dir.display())),
    }
    lines.push(format!(
        "ok   {} tools linked ({})",
        l.registry.len(),
        layer_summary(&l.registry)
    ));
    let linked = strata_runtime::Registry::linked_sources();
    match crate::preflight::silent_tool_files(&c.overlay_dir, &linked) {
        (0, _) => {}
        (n, silent) if silent.is_empty() => lines.push(format!(
            "ok   src/tools: each of its {n} file(s) registered a tool"
        )),
        (_, silent) => {
            for f in silent {
                warns.push(format!(
                    "{} registered no tool in this binary: it needs a `#[tool]` fn (a helper \
                     file is fine), and the binary must be built from this overlay after the \
                     file was added (`cargo build` in {})",
                    f.display(),
                    c.overlay_dir.display()
                ));
            }
        }
    }
    for s in l.registry.shadowed() {
        lines.push(format!(
            "info tool `{}`: {} shadows {}",
            s.name, s.winner, s.hidden
        ));
    }
    // The vault: opens with the passphrase from the environment?
    let config_dir = c.overlay_dir.join("config");
    let has_vault = strata_vault::FileVault::exists(&config_dir);
    let mut vault = None;
    if has_vault {
        match crate::wiring::open_vault(&config_dir) {
            Ok(Some(v)) => {
                lines.push(format!(
                    "ok   vault {} opens ({} keys)",
                    config_dir.join("secrets.enc").display(),
                    strata_engine::secret::Vault::keys(&v).len()
                ));
                vault = Some(v);
            }
            Ok(None) => warns.push(format!(
                "vault {} is here but no passphrase was given (STRATA_VAULT_KEY_FILE or STRATA_VAULT_PASSPHRASE)",
                config_dir.join("secrets.enc").display()
            )),
            Err(e) => fails.push(format!("vault: {e}")),
        }
    }
    let vault_dyn = vault
        .as_ref()
        .map(|v| v as &dyn strata_engine::secret::Vault);
    let mut pf = crate::preflight::Findings::default();
    crate::preflight::vault_refs(c, vault_dyn, has_vault, &mut pf);
    crate::preflight::data_dir_private(c, &mut pf);
    crate::preflight::units(c, &mut pf);
    pf.fail.extend(crate::features::missing(c));
    storage(c, vault_dyn, &mut lines, &mut fails);
    if online {
        match tokio_runtime() {
            Ok(rt) => {
                let _p = Progress::start("checking the keys with their services");
                rt.block_on(crate::preflight::online(c, vault_dyn, &mut pf))
            }
            Err(e) => fails.push(format!("--online: {e}")),
        }
    }
    lines.extend(pf.ok.into_iter().map(|m| format!("ok   {m}")));
    lines.extend(pf.info.into_iter().map(|m| format!("info {m}")));
    warns.extend(pf.warn);
    fails.extend(pf.fail);
    // The terminal sandbox: what this machine offers, and whether the configured mode works.
    let probe = strata_sandbox::probe();
    for line in probe.report() {
        lines.push(format!("info sandbox: {line}"));
    }
    let mode = match c.config.tools.terminal.sandbox {
        strata_engine::config::SandboxMode::Auto => strata_sandbox::Mode::Auto,
        strata_engine::config::SandboxMode::Bubblewrap => strata_sandbox::Mode::Bubblewrap,
        strata_engine::config::SandboxMode::Landlock => strata_sandbox::Mode::Landlock,
        strata_engine::config::SandboxMode::None => strata_sandbox::Mode::None,
    };
    match probe.choose(mode) {
        Ok(strata_sandbox::Backend::None) => warns.push(
            "sandbox: terminal_exec runs without isolation (tools.terminal.sandbox: none)".into(),
        ),
        Ok(b) => lines.push(format!("ok   sandbox: terminal_exec runs under {}", b.as_str())),
        Err(_) => warns.push(format!(
            "sandbox: no isolation available for tools.terminal.sandbox: {mode:?}; terminal_exec will refuse to run (install bubblewrap)"
        )),
    }
    // Rights: the data directory's mode, owners and readability under the overlay.
    for f in crate::permissions::sweep(&c.overlay_dir, &c.data_dir) {
        if f.key != "data_dir_mode" {
            warns.push(format!("permissions: {} — fix: `{}`", f.message, f.fix));
        }
    }
    #[cfg(feature = "browser")]
    match strata_browser::find_executable(&c.config.browser) {
        Some(exe) if exe.is_file() => {
            lines.push(format!(
                "ok   browser: {} (browse_url, browser), confined by {}",
                exe.display(),
                strata_browser::confinement()
            ));
            if strata_sandbox::probe().bwrap.is_none() && rustix::process::geteuid().is_root() {
                warns.push(
                    "browser: running as root without bubblewrap, Chromium runs without any \
                     sandbox (--no-sandbox); install bubblewrap (apt-get install bubblewrap) \
                     or run strata as a service user"
                        .into(),
                );
            }
        }
        Some(exe) => warns.push(format!(
            "browser: browser.executable {} is not a file; browse_url and browser will fail",
            exe.display()
        )),
        None => lines.push(
            "info browser: no Chromium on PATH; browse_url and browser will say so \
             (Debian: apt-get install chromium)"
                .into(),
        ),
    }
    if provider_hint(c).is_some() {
        warns.push("no LLM provider configured: tools work, agents cannot answer yet (see README, \"Providers\")".into());
    }
    for w in warns {
        lines.push(format!("warn {w}"));
    }
    for f in fails {
        lines.push(format!("FAIL {f}"));
    }
    // Each line above was made with its level's five-character prefix.
    lines
        .into_iter()
        .map(|line| {
            let (level, message) = line.split_at_checked(5).unwrap_or(("info", &line));
            let level = match level.trim_end() {
                "ok" => "ok",
                "warn" => "warn",
                "FAIL" => "FAIL",
                _ => "info",
            };
            Finding {
                level,
                message: message.to_owned(),
            }
        })
        .collect()
}

/// `strata doctor` as a tool an agent can run: the same checks, on the files as they are now,
/// loaded as this process loaded them.
#[strata_engine::tool(
    name = "doctor",
    capabilities = [read, network],
    side_effects = none,
    timeout_secs = 120
)]
async fn doctor_tool(
    ctx: &strata_engine::ToolContext,
    /// Also ask each agent's provider and each Discord account whether their credentials
    /// work (network calls; default false).
    online: Option<bool>,
) -> Result<serde_json::Value, strata_engine::ToolError> {
    // Tools from people and agents alike: who may see the deployment's insides.
    strata_tools::runtime::require_overseer(ctx, "`doctor`")?;
    let online = online.unwrap_or(false);
    // The checks block (files, the vault's key derivation) and run their own runtime for
    // storage and --online: off the async workers.
    let findings = tokio::task::spawn_blocking(move || {
        let l = super::context::reload().ok_or_else(|| {
            "doctor runs inside the strata binary: this process did not load its \
             configuration through the launcher"
                .to_owned()
        })?;
        let l = l.map_err(|e| format!("the configuration does not load: {e:#}"))?;
        Ok::<_, String>(findings(&l, online))
    })
    .await
    .map_err(|e| strata_engine::ToolError::failed(format!("doctor stopped: {e}")))?
    .map_err(strata_engine::ToolError::failed)?;
    let count = |level: &str| findings.iter().filter(|f| f.level == level).count();
    Ok(serde_json::json!({
        "ok": count("FAIL") == 0,
        "failures": count("FAIL"),
        "warnings": count("warn"),
        "findings": findings,
    }))
}

/// PostgreSQL, when configured: reachable, migrated, at a version this binary knows.
fn storage(
    c: &strata_engine::config::LoadedConfig,
    vault: Option<&dyn strata_engine::secret::Vault>,
    lines: &mut Vec<String>,
    fails: &mut Vec<String>,
) {
    use strata_engine::config::{MemoryBackendKind, StorageBackend};
    let store_pg = c.config.storage.backend == StorageBackend::Postgres;
    let memory_pg = c.config.memory.backend == MemoryBackendKind::Postgres;
    if !store_pg && !memory_pg {
        lines.push(format!(
            "ok   storage: sqlite ({})",
            c.data_dir.join(&c.config.sessions.database).display()
        ));
        return;
    }
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fails.push(format!("storage: {e}")),
    };
    rt.block_on(async {
        let shared = if store_pg {
            match crate::storage::open_store(c, vault).await {
                Ok((store, shared)) => {
                    match store.status().await {
                        Ok(st) => lines.push(format!(
                            "ok   storage: postgres at {}, schema version {} (this binary: {})",
                            st.location, st.schema_version, st.known_version
                        )),
                        Err(e) => fails.push(format!("storage: {e}")),
                    }
                    shared
                }
                Err(e) => {
                    fails.push(format!("storage: {e:#}"));
                    return;
                }
            }
        } else {
            None
        };
        if memory_pg {
            match crate::storage::open_memory(c, vault, &shared).await {
                Ok(Some(strata_memory::Backend::Kept(m))) => {
                    lines.push(format!("ok   memory: postgres at {}", m.location()))
                }
                Ok(_) => {}
                Err(e) => fails.push(format!("memory: {e:#}")),
            }
        }
    });
}

pub(crate) fn check_writable(dir: &std::path::Path) -> std::io::Result<()> {
    crate::wiring::ensure_data_dir(dir)?;
    let probe = dir.join(format!(".strata-doctor-{}", std::process::id()));
    std::fs::write(&probe, b"probe")?;
    std::fs::remove_file(&probe)
}

/// Budgets that do not load (failures), and dollar budgets over models without a price,
/// which only `daily_tokens` can stop (warnings).
fn budget_problems(
    c: &strata_engine::config::LoadedConfig,
    warns: &mut Vec<String>,
    lines: &mut Vec<String>,
) -> Vec<String> {
    use strata_runtime::usage::{InMemoryUsage, Pricing};
    let pricing = Pricing::from_config(&c.config);
    let budgets = match strata_runtime::budget::Budgets::from_config(
        &c.config,
        pricing.clone(),
        std::sync::Arc::new(InMemoryUsage::default()),
    ) {
        Ok(Some(b)) => b,
        Ok(None) => return Vec::new(),
        Err(e) => return vec![format!("budgets: {e}")],
    };
    for (id, a) in &c.config.agents {
        let dollars = a
            .budget
            .or(c.config.defaults.budget)
            .is_some_and(|b| b.daily_usd.is_some() || b.monthly_usd.is_some());
        let Some((llm, _)) = crate::wiring::agent_llm(c, id, a) else {
            continue;
        };
        let model = strata_llm::model_name(&llm).unwrap_or_default();
        if dollars
            && llm.provider != "claude-code"
            && pricing.price(&llm.provider, &model).is_none()
        {
            warns.push(format!(
                "agent `{id}` has a dollar budget but `{}/{model}` has no price: set \
                 `pricing.{}.{model}` (only `daily_tokens` can stop it now)",
                llm.provider, llm.provider
            ));
        }
    }
    let n = budgets
        .snapshot()
        .iter()
        .map(|(k, ..)| k.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    lines.push(match (n, c.config.defaults.budget.is_some()) {
        (0, _) => "ok   a budget (`defaults.budget`) for every agent".to_owned(),
        (n, true) => format!("ok   {n} budgets, and `defaults.budget` for every other agent"),
        (n, false) => format!("ok   {n} budgets"),
    });
    Vec::new()
}
