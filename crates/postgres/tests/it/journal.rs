//! The turn journal's conformance suite: a turn's start, steps, end, resume and retention,
//! each test run against SQLite and PostgreSQL — and through a reopened store (a restart).

use serde_json::json;
use strata_engine::Principal;
use strata_engine::message::Message;
use strata_runtime::journal::{JournalOp, JournalStep, JournalTurn, TurnFilter, TurnStart};

use crate::both;
use crate::harness::{Harness, Kind};

fn start(session: &str) -> TurnStart {
    TurnStart {
        agent_id: "main".into(),
        session_id: session.into(),
        channel_id: format!("http:{session}"),
        channel_kind: None,
        scopes: Vec::new(),
        sender: Principal::Operator,
        message: Message::text("post the report"),
        taint: Vec::new(),
        depth: 0,
    }
}

fn turn(id: &str, started_ms: i64) -> JournalTurn {
    JournalTurn {
        turn_id: id.into(),
        owner: "host-1".into(),
        started_ms,
        ended_ms: None,
        outcome: None,
        resumed: 0,
        steps: 0,
        start: start(id),
    }
}

fn step(seq: u64, kind: &str, key: &str) -> JournalStep {
    JournalStep {
        seq,
        at_ms: 1_000 + seq as i64,
        kind: kind.into(),
        key: key.into(),
        data: json!({"n": seq, "text": "ünïcode ✓"}),
    }
}

async fn a_turns_journal_survives_a_restart_and_is_resumed_once_ended(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    {
        let store = h.store().await;
        assert!(store.journal_begin(&turn("t-1", 10)).await.expect("begin"));
        // A second start of the same turn leaves the first as it is.
        let mut again = turn("t-1", 99);
        again.owner = "host-2".into();
        assert!(!store.journal_begin(&again).await.expect("begin again"));
        store
            .journal_append("t-1", &[step(1, "model", "m1")])
            .await
            .expect("append");
        store
            .journal_append(
                "t-1",
                &[
                    step(2, "tool_started", "t1.0"),
                    step(3, "tool_done", "t1.0"),
                ],
            )
            .await
            .expect("append two");
        // A step number used twice is refused, not overwritten.
        assert!(
            store
                .journal_append("t-1", &[step(3, "tool_done", "t1.0")])
                .await
                .is_err()
        );
        assert!(store.journal_begin(&turn("t-2", 20)).await.expect("begin"));
        store.journal_end("t-2", 30, "ok").await.expect("end");
    }
    // Reopened: what was written is there.
    let store = h.store().await;
    let (t, steps) = store.journal_turn("t-1").await.expect("read").expect("t-1");
    assert_eq!(t.owner, "host-1");
    assert_eq!(t.started_ms, 10);
    assert_eq!(t.ended_ms, None);
    assert_eq!(t.steps, 3);
    assert_eq!(t.start, start("t-1"));
    assert_eq!(
        steps
            .iter()
            .map(|s| (s.seq, s.kind.as_str(), s.key.as_str()))
            .collect::<Vec<_>>(),
        [
            (1, "model", "m1"),
            (2, "tool_started", "t1.0"),
            (3, "tool_done", "t1.0")
        ]
    );
    assert_eq!(steps[2].data, json!({"n": 3, "text": "ünïcode ✓"}));
    assert!(store.journal_turn("nope").await.expect("read").is_none());

    let unfinished = store
        .journal_turns(TurnFilter {
            unfinished: true,
            limit: 0,
        })
        .await
        .expect("list");
    assert_eq!(
        unfinished
            .iter()
            .map(|t| t.turn_id.as_str())
            .collect::<Vec<_>>(),
        ["t-1"]
    );
    let all = store
        .journal_turns(TurnFilter::default())
        .await
        .expect("list all");
    // Newest first.
    assert_eq!(
        all.iter().map(|t| t.turn_id.as_str()).collect::<Vec<_>>(),
        ["t-2", "t-1"]
    );
    assert_eq!(all[0].outcome.as_deref(), Some("ok"));
    assert_eq!(all[0].ended_ms, Some(30));

    // Taken over by another process: its end cleared, the resume counted.
    store.journal_reopen("t-1", "host-9").await.expect("reopen");
    store.journal_end("t-1", 50, "ok").await.expect("end");
    // A second end does not move the first.
    store
        .journal_end("t-1", 60, "error")
        .await
        .expect("end again");
    let (t, _) = store.journal_turn("t-1").await.expect("read").expect("t-1");
    assert_eq!(
        (
            t.owner.as_str(),
            t.resumed,
            t.ended_ms,
            t.outcome.as_deref()
        ),
        ("host-9", 1, Some(50), Some("ok"))
    );

    // Retention: only turns that ended before the cut go, with their steps.
    assert!(store.journal_begin(&turn("t-3", 70)).await.expect("begin"));
    assert_eq!(store.journal_prune(40).await.expect("prune"), 1);
    assert!(store.journal_turn("t-2").await.expect("read").is_none());
    assert!(store.journal_turn("t-1").await.expect("read").is_some());
    assert_eq!(store.journal_prune(1_000).await.expect("prune"), 1);
    assert!(store.journal_turn("t-1").await.expect("read").is_none());
    // An unfinished turn is never pruned.
    assert!(store.journal_turn("t-3").await.expect("read").is_some());
}
both!(a_turns_journal_survives_a_restart_and_is_resumed_once_ended);

