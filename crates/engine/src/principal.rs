//! Who is calling.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The caller of a tool or the sender of a message. Access control (the security issue) decides
/// from this what the caller may do; the audit log records it on every invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Principal {
    /// A person from `team.json` (or a connector user id when unknown to the team).
    Person {
        /// Team id or connector-specific user id.
        id: String,
    },
    /// Another agent of this deployment.
    Agent {
        /// Agent id.
        id: String,
    },
    /// An API token of the control plane.
    Token {
        /// The token's principal name from config (never the token itself).
        name: String,
        /// The tier the token was given (`server.tokens[].tier`).
        tier: Access,
    },
    /// The local operator at the command line (`strata invoke`).
    Operator,
    /// Nobody we know.
    Unknown,
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Person { id } => write!(f, "person:{id}"),
            Principal::Agent { id } => write!(f, "agent:{id}"),
            Principal::Token { name, .. } => write!(f, "token:{name}"),
            Principal::Operator => f.write_str("operator"),
            Principal::Unknown => f.write_str("unknown"),
        }
    }
}

/// A person's tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Everything.
    Owner,
    /// Everything, gated tools via approval.
    Admin,
    /// Safe tools, assistant agents.
    Staff,
    /// Read-only.
    Viewer,
}

/// An agent's tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentTier {
    /// May talk to any agent, wide tool access.
    Privileged,
    /// Coordinates others.
    Coordinator,
    /// Works for people; no inter-agent tools.
    Assistant,
}
