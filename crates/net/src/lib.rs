//! # strata-net
//!
//! The network guard: every URL a tool fetches on behalf of a model or a user goes through
//! [`NetGuard`], which stops server-side request forgery.
//!
//! - only `http` and `https`; no userinfo (`http://example.com@127.0.0.1/`);
//! - host names such as `localhost`, `*.localhost`, `*.internal` and cloud metadata names
//!   are refused before any lookup;
//! - every address — an IP literal in the URL, or each address DNS returns — is checked
//!   against loopback, private, link-local, CGNAT, unspecified, multicast, broadcast,
//!   reserved, documentation, benchmarking, 6to4/Teredo/NAT64 and IPv4-mapped/compatible
//!   forms ([`blocked_reason`]); one bad address refuses the host;
//! - the connection goes to the addresses that were checked: the HTTP client resolves
//!   through the guard itself ([`reqwest::dns::Resolve`]), so there is no second lookup a
//!   rebinding DNS server could answer differently;
//! - redirects are followed by hand, each hop checked again (at most
//!   `security.network.max_redirects`), and `Authorization`/`Cookie`/API-key headers are
//!   dropped when a redirect leaves the original host;
//! - response bodies are capped (`max_response_bytes`) and the whole exchange is timed
//!   (`timeout_secs`); no system proxy is used.
//!
//! `security.network.allow` lists host names or CIDRs an intranet deployment may reach.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use url::{Host, Url};

/// Why a URL was not fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// Not a URL, or not one we fetch.
    #[error("invalid URL `{url}`: {reason}")]
    Invalid {
        /// The URL as given.
        url: String,
        /// Why.
        reason: String,
    },
    /// The guard refused the destination.
    #[error("blocked `{url}`: {reason} (see `security.network.allow` for intranet hosts)")]
    Blocked {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// Too many redirects.
    #[error("more than {0} redirects")]
    TooManyRedirects(u32),
    /// DNS, connection, TLS or protocol failure.
    #[error("request to `{url}` failed: {reason}")]
    Transport {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The whole exchange took too long.
    #[error("request to `{0}` timed out")]
    Timeout(String),
}

/// Resolves host names (the system resolver, or a fixed table in tests).
pub trait Resolver: Send + Sync {
    /// The addresses of `host` (ports are ignored).
    fn lookup(
        &self,
        host: &str,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send + '_>>;
}

/// The operating system's resolver (tokio's `lookup_host`).
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn lookup(
        &self,
        host: &str,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send + '_>> {
        let host = host.to_owned();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }
}

fn v4(s: &str) -> Ipv4Net {
    #[allow(clippy::expect_used)] // constants of this file
    Ipv4Net::from_str(s).expect("built-in IPv4 range")
}

fn v6(s: &str) -> Ipv6Net {
    #[allow(clippy::expect_used)] // constants of this file
    Ipv6Net::from_str(s).expect("built-in IPv6 range")
}

static V4_BLOCKED: LazyLock<Vec<(Ipv4Net, &'static str)>> = LazyLock::new(|| {
    vec![
        (v4("0.0.0.0/8"), "unspecified / this network"),
        (v4("10.0.0.0/8"), "private (RFC 1918)"),
        (v4("100.64.0.0/10"), "carrier-grade NAT (RFC 6598)"),
        (v4("127.0.0.0/8"), "loopback"),
        (
            v4("169.254.0.0/16"),
            "link-local (cloud metadata lives here)",
        ),
        (v4("172.16.0.0/12"), "private (RFC 1918)"),
        (v4("192.0.0.0/24"), "IETF protocol assignments"),
        (v4("192.0.2.0/24"), "documentation (TEST-NET-1)"),
        (v4("192.88.99.0/24"), "6to4 relay anycast"),
        (v4("192.168.0.0/16"), "private (RFC 1918)"),
        (v4("198.18.0.0/15"), "benchmarking (RFC 2544)"),
        (v4("198.51.100.0/24"), "documentation (TEST-NET-2)"),
        (v4("203.0.113.0/24"), "documentation (TEST-NET-3)"),
        (v4("224.0.0.0/4"), "multicast"),
        (v4("240.0.0.0/4"), "reserved (and broadcast)"),
    ]
});

