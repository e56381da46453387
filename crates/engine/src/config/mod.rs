//! The configuration model and its layered loading.
//!
//! Sources, later wins:
//!
//! 1. engine defaults ([`Config::default`]), labelled `core`;
//! 2. each linked module's embedded `config/default.yaml`, nested under `modules.<name>`, in
//!    the declared module order, labelled `module:<name>`;
//! 3. the overlay's `config/config.yaml`, `config/agents.yaml` (both at the root),
//!    `config/team.json` (under `team`) and `config/mcp.yaml` (under `mcp`);
//! 4. with a profile `P`: `config/config.P.yaml` and `config/agents.P.yaml`;
//! 5. `STRATA_*` environment variables, `__` nesting (`STRATA_SERVER__PORT=9000`);
//! 6. flags (`--data-dir`, `--set key=value`).
//!
//! Values of the form `vault:<key>` are kept verbatim here; the vault resolves them at start.

pub use crate::principal::{Access, AgentTier};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Json, Serialized, Yaml};
use figment::value::{Dict, Map, Value as FValue};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod connectors;
mod memory;
mod security;
pub use connectors::*;
pub use memory::*;
pub use security::*;

/// The whole merged configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where databases, the audit log and tokens live. Default `<overlay>/data`; relative paths
    /// are taken from the overlay directory.
    pub data_dir: Option<PathBuf>,
    /// Logging.
    pub log: LogConfig,
    /// The HTTP server (control API, MCP endpoint).
    pub server: ServerConfig,
    /// Tool execution.
    pub tools: ToolsConfig,
    /// Defaults for agents that do not set their own.
    pub defaults: DefaultsConfig,
    /// Conversation sessions: cache size, summarisation, retention.
    pub sessions: SessionsConfig,
    /// Agents by id (usually from `config/agents.yaml`).
    pub agents: BTreeMap<String, AgentConfig>,
    /// People and agents of the team (from `config/team.json`).
    pub team: TeamConfig,
    /// External MCP servers (from `config/mcp.yaml`).
    pub mcp: McpConfig,
    /// Access control, rate limits, approvals, content safety, network guard, audit.
    pub security: SecurityConfig,
    /// Agent memory.
    pub memory: MemoryConfig,
    /// Connectors (Discord accounts).
    pub connectors: ConnectorsConfig,
    /// Module sections by module name; each module checks its own section at start.
    pub modules: BTreeMap<String, Value>,
}

/// Top-level keys, used to decide which `STRATA_*` variables are configuration.
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "data_dir",
    "log",
    "server",
    "tools",
    "defaults",
    "sessions",
    "agents",
    "team",
    "mcp",
    "security",
    "memory",
    "connectors",
    "modules",
];

impl Config {
    /// A module's section deserialised into its type (`modules.<name>`); missing → default.
    pub fn module<T: serde::de::DeserializeOwned + Default>(
        &self,
        name: &str,
    ) -> Result<T, serde_json::Error> {
        match self.modules.get(name) {
            Some(v) => serde_json::from_value(v.clone()),
            None => Ok(T::default()),
        }
    }
}

