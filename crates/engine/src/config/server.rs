//! `server.*`: the control API's bind address, tokens, limits and artifact roots.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Access;

/// `server.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Host names (or addresses) requests may be addressed to, port aside: `strata.internal`,
    /// `*.example.com`, or `*` for any. Empty (the default): `localhost`, `127.0.0.1`, `::1`
    /// and `bind`. A request for another `Host` is refused, which keeps a web page a
    /// browser loaded from elsewhere (DNS rebinding) away from the API.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// The web dashboard on this port (`/ui/`).
    pub dashboard: DashboardConfig,
}

/// `server.dashboard.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DashboardConfig {
    /// Serve `/ui/` (and redirect `/` to it). Off: both answer 404; the API is unchanged.
    pub enabled: bool,
    /// How long a sign-in lasts (hours); the cookie expires then, whatever is done with it.
    pub session_hours: u64,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        DashboardConfig {
            enabled: true,
            session_hours: 12,
        }
    }
}

impl ServerConfig {
    /// Whether a request with `Host: host` is served (see `allowed_hosts`). A request
    /// without a `Host` (HTTP/1.0 tools) is: browsers always send one.
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        let Some(host) = host else { return true };
        let name = host_name(host);
        if self.allowed_hosts.is_empty() {
            let bind = host_name(&self.bind);
            return ["localhost", "127.0.0.1", "::1"].contains(&name.as_str())
                || (name == bind && !matches!(bind.as_str(), "0.0.0.0" | "::"));
        }
        self.allowed_hosts.iter().any(|a| {
            let a = a.trim().to_ascii_lowercase();
            a == "*"
                || match a.strip_prefix("*.") {
                    Some(suffix) => name.ends_with(&format!(".{suffix}")),
                    None => host_name(&a) == name,
                }
        })
    }
}

/// The name in a `Host` value: port and IPv6 brackets dropped, lower case, no final dot.
fn host_name(host: &str) -> String {
    let h = host.trim();
    let name = if let Some(rest) = h.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        match h.rsplit_once(':') {
            // One colon and digits after it: a port. More colons: a bare IPv6 address.
            Some((n, port)) if !n.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => n,
            _ => h,
        }
    };
    name.trim_end_matches('.').to_ascii_lowercase()
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
            allowed_hosts: Vec::new(),
            dashboard: DashboardConfig::default(),
        }
    }
}

/// One control-API token: who it is and what it may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_serves_loopback_names_and_the_bind_address_only() {
        let s = ServerConfig::default();
        for ok in [
            "localhost",
            "LOCALHOST:8770",
            "127.0.0.1:8770",
            "[::1]:8770",
            "localhost.",
        ] {
            assert!(s.host_allowed(Some(ok)), "{ok}");
        }
        for no in [
            "evil.example",
            "evil.example:8770",
            "127.0.0.1.evil.example",
            "0.0.0.0:8770",
        ] {
            assert!(!s.host_allowed(Some(no)), "{no}");
        }
        assert!(s.host_allowed(None), "no Host: not a browser");
        let public = ServerConfig {
            bind: "10.1.2.3".into(),
            ..ServerConfig::default()
        };
        assert!(public.host_allowed(Some("10.1.2.3:8770")));
        let any = ServerConfig {
            bind: "0.0.0.0".into(),
            ..ServerConfig::default()
        };
        assert!(!any.host_allowed(Some("0.0.0.0:8770")));
    }

    #[test]
    fn listed_names_wildcards_and_star() {
        let s = ServerConfig {
            allowed_hosts: vec!["strata.internal".into(), "*.example.com".into()],
            ..ServerConfig::default()
        };
        assert!(s.host_allowed(Some("strata.internal:443")));
        assert!(s.host_allowed(Some("a.example.com")));
        assert!(!s.host_allowed(Some("example.com")));
        assert!(!s.host_allowed(Some("evilexample.com")));
        assert!(
            !s.host_allowed(Some("localhost")),
            "a list replaces the defaults"
        );
        let star = ServerConfig {
            allowed_hosts: vec!["*".into()],
            ..ServerConfig::default()
        };
        assert!(star.host_allowed(Some("anything.at.all")));
    }
}
