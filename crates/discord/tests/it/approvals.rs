//! Approvals by reaction in the approval channel, and their timeout.

use std::time::Duration;

use serde_json::json;

use crate::world::*;
use strata_test_support::discord::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_decided_by_an_approvers_reaction_only() {
    let w = world(vec![("helper", routing(Some(&[])), vec![])]).await;
    let call = |who: &str| {
        let inv = w.invoker.clone();
        let c = strata_runtime::Invocation::new(
            "launch",
            json!({"password": "hunter2"}),
            strata_engine::Principal::Person { id: who.into() },
        );
        tokio::spawn(async move { inv.invoke(c).await })
    };
    let task = call("olivia");
    let posted = w.wait_posted(1).await;
    let (channel, text, _) = posted[0].clone();
    assert_eq!(channel, "555");
    assert!(
        text.contains("Approval needed") && text.contains("`launch`"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "arguments are redacted: {text}");
    // The request message got both reactions from the bot.
    let msg_id = w.reacted_message(0).await;

    // A non-approver's and a bot's ✅ change nothing.
    w.fake
        .push
        .send(reaction(&msg_id, "43", false, "✅"))
        .expect("push");
    w.fake
        .push
        .send(reaction(&msg_id, "777", true, "✅"))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!task.is_finished());
    assert_eq!(w.runs.load(std::sync::atomic::Ordering::SeqCst), 0);

    // The owner's ✅ runs it, and the outcome is posted as a reply.
    w.fake
        .push
        .send(reaction(&msg_id, "42", false, "✅"))
        .expect("push");
    let r = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("decided")
        .expect("join");
    assert_eq!(r.status, strata_runtime::Status::Ok, "{r:?}");
    assert_eq!(w.runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The outcome is replied to the request, and is a security alert in the alert channel.
    let posted = w.wait_posted(3).await;
    let outcome = posted
        .iter()
        .find(|(c, t, _)| c == "555" && t.contains("approved"))
        .expect("outcome posted");
    assert!(outcome.1.contains("discord:42"), "{posted:?}");
    assert_eq!(outcome.2.as_deref(), Some(msg_id.as_str()));
    assert!(
        posted
            .iter()
            .any(|(c, t, _)| c == "556" && t.contains("security alert (approval: approved)")),
        "{posted:?}"
    );

    // ❌ denies.
    let task = call("olivia");
    let mut asked = 0;
    for _ in 0..100 {
        asked = w
            .posted()
            .iter()
            .filter(|(_, t, _)| t.contains("Approval needed"))
            .count();
        if asked == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(asked, 2);
    let msg_id = w.reacted_message(1).await;
    w.fake
        .push
        .send(reaction(&msg_id, "42", false, "❌"))
        .expect("push");
    let r = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("decided")
        .expect("join");
    assert_eq!(r.status, strata_runtime::Status::ApprovalDenied, "{r:?}");
    assert_eq!(w.runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    let pending = w
        .approvals
        .store()
        .list(Some(strata_runtime::approval::ApprovalStatus::Pending), 10)
        .await
        .expect("list");
    assert!(pending.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_approval_times_out_and_says_so_in_the_channel() {
    let w = world_with(
        vec![("helper", routing(Some(&[])), vec![])],
        |c| c.security.hitl.timeout = 1,
        None,
    )
    .await;
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        w.invoker.invoke(strata_runtime::Invocation::new(
            "launch",
            json!({}),
            strata_engine::Principal::Person {
                id: "olivia".into(),
            },
        )),
    )
    .await
    .expect("the timeout decides");
    assert_eq!(r.status, strata_runtime::Status::ApprovalDenied, "{r:?}");
    assert!(r.error.unwrap_or_default().contains("did not run"));
    assert_eq!(w.runs.load(std::sync::atomic::Ordering::SeqCst), 0);
    let posted = w.wait_posted(2).await;
    assert!(posted[0].1.contains("Approval needed"), "{posted:?}");
    assert!(
        posted
            .iter()
            .any(|(c, t, _)| c == "555" && t.contains("timeout")),
        "{posted:?}"
    );
}

/// In a cluster the request may have been posted by another instance (this one does not
/// remember the message): the request is read back from Discord and decided by the
/// approver's reaction — but only from a message the bot itself wrote, never from another
/// bot's look-alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_posted_by_another_instance_is_decided_by_a_reaction_seen_here() {
    use strata_runtime::approval::{ApprovalRecord, ApprovalStatus};
    let w = world(vec![("helper", routing(Some(&[])), vec![])]).await;
    let pending = |id: &str| ApprovalRecord {
        id: id.into(),
        agent_id: Some("helper".into()),
        tool: "launch".into(),
        principal: "person:olivia".into(),
        args: json!({}),
        description: "launch".into(),
        status: ApprovalStatus::Pending,
        approver: None,
        reason: None,
        created_at: 1,
        decided_at: None,
    };
    let store = w.approvals.store().clone();
    for id in ["req-elsewhere", "req-forged"] {
        store.insert(&pending(id)).await.expect("insert");
    }
    let by = |id: &str, author: &str, request: &str| {
        json!({"id": id, "channel_id": "555", "type": 0,
               "content": format!("**Approval needed** `{request}`\nAgent: helper · tool: `launch`"),
               "author": {"id": author, "username": "a", "discriminator": "0", "avatar": null, "bot": true},
               "attachments": [], "embeds": [], "mentions": [], "mention_roles": [],
               "mention_everyone": false, "pinned": false, "tts": false,
               "timestamp": "2026-12-02T00:00:00+00:00", "edited_timestamp": null})
    };
    {
        let mut h = w.fake.history.lock().expect("lock");
        h.push(by("7001", "900", "req-elsewhere"));
        h.push(by("7002", "901", "req-forged"));
    }
    w.fake.send(reaction("7002", "42", false, "✅"));
    w.fake.send(reaction("7001", "42", false, "✅"));
    let mut decided = None;
    for _ in 0..100 {
        let r = store
            .get("req-elsewhere")
            .await
            .expect("get")
            .expect("some");
        if r.status != ApprovalStatus::Pending {
            decided = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let decided = decided.expect("decided by the reaction");
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert_eq!(decided.approver.as_deref(), Some("person:discord:42"));
    let forged = store.get("req-forged").await.expect("get").expect("some");
    assert_eq!(
        forged.status,
        ApprovalStatus::Pending,
        "another bot's message decides nothing"
    );
}
