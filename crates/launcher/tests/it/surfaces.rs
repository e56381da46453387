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
    let shown = common::tools_shown(&reqs[0]);
    assert_eq!(shown, ["read_file"]);
    // … and the call it made anyway was refused as the token's, not run.
    let result = common::first_tool_result(&reqs[1]);
    assert!(result.contains("denied (layer 2)"), "{result}");
    assert!(!result.contains("secret-plan"), "{result}");
    drop(served);
}

/// A Discord slash command of a prompt skill runs as the skill says: the model is shown the
/// skill's tools only (a call outside them is refused), and an answer past 2,000 characters
/// arrives as the command's answer plus follow-ups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_prompt_skill_keeps_to_its_tools_and_long_answers_follow_up() {
    use std::time::Duration;
    let long = "word ".repeat(700);
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([
        openai::tool_calls(&[("c1", "list_files", json!({"path": "knowledgebase"}))]),
        openai::text(&long),
    ]);
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::discord_overlay(
        d,
        (&llm.url, discord.port),
        "",
        "agents:\n  main:\n    tools: [list_files, read_file]\n    routing:\n      discord:\n        \
         account: main\n        channels: ['100']\n",
        r#"{"people": [{"id": "pat", "name": "Pat Example", "access": "owner",
            "contacts": {"discord": "42"}}]}"#,
    );
    common::write(
        d,
        "skills/report.yaml",
        "name: report\ndescription: Writes the report.\nprompt: Write the report.\n\
         tools: [read_file]\nmax_rounds: 3\n",
    );
    let served = common::serve(d);
    common::gateway_up(&discord).await;
    discord
        .push
        .send(strata_test_support::discord::interaction(
            21,
            "100",
            "42",
            "report",
            json!([]),
        ))
        .expect("push");
    let answered = || {
        discord
            .rest
            .lock()
            .expect("lock")
            .iter()
            .filter(|(m, p, _)| {
                (m == "PATCH" && p.ends_with("/messages/@original"))
                    || (m == "POST" && p.contains("/webhooks/"))
            })
            .map(|(_, _, v)| v["content"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    for _ in 0..300 {
        if answered().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let parts = answered();
    assert!(parts.len() >= 2, "{parts:?}");
    assert!(parts.iter().all(|p| p.chars().count() <= 2000));
    assert_eq!(parts.concat().split_whitespace().count(), 700);
    let reqs = llm.requests();
    let shown = common::tools_shown(&reqs[0]);
    assert_eq!(shown, ["read_file"]);
    let result = common::first_tool_result(&reqs[1]);
    assert!(result.contains("denied (layer 3)"), "{result}");
    drop(served);
}

/// Failed authentication and layer-1 refusals are audit records with the principal and the
/// route — a flood of them only up to the per-minute cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_before_any_tool_call_are_audited_and_a_flood_is_capped() {
    const VIEWER: &str = "viewer-token-0123456789";
    let llm = FakeServer::start().await.expect("fake llm");
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{}server:\n  tokens:\n    - {{name: looker, token: {VIEWER}, tier: viewer}}\n",
            common::fake_llm(&llm.url, "literal-test-key", "fake-model")
        ),
    );
    common::write(d, "config/agents.yaml", "agents:\n  main: {}\n");
    common::write(
        d,
        "config/team.json",
        r#"{"agents": [{"id": "main", "agent_tier": "privileged"}]}"#,
    );
    let served = common::serve(d);
    for _ in 0..50 {
        let (status, _) = common::api(
            "GET",
            &format!("{}/api/tools", served.base),
            "not-a-real-token-000000",
            None,
        )
        .await;
        assert_eq!(status, 401);
    }
    // A viewer may not talk to a privileged agent: layer 1.
    let (status, body) = common::api(
        "POST",
        &format!("{}/chat", served.base),
        VIEWER,
        Some(json!({"message": "hello"})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    // The audit log is written by its own thread: wait (up to 10 s) for the layer-1 record.
    let read = || {
        std::fs::read_to_string(d.join("data/audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == "refusal")
            .collect::<Vec<serde_json::Value>>()
    };
    let mut refusals = read();
    for _ in 0..200 {
        if refusals.iter().any(|v| v["kind"] == "layer1") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        refusals = read();
    }
    let unauth: Vec<&serde_json::Value> = refusals
        .iter()
        .filter(|v| v["kind"] == "unauthenticated")
        .collect();
    // Ten a minute per principal (twenty if the requests straddled a minute's end).
    assert!(
        (10..=20).contains(&unauth.len()),
        "capped per principal and minute: {unauth:?}"
    );
    assert_eq!(unauth[0]["principal"], "unknown");
    assert_eq!(unauth[0]["route"], "GET /api/tools");
    assert!(
        refusals.iter().any(|v| v["kind"] == "layer1"
            && v["principal"] == "token:looker"
            && v["route"] == "http"),
        "{refusals:?}"
    );
    assert!(llm.requests().is_empty());
    drop(served);
}

/// Where a header cannot be set, a POST may carry the token in its JSON body (taken out
/// before the route reads it); a GET never may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_body_may_carry_the_token_and_a_get_may_not() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(d, "knowledgebase/a.md", "alpha\n");
    let served = common::serve(d);
    let token = std::fs::read_to_string(d.join("data/api-token")).expect("token");
    let token = token.trim();
    let c = reqwest::Client::new();
    let post = |body: serde_json::Value| {
        c.post(format!("{}/api/invoke", served.base))
            .json(&body)
            .send()
    };
    let r =
        post(json!({"token": token, "tool": "read_file", "args": {"path": "knowledgebase/a.md"}}))
            .await
            .expect("send");
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.expect("json");
    assert_eq!(v["value"]["ok"], true, "{v}");
    let r = post(json!({"token": "wrong-token-00000000", "tool": "read_file", "args": {"path": "knowledgebase/a.md"}}))
        .await
        .expect("send");
    assert_eq!(r.status(), 401);
    let r = c
        .get(format!("{}/api/tools?token={token}", served.base))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 401, "never in a URL");
    drop(served);
}

/// `/api/state` tells the truth: an agent whose model call failed is not healthy (with the
/// error), a Discord account shows its connection (the fake drops it: a reconnect is
/// counted), an account whose token cannot be resolved is disabled with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_state_reports_real_agent_and_connector_health() {
    use std::time::Duration;
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([strata_test_support::FakeResponse::status(
        401,
        json!({"error": {"message": "Incorrect API key provided"}}),
    )]);
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &(common::fake_llm(&llm.url, "literal-test-key", "fake-model")
            + &common::fake_discord(discord.port)
            + "        \n      spare:\n        token: env:STRATA_TEST_NO_SUCH_VARIABLE\n"),
    );
    common::write(d, "config/agents.yaml", "agents:\n  main: {}\n");
    let served = common::serve(d);
    let token = std::fs::read_to_string(d.join("data/api-token")).expect("token");
    let state = || async {
        let (status, v) = common::api(
            "GET",
            &format!("{}/api/state", served.base),
            token.trim(),
            None,
        )
        .await;
        assert_eq!(status, 200);
        v["value"].clone()
    };
    common::gateway_up(&discord).await;
    let v = state().await;
    assert_eq!(v["agents"][0]["healthy"], true, "{v}");
    let find = |v: &serde_json::Value, name: &str| {
        v["connectors"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == name).cloned())
            .unwrap_or_default()
    };
    assert_eq!(find(&v, "discord:main")["state"], "connected", "{v}");
    let spare = find(&v, "discord:spare");
    assert_eq!(spare["state"], "disabled", "{v}");
    assert!(
        spare["disabled"]
            .as_str()
            .is_some_and(|r| r.contains("STRATA_TEST_NO_SUCH_VARIABLE")),
        "{spare}"
    );

    // The model refuses the key: the agent is not healthy, and says why.
    let (status, _) = common::api(
        "POST",
        &format!("{}/chat", served.base),
        token.trim(),
        Some(json!({"message": "hi"})),
    )
    .await;
    assert_ne!(status, 200);
    let v = state().await;
    assert_eq!(v["agents"][0]["healthy"], false, "{v}");
    assert!(
        v["agents"][0]["model_calls"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("api_key")),
        "{v}"
    );

    // The fake drops the gateway: the account counts the reconnect.
    let _ = discord.drop_all.send(());
    let mut seen = serde_json::Value::Null;
    for _ in 0..200 {
        seen = find(&state().await, "discord:main");
        if seen["reconnects"].as_u64().unwrap_or(0) >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(seen["reconnects"].as_u64().unwrap_or(0) >= 1, "{seen}");
    drop(served);
}

