//! Slash commands: `/reset`, `/status`, and one command per skill (hyphenated name,
//! parameters as options with their choices), registered per guild when the bot connects.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use strata_engine::skills::{ParamType, Skill};
use twilight_model::application::command::Command;

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
