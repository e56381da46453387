//! `strata skill list|run`, running a skill (a command skill as its tool through the
//! Invoker, a prompt skill as an agent turn), and the skills watcher.

use crate::wiring::AgentOverrides;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use strata_engine::Principal;
use strata_engine::agent::{Agent, Message, TurnContext};
use strata_runtime::skills::{Skill, SkillAction, SkillSet};
use strata_runtime::{Invocation, Registry};

use super::context::*;
use crate::Exit;
use crate::cli::SkillCommand;

pub(crate) fn skill(l: &Context, command: SkillCommand) -> Exit {
    let skills = &l.skills;
    match command {
        SkillCommand::List { json } => out(&crate::cmd::skill::list(skills, json)),
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
            let params = match crate::cmd::skill::parse_params(&params) {
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
            let rt = match tokio_runtime() {
                Ok(rt) => rt,
                Err(e) => return fail(&e),
            };
            let agent_id = agent.map_or_else(|| crate::wiring::default_agent(&l.config), Ok);
            let cli = match CliInvoker::open(l, &rt) {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            let r = rt.block_on(async {
                // A prompt skill's agent has the tools of `config/mcp.yaml`'s servers too.
                let servers = crate::wiring::McpServers::start(
                    &l.config,
                    l.registry.clone(),
                    cli.invoker.env(),
                )
                .await;
                let r = crate::cmd::skill::run(&l.config, &cli, &s, &params, agent_id).await;
                servers.stop().await;
                r
            });
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
                let mut v = s.summary();
                v["path"] = json!(s.path.display().to_string());
                v["parameters"] = json!(
                    s.def
                        .parameters
                        .iter()
                        .map(|(n, p)| json!({
                            "name": n, "type": p.kind, "description": p.description,
                            "required": p.required, "choices": p.choices,
                        }))
                        .collect::<Vec<_>>()
                );
                v
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

/// Runs a skill; returns the text to print. A command skill is a call of its tool
/// (`skill__<name>`) through the Invoker as the operator: audited, rate-limited, gated unless
/// the skill says `gated: false`, and run in the sandbox. A prompt skill is a turn of an agent
/// built with the skill's overrides, whose tool calls go through the same Invoker.
pub(crate) async fn run(
    cfg: &strata_engine::config::LoadedConfig,
    cli: &crate::cmd::context::CliInvoker,
    skill: &Skill,
    params: &BTreeMap<String, String>,
    agent_id: Result<String, String>,
) -> Result<String, String> {
    let values = skill.bind(params).map_err(|e| e.to_string())?;
    match skill.render(&values) {
        SkillAction::Invalid(why) => Err(why.to_owned()),
        SkillAction::Command(_) => {
            let tool = strata_runtime::skills::tool_name(&skill.name);
            let call = Invocation::new(tool, skill.args_from_strings(params), Principal::Operator);
            let r = cli.invoker.invoke(call).await;
            if r.ok() {
                Ok(match r.value {
                    serde_json::Value::String(s) => s,
                    v => v.to_string(),
                })
            } else {
                Err(format!(
                    "{}: {}",
                    r.status.as_str(),
                    r.error.as_deref().unwrap_or("no message")
                ))
            }
        }
        SkillAction::Prompt(prompt) => {
            let agent_id = agent_id?;
            let a = cfg
                .config
                .agents
                .get(&agent_id)
                .ok_or_else(|| format!("unknown agent `{agent_id}`"))?;
            let env = cli.invoker.env().clone();
            let overrides = AgentOverrides {
                llm: skill.def.llm.clone(),
                tools: skill.def.tools.clone(),
                max_rounds: skill.def.max_rounds,
            };
            let agent = crate::wiring::build_agent(
                cfg,
                &agent_id,
                a,
                &cli.invoker,
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
            agent
                .handle(turn, Message::text(a.compression.apply(prompt.to_owned())))
                .await
                .map(|r| r.text)
                .map_err(|e| e.to_string())
        }
    }
}

/// The skill watcher; watching stops when it is dropped.
pub struct SkillWatch {
    _debouncer: Arc<std::sync::OnceLock<std::sync::Mutex<Watched>>>,
}

/// The debouncer and the directories it watches.
struct Watched {
    debouncer: notify_debouncer_mini::Debouncer<notify::RecommendedWatcher>,
    dirs: std::collections::BTreeSet<std::path::PathBuf>,
}

impl Watched {
    /// Watches each skill directory that exists and, for one that does not yet, its parent
    /// (so a `skills/` created later — by `create_skill` or by hand — is noticed and then
    /// watched itself).
    fn cover(&mut self, skills: &SkillSet) {
        use notify::RecursiveMode;
        for d in skills.dirs() {
            let target = if d.path.is_dir() {
                Some(d.path.clone())
            } else {
                d.path
                    .parent()
                    .filter(|p| p.is_dir())
                    .map(std::path::Path::to_path_buf)
            };
            let Some(t) = target else { continue };
            if self.dirs.contains(&t) {
                continue;
            }
            match self
                .debouncer
                .watcher()
                .watch(&t, RecursiveMode::NonRecursive)
            {
                Ok(()) => {
                    self.dirs.insert(t);
                }
                Err(e) => {
                    tracing::warn!(dir = %t.display(), error = %e, "cannot watch skill directory")
                }
            }
        }
    }
}

/// Watches the skill directories and reloads on change (debounced), keeping the command
/// skills' tools in `registry` in step. The returned guard stops the watcher when dropped.
pub fn watch(skills: Arc<SkillSet>, registry: Arc<Registry>) -> Option<SkillWatch> {
    let cell: Arc<std::sync::OnceLock<std::sync::Mutex<Watched>>> = Arc::default();
    let weak = Arc::downgrade(&cell);
    let s = skills.clone();
    let debouncer = match notify_debouncer_mini::new_debouncer(
        Duration::from_millis(300),
        move |res: notify_debouncer_mini::DebounceEventResult| {
            if res.is_ok() {
                let errors = s.reload();
                strata_tools::skill_tools::sync(&registry, &s);
                tracing::info!(
                    skills = s.snapshot().len(),
                    errors = errors.len(),
                    "skills reloaded"
                );
                // A directory that appeared is watched from now on.
                if let Some(cell) = weak.upgrade()
                    && let Some(w) = cell.get()
                {
                    w.lock().unwrap_or_else(|p| p.into_inner()).cover(&s);
                }
            }
        },
    ) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch skills; they load at start only");
            return None;
        }
    };
    let mut watched = Watched {
        debouncer,
        dirs: std::collections::BTreeSet::new(),
    };
    watched.cover(&skills);
    let _ = cell.set(std::sync::Mutex::new(watched));
    Some(SkillWatch { _debouncer: cell })
}
