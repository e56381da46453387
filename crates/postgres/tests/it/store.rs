//! The state store's conformance suite: sessions and their tool log, approvals and rate-limit
//! counters, each test run against SQLite and PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use strata_engine::Principal;
use strata_engine::access::AccessPolicy;
use strata_engine::config::{Config, Limits, RateLimitsConfig};
use strata_engine::llm::{ChatMessage, Role, ToolCall};
use strata_engine::session::{SessionKey, ToolLogEntry};
use strata_runtime::approval::{ApprovalRecord, ApprovalStatus, Approvals, decide_in, now_secs};
use strata_runtime::ratelimit::{RateEvent, RateLimiter, RateLog, RateVerdict};

use crate::both;
use crate::harness::{Harness, Kind};

fn turn(user: &str, answer: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::text(Role::User, user),
        ChatMessage {
            role: Role::Assistant,
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: json!({"path": "a"}),
            }],
            tool_call_id: None,
        },
        ChatMessage {
            role: Role::Tool,
            content: "file text".into(),
            tool_calls: vec![],
            tool_call_id: Some("c1".into()),
        },
        ChatMessage::text(Role::Assistant, answer),
    ]
}

async fn history_survives_a_restart(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let key = SessionKey::new("main", "cli");
    {
        let s = h.store().await;
        s.append_turn(
            &key,
            &turn("one", "first"),
            Some(&json!({"cli_session": "abc"})),
        )
        .await
        .expect("append");
        s.append_turn(&key, &turn("two", "second"), None)
            .await
            .expect("append");
        s.flush().await.expect("flush");
    }
    let s = h.store().await;
    let st = s.status().await.expect("status");
    assert_eq!(st.schema_version, st.known_version);
    let state = s.load(&key).await.expect("load").expect("exists");
    assert_eq!(state.messages.len(), 8);
    assert_eq!(
        state.messages[1].tool_calls[0].arguments,
        json!({"path": "a"})
    );
    assert_eq!(state.messages[2].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(state.messages[7].content, "second");
    assert_eq!(state.turns_since_summary, 2);
    assert_eq!(
        state.provider_state, None,
        "the last turn's provider state wins"
    );
    assert!(
        s.load(&SessionKey::new("main", "other"))
            .await
            .expect("load")
            .is_none()
    );
}
both!(history_survives_a_restart);

/// The dashboard's Sessions page: a listing by part of an id (any case, `%` and `_`
/// literal), most recently active first, and a transcript with each turn's time.
async fn sessions_are_listed_and_transcribed(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let s = h.store().await;
    for (agent, session) in [("main", "web-1"), ("main", "web_2"), ("ops", "Alerts")] {
        s.append_turn(&SessionKey::new(agent, session), &turn("q", "a"), None)
            .await
            .expect("append");
        // Whole seconds: the listing's order is by the last turn's second.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    s.append_turn(&SessionKey::new("main", "web-1"), &turn("again", "b"), None)
        .await
        .expect("append");
    s.flush().await.expect("flush");
    let ids = |v: Vec<strata_engine::session::SessionInfo>| {
        v.into_iter()
            .map(|i| format!("{}/{}/{}", i.agent_id, i.session_id, i.turns))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(s.list_sessions("", 10).await.expect("list")),
        ["main/web-1/2", "ops/Alerts/1", "main/web_2/1"]
    );
    assert_eq!(
        ids(s.list_sessions("ALERT", 10).await.expect("list")),
        ["ops/Alerts/1"]
    );
    assert_eq!(
        ids(s.list_sessions("b_", 10).await.expect("list")),
        ["main/web_2/1"]
    );
    assert!(s.list_sessions("%", 10).await.expect("list").is_empty());
    assert_eq!(s.list_sessions("", 1).await.expect("list").len(), 1);
    let (summary, turns) = s
        .transcript(&SessionKey::new("main", "web-1"))
        .await
        .expect("transcript")
        .expect("exists");
    assert_eq!(summary, None);
    assert_eq!(turns.len(), 2);
    assert!(turns[0].at > 1_700_000_000 && turns[1].at >= turns[0].at);
    assert_eq!(turns[1].messages[0].content, "again");
    assert!(
        s.transcript(&SessionKey::new("main", "nobody"))
            .await
            .expect("transcript")
            .is_none()
    );
}
both!(sessions_are_listed_and_transcribed);

async fn compaction_keeps_the_newest_messages(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let s = h.store().await;
    let key = SessionKey::new("a", "s");
    for i in 0..3 {
        s.append_turn(&key, &turn(&format!("u{i}"), &format!("a{i}")), None)
            .await
            .expect("append");
    }
    // Keep falls inside the second turn: its last two messages survive.
    s.compact(&key, "they talked", 6).await.expect("compact");
    let st = s.load(&key).await.expect("load").expect("exists");
    assert_eq!(st.summary.as_deref(), Some("they talked"));
    assert_eq!(st.turns_since_summary, 0);
    assert_eq!(st.messages.len(), 6);
    assert_eq!(st.messages[0].role, Role::Tool);
    assert_eq!(st.messages[1].content, "a1");
    assert_eq!(st.messages[2].content, "u2");
    // On a turn boundary: whole turns only.
    s.compact(&key, "shorter", 4).await.expect("compact");
    let st = s.load(&key).await.expect("load").expect("exists");
    assert_eq!(st.messages.len(), 4);
    assert_eq!(st.messages[0].content, "u2");
    // A later turn still appends after the kept ones.
    s.append_turn(&key, &turn("u3", "a3"), None)
        .await
        .expect("append");
    let st = s.load(&key).await.expect("load").expect("exists");
    assert_eq!(st.messages.len(), 8);
    assert_eq!(st.messages[4].content, "u3");
    // Compacting a session that does not exist changes nothing and is no error.
    s.compact(&SessionKey::new("a", "none"), "x", 2)
        .await
        .expect("compact nothing");
}
both!(compaction_keeps_the_newest_messages);

async fn reset_prune_count_and_tool_log(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let s = h.store().await;
    let (k1, k2) = (SessionKey::new("a", "1"), SessionKey::new("a", "2"));
    s.append_turn(&k1, &turn("x", "y"), None)
        .await
        .expect("append");
    s.record_turn(
        &k2,
        &turn("x", "y"),
        None,
        &[ToolLogEntry {
            key: k2.clone(),
            tool: "t".into(),
            status: "ok".into(),
            elapsed_ms: 1.5,
            request_id: "r".into(),
        }],
    )
    .await
    .expect("record");
    assert_eq!(s.count().await.expect("count"), 2);
    s.reset(&k1).await.expect("reset");
    assert!(s.load(&k1).await.expect("load").is_none());
    s.log_tools(&[ToolLogEntry {
        key: k2.clone(),
        tool: "u".into(),
        status: "error".into(),
        elapsed_ms: 2.0,
        request_id: "r2".into(),
    }])
    .await
    .expect("log");
    s.flush().await.expect("flush");
    assert_eq!(h.count("tool_log", "request_id IN ('r', 'r2')").await, 2);
    assert_eq!(
        h.count("tool_log", "tool = 'u' AND status = 'error'").await,
        1
    );

    assert_eq!(s.prune(Duration::from_secs(3600)).await.expect("prune"), 0);
    // Timestamps have one-second resolution: wait past it, then prune everything idle.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(s.prune(Duration::ZERO).await.expect("prune"), 1);
    assert_eq!(s.count().await.expect("count"), 0);
    assert_eq!(
        h.count("turns", "1 = 1").await,
        0,
        "turns go with their session"
    );
}
both!(reset_prune_count_and_tool_log);

async fn concurrent_writers_lose_nothing(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let s = h.store().await;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..200 {
        let s = s.clone();
        set.spawn(async move {
            let key = SessionKey::new("a", format!("s{}", i % 50));
            s.append_turn(&key, &turn(&format!("u{i}"), &format!("a{i}")), None)
                .await
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("join").expect("append");
    }
    assert_eq!(s.count().await.expect("count"), 50);
    let mut total = 0;
    for k in 0..50 {
        let st = s
            .load(&SessionKey::new("a", format!("s{k}")))
            .await
            .expect("load")
            .expect("exists");
        assert_eq!(st.turns_since_summary, 4);
        total += st.messages.len();
    }
    assert_eq!(total, 200 * 4);
}
both!(concurrent_writers_lose_nothing);

/// Many sessions read at once (PostgreSQL answers them in one statement): each reader gets
/// its own session's turns in order, and a session never stored is `None`.
async fn concurrent_readers_get_their_own_sessions(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let s = h.store().await;
    for k in 0..40 {
        let key = SessionKey::new("a", format!("s{k}"));
        for t in 0..=(k % 3) {
            s.append_turn(
                &key,
                &turn(&format!("u{k}.{t}"), &format!("a{k}.{t}")),
                None,
            )
            .await
            .expect("append");
        }
    }
    let mut set = tokio::task::JoinSet::new();
    for k in 0..60 {
        let s = s.clone();
        set.spawn(async move { (k, s.load(&SessionKey::new("a", format!("s{k}"))).await) });
    }
    while let Some(r) = set.join_next().await {
        let (k, loaded) = r.expect("join");
        let loaded = loaded.expect("load");
        if k >= 40 {
            assert!(loaded.is_none(), "s{k} was never stored");
            continue;
        }
        let st = loaded.expect("stored");
        let said: Vec<&str> = st.messages.iter().map(|m| m.content.as_str()).collect();
        let want: Vec<String> = (0..=(k % 3))
            .flat_map(|t| turn(&format!("u{k}.{t}"), &format!("a{k}.{t}")))
            .map(|m| m.content)
            .collect();
        assert_eq!(said, want, "s{k}");
        assert_eq!(st.turns_since_summary, k % 3 + 1, "s{k}");
    }
}
both!(concurrent_readers_get_their_own_sessions);

/// Answers with the number of messages it was shown.
struct Counter;

#[strata_engine::async_trait]
impl strata_engine::agent::Agent for Counter {
    fn id(&self) -> &str {
        "counter"
    }
    async fn handle(
        &self,
        turn: strata_engine::agent::TurnContext,
        input: strata_engine::agent::Message,
    ) -> Result<strata_engine::agent::Reply, strata_engine::agent::AgentError> {
        let text = format!("seen {} earlier messages", turn.history.len());
        let mut r = strata_engine::agent::Reply::text(text.clone());
        r.transcript = vec![
            ChatMessage::text(Role::User, input.text),
            ChatMessage::text(Role::Assistant, text),
        ];
        Ok(r)
    }
}

async fn a_restarted_runtime_resumes_every_session(kind: Kind) {
    use strata_engine::turns::TurnRequest;
    use strata_runtime::manager::AgentManager;
    let Some(h) = Harness::new(kind) else { return };
    let env = Arc::new(strata_engine::Env::new(
        Config::default(),
        h.dir.path().to_path_buf(),
        h.dir.path().join("data"),
    ));
    let req = |session: &str| TurnRequest {
        agent_id: "counter".into(),
        session_id: session.into(),
        stream: None,
        scopes: Vec::new(),
        channel_kind: None,
        channel_id: session.into(),
        sender: Principal::Operator,
        message: strata_engine::agent::Message::text("hi"),
        depth: 0,
        taint: None,
        turn_id: None,
    };
    {
        let store = h.store().await;
        let m = AgentManager::new(vec![Arc::new(Counter)], store.clone(), env.clone());
        assert_eq!(
            m.turn(req("a")).await.expect("t1").text,
            "seen 0 earlier messages"
        );
        assert_eq!(
            m.turn(req("a")).await.expect("t2").text,
            "seen 2 earlier messages"
        );
        assert_eq!(
            m.turn(req("b")).await.expect("t1b").text,
            "seen 0 earlier messages"
        );
        store.flush().await.expect("flush");
    }
    let m = AgentManager::new(vec![Arc::new(Counter)], h.store().await, env);
    assert_eq!(
        m.turn(req("a")).await.expect("t3").text,
        "seen 4 earlier messages"
    );
    assert_eq!(
        m.turn(req("b")).await.expect("t2b").text,
        "seen 2 earlier messages"
    );
}
both!(a_restarted_runtime_resumes_every_session);

async fn rate_limit_counters_survive_a_restart(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let cfg = RateLimitsConfig {
        defaults: Limits {
            per_hour: Some(3),
            ..Default::default()
        },
        ..Default::default()
    };
    {
        let store = h.store().await;
        let limiter = RateLimiter::new(cfg.clone(), Some(store.clone() as Arc<dyn RateLog>));
        for _ in 0..3 {
            assert_eq!(
                limiter.check("agent:main", Some("main"), "fetch").await,
                RateVerdict::Ok
            );
        }
        store.flush().await.expect("flush");
    }
    // A new process: the three calls of the last hour are still counted.
    let store = h.store().await;
    let limiter = RateLimiter::new(cfg, Some(store.clone() as Arc<dyn RateLog>));
    match limiter.check("agent:main", Some("main"), "fetch").await {
        RateVerdict::Refuse(e) => assert_eq!((e.window, e.count, e.limit), ("hour", 4, 3)),
        other => panic!("expected a refusal after restart, got {other:?}"),
    }
    assert_eq!(
        limiter.check("agent:other", Some("other"), "fetch").await,
        RateVerdict::Ok
    );
}
both!(rate_limit_counters_survive_a_restart);

/// `record` counts the windows with the new event included, per key and tool, and only
/// events inside each window; it names each window's oldest event, and an event over a cap is
/// counted in the answer but not recorded.
async fn recorded_events_are_counted_per_window(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let s = h.store().await;
    let t0 = now_secs() * 1000;
    let ev = |key: &str, tool: &str, ts_ms: i64| RateEvent {
        key: key.into(),
        tool: tool.into(),
        ts_ms,
    };
    let counts = |r: Result<strata_runtime::ratelimit::RateCounts, _>| r.map(|c| c.counts);
    let none = [None; 3];
    assert_eq!(
        counts(s.record(ev("k", "t", t0 - 2 * 3_600_000), none).await),
        Ok([1, 1, 1])
    );
    assert_eq!(
        counts(s.record(ev("k", "t", t0 - 120_000), none).await),
        Ok([1, 1, 2])
    );
    assert_eq!(
        counts(s.record(ev("k", "t", t0), none).await),
        Ok([1, 2, 3])
    );
    let seen = s.record(ev("k", "t", t0 + 1), none).await.expect("record");
    assert_eq!(seen.counts, [2, 3, 4]);
    assert_eq!(
        seen.oldest,
        [Some(t0), Some(t0 - 120_000), Some(t0 - 2 * 3_600_000)]
    );
    assert_eq!(
        counts(s.record(ev("k", "other", t0 + 2), none).await),
        Ok([1, 1, 1])
    );
    assert_eq!(
        counts(s.record(ev("j", "t", t0 + 3), none).await),
        Ok([1, 1, 1])
    );
    // Over a cap of 2 a minute: answered with the count, not recorded — twice.
    let capped = [Some(2), None, None];
    for _ in 0..2 {
        assert_eq!(
            counts(s.record(ev("k", "t", t0 + 4), capped).await),
            Ok([3, 4, 5])
        );
    }
    let mut loaded = s.load_since(t0 - 3_600_000).await.expect("load");
    loaded.sort_by_key(|e| e.ts_ms);
    assert_eq!(loaded.len(), 5, "{loaded:?}");
    assert_eq!(loaded[0], ev("k", "t", t0 - 120_000));
}
both!(recorded_events_are_counted_per_window);

/// Many concurrent checks against a shared limit: exactly the limit pass.
async fn concurrent_checks_never_overshoot_a_shared_limit(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let s = h.store().await;
    if !s.shared() {
        // A local log counts in memory; its limiter is tested in the engine.
        return;
    }
    let cfg = RateLimitsConfig {
        defaults: Limits {
            per_minute: Some(10),
            ..Default::default()
        },
        ..Default::default()
    };
    // Two limiters on two pools: two processes.
    let a = Arc::new(RateLimiter::new(cfg.clone(), Some(s as Arc<dyn RateLog>)));
    let b = Arc::new(RateLimiter::new(
        cfg,
        Some(h.store().await as Arc<dyn RateLog>),
    ));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..30 {
        let l = if i % 2 == 0 { a.clone() } else { b.clone() };
        set.spawn(async move { l.check("agent:x", Some("x"), "t").await });
    }
    let mut ok = 0;
    while let Some(r) = set.join_next().await {
        match r.expect("join") {
            RateVerdict::Ok => ok += 1,
            RateVerdict::Refuse(_) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ok, 10);
}
both!(concurrent_checks_never_overshoot_a_shared_limit);

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

async fn approvals_survive_a_restart_and_stale_ones_time_out(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    {
        let s = h.store().await;
        s.insert(&record("fresh", now_secs()))
            .await
            .expect("insert");
        s.insert(&record("stale", now_secs() - 7200))
            .await
            .expect("insert");
        s.insert(&record("done", now_secs() - 10))
            .await
            .expect("insert");
        decide_in(s.as_ref(), "done", true, &Principal::Operator, Some("fine"))
            .await
            .expect("decide");
        // The same id twice is an error, and the first stays.
        assert!(s.insert(&record("done", now_secs())).await.is_err());
    }
    let s = h.store().await;
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
    // Newest first.
    let ids: Vec<String> = s
        .list(None, 10)
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, ["fresh", "done", "stale"]);
    assert_eq!(s.list(None, 2).await.expect("list").len(), 2);
    assert_eq!(s.get("nothing").await, Ok(None));
}
both!(approvals_survive_a_restart_and_stale_ones_time_out);

async fn a_decision_written_by_another_process_reaches_the_waiter(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let s = h.store().await;
    let approvals = Arc::new(Approvals::new(
        s.clone(),
        Arc::new(AccessPolicy::from_config(&Config::default())),
    ));
    let a2 = approvals.clone();
    let waiter = tokio::spawn(async move { a2.request(record("x1", now_secs())).await });
    // `strata approvals approve` without --remote: its own connection.
    let other = h.store().await;
    let mut decided = false;
    for _ in 0..100 {
        if decide_in(other.as_ref(), "x1", true, &Principal::Operator, None)
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
        strata_runtime::approval::ApprovalOutcome::Approved {
            by: "operator".into()
        }
    );
}
both!(a_decision_written_by_another_process_reaches_the_waiter);

/// What has tainted a session is kept by the store: a restart still knows a message came
/// from an untrusted sender, which the history alone does not show.
async fn session_taint_survives_a_restart(kind: Kind) {
    use strata_engine::taint::{TaintKind, TaintSource};
    let Some(h) = Harness::new(kind) else { return };
    let key = SessionKey::new("main", "tainted");
    let sources = vec![
        TaintSource {
            kind: TaintKind::Message,
            tool: None,
            detail: "discord:999 (unknown)".into(),
        },
        TaintSource::tool("read_url", &json!({"url": "https://example.test/x"})),
    ];
    {
        let s = h.store().await;
        s.append_turn(&key, &turn("hi", "hello"), None)
            .await
            .expect("append");
        s.set_taint(&key, &sources).await.expect("taint");
        s.flush().await.expect("flush");
    }
    let s = h.store().await;
    let st = s.load(&key).await.expect("load").expect("exists");
    assert_eq!(st.taint, sources);
    // A session nobody tainted has none; setting taint on a missing session is no error.
    s.append_turn(&SessionKey::new("main", "clean"), &turn("a", "b"), None)
        .await
        .expect("append");
    let clean = s
        .load(&SessionKey::new("main", "clean"))
        .await
        .expect("load")
        .expect("exists");
    assert!(clean.taint.is_empty());
    s.set_taint(&SessionKey::new("main", "none"), &sources)
        .await
        .expect("no session, no error");
}
both!(session_taint_survives_a_restart);

/// Says whether its turn started tainted; a message "untrusted" taints the turn as a
/// message from an untrusted sender does.
struct Marker;

#[strata_engine::async_trait]
impl strata_engine::agent::Agent for Marker {
    fn id(&self) -> &str {
        "marker"
    }
    async fn handle(
        &self,
        turn: strata_engine::agent::TurnContext,
        input: strata_engine::agent::Message,
    ) -> Result<strata_engine::agent::Reply, strata_engine::agent::AgentError> {
        let text = if turn.taint.is_tainted() {
            "tainted"
        } else {
            "clean"
        };
        if input.text == "untrusted" {
            turn.taint.mark(strata_engine::taint::TaintSource {
                kind: strata_engine::taint::TaintKind::Message,
                tool: None,
                detail: "discord:999 (unknown)".into(),
            });
        }
        let mut r = strata_engine::agent::Reply::text(text);
        r.transcript = vec![
            ChatMessage::text(Role::User, input.text),
            ChatMessage::text(Role::Assistant, text),
        ];
        Ok(r)
    }
}

/// Through the session manager: a turn an untrusted sender tainted leaves the session
/// tainted after a restart (before the store kept taint, only source tools' results in the
/// history re-tainted it; a sender's message did not).
async fn a_senders_taint_outlives_a_restart(kind: Kind) {
    use strata_engine::turns::TurnRequest;
    use strata_runtime::manager::AgentManager;
    let Some(h) = Harness::new(kind) else { return };
    let env = Arc::new(strata_engine::Env::new(
        Config::default(),
        h.dir.path().to_path_buf(),
        h.dir.path().join("data"),
    ));
    let req = |text: &str| TurnRequest {
        agent_id: "marker".into(),
        session_id: "s".into(),
        stream: None,
        scopes: Vec::new(),
        channel_kind: None,
        channel_id: "s".into(),
        sender: Principal::Operator,
        message: strata_engine::agent::Message::text(text),
        depth: 0,
        taint: None,
        turn_id: None,
    };
    {
        let store = h.store().await;
        let m = AgentManager::new(vec![Arc::new(Marker)], store.clone(), env.clone());
        assert_eq!(m.turn(req("untrusted")).await.expect("t1").text, "clean");
        assert_eq!(m.turn(req("next")).await.expect("t2").text, "tainted");
        store.flush().await.expect("flush");
    }
    let m = AgentManager::new(vec![Arc::new(Marker)], h.store().await, env);
    assert_eq!(
        m.turn(req("after restart")).await.expect("t3").text,
        "tainted"
    );
}
both!(a_senders_taint_outlives_a_restart);

/// Schedules' state and runs: of many instances claiming one due time at once exactly one
/// gets it; a claim still running past its time is taken again, a finished one never; a
/// pause or a "run now" changes only what it names; history newest first; all of it kept
/// across a restart.
async fn schedules_claim_once_and_keep_their_state(kind: Kind) {
    use strata_runtime::schedule::{RunRecord, ScheduleState};
    let Some(h) = Harness::new(kind) else { return };
    let store = h.store().await;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..8 {
        let s = store.clone();
        set.spawn(async move {
            s.claim("digest", 3600, &format!("i{i}"), 1_000, 61_000)
                .await
                .expect("claim")
        });
    }
    let mut won = 0;
    while let Some(r) = set.join_next().await {
        won += usize::from(r.expect("join"));
    }
    assert_eq!(won, 1);
    // Before its time a running claim stays; after it, another instance takes it.
    assert!(
        !store
            .claim("digest", 3600, "late", 60_999, 120_000)
            .await
            .expect("claim")
    );
    assert!(
        store
            .claim("digest", 3600, "late", 61_000, 120_000)
            .await
            .expect("claim")
    );
    let done = RunRecord {
        name: "digest".into(),
        due: 3600,
        instance: "late".into(),
        started_ms: 61_000,
        finished_ms: Some(62_500),
        status: "ok".into(),
        detail: Some("sent".into()),
    };
    store.finish(&done).await.expect("finish");
    assert!(
        !store
            .claim("digest", 3600, "again", 999_999, 2_000_000)
            .await
            .expect("claim"),
        "a finished run is never run again"
    );
    let skipped = RunRecord {
        due: 7200,
        status: "skipped".into(),
        detail: Some("the previous run was still going".into()),
        ..done.clone()
    };
    store.finish(&skipped).await.expect("finish");
    let state = ScheduleState {
        name: "digest".into(),
        next_run: Some(10_800),
        last_run: Some(3600),
        last_status: Some("ok".into()),
        last_duration_ms: Some(1500),
        failures: 0,
        paused: false,
    };
    store.save_state(&state).await.expect("save");
    store.set_paused("digest", true).await.expect("pause");
    store.run_now("other", 42).await.expect("run now");
    store.flush().await.expect("flush");
    drop(store);
    let store = h.store().await;
    let states = store.states().await.expect("states");
    assert_eq!(
        states,
        vec![
            ScheduleState {
                paused: true,
                ..state
            },
            ScheduleState {
                name: "other".into(),
                next_run: Some(42),
                ..ScheduleState::default()
            }
        ]
    );
    // What a tick reads: due and not paused.
    let due: Vec<String> = store
        .due(100)
        .await
        .expect("due")
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(due, ["other"]);
    assert!(store.due(41).await.expect("due").is_empty());
    let history = store.history("digest", 10).await.expect("history");
    assert_eq!(history, vec![skipped, done]);
    assert_eq!(store.history("digest", 1).await.expect("history").len(), 1);
}
both!(schedules_claim_once_and_keep_their_state);

/// Model calls: stored with what they were for, summed per agent, model, sender, UTC day and
/// turn; a call without a price counts its tokens and leaves the cost to the priced ones;
/// `since` and a turn narrow the sum; kept across a restart.
async fn model_calls_sum_per_group_and_survive_a_restart(kind: Kind) {
    use strata_engine::llm::Usage;
    use strata_runtime::usage::{InputParts, ModelCall, UsageBy, UsageQuery};
    let Some(h) = Harness::new(kind) else { return };
    let call = |ts_ms: i64, agent: &str, model: &str, turn: &str, input: u64, cost: Option<f64>| {
        ModelCall {
            ts_ms,
            agent: agent.into(),
            session: "s".into(),
            sender: if agent == "main" {
                "person:ann"
            } else {
                "person:bo"
            }
            .into(),
            turn_id: turn.into(),
            provider: "openai".into(),
            model: model.into(),
            purpose: "turn".into(),
            usage: Usage {
                input_tokens: input,
                output_tokens: 10,
                cached_input_tokens: input / 2,
                cache_write_tokens: 1,
                cost_usd: None,
            },
            cost_usd: cost,
            // Shared out of `input` so the parts add up to it.
            input_parts: InputParts::from_array([input / 2, input / 4, 0, input / 8, input / 8]),
        }
    };
    // 2026-12-03T23:59:59Z and 2026-12-04T00:00:01Z: two UTC days.
    let (late, early) = (1_796_342_399_000, 1_796_342_401_000);
    {
        let s = h.store().await;
        s.record_calls(&[
            call(late, "main", "gpt-4o", "t1", 100, Some(0.5)),
            call(early, "main", "gpt-4o", "t2", 200, Some(0.25)),
            call(early, "ops", "local-llama", "t3", 1000, None),
        ])
        .await
        .expect("record");
        s.flush().await.expect("flush");
    }
    let s = h.store().await;
    let q = |by, since_ms, turn_id: Option<&str>| UsageQuery {
        by,
        since_ms,
        turn_id: turn_id.map(str::to_owned),
    };
    let by_agent = s
        .usage(&q(UsageBy::Agent, None, None))
        .await
        .expect("usage");
    let keys: Vec<&str> = by_agent.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["main", "ops"], "costliest first");
    let main = &by_agent[0];
    assert_eq!(
        (
            main.calls,
            main.input_tokens,
            main.output_tokens,
            main.cached_input_tokens
        ),
        (2, 300, 20, 150)
    );
    assert_eq!((main.cache_write_tokens, main.unpriced_calls), (2, 0));
    assert!((main.cost_usd - 0.75).abs() < 1e-9, "{main:?}");
    assert_eq!(main.input_parts.as_array(), [150, 75, 0, 37, 37]);
    let ops = &by_agent[1];
    assert_eq!(
        (ops.calls, ops.input_tokens, ops.unpriced_calls),
        (1, 1000, 1)
    );
    assert_eq!(ops.cost_usd, 0.0);
    let by_model = s
        .usage(&q(UsageBy::Model, None, None))
        .await
        .expect("usage");
    let keys: Vec<&str> = by_model.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["openai/gpt-4o", "openai/local-llama"]);
    let by_sender = s
        .usage(&q(UsageBy::Sender, None, None))
        .await
        .expect("usage");
    let keys: Vec<&str> = by_sender.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["person:ann", "person:bo"]);
    let mut by_day = s.usage(&q(UsageBy::Day, None, None)).await.expect("usage");
    by_day.sort_by(|a, b| a.key.cmp(&b.key));
    let days: Vec<(&str, u64)> = by_day.iter().map(|r| (r.key.as_str(), r.calls)).collect();
    assert_eq!(days, [("2026-12-03", 1), ("2026-12-04", 2)]);
    let since = s
        .usage(&q(UsageBy::Agent, Some(early), None))
        .await
        .expect("usage");
    assert_eq!(since.iter().map(|r| r.calls).sum::<u64>(), 2);
    let one = s
        .usage(&q(UsageBy::Turn, None, Some("t2")))
        .await
        .expect("usage");
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].key.as_str(), one[0].input_tokens), ("t2", 200));
    let by_session = s
        .usage(&q(UsageBy::Session, None, None))
        .await
        .expect("usage");
    assert_eq!(
        by_session
            .iter()
            .map(|r| (r.key.as_str(), r.calls))
            .collect::<Vec<_>>(),
        [("s", 3)]
    );
}
both!(model_calls_sum_per_group_and_survive_a_restart);
