//! One headless Chromium per session: started with interception, kept for later calls.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use chromiumoxide::cdp::browser_protocol::browser::{
    SetDownloadBehaviorBehavior, SetDownloadBehaviorParams,
};
use chromiumoxide::cdp::browser_protocol::fetch::{
    ContinueRequestParams, EnableParams, EventRequestPaused, FailRequestParams,
    FulfillRequestParams, HeaderEntry, RequestPattern, RequestStage,
};
use chromiumoxide::cdp::browser_protocol::network::{ErrorReason, ResourceType};
use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::handler::viewport::Viewport;
use chromiumoxide::{Browser, Page};
use futures_util::StreamExt;
use serde::Serialize;
use strata_engine::config::BrowserConfig;
use strata_engine::{Env, ToolContext};
use strata_net::{FetchRequest, NetError, NetGuard};
use strata_tools::web::ReadUrlOutput;

/// A request of a page the network guard refused.
#[derive(Debug, Clone, Serialize)]
pub struct Blocked {
    /// What the page asked for.
    pub url: String,
    /// Why it was refused.
    pub reason: String,
}

/// The Chromium to run: `browser.executable`, else the first of the usual names on `PATH`.
pub fn find_executable(cfg: &BrowserConfig) -> Option<PathBuf> {
    if let Some(p) = &cfg.executable {
        return Some(p.clone());
    }
    let paths = std::env::var_os("PATH")?;
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .flat_map(|name| std::env::split_paths(&paths).map(move |d| d.join(name)))
    .find(|p| p.is_file())
}

/// How Chromium is confined here: inside our bubblewrap jail (as an unprivileged user, so
/// Chromium's own sandbox runs too, even when Strata runs as root), else Chromium's own
/// sandbox alone, else — as root without bubblewrap — none (`doctor` warns).
pub fn confinement() -> &'static str {
    if strata_sandbox::probe().bwrap.is_some() {
        "bubblewrap, with Chromium's own sandbox inside"
    } else if rustix::process::geteuid().is_root() {
        "none: running as root without bubblewrap, Chromium runs with --no-sandbox"
    } else {
        "Chromium's own sandbox"
    }
}

/// The switches Chromium runs with (besides the profile and the jail's).
const ARGS: &[&str] = &[
    "--headless=new",
    // The DevTools endpoint on the loopback, on a port of Chromium's choosing (it prints it).
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    // Nothing leaves except what Strata fetches for the page: a request that is not
    // intercepted meets a proxy that is not there.
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--dns-prefetch-disable",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-client-side-phishing-detection",
    "--disable-component-extensions-with-background-pages",
    "--disable-default-apps",
    "--disable-hang-monitor",
    "--disable-prompt-on-repost",
    "--metrics-recording-only",
    "--password-store=basic",
    "--use-mock-keychain",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-features=HttpsUpgrades,MediaRouter,OptimizationHints,TranslateUI",
    "--lang=en-US",
];

/// Starts Chromium with `profile` as its only writable place and returns it with its DevTools
/// address. In bubblewrap where it can run (the data and overlay directories hidden, `HOME`
/// the profile); as root without it, with `--no-sandbox`.
async fn launch(
    exe: &std::path::Path,
    profile: &std::path::Path,
    env: &Env,
    timeout: Duration,
) -> Result<(tokio::process::Child, String), String> {
    use tokio::io::AsyncBufReadExt;
    let jail = strata_sandbox::host::Jail {
        writable: vec![profile.to_path_buf()],
        // Never a directory the browser itself is installed in.
        hidden: [&env.data_dir, &env.overlay_dir]
            .into_iter()
            .filter(|h| h.parent().is_some() && !exe.starts_with(h))
            .cloned()
            .collect(),
    };
    let mut cmd = match strata_sandbox::host::jailed(exe, &jail, &[]) {
        Some(cmd) => cmd,
        None => {
            let mut cmd = strata_sandbox::host::command(exe, &[]);
            if rustix::process::geteuid().is_root() {
                // Chromium refuses its sandbox as root; `doctor` says so.
                cmd.arg("--no-sandbox");
            }
            cmd
        }
    };
    cmd.args(ARGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .env("HOME", profile)
        .env("TMPDIR", "/tmp")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let Some(stderr) = child.stderr.take() else {
        stop(&mut child).await;
        return Err(format!("cannot read what {} says", exe.display()));
    };
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let mut said = Vec::new();
    let found = tokio::time::timeout(timeout, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(ws) = line.split("DevTools listening on ").nth(1) {
                return Some(ws.trim().to_owned());
            }
            if said.len() == 8 {
                said.remove(0);
            }
            said.push(line);
        }
        None
    })
    .await;
    match found {
        Ok(Some(ws)) => {
            // Keep reading, or Chromium blocks on a full pipe.
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::trace!(target: "strata_browser::chromium", "{line}");
                }
            });
            Ok((child, ws))
        }
        Ok(None) => {
            stop(&mut child).await;
            Err(format!(
                "{} exited before it was ready: {}",
                exe.display(),
                said.join(" | ")
            ))
        }
        Err(_) => {
            stop(&mut child).await;
            Err(format!(
                "{} was not ready within {} s",
                exe.display(),
                timeout.as_secs()
            ))
        }
    }
}

