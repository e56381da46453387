//! `serve`'s log output: plain text (no colour escapes) when stderr is a file, and with
//! `log.format: json` one JSON object per line carrying the turn's id, agent and session, and
//! the tool call's span inside it.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use strata_test_support::{FakeServer, openai};

/// Starts `serve` with stderr written to `log`, runs one turn with a tool call, stops it,
/// and returns what was written.
async fn served_log(format: &str, extra: &str) -> String {
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([
        openai::tool_calls(&[("c1", "list_files", json!({"path": "knowledgebase"}))]),
        openai::text("One note."),
    ]);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(d, "knowledgebase/note.md", "a note");
    common::write(d, "agents/main/AGENTS.md", "# Main\n");
    common::write(
        d,
        "config/config.yaml",
        &(common::fake_llm(&llm.url, "literal-test-key", "fake-model")
            + &format!(
                "log:\n  format: {format}\n  level: info,strata_engine=debug\n\
                 server:\n  tokens:\n    - {{name: op, token: op-token-0123456789, tier: owner}}\n\
                 {extra}"
            )),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [list_files]\n",
    );
    let log = d.join("serve.log");
    // Neither NO_COLOR nor RUST_LOG: what an operator's `serve > file` gets.
    let mut child = common::strata(d)
        .args(["serve", "--set", "server.port=0"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("serve");
    let mut base = None;
    for _ in 0..600 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(i) = text.find("control API on http://") {
            let rest = &text[i + "control API on ".len()..];
            let end = rest.find("/api").unwrap_or(rest.len());
            base = Some(rest[..end].to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let base = base.expect("serve announced its address");
    let (st, v) = common::api(
        "POST",
        &format!("{base}/chat"),
        "op-token-0123456789",
        Some(json!({"message": "what notes are there?", "agent": "main"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let _ = child.kill();
    let _ = child.wait();
    std::fs::read_to_string(&log).expect("log")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_written_to_a_file_has_no_colour_escapes() {
    // An exporter this binary does not have is named, not silently ignored.
    let text = served_log("text", "telemetry:\n  otlp_endpoint: http://127.0.0.1:9\n").await;
    assert!(text.contains("turn done"), "{text}");
    assert!(!text.contains('\u{1b}'), "escape bytes in:\n{text}");
    #[cfg(not(feature = "otel"))]
    assert!(
        text.contains("built without the launcher's `otel` feature"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_parse_line_by_line_and_carry_the_turn() {
    let text = served_log("json", "").await;
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let done = lines
        .iter()
        .find(|l| l["fields"]["message"] == "turn done")
        .unwrap_or_else(|| panic!("no `turn done` in:\n{text}"));
    let turn = &done["span"];
    assert_eq!(turn["name"], "turn", "{done}");
    assert_eq!(
        (turn["agent"].as_str(), turn["session"].as_str().is_some()),
        (Some("main"), true),
        "{done}"
    );
    let turn_id = turn["turn_id"].as_str().expect("turn id");
    assert!(!turn_id.is_empty());
    // The tool call is a span inside the turn's.
    let call = lines
        .iter()
        .find(|l| l["fields"]["message"] == "tool call done")
        .unwrap_or_else(|| panic!("no `tool call done` in:\n{text}"));
    assert_eq!(call["span"]["name"], "tool", "{call}");
    assert_eq!(call["span"]["tool"], "list_files", "{call}");
    let spans = call["spans"].as_array().expect("spans");
    assert_eq!(spans[0]["name"], "turn", "{call}");
    assert_eq!(spans[0]["turn_id"], turn_id, "{call}");
}
