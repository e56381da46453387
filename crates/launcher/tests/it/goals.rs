//! Goal workstreams through the binary: a goal made by an agent in a real turn against the
//! fake LLM and the fake Discord — its channel made under the category with the charter, its
//! participants routed there, the turn budget stopping a chatty exchange until a person
//! writes; proposals decided after the objection window and one blocked by an objection;
//! an illegal transition refused; every change in the log; all of it after a restart — on
//! SQLite and, where a server answers, on PostgreSQL.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use strata_test_support::discord::{Fake, message};
use strata_test_support::{FakeServer, openai};

use crate::common;

const OWNER: &str = "owner-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";

async fn invoke(base: &str, tool: &str, args: Value) -> Value {
    let (_, v) = common::api(
        "POST",
        &format!("{base}/api/invoke"),
        OWNER,
        Some(json!({"tool": tool, "args": args})),
    )
    .await;
    v["value"].clone()
}

/// Waits (up to 10 s) until the fake LLM has had `n` requests; how many it had.
async fn requests_reach(llm: &FakeServer, n: usize) -> usize {
    for _ in 0..200 {
        if llm.requests().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    llm.requests().len()
}

fn posted_in(discord: &Fake, channel: &str) -> Vec<String> {
    discord.posted_in(channel)
}

fn overlay(d: &Path, llm: &str, discord: &Fake, storage: &str) {
    common::discord_overlay(
        d,
        (llm, discord.port),
        &format!(
            "server:\n  tokens:\n    - {{name: boss, token: {OWNER}, tier: owner}}\n    \
             - {{name: helper, token: {ADMIN}, tier: admin}}\n\
             goals:\n  connector: \"discord:main\"\n  category: \"777000\"\n  turn_budget: 4\n  \
             objection_window: 2s\n{storage}"
        ),
        "agents:\n  coord:\n    tools: [\"goal_*\", read_channel_history]\n    routing:\n      discord:\n        account: main\n        channels: [\"300\"]\n        mentions: false\n  \
         analyst:\n    tools: [goal_status]\n    routing:\n      discord:\n        account: main\n        channels: [\"301\"]\n        mentions: false\n",
        r#"{"people": [
            {"id": "pat", "name": "Pat Example", "access": "owner", "contacts": {"discord": "42"}},
            {"id": "other-bot", "name": "Another Team's Bot", "access": "staff", "contacts": {"discord": "555"}}
        ]}"#,
    );
}

