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
//!
//! One file per section (`server`, `tools`, `sessions`, `agents`, `team`, `mcp`, `memory`,
//! `connectors`, `security`); `loader.rs` merges the sources and explains errors. The root
//! [`Config`], `log` and `defaults` are here.

pub use crate::principal::{Access, AgentTier};
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod agents;
mod browser;
mod budget;
mod cluster;
mod connectors;
mod goals;
mod journal;
mod loader;
mod mcp;
mod memory;
mod metrics;
mod pricing;
mod schedules;
mod security;
mod server;
mod sessions;
mod storage;
mod team;
mod telemetry;
mod tools;
pub use agents::*;
pub use browser::*;
pub use budget::*;
pub use cluster::*;
pub use connectors::*;
pub use goals::*;
pub use journal::*;
pub use loader::*;
pub use mcp::*;
pub use memory::*;
pub use metrics::*;
pub use pricing::*;
pub use schedules::*;
pub use security::*;
pub use server::*;
pub use sessions::*;
pub use storage::*;
pub use team::*;
pub use telemetry::*;
pub use tools::*;

/// The whole merged configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Where sessions, approvals and rate-limit counters live (SQLite or PostgreSQL).
    pub storage: StorageConfig,
    /// Several instances sharing the work through NATS JetStream (off by default).
    pub cluster: ClusterConfig,
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
    /// `schedules.<name>`: cron jobs, recurring prompts, the built-in jobs' times.
    pub schedules: BTreeMap<String, ScheduleConfig>,
    /// `pricing.<provider>.<model>`: token prices over the shipped defaults.
    pub pricing: BTreeMap<String, BTreeMap<String, PriceConfig>>,
    /// The Prometheus endpoint.
    pub metrics: MetricsConfig,
    /// OpenTelemetry export.
    pub telemetry: TelemetryConfig,
    /// The headless browser (`browse_url`, `browser`).
    pub browser: BrowserConfig,
    /// Goal workstreams: their channels, who may create them, budgets and windows.
    pub goals: GoalsConfig,
    /// The turn journal: what a turn did, so a crash neither loses it nor repeats it.
    pub journal: JournalConfig,
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
    "storage",
    "cluster",
    "agents",
    "team",
    "mcp",
    "security",
    "memory",
    "connectors",
    "schedules",
    "pricing",
    "metrics",
    "telemetry",
    "browser",
    "goals",
    "journal",
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `trace`, `debug`, `info`, `warn`, `error`, or a full filter (`info,strata_runtime=debug`
    /// logs every tool call; `strata_engine=LEVEL` sets `strata_runtime` too). `RUST_LOG` wins
    /// when set.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `defaults.*`
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DefaultsConfig {
    /// Provider for agents without their own `llm`.
    pub llm: Option<LlmConfig>,
    /// Agent used by `strata chat` and `strata repl` when `--agent` is not given.
    pub agent: Option<String>,
    /// The time zone schedules are read in unless they name one (`Europe/Stockholm`);
    /// default UTC.
    pub timezone: Option<String>,
    /// The budget of every agent without its own `agents.<id>.budget`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetConfig>,
}

pub(crate) fn yes() -> bool {
    true
}

pub(crate) fn is_true(b: &bool) -> bool {
    *b
}
