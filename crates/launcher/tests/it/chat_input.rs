//! What `strata chat` and `POST /chat` refuse before a model is asked (issue #41): a blank
//! message never reaches the provider, and with no agent running `/chat` says why — the
//! reason `GET /api/status` gives — rather than only "configure an LLM provider".

use crate::common;

use serde_json::json;
use strata_test_support::{FakeServer, openai};

/// `POST /chat` on `served` with the owner's token: status and body.
async fn chat(served: &common::Served, body: serde_json::Value) -> (u16, serde_json::Value) {
    common::api("POST", &format!("{}/chat", served.base), BOSS, Some(body)).await
}

const BOSS: &str = "boss-token-0123456789";

/// An overlay whose agent `main` talks to the fake at `url` with `api_key`, and an owner token.
fn overlay(llm: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(d, "agents/main/AGENTS.md", "# Main\nYou help.\n");
    common::write(
        d,
        "config/config.yaml",
        &format!("{llm}server:\n  tokens:\n    - {{name: boss, token: {BOSS}, tier: owner}}\n"),
    );
    common::write(d, "config/agents.yaml", "agents:\n  main: {}\n");
    dir
}

/// `strata chat ""` and a whitespace-only message: refused as bad input (exit 2, a message
/// on stderr), and the provider is never called; a real message still is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strata_chat_refuses_a_blank_message_before_the_model_is_asked() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([openai::text("hello"), openai::text("hello again")]);
    let ov = overlay(&common::fake_llm(
        &fake.url,
        "literal-test-key",
        "fake-model",
    ));
    for blank in ["", "  \n\t "] {
        let o = tokio::process::Command::from({
            let mut c = common::strata(ov.path());
            c.args(["chat", blank]);
            c
        })
        .output()
        .await
        .expect("run strata chat");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{blank:?}: {stderr}");
        assert!(stderr.contains("the message is empty"), "{stderr}");
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert_eq!(fake.requests().len(), 0, "{blank:?} reached the model");
    }
    // The same overlay answers a real message (the refusal was the message's, not the setup's).
    let o = tokio::process::Command::from({
        let mut c = common::strata(ov.path());
        c.args(["chat", "hi"]);
        c
    })
    .output()
    .await
    .expect("run strata chat");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(fake.requests().len(), 1);
}

/// `POST /chat` with an empty or whitespace-only message: 400 naming the field, and the
/// provider is never called; a real message still runs a turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_chat_refuses_a_blank_message_before_the_model_is_asked() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([openai::text("hello")]);
    let ov = overlay(&common::fake_llm(
        &fake.url,
        "literal-test-key",
        "fake-model",
    ));
    let served = common::serve(ov.path());
    let url = format!("{}/chat", served.base);
    for blank in ["", "   ", "\n\t "] {
        let (st, v) = common::api("POST", &url, BOSS, Some(json!({"message": blank}))).await;
        assert_eq!(st, 400, "{blank:?}: {v}");
        assert_eq!(v["code"], "bad_request", "{v}");
        assert!(
            v["error"].as_str().unwrap_or_default().contains("message"),
            "{v}"
        );
        assert_eq!(fake.requests().len(), 0, "{blank:?} reached the model");
    }
    let (st, v) = common::api("POST", &url, BOSS, Some(json!({"message": "hi"}))).await;
    assert_eq!((st, v["response"].as_str()), (200, Some("hello")), "{v}");
    assert_eq!(fake.requests().len(), 1);
}

/// A provider is configured but its key is not there (a `vault:` key without a vault, an
/// unset `env:` variable): `/chat`'s 503 says so, in the words `GET /api/status` uses for the
/// agent; with no provider at all it says how to add one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_chat_says_why_no_agent_is_running() {
    let fake = FakeServer::start().await.expect("fake");
    for (api_key, names) in [
        ("vault:missing-key", "missing-key"),
        ("env:STRATA_TEST_UNSET_KEY_41", "STRATA_TEST_UNSET_KEY_41"),
    ] {
        let ov = overlay(&common::fake_llm(&fake.url, api_key, "fake-model"));
        let served = common::serve(ov.path());
        let (st, v) = chat(&served, json!({"message": "hi"})).await;
        assert_eq!(st, 503, "{v}");
        let said = v["error"].as_str().unwrap_or_default();
        assert!(said.contains(names), "{api_key}: {said}");
        assert!(!said.contains("configure an LLM provider"), "{said}");
        // The reason is the one the status document gives for the agent.
        let (_, status) =
            common::api("GET", &format!("{}/api/status", served.base), BOSS, None).await;
        let reason = status["value"]["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["id"] == "main")
            .and_then(|a| a["reason"].as_str())
            .unwrap_or_default()
            .to_owned();
        assert!(
            !reason.is_empty() && said.contains(&format!("agent `main` did not start: {reason}")),
            "{said} / {status}"
        );
    }
    assert_eq!(fake.requests().len(), 0);

    // No provider anywhere: the answer says where to put one.
    let ov = overlay("");
    let served = common::serve(ov.path());
    let (st, v) = chat(&served, json!({"message": "hi"})).await;
    assert_eq!(st, 503, "{v}");
    let said = v["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("no LLM provider") && said.contains("defaults.llm"),
        "{said}"
    );
}

/// One agent runs and another did not start: `/chat` to the one that did not start is still
/// a 404, and says why it did not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_chat_to_an_agent_that_did_not_start_says_why() {
    let fake = FakeServer::start().await.expect("fake");
    let ov = overlay(&common::fake_llm(
        &fake.url,
        "literal-test-key",
        "fake-model",
    ));
    common::write(
        ov.path(),
        "config/agents.yaml",
        &format!(
            "agents:\n  main: {{}}\n  broken:\n    llm:\n      provider: openai\n      \
             base_url: {}/v1\n      api_key: vault:broken-key\n      model: fake-model\n",
            fake.url
        ),
    );
    let served = common::serve(ov.path());
    let (st, v) = chat(&served, json!({"message": "hi", "agent": "broken"})).await;
    assert_eq!((st, v["code"].as_str()), (404, Some("not_found")), "{v}");
    let said = v["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("no running agent `broken`: it did not start: ")
            && said.contains("broken-key"),
        "{said}"
    );
    assert_eq!(fake.requests().len(), 0);
}
