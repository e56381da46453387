//! Replies that stream to people, through the binary: the model's answer is held half-way
//! by the fake LLM (`held_at`), and each surface must already show the first half — a
//! Discord message edited to the whole answer, `/chat`'s server-sent events, `strata chat`
//! on a terminal.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_test_support::{FakeServer, openai};

const PIECES: [&str; 5] = ["Hello ", "there, ", "this is ", "a streamed ", "answer."];
const FULL: &str = "Hello there, this is a streamed answer.";

/// The model's answer, streamed and held after "Hello there, " until `gate` opens (event 0
/// is the role chunk).
fn held_answer(gate: &Arc<tokio::sync::Notify>) -> strata_test_support::FakeResponse {
    openai::stream_text(&PIECES).held_at(3, gate.clone())
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discord_reply_appears_as_it_is_written_and_ends_as_the_models_text() {
    let llm = FakeServer::start().await.expect("fake llm");
    let gate = Arc::new(tokio::sync::Notify::new());
    llm.script([held_answer(&gate)]);
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::discord_overlay(
        d,
        (&llm.url, discord.port),
        "",
        "agents:\n  main:\n    routing:\n      discord:\n        account: main\n        \
         channels: ['100']\n        mentions: false\n",
        r#"{"people": [{"id": "pat", "name": "Pat Example", "access": "owner",
            "contacts": {"discord": "42"}}]}"#,
    );
    let served = common::serve(d);
    until("the gateway", || {
        !discord.identified.lock().expect("lock").is_empty()
    })
    .await;
    discord.send(strata_test_support::discord::message(
        2_000_001,
        "100",
        Some("9"),
        "42",
        false,
        "Say hello",
        false,
    ));
    // Half the answer is on Discord while the model is still writing.
    until("the first half on Discord", || {
        discord.posted_in("100") == ["Hello there, ".to_owned()]
    })
    .await;
    assert!(llm.requests()[0].body["stream"] == true);
    gate.notify_one();
    until("the whole answer", || {
        discord.posted_in("100") == [FULL.to_owned()]
    })
    .await;
    // One message, edited to the model's text (never a second message, never more edits
    // than the time allows).
    let edits = discord.edits_in("100");
    assert_eq!(edits.last().map(String::as_str), Some(FULL), "{edits:?}");
    assert!(edits.len() <= 3, "{edits:?}");
    drop(served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_with_stream_answers_with_server_sent_events() {
    use futures_util::StreamExt;
    let llm = FakeServer::start().await.expect("fake llm");
    let gate = Arc::new(tokio::sync::Notify::new());
    llm.script([
        openai::tool_calls(&[(
            "c1",
            "list_files",
            serde_json::json!({"path": "knowledgebase"}),
        )]),
        held_answer(&gate),
    ]);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &common::fake_llm(&llm.url, "literal-test-key", "fake-model"),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [list_files]\n",
    );
    common::write(d, "knowledgebase/a.md", "a\n");
    let served = common::serve(d);
    let token = std::fs::read_to_string(d.join("data/api-token")).expect("token");
    let resp = reqwest::Client::new()
        .post(format!("{}/chat", served.base))
        .header("X-Strata-Token", token.trim())
        .json(&serde_json::json!({"message": "hi", "stream": true}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/event-stream")
    );
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut released = false;
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(20), body.next())
        .await
        .expect("events keep coming")
    {
        text.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
        if !released && text.contains("there, ") {
            // The first half arrived while the model was still held.
            released = true;
            gate.notify_one();
        }
        if text.contains("event: final") && text.ends_with("\n\n") {
            break;
        }
    }
    assert!(released, "{text}");
    let events: Vec<(String, serde_json::Value)> = text
        .split("\n\n")
        .filter_map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name.to_owned(), serde_json::from_str(data).ok()?))
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"tool_start"), "{names:?}");
    assert_eq!(events[0].1["tool"], "list_files");
    assert_eq!(events[1].0, "tool_end");
    assert_eq!(events[1].1["status"], "ok");
    let tokens: String = events
        .iter()
        .filter(|(n, _)| n == "token")
        .map(|(_, v)| v["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(tokens, FULL);
    let (last, fin) = events.last().expect("events");
    assert_eq!(last, "final");
    assert_eq!(fin["response"], FULL);
    assert!(
        fin["session_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("http-"))
    );
    drop(served);
}

#[test]
fn strata_chat_on_a_terminal_prints_as_the_model_writes() {
    if !strata_test_support::pty_available() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let llm = rt.block_on(FakeServer::start()).expect("fake llm");
    let gate = Arc::new(tokio::sync::Notify::new());
    llm.script([held_answer(&gate)]);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &common::fake_llm(&llm.url, "literal-test-key", "fake-model"),
    );
    common::write(d, "config/agents.yaml", "agents:\n  main: {}\n");
    let cmd = format!(
        "{} --overlay {} chat 'Say hello'",
        env!("CARGO_BIN_EXE_strata"),
        d.display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env_remove("STRATA_VAULT_PASSPHRASE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script");
    let screen = Arc::new(std::sync::Mutex::new(String::new()));
    let mut out = child.stdout.take().expect("stdout");
    let reader = {
        let screen = screen.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 256];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = screen.lock() {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        })
    };
    let seen = |want: &str| screen.lock().is_ok_and(|s| s.contains(want));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen("Hello there, ") {
        assert!(
            Instant::now() < deadline,
            "nothing printed while the model wrote"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !seen("this is"),
        "the second half before the model wrote it"
    );
    gate.notify_one();
    let status = child.wait().expect("wait");
    reader.join().expect("reader");
    let screen = screen.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(status.success(), "{screen}");
    // Printed once: the streamed text is the answer, not followed by a second copy.
    assert_eq!(screen.matches(FULL).count(), 1, "{screen:?}");
    drop(rt);
}
