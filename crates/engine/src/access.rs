//! Access control in three layers. Pure decisions over the config; the Invoker (`strata-runtime`)
//! asks on every call and the agent runtime asks before a turn (layer 1) and before showing
//! tools to the model (layers 2 and 3).
//!
//! - **Layer 1** — may this sender talk to this agent?
//! - **Layer 2** — which tools for this sender (some only after approval)?
//! - **Layer 3** — the agent's ceiling: its `tools` list, its capabilities, its tier.
//!
//! `docs/SECURITY.md` has the full table.

use std::collections::HashMap;

use crate::config::{
    Access, AccessControlConfig, AgentTier, Config, HitlConfig, ToolSelection, UnknownPolicy,
};
use crate::principal::Principal;
use crate::spec::{Capability, SideEffects, ToolSpec};

pub use crate::scope::matches_any;

/// A principal's resolved standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// A person (or token) with a tier from `team.json` / `server.tokens`.
    Person(Access),
    /// Another agent of this deployment.
    Agent(AgentTier),
    /// Nobody we know.
    Unknown,
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tier::Person(a) => write!(f, "{}", access_name(*a)),
            Tier::Agent(t) => write!(f, "{} agent", agent_tier_name(*t)),
            Tier::Unknown => f.write_str("unknown"),
        }
    }
}

fn access_name(a: Access) -> &'static str {
    match a {
        Access::Owner => "owner",
        Access::Admin => "admin",
        Access::Staff => "staff",
        Access::Viewer => "viewer",
    }
}

fn agent_tier_name(t: AgentTier) -> &'static str {
    match t {
        AgentTier::Privileged => "privileged",
        AgentTier::Coordinator => "coordinator",
        AgentTier::Assistant => "assistant",
    }
}

/// What the policy says about one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Run it only after a human approves; the reason says why it is gated.
    Approve(String),
    /// Refuse.
    Deny {
        /// 1, 2 or 3.
        layer: u8,
        /// Why, for the caller.
        message: String,
    },
}

/// A layer-1 refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("denied (layer 1): {0}")]
pub struct TalkDenied(pub String);

struct AgentCeiling {
    tools: Option<ToolSelection>,
    capabilities: Vec<Capability>,
}

/// The three layers, built once from the config.
pub struct AccessPolicy {
    enabled: bool,
    cfg: AccessControlConfig,
    hitl: HitlConfig,
    /// Person ids and contact ids (bare and `connector:id`) → tier.
    people: HashMap<String, (String, Access)>,
    admin_users: Vec<String>,
    agent_tiers: HashMap<String, AgentTier>,
    ceilings: HashMap<String, AgentCeiling>,
}

impl AccessPolicy {
    /// The policy `config` describes.
    pub fn from_config(config: &Config) -> Self {
        let mut people = HashMap::new();
        for p in &config.team.people {
            people.insert(p.id.clone(), (p.id.clone(), p.access));
            for (connector, contact) in &p.contacts {
                people.insert(contact.clone(), (p.id.clone(), p.access));
                people.insert(format!("{connector}:{contact}"), (p.id.clone(), p.access));
            }
        }
        let agent_tiers = config
            .team
            .agents
            .iter()
            .map(|a| (a.id.clone(), a.agent_tier))
            .collect();
        let ceilings = config
            .agents
            .iter()
            .map(|(id, a)| {
                (
                    id.clone(),
                    AgentCeiling {
                        tools: a.tools.clone(),
                        capabilities: a.capabilities.clone().unwrap_or_else(|| {
                            config.security.access_control.default_capabilities.clone()
                        }),
                    },
                )
            })
            .collect();
        AccessPolicy {
            enabled: config.security.access_control.enabled,
            cfg: config.security.access_control.clone(),
            hitl: config.security.hitl.clone(),
            people,
            admin_users: config.team.admin_users.clone(),
            agent_tiers,
            ceilings,
        }
    }

    /// Whether access control is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The person id a principal stands for, when it is a known person.
    pub fn person_id(&self, p: &Principal) -> Option<String> {
        match p {
            Principal::Person { id } => self.people.get(id).map(|(pid, _)| pid.clone()),
            _ => None,
        }
    }

