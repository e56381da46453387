//! The goal store's conformance suite: a goal's life, its log, concurrent changes and gated
//! decisions, each test run against SQLite and PostgreSQL.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use strata_engine::Principal;
use strata_engine::access::AccessPolicy;
use strata_engine::config::{Config, GoalsConfig};
use strata_runtime::approval::{ApprovalStatus, ApprovalStore, Approvals, decide_in};
use strata_runtime::goal::Goals;
use strata_runtime::goal::{
    Change, Choice, GoalError, GoalState, GoalStore, ProposalKind, ProposalStatus,
};

use crate::both;
use crate::harness::{Harness, Kind};

const DAY_MS: i64 = 86_400_000;

/// Goals over `store`, kept by a clock the test moves.
fn goals(store: Arc<dyn GoalStore>) -> (Goals, Arc<AtomicI64>) {
    let now = Arc::new(AtomicI64::new(1_800_000_000_000));
    let clock = now.clone();
    let g = Goals::new(store, &GoalsConfig::default())
        .expect("config")
        .with_clock(Arc::new(move || clock.load(Ordering::SeqCst)));
    (g, now)
}

async fn a_goal_keeps_its_life_and_its_log_across_a_restart(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let id = {
        let store = h.store().await;
        let (g, now) = goals(store.clone());
        let goal = g
            .create(
                "agent:coord",
                "Migrate the CRM",
                "All customers in the new system",
                &["agent:sales".into()],
            )
            .await
            .expect("create");
        let id = goal.id.clone();
        assert!(id.starts_with("migrate-the-crm-"), "{id}");
        assert_eq!(goal.state, GoalState::Proposed);
        let step = |c: Change| {
            let g = &g;
            let id = id.clone();
            async move { g.change(&id, "agent:coord", c).await }
        };
        step(Change::Join {
            who: "discord:42".into(),
        })
        .await
        .expect("join");
        // An illegal move is refused, names where the goal can go, and leaves no trace.
        let e = step(Change::SetState {
            to: GoalState::Executing,
            reason: "hurry".into(),
        })
        .await
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "a goal cannot go from proposed to executing: from proposed it can go to \
                 brainstorm, abandoned"
            )
        );
        for to in [
            GoalState::Brainstorm,
            GoalState::Strategy,
            GoalState::Executing,
        ] {
            step(Change::SetState {
                to,
                reason: format!("on to {to}"),
            })
            .await
            .expect("move");
        }
        step(Change::AddTask {
            title: "Export the old contacts".into(),
            assignee: Some("agent:sales".into()),
            due: Some("2027-01-15".into()),
        })
        .await
        .expect("task");
        step(Change::Propose {
            title: "Cut over on a Sunday".into(),
            detail: "Least traffic".into(),
            kind: ProposalKind::Plan,
        })
        .await
        .expect("propose");
        g.change(
            &id,
            "agent:sales",
            Change::Vote {
                proposal: 1,
                choice: Choice::Yes,
                reason: None,
            },
        )
        .await
        .expect("vote");
        // Decided only after the objection window (24 h by default).
        assert!(matches!(
            g.decide(&id, 1, "agent:coord", "r1", None).await,
            Err(GoalError::Invalid(_))
        ));
        now.fetch_add(DAY_MS, Ordering::SeqCst);
        let (after, ev) = g
            .decide(&id, 1, "agent:coord", "r2", None)
            .await
            .expect("decide");
        assert_eq!(after.proposals[0].status, ProposalStatus::Accepted);
        assert_eq!(ev.kind, "decided");
        step(Change::Block {
            person: "discord:42".into(),
            question: "Which fields matter?".into(),
        })
        .await
        .expect("block");
        id
    };
    // A restart: the goal and its log are as they were.
    let store = h.store().await;
    let (g, _) = goals(store.clone());
    let goal = g.get(&id).await.expect("get");
    assert_eq!(goal.state, GoalState::BlockedOnUser);
    assert_eq!(goal.resume_to, Some(GoalState::Executing));
    assert_eq!(goal.participants.len(), 3);
    assert_eq!(goal.tasks[0].assignee.as_deref(), Some("agent:sales"));
    let events = g.events(&id, 0, 100).await.expect("events");
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "created", "joined", "state", "state", "state", "task", "proposed", "voted", "decided",
            "blocked"
        ]
    );
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
    assert_eq!(goal.events, 10);
    assert_eq!(events[2].reason.as_deref(), Some("on to brainstorm"));
    assert_eq!(events[2].detail["to"], "brainstorm");
    assert_eq!(g.events(&id, 8, 100).await.expect("events").len(), 2);
    let (resumed, _) = g
        .change(
            &id,
            "discord:42",
            Change::Resume {
                reason: "email and phone".into(),
            },
        )
        .await
        .expect("resume");
    assert_eq!(resumed.state, GoalState::Executing);
    assert!(matches!(
        g.get("no-such-goal").await,
        Err(GoalError::NotFound(_))
    ));
    assert_eq!(g.list().await.expect("list").len(), 1);
}
both!(a_goal_keeps_its_life_and_its_log_across_a_restart);

