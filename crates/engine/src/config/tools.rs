//! `tools.*`: roots, timeouts, the terminal sandbox, web search and HTTP secrets.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `tools.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