/// `log.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `trace`, `debug`, `info`, `warn`, `error`, or a full filter (`info,strata_engine=debug`).
    /// `RUST_LOG` wins when set.
    pub level: String,
    /// Output format.
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `server.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to bind. A non-loopback address needs at least one configured token.
    pub bind: String,
    /// Port to bind.
    pub port: u16,
    /// Control-API tokens. None configured: a per-boot token is generated, printed once and
    /// written to `<data_dir>/api-token` (0600).
    pub tokens: Vec<ApiToken>,
    /// Largest request body accepted (bytes).
    pub max_body_bytes: usize,
    /// A client that sends no body bytes for this long gets 408.
    pub read_timeout_secs: u64,
    /// `X-API-Key` for `POST /execute` (separate from control tokens); unset disables it.
    pub execute_api_key: Option<String>,
    /// Directories `GET /api/artifacts` may list and read, relative to the overlay.
    pub artifact_roots: Vec<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1".into(),
            port: 8770,
            tokens: Vec::new(),
            max_body_bytes: 65_536,
            read_timeout_secs: 30,
            execute_api_key: None,
            artifact_roots: vec!["tmp".into(), "agents".into()],
        }
    }
}

/// One control-API token: who it is and what it may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiToken {
    /// Principal name recorded in the audit log (`token:<name>`).
    pub name: String,
    /// The token: `vault:<key>`, `env:<VAR>` or literal.
    pub token: String,
    /// Tools it may list and invoke (names or `prefix*`); unset means all.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Tier for access control (default `staff`: a token is not automatically an owner).
    #[serde(default)]
    pub tier: Option<Access>,
}

/// `tools.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Directories file tools may touch; relative entries are taken from the overlay.
    pub roots: Vec<PathBuf>,
    /// Timeout for a tool that declares none.
    pub timeout_secs: u64,
    /// The audit log; relative to the data dir. Default `audit.jsonl`.
    pub audit_log: PathBuf,
    /// Secrets `http_request` may attach, by name, each bound to the hosts it may go to.
    pub http_secrets: BTreeMap<String, HttpSecret>,
    /// Folders `search_notes` searches, relative to the overlay.
    pub notes_dirs: Vec<PathBuf>,
    /// `web_search` backends.
    pub web_search: WebSearchConfig,
    /// `terminal_exec`: its sandbox, workspace and limits.
    pub terminal: TerminalConfig,
}

/// `tools.terminal.sandbox`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// bubblewrap when it works here, else Landlock, else `terminal_exec` refuses to run.
    #[default]
    Auto,
    /// bubblewrap or refuse.
    Bubblewrap,
    /// Landlock or refuse.
    Landlock,
    /// No filesystem or network isolation (rlimits, a cleared environment and the process
    /// group kill still apply). Only for hosts that are themselves throwaway.
    None,
}

/// `tools.terminal.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TerminalConfig {
    /// Isolation backend.
    pub sandbox: SandboxMode,
    /// Parent of the per-agent workspaces (`<this>/<agent id>`), relative to the overlay.
    pub workspace: PathBuf,
    /// Directories readable inside the sandbox; relative entries are taken from the overlay.
    /// The overlay's `config/` and the data dir are never readable.
    pub read_roots: Vec<PathBuf>,
    /// Network for every agent's commands (default off).
    pub network: bool,
    /// Agents whose commands get network even when `network` is off.
    pub network_agents: Vec<String>,
    /// Environment variables passed from strata's own environment (besides PATH, LANG,
    /// LC_ALL, TERM and TZ; HOME and TMPDIR are set to the workspace).
    pub env_allow: Vec<String>,
    /// Bytes kept of stdout and of stderr each.
    pub max_output_bytes: usize,
    /// Processes at once.
    pub max_processes: u64,
    /// Address space per process, MiB.
    pub memory_mb: u64,
    /// Largest file a command may write, MiB.
    pub file_size_mb: u64,
    /// Extra regular expressions of commands refused outright (the built-in list of
    /// destructive commands always applies; the sandbox, not this list, is the defence).
    pub deny_patterns: Vec<String>,
}

impl Default for TerminalConfig {
    fn default() -> Self {
        TerminalConfig {
            sandbox: SandboxMode::Auto,
            workspace: "tmp/workspaces".into(),
            read_roots: [
                "/usr",
                "/bin",
                "/sbin",
                "/lib",
                "/lib32",
                "/lib64",
                "/etc",
                "knowledgebase",
            ]
            .map(PathBuf::from)
            .to_vec(),
            network: false,
            network_agents: Vec::new(),
            env_allow: Vec::new(),
            max_output_bytes: 32 * 1024,
            max_processes: 256,
            memory_mb: 4096,
            file_size_mb: 1024,
            deny_patterns: Vec::new(),
        }
    }
}