async fn concurrent_changes_from_two_instances_lose_nothing(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    // Two handles on one database: two instances.
    let (a, _) = goals(h.store().await);
    let (b, _) = goals(h.store().await);
    let (a, b) = (Arc::new(a), Arc::new(b));
    let goal = a
        .create("operator", "Prepare the board pack", "", &[])
        .await
        .expect("create");
    let mut tasks = Vec::new();
    for i in 0..20 {
        let g = if i % 2 == 0 { a.clone() } else { b.clone() };
        let id = goal.id.clone();
        tasks.push(tokio::spawn(async move {
            g.change(
                &id,
                "operator",
                Change::AddTask {
                    title: format!("part {i}"),
                    assignee: None,
                    due: None,
                },
            )
            .await
        }));
    }
    for t in tasks {
        t.await.expect("join").expect("change");
    }
    let goal = a.get(&goal.id).await.expect("get");
    let mut ids: Vec<u32> = goal.tasks.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=20).collect::<Vec<u32>>());
    assert_eq!(goal.version, 20);
    let events = b.events(&goal.id, 0, 1000).await.expect("events");
    assert_eq!(events.len(), 21, "one event per saved change");
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=21).collect::<Vec<u64>>()
    );
}
both!(concurrent_changes_from_two_instances_lose_nothing);

async fn a_decision_that_spends_money_waits_for_a_person(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let store = h.store().await;
    let (g, now) = goals(store.clone());
    let mut cfg = Config::default();
    cfg.security.hitl.timeout = 30;
    let hub = Arc::new(Approvals::new(
        store.clone(),
        Arc::new(AccessPolicy::from_config(&cfg)),
    ));
    g.attach_gate(hub);
    let g = Arc::new(g);
    let goal = g
        .create("operator", "Hire a designer", "", &["agent:hr".into()])
        .await
        .expect("create");
    for (title, kind) in [
        ("Pay the agency 2000 EUR", ProposalKind::Spend),
        ("Add a designer to the team", ProposalKind::Team),
    ] {
        g.change(
            &goal.id,
            "agent:hr",
            Change::Propose {
                title: title.into(),
                detail: String::new(),
                kind,
            },
        )
        .await
        .expect("propose");
    }
    now.fetch_add(DAY_MS, Ordering::SeqCst);
    // Approved by a person: decided.
    let (g1, id) = (g.clone(), goal.id.clone());
    let decision =
        tokio::spawn(async move { g1.decide(&id, 1, "agent:hr", "req-1", Some("hr")).await });
    let pending = wait_pending(store.as_ref(), "goal-req-1").await;
    assert_eq!(pending.tool, "goal_decide");
    assert!(
        pending.description.contains("spends money"),
        "{}",
        pending.description
    );
    decide_in(
        store.as_ref(),
        "goal-req-1",
        true,
        &Principal::Operator,
        None,
    )
    .await
    .expect("approve");
    let (after, _) = decision.await.expect("join").expect("decided");
    assert_eq!(after.proposals[0].status, ProposalStatus::Accepted);
    // Refused by a person: still open, and the error says who.
    let (g2, id) = (g.clone(), goal.id.clone());
    let decision =
        tokio::spawn(async move { g2.decide(&id, 2, "agent:hr", "req-2", Some("hr")).await });
    wait_pending(store.as_ref(), "goal-req-2").await;
    decide_in(
        store.as_ref(),
        "goal-req-2",
        false,
        &Principal::Operator,
        Some("not now"),
    )
    .await
    .expect("deny");
    let e = decision
        .await
        .expect("join")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("refused") && e.contains("not now"), "{e}");
    let goal = g.get(&goal.id).await.expect("get");
    assert_eq!(goal.proposals[1].status, ProposalStatus::Open);
}
both!(a_decision_that_spends_money_waits_for_a_person);

