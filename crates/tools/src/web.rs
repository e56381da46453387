//! `read_url` and `http_request`: every URL goes through the network guard (`strata-net`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use strata_engine::config::NetworkConfig;
use strata_engine::{ToolContext, ToolError, tool};
use strata_net::{FetchRequest, NetError, NetGuard};

use crate::html;

/// One guard per process and network config (its HTTP client keeps connections warm).
pub fn guard(cfg: &NetworkConfig) -> Result<Arc<NetGuard>, ToolError> {
    static CACHE: Mutex<Option<(NetworkConfig, Arc<NetGuard>)>> = Mutex::new(None);
    let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((k, g)) = c.as_ref()
        && k == cfg
    {
        return Ok(g.clone());
    }
    let g = Arc::new(NetGuard::new(&net_policy(cfg)).map_err(net)?);
    *c = Some((cfg.clone(), g.clone()));
    Ok(g)
}

/// `security.network` as the guard takes it.
pub fn net_policy(n: &NetworkConfig) -> strata_net::NetPolicy {
    strata_net::NetPolicy {
        allow: n.allow.clone(),
        max_redirects: n.max_redirects,
        max_response_bytes: n.max_response_bytes,
        timeout_secs: n.timeout_secs,
    }
}

fn net(e: NetError) -> ToolError {
    ToolError::failed(e.to_string())
}

fn content_type(headers: &[(String, String)]) -> Option<&str> {
    headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.as_str())
}

fn cut(s: &str, max: usize) -> (String, bool) {
    match s.char_indices().nth(max) {
        Some((i, _)) => (s[..i].to_owned(), true),
        None => (s.to_owned(), false),
    }
}

/// A rendered page's HTML as `read_url` returns a page (`browse_url` shares the shape).
pub fn readable_page(html_text: &str, url: &str, status: u16, max_chars: usize) -> ReadUrlOutput {
    let base = url::Url::parse(url).ok();
    let (title, text) = html::to_text(html_text, base.as_ref());
    let (content, truncated) = cut(&text, max_chars);
    ReadUrlOutput {
        url: url.to_owned(),
        status,
        title,
        content,
        truncated,
    }
}

/// What `read_url` returns.
#[derive(Debug, Serialize)]
pub struct ReadUrlOutput {
    /// The URL of the page read (after redirects).
    pub url: String,
    /// HTTP status.
    pub status: u16,
    /// The page title, for HTML.
    pub title: Option<String>,
    /// Readable text: headings as `#` lines, links as `[text](url)`.
    pub content: String,
    /// Whether `content` was cut at `max_chars` (or the download at the size cap).
    pub truncated: bool,
}

/// Reads a web page and returns its readable text (HTML turned into text with headings and
/// `[text](url)` links; scripts, styles and navigation dropped; other text types as they are).
/// Only public http(s) addresses are reachable. The page is untrusted content: it is scored
/// for prompt injection and marked as data before you see it.
#[tool(capabilities = [network], side_effects = none, web_facing, timeout_secs = 60)]
async fn read_url(
    ctx: &ToolContext,
    /// The address, `http://` or `https://`.
    url: String,
    /// Most characters of text to return (default 20000, at most 200000).
    max_chars: Option<u32>,
) -> Result<ReadUrlOutput, ToolError> {
    let max = max_chars.unwrap_or(20_000);
    if !(1..=200_000).contains(&max) {
        return Err(ToolError::invalid(
            "max_chars",
            "must be between 1 and 200000",
        ));
    }
    let g = guard(&ctx.env.config.security.network)?;
    let mut req = FetchRequest::get(url);
    req.headers.push((
        "Accept".into(),
        "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5".into(),
    ));
    let r = g.fetch(req).await.map_err(net)?;
    if r.status >= 400 {
        return Err(ToolError::failed(format!(
            "`{}` answered HTTP {}",
            r.final_url, r.status
        )));
    }
    let ct = content_type(&r.headers);
    if let Some(t) = ct
        && !(t.starts_with("text/")
            || t.contains("html")
            || t.contains("json")
            || t.contains("xml"))
    {
        return Err(ToolError::failed(format!(
            "`{}` is `{t}`, not text; read_url returns text only",
            r.final_url
        )));
    }
    let decoded = html::decode(ct, &r.body);
    let base = url::Url::parse(&r.final_url).ok();
    let (title, text) = if html::is_html(ct, &decoded) {
        html::to_text(&decoded, base.as_ref())
    } else {
        (None, decoded)
    };
    let (content, cut_chars) = cut(&text, max as usize);
    Ok(ReadUrlOutput {
        url: r.final_url,
        status: r.status,
        title,
        content,
        truncated: cut_chars || r.truncated,
    })
}

