//! Human approval through the Invoker: approve, deny, timeout, non-approvers, fail modes, and
//! rate limits as a pipeline stage.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use strata_engine::audit::NoAudit;
use strata_engine::config::{Access, Config, FailMode, Limits, Person};
use strata_engine::{Env, Principal, ToolOutput, ToolSpec};
use strata_runtime::approval::{ApprovalStatus, Approvals, DecideError, MemoryApprovalStore};
use strata_runtime::{Invocation, Invoker, Registry, Status};

struct Setup {
    invoker: Arc<Invoker>,
    approvals: Arc<Approvals>,
    runs: Arc<AtomicUsize>,
}

fn setup(tweak: impl FnOnce(&mut Config), timeout: Duration, with_channel: bool) -> Setup {
    let mut c = Config::default();
    c.team.people = vec![
        Person {
            id: "olivia".into(),
            name: "Owner Example".into(),
            access: Access::Owner,
            contacts: Default::default(),
            budget: None,
            role: None,
            timezone: None,
        },
        Person {
            id: "adam".into(),
            name: "Admin Example".into(),
            access: Access::Admin,
            contacts: Default::default(),
            budget: None,
            role: None,
            timezone: None,
        },
    ];
    tweak(&mut c);
    let dir = std::env::temp_dir();
    let env = Arc::new(Env::new(c, dir.clone(), dir.join("data")));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let runs = Arc::new(AtomicUsize::new(0));
    let r2 = runs.clone();
    let mut gated = ToolSpec::new("launch", "gated test tool", json!({"type": "object"}));
    gated.hitl = true;
    reg.register(gated, move |_, _| {
        let r = r2.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput(json!("launched")))
        }
    })
    .expect("register");
    let mut inv = Invoker::new(reg, env, Arc::new(NoAudit));
    let approvals = Arc::new(
        Approvals::new(
            Arc::new(MemoryApprovalStore::default()),
            inv.policy().clone(),
        )
        .with_timeout(timeout),
    );
    if with_channel {
        inv = inv.with_approvals(approvals.clone());
    }
    Setup {
        invoker: Arc::new(inv),
        approvals,
        runs,
    }
}

fn call(who: &str) -> Invocation {
    Invocation::new(
        "launch",
        json!({"target": "moon", "password": "hunter2"}),
        Principal::Person { id: who.into() },
    )
}