/// Kills Chromium's process group and reaps it.
async fn stop(child: &mut tokio::process::Child) {
    strata_sandbox::host::kill_group(child.id());
    let _ = child.kill().await;
}

/// Whose sessions these are: an agent's, or the caller's.
pub(crate) fn owner(ctx: &ToolContext) -> String {
    match &ctx.agent_id {
        Some(a) => format!("agent:{a}"),
        None => ctx.principal.to_string(),
    }
}

/// What interception saw, shared with the tools.
#[derive(Default)]
struct Seen {
    blocked: Vec<Blocked>,
    /// The status of the last document (page or frame) answered.
    document_status: Option<u16>,
}

/// A running Chromium with one page.
pub(crate) struct Instance {
    browser: tokio::sync::Mutex<Option<Browser>>,
    page: Page,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    seen: Arc<Mutex<Seen>>,
    last_used: Mutex<Instant>,
    /// Chromium (inside bubblewrap where it can run), its process group killed on close.
    child: tokio::sync::Mutex<Option<tokio::process::Child>>,
    // Removed after Chromium has exited (close), with everything the page stored.
    _profile: tempfile::TempDir,
}

/// Who is asking, for the audit records of refused requests.
#[derive(Clone)]
struct Caller {
    env: Arc<Env>,
    agent_id: Option<String>,
    principal: String,
    request_id: String,
}