async fn a_batch_of_writes_of_several_turns_is_one_commit_in_order(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    {
        let store = h.store().await;
        assert!(store.journal_begin(&turn("t-0", 5)).await.expect("begin"));
        store
            .journal_write(&[
                JournalOp::Begin(Box::new(turn("t-1", 10))),
                JournalOp::Append {
                    turn_id: "t-1".into(),
                    steps: vec![step(1, "model", "m1"), step(2, "tool_started", "t1.0")],
                },
                // A start of a turn that has one leaves it as it is, here too.
                JournalOp::Begin(Box::new(turn("t-0", 99))),
                JournalOp::Begin(Box::new(turn("t-2", 20))),
                JournalOp::Append {
                    turn_id: "t-1".into(),
                    steps: vec![step(3, "tool_done", "t1.0")],
                },
                JournalOp::End {
                    turn_id: "t-2".into(),
                    at_ms: 30,
                    outcome: "ok".into(),
                },
            ])
            .await
            .expect("batch");
        // One bad write (a step number used twice) and the whole batch is refused: nothing
        // of it lands, so the writer can write each caller's part alone.
        assert!(
            store
                .journal_write(&[
                    JournalOp::Append {
                        turn_id: "t-2".into(),
                        steps: vec![step(1, "model", "m1")],
                    },
                    JournalOp::Append {
                        turn_id: "t-1".into(),
                        steps: vec![step(3, "tool_done", "t1.0")],
                    },
                ])
                .await
                .is_err()
        );
    }
    let store = h.store().await;
    let (t0, _) = store.journal_turn("t-0").await.expect("read").expect("t-0");
    assert_eq!(t0.started_ms, 5);
    let (t1, steps) = store.journal_turn("t-1").await.expect("read").expect("t-1");
    assert_eq!((t1.ended_ms, t1.steps), (None, 3));
    assert_eq!(
        steps
            .iter()
            .map(|s| (s.seq, s.kind.as_str()))
            .collect::<Vec<_>>(),
        [(1, "model"), (2, "tool_started"), (3, "tool_done")]
    );
    assert_eq!(steps[0], step(1, "model", "m1"));
    let (t2, steps) = store.journal_turn("t-2").await.expect("read").expect("t-2");
    assert_eq!((t2.ended_ms, t2.outcome.as_deref()), (Some(30), Some("ok")));
    assert!(
        steps.is_empty(),
        "the refused batch left nothing: {steps:?}"
    );
}
both!(a_batch_of_writes_of_several_turns_is_one_commit_in_order);