async fn wait_pending(
    store: &dyn ApprovalStore,
    id: &str,
) -> strata_runtime::approval::ApprovalRecord {
    for _ in 0..100 {
        if let Ok(Some(r)) = store.get(id).await
            && r.status == ApprovalStatus::Pending
        {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no pending approval {id}");
}

/// A change keeps its call's idempotency key in its event, in the same save: run again after
/// a crash (`resumed`), a change the key already made is returned as it was and not made
/// twice — a task is added once, a goal created once; without `resumed` the key is only kept.
async fn a_keyed_change_run_again_is_not_made_twice(kind: Kind) {
    use strata_runtime::goal::CallKey;
    let Some(h) = Harness::new(kind) else { return };
    let store = h.store().await;
    let (g, _) = goals(store.clone());
    let key = |key, resumed| Some(CallKey { key, resumed });
    let goal = g
        .create_keyed(
            "agent:coord",
            "Ship the app",
            "",
            &[],
            key("k-create", false),
        )
        .await
        .expect("create");
    let again = g
        .create_keyed(
            "agent:coord",
            "Ship the app",
            "",
            &[],
            key("k-create", true),
        )
        .await
        .expect("create again");
    assert_eq!(again.id, goal.id);
    assert_eq!(g.list().await.expect("list").len(), 1);
    let add = || Change::AddTask {
        title: "Write the release notes".into(),
        assignee: None,
        due: None,
    };
    let (after, ev) = g
        .change_keyed(&goal.id, "agent:coord", add(), key("k-task", false))
        .await
        .expect("add");
    assert_eq!(ev.detail["idempotency_key"], "k-task");
    let (again, ev2) = g
        .change_keyed(&goal.id, "agent:coord", add(), key("k-task", true))
        .await
        .expect("add again");
    assert_eq!((ev2.seq, again.tasks.len()), (ev.seq, 1));
    assert_eq!(again.version, after.version, "nothing saved");
    // Another key is another change, resumed or not.
    let (more, _) = g
        .change_keyed(&goal.id, "agent:coord", add(), key("k-task-2", true))
        .await
        .expect("another");
    assert_eq!(more.tasks.len(), 2);
    // A decision made under a key, run again: the first decision, not a second.
    let (_, proposed) = g
        .change_keyed(
            &goal.id,
            "agent:coord",
            Change::Propose {
                title: "Ship on Friday".into(),
                detail: String::new(),
                kind: ProposalKind::Plan,
            },
            key("k-propose", false),
        )
        .await
        .expect("propose");
    let number = proposed.detail["proposal"].as_u64().expect("number") as u32;
    let (_, vote) = g
        .change_keyed(
            &goal.id,
            "agent:coord",
            Change::Vote {
                proposal: number,
                choice: Choice::Yes,
                reason: None,
            },
            None,
        )
        .await
        .expect("vote");
    assert_eq!(vote.kind, "voted");
    let (_, decided) = g
        .decide_keyed(
            &goal.id,
            number,
            "agent:coord",
            "r-k",
            None,
            key("k-decide", false),
        )
        .await
        .expect("decide");
    let (_, again) = g
        .decide_keyed(
            &goal.id,
            number,
            "agent:coord",
            "r-k",
            None,
            key("k-decide", true),
        )
        .await
        .expect("decide again");
    assert_eq!(again.seq, decided.seq, "the first decision");
    // Still there for another instance over the same store.
    let (g2, _) = goals(h.store().await);
    let (seen, ev3) = g2
        .change_keyed(&goal.id, "agent:coord", add(), key("k-task", true))
        .await
        .expect("from another instance");
    assert_eq!((ev3.seq, seen.tasks.len()), (ev.seq, 2));
}

both!(a_keyed_change_run_again_is_not_made_twice);