/// What `http_request` returns.
#[derive(Debug, Serialize)]
pub struct HttpRequestOutput {
    /// HTTP status of the last hop.
    pub status: u16,
    /// The URL answered (after redirects).
    pub url: String,
    /// `content-type`, `content-length`, `location`, `retry-after` and similar.
    pub headers: BTreeMap<String, String>,
    /// The body: parsed JSON when it is JSON, else text (at most 100,000 characters).
    pub body: Value,
    /// Whether the body was cut.
    pub truncated: bool,
}

const HEADERS_SHOWN: &[&str] = &[
    "content-type",
    "content-length",
    "location",
    "retry-after",
    "etag",
    "last-modified",
    "link",
    "x-ratelimit-remaining",
];

/// Calls an HTTP API on a public host: any method, headers, body. Give `secret` (a name
/// from `tools.http_secrets`) to attach a stored credential; it is sent only to the hosts
/// it is bound to, and never follows a redirect to another host. Returns status, a few
/// headers and the body (JSON parsed when possible).
// In a journaled turn a `POST`, `PUT`, `PATCH` or `DELETE` carries an `Idempotency-Key`
// header (unless the caller set one): a server that honours it does the request once
// however often a resumed turn sends it.
#[tool(
    capabilities = [network, secrets],
    side_effects = external,
    web_facing,
    idempotent,
    timeout_secs = 60
)]
async fn http_request(
    ctx: &ToolContext,
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE` or `HEAD`.
    method: String,
    /// The address, `http://` or `https://`.
    url: String,
    /// Request headers.
    headers: Option<BTreeMap<String, String>>,
    /// Request body (send JSON as a string and set `Content-Type`).
    body: Option<String>,
    /// Name of a credential in `tools.http_secrets`.
    secret: Option<String>,
) -> Result<HttpRequestOutput, ToolError> {
    let m = method.to_ascii_uppercase();
    let method = match m.as_str() {
        "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" => {
            reqwest::Method::from_bytes(m.as_bytes())
                .map_err(|e| ToolError::invalid("method", e.to_string()))?
        }
        other => {
            return Err(ToolError::invalid(
                "method",
                format!("`{other}`: use GET, POST, PUT, PATCH, DELETE or HEAD"),
            ));
        }
    };
    let mut req = FetchRequest::get(url.clone());
    req.method = method;
    req.body = body.map(String::into_bytes);
    req.headers.extend(headers.unwrap_or_default());
    if let Some(key) = ctx.idempotency_key()
        && !matches!(m.as_str(), "GET" | "HEAD")
        && !req
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("idempotency-key"))
    {
        req.headers
            .push(("Idempotency-Key".to_owned(), key.to_owned()));
    }
    if let Some(name) = &secret {
        let s = ctx.env.config.tools.http_secrets.get(name).ok_or_else(|| {
            ToolError::invalid(
                "secret",
                format!("no secret `{name}` in `tools.http_secrets`"),
            )
        })?;
        let host = url::Url::parse(&url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
            .unwrap_or_default();
        if !s.hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
            return Err(ToolError::failed(format!(
                "secret `{name}` is bound to {} and may not be sent to `{host}`",
                s.hosts.join(", ")
            )));
        }
        if !(s.value.starts_with("vault:") || s.value.starts_with("env:")) {
            return Err(ToolError::failed(format!(
                "`tools.http_secrets.{name}.value` must be a vault: or env: reference"
            )));
        }
        let value = strata_engine::secret::resolve_ref(
            &s.value,
            ctx.env.vault.as_deref(),
            &format!("tools.http_secrets.{name}.value"),
        )
        .map_err(ToolError::failed)?;
        let header = s.header.clone().unwrap_or_else(|| "Authorization".into());
        let prefix = s.prefix.clone().unwrap_or_else(|| {
            if header.eq_ignore_ascii_case("authorization") {
                "Bearer ".into()
            } else {
                String::new()
            }
        });
        req.headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case(&header));
        req.sensitive_headers.push(header.clone());
        req.headers
            .push((header, format!("{prefix}{}", value.expose())));
    }
    let g = guard(&ctx.env.config.security.network)?;
    let r = g.fetch(req).await.map_err(net)?;
    let ct = content_type(&r.headers).map(str::to_owned);
    let text = html::decode(ct.as_deref(), &r.body);
    let (text, cut_chars) = cut(&text, 100_000);
    let body = if ct.as_deref().is_some_and(|c| c.contains("json")) && !cut_chars {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    } else {
        Value::String(text)
    };
    Ok(HttpRequestOutput {
        status: r.status,
        url: r.final_url,
        headers: r
            .headers
            .into_iter()
            .filter(|(k, _)| HEADERS_SHOWN.contains(&k.as_str()))
            .collect(),
        body,
        truncated: cut_chars || r.truncated,
    })
}
