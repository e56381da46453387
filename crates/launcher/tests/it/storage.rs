//! PostgreSQL storage through the real binary: two `serve` processes on one database share
//! sessions, rate-limit counters and approvals; a kill -9 loses no acknowledged write;
//! `storage migrate` copies a populated SQLite deployment once; an unreachable server stops
//! `serve` with a sentence naming it (and never the password).

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use strata_engine::memory::{
    MemoryBackend, MemoryQuery, MemoryScope, NewMemory, SearchMode, Viewer,
};
use strata_memory::MemoryMaintenance;
use strata_test_support::{FakeServer, openai};

use common::api;

const BOSS: &str = "boss-token-0123456789";

use common::Schema;

/// An overlay keeping everything in `schema`, with a fake provider, an owner token,
/// `memory_search` gated and `current_time` limited to 60 calls a minute.
fn overlay(llm_url: &str, schema: &Schema) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("agents/main")).expect("mkdir");
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{}server:\n  tokens:\n    - {{name: boss, token: {BOSS}, tier: owner}}\n\
             storage:\n  backend: postgres\n  postgres:\n    url: {}\n    schema: {}\n    pool_size: 4\n\
             memory:\n  backend: postgres\n\
             security:\n  hitl:\n    gated_tools: [memory_search]\n  \
             rate_limits:\n    tools:\n      current_time: {{per_minute: 60}}\n",
            common::fake_llm(llm_url, "literal-test-key", "fake-model"),
            schema.url,
            schema.name
        ),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [current_time, memory_search]\n",
    );
    common::write(
        d,
        "config/team.json",
        r#"{"people": [{"id": "olivia", "name": "Owner Example", "access": "owner"}],
            "agents": [{"id": "main", "agent_tier": "coordinator"}]}"#,
    );
    dir
}