    /// Resolves a principal: known person → their tier; `admin_users` → owner; known agent →
    /// its tier (unlisted agents are assistants); tokens → their tier; the local operator →
    /// owner; anyone else → unknown.
    pub fn tier(&self, p: &Principal) -> Tier {
        match p {
            Principal::Operator => Tier::Person(Access::Owner),
            Principal::Token { tier, .. } => Tier::Person(*tier),
            Principal::Agent { id } => Tier::Agent(self.agent_tier(id)),
            Principal::Person { id } => {
                let bare = id.split_once(':').map_or(id.as_str(), |(_, b)| b);
                if self.admin_users.iter().any(|a| a == id || a == bare) {
                    return Tier::Person(Access::Owner);
                }
                match self.people.get(id) {
                    Some((_, access)) => Tier::Person(*access),
                    None => Tier::Unknown,
                }
            }
            Principal::Unknown => Tier::Unknown,
        }
    }

    /// An agent's tier from `team.json`; agents not listed there are assistants.
    pub fn agent_tier(&self, id: &str) -> AgentTier {
        self.agent_tiers
            .get(id)
            .copied()
            .unwrap_or(AgentTier::Assistant)
    }

    /// Layer 1: may `sender` talk to agent `agent`?
    pub fn may_talk(&self, sender: &Principal, agent: &str) -> Result<(), TalkDenied> {
        if !self.enabled {
            return Ok(());
        }
        let target = self.agent_tier(agent);
        let tier = self.tier(sender);
        let ok = match tier {
            Tier::Person(Access::Owner | Access::Admin) => true,
            Tier::Person(Access::Staff | Access::Viewer) => target == AgentTier::Assistant,
            Tier::Agent(AgentTier::Privileged | AgentTier::Coordinator) => true,
            Tier::Agent(AgentTier::Assistant) => false,
            Tier::Unknown => {
                self.cfg.unknown_policy == UnknownPolicy::SafeOnly && target == AgentTier::Assistant
            }
        };
        if ok {
            Ok(())
        } else {
            Err(TalkDenied(format!(
                "{sender} ({tier}) may not talk to agent `{agent}` ({} tier)",
                agent_tier_name(target)
            )))
        }
    }

    /// Is the tool gated for everyone (declares `hitl` or is in `security.hitl.gated_tools`)?
    pub fn is_gated(&self, spec: &ToolSpec) -> bool {
        spec.hitl || matches_any(&self.hitl.gated_tools, &spec.name)
    }

    fn is_safe(&self, name: &str) -> bool {
        matches_any(&self.cfg.safe_tools, name)
    }

    fn is_inter_agent(&self, name: &str) -> bool {
        matches_any(&self.cfg.inter_agent_tools, name)
    }

    /// Layers 2 and 3 for one call of `spec` by `principal`, on behalf of `agent` if any.
    pub fn decide(&self, principal: &Principal, agent: Option<&str>, spec: &ToolSpec) -> Decision {
        if !self.enabled {
            return if self.is_gated(spec) {
                Decision::Approve(format!("`{}` is gated", spec.name))
            } else {
                Decision::Allow
            };
        }
        // Layer 3 first: a tool beyond the agent's ceiling is not the sender's to ask for.
        if let Some(agent) = agent
            && let Err(message) = self.ceiling(agent, spec)
        {
            return Decision::Deny { layer: 3, message };
        }
        let name = spec.name.as_str();
        let tier = self.tier(principal);
        let deny2 = |why: &str| Decision::Deny {
            layer: 2,
            message: format!("{principal} ({tier}) may not call `{name}`: {why}"),
        };
        if self.is_inter_agent(name) && matches!(tier, Tier::Agent(AgentTier::Assistant)) {
            return deny2("assistant-tier agents cannot use inter-agent tools");
        }
        if matches_any(&self.cfg.owner_tools, name) && tier != Tier::Person(Access::Owner) {
            return deny2("only owners may (`security.access_control.owner_tools`)");
        }
        let safe = self.is_safe(name);
        let base = match tier {
            Tier::Person(Access::Owner) => Decision::Allow,
            Tier::Person(Access::Admin) => Decision::Allow,
            Tier::Person(Access::Staff) if safe => Decision::Allow,
            Tier::Person(Access::Staff) => {
                return deny2("staff may use only `security.access_control.safe_tools`");
            }
            Tier::Person(Access::Viewer) if safe && spec.side_effects == SideEffects::None => {
                Decision::Allow
            }
            Tier::Person(Access::Viewer) => {
                return deny2("viewers may use only safe tools without side effects");
            }
            Tier::Agent(_) if safe => Decision::Allow,
            Tier::Agent(_) => Decision::Approve(format!(
                "`{name}` is not a safe tool and the caller is an agent"
            )),
            Tier::Unknown if safe && self.cfg.unknown_policy == UnknownPolicy::SafeOnly => {
                Decision::Allow
            }
            Tier::Unknown => {
                return deny2(
                    "unknown senders get no tools (see `security.access_control.unknown_policy`)",
                );
            }
        };
        if self.is_gated(spec) {
            let bypass = self.hitl.owner_bypass && tier == Tier::Person(Access::Owner);
            if !bypass {
                return Decision::Approve(format!("`{name}` is gated"));
            }
        }
        base
    }

