//! A turn's plan: the tools its trusted request calls for, fixed before untrusted content can
//! steer the choice (the control-flow half of taint by data flow; docs/SECURITY.md).
//!
//! The agent loop asks the model for it once, lazily — when a tainted turn is about to make
//! a call the taint gate checks — with nothing in the request but the planning instruction,
//! the tool list and the person's message: no page, no tool result, no recalled memory, no
//! earlier conversation. Tools the turn called while it was still clean are in the plan too.
//! A gated call of a tainted turn outside the plan waits for a person.

use std::collections::BTreeSet;

use serde_json::Value;
use strata_engine::ToolSpec;

/// The first line of the planning request's system prompt (a scripted model can tell the
/// planning call from the turn's own by it).
pub const PLAN_MARKER: &str = "[PLAN]";

/// What the trusted request calls for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intent {
    tools: BTreeSet<String>,
}

impl Intent {
    /// A plan of these tools.
    pub fn of(tools: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Intent {
            tools: tools.into_iter().map(Into::into).collect(),
        }
    }

    /// The request calls for `tool`.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools.contains(tool)
    }

    /// Adds tools (those the turn called while it was clean).
    pub fn extend(&mut self, tools: impl IntoIterator<Item = impl Into<String>>) {
        self.tools.extend(tools.into_iter().map(Into::into));
    }

    /// The planned tools, comma-separated, or `nothing`.
    pub fn describe(&self) -> String {
        if self.tools.is_empty() {
            "nothing".to_owned()
        } else {
            self.tools.iter().cloned().collect::<Vec<_>>().join(", ")
        }
    }

    /// The planning instruction for the tools the agent may call.
    pub fn prompt(tools: &[ToolSpec]) -> String {
        let mut s = format!(
            "{PLAN_MARKER}\nYou plan the tool use of an assistant. From the person's request \
             alone, list every tool the assistant will need to call to do what the person \
             asked. Answer with JSON only: {{\"tools\": [\"name\", …]}}. List no tool the \
             request does not call for.\n\nTools:\n"
        );
        for t in tools {
            let line = t.description.lines().next().unwrap_or("").trim();
            s.push_str(&format!("- {}: {line}\n", t.name));
        }
        s
    }

    /// Reads the model's answer: the first JSON object with a `tools` list (code fences and
    /// words around it allowed); names not among `known` are dropped. `None`: no such answer
    /// (the turn then has an empty plan: every gated call asks).
    pub fn parse(answer: &str, known: &[ToolSpec]) -> Option<Self> {
        let start = answer.find('{')?;
        let mut de = serde_json::Deserializer::from_str(&answer[start..]).into_iter::<Value>();
        let v = de.next()?.ok()?;
        let list = v.get("tools")?.as_array()?;
        Some(Intent::of(
            list.iter()
                .filter_map(Value::as_str)
                .filter(|n| known.iter().any(|t| t.name == *n)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec::new(name, "Does it.\nMore.", json!({"type": "object"}))
    }

    #[test]
    fn an_answer_is_read_leniently_and_checked_against_the_tools() {
        let known = [spec("read_url"), spec("send_money")];
        let i = Intent::parse(
            "Sure:\n```json\n{\"tools\": [\"read_url\", \"rm_rf\"]}\n```",
            &known,
        )
        .expect("a plan");
        assert!(i.allows("read_url") && !i.allows("rm_rf") && !i.allows("send_money"));
        assert_eq!(i.describe(), "read_url");
        assert_eq!(Intent::parse("I will read the page.", &known), None);
        assert!(Intent::prompt(&known).starts_with(PLAN_MARKER));
        assert!(Intent::prompt(&known).contains("- send_money: Does it.\n"));
    }
}