/// A second instance of the same deployment: the same config, its own data dir (the
/// instance lock is per data dir, as it is per machine in a real deployment).
fn serve_second(ov: &Path) -> common::Served {
    let data = ov.join("data-b");
    common::serve_with(ov, &["--data-dir", data.to_str().expect("utf-8")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_sessions_counters_and_approvals() {
    let Some(schema) = Schema::new() else { return };
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        openai::text("Noted: the sky is green."),
        openai::text("You said the sky is green."),
        openai::tool_calls(&[("c1", "memory_search", json!({"query": "sky"}))]),
        openai::text("Nothing remembered."),
    ]);
    let ov = overlay(&fake.url, &schema);
    let a = common::serve(ov.path());
    let b = serve_second(ov.path());

    // A session written by one instance is read by the other.
    let (st, v) = api(
        "POST",
        &format!("{}/chat", a.base),
        BOSS,
        Some(json!({"message": "remember: the sky is green", "session_id": "shared"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = api(
        "POST",
        &format!("{}/chat", b.base),
        BOSS,
        Some(json!({"message": "what colour is the sky?", "session_id": "shared"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let second = &fake.requests()[1].body;
    let history = second["messages"].to_string();
    assert!(
        history.contains("remember: the sky is green")
            && history.contains("Noted: the sky is green."),
        "the second instance's turn did not see the first's: {history}"
    );

    // The rate limit is one counter: 60 a minute across both, not 60 each.
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..80 {
        let base = if i % 2 == 0 {
            a.base.clone()
        } else {
            b.base.clone()
        };
        calls.spawn(async move {
            api(
                "POST",
                &format!("{base}/api/invoke"),
                BOSS,
                Some(json!({"tool": "current_time", "args": {}})),
            )
            .await
        });
    }
    let (mut ok, mut limited) = (0, 0);
    while let Some(r) = calls.join_next().await {
        let (_, v) = r.expect("join");
        match v["value"]["status"].as_str() {
            Some("ok") => ok += 1,
            Some("rate_limited") => {
                limited += 1;
                // When to try again: the oldest counted call leaves the minute.
                let after = v["value"]["retry_after_secs"].as_u64().unwrap_or(0);
                assert!((1..=60).contains(&after), "{v}");
            }
            other => panic!("unexpected {other:?}: {v}"),
        }
    }
    assert_eq!((ok, limited), (60, 20));
    // Refused calls are not counted: the shared counter holds the 60 that ran.
    assert_eq!(
        schema
            .count("SELECT COUNT(*) FROM rate_events WHERE tool = 'current_time'")
            .await,
        60
    );

    // An approval requested on one instance is listed and decided on the other.
    let chat_url = format!("{}/chat", a.base);
    let turn = tokio::spawn(async move {
        api(
            "POST",
            &chat_url,
            BOSS,
            Some(json!({"message": "what do you remember?", "session_id": "t"})),
        )
        .await
    });
    let rows = common::pending(&b.base, BOSS).await;
    let id = rows[0]["id"].as_str().expect("id").to_owned();
    let (st, v) = api(
        "POST",
        &format!("{}/api/approvals/{id}/approve", b.base),
        BOSS,
        Some(json!({"reason": "fine"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = tokio::time::timeout(Duration::from_secs(20), turn)
        .await
        .expect("the first instance noticed the decision")
        .expect("join");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["response"], "Nothing remembered.");

    // Both report a healthy store.
    for s in [&a, &b] {
        let (_, h) = api("GET", &format!("{}/api/health", s.base), BOSS, None).await;
        assert_eq!(h["ok"], true, "{h}");
        assert_eq!(h["store"]["backend"], "postgres");
        assert_eq!(h["store"]["state"], "ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_loses_no_acknowledged_write() {
    let Some(schema) = Schema::new() else { return };
    let fake = FakeServer::start().await.expect("fake");
    fake.script((0..800).map(|i| openai::text(&format!("reply {i}"))));
    let ov = overlay(&fake.url, &schema);
    let s = common::serve(ov.path());
    let base = s.base.clone();
    let stored = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let cut = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sessions = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let http = common::client();
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..600 {
        let (base, stored, sessions) = (base.clone(), stored.clone(), sessions.clone());
        let (http, cut) = (http.clone(), cut.clone());
        burst.spawn(async move {
            // Errors after the kill are expected: only acknowledged writes count.
            if i % 3 == 0 {
                let session = format!("burst-{i}");
                let r = http
                    .post(format!("{base}/chat"))
                    .header("X-Strata-Token", BOSS)
                    .json(&json!({"message": format!("turn {i}"), "session_id": session}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().as_u16() == 200 => {
                        sessions.lock().expect("lock").push(session)
                    }
                    Ok(_) => {}
                    Err(_) => {
                        cut.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            } else {
                let r = http
                    .post(format!("{base}/api/invoke"))
                    .header("X-Strata-Token", BOSS)
                    .json(&json!({"tool": "memory_store", "args": {
                        "content": format!("burst fact {i} about kestrel {}", i * 7919),
                        "scope": "global"}}))
                    .send()
                    .await;
                let Ok(r) = r else {
                    cut.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return;
                };
                if let Ok(v) = r.json::<Value>().await
                    && v["value"]["status"] == "ok"
                    && let Some(id) = v["value"]["value"]["id"].as_str()
                {
                    stored.lock().expect("lock").push(id.to_owned());
                }
            }
        });
    }
    // Let the burst get going, then kill the server mid-flight.
    for _ in 0..600 {
        let (m, t) = (
            stored.lock().expect("lock").len(),
            sessions.lock().expect("lock").len(),
        );
        if m >= 30 && t >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = s.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    while burst.join_next().await.is_some() {}
    drop(s);
    let stored = stored.lock().expect("lock").clone();
    let sessions = sessions.lock().expect("lock").clone();
    assert!(
        !stored.is_empty() && !sessions.is_empty(),
        "the burst acknowledged nothing before the kill ({} memories, {} turns)",
        stored.len(),
        sessions.len()
    );
    assert!(
        cut.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the kill came after the burst, not during it"
    );
    let c = schema.client().await;
    for id in &stored {
        let n: i64 = c
            .query_one("SELECT COUNT(*) FROM memories WHERE id = $1", &[id])
            .await
            .expect("count")
            .get(0);
        assert_eq!(n, 1, "acknowledged memory {id} is missing");
    }
    for session in &sessions {
        let n: i64 = c
            .query_one(
                "SELECT COUNT(*) FROM turns t JOIN sessions s ON s.id = t.session \
                 WHERE s.agent_id = 'main' AND s.session_id = $1",
                &[session],
            )
            .await
            .expect("count")
            .get(0);
        assert_eq!(n, 1, "acknowledged turn of {session} is missing");
    }
}

fn strata(ov: &Path, args: &[&str]) -> std::process::Output {
    common::strata(ov).args(args).output().expect("run strata")
}

/// A unit vector in 16 dimensions pointing mostly along `i % 16`.
fn vector(i: usize) -> Vec<f32> {
    let mut v = vec![0.05f32; 16];
    v[i % 16] = 1.0;
    v[(i / 16) % 16] += 0.5;
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_copies_a_deployment_once_and_recall_agrees() {
    let Some(schema) = Schema::new() else { return };
    let ov = tempfile::tempdir().expect("tmp");
    let d = ov.path();
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "storage:\n  postgres:\n    url: {}\n    schema: {}\n",
            schema.url, schema.name
        ),
    );
    let data = d.join("data");
    let cfg = strata_engine::config::Config::default();
    // A populated SQLite deployment: sessions, 10k memories with vectors, approvals,
    // rate-limit events, the tool log.
    {
        use strata_engine::llm::{ChatMessage, Role};
        use strata_engine::session::{SessionKey, SessionStore, ToolLogEntry};
        use strata_runtime::approval::{ApprovalRecord, ApprovalStatus, ApprovalStore};
        use strata_runtime::ratelimit::RateLog;
        let store = strata_store::SqliteStore::open(&data.join("strata.db")).expect("store");
        for s in 0..20 {
            let key = SessionKey::new("main", format!("s{s}"));
            for t in 0..3 {
                store
                    .record_turn(
                        &key,
                        &[
                            ChatMessage::text(Role::User, format!("question {s}.{t}")),
                            ChatMessage::text(Role::Assistant, format!("answer {s}.{t}")),
                        ],
                        None,
                        &[ToolLogEntry {
                            key: key.clone(),
                            tool: "current_time".into(),
                            status: "ok".into(),
                            elapsed_ms: 1.0,
                            request_id: format!("r{s}.{t}"),
                        }],
                    )
                    .await
                    .expect("turn");
            }
        }
        for i in 0..5 {
            store
                .insert(&ApprovalRecord {
                    id: format!("ap{i}"),
                    agent_id: Some("main".into()),
                    tool: "deploy".into(),
                    principal: "person:olivia".into(),
                    args: json!({"n": i}),
                    description: format!("request {i}"),
                    status: ApprovalStatus::Pending,
                    approver: None,
                    reason: None,
                    created_at: 1_700_000_000 + i,
                    decided_at: None,
                })
                .await
                .expect("approval");
        }
        for i in 0..30 {
            store
                .record(
                    strata_runtime::ratelimit::RateEvent {
                        key: "agent:main".into(),
                        tool: "current_time".into(),
                        ts_ms: 1_700_000_000_000 + i,
                    },
                    [None; 3],
                )
                .await
                .expect("rate");
        }
        {
            use strata_runtime::usage::{InputParts, ModelCall, UsageStore};
            let calls: Vec<ModelCall> = (0..12)
                .map(|i| ModelCall {
                    ts_ms: 1_700_000_000_000 + i,
                    agent: "main".into(),
                    session: "s1".into(),
                    sender: "person:olivia".into(),
                    turn_id: format!("t{i}"),
                    provider: "openai".into(),
                    model: "gpt-4o".into(),
                    purpose: "turn".into(),
                    usage: strata_engine::llm::Usage {
                        input_tokens: 100,
                        output_tokens: 10,
                        ..Default::default()
                    },
                    cost_usd: (i % 3 != 0).then_some(0.01),
                    input_parts: InputParts::from_array([40, 30, 0, 20, 10]),
                })
                .collect();
            store.record_calls(&calls).await.expect("usage");
        }
        {
            // A goal with a log of four changes.
            use strata_runtime::goal::{Change, Goal, GoalState, GoalStore};
            let (mut g, ev) =
                Goal::create("Migrate the CRM", "", "operator", &[], 30, 60, 1).expect("goal");
            assert!(store.insert_goal(&g, &ev).await.expect("insert"));
            for to in [
                GoalState::Brainstorm,
                GoalState::Strategy,
                GoalState::Executing,
            ] {
                let reason = format!("on to {to}");
                let e = g
                    .apply("operator", Change::SetState { to, reason }, 2)
                    .expect("move");
                g.version += 1;
                assert!(store.save_goal(&g, &[e]).await.expect("save"));
            }
        }
        {
            // Two turn journals: one ended (three steps), one a crash left unfinished (two).
            use strata_runtime::journal::{JournalStep, JournalStore, JournalTurn, TurnStart};
            for (id, steps, ended) in [("turn-ended", 3u64, true), ("turn-open", 2, false)] {
                let turn = JournalTurn {
                    turn_id: id.into(),
                    owner: "old-host-1".into(),
                    started_ms: 1_000,
                    ended_ms: None,
                    outcome: None,
                    resumed: 0,
                    steps: 0,
                    start: TurnStart {
                        agent_id: "main".into(),
                        session_id: format!("s-{id}"),
                        channel_id: format!("http:{id}"),
                        channel_kind: None,
                        scopes: Vec::new(),
                        sender: strata_engine::Principal::Operator,
                        message: strata_engine::agent::Message::text("post the report"),
                        taint: Vec::new(),
                        depth: 0,
                    },
                };
                assert!(store.journal_begin(&turn).await.expect("begin"));
                let rows: Vec<JournalStep> = (1..=steps)
                    .map(|seq| JournalStep {
                        seq,
                        at_ms: 1_000 + seq as i64,
                        kind: "model_call".into(),
                        key: format!("m{seq}"),
                        data: json!({"n": seq}),
                    })
                    .collect();
                store.journal_append(id, &rows).await.expect("append");
                if ended {
                    store.journal_end(id, 2_000, "answered").await.expect("end");
                }
            }
        }
        store.flush().await.expect("flush");
        let mem = strata_memory::SqliteMemory::open(&data.join("memory.db"), &cfg).expect("mem");
        let words = [
            "harbour", "glacier", "orchid", "lantern", "meadow", "quartz",
        ];
        let items: Vec<NewMemory> = (0..10_000)
            .map(|i| NewMemory {
                content: format!(
                    "memory {i}: the {} near the {} ({})",
                    words[i % 6],
                    words[(i / 6) % 6],
                    i * 31
                ),
                memory_type: Default::default(),
                category: Some(format!("c{}", i % 4)),
                tags: vec![format!("t{}", i % 9)],
                scope: if i % 5 == 0 {
                    MemoryScope::Agent("main".into())
                } else {
                    MemoryScope::Global
                },
                pinned: i % 1000 == 0,
                created_by: "test".into(),
                confidence: Some(0.9),
                taint: None,
                idempotency_key: None,
            })
            .collect();
        let vectors = (0..10_000).map(|i| Some(vector(i))).collect();
        mem.bulk_insert(items, vectors).await.expect("bulk");
        let op = Viewer::operator();
        let first = mem.list(&op, None, None, 1).await.expect("list");
        mem.forget(&op, &first[0].id, "a test forgets one", "test")
            .await
            .expect("forget");
    }

    // Dry run: counts, writes nothing.
    let o = strata(
        d,
        &[
            "storage",
            "migrate",
            "--from",
            "sqlite",
            "--to",
            "postgres",
            "--dry-run",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["tables"]["memories"]["read"], 9_999);
    assert_eq!(v["tables"]["memories"]["copied"], 0);
    assert_eq!(schema.count("SELECT COUNT(*) FROM memories").await, 0);

    // The copy.
    let o = strata(
        d,
        &["storage", "migrate", "--from", "sqlite", "--to", "postgres"],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("verified"), "{text}");
    let expect = [
        ("sessions", 20),
        ("turns", 60),
        ("tool_log", 60),
        ("approvals", 5),
        ("rate_events", 30),
        ("model_calls", 12),
        ("goals", 1),
        ("goal_events", 4),
        ("journal_turns", 2),
        ("journal_steps", 5),
        ("memories", 9_999),
    ];
    for (table, n) in expect {
        assert_eq!(
            schema.count(&format!("SELECT COUNT(*) FROM {table}")).await,
            n,
            "{table}"
        );
    }
    assert_eq!(
        schema.count("SELECT COUNT(*) FROM memory_vectors").await,
        9_999
    );
    // Model calls keep their figures: summed the same from the copy.
    assert_eq!(
        schema
            .count("SELECT sum(in_system + in_tools + in_history + in_tool_outputs)::BIGINT FROM model_calls")
            .await,
        12 * 100
    );
    assert_eq!(
        schema
            .count("SELECT COUNT(*) FROM model_calls WHERE cost_usd IS NULL")
            .await,
        4
    );
    // The goal as it was, its log in order.
    assert_eq!(
        schema
            .count("SELECT COUNT(*) FROM goals WHERE state = 'executing' AND version = 3")
            .await,
        1
    );
    assert_eq!(
        schema
            .count("SELECT COUNT(*) FROM goal_events WHERE seq = 4 AND reason = 'on to executing'")
            .await,
        1
    );
    // The journals as they were: the ended one with its outcome, the unfinished one open
    // (the next `serve` on PostgreSQL resumes it), every step in order.
    assert_eq!(
        schema
            .count("SELECT COUNT(*) FROM journal_turns WHERE turn_id = 'turn-ended' AND outcome = 'answered' AND ended_ms = 2000")
            .await,
        1
    );
    assert_eq!(
        schema
            .count("SELECT COUNT(*) FROM journal_turns WHERE turn_id = 'turn-open' AND ended_ms IS NULL")
            .await,
        1
    );
    assert_eq!(
        schema
            .count("SELECT COUNT(*) FROM journal_steps WHERE turn_id = 'turn-ended' AND seq = 3 AND key = 'm3'")
            .await,
        1
    );
    // Every memory-log entry (10,000 bulk inserts are not logged by SQLite; the forget is).
    assert!(schema.count("SELECT COUNT(*) FROM memory_log").await >= 1);

    // A second run copies nothing twice.
    let o = strata(
        d,
        &[
            "storage", "migrate", "--from", "sqlite", "--to", "postgres", "--json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    for (table, n) in expect {
        assert_eq!(v["tables"][table]["copied"], 0, "{table}: {v}");
        assert_eq!(v["tables"][table]["target"], n, "{table}: {v}");
    }
    assert_eq!(v["verified"], true);

    // Recall answers the same on both backends: keyword and vector ranks.
    let sqlite = strata_memory::SqliteMemory::open(&data.join("memory.db"), &cfg).expect("mem");
    let pg_cfg = strata_engine::config::PostgresConfig {
        url: Some(schema.url.clone()),
        schema: schema.name.clone(),
        ..Default::default()
    };
    let db = Arc::new(
        strata_postgres::Db::connect(&schema.url, &pg_cfg)
            .await
            .expect("connect"),
    );
    let pg = strata_postgres::PgMemory::open(db, &cfg)
        .await
        .expect("pg memory");
    let op = Viewer::operator();
    for text in [
        "glacier orchid",
        "131502",
        "quartz lantern meadow",
        "harbour",
    ] {
        let q = MemoryQuery {
            text: text.into(),
            limit: 5,
            mode: SearchMode::Keyword,
            ..Default::default()
        };
        let a: Vec<String> = sqlite
            .search(&op, &q)
            .await
            .expect("s")
            .into_iter()
            .map(|m| m.content)
            .collect();
        let b: Vec<String> = pg
            .search(&op, &q)
            .await
            .expect("p")
            .into_iter()
            .map(|m| m.content)
            .collect();
        assert_eq!(a.len(), b.len(), "{text}: {a:?} vs {b:?}");
        assert!(!a.is_empty(), "{text}");
        // Both rank by term weight: every result holds every query word it can.
        for (x, y) in a.iter().zip(&b) {
            let words = |s: &str| text.split(' ').filter(|w| s.contains(w)).count();
            assert_eq!(words(x), words(y), "{text}: {a:?} vs {b:?}");
        }
    }
    let unique = MemoryQuery {
        text: "131502".into(),
        limit: 5,
        mode: SearchMode::Keyword,
        ..Default::default()
    };
    assert_eq!(
        sqlite.search(&op, &unique).await.expect("s")[0].id,
        pg.search(&op, &unique).await.expect("p")[0].id
    );
    // The vectors arrived intact: the same rows, the same vector for each.
    let (src, _) = MemoryMaintenance::dump(&sqlite, 0, 200)
        .await
        .expect("dump");
    let (dst, _) = MemoryMaintenance::dump(&pg, 0, 200).await.expect("dump");
    for (x, y) in src.iter().zip(&dst) {
        assert_eq!(x.memory.id, y.memory.id);
        assert_eq!(x.embedding, y.embedding);
        assert_eq!(x.memory.scope, y.memory.scope);
        assert_eq!(x.memory.pinned, y.memory.pinned);
    }

    // status names the backend and counts.
    let o = strata(
        d,
        &[
            "--set",
            "storage.backend=postgres",
            "storage",
            "status",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["backend"], "postgres");
    assert_eq!(v["rows"]["memories"], 9_999);
    assert_eq!(v["schema_version"], v["known_version"]);
    assert_eq!(v["health"]["state"], "ok");
    assert!(v["pool"]["max_size"].as_u64().is_some(), "{v}");
    // doctor checks the server too.
    let o = strata(d, &["--set", "storage.backend=postgres", "doctor"]);
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        report.contains("ok   storage: postgres at ")
            && report.contains(&format!(" schema {}, schema version ", schema.name)),
        "{report}"
    );
}

#[test]
fn an_unreachable_server_stops_serve_naming_it_but_not_the_password() {
    let ov = tempfile::tempdir().expect("tmp");
    common::write(
        ov.path(),
        "config/config.yaml",
        "storage:\n  backend: postgres\n  postgres:\n    url: postgres://app:pa55-w0rd-x@127.0.0.1:9/strata\n    connect_timeout_secs: 2\n",
    );
    let o = common::strata(ov.path())
        .args(["serve", "--set", "server.port=0"])
        .output()
        .expect("serve");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("127.0.0.1:9/strata"), "{err}");
    assert!(err.contains("unreachable"), "{err}");
    assert!(!err.contains("pa55-w0rd-x"), "the password leaked: {err}");
    // doctor fails on it, the same way.
    let o = strata(ov.path(), &["doctor"]);
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{report}");
    assert!(
        report.contains("FAIL storage: PostgreSQL at 127.0.0.1:9/strata is unreachable"),
        "{report}"
    );
    assert!(!report.contains("pa55-w0rd-x"), "{report}");
    // config show masks it too.
    let o = strata(ov.path(), &["config", "show"]);
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        shown.contains("postgres://app:********@127.0.0.1:9/strata"),
        "{shown}"
    );
    assert!(!shown.contains("pa55-w0rd-x"), "{shown}");
}

/// Puts a proxy between `schema`'s URL and the server (its URL now goes through the proxy);
/// the proxy and the direct URL, which the schema's guard must get back before it drops the
/// schema (through a cut proxy it could not).
async fn behind_proxy(schema: &mut Schema) -> (strata_test_support::TcpProxy, String) {
    let server = strata_test_support::url_host_port(&schema.url);
    let proxy = strata_test_support::TcpProxy::start(&server).await;
    let direct = schema.url.clone();
    schema.url = direct.replacen(&server, &proxy.addr.to_string(), 1);
    (proxy, direct)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_is_reported_and_survived() {
    let Some(mut schema) = Schema::new() else {
        return;
    };
    let (proxy, direct) = behind_proxy(&mut schema).await;
    let fake = FakeServer::start().await.expect("fake");
    let ov = overlay(&fake.url, &schema);
    // The schema guard drops through the direct address.
    schema.url = direct;
    let s = common::serve_with(
        ov.path(),
        &["--set", "storage.postgres.connect_timeout_secs=1"],
    );
    let invoke = || async {
        api(
            "POST",
            &format!("{}/api/invoke", s.base),
            BOSS,
            Some(json!({"tool": "current_time", "args": {}})),
        )
        .await
        .1
    };
    assert_eq!(invoke().await["value"]["status"], "ok");

    proxy.cut().await;
    // A call that needs the store (its rate limit is counted there) fails, saying why.
    let v = invoke().await;
    assert_eq!(v["value"]["status"], "error", "{v}");
    let why = v["value"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        why.contains("rate-limit counters unavailable") && why.contains(&proxy.addr.to_string()),
        "{why}"
    );
    let (_, h) = api("GET", &format!("{}/api/health", s.base), BOSS, None).await;
    assert_eq!(h["ok"], false, "{h}");
    assert_eq!(h["store"]["state"], "degraded", "{h}");
    assert!(
        h["store"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("PostgreSQL at")),
        "{h}"
    );

    proxy.restore();
    let mut healthy = false;
    for _ in 0..100 {
        let (_, h) = api("GET", &format!("{}/api/health", s.base), BOSS, None).await;
        if h["ok"] == true {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(healthy, "the store never came back");
    assert_eq!(invoke().await["value"]["status"], "ok");
}

#[test]
fn a_cluster_on_sqlite_is_refused_at_start_saying_why() {
    let ov = tempfile::tempdir().expect("tmp");
    common::write(
        ov.path(),
        "config/config.yaml",
        "cluster:\n  enabled: true\n  nats_url: nats://app:s3cret-n4ts@127.0.0.1:4222\n",
    );
    let o = common::strata(ov.path())
        .args(["serve", "--set", "server.port=0"])
        .output()
        .expect("serve");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`cluster.enabled` needs `storage.backend: postgres`"),
        "{err}"
    );
    assert!(!err.contains("s3cret-n4ts"), "{err}");
    let o = strata(ov.path(), &["config", "show"]);
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        shown.contains("nats://app:********@127.0.0.1:4222"),
        "{shown}"
    );
    assert!(!shown.contains("s3cret-n4ts"), "{shown}");
}

/// Two `serve` processes on one database and a schedule made due by `strata schedule run`:
/// paused, it waits; resumed, it runs once, on one of the two; `/api/schedules` and
/// `schedule history` on either side show the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_due_once_runs_once_across_two_instances() {
    let Some(schema) = Schema::new() else { return };
    let llm = strata_test_support::echo_llm(Duration::from_millis(20)).await;
    let overlays = [overlay(&llm, &schema), overlay(&llm, &schema)];
    for o in &overlays {
        let path = o.path().join("config/config.yaml");
        let mut text = std::fs::read_to_string(&path).expect("config");
        text.push_str(
            "schedules:\n  digest:\n    every: 24h\n    prompt: the daily digest\n    agent: main\n",
        );
        std::fs::write(&path, text).expect("write");
    }
    let served: Vec<common::Served> = overlays.iter().map(|o| common::serve(o.path())).collect();
    let cli = |args: &[&str]| {
        let out = common::strata(overlays[0].path())
            .arg("schedule")
            .args(args)
            .output()
            .expect("strata schedule");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let runs = || async {
        schema
            .count(
                "SELECT count(*) FROM turns t JOIN sessions s ON s.id = t.session \
                 WHERE s.session_id = 'schedule-digest'",
            )
            .await
    };
    assert!(cli(&["pause", "digest"]).contains("paused"));
    assert!(cli(&["run", "digest"]).contains("due now"));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(runs().await, 0, "a paused schedule ran");
    let (st, v) = api(
        "GET",
        &format!("{}/api/schedules", served[1].base),
        BOSS,
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let digest = v["value"]["schedules"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == "digest")
        .cloned()
        .expect("digest listed");
    assert_eq!(digest["paused"], true, "{digest}");
    assert_eq!(digest["when"], "every 1day", "{digest}");
    // Resumed through the other instance's API: it runs once, on one of them.
    let (st, v) = api(
        "POST",
        &format!("{}/api/schedules/digest/resume", served[1].base),
        BOSS,
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    for _ in 0..100 {
        if runs().await > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(runs().await, 1, "ran once");
    let history: Value =
        serde_json::from_str(&cli(&["history", "digest", "--json"])).expect("history json");
    let history = history.as_array().cloned().unwrap_or_default();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["status"], "ok", "{history:?}");
    assert!(cli(&["list"]).contains("digest"));
    // An unknown schedule is a usage error naming the known ones.
    let out = common::strata(overlays[0].path())
        .args(["schedule", "run", "nightly"])
        .output()
        .expect("strata");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("digest"));
    drop(served);
}

/// PostgreSQL lost in the middle of a turn (its connections dropped and refused, as a restart
/// does, through a proxy in front of the real server): the effect the model asks for next
/// does not run — its `tool_started` record cannot be written, so nothing is sent — and the
/// model is told it was not run (its answer says so; a turn that cannot store its answer
/// still gives it, `Manager`'s rule). Once the database is back, a turn sends its POST once,
/// under the key its journal's `tool_started` record holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_lost_mid_turn_runs_no_effect_without_its_started_record() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let Some(mut schema) = Schema::new() else {
        return;
    };
    let (proxy, direct) = behind_proxy(&mut schema).await;
    let (sink, landed) = strata_test_support::effect_sink().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let post = json!({"method": "POST", "url": format!("{sink}/reports"), "body": "weekly"});
    // The model reads a file, then asks for the POST — that answer taking 1.5 s, while the
    // test cuts the database — then answers with what the tool said.
    let llm = strata_test_support::llm_fn(Duration::from_millis(0), move |body| {
        let results = body["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "tool").count())
            .unwrap_or(0);
        seen.fetch_add(1, Ordering::SeqCst);
        match results {
            0 => openai::tool_calls(&[("c1", "read_file", json!({"path": "notes/brief.txt"}))]),
            1 => {
                std::thread::sleep(Duration::from_millis(1500));
                openai::tool_calls(&[("c2", "http_request", post.clone())])
            }
            _ => openai::text(&format!(
                "Tool said: {}",
                body["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .map(|m| m["content"].to_string())
                    .unwrap_or_default()
            )),
        }
    })
    .await;
    let ov = tempfile::tempdir().expect("tmp");
    let d = ov.path();
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{}server:\n  tokens:\n    - {{name: boss, token: {BOSS}, tier: owner}}\n\
             storage:\n  backend: postgres\n  postgres:\n    url: {}\n    schema: {}\n    \
             pool_size: 4\n    connect_timeout_secs: 1\n\
             security:\n  network:\n    allow: [127.0.0.1]\n  rate_limits:\n    mode: log\n\
             memory:\n  record_exchanges: false\n",
            common::fake_llm(&llm, "literal-test-key", "fake-model"),
            schema.url,
            schema.name
        ),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [read_file, http_request]\n    capabilities: [read, network, secrets]\n",
    );
    common::write(d, "notes/brief.txt", "Post the weekly report.");
    schema.url = direct;
    let s = common::serve(d);
    let chat = |id: &'static str| {
        let base = s.base.clone();
        async move {
            let r = common::client()
                .post(format!("{base}/chat"))
                .header("X-Strata-Token", BOSS)
                .json(&json!({"message": "post the weekly report", "session_id": id, "request_id": id}))
                .send()
                .await
                .expect("chat");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let turn = tokio::spawn(chat("turn-outage-1"));
    for _ in 0..200 {
        if calls.load(Ordering::SeqCst) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        calls.load(Ordering::SeqCst) >= 2,
        "the turn never asked for the POST"
    );
    proxy.cut().await;
    let (status, v) = turn.await.expect("join");
    // Nothing was sent while the database was gone, and the answer does not claim it was.
    assert!(
        landed.lock().expect("lock").is_empty(),
        "{:?}",
        landed.lock()
    );
    assert!(
        status != 200
            || v["response"]
                .as_str()
                .is_some_and(|r| r.contains("was not run")),
        "{status} {v}"
    );
    proxy.restore();
    // Back: a turn posts once, under the key its journal recorded before sending.
    let mut answered = (0, Value::Null);
    for _ in 0..50 {
        answered = chat("turn-outage-2").await;
        if answered.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(answered.0, 200, "{}", answered.1);
    let landed = landed.lock().expect("lock").clone();
    assert_eq!(landed.len(), 1, "{landed:?} {}", answered.1);
    let key = landed[0].2.clone().expect("an Idempotency-Key");
    let (st, j) = api(
        "GET",
        &format!("{}/api/turns/turn-outage-2", s.base),
        BOSS,
        None,
    )
    .await;
    assert_eq!(st, 200, "{j}");
    assert!(j.to_string().contains(&key), "{j}");
    drop(s);
}
