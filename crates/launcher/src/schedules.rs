//! What a schedule runs in `serve`: a prompt as a turn of its agent (through the cluster's
//! queue when there is one), its answer posted to `deliver_to` unless it is `NO_REPLY`; a
//! command skill as its tool through the Invoker, a prompt skill as a turn like a prompt; the
//! built-in jobs.

use std::path::PathBuf;
use std::sync::Arc;
use strata_runtime::EnvExt;

use strata_engine::agent::{Message, is_no_reply};
use strata_engine::async_trait;
use strata_engine::connector::ChannelRef;
use strata_engine::turns::{AgentDirectory, TurnRequest};
use strata_runtime::schedule::RunSchedule;
use strata_runtime::schedule::{Action, Schedule};
use strata_runtime::skills::SkillAction;

use crate::wiring::Wired;

/// Runs schedules with what `serve` has wired.
pub struct Runner {
    directory: Arc<dyn AgentDirectory>,
    manager: Arc<strata_runtime::manager::AgentManager>,
    invoker: Arc<strata_runtime::Invoker>,
    memory: Option<strata_memory::Backend>,
    audit_path: PathBuf,
    /// Each service's last state (`health_check` alerts when it changes).
    health: std::sync::Mutex<std::collections::BTreeMap<String, bool>>,
    /// The skills (as the watcher keeps them).
    skills: Arc<strata_runtime::skills::SkillSet>,
    /// What `integrity_check` hashes.
    watch: crate::integrity::Watch,
    /// The differences `integrity_check` last alerted (alerted again only when they change).
    drift: std::sync::Mutex<Option<String>>,
    /// When each `permission_check` finding was last reported (again after the cooldown).
    reported: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// The `vault:` references the config uses, which `vault_check` looks up.
    vault_refs: Vec<crate::wiring::VaultRef>,
}

impl Runner {
    /// Over `wired`, with the deployment's skills and files.
    pub fn new(
        wired: &Wired,
        skills: Arc<strata_runtime::skills::SkillSet>,
        watch: crate::integrity::Watch,
    ) -> Self {
        Runner {
            directory: wired.manager.clone(),
            manager: wired.manager.clone(),
            invoker: wired.invoker.clone(),
            memory: wired.memory.clone(),
            audit_path: wired.audit.path().to_path_buf(),
            health: std::sync::Mutex::default(),
            skills,
            watch,
            drift: std::sync::Mutex::default(),
            reported: std::sync::Mutex::default(),
            vault_refs: wired.vault_refs.clone(),
        }
    }
}

#[async_trait]
impl RunSchedule for Runner {
    async fn run(&self, s: &Schedule, due: i64) -> Result<String, String> {
        match &s.action {
            Action::Prompt { agent, prompt } => {
                let to = s.deliver_to.as_deref().and_then(ChannelRef::parse);
                self.turn(s, due, agent, prompt, to).await
            }
            Action::Heartbeat { agent, prompt_file } => {
                let path = self
                    .invoker
                    .env()
                    .overlay_dir
                    .join("agents")
                    .join(agent)
                    .join(prompt_file);
                let standing = tokio::fs::read_to_string(&path)
                    .await
                    .map_err(|e| format!("no standing instructions at {}: {e}", path.display()))?;
                let prompt = format!(
                    "[HEARTBEAT] Check your standing instructions below. If nothing needs \
                     saying now, answer exactly NO_REPLY.\n\n{standing}"
                );
                // Where to speak: `deliver_to`, else the agent's home channel.
                let to = s
                    .deliver_to
                    .as_deref()
                    .and_then(ChannelRef::parse)
                    .or_else(|| self.invoker.env().connectors().home(agent));
                self.turn(s, due, agent, &prompt, to).await
            }
            Action::Skill {
                name,
                params,
                agent,
            } => {
                let skill = self
                    .skills
                    .get(name)
                    .ok_or_else(|| format!("no skill `{name}` (see `strata skill list`)"))?;
                let values = skill.bind(params).map_err(|e| e.to_string())?;
                match skill.render(&values) {
                    SkillAction::Invalid(why) => Err(why.to_owned()),
                    SkillAction::Prompt(prompt) => {
                        let agent = agent
                            .as_deref()
                            .ok_or_else(|| format!("`{name}` is a prompt skill: set `agent`"))?;
                        let to = s.deliver_to.as_deref().and_then(ChannelRef::parse);
                        let prompt = match self.invoker.env().config.agents.get(agent) {
                            Some(a) => a.compression.apply(prompt.to_owned()),
                            None => prompt.to_owned(),
                        };
                        self.turn(s, due, agent, &prompt, to).await
                    }
                    SkillAction::Command(_) => {
                        let r = self
                            .invoker
                            .invoke(strata_runtime::Invocation::new(
                                strata_runtime::skills::tool_name(name),
                                skill.args_from_strings(params),
                                s.principal.clone(),
                            ))
                            .await;
                        match r.status {
                            strata_runtime::Status::Ok => Ok(match r.value {
                                serde_json::Value::String(t) => t,
                                v => v.to_string(),
                            }),
                            _ => Err(r
                                .error
                                .unwrap_or_else(|| format!("skill `{name}`: {:?}", r.status))),
                        }
                    }
                }
            }
            Action::Job(job) => self.job(job).await,
        }
    }
}

