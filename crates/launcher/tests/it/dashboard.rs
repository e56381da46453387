//! The dashboard in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
//! driven over WebDriver): sign-in, approvals, a transcript, the live event stream, the
//! generated invoke form, forgetting a memory, what a viewer may not do, forged and
//! cross-site requests, and markup from tools, memories and models shown as text. Every page
//! is saved as a screenshot under `target/ui-screenshots/`.
//!
//! Without `chromedriver` on PATH the browser tests say how to install it and pass; under
//! `CI=true` they fail instead. `STRATA_TEST_BROWSER=firefox` runs them in Firefox
//! (`firefox-esr` and `geckodriver` on PATH; screenshots prefixed `firefox-`).

use crate::common;

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use strata_test_support::{FakeServer, openai};

const BOSS: &str = "boss-token-0123456789";
const WATCHER: &str = "watcher-token-0123456789";
/// Markup that would run if any page parsed data as HTML.
const XSS: &str =
    "<script>window.__xss='script'</script><img src=x onerror=\"window.__xss='img'\">";

/// A headless Chromium under chromium-driver; both stop when dropped.
struct Browser {
    c: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver's process group: the browser it started goes with it (killing the driver
        // alone left Chromium running, orphaned, after every test).
        if let Some(pid) = rustix::process::Pid::from_raw(self.driver.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// Starts the browser, or says how to get one (and, under CI, fails). Chromium by default;
/// `STRATA_TEST_BROWSER=firefox` drives Firefox through geckodriver instead.
async fn browser() -> Option<Browser> {
    let firefox = std::env::var("STRATA_TEST_BROWSER").is_ok_and(|b| b == "firefox");
    let (driver_name, how) = if firefox {
        (
            "geckodriver",
            "STRATA_TEST_BROWSER=firefox needs firefox-esr (apt-get) and geckodriver \
             (cargo install geckodriver) on PATH",
        )
    } else {
        (
            "chromedriver",
            "the dashboard's browser tests need Debian's chromium and chromium-driver: \
             apt-get install chromium chromium-driver",
        )
    };
    let Some(driver_bin) = on_path(driver_name) else {
        assert!(std::env::var("CI").is_err(), "{how}");
        eprintln!("skipped: {how}");
        return None;
    };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        l.local_addr().expect("addr").port()
    };
    let driver = Command::new(driver_bin)
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the WebDriver server");
    let profile = tempfile::tempdir().expect("profile");
    let mut caps = serde_json::Map::new();
    if firefox {
        let mut opts = json!({"args": ["-headless", "--width=1280", "--height=900"]});
        if let Some(bin) = on_path("firefox-esr").or_else(|| on_path("firefox")) {
            opts["binary"] = json!(bin.display().to_string());
        }
        caps.insert("moz:firefoxOptions".into(), opts);
    } else {
        let mut args = vec![
            "--headless=new".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            "--window-size=1280,900".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        // Root (CI's containers) cannot use Chromium's own sandbox.
        if rustix::process::getuid().is_root() {
            args.push("--no-sandbox".to_owned());
        }
        let mut opts = json!({ "args": args });
        if let Some(bin) = on_path("chromium") {
            opts["binary"] = json!(bin.display().to_string());
        }
        caps.insert("goog:chromeOptions".into(), opts);
    }
    caps.insert("unhandledPromptBehavior".into(), json!("ignore"));
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let c = loop {
        match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => panic!("chromedriver did not start: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    Some(Browser {
        c,
        driver,
        _profile: profile,
    })
}

/// `target/ui-screenshots/<name>.png`.
async fn shot(c: &Client, name: &str) {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("mkdir screenshots");
    let png = c.screenshot().await.expect("screenshot");
    let prefix = match std::env::var("STRATA_TEST_BROWSER") {
        Ok(b) if b == "firefox" => "firefox-",
        _ => "",
    };
    std::fs::write(dir.join(format!("{prefix}{name}.png")), png).expect("write screenshot");
}

/// Waits until the element at `css` exists and its text contains `needle`; its text.
async fn wait_text(c: &Client, css: &str, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok(e) = c.find(Locator::Css(css)).await {
            last = e.text().await.unwrap_or_default();
            if last.contains(needle) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("`{css}` never showed `{needle}`; last text: {last}");
}

/// Opens a page of the dashboard (`#name`) and waits for its title.
async fn open(c: &Client, base: &str, hash: &str, title: &str) {
    c.goto(&format!("{base}/ui/#{hash}")).await.expect("goto");
    wait_text(c, "main h1", title).await;
}

/// Nothing planted ran: no global set by a script or an error handler.
async fn nothing_ran(c: &Client) {
    let v = c
        .execute(
            "return window.__xss === undefined ? null : window.__xss;",
            vec![],
        )
        .await
        .expect("execute");
    assert_eq!(v, Value::Null, "planted markup ran: {v}");
}

/// `fetch` from inside the page: `[status, body]`.
async fn page_fetch(c: &Client, method: &str, path: &str, headers: Value) -> (u16, Value) {
    let v = c
        .execute_async(
            "const [m, p, h, done] = arguments;
             fetch(p, {method: m, headers: h, credentials: 'same-origin', body: m === 'GET' ? undefined : '{}'})
               .then(async (r) => done([r.status, await r.json().catch(() => null)]))
               .catch((e) => done([0, String(e)]));",
            vec![json!(method), json!(path), headers],
        )
        .await
        .expect("fetch in page");
    (v[0].as_u64().unwrap_or(0) as u16, v[1].clone())
}

/// Starts serve and reads its one-time sign-in link from stderr.
fn serve_ui(overlay: &Path) -> (common::Served, String) {
    let (child, mut err) = common::spawn_serve(overlay, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut base, mut link) = (None, None);
    let mut line = String::new();
    while Instant::now() < deadline && (base.is_none() || link.is_none()) {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(i) = line.find("control API on ") {
            let rest = &line[i + "control API on ".len()..];
            base = rest
                .split(',')
                .next()
                .map(|a| a.trim().trim_end_matches("/api").to_owned());
        }
        if let Some(rest) = line.strip_prefix("dashboard: ") {
            link = rest.split_whitespace().next().map(str::to_owned);
        }
    }
    let log = common::drain(err);
    let served = common::Served {
        child,
        base: base.expect("serve announced its address"),
        mcp: String::new(),
        log,
    };
    (served, link.expect("serve printed a sign-in link"))
}

fn overlay(llm_url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(d, "agents/main/AGENTS.md", "# Main\nYou help.\n");
    common::write(d, "tmp/planted.txt", &format!("a file that says {XSS}"));
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{llm}server:\n  tokens:\n    - {{name: boss, token: {BOSS}, tier: owner}}\n    \
             - {{name: watcher, token: {WATCHER}, tier: viewer}}\n\
             security:\n  hitl:\n    gated_tools: [current_time]\n  access_control:\n    \
             safe_tools: [read_file, list_files]\n",
            llm = common::fake_llm(llm_url, "literal-test-key", "fake-model"),
        ),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [current_time, read_file]\n",
    );
    dir
}

/// Types `text` into the element at `loc`.
async fn type_into(c: &Client, loc: Locator<'_>, text: &str) {
    c.find(loc)
        .await
        .expect("an input")
        .send_keys(text)
        .await
        .expect("type");
}

/// Clicks the element at `loc`.
async fn click(c: &Client, loc: Locator<'_>) {
    c.find(loc)
        .await
        .expect("something to click")
        .click()
        .await
        .expect("click");
}

/// `POST /api/invoke` as the owner token: status and body.
async fn invoke_as_boss(base: &str, tool: &str, args: Value) -> (u16, Value) {
    common::api(
        "POST",
        &format!("{base}/api/invoke"),
        BOSS,
        Some(json!({"tool": tool, "args": args})),
    )
    .await
}

/// The id of a pending request other than `not`, once there is one.
async fn next_pending(base: &str, not: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let (_, v) = common::api("GET", &format!("{base}/api/approvals"), BOSS, None).await;
        if let Some(id) = v["value"]["approvals"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["id"].as_str())
            .find(|id| *id != not)
        {
            return id.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no new pending request");
}

async fn sign_in(c: &Client, base: &str, token: &str) {
    c.goto(&format!("{base}/ui/login")).await.expect("goto");
    let input = c
        .wait()
        .for_element(Locator::Id("token"))
        .await
        .expect("form");
    input.send_keys(token).await.expect("type");
    click(c, Locator::Css("form button[type=submit]")).await;
}

/// The operator's day: sign in (a wrong token first), decide two approvals, read a
/// transcript, watch an event arrive, invoke a tool through its form, forget a memory, and
/// never run the markup planted in a tool result, a memory or a model's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_decides_reads_invokes_and_forgets() {
    let Some(b) = browser().await else { return };
    let c = &b.c;
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([openai::text(&format!("Here you go: {XSS}"))]);
    let ov = overlay(&llm.url);
    let (s, _link) = serve_ui(ov.path());
    let base = s.base.clone();

    // `/` leads to the sign-in page; a wrong token is refused.
    c.goto(&format!("{base}/")).await.expect("goto");
    c.wait()
        .for_element(Locator::Id("token"))
        .await
        .expect("sign-in form");
    assert_eq!(c.current_url().await.expect("url").path(), "/ui/login");
    shot(c, "login").await;
    sign_in(c, &base, "not-the-token-at-all").await;
    wait_text(c, "#problem", "not valid").await;
    assert!(c.get_named_cookie("strata_session").await.is_err());

    // The right one signs in, with a cookie no script can read.
    sign_in(c, &base, BOSS).await;
    wait_text(c, "#who", "boss").await;
    let cookie = c.get_named_cookie("strata_session").await.expect("cookie");
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(format!("{:?}", cookie.same_site()), "Some(Strict)");
    let seen = c
        .execute("return document.cookie;", vec![])
        .await
        .expect("js");
    assert_eq!(seen, json!(""), "the cookie is HttpOnly");
    wait_text(c, "main h1", "Overview").await;
    wait_text(c, "main table", "running").await;
    shot(c, "overview").await;

    // Approvals: a gated call waits; approving it lets it finish, denying another refuses it.
    let invoke =
        |base: String| async move { invoke_as_boss(&base, "current_time", json!({})).await };
    let first = tokio::spawn(invoke(base.clone()));
    let first_id = next_pending(&base, "").await;
    open(c, &base, "approvals", "Approvals").await;
    let approve = c
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(&format!(
            "button.approve[data-id='{first_id}']"
        )))
        .await
        .expect("an approve button");
    wait_text(c, "main table", "current_time").await;
    shot(c, "approvals").await;
    type_into(c, Locator::Css("input.reason"), "looks fine").await;
    approve.click().await.expect("approve");
    let (st, v) = tokio::time::timeout(Duration::from_secs(20), first)
        .await
        .expect("the call finished")
        .expect("join");
    assert_eq!(
        (st, v["value"]["status"].as_str()),
        (200, Some("ok")),
        "{v}"
    );
    let second = tokio::spawn(invoke(base.clone()));
    // The list redraws when the waiting set changes: wait for the new request's button.
    let deny = c
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(&format!(
            "button.deny[data-id='{}']",
            next_pending(&base, &first_id).await
        )))
        .await
        .expect("the second request's deny button");
    deny.click().await.expect("deny");
    let (_, v) = tokio::time::timeout(Duration::from_secs(20), second)
        .await
        .expect("the call finished")
        .expect("join");
    assert_eq!(v["value"]["status"], "approval_denied", "{v}");
    let decided = wait_text(c, "main", "looks fine").await;
    assert!(decided.contains("denied"), "{decided}");

    // A real turn's transcript shows the model's markup as text.
    let (st, v) = common::api(
        "POST",
        &format!("{base}/chat"),
        BOSS,
        Some(json!({"message": "show me", "agent": "main", "session_id": "web-xss"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    open(c, &base, "sessions", "Sessions").await;
    wait_text(c, "main table", "web-xss").await;
    shot(c, "sessions").await;
    click(c, Locator::LinkText("web-xss")).await;
    let shown = wait_text(c, "#transcript", "<script>").await;
    assert!(
        shown.contains("show me") && shown.contains("Here you go"),
        "{shown}"
    );
    let planted = c
        .execute(
            "return document.querySelectorAll('#transcript script, #transcript img').length;",
            vec![],
        )
        .await
        .expect("js");
    assert_eq!(planted, json!(0));
    nothing_ran(c).await;
    shot(c, "transcript").await;

    // The activity page shows a call made after it loaded, without reloading.
    open(c, &base, "activity", "Activity").await;
    wait_text(c, "main .notice", "intact").await;
    c.execute("window.__marker = 'same page';", vec![])
        .await
        .expect("mark");
    let (st, _) = invoke_as_boss(&base, "list_files", json!({"path": "tmp"})).await;
    assert_eq!(st, 200);
    wait_text(c, "main table", "list_files").await;
    let same = c
        .execute("return window.__marker;", vec![])
        .await
        .expect("js");
    assert_eq!(same, json!("same page"), "the page was not reloaded");
    shot(c, "activity").await;

    // The generated form invokes read_file; the file's markup is shown as text.
    open(c, &base, "tools/read_file", "Tool read_file").await;
    type_into(c, Locator::Id("arg-path"), "tmp/planted.txt").await;
    click(c, Locator::Css("#invoke-form button[type=submit]")).await;
    let result = wait_text(c, "#invoke-result", "<script>").await;
    assert!(result.contains("ok"), "{result}");
    // No empty part printed as `null` (the DOM's replaceChildren does that to a null).
    assert!(!result.lines().any(|l| l.trim() == "null"), "{result}");
    nothing_ran(c).await;
    shot(c, "tool").await;
    open(c, &base, "tools", "Tools").await;
    wait_text(c, "main", "read_file").await;
    shot(c, "tools").await;

    // A memory with markup is listed as text and forgotten with a reason.
    let (_, v) = invoke_as_boss(
        &base,
        "memory_store",
        json!({"content": format!("the deploy key rotates monthly {XSS}")}),
    )
    .await;
    assert_eq!(v["value"]["status"], "ok", "{v}");
    open(c, &base, "memory", "Memory").await;
    wait_text(c, "main table", "rotates monthly <script>").await;
    nothing_ran(c).await;
    shot(c, "memory").await;
    type_into(c, Locator::Css("main table input"), "no longer true").await;
    click(c, Locator::Css("button.forget")).await;
    wait_text(c, "main table", "forgotten").await;
    let (_, v) = invoke_as_boss(
        &base,
        "memory_search",
        json!({"query": "deploy key rotates"}),
    )
    .await;
    assert_eq!(v["value"]["value"]["memories"], json!([]), "{v}");

    // Goals: the list and one goal with its log, markup in the title shown as text.
    let (_, v) = invoke_as_boss(
        &base,
        "goal_create",
        json!({"title": format!("Board pack {XSS}"), "description": "Slides for the board"}),
    )
    .await;
    assert_eq!(v["value"]["status"], "ok", "{v}");
    let (_, v) = invoke_as_boss(
        &base,
        "goal_task",
        json!({"goal": v["value"]["value"]["goal"]["id"], "action": "add", "title": "Revenue by region"}),
    )
    .await;
    assert_eq!(v["value"]["status"], "ok", "{v}");
    open(c, &base, "goals", "Goals").await;
    wait_text(c, "main table", "Board pack <script>").await;
    nothing_ran(c).await;
    click(c, Locator::Css("main table a")).await;
    wait_text(c, "main h1", "Board pack").await;
    wait_text(c, "main", "Revenue by region").await;
    let log = wait_text(c, "main", "created").await;
    assert!(log.contains("token:boss"), "{log}");
    nothing_ran(c).await;
    shot(c, "goal").await;

    // The remaining pages render.
    for (hash, title) in [
        ("agents", "Agents"),
        ("turns", "Turns"),
        ("schedules", "Schedules"),
        ("usage", "Usage"),
        ("config", "Config"),
    ] {
        open(c, &base, hash, title).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let text = c
            .find(Locator::Css("main"))
            .await
            .expect("main")
            .text()
            .await
            .expect("text");
        assert!(!text.contains("HTTP "), "{hash}: {text}");
        shot(c, hash).await;
    }
    wait_text(c, "main", "server.port").await;

    // A phone's width: the page reflows instead of scrolling sideways (wide tables scroll
    // in their own box).
    c.set_window_size(390, 844).await.expect("resize");
    for hash in ["overview", "approvals", "activity"] {
        open(c, &base, hash, "").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let fits = c
            .execute(
                "return document.documentElement.scrollWidth <= window.innerWidth + 1;",
                vec![],
            )
            .await
            .expect("js");
        assert_eq!(fits, json!(true), "{hash} scrolls sideways on a phone");
        shot(c, &format!("{hash}-phone")).await;
    }
    c.set_window_size(1280, 900).await.expect("resize");

    // Signing out ends the sign-in for good.
    let old = c.get_named_cookie("strata_session").await.expect("cookie");
    click(c, Locator::Id("logout")).await;
    c.wait()
        .for_element(Locator::Id("token"))
        .await
        .expect("back at sign-in");
    let r = common::client()
        .get(format!("{base}/api/session"))
        .header("cookie", format!("strata_session={}", old.value()))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
    drop(b);
    drop(s);
}

/// The one-time link signs in once and leaves no secret in the address bar; a viewer sees no
/// approve button and its forged approval is refused; a change without the CSRF token, from
/// another origin, or for another host is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_time_link_viewers_and_forgeries() {
    let Some(b) = browser().await else { return };
    let c = &b.c;
    let llm = FakeServer::start().await.expect("fake llm");
    let ov = overlay(&llm.url);
    let (s, link) = serve_ui(ov.path());
    let base = s.base.clone();

    // The link: signs in as the owner token, then the address has no secret in it.
    c.goto(&link).await.expect("goto link");
    wait_text(c, "#who", "boss").await;
    let url = c.current_url().await.expect("url");
    assert_eq!((url.path(), url.query()), ("/ui/", None), "{url}");
    // Used once: a second visit is refused.
    let r = common::client().get(&link).send().await.expect("send");
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().get("set-cookie").is_none());

    // A change without the CSRF token is refused even from the page itself.
    let (st, v) = page_fetch(c, "POST", "/api/schedules/memory_decay/pause", json!({})).await;
    assert_eq!((st, v["code"].as_str()), (403, Some("csrf_failed")), "{v}");

    // A viewer: the pending request is visible, with no approve button.
    let pending = tokio::spawn({
        let base = base.clone();
        async move { invoke_as_boss(&base, "current_time", json!({})).await }
    });
    let rows = common::pending(&base, BOSS).await;
    let id = rows[0]["id"].as_str().expect("id").to_owned();
    c.delete_all_cookies().await.expect("clear cookies");
    sign_in(c, &base, WATCHER).await;
    wait_text(c, "#who", "viewer").await;
    open(c, &base, "approvals", "Approvals").await;
    wait_text(c, "main table", "current_time").await;
    wait_text(c, "main", "not an approver").await;
    assert!(
        c.find_all(Locator::Css("button.approve"))
            .await
            .expect("find")
            .is_empty()
    );
    shot(c, "approvals-viewer").await;
    // Its forged approval, CSRF token and all, is refused by the approvals' own check.
    let me = page_fetch(c, "GET", "/api/session", json!({})).await.1;
    let csrf = me["value"]["csrf"].as_str().expect("csrf").to_owned();
    let (st, v) = page_fetch(
        c,
        "POST",
        &format!("/api/approvals/{id}/approve"),
        json!({"X-Strata-CSRF": csrf, "Content-Type": "application/json"}),
    )
    .await;
    assert_eq!((st, v["code"].as_str()), (403, Some("forbidden")), "{v}");
    let (_, v) = common::api("GET", &format!("{base}/api/approvals"), BOSS, None).await;
    assert_eq!(v["value"]["approvals"][0]["status"], "pending", "{v}");

    // Another site's post: the browser says so (Origin, Sec-Fetch-Site), and it is refused
    // with a valid cookie and the right CSRF token.
    let cookie = c.get_named_cookie("strata_session").await.expect("cookie");
    let cross = common::client()
        .post(format!("{base}/api/approvals/{id}/deny"))
        .header("cookie", format!("strata_session={}", cookie.value()))
        .header("x-strata-csrf", &csrf)
        .header("origin", "http://evil.example")
        .header("sec-fetch-site", "cross-site")
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(cross.status().as_u16(), 403);
    let v: Value = cross.json().await.expect("json");
    assert_eq!(v["code"], "csrf_failed", "{v}");
    // Signing in from another site's form is refused too.
    let r = common::client()
        .post(format!("{base}/ui/login"))
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={BOSS}"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 403);
    assert!(r.headers().get("set-cookie").is_none());

    // A request for another host (DNS rebinding) is refused, pages and API alike.
    for path in ["/ui/login", "/ui/", "/api/status"] {
        let r = common::client()
            .get(format!("{base}{path}"))
            .header("host", "evil.example")
            .header("x-strata-token", BOSS)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status().as_u16(), 403, "{path}");
    }

    // The pages' policy: this server's script and style only.
    let r = common::client()
        .get(format!("{base}/ui/login"))
        .send()
        .await
        .expect("send");
    let csp = r
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");

    // The owner decides the request so the blocked call ends.
    let (st, _) = common::api(
        "POST",
        &format!("{base}/api/approvals/{id}/deny"),
        BOSS,
        None,
    )
    .await;
    assert_eq!(st, 200);
    let _ = tokio::time::timeout(Duration::from_secs(20), pending).await;
    drop(b);
    drop(s);
}

