//! Taint tracking: the defence that holds when injection detection misses.
//!
//! A turn is *tainted* once content from outside the trust boundary has entered it: a
//! web-facing tool's result, a message from a sender below `security.taint.trusted_senders`,
//! a memory stored by a tainted turn, the work of a tainted agent turn. The model may be
//! following that content's instructions, so while a turn is tainted the Invoker asks a
//! person before running a tool with the effects in `security.taint.gated_capabilities`
//! (writes, processes, messages, secrets, external side effects) — whatever the score of the
//! text that tainted it.
//!
//! [`Taint`] is the turn's mark: a shared, append-only list of where outside content came
//! from. The agent loop makes one per turn and hands it to every call (`Invocation::taint`)
//! and every tool (`ToolContext::taint`); an `ask_agent` passes it on to the turn it asks
//! for, so taint follows the work both ways. [`TaintPolicy`] is the configuration read as
//! decisions.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Tier;
use crate::config::{GatedEffect, TaintConfig, TaintSourceRule};
use crate::principal::Access;
use crate::scope::matches_any;
use crate::spec::{SideEffects, ToolSpec};

/// What made a turn tainted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaintKind {
    /// A tool's result (`read_url`, `web_search`, an MCP client tool…).
    Tool,
    /// A message from a sender below the trusted tier.
    Message,
    /// A recalled memory stored by a tainted turn.
    Memory,
    /// An earlier turn of the conversation, still in its history or summary.
    History,
}

/// One source of taint, as the audit log and approval requests show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaintSource {
    /// Its kind.
    pub kind: TaintKind,
    /// The tool that brought the content in, if a tool did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// What came in: a URL, a query, a sender, a memory id.
    pub detail: String,
}

impl TaintSource {
    /// A tool's result; the detail is taken from its arguments (`url`, `query`, …).
    pub fn tool(tool: &str, args: &Value) -> Self {
        let detail = ["url", "query", "q", "endpoint", "path", "uri"]
            .iter()
            .find_map(|k| args.get(*k).and_then(Value::as_str))
            .map(|s| clip(s, 200))
            .unwrap_or_default();
        TaintSource {
            kind: TaintKind::Tool,
            tool: Some(tool.to_owned()),
            detail,
        }
    }

    /// A message from `sender` (of standing `tier`).
    pub fn message(sender: &str, tier: Tier) -> Self {
        TaintSource {
            kind: TaintKind::Message,
            tool: None,
            detail: format!("{sender} ({tier})"),
        }
    }

    /// A recalled memory stored by a tainted turn.
    pub fn memory(id: &str) -> Self {
        TaintSource {
            kind: TaintKind::Memory,
            tool: None,
            detail: id.to_owned(),
        }
    }

    /// The same source seen from a later turn of the conversation.
    pub fn as_history(&self) -> Self {
        match self.kind {
            TaintKind::Tool => TaintSource::history(self.tool.as_deref(), self.detail.clone()),
            _ => self.clone(),
        }
    }

    /// An earlier turn of this conversation: `what` names it (the tool whose result is still
    /// in the history, or the summary).
    pub fn history(tool: Option<&str>, detail: impl Into<String>) -> Self {
        TaintSource {
            kind: TaintKind::History,
            tool: tool.map(str::to_owned),
            detail: detail.into(),
        }
    }
}