/// `tools.web_search.*`: Brave when it has a key, else Tavily when it has one, else
/// DuckDuckGo's HTML endpoint; a failing backend falls through to the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebSearchConfig {
    /// Brave Search API key (`vault:`/`env:`); unset: the vault's `brave-api-key`, if any.
    pub brave_api_key: Option<String>,
    /// Tavily API key (`vault:`/`env:`); unset: the vault's `tavily-api-key`, if any.
    pub tavily_api_key: Option<String>,
    /// Brave API base URL.
    pub brave_url: String,
    /// Tavily API base URL.
    pub tavily_url: String,
    /// DuckDuckGo HTML endpoint.
    pub duckduckgo_url: String,
}

impl Default for WebSearchConfig {
    fn default() -> Self {
        WebSearchConfig {
            brave_api_key: None,
            tavily_api_key: None,
            brave_url: "https://api.search.brave.com".into(),
            tavily_url: "https://api.tavily.com".into(),
            duckduckgo_url: "https://html.duckduckgo.com/html/".into(),
        }
    }
}

/// `tools.http_secrets.<name>`: a credential `http_request` attaches only for its hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSecret {
    /// `vault:<key>`, `env:<VAR>` (never a literal in config).
    pub value: String,
    /// Host names it may be sent to (exact, case-insensitive).
    pub hosts: Vec<String>,
    /// Header that carries it (default `Authorization`).
    #[serde(default)]
    pub header: Option<String>,
    /// Text before the value (default `Bearer ` for `Authorization`, none otherwise).
    #[serde(default)]
    pub prefix: Option<String>,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            roots: vec!["agents".into(), "tmp".into(), "knowledgebase".into()],
            timeout_secs: 30,
            audit_log: "audit.jsonl".into(),
            http_secrets: BTreeMap::new(),
            notes_dirs: vec!["knowledgebase".into(), "codex".into()],
            web_search: WebSearchConfig::default(),
            terminal: TerminalConfig::default(),
        }
    }
}

/// `sessions.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    /// Sessions kept in memory; the rest are on disk and reloaded on use.
    pub max_live: usize,
    /// Summarise a session after this many turns since the last summary (0 = never).
    pub summarize_after: u32,
    /// Turns kept verbatim after a summary.
    pub keep_turns: u32,
    /// Delete sessions idle for longer than this many days (0 = keep forever).
    pub retention_days: u32,
    /// The session database, relative to the data dir.
    pub database: PathBuf,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            max_live: 1024,
            summarize_after: 40,
            keep_turns: 6,
            retention_days: 90,
            database: "strata.db".into(),
        }
    }
}

/// `defaults.*`
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DefaultsConfig {
    /// Provider for agents without their own `llm`.
    pub llm: Option<LlmConfig>,
    /// Agent used by `strata chat` and `strata repl` when `--agent` is not given.
    pub agent: Option<String>,
}

/// Which model an agent talks to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// `openai`, `anthropic`, `gemini`, `vertex` or `claude-code`.
    pub provider: String,
    /// Model name (`google/` prefixes are stripped for Gemini and Vertex).
    #[serde(default)]
    pub model: Option<String>,
    /// API base URL: any OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio), or a
    /// proxy. Defaults to the vendor's.
    #[serde(default)]
    pub base_url: Option<String>,
    /// API key: `vault:<key>` (from the vault), `env:<VAR>` (from the environment), or literal.
    #[serde(default)]
    pub api_key: Option<String>,
    /// Vertex AI: Google Cloud project.
    #[serde(default)]
    pub project: Option<String>,
    /// Vertex AI: region (default `global`).
    #[serde(default)]
    pub region: Option<String>,
    /// Vertex AI: command whose stdout is a bearer token (e.g. `gcloud auth print-access-token`).
    #[serde(default)]
    pub token_command: Option<String>,
    /// Vertex AI: environment variable holding a bearer token (used when no command is set).
    #[serde(default)]
    pub token_env: Option<String>,
    /// Claude Code: the `claude` executable (default `claude` on PATH).
    #[serde(default)]
    pub command: Option<String>,
    /// Environment variables passed through to the Claude Code CLI or the Vertex token command
    /// (besides PATH, HOME, LANG and a few basics; nothing else is).
    #[serde(default)]
    pub env_allow: Vec<String>,
    /// Output token cap (Anthropic requires one; default 4096).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Seconds to establish a connection (default 10).
    #[serde(default)]
    pub connect_timeout_secs: Option<u64>,
    /// Seconds for a whole request, or the CLI's wall clock (default 120; 600 for claude-code).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Attempts on 429, 5xx and connection errors (default 3).
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// First retry delay in milliseconds, doubled per attempt with jitter (default 500).
    #[serde(default)]
    pub retry_base_ms: Option<u64>,
    /// Stream responses (SSE) where the provider supports it (default false).
    #[serde(default)]
    pub stream: Option<bool>,
}

