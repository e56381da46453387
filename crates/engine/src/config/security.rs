//! `security.*`: access control, rate limits, approvals, content safety, network guard, audit.
//! `docs/SECURITY.md` lists every key with its default and what it stops.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `security.*`
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// Who may talk to which agent and call which tool.
    pub access_control: AccessControlConfig,
    /// Sliding-window limits per (principal or agent, tool).
    pub rate_limits: RateLimitsConfig,
    /// Human approval of gated tool calls.
    pub hitl: HitlConfig,
    /// Sanitising and scoring what web-facing tools return; the behaviour monitor.
    pub content_safety: ContentSafetyConfig,
    /// Taint tracking: a turn that took in outside content needs approval for side effects.
    pub taint: TaintConfig,
    /// The SSRF guard for URLs that come from models or users.
    pub network: NetworkConfig,
    /// The audit log's rotation.
    pub audit: AuditConfig,
    /// Where security alerts go besides the audit log (a connector channel, e.g. a Discord
    /// channel id; used by connectors that implement alert sinks).
    pub alert_channel: Option<String>,
    /// Rights that go wrong while running (the `permission_check` job).
    pub permission_watch: PermissionWatchConfig,
}

/// `security.permission_watch.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionWatchConfig {
    /// How often the `permission_check` job sweeps (`10m`, `1h`, …; default `10m`); the job
    /// itself can be turned off under `schedules.permission_check`.
    pub interval: String,
    /// The same problem is reported again only after this long (default `6h`).
    pub cooldown: String,
    /// Also tell this agent's home channel (besides `security.alert_channel`).
    pub notify_agent: Option<String>,
}

impl Default for PermissionWatchConfig {
    fn default() -> Self {
        PermissionWatchConfig {
            interval: "10m".into(),
            cooldown: "6h".into(),
            notify_agent: None,
        }
    }
}

/// `security.access_control.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AccessControlConfig {
    /// Turns the three layers on (default). Off: every principal is treated as an owner.
    pub enabled: bool,
    /// What senders unknown to `team.json` get.
    pub unknown_policy: UnknownPolicy,
    /// Tools staff, agent principals (and unknown senders under `safe_only`) may call without
    /// approval; names or `prefix*`.
    pub safe_tools: Vec<String>,
    /// Tools that reach other agents; assistant-tier agents can never use them.
    pub inter_agent_tools: Vec<String>,
    /// Tools only owners may call (in a turn: only when an owner is talking), refused to
    /// everyone else before any approval is asked; names or `prefix*`.
    pub owner_tools: Vec<String>,
    /// Capabilities an agent has when its `agents.<id>.capabilities` is unset.
    pub default_capabilities: Vec<crate::spec::Capability>,
}

impl Default for AccessControlConfig {
    fn default() -> Self {
        use crate::spec::Capability as C;
        AccessControlConfig {
            enabled: true,
            unknown_policy: UnknownPolicy::Deny,
            safe_tools: [
                "current_time",
                "list_capabilities",
                "list_files",
                "read_file",
                "search_notes",
                "memory_search",
                "memory_semantic_search",
                "web_search",
            ]
            .map(String::from)
            .to_vec(),
            inter_agent_tools: ["ask_agent", "send_to_agent"].map(String::from).to_vec(),
            owner_tools: ["create_skill", "install_mcp"].map(String::from).to_vec(),
            default_capabilities: vec![C::Read, C::FileWrite, C::Network, C::Memory, C::Messaging],
        }
    }
}

/// `security.access_control.unknown_policy`
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum UnknownPolicy {
    /// Unknown senders reach no agent and no tool.
    #[default]
    Deny,
    /// Unknown senders may talk to assistant agents and use safe tools.
    SafeOnly,
}

/// `security.rate_limits.*`
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitsConfig {
    /// `enforce` refuses calls over a limit; `log` lets them run and records an alert.
    pub mode: RateLimitMode,
    /// Limits for every tool without a more specific entry.
    pub defaults: Limits,
    /// Per tool: exact name or `prefix*` (exact wins, then the longest prefix).
    pub tools: BTreeMap<String, Limits>,
    /// Per agent: the same map as `tools`, winning over it for that agent's calls.
    pub agents: BTreeMap<String, BTreeMap<String, Limits>>,
}

