//! Surfaces keep every rule, through the binary: a token's tool scope holds for the turns it
//! starts on `/chat`.

use crate::common;

use serde_json::json;
use strata_test_support::{FakeServer, openai};

const NARROW: &str = "narrow-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_tokens_chat_turn_cannot_use_a_tool_outside_its_scope() {
    let llm = FakeServer::start().await.expect("fake llm");
    // The model asks for list_files, which the agent has and the token does not.
    llm.script([
        openai::tool_calls(&[("c1", "list_files", json!({"path": "knowledgebase"}))]),
        openai::text("I could not list them."),
    ]);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{}server:\n  tokens:\n    - {{name: narrow, token: {NARROW}, tier: owner, tools: [read_file]}}\n",
            common::fake_llm(&llm.url, "literal-test-key", "fake-model")
        ),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [list_files, read_file]\n",
    );
    common::write(d, "knowledgebase/secret-plan.md", "x\n");
    let served = common::serve(d);
    let (status, body) = common::api(
        "POST",
        &format!("{}/chat", served.base),
        NARROW,
        Some(json!({"message": "list the knowledge base"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let reqs = llm.requests();
    // The model was shown only what the token may use …
    let shown: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(shown, ["read_file"]);
    // … and the call it made anyway was refused as the token's, not run.
    let result = reqs[1].body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    assert!(result.contains("denied (layer 2)"), "{result}");
    assert!(!result.contains("secret-plan"), "{result}");
    drop(served);
}
