//! `strata skill list|run`, the command-skill runner, and the skills watcher.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use strata_engine::agent::{Agent, Message, TurnContext};
use strata_engine::skills::{Skill, SkillAction, SkillSet};
use strata_engine::{Principal, Registry};
use tokio::io::AsyncReadExt;

use crate::runtime::AgentOverrides;

/// Output of a command skill.
#[derive(Debug)]
pub struct CommandOutput {
    /// Exit code (`None` when killed).
    pub code: Option<i32>,
    /// Standard output (capped).
    pub stdout: String,
    /// Standard error (capped).
    pub stderr: String,
    /// Killed at the timeout.
    pub timed_out: bool,
}

const OUTPUT_CAP: usize = 256 * 1024;

/// Runs `sh -c command` in `cwd` with a clean environment, its own process group (killed at
/// the timeout), and capped output.
pub async fn run_command(
    command: &str,
    cwd: &Path,
    timeout: Duration,
) -> std::io::Result<CommandOutput> {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    for k in ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER"] {
        if let Ok(v) = std::env::var(k) {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let read = async {
        let mut o = Vec::new();
        let mut e = Vec::new();
        if let Some(s) = out.as_mut() {
            let _ = s.take(OUTPUT_CAP as u64).read_to_end(&mut o).await;
        }
        if let Some(s) = err.as_mut() {
            let _ = s.take(OUTPUT_CAP as u64).read_to_end(&mut e).await;
        }
        let status = child.wait().await;
        (o, e, status)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok((o, e, status)) => Ok(CommandOutput {
            code: status?.code(),
            stdout: String::from_utf8_lossy(&o).into_owned(),
            stderr: String::from_utf8_lossy(&e).into_owned(),
            timed_out: false,
        }),
        Err(_) => {
            if let Some(p) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
            }
            Ok(CommandOutput {
                code: None,
                stdout: String::new(),
                stderr: format!(
                    "timed out after {}s; the command was killed",
                    timeout.as_secs()
                ),
                timed_out: true,
            })
        }
    }
}

/// Parses `key=value` pairs.
pub fn parse_params(raw: &[String]) -> Result<BTreeMap<String, String>, String> {
    raw.iter()
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| format!("--param `{p}`: expected KEY=VALUE"))
        })
        .collect()
}