/// `security.rate_limits.mode`
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitMode {
    /// Refuse.
    #[default]
    Enforce,
    /// Record and alert only.
    Log,
}

/// Calls allowed per window; unset = no limit in that window. A more specific entry inherits
/// the windows it leaves unset from the less specific ones.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Per sliding minute.
    pub per_minute: Option<u32>,
    /// Per sliding hour.
    pub per_hour: Option<u32>,
    /// Per sliding day.
    pub per_day: Option<u32>,
}

impl Limits {
    /// `self` where set, else `fallback`.
    pub fn or(self, fallback: Limits) -> Limits {
        Limits {
            per_minute: self.per_minute.or(fallback.per_minute),
            per_hour: self.per_hour.or(fallback.per_hour),
            per_day: self.per_day.or(fallback.per_day),
        }
    }

    /// No window is limited.
    pub fn is_unlimited(&self) -> bool {
        self.per_minute.is_none() && self.per_hour.is_none() && self.per_day.is_none()
    }
}

/// `security.hitl.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct HitlConfig {
    /// Tools that always wait for approval (names or `prefix*`), besides those declaring `hitl`.
    pub gated_tools: Vec<String>,
    /// Person ids (from `team.json`) or token names who may decide; empty = owners.
    pub approvers: Vec<String>,
    /// Seconds a request waits before it counts as `timeout` (refused unless `fail_mode: open`).
    pub timeout: u64,
    /// `closed` (default): timeouts and errors refuse the call. `open`: they let it run.
    pub fail_mode: FailMode,
    /// Owners' own calls to gated tools skip approval (default false: every gated call waits).
    pub owner_bypass: bool,
    /// Where connectors post approval requests (e.g. a Discord channel id).
    pub channel: Option<String>,
}

impl Default for HitlConfig {
    fn default() -> Self {
        HitlConfig {
            gated_tools: Vec::new(),
            approvers: Vec::new(),
            timeout: 1800,
            fail_mode: FailMode::Closed,
            owner_bypass: false,
            channel: None,
        }
    }
}

/// `security.hitl.fail_mode`
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// Refuse.
    #[default]
    Closed,
    /// Allow.
    Open,
}

/// `security.taint.*` — what makes a turn tainted and what a tainted turn may not do without
/// a person's approval. `docs/SECURITY.md` ("Taint tracking") explains the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TaintConfig {
    /// Tracks taint and gates tainted turns (default true).
    pub enabled: bool,
    /// What taints a turn: `web_facing` (results of web-facing tools: `read_url`,
    /// `web_search`, `http_request`, MCP client tools…), `messages` (a message from a
    /// sender below `trusted_senders`), `memory` (recalling a memory stored by a tainted
    /// turn), `agents` (a turn asked for by a tainted turn, and the reply it sends back),
    /// and `tool:<name or prefix*>` for the results of further tools.
    pub sources: Vec<TaintSourceRule>,
    /// Senders of this tier and above do not taint a turn with their messages.
    pub trusted_senders: crate::principal::Access,
    /// What a tainted turn needs approval for: capabilities (`file-write`, `subprocess`,
    /// `messaging`, `secrets`, `network`, `memory`, `read`) and `external` (tools whose side
    /// effects reach outside this machine).
    pub gated_capabilities: Vec<GatedEffect>,
    /// Tools a tainted turn may call without approval anyway (names or `prefix*`).
    pub exempt_tools: Vec<String>,
    /// Calls on behalf of an owner skip the taint gate (default false: the owner is asked
    /// too — it is the owner's agent that read the page).
    pub owner_exempt: bool,
    /// How a tainted turn's calls are judged: `flow` (default) by where their arguments came
    /// from and whether the turn's plan calls for them; `turn`, every gated call of a
    /// tainted turn waits for a person.
    pub mode: TaintMode,
}

/// `security.taint.mode`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TaintMode {
    /// By data flow: a gated call waits when one of its argument values is found only in
    /// untrusted content, or the plan made from the person's request does not call for it;
    /// a call that sends its arguments out waits when one of them is.
    #[default]
    Flow,
    /// By turn: once anything untrusted came in, every gated call waits.
    Turn,
}

