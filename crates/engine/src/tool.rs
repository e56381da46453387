//! Tools: what they declare ([`ToolSpec`]), how they run ([`Tool`]) and what they get
//! ([`ToolContext`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::config::Config;
use crate::principal::Principal;
pub use crate::spec::{Capability, Layer, SideEffects, ToolError, ToolOutput, ToolSpec};

/// A tool. Most are written as an `async fn` with [`crate::tool`]; implement this by hand for
/// tools whose schema is only known at run time and register them with
/// `strata_runtime::Registry::register`.
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
    pub env: Arc<Env>,
    /// Inter-agent depth of the turn that made this call (0 for a person's message).
    pub depth: u32,
    /// The access policy the Invoker checked this call against: tools that decide more
    /// (who may be told what, who may change the team) ask it rather than building their own.
    pub policy: Arc<crate::access::AccessPolicy>,
    /// The tools of the Invoker running this call (`list_capabilities`).
    pub tools: Arc<dyn ToolDirectory>,
    /// The taint of the turn making the call, if a turn makes it: `ask_agent` passes it on,
    /// memory tools mark what a tainted turn stores and taint a turn that recalls it.
    pub taint: Option<crate::taint::Taint>,
    /// The call's idempotency key, when a turn journal recorded the call before it ran (see
    /// [`Self::idempotency_key`]).
    pub idempotency_key: Option<String>,
    /// The call is being run again: a turn resumed after a crash found it started without an
    /// outcome, and the tool is declared `idempotent` (see [`Self::is_resumed_call`]).
    pub resumed: bool,
}

/// The tools a call can see: the registry of the Invoker running it, as a tool sees it.
pub trait ToolDirectory: Send + Sync {
    /// Every tool's spec, sorted by name.
    fn specs(&self) -> Vec<ToolSpec>;
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
    /// The key that names this call across a crash: derived from the turn, the step, the tool
    /// and its arguments, so a turn resumed after a crash calls a tool again with the same
    /// key. A tool declared `#[tool(idempotent)]` makes a second call with a key it has seen
    /// do nothing new (return the first call's result, or an equivalent): pass it to the
    /// other side (an `Idempotency-Key` header, a message nonce) or keep it with what the
    /// call stored. `None` outside a journaled turn (the CLI, the control API).
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// True when this call had started before a crash and is run again under the same
    /// [`Self::idempotency_key`]: its first run may have taken effect. A tool that honours
    /// keys only through some of the systems it reaches (a message nonce on one connector,
    /// not on another) refuses to act again here where the key would not be honoured, so
    /// the call stays at most once.
    pub fn is_resumed_call(&self) -> bool {
        self.resumed
    }

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

/// Starts an external MCP server in the running process and registers its tools
/// (`install_mcp`); `serve`'s MCP clients are one.
#[async_trait::async_trait]
pub trait McpHost: Send + Sync {
    /// Connects `name` as `cfg` says; the names of the tools it registered.
    async fn add_server(
        &self,
        name: &str,
        cfg: crate::config::McpServerConfig,
    ) -> Result<Vec<String>, String>;

