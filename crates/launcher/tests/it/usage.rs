//! Usage through the binary: a turn's model calls are stored by `serve`, priced by
//! `pricing.*`, and summed by `strata usage` and `GET /api/usage`.

use crate::common;

use serde_json::json;
use strata_test_support::{FakeServer, openai};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_model_calls_are_summed_by_the_cli_and_the_api() {
    const TOKEN: &str = "op-token-0123456789";
    let llm = FakeServer::start().await.expect("fake llm");
    // Usage on the wire: 20 in / 5 out, then 11 in / 3 out.
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
                "server:\n  tokens:\n    - {{name: op, token: {TOKEN}, tier: owner}}\n\
                 pricing:\n  openai:\n    fake-model: {{input_per_mtok: 1000000, output_per_mtok: 2000000}}\n"
            )),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [list_files]\n",
    );
    let served = common::serve(d);
    let (st, v) = common::api(
        "POST",
        &format!("{}/chat", served.base),
        TOKEN,
        Some(json!({"message": "what notes are there?", "agent": "main"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");

    let (st, v) = common::api(
        "GET",
        &format!("{}/api/usage?by=agent", served.base),
        TOKEN,
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let row = &v["value"]["rows"][0];
    assert_eq!(row["key"], "main", "{v}");
    assert_eq!(
        (
            row["calls"].as_u64(),
            row["input_tokens"].as_u64(),
            row["output_tokens"].as_u64()
        ),
        (Some(2), Some(31), Some(8)),
        "{v}"
    );
    // $1 per input token, $2 per output token (config): 31 + 16.
    assert_eq!(row["cost_usd"].as_f64(), Some(47.0), "{v}");
    assert_eq!(row["unpriced_calls"], 0, "{v}");
    let (st, v) = common::api(
        "GET",
        &format!("{}/api/usage?by=week", served.base),
        TOKEN,
        None,
    )
    .await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("agent, model, sender, day, turn")),
        "{v}"
    );

    let out = common::strata(d)
        .args(["usage", "--by", "model"])
        .output()
        .expect("usage");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("openai/fake-model") && text.contains("$47.0000"),
        "{text}"
    );
    let out = common::strata(d)
        .args(["usage", "--by", "turn", "--since", "1h", "--json"])
        .output()
        .expect("usage");
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "one turn: {rows}");
    let out = common::strata(d)
        .args(["usage", "--since", "yesterday-ish"])
        .output()
        .expect("usage");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--since"));
    drop(served);
}
