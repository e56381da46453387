//! Several accounts, a bad token, and resuming after a dropped connection.

use std::time::Duration;

use strata_engine::config::DiscordAccount;
use strata_test_support::scripted::text;

use crate::world::*;
use strata_test_support::discord::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_accounts_answer_for_their_own_agents_and_a_bad_token_disables_only_its_account() {
    let mut second = routing(Some(&[]));
    second.account = "second".into();
    let w = world_with(
        vec![
            ("ops", routing(Some(&[])), vec![text("ops here")]),
            ("sales", second, vec![text("sales here")]),
        ],
        |c| {
            let acct = |key: &str| DiscordAccount {
                enabled: true,
                token: format!("vault:{key}"),
                intents: None,
                presence: None,
            };
            let d = &mut c.connectors.discord.accounts;
            d.insert("main".into(), acct("discord-main"));
            d.insert("second".into(), acct("discord-second"));
            d.insert("broken".into(), acct("discord-broken"));
            d.insert("missing".into(), acct("discord-nowhere"));
        },
        Some(&Tokens),
    )
    .await;
    // Three accounts identified (the one without a token never connected); the broken one
    // once, with no retry loop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ids: Vec<String> = w
        .fake
        .identified
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|d| d["token"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(
        ids.iter().filter(|t| t.contains("bad")).count(),
        1,
        "{ids:?}"
    );

    // Both working bots see the message; each answers for its own agent, with its own token.
    w.fake
        .push
        .send(message(
            6001,
            "100",
            Some("9"),
            "42",
            false,
            "anyone?",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(2).await;
    let mut texts: Vec<&str> = posted.iter().map(|(_, t, _)| t.as_str()).collect();
    texts.sort_unstable();
    assert_eq!(texts, ["ops here", "sales here"]);
    let auths: Vec<String> = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, _)| m == "POST" && p.ends_with("/messages"))
        .filter_map(|(_, _, v)| v["_auth"].as_str().map(str::to_owned))
        .collect();
    assert!(auths.iter().any(|a| a.ends_with("token-main")), "{auths:?}");
    assert!(
        auths.iter().any(|a| a.ends_with("token-second")),
        "{auths:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_dropped_connection_the_shard_resumes_and_a_replay_starts_no_second_turn() {
    let w = world(vec![(
        "ops",
        routing(Some(&[])),
        vec![text("first"), text("second")],
    )])
    .await;
    w.fake
        .push
        .send(message(4001, "100", Some("9"), "42", false, "one", false))
        .expect("push");
    assert_eq!(w.wait_posted(1).await.len(), 1);
    // The connection drops; twilight reconnects and RESUMEs; the fake replays message 4001.
    w.fake.drop_all.send(()).expect("drop");
    eventually(|| !w.fake.resumed.lock().expect("lock").is_empty()).await;
    let resumed = w.fake.resumed.lock().expect("lock").clone();
    assert_eq!(resumed.len(), 1, "resumed once");
    assert_eq!(resumed[0]["session_id"], "fake-session");
    assert_eq!(
        w.fake.identified.lock().expect("lock").len(),
        1,
        "no new IDENTIFY"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        w.providers["ops"].requests().len(),
        1,
        "the replay started no turn"
    );
    // The resumed connection carries new messages.
    w.fake
        .push
        .send(message(4002, "100", Some("9"), "42", false, "two", false))
        .expect("push");
    let posted = w.wait_posted(2).await;
    assert_eq!(posted[1].1, "second");
    // Discord asks for a reconnect (op 7): the shard reconnects and resumes again.
    w.fake.reconnect.send(()).expect("reconnect");
    eventually(|| w.fake.resumed.lock().expect("lock").len() >= 2).await;
    assert_eq!(
        w.fake.resumed.lock().expect("lock").len(),
        2,
        "resumed after RECONNECT"
    );
    assert_eq!(w.fake.identified.lock().expect("lock").len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        w.providers["ops"].requests().len(),
        2,
        "the replay after it started no turn"
    );
}