/// A warning of several lines keeps its line breaks on the overview (issue #41): here the
/// hint `serve` logs when no provider is configured, whose YAML example only reads as one
/// when its lines stay lines (a YAML error's caret line is another such warning).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_line_warning_keeps_its_line_breaks() {
    let Some(b) = browser().await else { return };
    let c = &b.c;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(d, "agents/main/AGENTS.md", "# Main\nYou help.\n");
    common::write(
        d,
        "config/config.yaml",
        &format!("server:\n  tokens:\n    - {{name: boss, token: {BOSS}, tier: owner}}\n"),
    );
    common::write(d, "config/agents.yaml", "agents:\n  main: {}\n");
    let (s, _link) = serve_ui(d);
    let base = s.base.clone();
    sign_in(c, &base, BOSS).await;
    wait_text(c, "#who", "boss").await;
    wait_text(c, "main h1", "Overview").await;
    wait_text(
        c,
        "main table[aria-label='Recent warnings']",
        "No LLM provider",
    )
    .await;
    // The message cell as it is rendered (`innerText`: collapsed white space reads as spaces).
    let shown = c
        .execute(
            "const cells = document.querySelectorAll(\"table[aria-label='Recent warnings'] tbody td:nth-child(4)\");
             const hint = [...cells].find((td) => td.textContent.includes('No LLM provider'));
             return hint ? hint.innerText : null;",
            vec![],
        )
        .await
        .expect("execute");
    let shown = shown.as_str().unwrap_or_default();
    assert!(
        shown.contains("e.g.\n  defaults:\n    llm:\n      provider: openai"),
        "{shown:?}"
    );
    shot(c, "overview-multi-line-warning").await;
    drop(b);
    drop(s);
}