impl fmt::Display for TaintSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tool = self.tool.as_deref().unwrap_or("a tool");
        match (self.kind, self.detail.is_empty()) {
            (TaintKind::Tool, false) => write!(f, "read {} with `{tool}`", self.detail),
            (TaintKind::Tool, true) => write!(f, "read the result of `{tool}`"),
            (TaintKind::Message, _) => write!(f, "took a message from {}", self.detail),
            (TaintKind::Memory, _) => write!(
                f,
                "recalled memory {} (stored by a tainted turn)",
                self.detail
            ),
            (TaintKind::History, _) => match &self.tool {
                Some(t) if !self.detail.is_empty() => write!(
                    f,
                    "has in its conversation what `{t}` returned for {}",
                    self.detail
                ),
                Some(t) => write!(f, "has in its conversation what `{t}` returned"),
                None => write!(f, "has in its conversation {}", self.detail),
            },
        }
    }
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        format!("{}…", s.chars().take(max).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// At most this many sources are kept per turn, or per session (the first ones: they explain
/// the taint).
pub const MAX_SOURCES: usize = 16;

/// A turn's taint: shared by the turn, its tool calls and the agent turns it asks for.
/// Cheap to clone (one `Arc`); marks are never removed. Two handles are equal when they
/// are the same turn's. Reading is cheap for the Invoker's every call: whether the turn is
/// tainted is an atomic flag, and the sources are a shared snapshot replaced on each mark.
#[derive(Clone, Default)]
pub struct Taint(Arc<Inner>);

#[derive(Default)]
struct Inner {
    tainted: AtomicBool,
    sources: Mutex<Arc<[TaintSource]>>,
}

impl Taint {
    /// A clean mark for a new turn.
    pub fn new() -> Self {
        Taint::default()
    }

    /// Adds `source`; `true` when it is the first (the turn just became tainted).
    pub fn mark(&self, source: TaintSource) -> bool {
        let mut v = self.0.sources.lock().unwrap_or_else(|p| p.into_inner());
        let first = v.is_empty();
        if v.len() < MAX_SOURCES && !v.contains(&source) {
            let mut next = v.to_vec();
            next.push(source);
            *v = Arc::from(next);
        }
        self.0.tainted.store(true, Ordering::Release);
        first
    }

    /// Whether anything has tainted the turn.
    pub fn is_tainted(&self) -> bool {
        self.0.tainted.load(Ordering::Acquire)
    }

    /// The sources so far, oldest first (a shared snapshot: no copy).
    pub fn snapshot(&self) -> Arc<[TaintSource]> {
        self.0
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The sources so far, oldest first.
    pub fn sources(&self) -> Vec<TaintSource> {
        self.snapshot().to_vec()
    }

    /// "this turn read https://… with `read_url`; took a message from …" — the first three.
    pub fn explain(&self) -> String {
        let v = self.sources();
        let mut parts: Vec<String> = v.iter().take(3).map(ToString::to_string).collect();
        if v.len() > 3 {
            parts.push(format!("and {} more", v.len() - 3));
        }
        format!("this turn {}", parts.join("; "))
    }
}

impl PartialEq for Taint {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Taint").field(&self.sources()).finish()
    }
}

/// `security.taint`, read as decisions. Pure: no I/O.
#[derive(Debug, Clone)]
pub struct TaintPolicy {
    cfg: TaintConfig,
}

fn rank(a: Access) -> u8 {
    match a {
        Access::Viewer => 0,
        Access::Staff => 1,
        Access::Admin => 2,
        Access::Owner => 3,
    }
}

impl TaintPolicy {
    /// The policy for `cfg`.
    pub fn new(cfg: TaintConfig) -> Self {
        TaintPolicy { cfg }
    }

    /// Taint is tracked at all.
    pub fn enabled(&self) -> bool {
        self.cfg.enabled
    }

    fn has(&self, rule: &TaintSourceRule) -> bool {
        self.cfg.enabled && self.cfg.sources.contains(rule)
    }

    /// A call of this tool taints the turn that makes it.
    pub fn is_source(&self, spec: &ToolSpec) -> bool {
        if !self.cfg.enabled {
            return false;
        }
        self.cfg.sources.iter().any(|r| match r {
            TaintSourceRule::WebFacing => spec.web_facing,
            TaintSourceRule::Tool(p) => matches_any(std::slice::from_ref(p), &spec.name),
            _ => false,
        })
    }

    /// A message from a sender of this standing taints the turn it starts.
    pub fn sender_taints(&self, tier: Tier) -> bool {
        if !self.has(&TaintSourceRule::Messages) {
            return false;
        }
        match tier {
            Tier::Person(a) => rank(a) < rank(self.cfg.trusted_senders),
            // Agents pass their own taint on with the turn they ask for (`agents`).
            Tier::Agent(_) => false,
            Tier::Unknown => true,
        }
    }

    /// A tainted turn needs approval to call this tool on behalf of a principal of `tier`.
    pub fn gates(&self, spec: &ToolSpec, tier: Tier) -> bool {
        if !self.cfg.enabled
            || matches_any(&self.cfg.exempt_tools, &spec.name)
            || (self.cfg.owner_exempt && tier == Tier::Person(Access::Owner))
        {
            return false;
        }
        self.cfg.gated_capabilities.iter().any(|g| match g {
            GatedEffect::Capability(c) => spec.capabilities.contains(c),
            GatedEffect::External => spec.side_effects == SideEffects::External,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Capability;

    fn spec(name: &str, caps: &[Capability], fx: SideEffects, web: bool) -> ToolSpec {
        let mut s = ToolSpec::new(name, "t", serde_json::json!({"type": "object"}));
        s.capabilities = caps.to_vec();
        s.side_effects = fx;
        s.web_facing = web;
        s
    }

    #[test]
    fn a_mark_is_shared_kept_once_and_explained() {
        let t = Taint::new();
        let other = t.clone();
        assert!(!t.is_tainted());
        let src = TaintSource::tool("read_url", &serde_json::json!({"url": "https://x.test/p"}));
        assert!(other.mark(src.clone()));
        assert!(!t.mark(src));
        assert!(t.is_tainted() && t == other && t != Taint::new());
        assert_eq!(t.sources().len(), 1);
        assert_eq!(
            t.explain(),
            "this turn read https://x.test/p with `read_url`"
        );
    }

    #[test]
    fn the_default_policy_gates_effects_not_reads() {
        let p = TaintPolicy::new(TaintConfig::default());
        let owner = Tier::Person(Access::Owner);
        let gated = [
            spec(
                "terminal_exec",
                &[Capability::Subprocess],
                SideEffects::Local,
                false,
            ),
            spec(
                "write_file",
                &[Capability::FileWrite],
                SideEffects::Local,
                false,
            ),
            spec(
                "send_message",
                &[Capability::Messaging],
                SideEffects::External,
                false,
            ),
            spec(
                "ask_agent",
                &[Capability::Messaging],
                SideEffects::Local,
                false,
            ),
            spec(
                "http_request",
                &[Capability::Network, Capability::Secrets],
                SideEffects::External,
                true,
            ),
            spec(
                "team_add",
                &[Capability::FileWrite],
                SideEffects::Local,
                false,
            ),
        ];
        for s in &gated {
            assert!(p.gates(s, owner), "{}", s.name);
        }
        let free = [
            spec("read_url", &[Capability::Network], SideEffects::None, true),
            spec("read_file", &[Capability::Read], SideEffects::None, false),
            spec(
                "memory_store",
                &[Capability::Memory],
                SideEffects::Local,
                false,
            ),
            spec("current_time", &[], SideEffects::None, false),
        ];
        for s in &free {
            assert!(!p.gates(s, owner), "{}", s.name);
        }
        assert!(p.is_source(&free[0]) && !p.is_source(&free[1]));
        let exempt = TaintPolicy::new(TaintConfig {
            owner_exempt: true,
            exempt_tools: vec!["write_*".into()],
            ..TaintConfig::default()
        });
        assert!(!exempt.gates(&gated[0], owner));
        assert!(exempt.gates(&gated[0], Tier::Person(Access::Admin)));
        assert!(!exempt.gates(&gated[1], Tier::Person(Access::Admin)));
        let off = TaintPolicy::new(TaintConfig {
            enabled: false,
            ..TaintConfig::default()
        });
        assert!(!off.gates(&gated[0], owner) && !off.is_source(&free[0]));
    }

    #[test]
    fn senders_below_the_trusted_tier_taint() {
        let p = TaintPolicy::new(TaintConfig::default());
        assert!(p.sender_taints(Tier::Unknown));
        assert!(p.sender_taints(Tier::Person(Access::Viewer)));
        assert!(!p.sender_taints(Tier::Person(Access::Staff)));
        assert!(!p.sender_taints(Tier::Person(Access::Owner)));
        let strict_cfg = TaintConfig {
            trusted_senders: Access::Owner,
            sources: vec![
                TaintSourceRule::Messages,
                TaintSourceRule::Tool("read_*".into()),
            ],
            ..TaintConfig::default()
        };
        assert!(!strict_cfg.tracks_memory() && !strict_cfg.follows_agents());
        let strict = TaintPolicy::new(strict_cfg);
        assert!(strict.sender_taints(Tier::Person(Access::Admin)));
        let read_file = spec("read_file", &[Capability::Read], SideEffects::None, false);
        assert!(strict.is_source(&read_file));
    }
}
