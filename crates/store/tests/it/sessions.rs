//! What only the SQLite store has: its file (mode, version, concurrent opens of a new file).
//! The behaviour every store shares is in `strata-postgres`'s conformance suite, run
//! against SQLite and PostgreSQL.

use serde_json::json;
use strata_engine::llm::{ChatMessage, Role, ToolCall};
use strata_engine::session::{SessionKey, SessionStore};
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
async fn the_file_is_private_and_at_the_current_version() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("data/strata.db");
    let s = SqliteStore::open(&path).expect("open");
    s.append_turn(&SessionKey::new("main", "cli"), &turn("one", "first"), None)
        .await
        .expect("append");
    assert_eq!(
        s.schema_version().expect("version"),
        strata_store::SCHEMA_VERSION
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
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
