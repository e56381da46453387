//! Tool names and `prefix*` patterns, and the scopes that narrow what one call may reach.
//!
//! Config names tools in five places — an agent's `tools`, a token's `tools`,
//! `security.access_control.safe_tools`/`inter_agent_tools`, `security.hitl.gated_tools` and
//! `security.rate_limits.tools` — always as exact names or `prefix*`. [`ToolPattern`] is the one
//! reading of that syntax. [`Scope`] is a narrowing carried on an
//! `Invocation` (`strata-runtime`) (an agent's or skill's tool list, a control token's
//! scope); the Invoker refuses a call outside any of its scopes with status `denied` and an
//! audit record, like every other refusal.

use std::fmt;

/// One entry of a tool list: an exact name, or a prefix followed by `*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolPattern {
    text: String,
}

impl ToolPattern {
    /// Reads `text` as config writes it.
    pub fn new(text: impl Into<String>) -> Self {
        ToolPattern { text: text.into() }
    }

    /// The prefix, when this is a `prefix*` pattern.
    pub fn prefix(&self) -> Option<&str> {
        self.text.strip_suffix('*')
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        pattern_matches(&self.text, name)
    }

    /// As written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The one reading of the syntax, on borrowed text (the access checks run it for every
/// call: no allocation).
fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Whether `name` matches any of `patterns` (each read as a [`ToolPattern`]).
pub fn matches_any<S: AsRef<str>>(patterns: &[S], name: &str) -> bool {
    patterns.iter().any(|p| pattern_matches(p.as_ref(), name))
}

/// The value of the entry of `map` that best matches `tool`: the exact name, else the longest
/// matching `prefix*`.
pub fn best_match<'a, V>(
    map: impl IntoIterator<Item = (&'a String, &'a V)>,
    tool: &str,
) -> Option<&'a V> {
    let mut best: Option<(usize, &V)> = None;
    for (k, v) in map {
        if !pattern_matches(k, tool) {
            continue;
        }
        let rank = k.strip_suffix('*').map_or(usize::MAX, str::len);
        if best.is_none_or(|(r, _)| rank > r) {
            best = Some((rank, v));
        }
    }
    best.map(|(_, v)| v)
}

/// Which tools a holder (an agent, a skill run, a token) may see and call.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ToolFilter {
    /// None.
    None,
    /// Every tool in the registry.
    All,
    /// Names, or `prefix*` patterns.
    List(Vec<String>),
}

impl ToolFilter {
    /// From a `tools:` key: absent = none, `all`/`"*"` = all, a list = those.
    pub fn from_config(sel: Option<&crate::config::ToolSelection>) -> Self {
        use crate::config::ToolSelection;
        match sel {
            None => ToolFilter::None,
            Some(ToolSelection::All(_)) => ToolFilter::All,
            Some(ToolSelection::List(l)) => ToolFilter::List(l.clone()),
        }
    }

    /// From an optional list where absent means all (a token's `tools`).
    pub fn from_list(list: Option<Vec<String>>) -> Self {
        match list {
            None => ToolFilter::All,
            Some(l) => ToolFilter::List(l),
        }
    }

    /// Whether `name` passes.
    pub fn allows(&self, name: &str) -> bool {
        match self {
            ToolFilter::None => false,
            ToolFilter::All => true,
            ToolFilter::List(pats) => matches_any(pats, name),
        }
    }

    /// The names of `wanted` this filter allows (a skill's tools inside its agent's).
    pub fn narrow(&self, wanted: &[String]) -> ToolFilter {
        ToolFilter::List(wanted.iter().filter(|t| self.allows(t)).cloned().collect())
    }
}

/// Who a [`Scope`] belongs to; decides the layer and the words of a refusal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScopeHolder {
    /// An agent's tool list (`agents.<id>.tools`, narrowed by a skill's `tools`): layer 3.
    Agent(String),
    /// A control token's `tools`: layer 2.
    Token(String),
}

/// A narrowing of what one call may reach, on top of the access policy.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Scope {
    /// Whose it is.
    pub holder: ScopeHolder,
    /// What it lets through.
    pub filter: ToolFilter,
}

impl Scope {
    /// An agent's tools.
    pub fn agent(id: impl Into<String>, filter: ToolFilter) -> Self {
        Scope {
            holder: ScopeHolder::Agent(id.into()),
            filter,
        }
    }

    /// A token's tools; `name` as the audit log shows the caller (`token:ci`).
    pub fn token(name: impl Into<String>, filter: ToolFilter) -> Self {
        Scope {
            holder: ScopeHolder::Token(name.into()),
            filter,
        }
    }

    /// `Ok` when `tool` is inside; else the refusal, worded like the access policy's
    /// (`denied (layer N): …`).
    pub fn check(&self, tool: &str) -> Result<(), OutOfScope> {
        if self.filter.allows(tool) {
            return Ok(());
        }
        Err(OutOfScope(match &self.holder {
            ScopeHolder::Agent(id) => {
                format!("denied (layer 3): tool `{tool}` is not available to agent `{id}`")
            }
            ScopeHolder::Token(name) => {
                format!(
                    "denied (layer 2): {name} may not call `{tool}`: it is outside the token's `tools`"
                )
            }
        }))
    }
}

/// A call outside a [`Scope`]: the refusal as the audit log and the caller get it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OutOfScope(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exact_names_and_prefixes() {
        let p = ToolPattern::new("memory_*");
        assert!(p.matches("memory_store") && p.matches("memory_") && !p.matches("memor"));
        let e = ToolPattern::new("read_file");
        assert!(e.matches("read_file") && !e.matches("read_files"));
        assert!(ToolPattern::new("*").matches("anything"));
        assert!(matches_any(&["a", "b*"], "bee") && !matches_any(&["a", "b*"], "c"));
        let none: [&str; 0] = [];
        assert!(!matches_any(&none, "a"));
    }

    #[test]
    fn the_exact_name_beats_the_longest_prefix() {
        let m: std::collections::BTreeMap<String, u8> = [
            ("web_*".to_owned(), 1),
            ("web_search*".to_owned(), 2),
            ("web_search".to_owned(), 3),
            ("*".to_owned(), 4),
        ]
        .into_iter()
        .collect();
        assert_eq!(best_match(&m, "web_search"), Some(&3));
        assert_eq!(best_match(&m, "web_search_x"), Some(&2));
        assert_eq!(best_match(&m, "web_fetch"), Some(&1));
        assert_eq!(best_match(&m, "other"), Some(&4));
    }

    #[test]
    fn scopes_refuse_with_their_layer() {
        let s = Scope::agent("main", ToolFilter::List(vec!["read_*".into()]));
        assert!(s.check("read_file").is_ok());
        assert_eq!(
            s.check("terminal_exec").expect_err("out").to_string(),
            "denied (layer 3): tool `terminal_exec` is not available to agent `main`"
        );
        let t = Scope::token("token:ci", ToolFilter::from_list(Some(vec![])));
        assert_eq!(
            t.check("x").expect_err("out").to_string(),
            "denied (layer 2): token:ci may not call `x`: it is outside the token's `tools`"
        );
        assert!(
            Scope::token("all", ToolFilter::from_list(None))
                .check("x")
                .is_ok()
        );
    }
}
