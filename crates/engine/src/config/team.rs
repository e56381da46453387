//! `team` (from `config/team.json`): people, their contacts and tiers, agent tiers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Access, AgentTier};

/// `team` (from `config/team.json`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TeamConfig {
    /// People.
    pub people: Vec<Person>,
    /// Agents with their tiers.
    pub agents: Vec<TeamAgent>,
    /// Connector user ids treated as owners.
    pub admin_users: Vec<String>,
}

/// A person of the team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Person {
    /// Stable id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Access tier.
    pub access: Access,
    /// Ids per connector (`discord: "<snowflake>"`).
    #[serde(default)]
    pub contacts: BTreeMap<String, String>,
    /// What turns for this person may spend, across agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::BudgetConfig>,
    /// What they do in the team (`Finance lead`), told to the model with their name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Their time zone (IANA, `Europe/Berlin`): the model is told their local time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// An agent's entry in the team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamAgent {
    /// Agent id.
    pub id: String,
    /// Tier.
    pub agent_tier: AgentTier,
}