/// Waits until one request is pending and returns its id.
async fn pending_id(a: &Approvals) -> String {
    for _ in 0..200 {
        let l = a
            .store()
            .list(Some(ApprovalStatus::Pending), 10)
            .await
            .expect("list");
        if let Some(r) = l.first() {
            return r.id.clone();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no pending request appeared");
}

#[tokio::test]
async fn approved_calls_run_and_denied_ones_do_not() {
    let s = setup(|_| {}, Duration::from_secs(30), true);
    let inv = s.invoker.clone();
    let task = tokio::spawn(async move { inv.invoke(call("adam")).await });
    let id = pending_id(&s.approvals).await;
    let rec = s
        .approvals
        .store()
        .get(&id)
        .await
        .expect("get")
        .expect("record");
    // The request is described for people, with secrets redacted.
    assert_eq!(rec.args["password"], "[redacted]");
    assert!(
        rec.description.contains("`launch`") && rec.description.contains("moon"),
        "{}",
        rec.description
    );
    assert_eq!(s.runs.load(Ordering::SeqCst), 0, "the tool must wait");
    let owner = Principal::Person {
        id: "olivia".into(),
    };
    s.approvals
        .decide(&id, true, &owner, None)
        .await
        .expect("decide");
    let r = task.await.expect("join");
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
    // Deciding twice is refused.
    let again = s.approvals.decide(&id, false, &owner, None).await;
    assert!(
        matches!(again, Err(DecideError::NotPending { .. })),
        "{again:?}"
    );

    let inv = s.invoker.clone();
    let task = tokio::spawn(async move { inv.invoke(call("adam")).await });
    let id = pending_id(&s.approvals).await;
    s.approvals
        .decide(&id, false, &owner, Some("not today"))
        .await
        .expect("decide");
    let r = task.await.expect("join");
    assert_eq!(r.status, Status::ApprovalDenied);
    let msg = r.error.unwrap_or_default();
    assert!(
        msg.contains("not today") && msg.contains("did not run"),
        "{msg}"
    );
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn only_approvers_decide() {
    // Empty list: owners only. The admin who asked cannot approve their own call.
    let s = setup(|_| {}, Duration::from_secs(30), true);
    let inv = s.invoker.clone();
    let task = tokio::spawn(async move { inv.invoke(call("adam")).await });
    let id = pending_id(&s.approvals).await;
    let admin = Principal::Person { id: "adam".into() };
    let r = s.approvals.decide(&id, true, &admin, None).await;
    assert!(matches!(r, Err(DecideError::NotApprover(_))), "{r:?}");
    let stranger = Principal::Person { id: "x".into() };
    assert!(
        s.approvals
            .decide(&id, true, &stranger, None)
            .await
            .is_err()
    );
    // A listed approver may, even when not an owner.
    let s2 = setup(
        |c| c.security.hitl.approvers = vec!["adam".into()],
        Duration::from_secs(30),
        true,
    );
    assert!(s2.approvals.policy().may_approve(&admin));
    assert!(!s2.approvals.policy().may_approve(&Principal::Person {
        id: "olivia".into()
    }));
    assert!(s2.approvals.policy().may_approve(&Principal::Token {
        name: "adam".into(),
        tier: Access::Staff
    }));
    // Clean up the first waiter.
    let owner = Principal::Person {
        id: "olivia".into(),
    };
    s.approvals
        .decide(&id, false, &owner, None)
        .await
        .expect("decide");
    assert_eq!(task.await.expect("join").status, Status::ApprovalDenied);
}

#[tokio::test]
async fn timeouts_fail_closed_unless_open_is_configured() {
    let s = setup(|_| {}, Duration::from_millis(300), true);
    let r = s.invoker.invoke(call("olivia")).await;
    assert_eq!(r.status, Status::ApprovalDenied);
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.contains("nobody approved")),
        "{r:?}"
    );
    assert_eq!(s.runs.load(Ordering::SeqCst), 0);
    let rows = s.approvals.store().list(None, 10).await.expect("list");
    assert_eq!(rows[0].status, ApprovalStatus::Timeout);

    let s = setup(
        |c| c.security.hitl.fail_mode = FailMode::Open,
        Duration::from_millis(300),
        true,
    );
    let r = s.invoker.invoke(call("olivia")).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn without_an_approval_channel_gated_calls_are_refused() {
    let s = setup(|_| {}, Duration::from_secs(1), false);
    let r = s.invoker.invoke(call("olivia")).await;
    assert_eq!(r.status, Status::ApprovalDenied);
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.contains("no approval channel")),
        "{r:?}"
    );
    assert_eq!(s.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn sweep_times_out_stale_requests() {
    let s = setup(|_| {}, Duration::from_secs(60), true);
    let store = s.approvals.store();
    let old = strata_runtime::approval::ApprovalRecord {
        id: "old".into(),
        agent_id: None,
        tool: "launch".into(),
        principal: "operator".into(),
        args: json!({}),
        description: "d".into(),
        status: ApprovalStatus::Pending,
        approver: None,
        reason: None,
        created_at: strata_runtime::approval::now_secs() - 3600,
        decided_at: None,
    };
    store.insert(&old).await.expect("insert");
    store
        .insert(&strata_runtime::approval::ApprovalRecord {
            id: "new".into(),
            created_at: strata_runtime::approval::now_secs(),
            ..old.clone()
        })
        .await
        .expect("insert");
    assert_eq!(s.approvals.sweep().await, Ok(1));
    let get =
        |id: &'static str| async move { store.get(id).await.ok().flatten().map(|r| r.status) };
    assert_eq!(get("old").await, Some(ApprovalStatus::Timeout));
    assert_eq!(get("new").await, Some(ApprovalStatus::Pending));
}

#[tokio::test]
async fn rate_limits_refuse_with_window_count_and_limit_and_count_failures() {
    let s = setup(
        |c| {
            c.security.rate_limits.defaults = Limits {
                per_minute: Some(2),
                ..Default::default()
            };
            c.security.hitl.owner_bypass = true;
        },
        Duration::from_secs(1),
        true,
    );
    for _ in 0..2 {
        assert_eq!(s.invoker.invoke(call("olivia")).await.status, Status::Ok);
    }
    let r = s.invoker.invoke(call("olivia")).await;
    assert_eq!(r.status, Status::RateLimited);
    let e = r.error.unwrap_or_default();
    assert!(e.contains("3 calls in the last minute (limit 2)"), "{e}");
    assert!(e.contains("person:olivia"), "{e}");
    assert_eq!(s.runs.load(Ordering::SeqCst), 2);
    // Another principal has its own window; failed runs count in it (recorded before the
    // tool runs): `fails` (a test tool that always errors) twice, then refused.
    let op = || Invocation::new("fails", json!({}), Principal::Operator);
    assert_eq!(s.invoker.invoke(op()).await.status, Status::Error);
    assert_eq!(s.invoker.invoke(op()).await.status, Status::Error);
    assert_eq!(s.invoker.invoke(op()).await.status, Status::RateLimited);
}