static V6_BLOCKED: LazyLock<Vec<(Ipv6Net, &'static str)>> = LazyLock::new(|| {
    vec![
        (v6("::/128"), "unspecified"),
        (v6("::1/128"), "loopback"),
        (v6("64:ff9b::/96"), "NAT64"),
        (v6("64:ff9b:1::/48"), "NAT64 (local use)"),
        (v6("100::/64"), "discard-only"),
        (v6("2001::/32"), "Teredo"),
        (v6("2001:2::/48"), "benchmarking"),
        (v6("2001:db8::/32"), "documentation"),
        (v6("2001:10::/28"), "ORCHID"),
        (v6("2002::/16"), "6to4"),
        (v6("3fff::/20"), "documentation"),
        (v6("5f00::/16"), "segment routing"),
        (v6("fc00::/7"), "unique local (private)"),
        (v6("fe80::/10"), "link-local"),
        (v6("fec0::/10"), "site-local (deprecated)"),
        (v6("ff00::/8"), "multicast"),
    ]
});

/// Why `ip` must not be reached, or `None` when it is a public unicast address.
/// IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`) addresses are judged by
/// the IPv4 address inside.
pub fn blocked_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => V4_BLOCKED
            .iter()
            .find(|(n, _)| n.contains(&a))
            .map(|(_, why)| *why),
        IpAddr::V6(a) => {
            if let Some(inner) = embedded_v4(a) {
                return Some(blocked_reason(IpAddr::V4(inner)).unwrap_or("IPv4-compatible"));
            }
            if let Some(inner) = a.to_ipv4_mapped() {
                return blocked_reason(IpAddr::V4(inner));
            }
            V6_BLOCKED
                .iter()
                .find(|(n, _)| n.contains(&a))
                .map(|(_, why)| *why)
        }
    }
}

/// `::a.b.c.d` (deprecated IPv4-compatible form), excluding `::` and `::1`.
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    (s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1))
        .then(|| Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8))
}

/// Host names refused without a lookup.
fn blocked_name(host: &str) -> Option<&'static str> {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    if h == "localhost" || h.ends_with(".localhost") || h == "localhost.localdomain" {
        return Some("localhost");
    }
    if matches!(
        h.as_str(),
        "metadata" | "metadata.google.internal" | "instance-data" | "instance-data.ec2.internal"
    ) {
        return Some("cloud metadata service");
    }
    if h.ends_with(".internal") || h.ends_with(".local") || h.ends_with(".localdomain") {
        return Some("internal name");
    }
    if !h.contains('.') {
        return Some("single-label name (resolves on the local network)");
    }
    None
}

/// Headers that carry credentials; dropped on cross-host redirects.
const AUTH_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "x-auth-token",
];

struct Policy {
    allow_hosts: Vec<String>,
    allow_nets: Vec<IpNet>,
    resolver: Arc<dyn Resolver>,
}

impl Policy {
    fn ip_allowed(&self, ip: IpAddr) -> Result<(), String> {
        if self.allow_nets.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        match blocked_reason(ip) {
            Some(why) => Err(format!("{ip} is {why}")),
            None => Ok(()),
        }
    }

    fn host_allowed(&self, host: &str) -> bool {
        let h = host.trim_end_matches('.').to_ascii_lowercase();
        self.allow_hosts.contains(&h)
    }

