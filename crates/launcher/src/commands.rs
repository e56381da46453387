//! The subcommands.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use serde_json::{Value, json};
use strata_engine::audit::JsonlAudit;
use strata_engine::config::{LoadOptions, LoadedConfig};
use strata_engine::{Invocation, Principal, Registry, RuntimeEnv, Status};

use crate::cli::{
    ApprovalsCommand, AuditCommand, Cli, Command, ConfigCommand, GlobalArgs, McpCommand,
    SafetyCommand, SkillCommand, VaultCommand,
};
use crate::{Exit, Launcher};

/// Everything a command needs once config and registry are loaded.
pub(crate) struct Loaded {
    pub(crate) config: LoadedConfig,
    pub(crate) registry: Arc<Registry>,
    /// The skills; command skills are in `registry` as `skill__<name>` tools.
    pub(crate) skills: Arc<strata_engine::skills::SkillSet>,
}

/// The Invoker of a CLI command (`invoke`, `skill run`, `mcp serve --stdio`): the audit log,
/// the store's rate-limit counters and approval requests, and approval requests shown on
/// stderr. [`CliInvoker::finish`] saves what is queued.
pub(crate) struct CliInvoker {
    pub(crate) invoker: Arc<strata_engine::Invoker>,
    store: Arc<strata_store::SqliteStore>,
    audit: Arc<JsonlAudit>,
}

impl CliInvoker {
    pub(crate) fn open(l: &Loaded, rt: &tokio::runtime::Runtime) -> anyhow::Result<Self> {
        let audit = Arc::new(open_audit(l)?);
        let store = open_store(l)?;
        let env = rt.block_on(async { make_env(l) })?;
        let (invoker, approvals) = rt.block_on(async {
            crate::runtime::invoker(env, l.registry.clone(), audit.clone(), store.clone())
        });
        approvals.add_channel(Arc::new(crate::runtime::StderrApprovals));
        Ok(CliInvoker {
            invoker,
            store,
            audit,
        })
    }

    /// Waits for queued writes and closes the audit log.
    pub(crate) fn finish(self, rt: &tokio::runtime::Runtime) {
        if let Err(e) = rt.block_on(self.store.flush()) {
            tracing::warn!(error = %e, "rate-limit counters not saved");
        }
        drop(self.invoker);
        self.audit.close();
    }
}

