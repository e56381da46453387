//! The browser tools in a real headless Chromium (Debian's `chromium`, installed by
//! `.ci/run`) against pages served on 127.0.0.1 by the test: a page its script writes, a
//! form filled and sent, a script fetching a refused address, a redirect to one.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::response::{Html, IntoResponse, Redirect};
use axum::routing::{get, post};
use serde_json::{Value, json};
use strata_engine::audit::{AuditRecord, AuditSink};
use strata_engine::config::Config;
use strata_engine::{Env, Principal};
use strata_runtime::{Invocation, Invoker, Registry, Status};

/// Keeps the audit log's events (the refused requests).
#[derive(Default)]
struct Events(Mutex<Vec<Value>>);

impl AuditSink for Events {
    fn record(&self, _record: &AuditRecord) {}
    fn event(&self, event: &Value) {
        self.0.lock().expect("lock").push(event.clone());
    }
}

/// Pages on 127.0.0.1; its address.
async fn site() -> String {
    let app = axum::Router::new()
        .route(
            "/script",
            get(|| async {
                Html(
                    "<html><head><title>Rendered</title></head><body><div id=out></div>\
                     <script>setTimeout(() => { const d = document.getElementById('out'); \
                     d.textContent = 'written by the page script'; d.className = 'ready'; }, 50);\
                     </script></body></html>",
                )
            }),
        )
        .route(
            "/form",
            get(|| async {
                Html(
                    "<html><body><form action=/submit method=post>\
                     <input id=q name=q><button type=submit>Send it</button></form></body></html>",
                )
            }),
        )
        .route(
            "/submit",
            post(|body: String| async move {
                Html(format!("<html><body><p>received {body}</p></body></html>"))
            }),
        )
        .route(
            "/leak",
            get(|| async {
                Html(
                    "<html><body><p id=state>waiting</p><script>\
                     fetch('http://169.254.169.254/latest/meta-data/')\
                       .then(() => { document.getElementById('state').textContent = 'fetched'; })\
                       .catch(() => { document.getElementById('state').textContent = 'fetch failed'; })\
                       .finally(() => { document.getElementById('state').id = 'done'; });\
                     </script></body></html>",
                )
            }),
        )
        .route(
            "/redirect",
            get(|| async { Redirect::temporary("http://10.0.0.1/admin").into_response() }),
        );
    format!("http://{}", strata_test_support::serve(app).await)
}

fn invoker(dir: &std::path::Path) -> (Invoker, Arc<Events>) {
    assert_eq!(strata_browser::link(), ["browse_url", "browser"]);
    let mut config = Config::default();
    // The test's own pages are on 127.0.0.1; every other internal address stays refused.
    config.security.network.allow = vec!["127.0.0.1".into()];
    config.browser.timeout_secs = 20;
    let env = Arc::new(Env::new(config, dir.into(), dir.join("data")));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let events = Arc::new(Events::default());
    (Invoker::new(reg, env, events.clone()), events)
}

async fn call(inv: &Invoker, tool: &str, args: Value) -> strata_runtime::InvocationResult {
    inv.invoke(Invocation::new(tool, args, Principal::Operator))
        .await
}

