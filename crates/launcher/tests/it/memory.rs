//! Memory through the real binary: recall across processes into the `[MEMORY]` block, private
//! memories that do not cross senders in one channel, the CLI, and crash safety under SIGKILL.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use strata_test_support::{FakeServer, openai};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn overlay(llm_url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("agents/main")).expect("mkdir");
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{}server:\n  tokens:\n    - {{name: ann, token: ann-token-0123456789, tier: owner}}\n    - {{name: ben, token: ben-token-0123456789, tier: owner}}\n",
            common::fake_llm(llm_url, "literal-test-key", "fake-model")
        ),
    );
    std::fs::write(
        d.join("config/agents.yaml"),
        "agents:\n  main:\n    tools: [memory_store, memory_search]\n",
    )
    .expect("w");
    dir
}

fn strata(dir: &Path, args: &[&str]) -> std::process::Output {
    common::strata(dir).args(args).output().expect("run strata")
}

fn system_of(req: &strata_test_support::Recorded) -> String {
    req.body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_come_back_in_later_turns_and_processes() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        // Turn 1: the model stores a fact with the tool.
        openai::tool_calls(&[(
            "c1",
            "memory_store",
            json!({"content": "The deploy window is Tuesday 14:00", "category": "ops", "scope": "global"}),
        )]),
        openai::text("Noted."),
        // Turn 2 (another process): the fact is in the memory block.
        openai::text("Tuesday at 14:00."),
    ]);
    let ov = overlay(&fake.url);
    let o = strata(
        ov.path(),
        &["chat", "remember: deploys happen Tuesday 14:00"],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = strata(
        ov.path(),
        &["chat", "--session", "other", "when is the deploy window?"],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let reqs = fake.requests();
    let system = system_of(&reqs[2]);
    let block = system.split("[MEMORY]").nth(1).unwrap_or_default();
    assert!(
        block.contains("[semantic/ops] The deploy window is Tuesday 14:00"),
        "{system}"
    );
    assert!(block.contains("[/MEMORY]"));
    // The CLI sees it (and the exchange, as an episodic memory).
    let o = strata(ov.path(), &["memory", "list", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let list = v["memories"].as_array().cloned().unwrap_or_default();
    assert!(
        list.iter()
            .any(|m| m["type"] == "episodic" && m["scope"] == "private:operator"),
        "{v}"
    );
    let o = strata(ov.path(), &["memory", "stats", "--json"]);
    let st: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(st["total"].as_u64().unwrap_or(0) >= 3, "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_memories_stay_with_their_sender_in_a_shared_channel() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([openai::text("Got it, Ann."), openai::text("I do not know.")]);
    let ov = overlay(&fake.url);
    let s = common::serve(ov.path());
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let chat = |token: &'static str, msg: &'static str| {
        let c = client.clone();
        let url = format!("{}/chat", s.base);
        async move {
            c.post(url)
                .header("X-Strata-Token", token)
                .json(&json!({"message": msg, "session_id": "shared-channel"}))
                .send()
                .await
                .expect("send")
                .json::<Value>()
                .await
                .expect("json")
        }
    };
    let r = chat("ann-token-0123456789", "my locker code is 4711").await;
    assert_eq!(r["response"], "Got it, Ann.");
    let r = chat("ben-token-0123456789", "what is the locker code?").await;
    assert_eq!(r["response"], "I do not know.");
    let reqs = fake.requests();
    // Ann's exchange went to her private scope; Ben's turn never sees it.
    assert!(
        !system_of(&reqs[1]).contains("4711"),
        "{}",
        system_of(&reqs[1])
    );
    let o = strata(
        ov.path(),
        &["memory", "list", "--scope", "private:token:ann", "--json"],
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(
        v["memories"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("4711"),
        "{v}"
    );
}

#[test]
fn every_acknowledged_store_survives_sigkill() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("config")).expect("mkdir");
    let mut child = Command::new(BIN)
        .arg("--overlay")
        .arg(dir.path())
        .args(["memory", "import", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let writer = std::thread::spawn(move || {
        for i in 0..100_000 {
            let line = format!(
                "{{\"content\": \"burst fact number {i} about item{i}\", \"scope\": \"global\"}}\n"
            );
            if stdin.write_all(line.as_bytes()).is_err() {
                break;
            }
        }
    });
    let mut acked = Vec::new();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    while acked.len() < 300 {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        acked.push(line.trim().to_owned());
    }
    // Kill it mid-burst, without warning.
    child.kill().expect("kill");
    let _ = child.wait();
    // Drain what it printed before dying: those were committed too.
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
    acked.extend(rest.lines().map(str::to_owned).filter(|l| !l.is_empty()));
    let _ = writer.join();
    assert!(acked.len() >= 300, "the burst was running: {}", acked.len());

    let o = strata(dir.path(), &["memory", "stats", "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the database opens cleanly: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = strata(dir.path(), &["memory", "export"]);
    let ids: std::collections::HashSet<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect();
    let missing: Vec<&String> = acked.iter().filter(|id| !ids.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged stores lost",
        missing.len()
    );
    std::thread::sleep(Duration::from_millis(10));
}
