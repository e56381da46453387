//! What only SqliteMemory has: its file (concurrent opens of a new one, the schema upgrade).
//! The behaviour every memory backend shares — scopes, hostile queries, hybrid recall,
//! fallback, decay, dedup, forget without a trace — is `strata-postgres`'s conformance suite,
//! run against SQLite and PostgreSQL.

use std::collections::BTreeMap;
use std::sync::Arc;

use strata_engine::config::{Access, Config, Person};
use strata_engine::memory::{
    MemoryBackend, MemoryQuery, MemoryScope, MemoryType, NewMemory, SearchMode, Viewer,
};
use strata_memory::SqliteMemory;

fn config() -> Config {
    let mut c = Config::default();
    c.team.people = vec![
        Person {
            id: "alice".into(),
            name: "Alice Example".into(),
            access: Access::Staff,
            contacts: BTreeMap::from([("discord".into(), "111".into())]),
            budget: None,
            role: None,
            timezone: None,
        },
        Person {
            id: "bob".into(),
            name: "Bob Example".into(),
            access: Access::Staff,
            contacts: BTreeMap::new(),
            budget: None,
            role: None,
            timezone: None,
        },
    ];
    c.memory.groups = BTreeMap::from([("ops".into(), vec!["main".into(), "watch".into()])]);
    c
}

fn new(content: &str, scope: MemoryScope) -> NewMemory {
    NewMemory {
        content: content.into(),
        memory_type: MemoryType::Semantic,
        category: None,
        tags: vec![],
        scope,
        pinned: false,
        created_by: "test".into(),
        confidence: None,
        taint: None,
        idempotency_key: None,
    }
}

fn q(text: &str) -> MemoryQuery {
    MemoryQuery {
        text: text.into(),
        limit: 10,
        mode: SearchMode::Keyword,
        ..Default::default()
    }
}

/// Several processes (threads with their own connections here) opening one new memory file at
/// once all succeed, and the file ends with one schema version row, not one per opener.
#[test]
fn concurrent_opens_of_a_new_memory_file_agree_on_one_schema() {
    for _ in 0..10 {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("memory.db");
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (p, b) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    b.wait();
                    SqliteMemory::open(&p, &config()).map(|_| ())
                })
            })
            .collect();
        for h in handles {
            let r = h.join().expect("thread");
            assert!(r.is_ok(), "{:?}", r.err().map(|e| e.to_string()));
        }
        let conn = rusqlite::Connection::open(&path).expect("open");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM memory_schema", [], |r| r.get(0))
            .expect("count");
        assert_eq!(rows, 1);
    }
}

#[tokio::test]
async fn a_version_1_file_gains_the_taint_column_and_keeps_its_memories() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("memory.db");
    {
        let mem = SqliteMemory::open(&path, &config()).expect("open");
        mem.store(
            &Viewer::operator(),
            new("an old zebra fact", MemoryScope::Global),
        )
        .await
        .expect("store");
    }
    // Make it the file an older binary wrote: no `taint` column, no idempotency keys on the
    // log, schema version 1.
    {
        let c = rusqlite::Connection::open(&path).expect("sqlite");
        c.execute_batch(
            "ALTER TABLE memories DROP COLUMN taint; DROP INDEX memory_log_by_key; \
             ALTER TABLE memory_log DROP COLUMN idempotency_key; \
             UPDATE memory_schema SET version = 1;",
        )
        .expect("downgrade");
    }
    let mem = SqliteMemory::open(&path, &config()).expect("reopen upgrades");
    let op = Viewer::operator();
    let old = mem.search(&op, &q("zebra")).await.expect("search");
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].taint, None);
    let mut tainted = new("a tainted zebra note", MemoryScope::Global);
    tainted.taint = Some("this turn read https://x.test with `read_url`".into());
    tainted.idempotency_key = Some("k-1".into());
    let first = mem.store(&op, tainted.clone()).await.expect("store");
    // The log keeps the key: the same store again returns the first.
    assert_eq!(mem.store(&op, tainted).await.expect("again"), first);
    let found = mem.search(&op, &q("tainted zebra")).await.expect("search");
    assert_eq!(
        found[0].taint.as_deref(),
        Some("this turn read https://x.test with `read_url`")
    );
    let c = rusqlite::Connection::open(&path).expect("sqlite");
    let v: i64 = c
        .query_row("SELECT version FROM memory_schema", [], |r| r.get(0))
        .expect("version");
    assert_eq!(v, 3);
}