/// The value a web-facing tool returns, inside its untrusted-content wrapper.
fn content(r: &strata_runtime::InvocationResult) -> Value {
    r.value["untrusted_content"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_render_forms_submit_and_refused_addresses_never_load() {
    if strata_test_support::program_on_path(
        "chromium",
        "apt-get install chromium (Debian's; .ci/run installs it)",
    )
    .is_none()
    {
        return;
    }
    let base = site().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (inv, events) = invoker(dir.path());

    // A page whose text its script writes.
    let r = call(
        &inv,
        "browse_url",
        json!({"url": format!("{base}/script"), "wait_for": "#out.ready"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let page = content(&r);
    assert_eq!(page["title"], "Rendered", "{page}");
    assert!(
        page["content"]
            .as_str()
            .is_some_and(|c| c.contains("written by the page script")),
        "{page}"
    );
    assert_eq!(page["status"], 200);

    // A form filled in and sent in a session; the POST body reaches the server.
    let r = call(
        &inv,
        "browser",
        json!({"session": "form", "action": "open", "url": format!("{base}/form")}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let r = call(
        &inv,
        "browser",
        json!({"session": "form", "action": "type", "selector": "#q", "text": "hello world"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let r = call(
        &inv,
        "browser",
        json!({"session": "form", "action": "click", "text": "send it"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let sent = content(&r);
    assert!(
        sent["content"]
            .as_str()
            .is_some_and(|c| c.contains("received q=hello+world")),
        "{sent}"
    );
    assert!(
        sent["url"].as_str().is_some_and(|u| u.ends_with("/submit")),
        "{sent}"
    );
    let r = call(
        &inv,
        "browser",
        json!({"session": "form", "action": "screenshot"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let shot = content(&r);
    let png = std::fs::read(dir.path().join(shot["path"].as_str().expect("path"))).expect("png");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let r = call(
        &inv,
        "browser",
        json!({"session": "form", "action": "close"}),
    )
    .await;
    assert_eq!(content(&r)["closed"], true, "{r:?}");
    let r = call(
        &inv,
        "browser",
        json!({"session": "form", "action": "text"}),
    )
    .await;
    assert_eq!(r.status, Status::Error, "a closed session is gone: {r:?}");

    // A script's fetch of the metadata address is refused before it leaves, and audited.
    let r = call(
        &inv,
        "browse_url",
        json!({"url": format!("{base}/leak"), "wait_for": "#done"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let page = content(&r);
    assert!(
        page["content"]
            .as_str()
            .is_some_and(|c| c.contains("fetch failed")),
        "{page}"
    );
    assert!(
        page["blocked"][0]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://169.254.169.254/")),
        "{page}"
    );
    assert!(
        events
            .0
            .lock()
            .expect("lock")
            .iter()
            .any(|e| e["event"] == "browser_request_blocked"
                && e["url"]
                    .as_str()
                    .is_some_and(|u| u.contains("169.254.169.254"))),
        "no audit record of the refused request"
    );

    // A redirect to an internal address: the next hop is refused, the call says why.
    let r = call(
        &inv,
        "browse_url",
        json!({"url": format!("{base}/redirect")}),
    )
    .await;
    assert_eq!(r.status, Status::Error, "{r:?}");
    let why = r.error.clone().unwrap_or_default();
    assert!(why.contains("http://10.0.0.1/admin"), "{why}");
    // An internal address asked for directly never starts a browser.
    let r = call(&inv, "browse_url", json!({"url": "http://10.0.0.1/"})).await;
    assert_eq!(r.status, Status::Error, "{r:?}");
}

/// This process's descendants (their pids), however deep.
fn descendants() -> Vec<u32> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …: the name may hold spaces, so read after its closing ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![std::process::id()];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_runs_in_our_jail_with_its_own_sandbox_inside() {
    if strata_test_support::program_on_path(
        "chromium",
        "apt-get install chromium (Debian's; .ci/run installs it)",
    )
    .is_none()
        || strata_test_support::program_on_path(
            "bwrap",
            "apt-get install bubblewrap (.ci/run installs it)",
        )
        .is_none()
    {
        return;
    }
    let probe = strata_sandbox::probe();
    assert!(
        probe.bwrap.is_some(),
        "bubblewrap cannot run here: {:?}",
        probe.bwrap_problem
    );
    let base = site().await;
    // Outside /tmp, which the jail replaces with its own anyway (CI's checkout is under
    // /tmp): /var/tmp, which Debian has.
    let parent = ["/var/tmp", env!("CARGO_TARGET_TMPDIR")]
        .into_iter()
        .find(|d| std::path::Path::new(d).is_dir() && !d.starts_with("/tmp"))
        .expect("a writable directory outside /tmp");
    let dir = tempfile::tempdir_in(parent).expect("tmp");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data");
    std::fs::write(data.join("sessions.db"), "DATA-SECRET").expect("secret");
    let (inv, _) = invoker(dir.path());
    let r = call(
        &inv,
        "browser",
        json!({"session": "jail", "action": "open", "url": format!("{base}/script")}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");

    let ours = std::fs::read_link("/proc/self/ns/user").expect("our user namespace");
    let chromium: Vec<u32> = descendants()
        .into_iter()
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/exe"))
                .is_ok_and(|e| e.to_string_lossy().contains("chromium/chromium"))
        })
        .collect();
    assert!(!chromium.is_empty(), "no Chromium among our children");
    for &p in &chromium {
        let line = cmdline(p);
        assert!(!line.contains("--no-sandbox"), "{p}: {line}");
        assert_ne!(
            std::fs::read_link(format!("/proc/{p}/ns/user")).ok(),
            Some(ours.clone()),
            "{p} shares our user namespace: {line}"
        );
    }
    // The browser process: nobody in its own user namespace, our data directory empty to it.
    let browser = *chromium
        .iter()
        .find(|p| !cmdline(**p).contains("--type="))
        .expect("the browser process");
    let uid_map = std::fs::read_to_string(format!("/proc/{browser}/uid_map")).expect("uid_map");
    assert!(
        uid_map.split_whitespace().next() == Some("65534"),
        "{uid_map}"
    );
    let seen = std::path::PathBuf::from(format!("/proc/{browser}/root"))
        .join(data.strip_prefix("/").expect("absolute"))
        .join("sessions.db");
    assert!(
        !seen.exists(),
        "Chromium sees the data directory ({})",
        seen.display()
    );
    // Chromium's own sandbox runs inside ours: its renderers are under a seccomp filter.
    let renderers: Vec<u32> = chromium
        .iter()
        .copied()
        .filter(|p| cmdline(*p).contains("--type=renderer"))
        .collect();
    assert!(!renderers.is_empty(), "no renderer");
    for p in renderers {
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).expect("status");
        assert!(
            status.lines().any(|l| l == "Seccomp:\t2"),
            "renderer {p} has no seccomp filter: {status}"
        );
    }
    let r = call(
        &inv,
        "browser",
        json!({"session": "jail", "action": "close"}),
    )
    .await;
    assert_eq!(content(&r)["closed"], true, "{r:?}");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let left: Vec<u32> = chromium
        .into_iter()
        .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        .filter(|p| {
            // A zombie is gone in all but name.
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                !s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        })
        .collect();
    assert!(left.is_empty(), "Chromium still runs after close: {left:?}");
}