    /// Resolves `host` and checks every address; the addresses returned are the ones the
    /// client connects to.
    async fn resolve_checked(&self, host: &str) -> Result<Vec<IpAddr>, String> {
        let listed = self.host_allowed(host);
        if !listed && let Some(why) = blocked_name(host) {
            return Err(format!("host `{host}` is {why}"));
        }
        let addrs = self
            .resolver
            .lookup(host)
            .await
            .map_err(|e| format!("cannot resolve `{host}`: {e}"))?;
        if addrs.is_empty() {
            return Err(format!("`{host}` has no addresses"));
        }
        if !listed {
            for ip in &addrs {
                self.ip_allowed(*ip)
                    .map_err(|e| format!("`{host}` resolves to {e}"))?;
            }
        }
        Ok(addrs)
    }
}

/// The resolver the HTTP client uses: resolution and checking in one step.
struct Guarded(Arc<Policy>);

/// A refusal raised inside the resolver, recognised again in reqwest's error chain.
#[derive(Debug)]
struct ResolveRefused(String);

impl std::fmt::Display for ResolveRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ResolveRefused {}

impl reqwest::dns::Resolve for Guarded {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match policy.resolve_checked(&host).await {
                Ok(ips) => {
                    let addrs: reqwest::dns::Addrs =
                        Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
                    Ok(addrs)
                }
                Err(e) => {
                    Err(Box::new(ResolveRefused(e)) as Box<dyn std::error::Error + Send + Sync>)
                }
            }
        })
    }
}

/// A request to fetch.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// `GET`, `POST`, …
    pub method: reqwest::Method,
    /// The URL.
    pub url: String,
    /// Headers (credentials among them are dropped on cross-host redirects).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Option<Vec<u8>>,
    /// More header names to drop when a redirect leaves the original host (besides
    /// `Authorization`, `Cookie` and the usual API-key headers).
    pub sensitive_headers: Vec<String>,
}

impl FetchRequest {
    /// A GET of `url`.
    pub fn get(url: impl Into<String>) -> Self {
        FetchRequest {
            method: reqwest::Method::GET,
            url: url.into(),
            headers: Vec::new(),
            body: None,
            sensitive_headers: Vec::new(),
        }
    }
}

/// What came back.
#[derive(Debug, Clone)]
pub struct FetchResponse {
    /// HTTP status of the last hop.
    pub status: u16,
    /// The URL of the last hop.
    pub final_url: String,
    /// Response headers (lower-case names).
    pub headers: Vec<(String, String)>,
    /// The body, at most `max_response_bytes`.
    pub body: Vec<u8>,
    /// The body was longer and was cut.
    pub truncated: bool,
    /// Redirects followed.
    pub redirects: u32,
}

/// The guard with its HTTP client.
pub struct NetGuard {
    policy: Arc<Policy>,
    client: reqwest::Client,
    max_redirects: u32,
    max_bytes: u64,
    timeout: Duration,
}

/// What the guard lets through and how far it goes: the shape of `security.network` in the
/// engine's config, kept here so this crate stands on its own (callers copy the fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetPolicy {
    /// Hosts (exact names) or CIDRs that may be reached although they are internal.
    pub allow: Vec<String>,
    /// Redirect hops followed, each re-checked.
    pub max_redirects: u32,
    /// Largest response body read (bytes).
    pub max_response_bytes: u64,
    /// Whole-request time limit (seconds).
    pub timeout_secs: u64,
}

impl Default for NetPolicy {
    fn default() -> Self {
        NetPolicy {
            allow: Vec::new(),
            max_redirects: 5,
            max_response_bytes: 5 * 1024 * 1024,
            timeout_secs: 30,
        }
    }
}

impl NetGuard {
    /// A guard with `cfg`, resolving with the system resolver.
    pub fn new(cfg: &NetPolicy) -> Result<Self, NetError> {
        Self::with_resolver(cfg, Arc::new(SystemResolver))
    }

