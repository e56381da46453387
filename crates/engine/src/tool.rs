//! Tools: what they declare ([`ToolSpec`]), how they run ([`Tool`]) and what they get
//! ([`ToolContext`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Config;
use crate::principal::Principal;

/// What a tool may touch. Access control (layer 3) uses it to cap what an agent can call:
/// an agent without `subprocess` never sees shell tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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

/// How far a call's effects reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
    /// Registered at run time with [`crate::Registry::register`] (MCP client, embedders).
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

/// A tool. Most are written as an `async fn` with [`crate::tool`]; implement this by hand for
/// tools whose schema is only known at run time and register them with
/// [`crate::Registry::register`].
///
/// ```
/// use strata_engine::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
///
/// struct Echo(ToolSpec);
///
/// #[strata_engine::async_trait]
/// impl Tool for Echo {
///     fn spec(&self) -> &ToolSpec { &self.0 }
///     async fn call(&self, _ctx: &ToolContext, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
///         Ok(ToolOutput(args))
///     }
/// }
/// ```
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's declaration.
    fn spec(&self) -> &ToolSpec;
    /// Checks arguments before any guard or approval sees the call. The default checks the
    /// structure against `spec().input_schema` ([`crate::schema::check_schema`]); `#[tool]`
    /// functions check with their typed deserialiser.
    fn validate(&self, args: &Value) -> Result<(), ToolError> {
        crate::schema::check_schema(&self.spec().input_schema, args)
    }
    /// Runs the tool. `args` has passed the Invoker's checks; typed tools deserialise it again.
    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError>;
}

/// Where a call comes from and what it may use. Cheap to clone.
#[derive(Clone)]
pub struct ToolContext {
    /// The agent on whose behalf the tool runs, if any.
    pub agent_id: Option<String>,
    /// The conversation session, if any.
    pub session_id: Option<String>,
    /// The channel (connector-specific id), if any.
    pub channel_id: Option<String>,
    /// Who is calling.
    pub principal: Principal,
    /// The request id of this invocation.
    pub request_id: String,
    /// The runtime's shared handles.
    pub env: Arc<RuntimeEnv>,
    /// Inter-agent depth of the turn that made this call (0 for a person's message).
    pub depth: u32,
    /// The access policy the Invoker checked this call against: tools that decide more
    /// (who may be told what, who may change the team) ask it rather than building their own.
    pub policy: Arc<crate::access::AccessPolicy>,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("agent_id", &self.agent_id)
            .field("session_id", &self.session_id)
            .field("channel_id", &self.channel_id)
            .field("principal", &self.principal)
            .field("request_id", &self.request_id)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// The merged configuration.
    pub fn config(&self) -> &Config {
        &self.env.config
    }

    /// Roots a file tool may touch, resolved against the overlay directory.
    pub fn tool_roots(&self) -> Vec<PathBuf> {
        self.env.tool_roots()
    }

    /// Resolves a path given by a caller (relative to the overlay directory), requires it
    /// inside `tools.roots`, and refuses secret files and the data directory. Every file tool
    /// goes through this.
    pub fn resolve_path(&self, path: &str) -> Result<PathBuf, crate::paths::PathError> {
        crate::paths::resolve_guarded(
            std::path::Path::new(path),
            &self.env.overlay_dir,
            &self.env.tool_roots(),
            std::slice::from_ref(&self.env.data_dir),
        )
    }

    /// The parent directory (created where missing) and file name for writing a caller's
    /// path, reached without following symlinks ([`crate::paths::open_parent_guarded`]).
    pub fn open_parent(
        &self,
        path: &str,
    ) -> Result<(std::os::fd::OwnedFd, std::ffi::OsString, PathBuf), crate::paths::PathError> {
        crate::paths::open_parent_guarded(
            std::path::Path::new(path),
            &self.env.overlay_dir,
            &self.env.tool_roots(),
            std::slice::from_ref(&self.env.data_dir),
        )
    }

