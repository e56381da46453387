//! # strata-mod-ops
//!
//! Host and service health tools: `system_info` and `service_health`. Configured under
//! `modules.ops` (defaults in `config/default.yaml`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use strata_engine::{ToolContext, ToolError, tool};

/// `modules.ops` configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpsConfig {
    /// Services to check.
    #[serde(default)]
    pub services: Vec<Service>,
    /// Per-check timeout in milliseconds (default 2000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// One service to check: `tcp` or `http`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Name shown in results.
    pub name: String,
    /// `host:port` to connect to.
    #[serde(default)]
    pub tcp: Option<String>,
    /// `http://` or `https://` URL to GET (up for 2xx and 3xx).
    #[serde(default)]
    pub http: Option<String>,
    /// PEM file of certificate authorities to trust for this `https` service beside the
    /// system's (an internal CA); relative to the overlay directory.
    #[serde(default)]
    pub ca_file: Option<String>,
}

strata_engine::declare_module!("ops", OpsConfig);

/// Keeps this crate linked into the binary and names the module for precedence order:
/// `Launcher::new().module(strata_mod_ops::link())`.
#[inline(never)]
pub fn link() -> &'static str {
    "ops"
}

/// Host facts from `system_info`.
#[derive(Debug, Serialize)]
pub struct SystemInfo {
    /// Host name.
    pub hostname: Option<String>,
    /// OS family and distribution.
    pub os: String,
    /// Kernel release.
    pub kernel: Option<String>,
    /// Seconds since boot.
    pub uptime_secs: Option<u64>,
    /// 1, 5 and 15 minute load averages.
    pub load: Option<[f64; 3]>,
    /// CPUs available to this process.
    pub cpus: usize,
    /// Memory in bytes.
    pub memory: Option<Memory>,
    /// Disk holding the data directory.
    pub data_disk: Option<Disk>,
}

/// Memory figures.
#[derive(Debug, Serialize)]
pub struct Memory {
    /// Total bytes.
    pub total: u64,
    /// Available bytes.
    pub available: u64,
}

/// Disk figures.
#[derive(Debug, Serialize)]
pub struct Disk {
    /// The directory measured.
    pub path: String,
    /// Total bytes.
    pub total: u64,
    /// Bytes available to unprivileged users.
    pub available: u64,
}

/// Reports this host: hostname, OS, kernel, uptime, load averages, CPUs, memory, and the disk
/// that holds Strata's data directory. Read-only.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 10)]
async fn system_info(ctx: &ToolContext) -> Result<SystemInfo, ToolError> {
    Ok(collect_system_info(ctx).await)
}

/// What `system_info` reports, for overlays that extend the tool.
pub async fn collect_system_info(ctx: &ToolContext) -> SystemInfo {
    let uname = rustix::system::uname();
    let hostname = uname.nodename().to_str().ok().map(str::to_owned);
    let kernel = uname.release().to_str().ok().map(str::to_owned);
    let os_release = tokio::fs::read_to_string("/etc/os-release").await.ok();
    let pretty = os_release.as_deref().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_owned())
    });
    let os = match pretty {
        Some(p) => format!("{} ({p})", std::env::consts::OS),
        None => std::env::consts::OS.to_owned(),
    };
    let uptime_secs = tokio::fs::read_to_string("/proc/uptime")
        .await
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map(|s| s as u64);
    let load = tokio::fs::read_to_string("/proc/loadavg")
        .await
        .ok()
        .and_then(|t| {
            let mut it = t.split_whitespace().map(|x| x.parse::<f64>().ok());
            Some([it.next()??, it.next()??, it.next()??])
        });
    let memory = tokio::fs::read_to_string("/proc/meminfo")
        .await
        .ok()
        .and_then(|t| {
            let kib = |key: &str| {
                t.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            };
            Some(Memory {
                total: kib("MemTotal:")? * 1024,
                available: kib("MemAvailable:")? * 1024,
            })
        });
    // The data dir may not exist yet: measure its nearest existing ancestor.
    let mut probe = ctx.env.data_dir.clone();
    while !probe.exists() {
        if !probe.pop() {
            break;
        }
    }
    let data_disk = rustix::fs::statvfs(&probe).ok().map(|s| Disk {
        path: ctx.env.data_dir.display().to_string(),
        total: s.f_blocks.saturating_mul(s.f_frsize),
        available: s.f_bavail.saturating_mul(s.f_frsize),
    });
    SystemInfo {
        hostname,
        os,
        kernel,
        uptime_secs,
        load,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        memory,
        data_disk,
    }
}

/// One result of `service_health`.
#[derive(Debug, Serialize)]
pub struct Health {
    /// Service name.
    pub name: String,
    /// What was checked (`tcp://host:port` or the URL).
    pub target: String,
    /// Whether it answered as expected.
    pub up: bool,
    /// Time to the answer (or the failure).
    pub latency_ms: f64,
    /// HTTP status line, or the error.
    pub detail: String,
}

