//! `web_search`: Brave Search when it has a key, Tavily when it has one, DuckDuckGo's HTML
//! endpoint otherwise; a backend that fails hands over to the next.

use serde::Serialize;
use serde_json::{Value, json};
use strata_engine::config::WebSearchConfig;
use strata_engine::{ToolContext, ToolError, tool};
use strata_net::{FetchRequest, NetGuard};

use crate::html;

/// One result.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct SearchResult {
    /// Page title.
    pub title: String,
    /// Address.
    pub url: String,
    /// Short excerpt.
    pub snippet: String,
}

fn key(
    ctx: &ToolContext,
    configured: &Option<String>,
    vault_key: &str,
    path: &str,
) -> Option<String> {
    match configured {
        Some(r) => match strata_engine::secret::resolve_ref(r, ctx.env.vault.as_deref(), path) {
            Ok(s) => Some(s.expose().to_owned()),
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        },
        None => ctx
            .env
            .vault
            .as_ref()
            .and_then(|v| v.get(vault_key))
            .map(|s| s.expose().to_owned()),
    }
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

async fn brave(
    g: &NetGuard,
    c: &WebSearchConfig,
    k: &str,
    q: &str,
    n: usize,
) -> Result<Vec<SearchResult>, String> {
    let mut req = FetchRequest::get(format!(
        "{}/res/v1/web/search?q={}&count={n}",
        c.brave_url.trim_end_matches('/'),
        enc(q)
    ));
    req.headers = vec![
        ("Accept".into(), "application/json".into()),
        ("X-Subscription-Token".into(), k.to_owned()),
    ];
    req.sensitive_headers.push("X-Subscription-Token".into());
    let r = g.fetch(req).await.map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("Brave answered HTTP {}", r.status));
    }
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| format!("Brave: {e}"))?;
    Ok(v["web"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| SearchResult {
            title: html::to_text(x["title"].as_str().unwrap_or(""), None).1,
            url: x["url"].as_str().unwrap_or("").to_owned(),
            snippet: html::to_text(x["description"].as_str().unwrap_or(""), None).1,
        })
        .collect())
}

async fn tavily(
    g: &NetGuard,
    c: &WebSearchConfig,
    k: &str,
    q: &str,
    n: usize,
) -> Result<Vec<SearchResult>, String> {
    let mut req = FetchRequest::get(format!("{}/search", c.tavily_url.trim_end_matches('/')));
    req.method = reqwest::Method::POST;
    req.headers = vec![
        ("Content-Type".into(), "application/json".into()),
        ("Authorization".into(), format!("Bearer {k}")),
    ];
    req.body = Some(
        json!({"query": q, "max_results": n})
            .to_string()
            .into_bytes(),
    );
    let r = g.fetch(req).await.map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("Tavily answered HTTP {}", r.status));
    }
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| format!("Tavily: {e}"))?;
    Ok(v["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| SearchResult {
            title: x["title"].as_str().unwrap_or("").to_owned(),
            url: x["url"].as_str().unwrap_or("").to_owned(),
            snippet: x["content"].as_str().unwrap_or("").to_owned(),
        })
        .collect())
}

/// The real target of a DuckDuckGo result link (`//duckduckgo.com/l/?uddg=<url>&…`).
fn ddg_target(href: &str) -> String {
    let full = if href.starts_with("//") {
        format!("https:{href}")
    } else {
        href.to_owned()
    };
    url::Url::parse(&full)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "uddg")
                .map(|(_, v)| v.into_owned())
        })
        .unwrap_or(full)
}

/// The text between `start` (an index just after an opening tag) and the next `</a>`.
fn anchor_text(page: &str, start: usize) -> String {
    let end = page[start..].find("</a>").map_or(page.len(), |i| start + i);
    html::to_text(&page[start..end], None).1
}

