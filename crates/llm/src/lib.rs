//! # strata-llm
//!
//! [`LlmProvider`](strata_engine::llm::LlmProvider) implementations: OpenAI-compatible chat
//! completions, Anthropic Messages, Gemini `generateContent` (API key) and Vertex AI, and the
//! Claude Code CLI. Vendor HTTP providers share [`http`]: timeouts, retries with jittered
//! backoff on 429/5xx and connection errors (honouring `Retry-After`), and errors that name
//! the provider and the config key to fix. [`build`] makes a provider from an agent's `llm`
//! config block.

pub mod anthropic;
pub mod claude_code;
pub mod gemini;
pub mod http;
pub mod openai;
mod stop;

use std::sync::Arc;

use strata_engine::config::LlmConfig;
use strata_engine::llm::LlmProvider;
use strata_engine::secret::{Vault, resolve_ref};

use crate::http::{Endpoint, HttpSettings};

/// Why a provider could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct BuildError(pub String);

/// The model an agent uses: its configured `model`, or the provider's default.
pub fn model_name(cfg: &LlmConfig) -> Option<String> {
    let m = cfg.model.clone()?;
    Some(match cfg.provider.as_str() {
        "gemini" | "vertex" => m.strip_prefix("google/").map(str::to_owned).unwrap_or(m),
        _ => m,
    })
}

fn require_model(cfg: &LlmConfig, config_path: &str) -> Result<String, BuildError> {
    model_name(cfg).ok_or_else(|| BuildError(format!("`{config_path}.model` is required")))
}

/// What a provider may need to know about the agent it serves (CLI providers run in the
/// agent's project directory with its tool policy).
#[derive(Clone)]
pub struct AgentContext {
    /// Agent id.
    pub agent_id: String,
    /// Working directory for CLI providers.
    pub project_dir: std::path::PathBuf,
    /// The agent's tools.
    pub tools: strata_engine::ToolFilter,
    /// Names of every tool in the registry (CLI providers map the filter onto them).
    pub registry_tools: Vec<String>,
    /// An MCP client config pointing at the engine's own MCP endpoint (Claude Code's
    /// `--mcp-config`), when the engine serves one.
    pub mcp_config: Option<std::path::PathBuf>,
    /// Paths a CLI provider's own tools must never touch (the data directory, the vault):
    /// Claude Code gets a deny rule for each, whatever `llm.builtins` says.
    pub protected_paths: Vec<std::path::PathBuf>,
    /// Where Claude Code's settings file for this agent is written; without one the
    /// settings go on the command line.
    pub settings_file: Option<std::path::PathBuf>,
    /// Where a provider reports what goes wrong with rights while it runs (Claude Code's
    /// refused tools): the Invoker's alerts.
    pub alerts: Option<Arc<strata_runtime::Invoker>>,
}

impl std::fmt::Debug for AgentContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentContext")
            .field("agent_id", &self.agent_id)
            .field("project_dir", &self.project_dir)
            .field("mcp_config", &self.mcp_config)
            .field("settings_file", &self.settings_file)
            .field("alerts", &self.alerts.is_some())
            .finish_non_exhaustive()
    }
}

impl AgentContext {
    /// A context for tests and embedders: no tools, the current directory.
    pub fn bare(agent_id: &str) -> Self {
        AgentContext {
            agent_id: agent_id.to_owned(),
            project_dir: std::path::PathBuf::from("."),
            tools: strata_engine::ToolFilter::None,
            registry_tools: Vec::new(),
            mcp_config: None,
            protected_paths: Vec::new(),
            settings_file: None,
            alerts: None,
        }
    }
}