impl Instance {
    async fn start(ctx: &ToolContext, guard: Arc<NetGuard>) -> Result<Instance, String> {
        let cfg = &ctx.env.config.browser;
        let exe = find_executable(cfg).ok_or(
            "no Chromium found: install it (Debian: apt-get install chromium) or set \
             browser.executable",
        )?;
        let profile = tempfile::Builder::new()
            .prefix("strata-browser-")
            .tempdir()
            .map_err(|e| format!("cannot make the browser profile: {e}"))?;
        let timeout = Duration::from_secs(cfg.timeout_secs.clamp(1, 600));
        let (mut child, ws) = launch(&exe, profile.path(), &ctx.env, timeout).await?;
        let handler_config = HandlerConfig {
            ignore_https_errors: false,
            viewport: Some(Viewport::default()),
            request_timeout: timeout,
            ..HandlerConfig::default()
        };
        let (browser, mut handler) = match Browser::connect_with_config(ws, handler_config).await {
            Ok(b) => b,
            Err(e) => {
                stop(&mut child).await;
                return Err(format!("cannot drive {}: {e}", exe.display()));
            }
        };
        let mut tasks = vec![tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                if event.is_err() {
                    tracing::debug!("browser connection: {event:?}");
                }
            }
        })];
        let fail = |e: chromiumoxide::error::CdpError| format!("the browser failed: {e}");
        browser
            .execute(SetDownloadBehaviorParams::new(
                SetDownloadBehaviorBehavior::Deny,
            ))
            .await
            .map_err(fail)?;
        let page = browser.new_page("about:blank").await.map_err(fail)?;
        let mut paused = page
            .event_listener::<EventRequestPaused>()
            .await
            .map_err(fail)?;
        page.execute(EnableParams {
            patterns: Some(vec![RequestPattern {
                url_pattern: Some("*".into()),
                resource_type: None,
                request_stage: Some(RequestStage::Request),
            }]),
            handle_auth_requests: None,
        })
        .await
        .map_err(fail)?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let caller = Caller {
            env: ctx.env.clone(),
            agent_id: ctx.agent_id.clone(),
            principal: ctx.principal.to_string(),
            request_id: ctx.request_id.clone(),
        };
        let (p, s) = (page.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            while let Some(ev) = paused.next().await {
                let (p, s, g, c) = (p.clone(), s.clone(), guard.clone(), caller.clone());
                tokio::spawn(async move { answer(&p, &ev, &g, &s, &c).await });
            }
        }));
        Ok(Instance {
            browser: tokio::sync::Mutex::new(Some(browser)),
            page,
            tasks,
            seen,
            last_used: Mutex::new(Instant::now()),
            child: tokio::sync::Mutex::new(Some(child)),
            _profile: profile,
        })
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// The requests refused so far, in order.
    pub(crate) fn blocked(&self) -> Vec<Blocked> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .blocked
            .clone()
    }

    /// Goes to `url` and waits for it to load.
    pub(crate) async fn open(&self, url: &str) -> Result<(), String> {
        self.touch();
        self.page
            .goto(url)
            .await
            .map(|_| ())
            .map_err(|e| format!("{url} did not load: {e}"))
    }

    /// Waits until `selector` matches an element, for at most `limit`.
    pub(crate) async fn wait_for(&self, selector: &str, limit: Duration) -> Result<(), String> {
        let until = Instant::now() + limit;
        loop {
            if self.page.find_element(selector).await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(format!(
                    "`{selector}` did not appear within {} s",
                    limit.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Lets a click's or key's effects (a navigation, a script) happen.
    pub(crate) async fn settle(&self) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.ready()).await;
    }

    async fn ready(&self) {
        loop {
            let state = self
                .page
                .evaluate("document.readyState")
                .await
                .ok()
                .and_then(|v| v.into_value::<String>().ok());
            if state.as_deref() == Some("complete") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The page as `read_url` shows one.
    pub(crate) async fn readable(&self, max: usize) -> Result<ReadUrlOutput, String> {
        self.touch();
        let html: String = self
            .page
            .evaluate("document.documentElement ? document.documentElement.outerHTML : ''")
            .await
            .map_err(|e| format!("cannot read the page: {e}"))?
            .into_value()
            .map_err(|e| format!("cannot read the page: {e}"))?;
        let url = self.page.url().await.ok().flatten().unwrap_or_default();
        let status = self
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .document_status
            .unwrap_or(200);
        Ok(strata_tools::web::readable_page(&html, &url, status, max))
    }

    /// The element `selector` matches, or the error that says none does.
    async fn element(&self, selector: &str) -> Result<chromiumoxide::Element, String> {
        self.touch();
        self.page
            .find_element(selector)
            .await
            .map_err(|_| format!("nothing matches `{selector}`"))
    }

    pub(crate) async fn click_selector(&self, selector: &str) -> Result<(), String> {
        let el = self.element(selector).await?;
        el.click()
            .await
            .map(|_| ())
            .map_err(|e| format!("cannot click `{selector}`: {e}"))
    }

    /// Clicks the first link, button or input whose visible text contains `text`.
    pub(crate) async fn click_text(&self, text: &str) -> Result<(), String> {
        self.touch();
        let needle = serde_json::to_string(&text.to_lowercase()).map_err(|e| e.to_string())?;
        let script = format!(
            "(() => {{ const n = {needle}; \
             const all = document.querySelectorAll('a, button, input[type=submit], input[type=button], [role=button], summary, label'); \
             for (const el of all) {{ const t = (el.innerText || el.value || '').toLowerCase(); \
               if (t.includes(n)) {{ el.click(); return true; }} }} return false; }})()"
        );
        let clicked: bool = self
            .page
            .evaluate(script)
            .await
            .map_err(|e| format!("cannot click: {e}"))?
            .into_value()
            .unwrap_or(false);
        if clicked {
            Ok(())
        } else {
            Err(format!("no link or button shows `{text}`"))
        }
    }

    pub(crate) async fn type_into(&self, selector: &str, text: &str) -> Result<(), String> {
        let el = self.element(selector).await?;
        el.click()
            .await
            .map_err(|e| format!("cannot focus `{selector}`: {e}"))?;
        el.type_str(text)
            .await
            .map(|_| ())
            .map_err(|e| format!("cannot type into `{selector}`: {e}"))
    }

    pub(crate) async fn press(&self, selector: Option<&str>, key: &str) -> Result<(), String> {
        self.touch();
        let sel = selector.unwrap_or(":focus");
        let el = self
            .page
            .find_element(sel)
            .await
            .map_err(|_| format!("nothing matches `{sel}` to press {key} on"))?;
        el.press_key(key)
            .await
            .map(|_| ())
            .map_err(|e| format!("cannot press {key}: {e}"))
    }

    pub(crate) async fn scroll(&self, pixels: i32) -> Result<(), String> {
        self.touch();
        self.page
            .evaluate(format!("window.scrollBy(0, {pixels})"))
            .await
            .map(|_| ())
            .map_err(|e| format!("cannot scroll: {e}"))
    }

    pub(crate) async fn screenshot(&self) -> Result<Vec<u8>, String> {
        self.touch();
        self.page
            .screenshot(chromiumoxide::page::ScreenshotParams::builder().build())
            .await
            .map_err(|e| format!("cannot take a screenshot: {e}"))
    }

    /// Ends Chromium and removes its profile.
    pub(crate) async fn close(&self) {
        if let Some(mut b) = self.browser.lock().await.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), b.close()).await;
        }
        if let Some(mut c) = self.child.lock().await.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), c.wait()).await;
            stop(&mut c).await;
        }
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Answers one paused request: fetched through the guard and handed to Chromium, or failed
/// (and audited) when the guard refuses it.
async fn answer(
    page: &Page,
    ev: &EventRequestPaused,
    guard: &NetGuard,
    seen: &Mutex<Seen>,
    caller: &Caller,
) {
    let req = &ev.request;
    let url = req.url.clone();
    // Inline data never touches the network.
    if url.starts_with("data:") || url.starts_with("blob:") {
        let _ = page
            .execute(ContinueRequestParams::new(ev.request_id.clone()))
            .await;
        return;
    }
    let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap_or(reqwest::Method::GET);
    let headers: Vec<(String, String)> = req
        .headers
        .inner()
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.to_ascii_lowercase().as_str(),
                        "host" | "content-length" | "connection" | "accept-encoding"
                    )
                })
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let body: Option<Vec<u8>> = req.post_data_entries.as_ref().map(|entries| {
        entries
            .iter()
            .filter_map(|e| e.bytes.as_ref())
            .filter_map(|b| {
                base64::engine::general_purpose::STANDARD
                    .decode(AsRef::<str>::as_ref(b))
                    .ok()
            })
            .flatten()
            .collect()
    });
    let fetched = guard
        .fetch_once(FetchRequest {
            method,
            url: url.clone(),
            headers,
            body,
            sensitive_headers: Vec::new(),
        })
        .await;
    match fetched {
        Ok(r) => {
            if ev.resource_type == ResourceType::Document {
                seen.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .document_status = Some(r.status);
            }
            let headers: Vec<HeaderEntry> = r
                .headers
                .iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "content-length" | "transfer-encoding" | "connection" | "content-encoding"
                    )
                })
                .map(|(k, v)| HeaderEntry::new(k.clone(), v.clone()))
                .collect();
            let mut f = FulfillRequestParams::new(ev.request_id.clone(), i64::from(r.status));
            f.response_headers = Some(headers);
            f.body = Some(
                base64::engine::general_purpose::STANDARD
                    .encode(&r.body)
                    .into(),
            );
            if let Err(e) = page.execute(f).await {
                tracing::debug!(url = %url, error = %e, "browser: answering a request failed");
            }
        }
        Err(e @ (NetError::Blocked { .. } | NetError::Invalid { .. })) => {
            let reason = match &e {
                NetError::Blocked { reason, .. } | NetError::Invalid { reason, .. } => {
                    reason.clone()
                }
                _ => e.to_string(),
            };
            tracing::warn!(url = %url, reason = %reason, "browser: request refused by the network guard");
            caller.env.audit_event(&serde_json::json!({
                "event": "browser_request_blocked",
                "ts": strata_engine::clock::now_rfc3339(),
                "url": url,
                "reason": reason,
                "resource": format!("{:?}", ev.resource_type),
                "agent_id": caller.agent_id,
                "principal": caller.principal,
                "request_id": caller.request_id,
            }));
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .blocked
                .push(Blocked { url, reason });
            let _ = page
                .execute(FailRequestParams::new(
                    ev.request_id.clone(),
                    ErrorReason::BlockedByClient,
                ))
                .await;
        }
        Err(e) => {
            tracing::debug!(url = %url, error = %e, "browser: a request failed");
            let reason = match e {
                NetError::Timeout(_) => ErrorReason::TimedOut,
                _ => ErrorReason::Failed,
            };
            let _ = page
                .execute(FailRequestParams::new(ev.request_id.clone(), reason))
                .await;
        }
    }
}