/// A query string the route cannot read is answered with the error envelope, as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_query_strings_get_the_json_error_envelope() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let served = common::serve(d);
    let token = std::fs::read_to_string(d.join("data/api-token")).expect("token");
    for path in [
        "/api/events?limit=x&limit=y",
        "/api/events?limit=x",
        "/api/approvals?limit=1&limit=2",
        "/api/artifacts?limit=1&limit=2",
    ] {
        let r = reqwest::Client::new()
            .get(format!("{}{path}", served.base))
            .header("X-Strata-Token", token.trim())
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 400, "{path}");
        let kind = r.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .to_owned();
        assert!(kind.starts_with("application/json"), "{path}: {kind}");
        let v: serde_json::Value = r.json().await.expect("json");
        assert_eq!(v["code"], "bad_request", "{path}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
    drop(served);
}

/// `state`, `events` and `doctor` as tools: an owner sees the running deployment, the audit
/// log's newest records and the preflight's findings on the files as they are now; an admin
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_events_are_tools_for_owners() {
    const BOSS: &str = "boss-token-0123456789";
    const ADMIN: &str = "admin-token-0123456789";
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "server:\n  tokens:\n    - {{name: boss, token: {BOSS}, tier: owner}}\n    - {{name: helper, token: {ADMIN}, tier: admin}}\n"
        ),
    );
    let served = common::serve(d);
    let url = format!("{}/api/invoke", served.base);
    let (_, now) = common::api("POST", &url, BOSS, Some(json!({"tool": "current_time"}))).await;
    assert_eq!(now["value"]["ok"], true, "{now}");
    let (_, state) = common::api("POST", &url, BOSS, Some(json!({"tool": "state"}))).await;
    assert_eq!(state["value"]["ok"], true, "{state}");
    assert!(state["value"]["value"]["connectors"].is_array(), "{state}");
    let (_, events) = common::api(
        "POST",
        &url,
        BOSS,
        Some(json!({"tool": "events", "args": {"kind": "current_time", "limit": 5}})),
    )
    .await;
    let records = events["value"]["value"]["records"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        records
            .iter()
            .any(|r| r["tool"] == "current_time" && r["principal"] == "token:boss"),
        "{events}"
    );
    assert!(records.iter().all(|r| r["tool"] == "current_time"));
    let doctor = |token: &'static str| {
        let url = url.clone();
        async move {
            common::api("POST", &url, token, Some(json!({"tool": "doctor"})))
                .await
                .1
        }
    };
    let report = doctor(BOSS).await;
    assert_eq!(report["value"]["ok"], true, "{report}");
    let value = &report["value"]["value"];
    assert_eq!(value["ok"], true, "{report}");
    let findings = value["findings"].as_array().cloned().unwrap_or_default();
    let has = |level: &str, part: &str| {
        findings
            .iter()
            .any(|f| f["level"] == level && f["message"].as_str().is_some_and(|m| m.contains(part)))
    };
    assert!(has("ok", "config loads"), "{report}");
    assert!(has("ok", "is writable"), "{report}");
    assert!(has("warn", "no LLM provider configured"), "{report}");
    assert!(!has("FAIL", ""), "{report}");
    // The files as they are now, not as serve read them: a schedule naming a skill that
    // does not exist is a failure the next call reports.
    let config = std::fs::read_to_string(d.join("config/config.yaml")).expect("read");
    common::write(
        d,
        "config/config.yaml",
        &format!("{config}schedules:\n  nightly:\n    every: 1h\n    skill: no-such-skill\n"),
    );
    let report = doctor(BOSS).await;
    let value = &report["value"]["value"];
    assert_eq!(value["ok"], false, "{report}");
    assert!(
        value["failures"].as_u64().is_some_and(|n| n >= 1),
        "{report}"
    );
    assert!(
        value["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f["level"] == "FAIL"
                && f["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("no-such-skill"))),
        "{report}"
    );
    for tool in ["events", "doctor"] {
        let (_, refused) = common::api("POST", &url, ADMIN, Some(json!({"tool": tool}))).await;
        assert_eq!(refused["value"]["ok"], false, "{refused}");
        assert!(
            refused["value"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("owners and coordinator agents")),
            "{refused}"
        );
    }
    drop(served);
    // The command line's Invoker runs it as the operator (an owner).
    let out = common::strata(d)
        .args(["invoke", "--tool", "doctor"])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no-such-skill"), "{text}");
}