async fn a_goal_lives_through_a_turn_a_channel_votes_and_a_restart(storage: &str) {
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([
        openai::tool_calls(&[(
            "c1",
            "goal_create",
            json!({
                "title": "Prepare the Q3 board pack",
                "description": "Slides and numbers for the board",
                "participants": ["agent:analyst"]
            }),
        )]),
        openai::text("Goal created, channel is up."),
    ]);
    llm.script((0..12).map(|i| openai::text(&format!("answer number {i}"))));
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    overlay(d, &llm.url, &discord, storage);
    let served = common::serve(d);
    common::gateway_up(&discord).await;

    // An owner asks the coordinator in its channel; the turn makes the goal.
    discord.send(message(
        4_000_001,
        "300",
        Some("9"),
        "42",
        false,
        "Start the board pack goal",
        false,
    ));
    requests_reach(&llm, 2).await;
    let mut goal = Value::Null;
    for _ in 0..100 {
        let (_, v) = common::api("GET", &format!("{}/api/goals", served.base), OWNER, None).await;
        if v["value"]["goals"][0]["channel"].is_string() {
            goal = v["value"]["goals"][0].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(goal["title"], "Prepare the Q3 board pack", "{goal}");
    assert_eq!(goal["state"], "proposed");
    assert_eq!(goal["owner"], "agent:coord");
    assert_eq!(
        goal["participants"],
        json!(["agent:coord", "agent:analyst"])
    );
    let id = goal["id"].as_str().expect("id").to_owned();
    let channel = goal["channel"].as_str().expect("channel").to_owned();
    let channel_id = channel.rsplit(':').next().expect("id").to_owned();
    // The channel was made under the category, named after the goal, with the charter.
    let made = discord
        .rest
        .lock()
        .expect("lock")
        .iter()
        .find(|(m, p, _)| m == "POST" && p == "/api/v10/guilds/9/channels")
        .map(|(_, _, b)| b.clone())
        .expect("a channel made");
    assert_eq!(made["name"], id.as_str(), "{made}");
    assert_eq!(made["parent_id"], "777000", "{made}");
    assert_eq!(made["topic"], "Prepare the Q3 board pack", "{made}");
    let charter = posted_in(&discord, &channel_id);
    assert!(
        charter
            .first()
            .is_some_and(|c| c.contains("**Goal: Prepare the Q3 board pack**")
                && c.contains("agent:analyst")),
        "{charter:?}"
    );

    // The participants answer in the goal's channel; a chatty bot gets 4 agent turns
    // (the turn budget: both agents answer each message), then nothing until a person writes.
    let before = requests_reach(&llm, 2).await;
    for (i, text) in ["numbers?", "more numbers?", "even more?"]
        .iter()
        .enumerate()
    {
        discord.send(message(
            4_000_010 + i as u64,
            &channel_id,
            Some("9"),
            "555",
            true,
            text,
            false,
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let after_bots = requests_reach(&llm, before + 4).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        llm.requests().len(),
        before + 4,
        "the budget stops the fifth turn"
    );
    assert_eq!(after_bots, before + 4);
    discord.send(message(
        4_000_020,
        &channel_id,
        Some("9"),
        "42",
        false,
        "Carry on, team",
        false,
    ));
    assert_eq!(
        requests_reach(&llm, before + 6).await,
        before + 6,
        "a person resets it"
    );

    // Creating is for goals.create_tiers: an admin token is refused (by the tool, not layer 2).
    let (_, refused) = common::api(
        "POST",
        &format!("{}/api/invoke", served.base),
        ADMIN,
        Some(json!({"tool": "goal_create", "args": {"title": "Mine"}})),
    )
    .await;
    assert!(
        refused["value"]["error"].as_str().is_some_and(
            |e| e.contains("denied: creating goals is for owner, coordinator, privileged")
        ),
        "{refused}"
    );
    // An illegal move is refused and names the allowed ones.
    let r = invoke(
        &served.base,
        "goal_set",
        json!({"goal": id, "state": "done", "reason": "rush"}),
    )
    .await;
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("from proposed it can go to brainstorm, abandoned")),
        "{r}"
    );
    // A proposal decided after its window; one blocked by an objection.
    assert_eq!(
        invoke(&served.base, "goal_join", json!({"goal": id})).await["ok"],
        true
    );
    let p = invoke(
        &served.base,
        "goal_propose",
        json!({"goal": id, "title": "Use last year's template"}),
    )
    .await;
    assert_eq!(p["ok"], true, "{p}");
    let v = invoke(
        &served.base,
        "goal_vote",
        json!({"goal": id, "proposal": 1, "choice": "yes"}),
    )
    .await;
    assert_eq!(v["ok"], true, "{v}");
    let early = invoke(
        &served.base,
        "goal_decide",
        json!({"goal": id, "proposal": 1}),
    )
    .await;
    assert_eq!(early["ok"], false, "{early}");
    assert!(
        early["error"]
            .as_str()
            .is_some_and(|e| e.contains("objection window is open")),
        "{early}"
    );
    let q = invoke(
        &served.base,
        "goal_propose",
        json!({"goal": id, "title": "Drop the appendix"}),
    )
    .await;
    assert_eq!(q["ok"], true, "{q}");
    let o = invoke(
        &served.base,
        "goal_vote",
        json!({"goal": id, "proposal": 2, "choice": "object", "reason": "the board reads it"}),
    )
    .await;
    assert_eq!(o["ok"], true, "{o}");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let yes = invoke(
        &served.base,
        "goal_decide",
        json!({"goal": id, "proposal": 1}),
    )
    .await;
    assert_eq!(
        yes["value"]["goal"]["proposals"][0]["status"], "accepted",
        "{yes}"
    );
    let no = invoke(
        &served.base,
        "goal_decide",
        json!({"goal": id, "proposal": 2}),
    )
    .await;
    assert_eq!(
        no["value"]["goal"]["proposals"][1]["status"], "rejected",
        "{no}"
    );
    assert_eq!(
        no["value"]["event"]["reason"], "blocked by token:boss's objection: the board reads it",
        "{no}"
    );
    let moved = invoke(
        &served.base,
        "goal_set",
        json!({"goal": id, "state": "brainstorm", "reason": "kick-off"}),
    )
    .await;
    assert_eq!(moved["value"]["goal"]["state"], "brainstorm", "{moved}");
    drop(served);

    // After a restart: the goal, its log, and its channel's routing.
    let served = common::serve(d);
    common::gateway_up(&discord).await;
    let (status, shown) = common::api(
        "GET",
        &format!("{}/api/goals/{id}", served.base),
        OWNER,
        None,
    )
    .await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["value"]["goal"]["state"], "brainstorm");
    assert_eq!(
        shown["value"]["goal"]["participants"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    let out = common::strata(d)
        .args(["goal", "events", &id, "--json"])
        .output()
        .expect("goal events");
    let events: Vec<Value> = serde_json::from_slice(&out.stdout).expect("events json");
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "created", "channel", "joined", "proposed", "voted", "proposed", "voted", "decided",
            "decided", "state"
        ],
        "{events:?}"
    );
    assert_eq!(events[0]["actor"], "agent:coord");
    assert_eq!(events[2]["actor"], "token:boss");
    assert_eq!(events[9]["reason"], "kick-off");
    let listed = common::strata(d)
        .args(["goal", "list"])
        .output()
        .expect("goal list");
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(text.contains(&id) && text.contains("brainstorm"), "{text}");
    let missing = common::strata(d)
        .args(["goal", "show", "no-such-goal"])
        .output()
        .expect("show");
    assert_eq!(missing.status.code(), Some(2));
    let (status, _) = common::api(
        "GET",
        &format!("{}/api/goals/no-such-goal", served.base),
        OWNER,
        None,
    )
    .await;
    assert_eq!(status, 404);
    let before = llm.requests().len();
    discord.send(message(
        4_000_030,
        &channel_id,
        Some("9"),
        "42",
        false,
        "Still there?",
        false,
    ));
    assert_eq!(
        requests_reach(&llm, before + 2).await,
        before + 2,
        "routed after the restart"
    );
    drop(served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_lives_through_a_turn_a_channel_votes_and_a_restart_on_sqlite() {
    a_goal_lives_through_a_turn_a_channel_votes_and_a_restart("").await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_lives_through_a_turn_a_channel_votes_and_a_restart_on_postgres() {
    let Some(schema) = common::Schema::new() else {
        return;
    };
    let storage = format!(
        "storage:\n  backend: postgres\n  postgres:\n    url: {}\n    schema: {}\n    pool_size: 4\n",
        schema.url, schema.name
    );
    a_goal_lives_through_a_turn_a_channel_votes_and_a_restart(&storage).await;
    assert_eq!(schema.count("SELECT COUNT(*) FROM goals").await, 1);
}

/// The `goal_nudge` job: an executing goal's first agent is asked for a stand-up in the
/// goal's channel, and a task past due is raised there, each recorded on the goal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clock_asks_for_a_stand_up_and_raises_a_late_task_in_the_channel() {
    let llm = FakeServer::start().await.expect("fake llm");
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    overlay(
        d,
        &llm.url,
        &discord,
        "  standup_every: 2s\n  nudge_interval: 1s\n",
    );
    let served = common::serve(d);
    common::gateway_up(&discord).await;
    let made = invoke(
        &served.base,
        "goal_create",
        json!({"title": "Migrate the CRM", "participants": ["agent:coord"]}),
    )
    .await;
    assert_eq!(made["ok"], true, "{made}");
    let goal = &made["value"]["goal"];
    let id = goal["id"].as_str().expect("id").to_owned();
    let channel_id = goal["channel"]
        .as_str()
        .and_then(|c| c.rsplit(':').next())
        .expect("channel")
        .to_owned();
    // The stand-up turn first reads the goal's channel (a goal's agents may), then answers.
    llm.script([openai::tool_calls(&[(
        "c1",
        "read_channel_history",
        json!({"channel": goal["channel"], "limit": 5}),
    )])]);
    llm.script((0..40).map(|i| openai::text(&format!("stand-up answer {i}"))));
    for state in ["brainstorm", "strategy", "executing"] {
        let r = invoke(
            &served.base,
            "goal_set",
            json!({"goal": id, "state": state, "reason": "on"}),
        )
        .await;
        assert_eq!(r["ok"], true, "{r}");
    }
    let t = invoke(
        &served.base,
        "goal_task",
        json!({"goal": id, "action": "add", "title": "Export contacts", "assignee": "agent:coord", "due": "2020-01-01"}),
    )
    .await;
    assert_eq!(t["ok"], true, "{t}");
    let asked = |needle: &str| {
        llm.requests()
            .iter()
            .any(|r| r.body["messages"].to_string().contains(needle))
    };
    for _ in 0..200 {
        if asked("[GOAL STAND-UP]") && asked("[GOAL TASK DUE]") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(asked("[GOAL STAND-UP]"), "no stand-up turn");
    let read: Vec<String> = llm.requests()[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert!(
        read.len() == 1 && read[0].contains("Goal: Migrate the CRM") && !read[0].contains("denied"),
        "the goal's agent reads the goal's channel: {read:?}"
    );
    assert!(
        asked("[GOAL TASK DUE] Task #1 \\\"Export contacts\\\""),
        "no late-task turn"
    );
    let mut posted = Vec::new();
    for _ in 0..100 {
        posted = posted_in(&discord, &channel_id);
        if posted.iter().any(|p| p.starts_with("stand-up answer")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        posted.iter().any(|p| p.starts_with("stand-up answer")),
        "the answer is posted in the goal's channel: {posted:?}"
    );
    let (_, ev) = common::api(
        "GET",
        &format!("{}/api/goals/{id}/events?limit=1000", served.base),
        OWNER,
        None,
    )
    .await;
    let nudged: Vec<&str> = ev["value"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "nudged")
        .filter_map(|e| e["detail"]["what"].as_str())
        .collect();
    assert!(nudged.contains(&"standup"), "{nudged:?}");
    assert_eq!(
        nudged.iter().filter(|w| **w == "task_due").count(),
        1,
        "a late task is raised once: {nudged:?}"
    );
    drop(served);
}

#[test]
fn a_bad_goals_setting_stops_serve_naming_the_key() {
    let dir = tempfile::tempdir().expect("tmp");
    common::write(
        dir.path(),
        "config/config.yaml",
        "goals:\n  objection_window: soon\n",
    );
    let out = common::strata(dir.path())
        .args(["serve", "--set", "server.port=0"])
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("goals.objection_window: `soon` is not a duration"),
        "{err}"
    );
}
