//! What a tool is, as data: its spec (name, schema, capabilities, side effects), its layer,
//! its output and its errors. The bottom rung: nothing here reaches up.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a tool may touch. Access control (layer 3) uses it to cap what an agent can call:
/// an agent without `subprocess` never sees shell tools.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// Reads local files or state.
    Read,
    /// Creates or changes local files.
    FileWrite,
    /// Talks to other hosts.
    Network,
    /// Starts processes.
    Subprocess,
    /// Reads or writes agent memory.
    Memory,
    /// Sends messages to people or agents.
    Messaging,
    /// Uses vault secrets.
    Secrets,
}

impl Capability {
    /// Every capability, in declaration order.
    pub const ALL: [Capability; 7] = [
        Capability::Read,
        Capability::FileWrite,
        Capability::Network,
        Capability::Subprocess,
        Capability::Memory,
        Capability::Messaging,
        Capability::Secrets,
    ];

    /// The name used in config and schemas (`file-write`).
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Read => "read",
            Capability::FileWrite => "file-write",
            Capability::Network => "network",
            Capability::Subprocess => "subprocess",
            Capability::Memory => "memory",
            Capability::Messaging => "messaging",
            Capability::Secrets => "secrets",
        }
    }
}

/// How far a call's effects reach.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SideEffects {
    /// Changes nothing: safe to retry, safe to call speculatively.
    #[default]
    None,
    /// Changes state on this machine (files, memory, the database).
    Local,
    /// Acts on the world outside this machine (sends, posts, buys, deletes remotely).
    External,
}

/// Which layer a tool came from. Later layers shadow earlier ones with the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layer {
    /// Engine crates (`crates/`).
    Core,
    /// A domain crate under `modules/`, by its module name.
    Module(String),
    /// The deployment's own crate.
    Overlay,
    /// Registered at run time with `strata_runtime::Registry::register` (MCP client, embedders).
    Runtime,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layer::Core => f.write_str("core"),
            Layer::Module(m) => write!(f, "module:{m}"),
            Layer::Overlay => f.write_str("overlay"),
            Layer::Runtime => f.write_str("runtime"),
        }
    }
}

impl Serialize for Layer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Everything a caller needs to know about a tool before calling it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    /// Unique name (`[A-Za-z0-9_-]+`).
    pub name: String,
    /// What it does, for the model and for people.
    pub description: String,
    /// JSON Schema (draft 2020-12) of the arguments object.
    pub input_schema: Value,
    /// What the tool may touch.
    pub capabilities: Vec<Capability>,
    /// How far its effects reach.
    pub side_effects: SideEffects,
    /// Every call waits for a human's approval.
    pub hitl: bool,
    /// Its output carries content from the web (content safety applies).
    pub web_facing: bool,
    /// It honours an idempotency key ([`crate::ToolContext::idempotency_key`]): called twice
    /// with the same key, the effect happens once. A turn resumed after a crash runs a call
    /// whose outcome is unknown again only when this holds (or the tool has no side effects).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub idempotent: bool,
    /// For a tool whose results are untrusted content ([`web_facing`](Self::web_facing)):
    /// the fields of its structured result whose values are trusted all the same, by name at
    /// any depth — what the system behind it writes and vouches for (a transfer's `sender`
    /// and `amount`, a message's `sender`), beside what a third party wrote (its `subject`,
    /// its `body`). A value found only in these fields is not steered; the rest of the result
    /// is untrusted as ever (`docs/SECURITY.md` §5a, "Trust where it is known").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trusted_fields: Vec<String>,
    /// Per-tool timeout; `None` uses `tools.timeout_secs`. Serialised as `timeout_secs`.
    #[serde(
        rename = "timeout_secs",
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_secs"
    )]
    pub timeout: Option<Duration>,
}

impl ToolSpec {
    /// A spec with no capabilities, no side effects, not gated, default timeout.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema,
            capabilities: Vec::new(),
            side_effects: SideEffects::None,
            hitl: false,
            web_facing: false,
            idempotent: false,
            trusted_fields: Vec::new(),
            timeout: None,
        }
    }
}

fn ser_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// What a tool returns on success: any JSON value.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput(pub Value);

impl From<Value> for ToolOutput {
    fn from(v: Value) -> Self {
        ToolOutput(v)
    }
}

/// Why a tool call failed. The Invoker maps `InvalidArgs` to `validation_error` and the rest
/// to `error`; the message goes back to the model verbatim, so make it say what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's schema.
    #[error("invalid argument `{field}`: {message}")]
    InvalidArgs {
        /// Dotted path of the offending field (`.` for the arguments object itself).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    /// A failure with a message.
    pub fn failed(msg: impl fmt::Display) -> Self {
        ToolError::Failed(msg.to_string())
    }

    /// An argument problem, naming the field.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError::InvalidArgs {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<String> for ToolError {
    fn from(s: String) -> Self {
        ToolError::Failed(s)
    }
}

impl From<&str> for ToolError {
    fn from(s: &str) -> Self {
        ToolError::Failed(s.to_owned())
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        ToolError::Failed(e.to_string())
    }
}

impl From<crate::paths::PathError> for ToolError {
    fn from(e: crate::paths::PathError) -> Self {
        ToolError::Failed(e.to_string())
    }
}