impl LlmConfig {
    /// A config for `provider` with every option at its default.
    pub fn new(provider: impl Into<String>) -> Self {
        LlmConfig {
            provider: provider.into(),
            model: None,
            base_url: None,
            api_key: None,
            project: None,
            region: None,
            token_command: None,
            token_env: None,
            command: None,
            env_allow: Vec::new(),
            max_tokens: None,
            temperature: None,
            connect_timeout_secs: None,
            timeout_secs: None,
            max_attempts: None,
            retry_base_ms: None,
            stream: None,
        }
    }
}

/// One agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// `false` leaves the agent out of this process (a profile turning off an agent the
    /// base config defines, e.g. the ops instance not running `main`). Default `true`.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    /// Display name.
    pub name: Option<String>,
    /// What the agent is for.
    pub description: Option<String>,
    /// Extra instruction appended to `agents/<id>/AGENTS.md`
    /// (`STRATA_AGENT_<ID>_INSTRUCTION` overrides it).
    pub instruction: Option<String>,
    /// Provider; `defaults.llm` when unset. `STRATA_AGENT_<ID>_MODEL` overrides the model.
    pub llm: Option<LlmConfig>,
    /// Tools the agent may use: `all` or a list of names (`prefix*` allowed). Default: none.
    pub tools: Option<ToolSelection>,
    /// Model ↔ tool rounds per turn before the agent gives up (default 10).
    pub max_rounds: Option<u32>,
    /// Working directory for CLI providers (default `agents/<id>`).
    pub project_dir: Option<PathBuf>,
    /// What the agent's tools may touch (layer 3 of access control); unset =
    /// `security.access_control.default_capabilities` (everything but `subprocess` and
    /// `secrets`).
    pub capabilities: Option<Vec<crate::spec::Capability>>,
    /// Where the agent listens (connectors).
    pub routing: RoutingConfig,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            enabled: true,
            name: None,
            description: None,
            instruction: None,
            llm: None,
            tools: None,
            max_rounds: None,
            project_dir: None,
            capabilities: None,
            routing: RoutingConfig::default(),
        }
    }
}

/// `tools: all` or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolSelection {
    /// The word `all`.
    All(AllTools),
    /// Names or `prefix*` patterns.
    List(Vec<String>),
}

/// The literal `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AllTools {
    /// Every tool.
    All,
}

/// `team` (from `config/team.json`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

/// An agent's entry in the team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamAgent {
    /// Agent id.
    pub id: String,
    /// Tier.
    pub agent_tier: AgentTier,
}

/// `mcp` (from `config/mcp.yaml`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// External MCP servers by name.
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// One external MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// How to reach it.
    pub transport: McpTransport,
    /// Program (stdio).
    #[serde(default)]
    pub command: Option<String>,
    /// Arguments (stdio).
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment for the child (stdio); values may be `vault:` refs.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Endpoint (http).
    #[serde(default)]
    pub url: Option<String>,
    /// Headers (http); values may be `vault:` refs.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// MCP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio,
    /// Streamable HTTP.
    Http,
}

/// Checks a module's section (`modules.<name>`, the `&str`) of the merged figment.
pub type ModuleValidator = fn(&Figment, &str) -> Result<(), Box<figment::Error>>;

