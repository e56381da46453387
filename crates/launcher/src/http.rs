//! Starting the HTTP surfaces inside `serve`.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use strata_engine::Env;
use strata_engine::config::{Access, LoadedConfig};
use strata_http::{HttpState, Token};

use crate::token::generate_token;
use crate::wiring::Wired;

/// Writes the per-boot token file (0600), replacing any previous one.
fn write_token_file(path: &Path, token: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).write(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(token.as_bytes())?;
    Ok(())
}

/// The control tokens from config, or a per-boot one (printed once, written to the data dir).
pub fn tokens(cfg: &LoadedConfig, env: &Env, addr: &SocketAddr) -> anyhow::Result<Vec<Token>> {
    let configured = &cfg.config.server.tokens;
    if configured.is_empty() {
        // `bind` already refused a public address without configured tokens.
        debug_assert!(addr.ip().is_loopback() || addr.ip().is_unspecified());
        let token = generate_token()?;
        let path = cfg.data_dir.join("api-token");
        write_token_file(&path, &token)?;
        eprintln!(
            "control API token for this boot (also in {}): {token}",
            path.display()
        );
        return Ok(vec![Token::new("operator", &token, None, Access::Owner)]);
    }
    configured
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let secret = env
                .secret(&t.token, &format!("server.tokens[{i}].token"))
                .map_err(|e| anyhow::anyhow!(e))?;
            if secret.expose().len() < 16 {
                bail!(
                    "`server.tokens[{i}].token` ({}) is shorter than 16 characters",
                    t.name
                );
            }
            Ok(Token::new(
                &t.name,
                secret.expose(),
                t.tools.clone(),
                t.tier.unwrap_or(Access::Staff),
            ))
        })
        .collect()
}

/// Binds `server.bind:server.port` (after checking the bind is allowed).
pub async fn bind(cfg: &LoadedConfig) -> anyhow::Result<tokio::net::TcpListener> {
    let s = &cfg.config.server;
    let ip: IpAddr = s
        .bind
        .parse()
        .with_context(|| format!("`server.bind` = `{}` is not an IP address", s.bind))?;
    let addr = SocketAddr::new(ip, s.port);
    if !ip.is_loopback() && s.tokens.is_empty() {
        bail!(
            "refusing to bind {addr} without a configured token: anyone who can reach it \
             could call every tool. Add `server.tokens` (e.g. `- {{name: ops, token: \
             vault:api-token}}`) or bind 127.0.0.1"
        );
    }
    if !ip.is_loopback() && s.allowed_hosts.is_empty() {
        tracing::warn!(
            "serve binds {addr} but `server.allowed_hosts` is empty: only requests addressed to \
             localhost, 127.0.0.1, ::1 or {ip} are served — list the names clients use"
        );
    }
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot bind {addr} (`server.bind`, `server.port`)"))
}

/// The shared state of the HTTP surfaces.
pub fn state(
    cfg: &LoadedConfig,
    wired: &Wired,
    addr: &SocketAddr,
    cluster: Option<Arc<dyn strata_runtime::turns::ClusterView>>,
    schedules: Option<Arc<strata_runtime::schedule::Scheduler>>,
    skills: Option<Arc<strata_runtime::skills::SkillSet>>,
) -> anyhow::Result<Arc<HttpState>> {
    let s = &cfg.config.server;
    let env = wired.invoker.env();
    let mut tokens = tokens(cfg, env, addr)?;
    for (agent, secret, scope) in &wired.internal_tokens {
        tokens.push(Token::for_agent(agent, secret, scope.clone()));
    }
    let execute_key = s
        .execute_api_key
        .as_deref()
        .map(|v| env.secret(v, "server.execute_api_key"))
        .transpose()
        .map_err(|e| anyhow::anyhow!(e))?
        .map(|k| k.expose().to_owned());
    Ok(Arc::new(HttpState {
        invoker: wired.invoker.clone(),
        manager: (!wired.manager.agent_ids().is_empty()).then(|| wired.manager.clone()),
        default_agent: crate::wiring::default_agent(cfg).ok(),
        skipped: wired.skipped.clone(),
        tokens,
        execute_key,
        max_body_bytes: s.max_body_bytes,
        read_timeout: Duration::from_secs(s.read_timeout_secs.max(1)),
        audit: wired.audit.clone(),
        audit_path: wired.audit.path().to_path_buf(),
        artifact_roots: s
            .artifact_roots
            .iter()
            .map(|r| cfg.overlay_dir.join(r))
            .collect(),
        overlay_dir: cfg.overlay_dir.clone(),
        data_dir: cfg.data_dir.clone(),
        sessions: Some(wired.store.clone()),
        started: Instant::now(),
        cluster,
        schedules,
        metrics: crate::metrics::render(),
        errors: Some(Arc::new(|| crate::recent::recent().lines())),
        ui: strata_http::ui::SignIns::new(Duration::from_secs(
            s.dashboard.session_hours.max(1) * 3600,
        )),
        described: strata_http::Described {
            origins: cfg.origins(),
            masked: cfg.masked(),
            skills,
        },
    }))
}

/// The dashboard's one-time sign-in link for this boot (signs in as the first owner token,
/// else the first token), or `None` when the dashboard is off or there is no token.
pub fn sign_in_link(state: &HttpState, addr: &SocketAddr) -> anyhow::Result<Option<String>> {
    if !state.invoker.env().config.server.dashboard.enabled {
        return Ok(None);
    }
    let Some(token) = state
        .tokens
        .iter()
        .filter(|t| !t.name.starts_with("agent:"))
        .find(|t| t.tier == Access::Owner)
        .or_else(|| state.tokens.iter().find(|t| !t.name.starts_with("agent:")))
    else {
        return Ok(None);
    };
    let secret = state
        .ui
        .one_time(strata_http::Caller::of(token), &token.name)
        .map_err(|e| anyhow::anyhow!(e))?;
    // An address the Host check lets through: loopback for a wildcard or loopback bind.
    let host = match addr.ip() {
        ip if ip.is_unspecified() || ip.is_loopback() => "127.0.0.1".to_owned(),
        IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    Ok(Some(format!(
        "http://{host}:{}/ui/login?once={secret}",
        addr.port()
    )))
}
