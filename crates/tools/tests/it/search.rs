//! `web_search` against fake Brave, Tavily and DuckDuckGo servers on 127.0.0.1 (reached
//! through the network guard's allow list), including the fallback when Brave fails.

use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};
use strata_engine::audit::NoAudit;
use strata_engine::config::Config;
use strata_engine::{Env, Principal};
use strata_runtime::{Invocation, Invoker, Registry, Status};

type Seen = Arc<Mutex<Vec<String>>>;

const DDG_PAGE: &str = r##"<html><body>
<div class="result"><h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fwww.rust-lang.org%2F&amp;rut=abc">Rust <b>Programming</b> Language</a></h2>
<a class="result__snippet" href="//duckduckgo.com/l/?uddg=x">A language empowering everyone to build reliable &amp; efficient software.</a></div>
<div class="result"><h2 class="result__title"><a rel="nofollow" class="result__a" href="https://doc.rust-lang.org/book/">The Book</a></h2>
<a class="result__snippet" href="#">Learn Rust.</a></div>
</body></html>"##;

async fn fake(brave_fails: bool) -> (u16, Seen) {
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route(
            "/res/v1/web/search",
            get(move |State(s): State<Seen>, h: HeaderMap, Query(q): Query<Vec<(String, String)>>| async move {
                s.lock().expect("lock").push(format!(
                    "brave token={} q={:?}",
                    h.get("x-subscription-token").and_then(|v| v.to_str().ok()).unwrap_or("-"),
                    q
                ));
                if brave_fails {
                    return StatusCode::INTERNAL_SERVER_ERROR.into_response();
                }
                axum::Json(json!({"web": {"results": [
                    {"title": "Brave <strong>hit</strong>", "url": "https://example.com/a", "description": "First &amp; best."}
                ]}}))
                .into_response()
            }),
        )
        .route(
            "/search",
            post(|State(s): State<Seen>, h: HeaderMap, axum::Json(b): axum::Json<Value>| async move {
                s.lock().expect("lock").push(format!(
                    "tavily auth={} body={b}",
                    h.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("-")
                ));
                axum::Json(json!({"results": [{"title": "Tavily hit", "url": "https://example.com/t", "content": "From Tavily."}]}))
            }),
        )
        .route(
            "/html/",
            post(|State(s): State<Seen>, body: String| async move {
                s.lock().expect("lock").push(format!("ddg {body}"));
                ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], DDG_PAGE)
            }),
        )
        .with_state(seen.clone());
    let addr = strata_test_support::serve(app).await;
    let port = addr.port();
    (port, seen)
}

fn invoker(port: u16, brave: bool, tavily: bool) -> Invoker {
    let _ = strata_tools::link();
    let mut c = Config::default();
    c.security.network.allow = vec!["127.0.0.1/32".into()];
    let base = format!("http://127.0.0.1:{port}");
    c.tools.web_search.brave_url = base.clone();
    c.tools.web_search.tavily_url = base.clone();
    c.tools.web_search.duckduckgo_url = format!("{base}/html/");
    c.tools.web_search.brave_api_key = brave.then(|| "brave-test-key".into());
    c.tools.web_search.tavily_api_key = tavily.then(|| "tavily-test-key".into());
    let dir = std::env::temp_dir();
    let env = Arc::new(Env::new(c, dir.clone(), dir.join("data")));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    Invoker::new(reg, env, Arc::new(NoAudit))
}

async fn search(inv: &Invoker, q: &str) -> (Status, Value) {
    let r = inv
        .invoke(Invocation::new(
            "web_search",
            json!({"query": q, "max_results": 5}),
            Principal::Operator,
        ))
        .await;
    let v = r
        .value
        .get("untrusted_content")
        .cloned()
        .unwrap_or(r.value.clone());
    (r.status, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brave_then_tavily_then_duckduckgo() {
    let (port, seen) = fake(false).await;
    let (st, v) = search(&invoker(port, true, true), "rust & wasm").await;
    assert_eq!(st, Status::Ok, "{v}");
    assert_eq!(
        v,
        json!([{"title": "Brave hit", "url": "https://example.com/a", "snippet": "First & best."}])
    );
    assert!(
        seen.lock().expect("lock")[0]
            .contains(r#"brave token=brave-test-key q=[("q", "rust & wasm"), ("count", "5")]"#)
    );

    let (_, v) = search(&invoker(port, false, true), "rust").await;
    assert_eq!(v[0]["title"], "Tavily hit");
    let last = seen
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .unwrap_or_default();
    assert!(
        last.contains("auth=Bearer tavily-test-key") && last.contains(r#""max_results":5"#),
        "{last}"
    );

    let (_, v) = search(&invoker(port, false, false), "rust lang").await;
    assert_eq!(
        v,
        json!([
            {"title": "Rust Programming Language", "url": "https://www.rust-lang.org/",
             "snippet": "A language empowering everyone to build reliable & efficient software."},
            {"title": "The Book", "url": "https://doc.rust-lang.org/book/", "snippet": "Learn Rust."}
        ])
    );
    assert!(
        seen.lock()
            .expect("lock")
            .last()
            .is_some_and(|s| s == "ddg q=rust+lang")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_brave_falls_back_to_duckduckgo() {
    let (port, seen) = fake(true).await;
    let (st, v) = search(&invoker(port, true, false), "rust").await;
    assert_eq!(st, Status::Ok, "{v}");
    assert_eq!(v[0]["url"], "https://www.rust-lang.org/");
    let calls = seen.lock().expect("lock").clone();
    assert!(
        calls[0].starts_with("brave") && calls[1].starts_with("ddg"),
        "{calls:?}"
    );
}