    /// Layer 3: the agent's own ceiling (`agents.<id>.tools`, capabilities, tier).
    fn ceiling(&self, agent: &str, spec: &ToolSpec) -> Result<(), String> {
        let name = spec.name.as_str();
        if self.is_inter_agent(name) && self.agent_tier(agent) == AgentTier::Assistant {
            return Err(format!(
                "agent `{agent}` is assistant-tier and cannot use inter-agent tool `{name}`"
            ));
        }
        let default_caps;
        let caps: &[Capability] = match self.ceilings.get(agent) {
            Some(c) => {
                let listed = match &c.tools {
                    None => false,
                    Some(ToolSelection::All(_)) => true,
                    Some(ToolSelection::List(l)) => matches_any(l, name),
                };
                if !listed {
                    return Err(format!("tool `{name}` is not in `agents.{agent}.tools`"));
                }
                &c.capabilities
            }
            None => {
                default_caps = self.cfg.default_capabilities.clone();
                &default_caps
            }
        };
        if let Some(missing) = spec.capabilities.iter().find(|c| !caps.contains(c)) {
            return Err(format!(
                "tool `{name}` needs capability `{}`, which agent `{agent}` lacks \
                 (`agents.{agent}.capabilities`)",
                serde_json::to_value(missing)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// Whether the model of `agent`, talking to `sender`, should be shown `spec`: layers 2
    /// and 3 allow it outright or after approval.
    pub fn visible(&self, sender: &Principal, agent: &str, spec: &ToolSpec) -> bool {
        !matches!(
            self.decide(sender, Some(agent), spec),
            Decision::Deny { .. }
        )
    }

    /// Whether `principal` may call `spec` directly (outright or after approval): what the
    /// control API and the MCP server list. Agent principals act as themselves.
    pub fn callable_by(&self, principal: &Principal, spec: &ToolSpec) -> bool {
        let agent = match principal {
            Principal::Agent { id } => Some(id.as_str()),
            _ => None,
        };
        !matches!(self.decide(principal, agent, spec), Decision::Deny { .. })
    }

    /// May `principal` decide approval requests? Listed approvers (person ids or token
    /// names), or owners when the list is empty.
    pub fn may_approve(&self, principal: &Principal) -> bool {
        let approvers = &self.hitl.approvers;
        if approvers.is_empty() {
            return self.tier(principal) == Tier::Person(Access::Owner);
        }
        match principal {
            Principal::Operator => true,
            Principal::Token { name, .. } => approvers.iter().any(|a| a == name),
            Principal::Person { id } => {
                let pid = self.person_id(principal);
                approvers.iter().any(|a| a == id || Some(a) == pid.as_ref())
            }
            _ => false,
        }
    }

    /// `security.hitl` as configured.
    pub fn hitl(&self) -> &HitlConfig {
        &self.hitl
    }
}
