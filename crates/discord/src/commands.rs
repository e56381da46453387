//! Slash commands: `/reset`, `/status`, and one command per skill (hyphenated name,
//! parameters as options with their choices), registered per guild when the bot connects.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use strata_engine::Principal;
use strata_engine::agent::{Message, is_no_reply};
use strata_engine::connector::{ChannelRef, InboundMessage};
use strata_engine::turns::{AgentDirectory, TurnRequest};
use strata_runtime::skills::{ParamType, Skill};
use twilight_model::application::command::Command;
use twilight_model::id::Id;

use crate::{DiscordAccount, MAX_MESSAGE, split_message};

/// A skill's command name: lower case, `[a-z0-9_-]`, other characters (`:` of agent skills,
/// spaces) become `-`, at most 32 characters.
pub fn command_name(skill: &str) -> String {
    let s: String = skill
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(32)
        .collect();
    s.trim_matches('-').to_owned()
}

fn cut(s: &str, n: usize) -> String {
    let t: String = s.chars().take(n).collect();
    if t.trim().is_empty() { "—".into() } else { t }
}

/// The commands to register: the two built-ins, then the skills (a skill whose name
/// collides with a built-in or an earlier skill is left out).
pub fn build(skills: &BTreeMap<String, Skill>) -> Vec<Command> {
    let mut out = vec![
        json!({"name": "reset", "description": "Start a fresh conversation with the agents of this channel", "type": 1, "version": "1", "default_member_permissions": null}),
        json!({"name": "status", "description": "Which agents answer in this channel", "type": 1, "version": "1", "default_member_permissions": null}),
    ];
    let mut taken: Vec<String> = vec!["reset".into(), "status".into()];
    for (name, skill) in skills {
        let cmd = command_name(name);
        if cmd.is_empty() || taken.contains(&cmd) {
            tracing::warn!(skill = %name, command = %cmd, "skill left out of the slash commands (name taken or empty)");
            continue;
        }
        taken.push(cmd.clone());
        // Required options first, as Discord demands.
        let mut params = skill.def.parameters.clone();
        params.sort_by_key(|(_, p)| !p.required);
        let options: Vec<Value> = params
            .iter()
            .take(25)
            .map(|(pname, p)| {
                let kind = match p.kind {
                    ParamType::String => 3,
                    ParamType::Integer => 4,
                    ParamType::Boolean => 5,
                    ParamType::Number => 10,
                };
                let mut o = json!({
                    "type": kind,
                    "name": command_name(pname),
                    "description": cut(&p.description, 100),
                    "required": p.required,
                });
                if !p.choices.is_empty() && kind == 3 {
                    o["choices"] = p
                        .choices
                        .iter()
                        .take(25)
                        .map(|c| json!({"name": cut(c, 100), "value": c}))
                        .collect();
                }
                o
            })
            .collect();
        out.push(json!({
            "name": cmd,
            "description": cut(&skill.def.description, 100),
            "type": 1,
            "version": "1",
            "default_member_permissions": null,
            "options": options,
        }));
    }
    out.into_iter()
        .filter_map(|v| match serde_json::from_value::<Command>(v) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, "a slash command could not be built");
                None
            }
        })
        .collect()
}

/// The skill a command name stands for.
pub fn skill_for<'a>(skills: &'a BTreeMap<String, Skill>, command: &str) -> Option<&'a Skill> {
    skills.values().find(|s| command_name(&s.name) == command)
}

// Answering a slash command (an INTERACTION_CREATE of one of the commands above).

/// What runs skills: the skill set, the Invoker for command skills, the runner of prompt
/// skills with their own settings.
pub(crate) type SkillRunners = (
    Option<Arc<strata_runtime::skills::SkillSet>>,
    Option<Arc<strata_runtime::Invoker>>,
    Option<Arc<dyn strata_runtime::skills::SkillTurns>>,
);