impl Runner {
    /// A turn of `agent` in the schedule's session; its answer posted to `to` unless it is
    /// `NO_REPLY`. The turn's id is the run's (`schedule:<name>:<due>`): journaled before it
    /// does anything, a run cut off by a crash is resumed at the next start (its answer
    /// posted then, `AgentManager::post_resumed_answer`), and the same run taken again once
    /// the dead instance's claim lapses gets the stored answer instead of running twice.
    async fn turn(
        &self,
        s: &Schedule,
        due: i64,
        agent: &str,
        prompt: &str,
        to: Option<ChannelRef>,
    ) -> Result<String, String> {
        let turn_id = format!("schedule:{}:{due}", s.name);
        let reply = self
            .directory
            .run_turn(TurnRequest {
                agent_id: agent.to_owned(),
                session_id: s.session.clone(),
                stream: None,
                scopes: Vec::new(),
                channel_kind: None,
                channel_id: to
                    .as_ref()
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| format!("schedule:{}", s.name)),
                sender: s.principal.clone(),
                message: Message::text(prompt),
                depth: 0,
                taint: None,
                turn_id: Some(turn_id.clone()),
            })
            .await
            .map_err(|e| e.to_string())?;
        if is_no_reply(&reply.text) {
            return Ok("NO_REPLY: nothing to say, nothing posted".into());
        }
        if reply.replayed {
            // Done before: the run that did it (or the resume of it) posted it.
            return Ok(reply.text);
        }
        if let Some(to) = to {
            self.invoker
                .env()
                .connectors()
                .send_keyed(&to, &reply.text, None, Some(&turn_id))
                .await
                .map_err(|e| format!("answered, but not delivered to {to}: {e}"))?;
        }
        Ok(reply.text)
    }

    /// The `goal_nudge` job: each nudge the goal service finds is recorded on the goal
    /// (so it is said once) and then put to the goal's first agent as a turn in the goal's
    /// channel (its session is the channel's), the answer posted there.
    async fn goal_nudge(&self) -> Result<String, String> {
        use strata_runtime::goal::Change;
        let env = self.invoker.env().clone();
        let Some(goals) = env.goals() else {
            return Ok("goals are off in this process".into());
        };
        let all = goals.list().await.map_err(|e| e.to_string())?;
        let nudges = goals.nudges(&all, goals.now());
        let mut failed = Vec::new();
        for n in &nudges {
            let recorded = goals
                .change(
                    &n.goal,
                    "scheduler",
                    Change::Nudged {
                        what: n.what.clone(),
                        item: n.item,
                    },
                )
                .await;
            let goal = match recorded {
                Ok((g, _)) => g,
                Err(e) => {
                    failed.push(format!("{}: {e}", n.goal));
                    continue;
                }
            };
            let Some(agent) = goal.agents().next().map(str::to_owned) else {
                continue;
            };
            let to = goal.channel.as_deref().and_then(ChannelRef::parse);
            let session = to
                .as_ref()
                .map(ChannelRef::session_id)
                .unwrap_or_else(|| format!("goal-{}", goal.id));
            let turn = self
                .directory
                .run_turn(TurnRequest {
                    agent_id: agent.clone(),
                    session_id: session,
                    stream: None,
                    scopes: Vec::new(),
                    channel_kind: None,
                    channel_id: to
                        .as_ref()
                        .map(ChannelRef::to_string)
                        .unwrap_or_else(|| format!("goal:{}", goal.id)),
                    sender: strata_engine::Principal::Operator,
                    message: Message::text(&n.text),
                    depth: 0,
                    taint: None,
                    turn_id: None,
                })
                .await;
            match (turn, &to) {
                (Ok(reply), Some(to)) if !is_no_reply(&reply.text) => {
                    if let Err(e) = env.connectors().send(to, &reply.text, None).await {
                        failed.push(format!("{}: not posted to {to}: {e}", goal.id));
                    }
                }
                (Ok(_), _) => {}
                (Err(e), _) => failed.push(format!("{} ({agent}): {e}", goal.id)),
            }
        }
        if failed.is_empty() {
            Ok(format!("{} nudge(s)", nudges.len()))
        } else {
            Err(format!(
                "{} nudge(s), {} failed: {}",
                nudges.len(),
                failed.len(),
                failed.join("; ")
            ))
        }
    }

    fn alert(&self, kind: &'static str, rule: &str, message: &str) {
        self.invoker.alert(strata_engine::audit::Alert {
            kind,
            rule: rule.into(),
            message: message.into(),
            agent_id: None,
            tool: None,
            request_id: None,
            score: None,
        });
    }

    async fn job(&self, job: &str) -> Result<String, String> {
        match job {
            "memory_decay" => match &self.memory {
                Some(strata_memory::Backend::Kept(m)) => m
                    .decay(false)
                    .await
                    .map(|r| {
                        format!(
                            "{} decayed, {} archived, {} purged",
                            r.decayed,
                            r.archived.len(),
                            r.purged.len()
                        )
                    })
                    .map_err(|e| e.to_string()),
                _ => Ok("no memory Strata keeps itself: nothing to decay".into()),
            },
            "session_retention" => {
                let n = self.manager.prune().await.map_err(|e| e.to_string())?;
                // Finished turns' journals past `journal.retain_days` go with them.
                let j = match self.invoker.env().journal() {
                    Some(j) => j.prune().await.map_err(|e| e.to_string())?,
                    None => 0,
                };
                Ok(format!(
                    "{n} idle sessions pruned, {j} finished turn journals pruned"
                ))
            }
            "audit_verify" => {
                let path = self.audit_path.clone();
                let checked =
                    tokio::task::spawn_blocking(move || strata_store::audit_log::verify_all(&path))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| format!("the audit log cannot be read: {e}"))?;
                match checked {
                    Ok(r) => Ok(format!("audit chain intact ({} records)", r.records)),
                    Err((file, broken)) => {
                        let message = format!(
                            "the audit chain is broken at line {} of {}: {}",
                            broken.line,
                            file.display(),
                            broken.reason
                        );
                        self.alert("audit", "chain_broken", &message);
                        Err(message)
                    }
                }
            }
            "vault_check" => {
                let env = self.invoker.env();
                // The references the config uses (`wiring::vault_refs_in_use`), against the
                // vault as it is now.
                let missing: Vec<String> = self
                    .vault_refs
                    .iter()
                    .filter(|r| env.vault.as_ref().is_none_or(|v| v.get(&r.key).is_none()))
                    .map(|r| format!("`{}` → vault key `{}`", r.path, r.key))
                    .collect();
                if missing.is_empty() {
                    return Ok("every vault reference resolves".into());
                }
                let message = format!(
                    "vault references that do not resolve: {} (`strata vault set <key> --from-stdin`)",
                    missing.join(", ")
                );
                self.alert("vault", "missing_keys", &message);
                Err(message)
            }
            "health_check" => {
                let r = self
                    .invoker
                    .invoke(strata_runtime::Invocation::new(
                        "service_health",
                        serde_json::json!({}),
                        strata_engine::Principal::Operator,
                    ))
                    .await;
                if r.status != strata_runtime::Status::Ok {
                    return Err(r
                        .error
                        .unwrap_or_else(|| format!("service_health: {:?}", r.status)));
                }
                let mut changed = Vec::new();
                let mut down = 0;
                {
                    let mut last = self.health.lock().unwrap_or_else(|p| p.into_inner());
                    for h in r.value.as_array().into_iter().flatten() {
                        let (Some(name), Some(up)) = (h["name"].as_str(), h["up"].as_bool()) else {
                            continue;
                        };
                        down += usize::from(!up);
                        // The first look sets the baseline; a service down then is news too.
                        let before = last.insert(name.to_owned(), up);
                        if before.is_some_and(|b| b != up) || (before.is_none() && !up) {
                            changed.push(format!(
                                "{name} is {} ({})",
                                if up { "up again" } else { "down" },
                                h["detail"].as_str().unwrap_or("")
                            ));
                        }
                    }
                }
                if !changed.is_empty() {
                    self.alert("health", "state_change", &changed.join("; "));
                }
                Ok(format!(
                    "{} services checked, {down} down",
                    r.value.as_array().map_or(0, Vec::len)
                ))
            }
            "integrity_check" => {
                use crate::integrity::Checked;
                let watch = self.watch.clone();
                let checked = tokio::task::spawn_blocking(move || crate::integrity::check(&watch))
                    .await
                    .map_err(|e| e.to_string())??;
                match checked {
                    Checked::Taken(n) => Ok(format!("no baseline yet: one taken of {n} files")),
                    Checked::Same(n) => {
                        *self.drift.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        Ok(format!("{n} files as in the baseline"))
                    }
                    Checked::Drifted(drift, since) => {
                        let what = drift.describe();
                        let message = format!(
                            "files differ from the integrity baseline of {since}: {what} \
                             (if this was intended: `strata integrity accept`)"
                        );
                        let new = {
                            let mut last = self.drift.lock().unwrap_or_else(|p| p.into_inner());
                            let new = last.as_deref() != Some(what.as_str());
                            *last = Some(what);
                            new
                        };
                        if new {
                            self.alert("integrity", "changed", &message);
                        }
                        Err(message)
                    }
                }
            }
            "goal_nudge" => self.goal_nudge().await,
            "permission_check" => {
                let env = self.invoker.env().clone();
                let (overlay, data) = (env.overlay_dir.clone(), env.data_dir.clone());
                let found =
                    tokio::task::spawn_blocking(move || crate::permissions::sweep(&overlay, &data))
                        .await
                        .map_err(|e| e.to_string())?;
                let watch = &env.config.security.permission_watch;
                let cooldown = humantime::parse_duration(&watch.cooldown)
                    .unwrap_or(std::time::Duration::from_secs(6 * 3600));
                let due: Vec<&crate::permissions::Finding> = {
                    let mut last = self.reported.lock().unwrap_or_else(|p| p.into_inner());
                    let now = std::time::Instant::now();
                    found
                        .iter()
                        .filter(|f| {
                            let fresh = last
                                .get(&f.key)
                                .is_none_or(|t| now.duration_since(*t) >= cooldown);
                            if fresh {
                                last.insert(f.key.clone(), now);
                            }
                            fresh
                        })
                        .collect()
                };
                for f in &due {
                    let text = format!("{} — fix: `{}`", f.message, f.fix);
                    let rule = f.key.split(':').next().unwrap_or("permissions").to_owned();
                    self.alert("permissions", &rule, &text);
                    if let Some(agent) = &watch.notify_agent
                        && let Some(home) = env.connectors().home(agent)
                        && let Err(e) = env
                            .connectors()
                            .send(&home, &format!("⚠️ permissions: {text}"), None)
                            .await
                    {
                        tracing::warn!(error = %e, "permission report not posted");
                    }
                }
                if found.is_empty() {
                    Ok("rights as they should be".into())
                } else {
                    Err(format!(
                        "{} problem(s), {} reported now: {}",
                        found.len(),
                        due.len(),
                        found
                            .iter()
                            .map(|f| format!("{} (fix: `{}`)", f.message, f.fix))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ))
                }
            }
            other => Err(format!("no built-in job `{other}`")),
        }
    }
}

