//! Schedules through the binary: an agent's heartbeat speaks in its home channel on the fake
//! Discord only when it has something to say (`NO_REPLY` posts nothing).

use crate::common;

use std::time::Duration;

use strata_test_support::{FakeServer, openai};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_posts_only_when_it_has_something_to_say() {
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([
        openai::text("NO_REPLY"),
        openai::text("The disk is 91% full."),
        openai::text("NO_REPLY"),
    ]);
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("agents/ops")).expect("mkdir");
    common::write(
        d,
        "config/config.yaml",
        &(common::fake_llm(&llm.url, "literal-test-key", "fake-model")
            + &common::fake_discord(discord.port)),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  ops:\n    routing:\n      discord:\n        account: main\n        \
         channels: ['100']\n        home_channel: '100'\n    heartbeat:\n      every: 1s\n",
    );
    common::write(
        d,
        "agents/ops/HEARTBEAT.md",
        "Say so when the disk is more than 90% full.\n",
    );
    let served = common::serve(d);
    // Three beats: two answered NO_REPLY, one with something to say.
    for _ in 0..100 {
        if llm.requests().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        llm.requests().len() >= 3,
        "only {} beats",
        llm.requests().len()
    );
    let asked = llm.requests()[0].body["messages"].to_string();
    assert!(asked.contains("more than 90% full"), "{asked}");
    assert_eq!(
        discord.posted_in("100"),
        vec!["The disk is 91% full.".to_owned()],
        "NO_REPLY is never posted"
    );
    drop(served);
}

/// A reminder asked for in a real turn (the model calls `schedule_create`) fires once at
/// its time, posts to the fake Discord channel, and runs as the person who asked; a viewer
/// may not make one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_made_in_conversation_fires_once_as_its_creator() {
    use serde_json::json;
    const BOSS: &str = "boss-token-0123456789";
    const VIEWER: &str = "viewer-token-0123456789";
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([
        openai::tool_calls(&[(
            "c1",
            "schedule_create",
            json!({"name": "standup", "when": "in 2s", "prompt": "Remind the team: standup now",
                   "deliver_to": "discord:main:100"}),
        )]),
        openai::text("Done, I will remind you."),
        openai::text("Standup now!"),
    ]);
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("agents/main")).expect("mkdir");
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{llm}server:\n  tokens:\n    - {{name: boss, token: {BOSS}, tier: owner}}\n    \
             - {{name: watcher, token: {VIEWER}, tier: viewer}}\n{discord}",
            llm = common::fake_llm(&llm.url, "literal-test-key", "fake-model"),
            discord = common::fake_discord(discord.port),
        ),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [schedule_create, schedule_list, schedule_cancel]\n    \
         routing:\n      discord:\n        account: main\n        channels: ['100']\n",
    );
    let served = common::serve(d);
    let (st, v) = common::api(
        "POST",
        &format!("{}/chat", served.base),
        BOSS,
        Some(json!({"message": "remind the team in 2 seconds", "agent": "main"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["response"], "Done, I will remind you.", "{v}");
    let told = llm.requests()[1].body["messages"].to_string();
    assert!(
        told.contains("standup") && told.contains("next_run"),
        "{told}"
    );
    for _ in 0..100 {
        if !discord.posted_in("100").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(discord.posted_in("100"), vec!["Standup now!".to_owned()]);
    // The run acted as the person who asked, and is in the audit log.
    let (_, v) = common::api(
        "GET",
        &format!("{}/api/events?limit=100", served.base),
        BOSS,
        None,
    )
    .await;
    let run = v["value"]["events"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["event"] == "schedule" && e["name"] == "standup")
        .cloned()
        .unwrap_or_else(|| panic!("no schedule event in {v}"));
    assert_eq!(
        (run["status"].as_str(), run["principal"].as_str()),
        (Some("ok"), Some("token:boss")),
        "{run}"
    );
    // A viewer may not make one.
    let (_, v) = common::api(
        "POST",
        &format!("{}/api/invoke", served.base),
        VIEWER,
        Some(json!({"tool": "schedule_create", "args": {"name": "spam", "when": "every 1m", "prompt": "hi"}})),
    )
    .await;
    assert_ne!(v["value"]["status"], "ok", "{v}");
    let out = common::strata(d)
        .args(["schedule", "list"])
        .output()
        .expect("list");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("standup") && !listed.contains("spam"),
        "{listed}"
    );
    drop(served);
}

/// The built-in `vault_check` job: a `vault:` reference the vault cannot answer fails the
/// run and is an alert naming the config key and the vault key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vault_check_job_names_a_reference_that_does_not_resolve() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("agents/main")).expect("mkdir");
    common::write(
        d,
        "config/config.yaml",
        "tools:\n  web_search:\n    brave_api_key: vault:brave-key-nobody-set\n\
         schedules:\n  vault_check:\n    every: 1s\n",
    );
    common::write(d, "config/agents.yaml", "agents:\n  main: {}\n");
    let served = common::serve(d);
    let mut found = String::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let out = common::strata(d)
            .args(["events", "--limit", "200"])
            .output()
            .expect("events");
        found = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.contains("\"kind\":\"vault\""))
            .unwrap_or_default()
            .to_owned();
        if !found.is_empty() {
            break;
        }
    }
    assert!(
        found.contains("do not resolve")
            && found.contains("tools.web_search.brave_api_key")
            && found.contains("brave-key-nobody-set"),
        "{found}"
    );
    let out = common::strata(d)
        .args(["schedule", "history", "vault_check", "--json"])
        .output()
        .expect("history");
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(runs[0]["status"], "failed", "{runs}");
    drop(served);
}
