//! Rate-limit counters and approval requests survive a restart of the process.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use strata_engine::Principal;
use strata_engine::access::AccessPolicy;
use strata_engine::approval::{
    ApprovalRecord, ApprovalStatus, ApprovalStore, Approvals, decide_in, now_secs,
};
use strata_engine::config::{Config, Limits, RateLimitsConfig};
use strata_engine::ratelimit::{RateLimiter, RateLog, RateVerdict};
use strata_store::SqliteStore;

#[tokio::test]
async fn rate_limit_counters_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("strata.db");
    let cfg = RateLimitsConfig {
        defaults: Limits {
            per_hour: Some(3),
            ..Default::default()
        },
        ..Default::default()
    };
    {
        let store = Arc::new(SqliteStore::open(&path).expect("open"));
        let limiter = RateLimiter::new(cfg.clone(), Some(store.clone() as Arc<dyn RateLog>));
        for _ in 0..3 {
            assert_eq!(
                limiter.check("agent:main", Some("main"), "fetch"),
                RateVerdict::Ok
            );
        }
        store.flush().await.expect("flush");
    }
    // A new process: the three calls of the last hour are still counted.
    let store = Arc::new(SqliteStore::open(&path).expect("reopen"));
    let limiter = RateLimiter::new(cfg, Some(store.clone() as Arc<dyn RateLog>));
    match limiter.check("agent:main", Some("main"), "fetch") {
        RateVerdict::Refuse(e) => assert_eq!((e.window, e.count, e.limit), ("hour", 4, 3)),
        other => panic!("expected a refusal after restart, got {other:?}"),
    }
    assert_eq!(
        limiter.check("agent:other", Some("other"), "fetch"),
        RateVerdict::Ok
    );
}

fn record(id: &str, created_at: i64) -> ApprovalRecord {
    ApprovalRecord {
        id: id.into(),
        agent_id: Some("main".into()),
        tool: "deploy".into(),
        principal: "person:adam".into(),
        args: json!({"env": "prod", "token": "[redacted]"}),
        description: "agent `main` (for person:adam) wants to run `deploy`".into(),
        status: ApprovalStatus::Pending,
        approver: None,
        reason: None,
        created_at,
        decided_at: None,
    }
}

#[tokio::test]
async fn approvals_survive_a_restart_and_stale_ones_time_out() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("strata.db");
    {
        let s = SqliteStore::open(&path).expect("open");
        s.insert(&record("fresh", now_secs()))
            .await
            .expect("insert");
        s.insert(&record("stale", now_secs() - 7200))
            .await
            .expect("insert");
        s.insert(&record("done", now_secs() - 10))
            .await
            .expect("insert");
        decide_in(&s, "done", true, &Principal::Operator, Some("fine"))
            .await
            .expect("decide");
    }
    let s = Arc::new(SqliteStore::open(&path).expect("reopen"));
    let mut cfg = Config::default();
    cfg.security.hitl.timeout = 1800;
    let approvals = Approvals::new(s.clone(), Arc::new(AccessPolicy::from_config(&cfg)));
    // At start, pending requests older than the timeout become `timeout`.
    assert_eq!(approvals.sweep().await, Ok(1));
    let pending = s
        .list(Some(ApprovalStatus::Pending), 10)
        .await
        .expect("list");
    assert_eq!(pending.len(), 1);
    let fresh = &pending[0];
    assert_eq!(fresh.id, "fresh");
    assert_eq!(fresh.args["env"], "prod");
    assert_eq!(
        s.get("stale").await.expect("get").map(|r| r.status),
        Some(ApprovalStatus::Timeout)
    );
    let done = s.get("done").await.expect("get").expect("row");
    assert_eq!(
        (
            done.status,
            done.approver.as_deref(),
            done.reason.as_deref()
        ),
        (ApprovalStatus::Approved, Some("operator"), Some("fine"))
    );
    // Only a pending request can be decided, once.
    assert_eq!(
        s.decide("done", ApprovalStatus::Denied, None, None, now_secs())
            .await,
        Ok(false)
    );
    assert_eq!(s.list(None, 2).await.expect("list").len(), 2);
}

#[tokio::test]
async fn a_decision_written_by_another_process_reaches_the_waiter() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("strata.db");
    let s = Arc::new(SqliteStore::open(&path).expect("open"));
    let approvals = Arc::new(Approvals::new(
        s.clone(),
        Arc::new(AccessPolicy::from_config(&Config::default())),
    ));
    let a2 = approvals.clone();
    let waiter = tokio::spawn(async move { a2.request(record("x1", now_secs())).await });
    // `strata approvals approve` without --remote: its own connection to the same file.
    let other = SqliteStore::open(&path).expect("second connection");
    let mut decided = false;
    for _ in 0..100 {
        if decide_in(&other, "x1", true, &Principal::Operator, None)
            .await
            .is_ok()
        {
            decided = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(decided, "the request never appeared in the database");
    let outcome = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter notices within its poll interval")
        .expect("join");
    assert_eq!(
        outcome,
        strata_engine::approval::ApprovalOutcome::Approved {
            by: "operator".into()
        }
    );
}