/// Problems with the skills `schedules` name, each naming its key: a skill that is not in
/// `skills`, parameters it does not take or lacks, a prompt skill with no agent to ask.
/// (Skills are files, loaded after the configuration, so this is a check of its own.)
pub(crate) fn skill_problems(
    schedules: &[Schedule],
    skills: &strata_runtime::skills::SkillSet,
) -> Vec<String> {
    let snapshot = skills.snapshot();
    let mut problems = Vec::new();
    for s in schedules {
        let Action::Skill {
            name,
            params,
            agent,
        } = &s.action
        else {
            continue;
        };
        let key = |k: &str| format!("`schedules.{}.{k}`", s.name);
        let Some(skill) = snapshot.get(name) else {
            let names: Vec<&str> = snapshot.keys().map(String::as_str).collect();
            let hint = strata_engine::config::suggest(name, &names)
                .map(|n| format!("; did you mean `{n}`?"))
                .unwrap_or_default();
            problems.push(format!("{}: no skill `{name}`{hint}", key("skill")));
            continue;
        };
        if let Err(e) = skill.bind(params) {
            problems.push(format!("{}: {e}", key("params")));
        }
        if skill.def.prompt.is_some() && agent.is_none() {
            problems.push(format!(
                "{}: `{name}` is a prompt skill: which agent runs it?",
                key("agent")
            ));
        }
    }
    problems
}

/// Alerts through the Invoker (the audit log, the log, every alert sink).
pub struct InvokerAlerts(pub Arc<strata_runtime::Invoker>);

impl strata_engine::audit::AlertSink for InvokerAlerts {
    fn alert(&self, alert: &strata_engine::audit::Alert) {
        self.0.alert(alert.clone());
    }
}
