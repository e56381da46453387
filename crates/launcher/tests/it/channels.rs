//! The channel tools through the binary against the fake Discord: history, one message,
//! search, a file posted — and who may read which channel.

use std::time::Duration;

use serde_json::{Value, json};
use strata_test_support::discord::message;
use strata_test_support::{FakeServer, openai};

use crate::common;

const OWNER: &str = "owner-token-0123456789";
const STAFF: &str = "staff-token-0123456789";

/// Seeds the fake's history: `n` messages in `channel` from id `first` on.
fn seed(fake: &strata_test_support::discord::Fake, channel: &str, first: u64, texts: &[&str]) {
    let mut h = fake.history.lock().expect("lock");
    for (i, t) in texts.iter().enumerate() {
        h.push(message(first + i as u64, channel, Some("9"), "42", false, t, false)["d"].clone());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_tools_read_search_and_post_within_the_rules() {
    let llm = FakeServer::start().await.expect("fake llm");
    // The agent reads its own channel and one its routing does not cover, then answers.
    llm.script([
        openai::tool_calls(&[
            (
                "c1",
                "read_channel_history",
                json!({"channel": "discord:main:300", "limit": 3}),
            ),
            (
                "c2",
                "read_channel_history",
                json!({"channel": "discord:main:301"}),
            ),
        ]),
        openai::text("Read what I may."),
    ]);
    let discord = strata_test_support::discord::fake().await;
    let texts: Vec<String> = (0..12).map(|i| format!("note {i}")).collect();
    let mut all: Vec<&str> = texts.iter().map(String::as_str).collect();
    all.insert(4, "The deploy key rotates on Friday");
    seed(&discord, "300", 1000, &all);
    seed(&discord, "301", 2000, &["plans for the other team"]);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::discord_overlay(
        d,
        (&llm.url, discord.port),
        &format!(
            "    max_attachment_mb: 1\nserver:\n  tokens:\n    - {{name: boss, token: {OWNER}, tier: owner}}\n    - {{name: helper, token: {STAFF}, tier: staff}}\n"
        ),
        "agents:\n  main:\n    tools: [read_channel_history, read_message, search_channel_history]\n    routing:\n      discord:\n        account: main\n        channels: [\"300\"]\n        mentions: false\n",
        r#"{"people": [{"id": "pat", "name": "Pat Example", "access": "owner", "contacts": {"discord": "42"}}]}"#,
    );
    common::write(d, "tmp/report.txt", "the weekly report\n");
    common::write(d, "tmp/big.bin", &"x".repeat((1 << 20) + 10));
    let served = common::serve(d);
    common::gateway_up(&discord).await;
    let url = format!("{}/api/invoke", served.base);
    let call = |token: &'static str, tool: &'static str, args: Value| {
        let url = url.clone();
        async move {
            let (_, v) = common::api(
                "POST",
                &url,
                token,
                Some(json!({"tool": tool, "args": args})),
            )
            .await;
            v["value"].clone()
        }
    };
    // What the reading tools return is wrapped as untrusted content (web_facing).
    let read = |v: &Value| v["value"]["untrusted_content"].clone();

    // History, newest first, and paging back with `before`.
    let page = call(
        OWNER,
        "read_channel_history",
        json!({"channel": "discord:main:300", "limit": 5}),
    )
    .await;
    assert_eq!(page["ok"], true, "{page}");
    assert!(
        page["value"]["content_safety"]["note"].is_string(),
        "{page}"
    );
    let page_read = read(&page);
    let ids: Vec<&str> = page_read["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("messages: {page}"))
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["1012", "1011", "1010", "1009", "1008"], "{page}");
    assert_eq!(page_read["messages"][0]["author"], "user-42", "{page}");
    let older = call(
        OWNER,
        "read_channel_history",
        json!({"channel": "discord:main:300", "limit": 2, "before": "1008"}),
    )
    .await;
    assert_eq!(read(&older)["messages"][0]["id"], "1007", "{older}");
    assert_eq!(read(&older)["messages"][1]["id"], "1006", "{older}");
    // One message; one that is not there.
    let one = call(
        OWNER,
        "read_message",
        json!({"channel": "discord:main:300", "message_id": "1004"}),
    )
    .await;
    assert_eq!(
        read(&one)["message"]["text"],
        "The deploy key rotates on Friday",
        "{one}"
    );
    let none = call(
        OWNER,
        "read_message",
        json!({"channel": "discord:main:300", "message_id": "999"}),
    )
    .await;
    assert_eq!(none["ok"], false, "{none}");
    assert!(
        none["error"]
            .as_str()
            .is_some_and(|e| e.contains("not found")),
        "{none}"
    );
    // Search scans the recent history, any case.
    let found = call(
        OWNER,
        "search_channel_history",
        json!({"channel": "discord:main:300", "query": "DEPLOY key"}),
    )
    .await;
    let hits = read(&found)["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(hits[0]["id"], "1004");
    assert_eq!(read(&found)["scanned"], 13, "{found}");
    // A staff token reads nothing; the owner reads any channel.
    let refused = call(
        STAFF,
        "read_channel_history",
        json!({"channel": "discord:main:300"}),
    )
    .await;
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("denied")),
        "{refused}"
    );

    // A file from the tool roots is posted with its text; others are refused.
    let sent = call(
        OWNER,
        "send_discord_file",
        json!({"channel": "discord:main:300", "path": "tmp/report.txt", "message": "This week's report"}),
    )
    .await;
    assert_eq!(sent["ok"], true, "{sent}");
    let posted = discord
        .rest
        .lock()
        .expect("lock")
        .iter()
        .rev()
        .find(|(m, p, _)| m == "POST" && p.ends_with("/channels/300/messages"))
        .map(|(_, _, body)| body.clone())
        .expect("a post");
    assert_eq!(posted["content"], "This week's report", "{posted}");
    assert_eq!(posted["_files"][0]["name"], "report.txt", "{posted}");
    assert_eq!(
        posted["_files"][0]["body"], "the weekly report\n",
        "{posted}"
    );
    for (path, why) in [
        ("config/config.yaml", "outside"),
        ("data/api-token", "outside"),
        ("tmp/big.bin", "bytes"),
    ] {
        let r = call(
            OWNER,
            "send_discord_file",
            json!({"channel": "discord:main:300", "path": path}),
        )
        .await;
        assert_eq!(r["ok"], false, "{path}: {r}");
        assert!(
            r["error"].as_str().is_some_and(|e| e.contains(why)),
            "{path}: {r}"
        );
    }

    // Through a turn: the agent reads the channel its routing covers, not the other one.
    discord.send(message(
        3_000_001,
        "300",
        Some("9"),
        "42",
        false,
        "what did people say?",
        false,
    ));
    for _ in 0..200 {
        if llm.requests().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reqs = llm.requests();
    assert!(reqs.len() >= 2, "the turn did not come back to the model");
    let results: Vec<String> = reqs[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("note 11"), "{}", results[0]);
    assert!(results[1].contains("denied"), "{}", results[1]);
    assert!(
        !results[1].contains("plans for the other team"),
        "{}",
        results[1]
    );
    drop(served);
}