    /// Opens a caller's path for reading under the rules of [`Self::resolve_path`], with no
    /// window between check and open ([`crate::paths::open_guarded`]). Tools that read a
    /// file open it through this, never by the resolved path.
    pub fn open_path(
        &self,
        path: &str,
    ) -> Result<(std::fs::File, PathBuf), crate::paths::PathError> {
        crate::paths::open_guarded(
            std::path::Path::new(path),
            &self.env.overlay_dir,
            &self.env.tool_roots(),
            std::slice::from_ref(&self.env.data_dir),
        )
    }
}

/// Process-wide handles every tool call shares: config, resolved directories, and the vault
/// and memory when the deployment has them. (The session store joins with the agent runtime.)
pub struct RuntimeEnv {
    /// The merged configuration.
    pub config: Config,
    /// The overlay directory (absolute).
    pub overlay_dir: PathBuf,
    /// Where runtime data lives (absolute).
    pub data_dir: PathBuf,
    /// Secrets, when a vault is configured.
    pub vault: Option<Arc<dyn crate::secret::Vault>>,
    /// Agent memory, when a backend is configured.
    pub memory: Option<Arc<dyn crate::memory::MemoryBackend>>,
    registry: std::sync::OnceLock<std::sync::Weak<crate::Registry>>,
    agents: std::sync::OnceLock<std::sync::Weak<dyn crate::turns::AgentDirectory>>,
    connectors: Arc<crate::connector::ConnectorHub>,
    turns: Arc<crate::turns::TurnRegistry>,
    activity: Arc<crate::turns::ActivityBoard>,
}

impl fmt::Debug for RuntimeEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeEnv")
            .field("overlay_dir", &self.overlay_dir)
            .field("data_dir", &self.data_dir)
            .field("vault", &self.vault.is_some())
            .field("memory", &self.memory.is_some())
            .finish_non_exhaustive()
    }
}

impl RuntimeEnv {
    /// Builds the environment from a loaded config, without vault or memory.
    pub fn new(config: Config, overlay_dir: PathBuf, data_dir: PathBuf) -> Self {
        RuntimeEnv {
            config,
            overlay_dir,
            data_dir,
            vault: None,
            memory: None,
            registry: std::sync::OnceLock::new(),
            agents: std::sync::OnceLock::new(),
            connectors: Arc::default(),
            turns: Arc::default(),
            activity: Arc::default(),
        }
    }

    /// Makes `registry` reachable from tools (`list_capabilities`). The Invoker does this;
    /// the first one attached stays. Held weakly: the environment never keeps it alive.
    pub fn attach_registry(&self, registry: &Arc<crate::Registry>) {
        let _ = self.registry.set(Arc::downgrade(registry));
    }

    /// The tool registry, when an Invoker runs over this environment.
    pub fn registry(&self) -> Option<Arc<crate::Registry>> {
        self.registry.get().and_then(std::sync::Weak::upgrade)
    }

    /// Makes the running agents reachable from tools (`ask_agent`, `send_to_agent`). Held
    /// weakly; the first one attached stays.
    pub fn attach_agents(&self, agents: std::sync::Weak<dyn crate::turns::AgentDirectory>) {
        let _ = self.agents.set(agents);
    }

    /// The running agents, when there are any.
    pub fn agents(&self) -> Option<Arc<dyn crate::turns::AgentDirectory>> {
        self.agents.get().and_then(std::sync::Weak::upgrade)
    }

    /// The running connectors and the agents' home channels (`send_message`,
    /// `send_to_agent`). Empty until connectors register.
    pub fn connectors(&self) -> &Arc<crate::connector::ConnectorHub> {
        &self.connectors
    }

    /// What running turns are doing (see [`crate::turns::ActivityBoard`]).
    pub fn activity(&self) -> &Arc<crate::turns::ActivityBoard> {
        &self.activity
    }

    /// Turns in progress (see [`crate::turns::TurnRegistry`]).
    pub fn turns(&self) -> &Arc<crate::turns::TurnRegistry> {
        &self.turns
    }

    /// Adds a vault.
    pub fn with_vault(mut self, vault: Arc<dyn crate::secret::Vault>) -> Self {
        self.vault = Some(vault);
        self
    }

