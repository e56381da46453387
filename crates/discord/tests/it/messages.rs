//! Routing and answering: replies, splitting, who gets no answer, repeat guards, categories,
//! DMs and watched channels, the chain breaker.

use std::time::Duration;

use strata_engine::config::{Access, Person};
use strata_test_support::scripted::text;

use crate::world::*;
use strata_test_support::discord::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_routed_answered_as_a_reply_and_long_answers_are_split() {
    let long: String = (0..150)
        .map(|i| format!("Step {i}: do the thing.\n"))
        .collect();
    let w = world(vec![
        (
            "ops",
            routing(Some(&["100"])),
            vec![text("On it."), text(&long)],
        ),
        ("helper", routing(Some(&[])), vec![text("Helper here.")]),
    ])
    .await;
    let identify = w.fake.identified.lock().expect("lock")[0].clone();
    assert_eq!(
        identify["token"].as_str().map(|t| !t.is_empty()),
        Some(true)
    );
    assert!(
        identify["intents"].as_u64().unwrap_or(0) & (1 << 15) != 0,
        "message content intent"
    );
    assert_eq!(identify["presence"]["status"], "online");
    assert_eq!(identify["presence"]["activities"][0]["name"], "the team");
    assert_eq!(
        identify["presence"]["activities"][0]["type"], 2,
        "listening"
    );

    // An exact channel beats the wildcard.
    w.fake
        .push
        .send(message(
            7001,
            "100",
            Some("9"),
            "42",
            false,
            "deploy status?",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(1).await;
    assert_eq!(
        posted,
        [("100".into(), "On it.".into(), Some("7001".into()))]
    );
    assert!(w.providers["helper"].requests().is_empty());
    let typing = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .any(|(m, p, _)| m == "POST" && p == "/api/v10/channels/100/typing");
    assert!(typing, "typing indicator while the agent worked");
    let req = &w.providers["ops"].requests()[0];
    let system = req.system.clone().unwrap_or_default();
    assert!(
        system.contains("(person:discord:42; tier owner"),
        "{system}"
    );
    assert!(system.contains("channel: discord:main:100"), "{system}");

    // The gateway replays the same message (resume): no second turn.
    w.fake
        .push
        .send(message(
            7001,
            "100",
            Some("9"),
            "42",
            false,
            "deploy status?",
            false,
        ))
        .expect("push");
    // Another channel goes to the wildcard agent.
    w.fake
        .push
        .send(message(7002, "200", Some("9"), "42", false, "hello", false))
        .expect("push");
    let posted = w.wait_posted(2).await;
    assert_eq!(posted.len(), 2, "{posted:?}");
    assert_eq!(
        posted[1],
        ("200".into(), "Helper here.".into(), Some("7002".into()))
    );
    assert_eq!(
        w.providers["ops"].requests().len(),
        1,
        "the replay started no turn"
    );

    // A long answer comes in parts of at most 2,000 characters, only the first a reply.
    w.fake
        .push
        .send(message(
            7003,
            "100",
            Some("9"),
            "42",
            false,
            "full runbook",
            false,
        ))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let posted = w.wait_posted(4).await;
    let parts: Vec<_> = posted[2..].to_vec();
    assert!(parts.len() >= 2, "{parts:?}");
    assert!(
        parts
            .iter()
            .all(|(c, t, _)| c == "100" && t.chars().count() <= 2000)
    );
    assert_eq!(parts[0].2.as_deref(), Some("7003"));
    assert!(parts[1..].iter().all(|(_, _, r)| r.is_none()));
    assert_eq!(
        parts.iter().map(|(_, t, _)| t.as_str()).collect::<String>(),
        long
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_own_messages_strangers_and_no_reply_get_no_answer() {
    let w = world(vec![(
        "helper",
        routing(Some(&[])),
        vec![text("NO_REPLY"), text("Hello, fellow bot.")],
    )])
    .await;
    // Its own message, another bot without a mention, a stranger (unknown sender: layer 1).
    for m in [
        message(8001, "200", Some("9"), "900", true, "I said this", false),
        message(8002, "200", Some("9"), "777", true, "bot chatter", false),
        message(8003, "200", Some("9"), "555", false, "who are you?", false),
    ] {
        w.fake.push.send(m).expect("push");
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(w.posted().is_empty(), "{:?}", w.posted());
    assert!(w.providers["helper"].requests().is_empty());
    // The owner gets NO_REPLY: nothing is posted.
    w.fake
        .push
        .send(message(
            8004,
            "200",
            Some("9"),
            "42",
            false,
            "just saying",
            false,
        ))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(w.providers["helper"].requests().len(), 1);
    assert!(w.posted().is_empty(), "{:?}", w.posted());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeating_bot_is_muted_and_the_same_reply_is_not_posted_twice() {
    let w = world(vec![(
        "helper",
        routing(Some(&[])),
        vec![text("Pong."), text("Pong."), text("Different.")],
    )])
    .await;
    // A known bot that mentions us is answered...
    w.fake
        .push
        .send(message(
            9001,
            "300",
            Some("9"),
            "777",
            true,
            "<@900> ping",
            true,
        ))
        .expect("push");
    assert_eq!(w.wait_posted(1).await.len(), 1);
    // ...the same answer to the same channel within two minutes is dropped...
    w.fake
        .push
        .send(message(
            9002,
            "300",
            Some("9"),
            "777",
            true,
            "<@900> ping",
            true,
        ))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(w.providers["helper"].requests().len(), 2, "the turn ran");
    assert_eq!(w.posted().len(), 1, "but the repeated reply was not posted");
    // ...and the third identical message mutes the bot: no turn at all.
    w.fake
        .push
        .send(message(
            9003,
            "300",
            Some("9"),
            "777",
            true,
            "<@900> PING",
            true,
        ))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(w.providers["helper"].requests().len(), 2, "muted");
    // A person in the same channel is still answered.
    w.fake
        .push
        .send(message(
            9004,
            "300",
            Some("9"),
            "42",
            false,
            "status?",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(2).await;
    assert_eq!(posted[1].1, "Different.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_category_routes_between_exact_channels_and_the_wildcard() {
    let mut support = routing(None);
    support.categories = vec!["777000".into()];
    let w = world(vec![
        (
            "support",
            support,
            vec![text("support here"), text("support again")],
        ),
        ("helper", routing(Some(&[])), vec![text("helper here")]),
    ])
    .await;
    for (id, channel) in [(3001, "300"), (3002, "301"), (3003, "300")] {
        w.fake
            .push
            .send(message(id, channel, Some("9"), "42", false, "help", false))
            .expect("push");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let posted = w.wait_posted(3).await;
    let got: Vec<(&str, &str)> = posted
        .iter()
        .map(|(c, t, _)| (c.as_str(), t.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("300", "support here"),
            ("301", "helper here"),
            ("300", "support again")
        ]
    );
    // Each channel was looked up once.
    let lookups = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, _)| m == "GET" && p.starts_with("/api/v10/channels/"))
        .count();
    assert_eq!(lookups, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dms_reach_every_bound_agent_and_watched_channels_hear_bots() {
    let w = world(vec![
        (
            "ops",
            routing(Some(&["100"])),
            vec![text("ops in DM"), text("ops heard the bot")],
        ),
        ("quiet", routing(None), vec![text("quiet in DM")]),
    ])
    .await;
    // A DM (no guild) goes to both agents bound to the account.
    w.fake
        .push
        .send(message(5601, "4242", None, "42", false, "hello", false))
        .expect("push");
    let posted = w.wait_posted(2).await;
    let mut texts: Vec<&str> = posted.iter().map(|(_, t, _)| t.as_str()).collect();
    texts.sort_unstable();
    assert_eq!(texts, ["ops in DM", "quiet in DM"]);
    // A known bot without a mention: heard in the watched channel 100, not elsewhere.
    w.fake
        .push
        .send(message(
            5602,
            "100",
            Some("9"),
            "777",
            true,
            "build finished",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(3).await;
    assert_eq!(
        posted[2],
        (
            "100".into(),
            "ops heard the bot".into(),
            Some("5602".into())
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chain_breaker_stops_bots_in_a_channel_until_a_human_writes() {
    let replies: Vec<_> = (0..4).map(|i| text(&format!("reply {i}"))).collect();
    let w = world_with(
        vec![("ops", routing(Some(&["100"])), replies)],
        |c| {
            c.connectors.discord.bot_chain_limit = 2;
            for id in ["778", "779"] {
                c.team.people.push(Person {
                    id: format!("bot-{id}"),
                    name: "Another Bot".into(),
                    access: Access::Owner,
                    contacts: [("discord".to_owned(), id.to_owned())].into(),
                    budget: None,
                    role: None,
                    timezone: None,
                });
            }
        },
        None,
    )
    .await;
    // Three different bots (no rate or repeat trouble): the third bot-triggered turn in a
    // row is refused.
    for (id, bot) in [(5701u64, "777"), (5702, "778"), (5703, "779")] {
        w.fake
            .push
            .send(message(
                id,
                "100",
                Some("9"),
                bot,
                true,
                &format!("from {bot}"),
                false,
            ))
            .expect("push");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(w.wait_posted(2).await.len(), 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(w.providers["ops"].requests().len(), 2, "the chain broke");
    // A human resets the chain; bots are heard again.
    w.fake
        .push
        .send(message(
            5704,
            "100",
            Some("9"),
            "42",
            false,
            "carry on",
            false,
        ))
        .expect("push");
    w.fake
        .push
        .send(message(
            5705,
            "100",
            Some("9"),
            "777",
            true,
            "from 777 again",
            false,
        ))
        .expect("push");
    assert_eq!(w.wait_posted(4).await.len(), 4);
}
