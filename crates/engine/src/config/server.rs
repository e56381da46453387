//! `server.*`: the control API's bind address, tokens, limits and artifact roots.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Access;

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