    /// A guard with a custom resolver (tests: names that resolve to private addresses).
    pub fn with_resolver(cfg: &NetPolicy, resolver: Arc<dyn Resolver>) -> Result<Self, NetError> {
        let mut allow_hosts = Vec::new();
        let mut allow_nets = Vec::new();
        for entry in &cfg.allow {
            let e = entry.trim();
            if let Ok(n) = e.parse::<IpNet>() {
                allow_nets.push(n);
            } else if let Ok(ip) = e.parse::<IpAddr>() {
                allow_nets.push(IpNet::from(ip));
            } else if !e.is_empty() {
                allow_hosts.push(e.trim_end_matches('.').to_ascii_lowercase());
            }
        }
        let policy = Arc::new(Policy {
            allow_hosts,
            allow_nets,
            resolver,
        });
        let timeout = Duration::from_secs(cfg.timeout_secs.max(1));
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(Guarded(policy.clone())))
            .connect_timeout(Duration::from_secs(10).min(timeout))
            .timeout(timeout)
            .user_agent(concat!("strata/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| NetError::Transport {
                url: String::new(),
                reason: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(NetGuard {
            policy,
            client,
            max_redirects: cfg.max_redirects,
            max_bytes: cfg.max_response_bytes,
            timeout,
        })
    }

    /// The checks that need no lookup: scheme, userinfo, IP literals, blocked names.
    fn check_static(&self, raw: &str) -> Result<Url, NetError> {
        let invalid = |reason: &str| NetError::Invalid {
            url: raw.to_owned(),
            reason: reason.to_owned(),
        };
        let blocked = |reason: String| NetError::Blocked {
            url: raw.to_owned(),
            reason,
        };
        let url = Url::parse(raw.trim()).map_err(|e| invalid(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(&format!(
                "scheme `{}` is not allowed; use http or https",
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("credentials in the URL (userinfo) are not allowed"));
        }
        match url.host() {
            None => Err(invalid("no host")),
            Some(Host::Ipv4(a)) => self
                .policy
                .ip_allowed(IpAddr::V4(a))
                .map(|()| url.clone())
                .map_err(blocked),
            Some(Host::Ipv6(a)) => self
                .policy
                .ip_allowed(IpAddr::V6(a))
                .map(|()| url.clone())
                .map_err(blocked),
            Some(Host::Domain(d)) => {
                if !self.policy.host_allowed(d)
                    && let Some(why) = blocked_name(d)
                {
                    return Err(blocked(format!("host `{d}` is {why}")));
                }
                Ok(url.clone())
            }
        }
    }

    /// Checks `url` completely (including the DNS lookup) without fetching it; returns the
    /// addresses a fetch would connect to (empty for IP literals, which need no lookup).
    pub async fn check(&self, url: &str) -> Result<Vec<IpAddr>, NetError> {
        let u = self.check_static(url)?;
        match u.host() {
            Some(Host::Domain(d)) => {
                self.policy
                    .resolve_checked(d)
                    .await
                    .map_err(|reason| NetError::Blocked {
                        url: url.to_owned(),
                        reason,
                    })
            }
            _ => Ok(Vec::new()),
        }
    }

    /// Fetches through the guard, following redirects by hand.
    pub async fn fetch(&self, req: FetchRequest) -> Result<FetchResponse, NetError> {
        let url0 = req.url.clone();
        match tokio::time::timeout(self.timeout, self.fetch_inner(req, true)).await {
            Ok(r) => r,
            Err(_) => Err(NetError::Timeout(url0)),
        }
    }

    /// One hop through the guard: a redirect is returned as the answer it is (for a client
    /// that follows redirects itself and asks again — a browser whose every request comes
    /// through here).
    pub async fn fetch_once(&self, req: FetchRequest) -> Result<FetchResponse, NetError> {
        let url0 = req.url.clone();
        match tokio::time::timeout(self.timeout, self.fetch_inner(req, false)).await {
            Ok(r) => r,
            Err(_) => Err(NetError::Timeout(url0)),
        }
    }

    async fn fetch_inner(
        &self,
        req: FetchRequest,
        follow: bool,
    ) -> Result<FetchResponse, NetError> {
        let mut url = self.check_static(&req.url)?;
        let origin_host = url.host_str().map(str::to_ascii_lowercase);
        let mut method = req.method.clone();
        let mut body = req.body.clone();
        let mut headers = req.headers.clone();
        let mut redirects = 0;
        loop {
            let mut rb = self.client.request(method.clone(), url.clone());
            for (k, v) in &headers {
                rb = rb.header(k.as_str(), v.as_str());
            }
            if let Some(b) = &body {
                rb = rb.body(b.clone());
            }
            let mut resp = rb.send().await.map_err(|e| map_err(url.as_str(), &e))?;
            let status = resp.status();
            if follow
                && status.is_redirection()
                && let Some(loc) = resp.headers().get(reqwest::header::LOCATION)
            {
                if redirects >= self.max_redirects {
                    return Err(NetError::TooManyRedirects(self.max_redirects));
                }
                redirects += 1;
                let loc = loc.to_str().map_err(|_| NetError::Invalid {
                    url: url.to_string(),
                    reason: "redirect Location is not text".into(),
                })?;
                let next = url.join(loc).map_err(|e| NetError::Invalid {
                    url: loc.to_owned(),
                    reason: e.to_string(),
                })?;
                let next = self.check_static(next.as_str())?;
                if next.host_str().map(str::to_ascii_lowercase) != origin_host {
                    headers
                        .retain(|(k, _)| !AUTH_HEADERS.contains(&k.to_ascii_lowercase().as_str()));
                }
                // 303, and 301/302 after a POST, continue as GET without a body (as browsers do).
                let code = status.as_u16();
                if code == 303 || ((code == 301 || code == 302) && method == reqwest::Method::POST)
                {
                    method = reqwest::Method::GET;
                    body = None;
                }
                tracing::debug!(from = %url, to = %next, "following redirect");
                url = next;
                continue;
            }
            let resp_headers = resp
                .headers()
                .iter()
                .filter_map(|(k, v)| {
                    v.to_str()
                        .ok()
                        .map(|v| (k.as_str().to_owned(), v.to_owned()))
                })
                .collect();
            let mut out = Vec::new();
            let mut truncated = false;
            while let Some(chunk) = resp.chunk().await.map_err(|e| map_err(url.as_str(), &e))? {
                let room = (self.max_bytes as usize).saturating_sub(out.len());
                if chunk.len() > room {
                    out.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                out.extend_from_slice(&chunk);
            }
            return Ok(FetchResponse {
                status: status.as_u16(),
                final_url: url.to_string(),
                headers: resp_headers,
                body: out,
                truncated,
                redirects,
            });
        }
    }
}

/// Turns reqwest's error into ours; a refusal from the resolver stays a refusal.
fn map_err(url: &str, e: &reqwest::Error) -> NetError {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(r) = s.downcast_ref::<ResolveRefused>() {
            return NetError::Blocked {
                url: url.to_owned(),
                reason: r.0.clone(),
            };
        }
        src = s.source();
    }
    if e.is_timeout() {
        return NetError::Timeout(url.to_owned());
    }
    NetError::Transport {
        url: url.to_owned(),
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_and_mapped_forms_are_unwrapped() {
        let ip = |s: &str| {
            s.parse::<IpAddr>()
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        };
        assert_eq!(blocked_reason(ip("::ffff:127.0.0.1")), Some("loopback"));
        assert_eq!(
            blocked_reason(ip("::ffff:10.1.2.3")),
            Some("private (RFC 1918)")
        );
        assert_eq!(blocked_reason(ip("::127.0.0.1")), Some("loopback"));
        assert_eq!(blocked_reason(ip("::8.8.8.8")), Some("IPv4-compatible"));
        assert_eq!(blocked_reason(ip("::ffff:8.8.8.8")), None);
        assert_eq!(blocked_reason(ip("2606:4700:4700::1111")), None);
        assert_eq!(blocked_reason(ip("8.8.8.8")), None);
    }
}
