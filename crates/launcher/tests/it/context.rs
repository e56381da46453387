//! What the model is told about a turn, through the binary: the sender as the team roster
//! knows them, the channel and its kind, and the knowledge index.

use crate::common;

use std::time::Duration;

use strata_test_support::{FakeServer, openai};

/// The system message of the model's `n`-th request, once it has arrived.
async fn system_of(llm: &FakeServer, n: usize) -> String {
    for _ in 0..200 {
        if llm.requests().len() > n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reqs = llm.requests();
    let req = reqs.get(n).expect("the model was asked");
    req.body["messages"][0]["content"]
        .as_str()
        .expect("a system message")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_knows_who_is_talking_where_and_what_the_team_knows() {
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([
        openai::text("Hello Example."),
        openai::text("Hello stranger."),
    ]);
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::discord_overlay(
        d,
        (&llm.url, discord.port),
        "security:\n  access_control:\n    unknown_policy: safe_only\n",
        "agents:\n  main:\n    compression: {enabled: true}\n    routing:\n      discord:\n        account: main\n        \
         channels: ['100']\n        mentions: false\n",
        r#"{"people": [{"id": "pat", "name": "Pat Example", "access": "staff",
            "role": "Finance lead", "timezone": "Europe/Berlin",
            "contacts": {"discord": "42"}}]}"#,
    );
    common::write(
        d,
        "knowledgebase/_index.md",
        "# Team knowledge\n\n- pricing.md — basically the very latest price list for 2027\n",
    );
    common::write(
        d,
        "agents/main/knowledgebase/runbook.md",
        "# Runbook for outages\n\nFirst, breathe.\n",
    );
    let served = common::serve(d);
    common::gateway_up(&discord).await;

    discord.send(strata_test_support::discord::message(
        1_000_001,
        "100",
        Some("9"),
        "42",
        false,
        "What is our price for the big plan?",
        false,
    ));
    let system = system_of(&llm, 0).await;
    for want in [
        "sender: Pat Example (person:discord:42; tier staff; role: Finance lead; timezone Europe/Berlin, local time ",
        "channel: discord:main:100 (a Discord server channel (server 9)",
        "[KNOWLEDGE INDEX]",
        // Compressed for this agent (`compression`): filler gone, the heading as it was.
        "knowledgebase/ (the team's):\n# Team knowledge\n- pricing.md — the latest price list for 2027",
        "agents/main/knowledgebase/ (your own):\n- agents/main/knowledgebase/runbook.md — Runbook for outages",
    ] {
        assert!(system.contains(want), "missing `{want}` in:\n{system}");
    }

    // Someone the roster does not know is marked as such.
    discord.send(strata_test_support::discord::message(
        1_000_002,
        "100",
        Some("9"),
        "77",
        false,
        "hi",
        false,
    ));
    let system = system_of(&llm, 1).await;
    assert!(
        system.contains("sender: person:discord:77 — unknown sender, not on the team roster"),
        "{system}"
    );
    drop(served);
}

/// `send_to_agent` to an agent routed to every channel (no home, no named channel): before
/// it has talked anywhere the message goes to its side session, and says so; after it talked
/// in a channel, the message is posted there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_to_agent_finds_the_channel_a_wildcard_agent_last_talked_in() {
    use serde_json::json;
    const OWNER: &str = "owner-token-0123456789";
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([
        openai::text("Noted in my inbox."),
        openai::text("Hello."),
        openai::text("Noted in the channel."),
    ]);
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{}{}server:\n  tokens:\n    - {{name: boss, token: {OWNER}, tier: owner}}\n",
            common::fake_llm(&llm.url, "literal-test-key", "fake-model"),
            common::fake_discord(discord.port)
        ),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    routing:\n      discord:\n        account: main\n        \
         channels: []\n        mentions: false\n",
    );
    common::write(
        d,
        "config/team.json",
        r#"{"people": [{"id": "pat", "name": "Pat Example", "access": "owner",
            "contacts": {"discord": "42"}}]}"#,
    );
    let served = common::serve(d);
    common::gateway_up(&discord).await;
    let url = format!("{}/api/invoke", served.base);
    let invoke = |msg: &str| {
        common::api(
            "POST",
            &url,
            OWNER,
            Some(json!({"tool": "send_to_agent", "args": {"agent": "main", "message": msg}})),
        )
    };
    let (status, first) = invoke("First note").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        first["value"]["value"]["delivery"], "side_session",
        "{first}"
    );
    assert!(
        first["value"]["value"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("side session")),
        "{first}"
    );
    // Wait for the side-session turn, then the agent talks in channel 555.
    let _ = system_of(&llm, 0).await;
    discord.send(strata_test_support::discord::message(
        3_000_001,
        "555",
        Some("9"),
        "42",
        false,
        "hi there",
        false,
    ));
    // (Up to 30 s: on a loaded 2-core CI machine a turn has taken more than 10.)
    for _ in 0..600 {
        if discord.posted_in("555").iter().any(|t| t == "Hello.") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        discord.posted_in("555").iter().any(|t| t == "Hello."),
        "the agent did not answer in channel 555: {:?}",
        discord.posted_in("555")
    );
    let (status, second) = invoke("Second note").await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        second["value"]["value"]["delivery"], "home_channel",
        "{second}"
    );
    assert_eq!(
        second["value"]["value"]["channel"], "discord:main:555",
        "{second}"
    );
    assert_eq!(
        second["value"]["value"]["resolved_by"], "recent_channel",
        "{second}"
    );
    for _ in 0..200 {
        if discord.posted_in("555").len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let posted = discord.posted_in("555");
    assert!(
        posted.iter().any(|t| t.contains("to main] Second note")),
        "{posted:?}"
    );
    drop(served);
}
