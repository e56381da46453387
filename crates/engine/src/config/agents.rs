//! `agents.<id>.*` and the `llm` blocks: who the agents are and which model they use.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::RoutingConfig;

/// Which model an agent talks to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The model's context window in tokens. Each request is estimated before it is sent and,
    /// when it would not fit, older turns are left out, then tools the turn is unlikely to
    /// need (every tool `tools:` names exactly is kept); if it still cannot fit the turn stops
    /// saying what to change. Default: what the vendor documents for the model (Anthropic,
    /// Gemini, OpenAI's own models); unset for other OpenAI-compatible servers — set it for a
    /// local model (llama.cpp's `--ctx-size`, Ollama's `num_ctx`).
    #[serde(default)]
    pub context_window: Option<u32>,
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
    /// Stream responses (SSE) for turns someone watches (Discord, `/chat` with `stream`, a
    /// terminal). Default: on for those turns; `false`: each round's text arrives whole.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Claude Code: which of the CLI's own tools (Read, Bash, WebFetch, …) the agent gets:
    /// `none` (default: only Strata's tools, through `/mcp`), `read_only` (Read, Glob, Grep)
    /// or `all`. Whatever the mode, the CLI is told never to touch the data directory, the
    /// vault or key files.
    #[serde(default)]
    pub builtins: Option<Builtins>,
    /// Claude Code: built-in tools to take away besides what `builtins` allows
    /// (`Bash`, `WebFetch`, or a rule such as `Bash(git push:*)`).
    #[serde(default)]
    pub disallow_builtins: Vec<String>,
}

/// How many of the Claude Code CLI's own tools an agent gets (`llm.builtins`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Builtins {
    /// None: the agent's tools are Strata's, through the Invoker.
    #[default]
    None,
    /// Reading files only (Read, Glob, Grep), outside the protected paths.
    ReadOnly,
    /// Every built-in tool, outside the protected paths (a privileged ops agent).
    All,
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
            context_window: None,
            temperature: None,
            connect_timeout_secs: None,
            timeout_secs: None,
            max_attempts: None,
            retry_base_ms: None,
            stream: None,
            builtins: None,
            disallow_builtins: Vec::new(),
        }
    }
}

/// One agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// `false` leaves the agent out of this process (a profile turning off an agent the
    /// base config defines, e.g. the ops instance not running `main`). Default `true`.
    #[serde(default = "super::yes", skip_serializing_if = "super::is_true")]
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
    /// Tokens of the knowledge index told to the model each turn (the first lines of
    /// `knowledgebase/_index.md` and `agents/<id>/knowledgebase/_index.md`, or the files'
    /// titles); default 400, `0` leaves it out.
    pub knowledge_index_tokens: Option<u32>,
    /// Rule-based compression of the knowledge index and skill prompts for this agent's
    /// context (`compression: {enabled: true, level: standard}`); off by default.
    #[serde(default)]
    pub compression: CompressionConfig,
    /// Working directory for CLI providers (default `agents/<id>`).
    pub project_dir: Option<PathBuf>,
    /// What the agent's tools may touch (layer 3 of access control); unset =
    /// `security.access_control.default_capabilities` (everything but `subprocess` and
    /// `secrets`).
    pub capabilities: Option<Vec<crate::spec::Capability>>,
    /// Where the agent listens (connectors).
    pub routing: RoutingConfig,
    /// A turn on a clock that checks the agent's standing instructions and speaks only when
    /// there is something to say (`schedule::from_config` makes it `heartbeat-<id>`).
    pub heartbeat: Option<HeartbeatConfig>,
    /// What the agent's model calls may spend (default `defaults.budget`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::BudgetConfig>,
}

/// `agents.<id>.heartbeat`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// How often (`30m`).
    pub every: String,
    /// The standing instructions, relative to `agents/<id>/` (read at each beat).
    pub prompt_file: String,
    /// Beats only between these local times (`08:00-20:00`, in `defaults.timezone`); none:
    /// around the clock.
    pub active_hours: Option<String>,
    /// Where something worth saying is posted (`discord:<account>:<channel id>`); none:
    /// the agent's home channel.
    pub deliver_to: Option<String>,
    /// Off: no beats.
    #[serde(default = "super::yes")]
    pub enabled: bool,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig {
            every: "30m".into(),
            prompt_file: "HEARTBEAT.md".into(),
            active_hours: None,
            deliver_to: None,
            enabled: true,
        }
    }
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
            knowledge_index_tokens: None,
            compression: CompressionConfig::default(),
            project_dir: None,
            capabilities: None,
            routing: RoutingConfig::default(),
            heartbeat: None,
            budget: None,
        }
    }
}

/// `tools: all` or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ToolSelection {
    /// The word `all`.
    All(AllTools),
    /// Names or `prefix*` patterns.
    List(Vec<String>),
}

/// The literal `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AllTools {
    /// Every tool.
    All,
}

/// `agents.<id>.compression`
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionConfig {
    /// Compress the knowledge index and skill prompts at load.
    pub enabled: bool,
    /// `lite` (whitespace) or `standard` (also filler words).
    pub level: crate::compress::Level,
}

impl CompressionConfig {
    /// `text` as this agent is shown it: compressed when enabled.
    pub fn apply(&self, text: String) -> String {
        if self.enabled {
            crate::compress::compress(&text, self.level).0
        } else {
            text
        }
    }
}
