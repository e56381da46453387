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
    common::write(
        d,
        "config/config.yaml",
        &(common::fake_llm(&llm.url, "literal-test-key", "fake-model")
            + &common::fake_discord(discord.port)
            + "security:\n  access_control:\n    unknown_policy: safe_only\n"),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    routing:\n      discord:\n        account: main\n        \
         channels: ['100']\n        mentions: false\n",
    );
    common::write(
        d,
        "config/team.json",
        r#"{"people": [{"id": "pat", "name": "Pat Example", "access": "staff",
            "role": "Finance lead", "timezone": "Europe/Berlin",
            "contacts": {"discord": "42"}}]}"#,
    );
    common::write(
        d,
        "knowledgebase/_index.md",
        "# Team knowledge\n\n- pricing.md — the price list for 2027\n",
    );
    common::write(
        d,
        "agents/main/knowledgebase/runbook.md",
        "# Runbook for outages\n\nFirst, breathe.\n",
    );
    let served = common::serve(d);
    for _ in 0..200 {
        if !discord.identified.lock().expect("lock").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

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
        "knowledgebase/ (the team's):\n# Team knowledge\n- pricing.md — the price list for 2027",
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
