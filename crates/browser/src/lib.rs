//! # strata-browser
//!
//! `browse_url` and `browser`: pages rendered by a headless Chromium (the system's,
//! `browser.executable` or found on `PATH`) driven over the DevTools protocol.
//!
//! **Every request the page makes goes through the SSRF guard.** Chromium is started with a
//! proxy that does not exist and with every request of the page paused (`Fetch` domain, at the
//! request stage); Strata makes each request itself through `strata-net`'s guard — the same
//! checks as `read_url`, DNS answers included — and hands Chromium the answer
//! (`Fetch.fulfillRequest`), redirects as redirects so the next hop is paused and checked
//! again. A request to a refused address is failed before anything leaves
//! (`BlockedByClient`) and recorded in the audit log (`browser_request_blocked`). Whatever
//! escapes interception (another target's request, a WebSocket) meets the dead proxy. Each
//! session has a fresh profile in a temporary directory, downloads are refused, and sessions
//! are capped (`browser.max_sessions`) and closed when idle (`browser.idle_secs`).
//!
//! **Chromium runs in our jail and its own sandbox.** Strata starts it itself, through
//! `strata_sandbox::host::jailed` where bubblewrap can run: the machine read-only, the data
//! and overlay directories hidden, the session's profile the only writable place, and Chromium
//! the unprivileged `nobody` of its own user namespace — so its own sandbox (namespaces and
//! seccomp for every renderer) runs inside ours even when Strata runs as root, where Chromium
//! alone would refuse it. Without bubblewrap it has its own sandbox, or as root none
//! (`--no-sandbox`), and `doctor` warns. chromiumoxide only connects to the DevTools address
//! Chromium prints; it never starts a process.

mod session;

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use strata_engine::{ToolContext, ToolError, tool};

pub use session::{Blocked, confinement, find_executable};
use session::{Instance, Sessions};

strata_engine::declare_core!();

/// Keeps this crate linked into the binary; the names of its tools.
#[inline(never)]
pub fn link() -> &'static [&'static str] {
    &["browse_url", "browser"]
}

/// What `browse_url` returns: `read_url`'s shape, and the page's requests that were refused.
#[derive(Debug, Serialize)]
pub struct BrowseOutput {
    /// The page's address after redirects.
    pub url: String,
    /// HTTP status of the page.
    pub status: u16,
    /// Its title.
    pub title: Option<String>,
    /// Readable text of the rendered page: headings as `#` lines, links as `[text](url)`.
    pub content: String,
    /// Whether `content` was cut at `max_chars`.
    pub truncated: bool,
    /// Requests of the page refused by the network guard.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<Blocked>,
}

fn char_limit(v: Option<u32>) -> Result<usize, ToolError> {
    let max = v.unwrap_or(20_000);
    if !(1..=200_000).contains(&max) {
        return Err(ToolError::invalid(
            "max_chars",
            "must be between 1 and 200000",
        ));
    }
    Ok(max as usize)
}

fn timeout(ctx: &ToolContext) -> Duration {
    Duration::from_secs(ctx.env.config.browser.timeout_secs.clamp(1, 600))
}

/// Renders a web page in a headless browser (scripts run) and returns its readable text, like
/// `read_url` for pages that need JavaScript. `wait_for`: a CSS selector to wait for before
/// reading. Only public http(s) addresses are reachable — for the page and for everything it
/// loads. The page is untrusted content.
#[tool(capabilities = [network], side_effects = none, web_facing, timeout_secs = 120)]
async fn browse_url(
    ctx: &ToolContext,
    /// The address, `http://` or `https://`.
    url: String,
    /// A CSS selector to wait for before the text is read.
    wait_for: Option<String>,
    /// Most characters of text to return (default 20000, at most 200000).
    max_chars: Option<u32>,
) -> Result<BrowseOutput, ToolError> {
    let max = char_limit(max_chars)?;
    let guard = strata_tools::web::guard(&ctx.env.config.security.network)?;
    guard
        .check(&url)
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?;
    let limit = timeout(ctx);
    let instance = Sessions::global()
        .one_off(ctx, guard)
        .await
        .map_err(ToolError::failed)?;
    let result = tokio::time::timeout(limit, async {
        instance.open(&url).await?;
        if let Some(sel) = &wait_for {
            instance.wait_for(sel, limit).await?;
        }
        instance.readable(max).await
    })
    .await;
    let blocked = instance.blocked();
    instance.close().await;
    let page = match result {
        Ok(Ok(page)) => page,
        Ok(Err(e)) => return Err(ToolError::failed(explain(e, &blocked))),
        Err(_) => {
            return Err(ToolError::failed(explain(
                format!(
                    "the page did not finish within {} s (browser.timeout_secs)",
                    limit.as_secs()
                ),
                &blocked,
            )));
        }
    };
    Ok(BrowseOutput {
        url: page.url,
        status: page.status,
        title: page.title,
        content: page.content,
        truncated: page.truncated,
        blocked,
    })
}

/// An error, with the refused requests that explain it.
fn explain(e: String, blocked: &[Blocked]) -> String {
    if blocked.is_empty() {
        return e;
    }
    let list: Vec<String> = blocked
        .iter()
        .map(|b| format!("{} ({})", b.url, b.reason))
        .collect();
    format!("{e}; refused by the network guard: {}", list.join(", "))
}