/// Checks the services configured under `modules.ops.services` (TCP connect, or HTTP GET where
/// a 2xx/3xx answer counts as up) and reports each one's state and latency. Targets come from
/// configuration only; pass `names` to check a subset.
#[tool(capabilities = [network], side_effects = none, timeout_secs = 60)]
async fn service_health(
    ctx: &ToolContext,
    /// Only these services (by name); default all configured.
    names: Option<Vec<String>>,
) -> Result<Vec<Health>, ToolError> {
    let cfg: OpsConfig = ctx
        .config()
        .module("ops")
        .map_err(|e| ToolError::failed(format!("modules.ops: {e}")))?;
    let timeout = Duration::from_millis(cfg.timeout_ms.unwrap_or(2000).clamp(50, 30_000));
    let selected: Vec<Service> = match &names {
        Some(n) => {
            if let Some(missing) = n
                .iter()
                .find(|x| !cfg.services.iter().any(|s| &s.name == *x))
            {
                let known: Vec<&str> = cfg.services.iter().map(|s| s.name.as_str()).collect();
                return Err(ToolError::invalid(
                    "names",
                    format!(
                        "no service `{missing}` configured; known: {}",
                        known.join(", ")
                    ),
                ));
            }
            cfg.services
                .iter()
                .filter(|s| n.contains(&s.name))
                .cloned()
                .collect()
        }
        None => cfg.services.clone(),
    };
    let overlay = ctx.env.overlay_dir.clone();
    let checks = selected.into_iter().map(|s| {
        let ca = s.ca_file.as_ref().map(|f| overlay.join(f));
        async move { check(s, ca, timeout).await }
    });
    let mut out = Vec::new();
    // Run concurrently: a dead service must not delay the others' answers.
    let handles: Vec<_> = checks.map(tokio::spawn).collect();
    for h in handles {
        out.push(
            h.await
                .map_err(|e| ToolError::failed(format!("check failed: {e}")))?,
        );
    }
    Ok(out)
}

async fn check(s: Service, ca: Option<PathBuf>, timeout: Duration) -> Health {
    let started = Instant::now();
    let (target, result) = match (&s.tcp, &s.http) {
        (Some(addr), None) if ca.is_some() => (
            format!("tcp://{addr}"),
            Err("`ca_file` applies to an `http` (https) service only".to_owned()),
        ),
        (Some(addr), None) => (format!("tcp://{addr}"), tcp_check(addr, timeout).await),
        (None, Some(url)) => (url.clone(), http_check(url, ca.as_deref(), timeout).await),
        _ => (
            String::new(),
            Err("configure exactly one of `tcp` or `http`".to_owned()),
        ),
    };
    let latency_ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    match result {
        Ok(detail) => Health {
            name: s.name,
            target,
            up: true,
            latency_ms,
            detail,
        },
        Err(detail) => Health {
            name: s.name,
            target,
            up: false,
            latency_ms,
            detail,
        },
    }
}

async fn tcp_check(addr: &str, timeout: Duration) -> Result<String, String> {
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok("connected".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

/// A GET with the workspace's HTTP client (reqwest with rustls: `http` and `https`, no
/// proxy from the environment, no redirects followed — a redirect is an answer). Up for
/// 2xx and 3xx. The targets are the operator's own services from config, not URLs from a
/// model, so the SSRF guard (which refuses internal addresses) does not apply. Certificates
/// are verified against the system's roots plus `ca` (never switched off: a service whose
/// certificate does not verify is down, with the reason).
async fn http_check(url: &str, ca: Option<&Path>, timeout: Duration) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("bad URL `{url}`: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "bad URL `{url}`: `{}` is not http or https",
            parsed.scheme()
        ));
    }
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .user_agent("strata-ops");
    if let Some(ca) = ca {
        let pem = tokio::fs::read(ca)
            .await
            .map_err(|e| format!("cannot read ca_file {}: {e}", ca.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("ca_file {} is not PEM certificates: {e}", ca.display()))?;
        if certs.is_empty() {
            return Err(format!("ca_file {} holds no PEM certificate", ca.display()));
        }
        for c in certs {
            builder = builder.add_root_certificate(c);
        }
    }
    let client = builder
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    match client.get(parsed).send().await {
        Ok(r) => {
            let s = r.status();
            let line = format!(
                "{:?} {} {}",
                r.version(),
                s.as_u16(),
                s.canonical_reason().unwrap_or("")
            )
            .trim_end()
            .to_owned();
            if s.is_success() || s.is_redirection() {
                Ok(line)
            } else {
                Err(line)
            }
        }
        Err(e) if e.is_timeout() => Err(format!("no answer within {} ms", timeout.as_millis())),
        Err(e) => {
            // The whole chain: "error sending request" alone says nothing about why.
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(": ");
                msg.push_str(&s.to_string());
                src = s.source();
            }
            Err(msg)
        }
    }
}