fn init_logging(default_level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(default_level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

fn load(launcher: &Launcher, g: &GlobalArgs) -> anyhow::Result<Loaded> {
    let overlay_dir = g
        .overlay
        .clone()
        .or_else(|| launcher.overlay_default().cloned())
        .map_or_else(std::env::current_dir, Ok)
        .context("cannot determine the overlay directory")?;
    let modules = Registry::module_sources(launcher.modules())?;
    let config = LoadedConfig::load(&LoadOptions {
        overlay_dir,
        profile: g.profile.clone(),
        modules,
        use_env: true,
        data_dir: g.data_dir.clone(),
        overrides: g.overrides.clone(),
    })?;
    let registry = Arc::new(Registry::from_inventory(launcher.modules())?);
    let skills = Arc::new(strata_engine::skills::SkillSet::load(config.skill_dirs()));
    strata_tools::skill_tools::sync(&registry, &skills);
    Ok(Loaded {
        config,
        registry,
        skills,
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn fail(err: &anyhow::Error) -> Exit {
    eprintln!("error: {err:#}");
    Exit::Failure
}

/// `--args` as a JSON object, or the usage error to print.
fn parse_args_json(raw: &str) -> Result<Value, String> {
    match serde_json::from_str(raw) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!(
            "--args must be a JSON object like '{{\"path\": \"x\"}}', got {}",
            match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "null",
            }
        )),
        Err(e) => Err(format!("--args is not valid JSON: {e}")),
    }
}

/// Commands aimed at a running server (`--remote`) need no local overlay.
fn dispatch_remote(cli: &Cli) -> Option<Exit> {
    let pick = |r: &crate::cli::RemoteArgs| match (&r.remote, &r.token) {
        (Some(u), Some(t)) => Some((u.clone(), t.clone())),
        _ => None,
    };
    match &cli.command {
        Command::Tools { json, remote } => {
            pick(remote).map(|(u, t)| crate::remote::tools(&u, &t, *json))
        }
        Command::Inspect { tool, remote, .. } => {
            pick(remote).map(|(u, t)| crate::remote::inspect(&u, &t, tool))
        }
        Command::Events {
            limit,
            follow,
            remote,
        } => pick(remote).map(|(u, t)| crate::remote::events(&u, &t, *limit, *follow)),
        Command::Invoke {
            tool,
            args,
            request_id,
            json,
            remote,
        } => pick(remote).map(|(u, t)| match parse_args_json(args) {
            Ok(a) => crate::remote::invoke(&u, &t, tool, a, request_id.clone(), *json),
            Err(e) => {
                eprintln!("error: {e}");
                Exit::Usage
            }
        }),
        Command::Approvals { command } => {
            let r = match command {
                ApprovalsCommand::List { remote, .. }
                | ApprovalsCommand::Approve { remote, .. }
                | ApprovalsCommand::Deny { remote, .. } => remote,
            };
            pick(r).map(|(u, t)| crate::remote::approvals(&u, &t, command))
        }
        _ => None,
    }
}

pub(crate) fn dispatch(launcher: &Launcher, cli: Cli) -> Exit {
    if let Some(exit) = dispatch_remote(&cli) {
        return exit;
    }
    let quiet = !matches!(cli.command, Command::Serve);
    // CLI commands keep stdout for their output and stderr for warnings only.
    if quiet {
        init_logging("warn", false);
    }
    let loaded = match load(launcher, &cli.global) {
        Ok(l) => l,
        Err(e) => {
            if matches!(cli.command, Command::Doctor { .. }) {
                println!("FAIL config: {e:#}");
                return Exit::Failure;
            }
            return fail(&e);
        }
    };
    match cli.command {
        Command::Serve => serve(loaded).unwrap_or_else(|e| fail(&e)),
        Command::Tools { json, .. } => tools(&loaded, json),
        Command::Inspect { tool, json, .. } => inspect(&loaded, &tool, json),
        Command::Events { limit, follow, .. } => events(&loaded, limit, follow),
        Command::Invoke {
            tool,
            args,
            request_id,
            json,
            ..
        } => invoke(loaded, &tool, &args, request_id, json),
        Command::Config {
            command: ConfigCommand::Show { origin, json },
        } => config_show(&loaded, origin, json),
        Command::Doctor { online } => doctor(&loaded, online),
        Command::Vault { command } => vault(&loaded, command),
        Command::Chat {
            agent,
            session,
            message,
        } => chat(&loaded, agent, &session, message),
        Command::Skill { command } => skill(&loaded, command),
        Command::Audit {
            command: AuditCommand::Verify { file },
        } => audit_verify(&loaded, file),
        Command::Mcp {
            command: McpCommand::Serve { stdio },
        } => mcp_stdio(&loaded, stdio),
        Command::Approvals { command } => crate::security_cmd::approvals(Some(&loaded), command),
        Command::Memory { command } => crate::memory_cmd::run(&loaded, command),
        Command::Safety {
            command: SafetyCommand::Scan { input, json, jsonl },
        } => crate::security_cmd::safety_scan(&loaded, &input, json, jsonl),
        Command::Repl { agent, session } => {
            crate::repl::run(&loaded.config, loaded.registry.clone(), agent, &session)
        }
    }
}

fn audit_verify(l: &Loaded, file: Option<PathBuf>) -> Exit {
    let path = file.unwrap_or_else(|| audit_path(l));
    match strata_engine::audit::verify_all(&path) {
        Ok(Ok(r)) => {
            let note = if r.starts_mid_chain {
                " (the oldest kept file continues a chain whose start was rotated away)"
            } else {
                ""
            };
            out(&format!(
                "ok: {} records in {} file(s) ending at {}, chain intact{note}",
                r.records,
                r.files.len(),
                path.display()
            ))
        }
        Ok(Err((f, b))) => {
            println!("broken at line {} of {}: {}", b.line, f.display(), b.reason);
            Exit::Failure
        }
        Err(e) => fail(&anyhow::anyhow!("cannot read {}: {e}", path.display())),
    }
}

fn mcp_stdio(l: &Loaded, stdio: bool) -> Exit {
    if !stdio {
        eprintln!(
            "error: `strata mcp serve` needs --stdio; over HTTP, `strata serve` answers at /mcp"
        );
        return Exit::Usage;
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    // stderr is free in stdio mode (stdout carries MCP): approval requests are shown there.
    let cli = match CliInvoker::open(l, &rt) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let r = rt.block_on(strata_http::mcp::serve_stdio(cli.invoker.clone()));
    cli.finish(&rt);
    match r {
        Ok(()) => Exit::Ok,
        Err(e) => {
            eprintln!("error: {e}");
            Exit::Failure
        }
    }
}

fn skill(l: &Loaded, command: SkillCommand) -> Exit {
    let skills = &l.skills;
    match command {
        SkillCommand::List { json } => out(&crate::skills_cmd::list(skills, json)),
        SkillCommand::Run {
            name,
            params,
            agent,
        } => {
            let Some(s) = skills.get(&name) else {
                let names: Vec<String> = skills.snapshot().keys().cloned().collect();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let hint = strata_engine::config::suggest(&name, &refs)
                    .map(|s| format!("; did you mean `{s}`?"))
                    .unwrap_or_default();
                eprintln!("error: unknown skill `{name}`{hint} (see `strata skill list`)");
                return Exit::Usage;
            };
            let params = match crate::skills_cmd::parse_params(&params) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Exit::Usage;
                }
            };
            if let Err(e) = s.bind(&params) {
                eprintln!("error: {e}");
                return Exit::Usage;
            }
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(e) => return fail(&e),
            };
            let agent_id = agent.map_or_else(|| crate::runtime::default_agent(&l.config), Ok);
            let cli = match CliInvoker::open(l, &rt) {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            let r = rt.block_on(crate::skills_cmd::run(
                &l.config, &cli, &s, &params, agent_id,
            ));
            cli.finish(&rt);
            match r {
                Ok(text) => out(&text),
                Err(e) => {
                    eprintln!("error: skill `{name}`: {e}");
                    Exit::Failure
                }
            }
        }
    }
}

fn chat(l: &Loaded, agent: Option<String>, session: &str, message: String) -> Exit {
    let agent_id = match agent.map_or_else(|| crate::runtime::default_agent(&l.config), Ok) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    if !l.config.config.agents.contains_key(&agent_id) {
        let ids: Vec<&str> = l.config.config.agents.keys().map(String::as_str).collect();
        eprintln!(
            "error: unknown agent `{agent_id}`; agents: {}",
            if ids.is_empty() {
                "none".to_owned()
            } else {
                ids.join(", ")
            }
        );
        return Exit::Usage;
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let result = rt.block_on(async {
        let runtime = crate::runtime::build(&l.config, l.registry.clone(), None)?;
        runtime
            .approvals
            .add_channel(Arc::new(crate::runtime::StderrApprovals));
        if let Some((_, why)) = runtime.skipped.iter().find(|(id, _)| *id == agent_id) {
            anyhow::bail!("agent `{agent_id}` cannot start: {why}");
        }
        let reply = runtime
            .manager
            .turn(strata_engine::runtime::TurnRequest {
                agent_id: agent_id.clone(),
                session_id: session.to_owned(),
                channel_id: "cli".into(),
                sender: Principal::Operator,
                message: strata_engine::agent::Message::text(message),
                depth: 0,
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e}"));
        runtime.audit.close();
        reply
    });
    match result {
        Ok(reply) if reply.silent => {
            eprintln!("({agent_id} chose not to reply)");
            Exit::Ok
        }
        Ok(reply) => out(&reply.text),
        Err(e) => fail(&e),
    }
}

fn out(text: &str) -> Exit {
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Exit::Ok,
        // A closed pipe (`strata tools | head`) is not worth a panic.
        Err(_) => Exit::Failure,
    }
}

fn tools(l: &Loaded, json: bool) -> Exit {
    let list = l.registry.list();
    if json {
        let tools: Vec<_> = list.iter().map(|t| t.listing()).collect();
        return out(&serde_json::to_string_pretty(&json!({ "tools": tools })).unwrap_or_default());
    }
    let width = list.iter().map(|t| t.spec().name.len()).max().unwrap_or(4);
    let lwidth = list
        .iter()
        .map(|t| t.layer.to_string().len())
        .max()
        .unwrap_or(5);
    let mut text = String::new();
    for t in &list {
        let first = summary(&t.spec().description);
        text.push_str(&format!(
            "{:width$}  {:lwidth$}  {first}\n",
            t.spec().name,
            t.layer.to_string()
        ));
    }
    for s in l.registry.shadowed() {
        text.push_str(&format!(
            "\n`{}`: {} shadows {}",
            s.name, s.winner, s.hidden
        ));
    }
    out(text.trim_end())
}

/// The first sentence of a description, for one-line listings.
fn summary(description: &str) -> &str {
    let para = description.split("\n\n").next().unwrap_or("");
    match para.find(". ") {
        Some(i) => &para[..=i],
        None => para,
    }
}

fn inspect(l: &Loaded, name: &str, json: bool) -> Exit {
    let Some(t) = l.registry.get(name) else {
        let names: Vec<String> = l
            .registry
            .list()
            .iter()
            .map(|t| t.spec().name.clone())
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let hint = strata_engine::config::suggest(name, &refs)
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_default();
        eprintln!("error: unknown tool `{name}`{hint} (see `strata tools`)");
        return Exit::Usage;
    };
    if json {
        return out(&serde_json::to_string_pretty(&t.listing()).unwrap_or_default());
    }
    let s = t.spec();
    let caps: Vec<String> = s
        .capabilities
        .iter()
        .map(|c| {
            serde_json::to_value(c)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        })
        .collect();
    let text = format!(
        "{}  ({} from {})\n\n{}\n\ncapabilities: {}\nside effects: {}\nhitl: {}\nweb-facing: {}\ntimeout: {}\n\ninput schema:\n{}",
        s.name,
        t.layer,
        t.origin,
        s.description,
        if caps.is_empty() {
            "none".to_owned()
        } else {
            caps.join(", ")
        },
        serde_json::to_value(s.side_effects)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        s.hitl,
        s.web_facing,
        s.timeout.map_or_else(
            || "default (tools.timeout_secs)".to_owned(),
            |d| format!("{}s", d.as_secs())
        ),
        serde_json::to_string_pretty(&s.input_schema).unwrap_or_default()
    );
    out(&text)
}

/// The data dir's SQLite store (sessions, rate-limit counters, approvals).
pub(crate) fn open_store(l: &Loaded) -> anyhow::Result<Arc<strata_store::SqliteStore>> {
    Ok(Arc::new(strata_store::SqliteStore::open(
        &l.config.data_dir.join(&l.config.config.sessions.database),
    )?))
}

fn make_env(l: &Loaded) -> anyhow::Result<Arc<RuntimeEnv>> {
    crate::runtime::env(&l.config).map(|(e, _)| e)
}

fn open_audit(l: &Loaded) -> Result<JsonlAudit, strata_engine::audit::AuditError> {
    JsonlAudit::open_rotating(&audit_path(l), (&l.config.config.security.audit).into())
}

fn audit_path(l: &Loaded) -> PathBuf {
    l.config.data_dir.join(&l.config.config.tools.audit_log)
}

fn invoke(l: Loaded, tool: &str, raw_args: &str, request_id: Option<String>, json: bool) -> Exit {
    let args = match parse_args_json(raw_args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let cli = match CliInvoker::open(&l, &rt) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let mut call = Invocation::new(tool, args, Principal::Operator);
    call.request_id = request_id;
    let result = rt.block_on(cli.invoker.invoke(call));
    cli.finish(&rt);
    let code = if result.ok() { Exit::Ok } else { Exit::Failure };
    if json {
        let printed = out(&serde_json::to_string_pretty(&result).unwrap_or_default());
        return if printed == Exit::Ok { code } else { printed };
    }
    if result.ok() {
        let text = match &result.value {
            Value::String(s) => s.clone(),
            v => serde_json::to_string_pretty(v).unwrap_or_default(),
        };
        out(&text)
    } else {
        eprintln!(
            "error: {} ({}): {}",
            result.status.as_str(),
            result.tool,
            result.error.as_deref().unwrap_or("no message")
        );
        if result.status == Status::UnknownTool {
            eprintln!("hint: `strata tools` lists the tools of this binary");
        }
        code
    }
}

fn events(l: &Loaded, limit: usize, follow: bool) -> Exit {
    if !(1..=1000).contains(&limit) {
        eprintln!("error: --limit must be from 1 to 1000");
        return Exit::Usage;
    }
    let path = audit_path(l);
    let records = match strata_engine::audit::tail(&path, limit) {
        Ok(r) => r,
        Err(e) => return fail(&anyhow::anyhow!("cannot read {}: {e}", path.display())),
    };
    for r in &records {
        println!("{r}");
    }
    if !follow {
        return Exit::Ok;
    }
    // Follow: print lines appended after what was shown (rotation-safe: restart on shrink).
    let mut pos = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len < pos {
            pos = 0;
        }
        if len > pos {
            use std::io::{Read, Seek, SeekFrom};
            if let Ok(mut f) = std::fs::File::open(&path) {
                let mut buf = String::new();
                if f.seek(SeekFrom::Start(pos)).is_ok() && f.read_to_string(&mut buf).is_ok() {
                    // Print whole lines only; a partial last line waits for the next round.
                    let complete = buf.rfind('\n').map_or(0, |i| i + 1);
                    let mut out = std::io::stdout().lock();
                    if write!(out, "{}", &buf[..complete])
                        .and_then(|()| out.flush())
                        .is_err()
                    {
                        return Exit::Ok; // the reader went away
                    }
                    pos += complete as u64;
                }
            }
        }
    }
}

fn config_show(l: &Loaded, origin: bool, json: bool) -> Exit {
    if origin {
        let rows = l.config.origins();
        if json {
            let v: BTreeMap<String, Value> = rows
                .into_iter()
                .map(|(k, v, o)| (k, json!({"value": v, "origin": o})))
                .collect();
            return out(&serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        let width = rows
            .iter()
            .map(|(k, v, _)| k.len() + v.to_string().len())
            .max()
            .unwrap_or(10);
        let text: Vec<String> = rows
            .iter()
            .map(|(k, v, o)| {
                let kv = format!("{k} = {v}");
                format!("{kv:width$}   # {o}", width = width + 3)
            })
            .collect();
        return out(&text.join("\n"));
    }
    let masked = l.config.masked();
    if json {
        return out(&serde_json::to_string_pretty(&masked).unwrap_or_default());
    }
    out(serde_yaml::to_string(&masked)
        .unwrap_or_default()
        .trim_end())
}

fn doctor(l: &Loaded, online: bool) -> Exit {
    let mut fatal = false;
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
        match crate::runtime::open_vault(&config_dir) {
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
    if online {
        match runtime() {
            Ok(rt) => rt.block_on(crate::preflight::online(c, vault_dyn, &mut pf)),
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
    if provider_hint(c).is_some() {
        warns.push("no LLM provider configured: tools work, agents cannot answer yet (see README, \"Providers\")".into());
    }
    for w in warns {
        lines.push(format!("warn {w}"));
    }
    for f in fails {
        fatal = true;
        lines.push(format!("FAIL {f}"));
    }
    let code = out(&lines.join("\n"));
    if fatal { Exit::Failure } else { code }
}

fn check_writable(dir: &std::path::Path) -> std::io::Result<()> {
    crate::runtime::ensure_data_dir(dir)?;
    let probe = dir.join(format!(".strata-doctor-{}", std::process::id()));
    std::fs::write(&probe, b"probe")?;
    std::fs::remove_file(&probe)
}

fn layer_summary(reg: &Registry) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in reg.list() {
        *counts.entry(t.layer.to_string()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `Some(hint)` when no agent can reach a model.
fn provider_hint(c: &LoadedConfig) -> Option<&'static str> {
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
fn instance_lock(
    data_dir: &std::path::Path,
    profile: Option<&str>,
) -> anyhow::Result<std::fs::File> {
    use std::io::Write as _;
    crate::runtime::ensure_data_dir(data_dir)?;
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

fn serve(l: Loaded) -> anyhow::Result<Exit> {
    let level = l.config.config.log.level.clone();
    let json = l.config.config.log.format == strata_engine::config::LogFormat::Json;
    init_logging(&level, json);
    let rt = runtime()?;
    let c = &l.config;
    tracing::info!(
        overlay = %c.overlay_dir.display(),
        profile = c.profile.as_deref().unwrap_or("-"),
        data_dir = %c.data_dir.display(),
        "config loaded"
    );
    // One instance per profile: a second `serve` of the same profile on the same data dir
    // stops here (the lock is released by the kernel when this process ends, however).
    let _instance = instance_lock(&c.data_dir, c.profile.as_deref())?;
    crate::runtime::PASSPHRASE_FROM_STDIN.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in l.registry.shadowed() {
        tracing::info!(tool = %s.name, winner = %s.winner, hidden = %s.hidden, "tool shadowed");
    }
    let listener = rt.block_on(crate::http::bind(c))?;
    let local = listener.local_addr()?;
    let mcp_host = if local.ip().is_unspecified() {
        "127.0.0.1".to_owned()
    } else {
        local.ip().to_string()
    };
    let mcp_url = format!("http://{mcp_host}:{}/mcp", local.port());
    let runtime =
        rt.block_on(async { crate::runtime::build(c, l.registry.clone(), Some(&mcp_url)) })?;
    crate::runtime::warn_missing_vault_refs(c, runtime.invoker.env().vault.as_deref());
    tracing::info!(
        tools = l.registry.len(),
        layers = %layer_summary(&l.registry),
        modules = %l.registry.modules().join(","),
        audit = %runtime.audit.path().display(),
        sessions = %runtime.store.path().display(),
        "registry loaded"
    );
    tracing::info!(agents = %runtime.manager.agent_ids().join(","), "agents ready");
    // Requests left pending by a previous run whose time is up: their callers are gone.
    match rt.block_on(runtime.approvals.sweep()) {
        Ok(0) => {}
        Ok(n) => tracing::info!(requests = n, "stale approval requests marked timeout"),
        Err(e) => tracing::warn!(error = %e, "approval requests not swept"),
    }
    for (id, why) in &runtime.skipped {
        tracing::warn!(agent = %id, "agent not started: {why}");
    }
    if let Some(hint) = provider_hint(c) {
        tracing::warn!("{hint}");
    }
    let skills = l.skills.clone();
    tracing::info!(skills = skills.snapshot().len(), "skills loaded");
    let _watcher = crate::skills_cmd::watch(skills.clone(), l.registry.clone());
    // Signal handlers before the first child process starts (and after the vault, whose
    // terminal prompt Ctrl-C must still interrupt): a SIGTERM from here on is kept and handled
    // by the orderly shutdown below, which also stops the MCP servers.
    let signal = {
        let _rt = rt.enter();
        shutdown_signal()
    };
    let mcp_clients = rt.block_on(strata_http::mcp_client::start(
        &c.config.mcp.servers,
        l.registry.clone(),
        runtime.invoker.env().vault.clone(),
    ));
    if !c.config.mcp.servers.is_empty() {
        tracing::info!(
            servers = c.config.mcp.servers.len(),
            tools = l.registry.len(),
            "MCP servers started"
        );
    }
    let http_state = crate::http::state(c, &runtime, &local)?;
    tracing::info!(address = %local, "control API on http://{local}/api, MCP on http://{local}/mcp");
    let manager = runtime.manager.clone();
    let decay_hours = c.config.memory.decay.interval_hours;
    let memory_sqlite = match &runtime.memory {
        Some(strata_memory::Backend::Sqlite(m)) if decay_hours > 0 => Some(m.clone()),
        _ => None,
    };
    let env = runtime.invoker.env().clone();
    let directory: std::sync::Arc<dyn strata_engine::runtime::AgentDirectory> =
        runtime.manager.clone();
    let discord_cfg = c.config.clone();
    let approvals = runtime.approvals.clone();
    let discord_skills = skills.clone();
    let skill_invoker = runtime.invoker.clone();
    rt.block_on(async move {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        // Discord accounts (none unless `connectors.discord.accounts` lists some).
        let discord = strata_discord::start(
            &discord_cfg,
            &env.overlay_dir,
            &env.data_dir,
            env.vault.as_deref(),
            strata_discord::Services {
                directory,
                hub: env.connectors().clone(),
                approvals: Some(approvals),
                skills: Some(discord_skills),
                activity: Some(env.activity().clone()),
                invoker: Some(skill_invoker),
            },
            stop_rx.clone(),
        );
        if !discord.is_empty() {
            tracing::info!(accounts = discord.len(), "Discord connector started");
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
        // Memory decay runs every `memory.decay.interval_hours`.
        let decayer = memory_sqlite.map(|mem| {
            let hours = decay_hours;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(hours * 3600));
                tick.tick().await;
                loop {
                    tick.tick().await;
                    match mem.decay(false).await {
                        Ok(r) => tracing::info!(
                            decayed = r.decayed,
                            archived = r.archived.len(),
                            purged = r.purged.len(),
                            "memory decay"
                        ),
                        Err(e) => tracing::warn!(error = %e, "memory decay failed"),
                    }
                }
            })
        });
        // Session retention runs hourly.
        let pruner = tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(3600));
            loop {
                tick.tick().await;
                match manager.prune().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(sessions = n, "pruned idle sessions"),
                    Err(e) => tracing::warn!(error = %e, "session pruning failed"),
                }
            }
        });
        tracing::info!("strata is running; stop with Ctrl-C or SIGTERM");
        signal.await;
        tracing::info!("shutting down; finishing in-flight requests");
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
        pruner.abort();
        if let Some(d) = decayer {
            d.abort();
        }
        mcp_clients.shutdown().await;
    });
    if let Err(e) = rt.block_on(runtime.store.flush()) {
        tracing::warn!(error = %e, "last database writes not confirmed");
    }
    runtime.audit.close();
    tracing::info!("stopped");
    Ok(Exit::Ok)
}

/// Installs SIGINT/SIGTERM handlers now and returns a future that resolves on either.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
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

fn vault(l: &Loaded, command: VaultCommand) -> Exit {
    use std::io::{BufRead, IsTerminal};
    use strata_engine::secret::Vault as _;
    use strata_vault::FileVault;
    let dir = l.config.overlay_dir.join("config");
    // The value of `set` comes on stdin, so its passphrase cannot.
    let stdin_free = !matches!(command, VaultCommand::Set { .. });
    let pass = match strata_vault::passphrase(stdin_free) {
        Ok(Some(p)) => p,
        Ok(None) => {
            eprintln!(
                "error: no vault passphrase: set STRATA_VAULT_KEY_FILE (a 0600 file) or STRATA_VAULT_PASSPHRASE{}",
                if stdin_free {
                    ", give it as one line on stdin, or run on a terminal to be asked"
                } else {
                    " (the value comes on stdin)"
                }
            );
            return Exit::Usage;
        }
        Err(e) => return fail(&anyhow::anyhow!(e)),
    };
    if let VaultCommand::Init = command {
        return match FileVault::create(&dir, &pass) {
            Ok(_) => out(&format!("vault created in {}", dir.display())),
            Err(e) => fail(&anyhow::anyhow!(e)),
        };
    }
    let mut v = match FileVault::open(&dir, &pass) {
        Ok(v) => v,
        Err(e) => return fail(&anyhow::anyhow!(e)),
    };
    let result: Result<String, String> = match command {
        VaultCommand::Init => Err("init is handled before the vault opens".into()),
        VaultCommand::Set { key, from_stdin } => {
            let stdin = std::io::stdin();
            if !from_stdin && stdin.is_terminal() {
                Err(
                    "give the value on standard input (`--from-stdin`), never as an argument"
                        .into(),
                )
            } else {
                let mut line = String::new();
                match stdin.lock().read_line(&mut line) {
                    Ok(_) => {
                        let value = line.trim_end_matches(['\n', '\r']).to_owned();
                        if value.is_empty() {
                            Err("empty value".into())
                        } else {
                            v.set(&key, &value)
                                .map(|()| format!("stored `{key}`"))
                                .map_err(|e| e.to_string())
                        }
                    }
                    Err(e) => Err(format!("reading the value: {e}")),
                }
            }
        }
        VaultCommand::Get { key } => v
            .get(&key)
            .map(|s| s.expose().to_owned())
            .ok_or_else(|| format!("no key `{key}` in the vault")),
        VaultCommand::List => Ok(v.keys().join("\n")),
        VaultCommand::Rm { key } => match v.remove(&key) {
            Ok(true) => Ok(format!("removed `{key}`")),
            Ok(false) => Err(format!("no key `{key}` in the vault")),
            Err(e) => Err(e.to_string()),
        },
        VaultCommand::Rekey => {
            let new = std::env::var("STRATA_VAULT_NEW_PASSPHRASE").ok();
            v.rekey(&pass, new.as_deref())
                .map(|()| "vault re-encrypted (new salt, 600000 iterations)".to_owned())
                .map_err(|e| e.to_string())
        }
        VaultCommand::Doctor => {
            let findings = v.doctor();
            let bad = findings.iter().any(|(ok, _)| !ok);
            let text: Vec<String> = findings
                .into_iter()
                .map(|(ok, m)| format!("{} {m}", if ok { "ok  " } else { "warn" }))
                .collect();
            let code = out(&text.join("\n"));
            return if bad { Exit::Failure } else { code };
        }
    };
    match result {
        Ok(text) => out(&text),
        Err(e) => {
            eprintln!("{e}");
            Exit::Failure
        }
    }
}
