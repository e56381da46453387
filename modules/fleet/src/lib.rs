//! # strata-mod-fleet
//!
//! Tools for "The Mind", a Directus-based database a fleet of agents shares, and for
//! delegating to an external agent CLI. Configured under `modules.fleet` (defaults in
//! `config/default.yaml`):
//!
//! - `mind_api(method, endpoint, data)`: any Directus endpoint, bearer-authenticated; gated.
//! - `fleet_note(action, …)`: the `fleet_notes` collection (create, read, update, search).
//! - `ai_models(action, …)`: the `ai_models` collection (list, get, update, batch_update,
//!   categories, budget, search, fetch_spec).
//! - `upload_file_to_cms(file_path, title, folder)`: multipart upload to `/files`.
//! - `call_agent(prompt, timeout)`: one run of the configured agent CLI; gated.

mod agent;
mod mind;

use serde::Deserialize;

pub use mind::Mind;

/// `modules.fleet` configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// Base URL of The Mind.
    #[serde(default)]
    pub mind_url: Option<String>,
    /// Its token (`vault:`/`env:` reference).
    #[serde(default = "default_token")]
    pub mind_token: String,
    /// Seconds per request.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Largest upload, MiB.
    #[serde(default = "default_upload")]
    pub max_upload_mb: u64,
    /// The external agent CLI, as arguments; `{prompt}` is replaced by the prompt.
    #[serde(default)]
    pub agent_command: Vec<String>,
    /// Environment variables passed to the CLI besides the basics.
    #[serde(default)]
    pub agent_env_allow: Vec<String>,
}

fn default_token() -> String {
    "vault:mind-token".into()
}
fn default_timeout() -> u64 {
    20
}
fn default_upload() -> u64 {
    50
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            mind_url: None,
            mind_token: default_token(),
            timeout_secs: default_timeout(),
            max_upload_mb: default_upload(),
            agent_command: Vec::new(),
            agent_env_allow: Vec::new(),
        }
    }
}

strata_engine::declare_module!("fleet", FleetConfig);

/// Keeps this crate linked into the binary and names the module for precedence order:
/// `Launcher::new().module(strata_mod_fleet::link())`.
#[inline(never)]
pub fn link() -> &'static str {
    "fleet"
}

pub(crate) fn config(
    ctx: &strata_engine::ToolContext,
) -> Result<FleetConfig, strata_engine::ToolError> {
    ctx.config()
        .module("fleet")
        .map_err(|e| strata_engine::ToolError::failed(format!("modules.fleet: {e}")))
}