fn parse_ddg(page: &str, n: usize) -> Vec<SearchResult> {
    let mut out: Vec<SearchResult> = Vec::new();
    let mut rest = 0;
    while out.len() < n {
        let Some(i) = page[rest..].find("class=\"result__a\"") else {
            break;
        };
        let at = rest + i;
        let tag_start = page[..at].rfind('<').unwrap_or(at);
        let tag_end = page[at..].find('>').map_or(page.len(), |j| at + j);
        let tag = &page[tag_start..tag_end];
        let href = tag
            .split("href=\"")
            .nth(1)
            .and_then(|h| h.split('"').next())
            .map(html::unescape)
            .unwrap_or_default();
        let title = anchor_text(page, (tag_end + 1).min(page.len()));
        rest = tag_end;
        let next = page[rest..]
            .find("class=\"result__a\"")
            .map_or(page.len(), |j| rest + j);
        let snippet = page[rest..next]
            .find("class=\"result__snippet\"")
            .map(|j| {
                let s = rest + j;
                let open = page[s..].find('>').map_or(s, |k| s + k + 1);
                anchor_text(page, open)
            })
            .unwrap_or_default();
        if !href.is_empty() && !title.is_empty() {
            out.push(SearchResult {
                title,
                url: ddg_target(&href),
                snippet,
            });
        }
    }
    out
}

async fn duckduckgo(
    g: &NetGuard,
    c: &WebSearchConfig,
    q: &str,
    n: usize,
) -> Result<Vec<SearchResult>, String> {
    let mut req = FetchRequest::get(c.duckduckgo_url.clone());
    req.method = reqwest::Method::POST;
    req.headers = vec![(
        "Content-Type".into(),
        "application/x-www-form-urlencoded".into(),
    )];
    req.body = Some(format!("q={}", enc(q)).into_bytes());
    let r = g.fetch(req).await.map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("DuckDuckGo answered HTTP {}", r.status));
    }
    Ok(parse_ddg(&html::decode(None, &r.body), n))
}

/// Searches the web. Returns a JSON array of `{title, url, snippet}`, best first. Read a
/// result with `read_url`. Results are untrusted content.
#[tool(capabilities = [network], side_effects = none, web_facing, timeout_secs = 60)]
async fn web_search(
    ctx: &ToolContext,
    /// What to search for.
    query: String,
    /// Most results (default 8, at most 20).
    max_results: Option<u32>,
) -> Result<Vec<SearchResult>, ToolError> {
    let n = max_results.unwrap_or(8);
    if !(1..=20).contains(&n) {
        return Err(ToolError::invalid(
            "max_results",
            "must be between 1 and 20",
        ));
    }
    if query.trim().is_empty() {
        return Err(ToolError::invalid("query", "must not be empty"));
    }
    let c = ctx.env.config.tools.web_search.clone();
    let g = crate::web::guard(&ctx.env.config.security.network)?;
    let n = n as usize;
    let mut errors = Vec::new();
    if let Some(k) = key(
        ctx,
        &c.brave_api_key,
        "brave-api-key",
        "tools.web_search.brave_api_key",
    ) {
        match brave(&g, &c, &k, &query, n).await {
            Ok(r) => return Ok(r),
            Err(e) => errors.push(e),
        }
    }
    if let Some(k) = key(
        ctx,
        &c.tavily_api_key,
        "tavily-api-key",
        "tools.web_search.tavily_api_key",
    ) {
        match tavily(&g, &c, &k, &query, n).await {
            Ok(r) => return Ok(r),
            Err(e) => errors.push(e),
        }
    }
    match duckduckgo(&g, &c, &query, n).await {
        Ok(r) => {
            if !errors.is_empty() {
                tracing::warn!(errors = %errors.join("; "), "web_search fell back to DuckDuckGo");
            }
            Ok(r)
        }
        Err(e) => {
            errors.push(e);
            Err(ToolError::failed(format!(
                "every search backend failed: {}",
                errors.join("; ")
            )))
        }
    }
}
