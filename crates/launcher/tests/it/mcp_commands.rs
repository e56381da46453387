//! One tool set for every command: the MCP servers of `config/mcp.yaml` are started by
//! `tools`, `inspect`, `invoke` and `chat` as by `serve`, their tools are listed, described
//! and called as `<server>__<tool>`, and each server has exited when the command ends. The
//! server is our own binary (`mcp serve --stdio` on an overlay of its own), started through
//! `sh`, which writes its process id (kept by `exec`) before it serves.

use crate::common;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use strata_test_support::{FakeServer, openai};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

struct Overlays {
    /// The overlay under test, whose `config/mcp.yaml` names the server `peer`.
    main: tempfile::TempDir,
    /// The peer's own overlay (its note is what `peer__read_file` reads).
    _peer: tempfile::TempDir,
    /// One process id a line, each time the peer started.
    pids: PathBuf,
}

fn overlays(extra_config: &str) -> Overlays {
    let peer = tempfile::tempdir().expect("tmp");
    common::write(peer.path(), "knowledgebase/note.md", "note of the peer\n");
    let main = tempfile::tempdir().expect("tmp");
    let pids = main.path().join("peer.pids");
    let script = format!(
        "echo $$ >> '{}'; exec '{BIN}' --overlay '{}' mcp serve --stdio",
        pids.display(),
        peer.path().display()
    );
    let mcp = json!({"servers": {"peer": {"transport": "stdio", "command": "sh", "args": ["-c", script]}}});
    common::write(
        main.path(),
        "config/mcp.yaml",
        &serde_json::to_string(&mcp).expect("json is yaml"),
    );
    common::write(main.path(), "config/config.yaml", extra_config);
    Overlays {
        main,
        _peer: peer,
        pids,
    }
}

/// The peer started once more for the command just run, and is gone now that it ended.
fn started_and_stopped(o: &Overlays, times: usize) {
    let pids = std::fs::read_to_string(&o.pids).unwrap_or_default();
    let pids: Vec<&str> = pids.lines().collect();
    assert_eq!(
        pids.len(),
        times,
        "the peer started once per command: {pids:?}"
    );
    let last = pids.last().expect("a pid");
    assert!(
        !Path::new(&format!("/proc/{last}")).exists(),
        "the MCP server {last} outlived the command"
    );
}

fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    let o = common::strata(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run strata");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

#[test]
fn tools_inspect_and_invoke_start_the_configured_mcp_servers() {
    let o = overlays("{}\n");
    let d = o.main.path();

    let out = run(d, &["tools", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).expect("json");
    let names: Vec<&str> = list["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"peer__read_file"), "{names:?}");
    assert!(names.contains(&"read_file"), "{names:?}");
    started_and_stopped(&o, 1);

    let out = run(d, &["inspect", "--tool", "peer__read_file", "--json"]);
    let spec: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(spec["name"], "peer__read_file");
    assert_eq!(spec["input_schema"]["required"], json!(["path"]), "{spec}");
    started_and_stopped(&o, 2);

    let out = run(
        d,
        &[
            "invoke",
            "--tool",
            "peer__read_file",
            "--args",
            r#"{"path": "knowledgebase/note.md"}"#,
            "--json",
        ],
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(r["status"], "ok", "{r}");
    assert!(
        r["value"].to_string().contains("note of the peer"),
        "the peer's file came back: {r}"
    );
    started_and_stopped(&o, 3);
    // The call went through this overlay's Invoker: it is in its audit log.
    let audit = std::fs::read_to_string(d.join("data/audit.jsonl")).expect("audit");
    assert!(
        audit.lines().any(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_default();
            v["tool"] == "peer__read_file" && v["status"] == "ok"
        }),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_offers_and_calls_the_configured_mcp_servers_tools() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        openai::tool_calls(&[(
            "call_1",
            "peer__read_file",
            json!({"path": "knowledgebase/note.md"}),
        )]),
        openai::text("The peer's note is read."),
    ]);
    let o = overlays(&common::fake_llm(&fake.url, "env:FAKE_OPENAI_KEY", "fake"));
    common::write(
        o.main.path(),
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [\"peer__*\"]\n",
    );
    let mut cmd = common::strata(o.main.path());
    cmd.args(["chat", "read the peer's note"])
        .env("FAKE_OPENAI_KEY", "sk-fake")
        .stdin(std::process::Stdio::null());
    let out = tokio::process::Command::from(cmd)
        .output()
        .await
        .expect("run strata chat");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "The peer's note is read."
    );
    started_and_stopped(&o, 1);
    let reqs = fake.requests();
    let offered: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"peer__read_file"), "{offered:?}");
    let result = reqs[1].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("the tool's result")
        .to_string();
    assert!(result.contains("note of the peer"), "{result}");
}