    /// Why this process cannot run MCP servers at all (a binary built without an MCP
    /// client), so `install_mcp` refuses before it writes anything; `None` when it can.
    fn unavailable(&self) -> Option<String> {
        None
    }
}

/// Process-wide handles every tool call shares: config, resolved directories, and the vault
/// and memory when the deployment has them. (The session store joins with the agent runtime.)
pub struct Env {
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
    agents: std::sync::OnceLock<std::sync::Weak<dyn crate::turns::AgentDirectory>>,
    audit: std::sync::OnceLock<Arc<dyn crate::audit::AuditSink>>,
    mcp: std::sync::OnceLock<Arc<dyn McpHost>>,
    services: Services,
}

/// The runtime's services an [`Env`] carries by type (goals, usage metering, schedules, the
/// connector hub, …): the contract does not name them, the crates that provide and use them
/// do (`strata-runtime` has typed accessors). Shaped like `http::Extensions`.
#[derive(Default)]
struct Services(
    std::sync::Mutex<
        std::collections::HashMap<std::any::TypeId, Box<dyn std::any::Any + Send + Sync>>,
    >,
);

impl Services {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        std::collections::HashMap<std::any::TypeId, Box<dyn std::any::Any + Send + Sync>>,
    > {
        // A panic while the map was held leaves it whole (inserts are single calls).
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl fmt::Debug for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Env")
            .field("overlay_dir", &self.overlay_dir)
            .field("data_dir", &self.data_dir)
            .field("vault", &self.vault.is_some())
            .field("memory", &self.memory.is_some())
            .finish_non_exhaustive()
    }
}

impl Env {
    /// Builds the environment from a loaded config, without vault or memory.
    pub fn new(config: Config, overlay_dir: PathBuf, data_dir: PathBuf) -> Self {
        Env {
            config,
            overlay_dir,
            data_dir,
            vault: None,
            memory: None,
            agents: std::sync::OnceLock::new(),
            audit: std::sync::OnceLock::new(),
            mcp: std::sync::OnceLock::new(),
            services: Services::default(),
        }
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

    /// Sets the audit log tools write their own events to (once; the first Invoker does).
    pub fn attach_audit(&self, audit: Arc<dyn crate::audit::AuditSink>) {
        let _ = self.audit.set(audit);
    }

    /// Records an event of a tool's own in the audit log (a JSON object with an `event`
    /// field); nothing when no Invoker was built on this environment.
    pub fn audit_event(&self, event: &serde_json::Value) {
        if let Some(a) = self.audit.get() {
            a.event(event);
        }
    }

    /// Sets what starts MCP servers at run time (`serve`'s clients; once).
    pub fn attach_mcp(&self, host: Arc<dyn McpHost>) {
        let _ = self.mcp.set(host);
    }

    /// What starts MCP servers at run time, when this process runs them (`serve`).
    pub fn mcp(&self) -> Option<&Arc<dyn McpHost>> {
        self.mcp.get()
    }

    /// Gives the environment a service of type `T` (an `Arc` of one, usually), found again
    /// with [`Env::service`]. The first one provided stays; later calls are ignored.
    pub fn provide<T: Clone + Send + Sync + 'static>(&self, service: T) {
        self.services
            .lock()
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Box::new(service));
    }

    /// The service of type `T`, once provided.
    pub fn service<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        self.services
            .lock()
            .get(&std::any::TypeId::of::<T>())
            .and_then(|b| b.downcast_ref::<T>())
            .cloned()
    }

    /// The service of type `T`, made with `T::default()` (and kept) on first use: for the
    /// services every environment has (the connector hub, the turns in progress).
    pub fn service_or_default<T: Clone + Default + Send + Sync + 'static>(&self) -> T {
        self.services
            .lock()
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()))
            .downcast_ref::<T>()
            .cloned()
            .unwrap_or_default()
    }

    /// Adds a vault.
    pub fn with_vault(mut self, vault: Arc<dyn crate::secret::Vault>) -> Self {
        self.vault = Some(vault);
        self
    }

    /// Resolves a config value that may name a secret (`vault:<key>`, `env:<VAR>`, or a
    /// literal) against this process's vault: the one way the launcher reads a secret, so no
    /// command resolves `vault:` without the vault it opened. Errors name `config_key`.
    pub fn secret(
        &self,
        value: &str,
        config_key: &str,
    ) -> Result<crate::secret::Secret, crate::secret::SecretError> {
        crate::secret::resolve_ref(value, self.vault.as_deref(), config_key)
    }

    /// Adds a memory backend (counted by [`crate::memory::Metered`]).
    pub fn with_memory(mut self, memory: Arc<dyn crate::memory::MemoryBackend>) -> Self {
        self.memory = Some(Arc::new(crate::memory::Metered(memory)));
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
    /// The source file that declared it (`file!()` where `#[tool]` was written): how `strata
    /// doctor` finds a file in an overlay's `src/tools/` that registered no tool.
    pub file: &'static str,
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