impl Default for TaintConfig {
    fn default() -> Self {
        use crate::spec::Capability as C;
        TaintConfig {
            enabled: true,
            sources: vec![
                TaintSourceRule::WebFacing,
                TaintSourceRule::Messages,
                TaintSourceRule::Memory,
                TaintSourceRule::Agents,
            ],
            trusted_senders: crate::principal::Access::Staff,
            gated_capabilities: vec![
                GatedEffect::Capability(C::FileWrite),
                GatedEffect::Capability(C::Subprocess),
                GatedEffect::Capability(C::Messaging),
                GatedEffect::Capability(C::Secrets),
                GatedEffect::External,
            ],
            exempt_tools: Vec::new(),
            owner_exempt: false,
            mode: TaintMode::Flow,
        }
    }
}

impl TaintConfig {
    /// Memories stored by tainted turns are marked and taint the turns that recall them.
    pub fn tracks_memory(&self) -> bool {
        self.enabled && self.sources.contains(&TaintSourceRule::Memory)
    }

    /// A turn asked for by a tainted turn shares its taint.
    pub fn follows_agents(&self) -> bool {
        self.enabled && self.sources.contains(&TaintSourceRule::Agents)
    }
}

/// One entry of `security.taint.sources`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "String", into = "String")]
pub enum TaintSourceRule {
    /// `web_facing`
    WebFacing,
    /// `messages`
    Messages,
    /// `memory`
    Memory,
    /// `agents`
    Agents,
    /// `tool:<pattern>`
    Tool(String),
}

impl TaintSourceRule {
    fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "web_facing" => TaintSourceRule::WebFacing,
            "messages" => TaintSourceRule::Messages,
            "memory" => TaintSourceRule::Memory,
            "agents" => TaintSourceRule::Agents,
            _ => match s.strip_prefix("tool:") {
                Some(p) if !p.trim().is_empty() => TaintSourceRule::Tool(p.trim().to_owned()),
                _ => {
                    return Err(format!(
                        "unknown taint source `{s}`; expected web_facing, messages, memory, \
                         agents or tool:<name or prefix*>"
                    ));
                }
            },
        })
    }
}

impl std::fmt::Display for TaintSourceRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaintSourceRule::WebFacing => f.write_str("web_facing"),
            TaintSourceRule::Messages => f.write_str("messages"),
            TaintSourceRule::Memory => f.write_str("memory"),
            TaintSourceRule::Agents => f.write_str("agents"),
            TaintSourceRule::Tool(p) => write!(f, "tool:{p}"),
        }
    }
}

impl TryFrom<String> for TaintSourceRule {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        TaintSourceRule::parse(&s)
    }
}

impl From<TaintSourceRule> for String {
    fn from(r: TaintSourceRule) -> String {
        r.to_string()
    }
}

/// One entry of `security.taint.gated_capabilities`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "String", into = "String")]
pub enum GatedEffect {
    /// A tool with this capability.
    Capability(crate::spec::Capability),
    /// `external`: a tool whose side effects reach outside this machine.
    External,
}

impl std::fmt::Display for GatedEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatedEffect::External => f.write_str("external"),
            GatedEffect::Capability(c) => f.write_str(c.as_str()),
        }
    }
}