/// The open sessions of this process, by owner and name.
pub(crate) struct Sessions {
    open: tokio::sync::Mutex<HashMap<(String, String), Arc<Instance>>>,
    /// One-off instances (`browse_url`) running now.
    one_offs: std::sync::atomic::AtomicUsize,
}

impl Sessions {
    pub(crate) fn global() -> &'static Sessions {
        static S: std::sync::OnceLock<Sessions> = std::sync::OnceLock::new();
        S.get_or_init(|| Sessions {
            open: tokio::sync::Mutex::new(HashMap::new()),
            one_offs: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Closes sessions idle longer than `browser.idle_secs`.
    async fn sweep(&self, idle: Duration) {
        let stale: Vec<Arc<Instance>> = {
            let mut open = self.open.lock().await;
            let keys: Vec<_> = open
                .iter()
                .filter(|(_, i)| i.idle_for() > idle)
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter().filter_map(|k| open.remove(&k)).collect()
        };
        for i in stale {
            i.close().await;
        }
    }

    pub(crate) async fn get(&self, owner: &str, name: &str) -> Option<Arc<Instance>> {
        self.open
            .lock()
            .await
            .get(&(owner.to_owned(), name.to_owned()))
            .cloned()
    }

    pub(crate) async fn get_or_start(
        &self,
        ctx: &ToolContext,
        owner: &str,
        name: &str,
        guard: Arc<NetGuard>,
    ) -> Result<Arc<Instance>, String> {
        let cfg = &ctx.env.config.browser;
        self.sweep(Duration::from_secs(cfg.idle_secs.max(1))).await;
        let key = (owner.to_owned(), name.to_owned());
        let mut open = self.open.lock().await;
        if let Some(i) = open.get(&key) {
            return Ok(i.clone());
        }
        if open.len() >= cfg.max_sessions {
            return Err(format!(
                "{} browser sessions are open (browser.max_sessions); close one with action `close`",
                open.len()
            ));
        }
        let i = Arc::new(Instance::start(ctx, guard).await?);
        open.insert(key, i.clone());
        Ok(i)
    }

    pub(crate) async fn close(&self, owner: &str, name: &str) -> bool {
        let found = self
            .open
            .lock()
            .await
            .remove(&(owner.to_owned(), name.to_owned()));
        match found {
            Some(i) => {
                i.close().await;
                true
            }
            None => false,
        }
    }

    /// A fresh instance for one call (`browse_url`), counted against one more than
    /// `browser.max_sessions` at once; the caller closes it.
    pub(crate) async fn one_off(
        &self,
        ctx: &ToolContext,
        guard: Arc<NetGuard>,
    ) -> Result<OneOff, String> {
        use std::sync::atomic::Ordering;
        let cap = ctx.env.config.browser.max_sessions + 1;
        if self.one_offs.fetch_add(1, Ordering::SeqCst) >= cap {
            self.one_offs.fetch_sub(1, Ordering::SeqCst);
            return Err(format!(
                "{cap} pages are being rendered already (browser.max_sessions); try again"
            ));
        }
        match Instance::start(ctx, guard).await {
            Ok(i) => Ok(OneOff(i)),
            Err(e) => {
                self.one_offs.fetch_sub(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }
}

/// A `browse_url` instance: counted while it lives.
pub(crate) struct OneOff(Instance);

impl std::ops::Deref for OneOff {
    type Target = Instance;
    fn deref(&self) -> &Instance {
        &self.0
    }
}

impl Drop for OneOff {
    fn drop(&mut self) {
        Sessions::global()
            .one_offs
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