/// Builds the provider for an `llm` block. `config_path` is where the block sits
/// (`agents.main.llm`), used in error messages.
pub fn build(
    cfg: &LlmConfig,
    vault: Option<&dyn Vault>,
    config_path: &str,
    agent: &AgentContext,
) -> Result<Arc<dyn LlmProvider>, BuildError> {
    let settings = HttpSettings::from_config(cfg);
    let key_path = format!("{config_path}.api_key");
    let api_key = cfg
        .api_key
        .as_deref()
        .map(|v| resolve_ref(v, vault, &key_path))
        .transpose()
        .map_err(|e| BuildError(e.to_string()))?;
    let endpoint = Endpoint {
        provider: cfg.provider.clone(),
        credential_key: key_path.clone(),
    };
    let err = |e: strata_engine::llm::LlmError| BuildError(e.to_string());
    match cfg.provider.as_str() {
        "openai" => {
            let base = cfg
                .base_url
                .as_deref()
                .unwrap_or("https://api.openai.com/v1");
            if api_key.is_none() && cfg.base_url.is_none() {
                return Err(BuildError(format!(
                    "`{key_path}` is required for OpenAI (e.g. `vault:openai-key`); local \
                     OpenAI-compatible servers need `{config_path}.base_url` instead"
                )));
            }
            Ok(Arc::new(
                openai::OpenAiProvider::new(
                    base,
                    api_key,
                    settings,
                    endpoint,
                    cfg.stream.unwrap_or(false),
                )
                .map_err(err)?,
            ))
        }
        "anthropic" => {
            let key = api_key.ok_or_else(|| {
                BuildError(format!(
                    "`{key_path}` is required for Anthropic (e.g. `vault:anthropic-key`)"
                ))
            })?;
            let base = cfg
                .base_url
                .as_deref()
                .unwrap_or("https://api.anthropic.com");
            Ok(Arc::new(
                anthropic::AnthropicProvider::new(
                    base,
                    key,
                    settings,
                    endpoint,
                    cfg.stream.unwrap_or(false),
                )
                .map_err(err)?,
            ))
        }
        "gemini" => {
            let key = api_key.ok_or_else(|| {
                BuildError(format!(
                    "`{key_path}` is required for Gemini (e.g. `vault:gemini-key`)"
                ))
            })?;
            let model = require_model(cfg, config_path)?;
            let base = cfg
                .base_url
                .as_deref()
                .unwrap_or("https://generativelanguage.googleapis.com");
            Ok(Arc::new(
                gemini::GeminiProvider::google_ai(
                    base,
                    &model,
                    key,
                    settings,
                    endpoint,
                    cfg.stream.unwrap_or(false),
                )
                .map_err(err)?,
            ))
        }
        "vertex" => {
            let model = require_model(cfg, config_path)?;
            let project = cfg.project.as_deref().ok_or_else(|| {
                BuildError(format!(
                    "`{config_path}.project` (the Google Cloud project) is required for Vertex AI"
                ))
            })?;
            let region = cfg.region.as_deref().unwrap_or("global");
            let token = match (&cfg.token_command, &cfg.token_env) {
                (Some(c), _) => gemini::TokenSource::Command(c.clone(), cfg.env_allow.clone()),
                (None, Some(v)) => gemini::TokenSource::Env(v.clone()),
                (None, None) => {
                    return Err(BuildError(format!(
                        "Vertex AI needs `{config_path}.token_command` (e.g. `gcloud auth print-access-token`) \
                         or `{config_path}.token_env`"
                    )));
                }
            };
            let endpoint = Endpoint {
                provider: "vertex".into(),
                credential_key: format!("{config_path}.token_command"),
            };
            Ok(Arc::new(
                gemini::GeminiProvider::vertex(
                    cfg.base_url.as_deref(),
                    project,
                    region,
                    &model,
                    token,
                    settings,
                    endpoint,
                    cfg.stream.unwrap_or(false),
                )
                .map_err(err)?,
            ))
        }
        "claude-code" => {
            let (allowed, disallowed) =
                claude_code::ClaudeCodeSettings::tool_flags(&agent.tools, &agent.registry_tools);
            let settings = match &agent.settings_file {
                Some(path) => {
                    claude_code::BuiltinPolicy::write_settings(path, &agent.protected_paths)
                        .map_err(|e| {
                            BuildError(format!(
                                "cannot write Claude Code's settings file {}: {e}",
                                path.display()
                            ))
                        })?;
                    path.clone().into_os_string()
                }
                None => claude_code::BuiltinPolicy::settings(&agent.protected_paths)
                    .to_string()
                    .into(),
            };
            Ok(Arc::new(claude_code::ClaudeCodeProvider::new_for(
                claude_code::ClaudeCodeSettings {
                    command: cfg
                        .command
                        .clone()
                        .unwrap_or_else(|| "claude".into())
                        .into(),
                    project_dir: agent.project_dir.clone(),
                    env_allow: cfg.env_allow.clone(),
                    api_key,
                    timeout: std::time::Duration::from_secs(cfg.timeout_secs.unwrap_or(600)),
                    allowed_tools: allowed,
                    disallowed_tools: disallowed,
                    mcp_config: agent.mcp_config.clone(),
                    builtins: cfg.builtins.unwrap_or_default(),
                    disallow_builtins: cfg.disallow_builtins.clone(),
                    settings,
                    config_path: config_path.to_owned(),
                },
                &agent.agent_id,
                agent.alerts.clone(),
            )))
        }
        other => Err(BuildError(format!(
            "`{config_path}.provider`: unknown provider `{other}`; use openai, anthropic, \
             gemini, vertex or claude-code"
        ))),
    }
}