impl TryFrom<String> for GatedEffect {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s == "external" {
            return Ok(GatedEffect::External);
        }
        crate::spec::Capability::ALL
            .iter()
            .find(|c| c.as_str() == s)
            .map(|c| GatedEffect::Capability(*c))
            .ok_or_else(|| {
                format!(
                    "unknown gated capability `{s}`; expected external or one of {}",
                    crate::spec::Capability::ALL
                        .iter()
                        .map(|c| c.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}

impl From<GatedEffect> for String {
    fn from(g: GatedEffect) -> String {
        g.to_string()
    }
}

/// `security.content_safety.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ContentSafetyConfig {
    /// What happens to scored content.
    pub policy: SafetyPolicy,
    /// Scores at or above this raise an alert (0–10).
    pub alert_threshold: f32,
    /// Under `block`, scores at or above this replace the content with a refusal (0–10).
    pub block_threshold: f32,
    /// Under `wrap`, `block` and `redact`, the passages of a tool result that score at or
    /// above this are cut out, each replaced by a note (`redact` cuts from `block_threshold`
    /// when that is lower). The default, 9.7, is a score no benign text of any set we hold
    /// reaches (`strata_safety::CERTAIN`); above 10 nothing is cut.
    pub redact_threshold: f32,
    /// The per-agent behaviour monitor.
    pub monitor: MonitorConfig,
    /// Scoring of incoming messages from senders who are not owners.
    pub inbound: InboundSafetyConfig,
}

/// `security.content_safety.inbound.*` — messages from senders below owner are scored
/// before the agent reads them; the policy decides what the agent gets: `log` (the message
/// as sent, an alert at `alert_threshold`), `wrap` (inside an envelope that names the sender
/// and the score), `block` (as `wrap`, and a message at `block_threshold` or above is
/// refused).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct InboundSafetyConfig {
    /// The policy for connectors not listed in `connectors` (default `log`).
    pub policy: SafetyPolicy,
    /// Per connector (`discord`, `http`, `cli`, `repl`, `execute`): its own policy.
    pub connectors: BTreeMap<String, SafetyPolicy>,
}

impl Default for InboundSafetyConfig {
    fn default() -> Self {
        InboundSafetyConfig {
            policy: SafetyPolicy::Log,
            connectors: BTreeMap::new(),
        }
    }
}

impl InboundSafetyConfig {
    /// The policy for messages arriving through `connector`.
    pub fn policy_for(&self, connector: &str) -> SafetyPolicy {
        self.connectors
            .get(connector)
            .copied()
            .unwrap_or(self.policy)
    }
}

impl Default for ContentSafetyConfig {
    fn default() -> Self {
        ContentSafetyConfig {
            policy: SafetyPolicy::Wrap,
            alert_threshold: 4.0,
            block_threshold: 7.0,
            redact_threshold: strata_safety::CERTAIN,
            monitor: MonitorConfig::default(),
            inbound: InboundSafetyConfig::default(),
        }
    }
}

/// `security.content_safety.policy`
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SafetyPolicy {
    /// Sanitise, score, record and alert; the content reaches the model as is.
    Log,
    /// As `log`, and the content reaches the model inside an untrusted-data envelope; the
    /// passages of a tool result at or above `redact_threshold` (near-certain injections) are
    /// cut out.
    #[default]
    Wrap,
    /// As `wrap`, and content scoring at or above `block_threshold` is withheld.
    Block,
    /// As `wrap`, and the passages of a tool result that score at or above `block_threshold`
    /// are cut out (each replaced by a note saying so); the rest is passed on. For an inbound
    /// message it is `wrap`: a person's message is passed on whole or not at all.
    Redact,
}

/// `security.content_safety.monitor.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MonitorConfig {
    /// Runs the monitor.
    pub enabled: bool,
    /// A sensitive tool this many seconds after web content was read raises an alert.
    pub web_window_secs: u64,
    /// Calls an agent makes before never-seen tools raise alerts.
    pub baseline_calls: u32,
    /// More calls than this in one minute by one agent is a spike.
    pub spike_per_minute: u32,
    /// Distinct sensitive tools within `sensitive_window_secs` that raise an alert.
    pub sensitive_distinct: u32,
    /// Window for `sensitive_distinct`.
    pub sensitive_window_secs: u64,
    /// Tools counted as sensitive besides gated ones and those with external side effects,
    /// subprocess or secrets capabilities (names or `prefix*`).
    pub sensitive_tools: Vec<String>,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            enabled: true,
            web_window_secs: 300,
            baseline_calls: 50,
            spike_per_minute: 30,
            sensitive_distinct: 3,
            sensitive_window_secs: 120,
            sensitive_tools: Vec::new(),
        }
    }
}

/// `security.network.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Hosts (exact names) or CIDRs that may be reached although they are internal.
    pub allow: Vec<String>,
    /// Redirect hops followed, each re-checked.
    pub max_redirects: u32,
    /// Largest response body read (bytes).
    pub max_response_bytes: u64,
    /// Whole-request time limit (seconds).
    pub timeout_secs: u64,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            allow: Vec::new(),
            max_redirects: 5,
            max_response_bytes: 5 * 1024 * 1024,
            timeout_secs: 30,
        }
    }
}

/// `security.audit.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Rotate the audit log when it grows past this many bytes (0 = never).
    pub max_bytes: u64,
    /// Rotated files kept (`audit.jsonl.1` … `.N`); older ones are deleted (0 = keep all).
    pub keep_files: u32,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            max_bytes: 64 * 1024 * 1024,
            keep_files: 0,
        }
    }
}