/// Answers a slash command: acknowledges it at once (Discord allows 3 s), then edits the
/// answer in when the work is done.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn slash(
    account: Arc<DiscordAccount>,
    policy: Arc<strata_engine::access::AccessPolicy>,
    directory: Arc<dyn AgentDirectory>,
    (skills, runner, skill_turns): SkillRunners,
    agents: Vec<String>,
    msg: InboundMessage,
    (app, id, token): (
        Id<twilight_model::id::marker::ApplicationMarker>,
        Id<twilight_model::id::marker::InteractionMarker>,
        String,
    ),
    data: twilight_model::application::interaction::application_command::CommandData,
) {
    use twilight_model::http::interaction::{InteractionResponse, InteractionResponseType};
    let client = account.http.interaction(app);
    let ack = InteractionResponse {
        kind: InteractionResponseType::DeferredChannelMessageWithSource,
        data: None,
    };
    if let Err(e) = client.create_response(id, &token, &ack).await {
        tracing::warn!(error = %e, "acknowledging a slash command failed");
        return;
    }
    let session = ChannelRef {
        connector: msg.connector.clone(),
        channel_id: msg.channel_id.clone(),
    }
    .session_id();
    let sender = Principal::Person {
        id: format!("discord:{}", msg.sender_id),
    };
    let text = match data.name.as_str() {
        _ if agents.is_empty() => "No agent answers in this channel.".to_owned(),
        "status" => format!(
            "Answering here through {}: {}.",
            account.name,
            agents.join(", ")
        ),
        "reset" => {
            let mut done = Vec::new();
            for a in &agents {
                // Only people who may talk to the agent may reset it.
                if policy.may_talk(&sender, a).is_err() {
                    continue;
                }
                if directory.reset(a, &session).await.is_ok() {
                    done.push(a.clone());
                }
            }
            if done.is_empty() {
                "Nothing was reset.".to_owned()
            } else {
                format!(
                    "Fresh start: {} forgot this channel's conversation.",
                    done.join(", ")
                )
            }
        }
        name => {
            let snapshot = skills.as_ref().map(|s| s.snapshot()).unwrap_or_default();
            match skill_for(&snapshot, name) {
                None => format!("There is no skill `{name}` any more."),
                Some(skill) => {
                    let given: BTreeMap<String, String> = data
                        .options
                        .iter()
                        .filter_map(|o| {
                            let pname = skill
                                .def
                                .parameters
                                .iter()
                                .map(|(n, _)| n)
                                .find(|n| command_name(n) == o.name)?;
                            use twilight_model::application::interaction::application_command::CommandOptionValue as V;
                            let v = match &o.value {
                                V::String(s) => s.clone(),
                                V::Integer(i) => i.to_string(),
                                V::Number(n) => n.to_string(),
                                V::Boolean(b) => b.to_string(),
                                _ => return None,
                            };
                            Some((pname.clone(), v))
                        })
                        .collect();
                    match skill
                        .bind(&given)
                        .map(|v| skill.render(&v).into_owned_action())
                    {
                        Err(e) => e.to_string(),
                        Ok(OwnedAction::Invalid(e)) => e,
                        Ok(OwnedAction::Command) => match &runner {
                            None => format!(
                                "`{}` is a command skill: run it with `strata skill run {}`.",
                                skill.name, skill.name
                            ),
                            // Its tool, as the sender: access control, rate limits, approval
                            // (here in the approval channel), audit and the sandbox apply.
                            Some(invoker) => {
                                let mut call = strata_runtime::Invocation::new(
                                    strata_runtime::skills::tool_name(&skill.name),
                                    skill.args_from_strings(&given),
                                    sender.clone(),
                                );
                                call.session_id = Some(session.clone());
                                call.channel_id = Some(session.clone());
                                let r = invoker.invoke(call).await;
                                match (&r.value, r.ok()) {
                                    (serde_json::Value::String(out), true)
                                        if out.trim().is_empty() =>
                                    {
                                        "Done.".to_owned()
                                    }
                                    (serde_json::Value::String(out), true) => format!(
                                        "```\n{}\n```",
                                        out.chars().take(1900).collect::<String>()
                                    ),
                                    (v, true) => v.to_string(),
                                    (_, false) => format!(
                                        "`{}` {}: {}",
                                        skill.name,
                                        r.status.as_str(),
                                        r.error.as_deref().unwrap_or("no message")
                                    ),
                                }
                            }
                        },
                        Ok(OwnedAction::Prompt(prompt)) => {
                            let req = TurnRequest {
                                agent_id: agents[0].clone(),
                                session_id: session.clone(),
                                stream: None,
                                scopes: Vec::new(),
                                channel_kind: None,
                                channel_id: session.clone(),
                                sender: sender.clone(),
                                message: Message::text(prompt),
                                depth: 0,
                                taint: None,
                                turn_id: None,
                            };
                            let own = skill.def.tools.is_some()
                                || skill.def.max_rounds.is_some()
                                || skill.def.llm.is_some();
                            // A skill with its own tools, rounds or model runs as the skill
                            // says (a one-off turn); else as a turn of the channel's agent.
                            let reply = match (&skill_turns, own) {
                                (Some(st), true) => st.run_prompt_skill(&skill.def, req).await,
                                _ => directory.run_turn(req).await,
                            };
                            match reply {
                                Ok(r) if r.silent || is_no_reply(&r.text) => "Done.".to_owned(),
                                Ok(r) => r.text,
                                Err(e) => format!("The skill could not run: {e}"),
                            }
                        }
                    }
                }
            }
        }
    };
    // The first 2,000 characters answer the command; the rest follow as follow-ups.
    let mut parts = split_message(&text, MAX_MESSAGE).into_iter();
    let first = parts.next().unwrap_or_default();
    if let Err(e) = client.update_response(&token).content(Some(&first)).await {
        tracing::warn!(error = %e, "answering a slash command failed");
        return;
    }
    for part in parts {
        if let Err(e) = client.create_followup(&token).content(&part).await {
            tracing::warn!(error = %e, "a slash command's follow-up failed");
            return;
        }
    }
}

/// A rendered skill, owned.
pub(crate) enum OwnedAction {
    Prompt(String),
    Command,
    Invalid(String),
}

pub(crate) trait IntoOwned {
    fn into_owned_action(self) -> OwnedAction;
}

impl IntoOwned for strata_runtime::skills::SkillAction<'_> {
    fn into_owned_action(self) -> OwnedAction {
        match self {
            strata_runtime::skills::SkillAction::Prompt(p) => OwnedAction::Prompt(p),
            strata_runtime::skills::SkillAction::Command(_) => OwnedAction::Command,
            strata_runtime::skills::SkillAction::Invalid(e) => OwnedAction::Invalid(e.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_hyphenated_and_bounded() {
        assert_eq!(command_name("Disk Usage"), "disk-usage");
        assert_eq!(command_name("ops:restart_service"), "ops-restart_service");
        assert_eq!(command_name(&"x".repeat(40)).len(), 32);
    }
}