    /// Resolves a config value that may name a secret (`vault:<key>`, `env:<VAR>`, or a
    /// literal) against this process's vault: the one way the launcher reads a secret, so no
    /// command resolves `vault:` without the vault it opened. Errors name `config_key`.
    pub fn secret(&self, value: &str, config_key: &str) -> Result<crate::secret::Secret, String> {
        crate::secret::resolve_ref(value, self.vault.as_deref(), config_key)
    }

    /// Adds a memory backend.
    pub fn with_memory(mut self, memory: Arc<dyn crate::memory::MemoryBackend>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// `tools.roots`, relative entries taken from the overlay directory.
    pub fn tool_roots(&self) -> Vec<PathBuf> {
        self.config
            .tools
            .roots
            .iter()
            .map(|r| self.overlay_dir.join(r))
            .collect()
    }
}

/// A compile-time registration produced by `#[tool]`. Collected with `inventory`.
pub struct ToolRegistration {
    /// `CARGO_PKG_NAME` of the crate that declared the tool: decides its layer.
    pub crate_name: &'static str,
    /// The tool's name (also in its spec; here so duplicates are found without building).
    pub name: &'static str,
    /// Builds the tool.
    pub make: fn() -> Box<dyn Tool>,
}

inventory::collect!(ToolRegistration);

/// How a crate of tools declares its layer. Core crates and modules submit one (with
/// [`crate::declare_core!`] / [`crate::declare_module!`]); crates without one are overlay.
#[derive(Debug)]
pub struct Component {
    /// `CARGO_PKG_NAME` of the declaring crate.
    pub crate_name: &'static str,
    /// What it is.
    pub kind: ComponentKind,
}

/// Kind of a [`Component`].
#[derive(Debug)]
pub enum ComponentKind {
    /// A core crate.
    Core,
    /// A module, with its name and embedded `config/default.yaml`.
    Module {
        /// Module name, e.g. `ops`: its config lives under `modules.<name>`.
        name: &'static str,
        /// The module's default configuration (YAML), merged after core, before the overlay.
        default_config: &'static str,
        /// Checks the module's section (`modules.<name>`) against its config type.
        validate: Option<crate::config::ModuleValidator>,
        /// The module crate's `config/` directory at build time.
        config_dir: &'static str,
        /// The module crate's `skills/` directory at build time.
        skills_dir: &'static str,
    },
}

inventory::collect!(Component);

/// Declares the current crate a core crate: its tools get the `core` layer.
#[macro_export]
macro_rules! declare_core {
    () => {
        $crate::__private::inventory::submit! {
            $crate::Component { crate_name: ::core::env!("CARGO_PKG_NAME"), kind: $crate::ComponentKind::Core }
        }
    };
}

/// Declares the current crate a module. The module's defaults are its crate's
/// `config/default.yaml` (embedded), merged under `modules.<name>`; the optional type is the
/// module's config section, checked at start (unknown keys are reported with a suggestion).
///
/// ```ignore
/// strata_engine::declare_module!("ops", OpsConfig);
/// ```
#[macro_export]
macro_rules! declare_module {
    ($name:literal) => {
        $crate::declare_module!(@inner $name, ::core::option::Option::None);
    };
    ($name:literal, $config:ty) => {
        $crate::declare_module!(@inner $name, ::core::option::Option::Some(
            $crate::config::validate_module_section::<$config> as $crate::config::ModuleValidator
        ));
    };
    (@inner $name:literal, $validate:expr) => {
        $crate::__private::inventory::submit! {
            $crate::Component {
                crate_name: ::core::env!("CARGO_PKG_NAME"),
                kind: $crate::ComponentKind::Module {
                    name: $name,
                    default_config: ::core::include_str!(::core::concat!(
                        ::core::env!("CARGO_MANIFEST_DIR"), "/config/default.yaml"
                    )),
                    validate: $validate,
                    config_dir: ::core::concat!(::core::env!("CARGO_MANIFEST_DIR"), "/config"),
                    skills_dir: ::core::concat!(::core::env!("CARGO_MANIFEST_DIR"), "/skills"),
                },
            }
        }
    };
}