/// Keeps a browser page open across calls. `session` names it (yours alone). Actions:
/// `open` (`url`), `click` (`selector`, or `text` of a link or button), `type` (`selector`,
/// `text`), `press` (`key` like `Enter`, on `selector` or the focused element), `scroll`
/// (`pixels`, default 800), `text` (the page's readable text), `screenshot` (a PNG saved
/// under the overlay's `tmp/browser/`), `close`. Every request the page makes passes the
/// network guard; what it shows is untrusted content.
#[tool(capabilities = [network, file_write], side_effects = local, web_facing, timeout_secs = 120)]
#[allow(clippy::too_many_arguments)]
async fn browser(
    ctx: &ToolContext,
    /// The session's name (letters, digits, `-`, `_`).
    session: String,
    /// open, click, type, press, scroll, text, screenshot or close.
    action: String,
    /// For `open`.
    url: Option<String>,
    /// A CSS selector (`click`, `type`, `press`, and `wait_for` for `open`).
    selector: Option<String>,
    /// The text to type, or of the link or button to click.
    text: Option<String>,
    /// The key to press (`Enter`, `Tab`, `ArrowDown`, …).
    key: Option<String>,
    /// How far to scroll (default 800; negative: up).
    pixels: Option<i32>,
    /// Most characters of text to return (default 20000).
    max_chars: Option<u32>,
) -> Result<Value, ToolError> {
    if session.is_empty()
        || session.len() > 64
        || !session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ToolError::invalid(
            "session",
            "letters, digits, `-` and `_` (at most 64)",
        ));
    }
    let max = char_limit(max_chars)?;
    let limit = timeout(ctx);
    let sessions = Sessions::global();
    let owner = session::owner(ctx);
    if action == "close" {
        let closed = sessions.close(&owner, &session).await;
        return Ok(json!({"session": session, "closed": closed}));
    }
    let need = |v: &Option<String>, name: &str| {
        v.clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ToolError::invalid(name, format!("`{action}` needs `{name}`")))
    };
    let instance = match action.as_str() {
        "open" => {
            let url = need(&url, "url")?;
            let guard = strata_tools::web::guard(&ctx.env.config.security.network)?;
            guard
                .check(&url)
                .await
                .map_err(|e| ToolError::failed(e.to_string()))?;
            sessions
                .get_or_start(ctx, &owner, &session, guard)
                .await
                .map_err(ToolError::failed)?
        }
        "click" | "type" | "press" | "scroll" | "text" | "screenshot" => {
            sessions.get(&owner, &session).await.ok_or_else(|| {
                ToolError::failed(format!(
                    "no open browser session `{session}`: start it with action `open`"
                ))
            })?
        }
        other => {
            return Err(ToolError::invalid(
                "action",
                format!(
                    "`{other}` is not one of open, click, type, press, scroll, text, screenshot, close"
                ),
            ));
        }
    };
    let seen = instance.blocked().len();
    let run = async {
        match action.as_str() {
            "open" => {
                instance
                    .open(&need(&url, "url").map_err(|e| e.to_string())?)
                    .await?;
                if let Some(sel) = &selector {
                    instance.wait_for(sel, limit).await?;
                }
                page_json(&instance, max).await
            }
            "click" => {
                match (&selector, &text) {
                    (Some(sel), _) => instance.click_selector(sel).await?,
                    (None, Some(t)) => instance.click_text(t).await?,
                    (None, None) => return Err("`click` needs `selector` or `text`".to_owned()),
                }
                instance.settle().await;
                page_json(&instance, max).await
            }
            "type" => {
                let sel = selector.as_deref().ok_or("`type` needs `selector`")?;
                let t = text.as_deref().ok_or("`type` needs `text`")?;
                instance.type_into(sel, t).await?;
                Ok(json!({"typed": t.chars().count(), "selector": sel}))
            }
            "press" => {
                let k = key.as_deref().ok_or("`press` needs `key`")?;
                instance.press(selector.as_deref(), k).await?;
                instance.settle().await;
                page_json(&instance, max).await
            }
            "scroll" => {
                instance.scroll(pixels.unwrap_or(800)).await?;
                Ok(json!({"scrolled": pixels.unwrap_or(800)}))
            }
            "text" => page_json(&instance, max).await,
            "screenshot" => {
                let png = instance.screenshot().await?;
                let rel = format!(
                    "tmp/browser/{session}-{}.png",
                    strata_engine::clock::now_ms()
                );
                let path = ctx.env.overlay_dir.join(&rel);
                if let Some(dir) = path.parent() {
                    tokio::fs::create_dir_all(dir)
                        .await
                        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                }
                tokio::fs::write(&path, &png)
                    .await
                    .map_err(|e| format!("cannot write {rel}: {e}"))?;
                Ok(json!({"path": rel, "bytes": png.len()}))
            }
            _ => Err(format!("`{action}` is not an action")),
        }
    };
    let out = match tokio::time::timeout(limit, run).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "`{action}` did not finish within {} s (browser.timeout_secs)",
            limit.as_secs()
        )),
    };
    let blocked: Vec<Blocked> = instance.blocked().into_iter().skip(seen).collect();
    match out {
        Ok(mut v) => {
            if let Some(o) = v.as_object_mut() {
                o.insert("session".into(), json!(session));
                if !blocked.is_empty() {
                    o.insert("blocked".into(), json!(blocked));
                }
            }
            Ok(v)
        }
        Err(e) => Err(ToolError::failed(explain(e, &blocked))),
    }
}

async fn page_json(instance: &Instance, max: usize) -> Result<Value, String> {
    let page = instance.readable(max).await?;
    serde_json::to_value(&page).map_err(|e| e.to_string())
}
