//! `strata chat` end to end: the real binary, a fake OpenAI server on 127.0.0.1, a tool call
//! through the Invoker, and history that survives the process.

use crate::common;

use std::path::Path;

use serde_json::{Value, json};
use strata_test_support::{FakeServer, openai};

fn overlay(url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(d, "knowledgebase/note.md", "the password is swordfish");
    common::write(d, "agents/main/AGENTS.md", "# Main\nYou answer from notes.");
    common::write(
        d,
        "config/config.yaml",
        &common::fake_llm(url, "env:FAKE_OPENAI_KEY", "fake-model"),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    instruction: Cite the file.\n    tools: [read_file, list_files]\n",
    );
    dir
}

async fn chat(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = common::strata(dir);
    cmd.arg("chat")
        .args(args)
        .env("FAKE_OPENAI_KEY", "sk-fake-123");
    tokio::process::Command::from(cmd)
        .output()
        .await
        .expect("run strata chat")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_turn_with_a_tool_call_and_history_across_processes() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        openai::tool_calls(&[(
            "call_1",
            "read_file",
            json!({"path": "knowledgebase/note.md"}),
        )]),
        openai::text("The note says the password is swordfish."),
        openai::text("You asked about the note."),
    ]);
    let ov = overlay(&fake.url);

    let o = chat(ov.path(), &["what does the note say?"]).await;
    assert_eq!(
        o.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "The note says the password is swordfish."
    );

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].headers["authorization"], "Bearer sk-fake-123");
    let system = reqs[0].body["messages"][0]["content"]
        .as_str()
        .expect("system");
    assert!(
        system.starts_with("# Main\nYou answer from notes.\n\nCite the file."),
        "{system}"
    );
    let names: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["list_files", "read_file"]);
    let msgs = reqs[1].body["messages"].as_array().expect("messages");
    let tool_msg = msgs.last().expect("tool result");
    assert_eq!(tool_msg["role"], "tool");
    assert_eq!(tool_msg["tool_call_id"], "call_1");
    let result: Value =
        serde_json::from_str(tool_msg["content"].as_str().expect("content")).expect("json");
    assert_eq!(result["content"], "the password is swordfish");

    // A second process, same session: the history came back from the database.
    let o = chat(ov.path(), &["what did I ask?"]).await;
    assert_eq!(
        o.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let third = &fake.requests()[2].body["messages"];
    let contents: Vec<&str> = third
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.contains(&"what does the note say?"),
        "{contents:?}"
    );
    assert!(contents.contains(&"The note says the password is swordfish."));
    assert_eq!(contents.last(), Some(&"what did I ask?"));

    // Every tool call is audited in the data dir.
    let audit = std::fs::read_to_string(ov.path().join("data/audit.jsonl")).expect("audit");
    let rec: Value = serde_json::from_str(audit.lines().next().expect("line")).expect("json");
    assert_eq!(rec["tool"], "read_file");
    assert_eq!(rec["agent_id"], "main");
    assert_eq!(rec["principal"], "operator");

    // Every model call's usage reached the store before each process ended (they are
    // written in the background and flushed at the end).
    let o = common::strata(ov.path())
        .args(["usage", "--by", "model", "--json"])
        .output()
        .expect("usage");
    let rows: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(rows[0]["key"], "openai/fake-model", "{rows}");
    assert_eq!(
        rows[0]["calls"], 3,
        "three model calls over two processes: {rows}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_failure_exits_non_zero_with_a_readable_reason() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([openai::error(401, "Incorrect API key provided")]);
    let ov = overlay(&fake.url);
    let o = chat(ov.path(), &["hello"]).await;
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("openai: authentication failed") && err.contains("defaults.llm.api_key"),
        "{err}"
    );
    assert!(
        !err.contains("sk-fake-123"),
        "the key never appears in errors"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_refuses_unknown_agents_and_missing_providers() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("config")).expect("mkdir");
    std::fs::write(
        dir.path().join("config/agents.yaml"),
        "agents:\n  main: {}\n",
    )
    .expect("w");
    let o = chat(dir.path(), &["--agent", "ghost", "hi"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown agent `ghost`"));
    let o = chat(dir.path(), &["hi"]).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no LLM provider"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