/// A module's contribution to config loading.
#[derive(Clone)]
pub struct ModuleConfigSource {
    /// Module name.
    pub name: String,
    /// Its embedded `config/default.yaml`.
    pub default_yaml: &'static str,
    /// Checks `modules.<name>` against the module's config type.
    pub validate: Option<ModuleValidator>,
    /// The module's `config/` directory at build time (for [`LoadedConfig::resolve_config_file`]).
    pub config_dir: Option<PathBuf>,
    /// The module's `skills/` directory at build time.
    pub skills_dir: Option<PathBuf>,
}

/// What to load.
#[derive(Clone, Default)]
pub struct LoadOptions {
    /// The overlay directory.
    pub overlay_dir: PathBuf,
    /// Profile (`--profile`).
    pub profile: Option<String>,
    /// Modules in precedence order (earlier loses).
    pub modules: Vec<ModuleConfigSource>,
    /// Read `STRATA_*` environment variables.
    pub use_env: bool,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--set key=value` pairs, applied last in order.
    pub overrides: Vec<String>,
}

/// A problem with the configuration: says which file or variable, which key, and what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The loaded configuration plus where each value came from.
pub struct LoadedConfig {
    /// The merged, typed configuration.
    pub config: Config,
    /// The overlay directory (absolute).
    pub overlay_dir: PathBuf,
    /// The data directory (absolute).
    pub data_dir: PathBuf,
    /// The selected profile.
    pub profile: Option<String>,
    figment: Figment,
    module_dirs: Vec<PathBuf>,
    /// Modules in precedence order, with their directories.
    pub modules: Vec<ModuleConfigSource>,
}

/// A provider wrapper that labels values with our layer names and can nest a file's content
/// under a key.
struct Labeled<P> {
    inner: P,
    label: String,
    file: Option<PathBuf>,
    nest: Vec<String>,
}

impl<P: Provider> Provider for Labeled<P> {
    fn metadata(&self) -> Metadata {
        let m = Metadata::named(self.label.clone());
        match &self.file {
            Some(f) => m.source(figment::Source::File(f.clone())),
            None => m,
        }
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut data = self.inner.data()?;
        for dict in data.values_mut() {
            for key in self.nest.iter().rev() {
                let inner = std::mem::take(dict);
                dict.insert(key.clone(), FValue::from(inner));
            }
        }
        Ok(data)
    }
}

/// Whether a YAML text holds anything but comments and blank lines.
fn has_content(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && t != "---"
    })
}

fn file_layer(fig: Figment, overlay: &Path, rel: &str, label: &str, nest: &[&str]) -> Figment {
    let path = overlay.join(rel);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return fig,
        Err(e) => {
            let err = figment::Error::from(format!("cannot read {}: {e}", path.display()));
            return fig.merge(Labeled {
                inner: Failing(err),
                label: format!("{label}:{rel}"),
                file: Some(path),
                nest: vec![],
            });
        }
    };
    if !has_content(&text) {
        return fig;
    }
    let nest = nest.iter().map(|s| (*s).to_owned()).collect();
    let label = format!("{label}:{rel}");
    if rel.ends_with(".json") {
        fig.merge(Labeled {
            inner: Json::string(&text),
            label,
            file: Some(path),
            nest,
        })
    } else {
        fig.merge(Labeled {
            inner: Yaml::string(&text),
            label,
            file: Some(path),
            nest,
        })
    }
}

/// A provider that only fails (an unreadable file must not be silently skipped).
struct Failing(figment::Error);

impl Provider for Failing {
    fn metadata(&self) -> Metadata {
        Metadata::named("unreadable")
    }
    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Err(self.0.clone())
    }
}

/// Is a `STRATA_*` variable (prefix stripped) configuration? Keys with `__` are; single words
/// are only when they name a top-level key (`STRATA_DATA_DIR`). Everything else
/// (`STRATA_OVERLAY`, `STRATA_PROFILE`, `STRATA_VAULT_*`, `STRATA_AGENT_*`) belongs to other
/// parts of the launcher.
pub fn is_config_env(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("__") || TOP_LEVEL_KEYS.contains(&k.as_str())
}

impl LoadedConfig {
    /// Loads and checks every layer.
    pub fn load(opts: &LoadOptions) -> Result<LoadedConfig, ConfigError> {
        let overlay_dir = std::path::absolute(&opts.overlay_dir).map_err(|e| {
            ConfigError(format!(
                "overlay directory `{}`: {e}",
                opts.overlay_dir.display()
            ))
        })?;
        if !overlay_dir.is_dir() {
            return Err(ConfigError(format!(
                "overlay directory `{}` does not exist; pass --overlay DIR or set STRATA_OVERLAY",
                overlay_dir.display()
            )));
        }
        let mut fig = Figment::new().merge(Labeled {
            inner: Serialized::defaults(Config::default()),
            label: "core".into(),
            file: None,
            nest: vec![],
        });
        for m in &opts.modules {
            if has_content(m.default_yaml) {
                fig = fig.merge(Labeled {
                    inner: Yaml::string(m.default_yaml),
                    label: format!("module:{}", m.name),
                    file: m.config_dir.as_ref().map(|d| d.join("default.yaml")),
                    nest: vec!["modules".into(), m.name.clone()],
                });
            }
        }
        let o = &overlay_dir;
        fig = file_layer(fig, o, "config/config.yaml", "overlay", &[]);
        fig = file_layer(fig, o, "config/agents.yaml", "overlay", &[]);
        fig = file_layer(fig, o, "config/team.json", "overlay", &["team"]);
        fig = file_layer(fig, o, "config/mcp.yaml", "overlay", &["mcp"]);
        if let Some(p) = &opts.profile {
            if p.is_empty()
                || !p
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(ConfigError(format!(
                    "profile `{p}`: use letters, digits, `-` and `_` only"
                )));
            }
            fig = file_layer(fig, o, &format!("config/config.{p}.yaml"), "profile", &[]);
            fig = file_layer(fig, o, &format!("config/agents.{p}.yaml"), "profile", &[]);
        }
        if opts.use_env {
            fig = fig.merge(
                Env::prefixed("STRATA_")
                    .filter(|k| is_config_env(k.as_str()))
                    .split("__"),
            );
        }
        if let Some(d) = &opts.data_dir {
            fig = fig.merge(Labeled {
                inner: Serialized::default("data_dir", d),
                label: "flag:--data-dir".into(),
                file: None,
                nest: vec![],
            });
        }
        for ov in &opts.overrides {
            let Some((key, raw)) = ov.split_once('=') else {
                return Err(ConfigError(format!(
                    "--set `{ov}`: expected KEY=VALUE, e.g. --set server.port=9000"
                )));
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(ConfigError(format!("--set `{ov}`: the key is empty")));
            }
            let value: FValue = raw.parse().unwrap_or_else(|_| FValue::from(raw.to_owned()));
            fig = fig.merge(Labeled {
                inner: Serialized::default(key, value),
                label: format!("flag:--set {key}"),
                file: None,
                nest: vec![],
            });
        }

        let mut config: Config = fig.extract().map_err(|e| describe(&fig, e))?;
        for m in &opts.modules {
            if let Some(validate) = m.validate {
                validate(&fig, &format!("modules.{}", m.name)).map_err(|e| describe(&fig, *e))?;
            }
        }
        let known: Vec<&str> = opts.modules.iter().map(|m| m.name.as_str()).collect();
        if let Some(unknown) = config.modules.keys().find(|k| !known.contains(&k.as_str())) {
            let hint = suggest(unknown, &known)
                .map(|s| format!("; did you mean `modules.{s}`?"))
                .unwrap_or_default();
            let origin = origin_label(&fig, &format!("modules.{unknown}"));
            return Err(ConfigError(format!(
                "unknown module `modules.{unknown}` (set by {origin}){hint}; modules linked into this binary: {}",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            )));
        }
        // What a layer turned off is gone before anything sees it.
        config.agents.retain(|_, a| a.enabled);
        config.connectors.discord.accounts.retain(|_, a| a.enabled);
        let data_dir = match &config.data_dir {
            Some(d) if d.is_absolute() => d.clone(),
            Some(d) => overlay_dir.join(d),
            None => overlay_dir.join("data"),
        };
        Ok(LoadedConfig {
            config,
            overlay_dir,
            data_dir,
            profile: opts.profile.clone(),
            figment: fig,
            module_dirs: opts
                .modules
                .iter()
                .filter_map(|m| m.config_dir.clone())
                .collect(),
            modules: opts.modules.clone(),
        })
    }

    /// Finds a config file by name: overlay `config/`, then modules (last declared first),
    /// then the engine's own `config/`.
    pub fn resolve_config_file(&self, name: &str) -> Option<PathBuf> {
        let core = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/config"));
        std::iter::once(self.overlay_dir.join("config"))
            .chain(self.module_dirs.iter().rev().cloned())
            .chain(std::iter::once(core))
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    }

    /// The merged configuration as JSON with secrets masked (`vault:` references stay visible:
    /// they name a key, not a secret).
    pub fn masked(&self) -> Value {
        let mut v = serde_json::to_value(&self.config).unwrap_or(Value::Null);
        mask(&mut v);
        v
    }

    /// Every leaf value (arrays count as leaves) with its dotted key and the layer that set it.
    pub fn origins(&self) -> Vec<(String, Value, String)> {
        let mut out = Vec::new();
        flatten("", &self.masked(), &mut out);
        out.into_iter()
            .map(|(k, v)| {
                let origin = origin_label(&self.figment, &k);
                (k, v, origin)
            })
            .collect()
    }
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => out.push((prefix.to_owned(), other.clone())),
    }
}

/// The variable that sets a dotted key: `server.port` → `STRATA_SERVER__PORT`.
fn env_var_name(key: &str) -> String {
    format!("STRATA_{}", key.replace('.', "__").to_ascii_uppercase())
}

/// Which layer set `key`: our labels, or the environment variable's name.
fn origin_label(fig: &Figment, key: &str) -> String {
    match fig.find_metadata(key) {
        Some(md) if md.name.contains("environment") => format!("env:{}", env_var_name(key)),
        Some(md) => md.name.to_string(),
        // A key with no value of its own (an empty map) came from the defaults.
        None => "core".into(),
    }
}

fn mask(v: &mut Value) {
    if let Value::Object(m) = v {
        for (k, val) in m.iter_mut() {
            match val {
                Value::String(s) if crate::secret::is_secret_key(k) && !s.starts_with("vault:") => {
                    *s = "********".into();
                }
                other => mask(other),
            }
        }
    } else if let Value::Array(items) = v {
        items.iter_mut().for_each(mask);
    }
}

/// The closest candidate to `word`, if any is close enough to be a plausible typo.
pub fn suggest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(word, c), *c))
        .filter(|(score, _)| *score >= 0.75)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// Turns figment's errors into one message naming the file (or variable), the key and a fix.
fn describe(fig: &Figment, err: figment::Error) -> ConfigError {
    let mut lines = Vec::new();
    for e in err {
        let key = e.path.join(".");
        let source = match &e.metadata {
            Some(md) if md.name.contains("environment") => {
                format!("environment variable {}", env_var_name(&key))
            }
            Some(md) => match &md.source {
                Some(figment::Source::File(p)) => p.display().to_string(),
                _ => md.name.to_string(),
            },
            None => "configuration".into(),
        };
        let line = match &e.kind {
            figment::error::Kind::UnknownField(field, expected) => {
                // figment's path already ends with the unknown key; hints name its siblings.
                let full = if e.path.last() == Some(field) || key.is_empty() {
                    if key.is_empty() {
                        field.clone()
                    } else {
                        key.clone()
                    }
                } else {
                    format!("{key}.{field}")
                };
                let parent = full
                    .rsplit_once('.')
                    .map(|(p, _)| p.to_owned())
                    .unwrap_or_default();
                // The metadata of an unknown key's error is its parent's; ask for the key's own.
                let origin = match fig.find_metadata(&full) {
                    Some(md) => match &md.source {
                        Some(figment::Source::File(p)) => p.display().to_string(),
                        _ if md.name.contains("environment") => {
                            format!("environment variable {}", env_var_name(&full))
                        }
                        _ => md.name.to_string(),
                    },
                    None => source.clone(),
                };
                let hint = match suggest(field, expected) {
                    Some(s) if parent.is_empty() => format!("; did you mean `{s}`?"),
                    Some(s) => format!("; did you mean `{parent}.{s}`?"),
                    None => String::new(),
                };
                format!(
                    "{origin}: unknown key `{full}`{hint} (valid keys here: {})",
                    expected.join(", ")
                )
            }
            figment::error::Kind::UnknownVariant(v, expected) => {
                let hint = suggest(v, expected)
                    .map(|s| format!("; did you mean `{s}`?"))
                    .unwrap_or_default();
                format!(
                    "{source}: `{key}` = `{v}` is not allowed{hint} (allowed: {})",
                    expected.join(", ")
                )
            }
            kind => {
                if key.is_empty() {
                    format!("{source}: {kind}")
                } else {
                    format!("{source}: `{key}`: {kind}")
                }
            }
        };
        lines.push(line);
    }
    ConfigError(lines.join("\n"))
}

/// Used by `declare_module!`: checks `modules.<name>` against the module's config type.
pub fn validate_module_section<T: serde::de::DeserializeOwned>(
    fig: &Figment,
    key: &str,
) -> Result<(), Box<figment::Error>> {
    match fig.find_value(key) {
        Ok(_) => {}
        Err(e) if e.missing() => return Ok(()),
        Err(e) => return Err(Box::new(e)),
    }
    // `focus` + our own prefix: `extract_inner` appends the key to paths instead of
    // prepending it, which would garble the key in messages.
    let prefix: Vec<String> = key.split('.').map(str::to_owned).collect();
    fig.focus(key).extract::<T>().map(|_| ()).map_err(|err| {
        let fixed: Vec<figment::Error> = err
            .into_iter()
            .map(|mut e| {
                let mut path = prefix.clone();
                path.append(&mut e.path);
                e.path = path;
                e
            })
            .collect();
        let mut it = fixed.into_iter().rev();
        let last = it
            .next()
            .unwrap_or_else(|| figment::Error::from("invalid module section"));
        Box::new(it.fold(last, |acc, e| e.chain(acc)))
    })
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_keys_match_the_config_struct() {
        let v = serde_json::to_value(Config::default()).expect("ser");
        let mut keys: Vec<&str> = v
            .as_object()
            .expect("obj")
            .keys()
            .map(String::as_str)
            .collect();
        let mut listed = TOP_LEVEL_KEYS.to_vec();
        keys.sort_unstable();
        listed.sort_unstable();
        assert_eq!(keys, listed);
    }

    #[test]
    fn env_filter_takes_nested_keys_and_top_level_names_only() {
        assert!(is_config_env("SERVER__PORT"));
        assert!(is_config_env("DATA_DIR"));
        assert!(
            is_config_env("servr__port"),
            "typos still reach the unknown-key check"
        );
        assert!(!is_config_env("OVERLAY"));
        assert!(!is_config_env("PROFILE"));
        assert!(!is_config_env("VAULT_PASSPHRASE"));
        assert!(!is_config_env("AGENT_MAIN_MODEL"));
    }

    #[test]
    fn suggestions_need_to_be_close() {
        assert_eq!(suggest("prot", &["bind", "port"]), Some("port"));
        assert_eq!(suggest("tool", &["tools", "team"]), Some("tools"));
        assert_eq!(suggest("zzzzqqq", &["tools", "team"]), None);
    }
}
