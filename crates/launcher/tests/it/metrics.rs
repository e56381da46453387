//! `/metrics` through the binary: behind a token on the main port, without one on a loopback
//! `metrics.bind`, and counting what a scripted workload did.

use crate::common;

use serde_json::json;
use strata_test_support::{FakeServer, openai};

const TOKEN: &str = "op-token-0123456789";

/// The scrape parsed as Prometheus does.
async fn scrape(url: &str, token: Option<&str>) -> (u16, prometheus_parse::Scrape) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(t) = token {
        req = req.header("X-Strata-Token", t);
    }
    let resp = req.send().await.expect("scrape");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let parsed = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    (status, parsed)
}

/// The value of `name` with exactly these labels among them (0 when absent).
fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_workload_is_counted_exactly() {
    let llm = FakeServer::start().await.expect("fake llm");
    // One turn: two tool calls, then the answer.
    llm.script([
        openai::tool_calls(&[
            ("c1", "list_files", json!({"path": "knowledgebase"})),
            ("c2", "list_files", json!({"path": "knowledgebase"})),
        ]),
        openai::text("Two listings."),
    ]);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(d, "knowledgebase/note.md", "a note");
    common::write(d, "agents/main/AGENTS.md", "# Main\n");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    common::write(
        d,
        "config/config.yaml",
        &(common::fake_llm(&llm.url, "literal-test-key", "fake-model")
            + &format!(
                "server:\n  tokens:\n    - {{name: op, token: {TOKEN}, tier: owner}}\n\
                 metrics:\n  bind: 127.0.0.1:{port}\n\
                 pricing:\n  openai:\n    fake-model: {{input_per_mtok: 1000000, output_per_mtok: 2000000}}\n"
            )),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [list_files]\n",
    );
    let served = common::serve(d);
    let main = format!("{}/metrics", served.base);
    let side = format!("http://127.0.0.1:{port}/metrics");

    // The main port wants a token; the loopback listener does not.
    let resp = reqwest::get(&main).await.expect("get");
    assert_eq!(resp.status().as_u16(), 401);
    let (st, before) = scrape(&side, None).await;
    assert_eq!(st, 200);
    assert_eq!(value(&before, "strata_build_info", &[]), 1.0);

    let (st, v) = common::api(
        "POST",
        &format!("{}/chat", served.base),
        TOKEN,
        Some(json!({"message": "list twice", "agent": "main"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    // A tool nobody registered: counted, but not under its name.
    let (_, v) = common::api(
        "POST",
        &format!("{}/api/invoke", served.base),
        TOKEN,
        Some(json!({"tool": "no_such_tool_x1", "args": {}})),
    )
    .await;
    assert!(v.to_string().contains("unknown_tool"), "{v}");

    let (st, after) = scrape(&main, Some(TOKEN)).await;
    assert_eq!(st, 200);
    let delta = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value(&before, name, labels)
    };
    assert_eq!(
        delta(
            "strata_tool_calls_total",
            &[("tool", "list_files"), ("layer", "core"), ("status", "ok")]
        ),
        2.0
    );
    assert_eq!(
        delta(
            "strata_tool_calls_total",
            &[("tool", "_unknown"), ("status", "unknown_tool")]
        ),
        1.0
    );
    assert!(
        !after
            .samples
            .iter()
            .any(|s| s.labels.values().any(|v| v.contains("no_such_tool"))),
        "a caller's text became a label value"
    );
    assert_eq!(
        delta(
            "strata_turns_total",
            &[("agent", "main"), ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(
        delta(
            "strata_model_calls_total",
            &[
                ("provider", "openai"),
                ("model", "fake-model"),
                ("status", "ok")
            ]
        ),
        2.0
    );
    assert_eq!(
        delta(
            "strata_tool_call_duration_seconds_count",
            &[("tool", "list_files")]
        ),
        2.0
    );
}

#[test]
fn a_metrics_bind_beyond_loopback_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(d, "config/config.yaml", "metrics:\n  bind: 0.0.0.0:9464\n");
    let out = common::strata(d).arg("serve").output().expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`metrics.bind`") && err.contains("loopback"),
        "{err}"
    );
}
