//! The SQLite store on real files: round trips, restarts, compaction, pruning, migrations.

use std::time::Duration;

use serde_json::json;
use strata_engine::llm::{ChatMessage, Role, ToolCall};
use strata_engine::session::{SessionKey, SessionStore, ToolLogEntry};
use strata_store::{OpenError, SqliteStore};

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

#[tokio::test]
async fn history_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("data/strata.db");
    let key = SessionKey::new("main", "cli");
    {
        let s = SqliteStore::open(&path).expect("open");
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
    }
    let s = SqliteStore::open(&path).expect("reopen");
    assert_eq!(s.schema_version().expect("version"), 2);
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
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn compaction_keeps_the_newest_messages() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = SqliteStore::open(&dir.path().join("s.db")).expect("open");
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
}

#[tokio::test]
async fn reset_prune_count_and_tool_log() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = SqliteStore::open(&dir.path().join("s.db")).expect("open");
    let (k1, k2) = (SessionKey::new("a", "1"), SessionKey::new("a", "2"));
    s.append_turn(&k1, &turn("x", "y"), None)
        .await
        .expect("append");
    s.append_turn(&k2, &turn("x", "y"), None)
        .await
        .expect("append");
    assert_eq!(s.count().await.expect("count"), 2);
    s.reset(&k1).await.expect("reset");
    assert!(s.load(&k1).await.expect("load").is_none());
    s.log_tools(&[ToolLogEntry {
        key: k2.clone(),
        tool: "t".into(),
        status: "ok".into(),
        elapsed_ms: 1.5,
        request_id: "r".into(),
    }])
    .await
    .expect("log");
    let raw = rusqlite::Connection::open(s.path()).expect("raw");
    let logged: (String, String) = raw
        .query_row("SELECT tool, request_id FROM tool_log", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("row");
    assert_eq!(logged, ("t".to_owned(), "r".to_owned()));

    assert_eq!(s.prune(Duration::from_secs(3600)).await.expect("prune"), 0);
    // Timestamps have one-second resolution: wait past it, then prune everything idle.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(s.prune(Duration::ZERO).await.expect("prune"), 1);
    assert_eq!(s.count().await.expect("count"), 0);
    let left: i64 = raw
        .query_row("SELECT COUNT(*) FROM turns", [], |r| r.get(0))
        .expect("count");
    assert_eq!(left, 0, "messages go with their session");
}

#[test]
fn a_newer_schema_is_refused_not_damaged() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("s.db");
    {
        let c = rusqlite::Connection::open(&path).expect("open");
        c.execute_batch("PRAGMA user_version = 99;").expect("set");
    }
    match SqliteStore::open(&path) {
        Err(OpenError::TooNew { found: 99, .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened a newer schema"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_lose_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = SqliteStore::open(&dir.path().join("s.db")).expect("open");
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

#[tokio::test]
async fn a_restarted_runtime_resumes_every_session() {
    use std::sync::Arc;
    use strata_engine::runtime::{AgentManager, TurnRequest};
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("data/strata.db");
    let env = Arc::new(strata_engine::Env::new(
        strata_engine::config::Config::default(),
        dir.path().to_path_buf(),
        dir.path().join("data"),
    ));
    let req = |session: &str| TurnRequest {
        agent_id: "counter".into(),
        session_id: session.into(),
        channel_id: session.into(),
        sender: strata_engine::Principal::Operator,
        message: strata_engine::agent::Message::text("hi"),
        depth: 0,
        taint: None,
    };
    {
        let store = Arc::new(SqliteStore::open(&db).expect("open"));
        let m = AgentManager::new(vec![Arc::new(Counter)], store, env.clone());
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
    }
    let store = Arc::new(SqliteStore::open(&db).expect("reopen"));
    let m = AgentManager::new(vec![Arc::new(Counter)], store, env);
    assert_eq!(
        m.turn(req("a")).await.expect("t3").text,
        "seen 4 earlier messages"
    );
    assert_eq!(
        m.turn(req("b")).await.expect("t2b").text,
        "seen 2 earlier messages"
    );
}

/// Two processes (here: threads with their own connections) opening the same new file at
/// once: both migrate it or find it migrated; neither fails with "table already exists"
/// (`strata approvals list` beside a `strata skill run` waiting for approval hit this).
#[test]
fn concurrent_opens_of_a_new_file_both_succeed() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("strata.db");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (p, b) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    b.wait();
                    strata_store::SqliteStore::open(&p).map(|_| ())
                })
            })
            .collect();
        for h in handles {
            let r = h.join().expect("thread");
            assert!(r.is_ok(), "{:?}", r.err().map(|e| e.to_string()));
        }
    }
}