/// Lists skills as text or JSON.
pub fn list(skills: &SkillSet, json_out: bool) -> String {
    let snap = skills.snapshot();
    if json_out {
        let v: Vec<_> = snap
            .values()
            .map(|s| {
                json!({
                    "name": s.name,
                    "description": s.def.description,
                    "kind": if s.def.command.is_some() { "command" } else { "prompt" },
                    "origin": s.origin,
                    "path": s.path.display().to_string(),
                    "parameters": s.def.parameters.iter().map(|(n, p)| json!({
                        "name": n, "type": p.kind, "description": p.description,
                        "required": p.required, "choices": p.choices,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        return serde_json::to_string_pretty(&json!({ "skills": v })).unwrap_or_default();
    }
    if snap.is_empty() {
        return "no skills (put YAML files in skills/ or agents/<id>/skills/)".into();
    }
    let w = snap.keys().map(String::len).max().unwrap_or(4);
    snap.values()
        .map(|s| format!("{:w$}  {:10}  {}", s.name, s.origin, s.def.description))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs a skill; returns the text to print.
pub async fn run(
    cfg: &strata_engine::config::LoadedConfig,
    registry: Arc<Registry>,
    skill: &Skill,
    params: &BTreeMap<String, String>,
    agent_id: Result<String, String>,
) -> Result<String, String> {
    let values = skill.bind(params)?;
    match skill.render(&values) {
        SkillAction::Invalid(why) => Err(why.to_owned()),
        SkillAction::Command(command) => {
            let timeout = Duration::from_secs(skill.def.timeout_secs.unwrap_or(60).clamp(1, 3600));
            run_checked(&command, &cfg.overlay_dir, timeout).await
        }
        SkillAction::Prompt(prompt) => {
            let agent_id = agent_id?;
            let a = cfg
                .config
                .agents
                .get(&agent_id)
                .ok_or_else(|| format!("unknown agent `{agent_id}`"))?;
            let (env, _memory) = crate::runtime::env(cfg).map_err(|e| e.to_string())?;
            let audit = Arc::new(
                strata_engine::audit::JsonlAudit::open_rotating(
                    &cfg.data_dir.join(&cfg.config.tools.audit_log),
                    (&cfg.config.security.audit).into(),
                )
                .map_err(|e| e.to_string())?,
            );
            let store = Arc::new(
                strata_store::SqliteStore::open(&cfg.data_dir.join(&cfg.config.sessions.database))
                    .map_err(|e| e.to_string())?,
            );
            let (invoker, approvals) =
                crate::runtime::invoker(env.clone(), registry, audit.clone(), store.clone());
            approvals.add_channel(Arc::new(crate::runtime::StderrApprovals));
            let overrides = AgentOverrides {
                llm: skill.def.llm.clone(),
                tools: skill.def.tools.clone(),
                max_rounds: skill.def.max_rounds,
            };
            let agent = crate::runtime::build_agent(
                cfg,
                &agent_id,
                a,
                &invoker,
                env.vault.as_deref(),
                &overrides,
                None,
            )?;
            let turn = TurnContext::new(
                &agent_id,
                format!("skill:{}", skill.name),
                "cli",
                Principal::Operator,
                env,
            );
            let r = agent
                .handle(turn, Message::text(prompt))
                .await
                .map_err(|e| e.to_string());
            let _ = store.flush().await;
            audit.close();
            r.map(|r| r.text)
        }
    }
}

/// Watches the skill directories and reloads on change (debounced). The returned guard
/// stops the watcher when dropped.
pub fn watch(
    skills: Arc<SkillSet>,
) -> Option<notify_debouncer_mini::Debouncer<notify::RecommendedWatcher>> {
    use notify::RecursiveMode;
    let s = skills.clone();
    let mut debouncer = match notify_debouncer_mini::new_debouncer(
        Duration::from_millis(300),
        move |res: notify_debouncer_mini::DebounceEventResult| {
            if res.is_ok() {
                let errors = s.reload();
                tracing::info!(
                    skills = s.snapshot().len(),
                    errors = errors.len(),
                    "skills reloaded"
                );
            }
        },
    ) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch skills; they load at start only");
            return None;
        }
    };
    for d in skills.dirs() {
        if d.path.is_dir()
            && let Err(e) = debouncer
                .watcher()
                .watch(&d.path, RecursiveMode::NonRecursive)
        {
            tracing::warn!(dir = %d.path.display(), error = %e, "cannot watch skill directory");
        }
    }
    Some(debouncer)
}

/// Command skills for the Discord connector: the same runner as `strata skill run`, in the
/// overlay directory.
pub struct HostCommands(pub std::path::PathBuf);

#[strata_engine::async_trait]
impl strata_discord::CommandRunner for HostCommands {
    async fn run(&self, command: &str, timeout: Duration) -> Result<String, String> {
        run_checked(command, &self.0, timeout).await
    }
}

/// [`run_command`], with a timeout or a non-zero exit turned into an error.
async fn run_checked(command: &str, cwd: &Path, timeout: Duration) -> Result<String, String> {
    let out = run_command(command, cwd, timeout)
        .await
        .map_err(|e| format!("cannot run the command: {e}"))?;
    if out.timed_out {
        return Err(out.stderr);
    }
    if out.code != Some(0) {
        return Err(format!(
            "command exited with {}: {}",
            out.code
                .map_or_else(|| "a signal".to_owned(), |c| c.to_string()),
            out.stderr.trim()
        ));
    }
    Ok(out.stdout.trim_end().to_owned())
}
