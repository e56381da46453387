//! What only PostgreSQL has: migrations under an advisory lock, a newer schema refused, a
//! server that goes away mid-run and comes back.

use std::sync::Arc;
use std::time::Duration;

use strata_engine::session::{SessionKey, SessionStore};
use strata_postgres::{Db, PgError, PgStore, SCHEMA_VERSION};
use strata_runtime::store::{StateStore, StoreHealth};

use crate::harness::{Harness, Kind, raw};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_at_once_migrate_once() {
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let (url, cfg) = (h.url.clone(), h.pg_config());
        set.spawn(async move { Db::connect(&url, &cfg).await.map(|_| ()) });
    }
    while let Some(r) = set.join_next().await {
        let r = r.expect("join");
        assert!(r.is_ok(), "{:?}", r.err().map(|e| e.to_string()));
    }
    assert_eq!(h.count("schema_version", "1 = 1").await, 1);
    assert_eq!(
        h.count("schema_version", &format!("version = {SCHEMA_VERSION}"))
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_untouched() {
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    let s = PgStore::new(h.db().await);
    s.append_turn(&SessionKey::new("a", "b"), &[], None)
        .await
        .expect("append");
    let c = raw(&h.url).await;
    c.batch_execute(&format!(
        "UPDATE {}.schema_version SET version = 99",
        h.schema
    ))
    .await
    .expect("bump");
    match Db::connect(&h.url, &h.pg_config()).await {
        Err(PgError::TooNew {
            found: 99, known, ..
        }) => assert_eq!(known, SCHEMA_VERSION),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened a newer schema"),
    }
    assert_eq!(h.count("sessions", "1 = 1").await, 1, "nothing was touched");
}

#[tokio::test]
async fn bad_settings_are_refused_with_the_key() {
    let mut cfg = strata_engine::config::PostgresConfig {
        schema: "Robert'); DROP TABLE x;--".into(),
        ..Default::default()
    };
    let e = Db::connect("postgres://u@127.0.0.1/x", &cfg)
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("storage.postgres.schema"), "{e}");
    cfg.schema = "strata".into();
    let e = Db::connect("not a url at all://", &cfg)
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("storage.postgres.url"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_fails_calls_clearly_reports_degraded_and_recovers() {
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    // The same server, reached through the proxy.
    let server = strata_test_support::url_host_port(&h.url);
    let proxy = strata_test_support::TcpProxy::start(&server).await;
    let url = h.url.replacen(&server, &proxy.addr.to_string(), 1);
    let mut cfg = h.pg_config();
    cfg.connect_timeout_secs = 1;
    let s = PgStore::new(Arc::new(Db::connect(&url, &cfg).await.expect("connect")));
    let key = SessionKey::new("main", "outage");
    s.append_turn(&key, &[], None).await.expect("before");
    assert_eq!(s.health().await, StoreHealth::Ok);

    proxy.cut().await;
    let e = s
        .append_turn(&key, &[], None)
        .await
        .expect_err("fails while the server is away");
    assert!(
        e.message().contains(&proxy.addr.to_string()),
        "names the server: {e}"
    );
    match s.health().await {
        StoreHealth::Degraded { reason } => {
            assert!(reason.contains(&proxy.addr.to_string()), "{reason}")
        }
        StoreHealth::Ok => panic!("healthy while the server is away"),
    }

    proxy.restore();
    // Back within the backoff (at most 5 s between attempts).
    let mut back = false;
    for _ in 0..80 {
        if s.health().await == StoreHealth::Ok {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the pool did not reconnect");
    s.append_turn(&key, &[], None).await.expect("after");
    // What was acknowledged before the outage is there, and nothing twice.
    let st = s.load(&key).await.expect("load").expect("exists");
    assert_eq!(st.turns_since_summary, 2);
}

/// Hashed words in 16 dimensions (deterministic; enough to tell texts apart).
struct Words;

impl strata_engine::memory::Embedder for Words {
    fn name(&self) -> String {
        "words".into()
    }
    fn embed<'a>(&'a self, texts: &'a [String]) -> strata_engine::memory::Embedding<'a> {
        Box::pin(async move {
            Ok(texts
                .iter()
                .map(|t| {
                    let mut v = vec![0.0f32; 16];
                    for w in t.split_whitespace() {
                        let h = w
                            .bytes()
                            .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
                        v[(h % 16) as usize] += 1.0;
                    }
                    v
                })
                .collect())
        })
    }
}

/// Two instances' memories: a vector stored by one is recalled by the other, and one
/// forgotten by one is gone from the other's ranking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_follow_each_others_vectors() {
    use strata_engine::memory::{
        MemoryBackend, MemoryQuery, MemoryScope, NewMemory, SearchMode, Viewer,
    };
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    let cfg = strata_engine::config::Config::default();
    let open = || async {
        strata_postgres::PgMemory::open(h.db().await, &cfg)
            .await
            .expect("open")
            .with_embedder(Arc::new(Words))
    };
    let (a, b) = (open().await, open().await);
    let op = Viewer::operator();
    let new = |c: &str| NewMemory {
        content: c.into(),
        memory_type: Default::default(),
        category: None,
        tags: vec![],
        scope: MemoryScope::Global,
        pinned: false,
        created_by: "test".into(),
        confidence: None,
        taint: None,
        idempotency_key: None,
    };
    let q = MemoryQuery {
        text: "violet comet".into(),
        limit: 1,
        mode: SearchMode::Semantic,
        ..Default::default()
    };
    b.store(&op, new("grey pebble")).await.expect("store");
    let stored = a.store(&op, new("violet comet")).await.expect("store");
    let hits = b.search(&op, &q).await.expect("search");
    assert_eq!(hits.first().map(|m| m.id.as_str()), Some(stored.id()));
    assert!(
        a.forget(&op, stored.id(), "test", "test")
            .await
            .expect("forget")
    );
    let hits = b.search(&op, &q).await.expect("search");
    assert!(
        hits.iter().all(|m| m.id != stored.id()),
        "the other instance still ranks a forgotten memory: {hits:?}"
    );
}

/// The URL with `sslmode=mode` added.
fn with_sslmode(url: &str, mode: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}sslmode={mode}")
}

async fn encrypted(db: &Db) -> bool {
    let c = db.client().await.expect("client");
    c.query_one(
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        &[],
    )
    .await
    .expect("pg_stat_ssl")
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_is_honoured() {
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    let c = raw(&h.url).await;
    let ssl: String = c.query_one("SHOW ssl", &[]).await.expect("show").get(0);
    if ssl != "on" {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI's PostgreSQL must have ssl = on (Debian's default, with its snakeoil certificate)"
        );
        strata_test_support::skipped(
            "PostgreSQL over TLS (this server has ssl = off)",
            "turn ssl on in postgresql.conf",
        );
        return;
    }
    let cfg = h.pg_config();
    let plain = Db::connect(&with_sslmode(&h.url, "disable"), &cfg)
        .await
        .expect("disable");
    assert!(!encrypted(&plain).await);
    for mode in ["prefer", "require"] {
        let db = Db::connect(&with_sslmode(&h.url, mode), &cfg)
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(encrypted(&db).await, "{mode} did not encrypt");
    }
    // Debian's certificate is self-signed for the machine's name: verification refuses it,
    // saying why, and names the server without the password.
    let e = Db::connect(&with_sslmode(&h.url, "verify-full"), &cfg)
        .await
        .err()
        .expect("an unverifiable certificate is refused");
    let msg = e.to_string();
    assert!(
        msg.contains("unreachable") && msg.to_lowercase().contains("certificate"),
        "{msg}"
    );
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
        use strata_engine::llm::{ChatMessage, Role};
        let text = format!("seen {}", turn.history.len());
        let mut r = strata_engine::agent::Reply::text(text.clone());
        r.transcript = vec![
            ChatMessage::text(Role::User, input.text),
            ChatMessage::text(Role::Assistant, text),
        ];
        Ok(r)
    }
}

/// An instance of [`Counter`] over its own pool on the harness's schema.
async fn counters(h: &Harness) -> strata_runtime::manager::AgentManager {
    let env = Arc::new(strata_engine::Env::new(
        strata_engine::config::Config::default(),
        h.dir.path().to_path_buf(),
        h.dir.path().join("data"),
    ));
    strata_runtime::manager::AgentManager::new(vec![Arc::new(Counter)], h.store().await, env)
}

/// Two instances answering in one session in turn: each reads what the other wrote since,
/// instead of answering from its own stale copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_alternating_in_a_session_see_each_others_turns() {
    use strata_engine::turns::TurnRequest;
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    let (a, b) = (counters(&h).await, counters(&h).await);
    let req = || TurnRequest {
        agent_id: "counter".into(),
        session_id: "shared".into(),
        stream: None,
        scopes: Vec::new(),
        channel_kind: None,
        channel_id: "shared".into(),
        sender: strata_engine::Principal::Operator,
        message: strata_engine::agent::Message::text("hi"),
        depth: 0,
        taint: None,
        turn_id: None,
    };
    assert_eq!(a.turn(req()).await.expect("a1").text, "seen 0");
    assert_eq!(b.turn(req()).await.expect("b1").text, "seen 2");
    assert_eq!(a.turn(req()).await.expect("a2").text, "seen 4");
    assert_eq!(a.turn(req()).await.expect("a3").text, "seen 6");
    assert_eq!(b.turn(req()).await.expect("b2").text, "seen 8");
    // A reset on one is seen by the other.
    b.reset("counter", "shared").await.expect("reset");
    assert_eq!(a.turn(req()).await.expect("a4").text, "seen 0");
}

/// A deployment made by a binary at schema version 1 (vectors in the memories' rows) opens
/// with this one: its vectors move to their own table and are still recalled, and the
/// full-text index has no pending list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_one_schema_keeps_its_vectors() {
    use strata_engine::memory::{MemoryBackend, MemoryQuery, SearchMode, Viewer};
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    let c = raw(&h.url).await;
    let schema = &h.schema;
    c.batch_execute(&format!(
        "CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\";
         CREATE TABLE schema_version (version BIGINT NOT NULL);
         INSERT INTO schema_version VALUES (1);
         {}",
        strata_postgres::MIGRATIONS[0]
    ))
    .await
    .expect("version 1");
    // Two memories with the vectors `Words` gives their texts, one without any.
    let words = Words;
    let texts = ["violet comet".to_owned(), "grey pebble".to_owned()];
    let vectors = strata_engine::memory::Embedder::embed(&words, &texts)
        .await
        .expect("embed");
    for (i, (t, v)) in texts.iter().zip(&vectors).enumerate() {
        c.execute(
            "INSERT INTO memories (id, type, content, scope, created_by, created_at, updated_at, \
             embedding, embedder, fts) VALUES ($1, 'semantic', $2, 'global', 'test', 1, 1, $3, \
             'words', to_tsvector('english', $2))",
            &[&format!("m{i}"), t, v],
        )
        .await
        .expect("insert");
    }
    c.execute(
        "INSERT INTO memories (id, type, content, scope, created_by, created_at, updated_at, fts) \
         VALUES ('m2', 'semantic', 'no vector here', 'global', 'test', 1, 1, \
         to_tsvector('english', 'no vector here'))",
        &[],
    )
    .await
    .expect("insert");
    let mem =
        strata_postgres::PgMemory::open(h.db().await, &strata_engine::config::Config::default())
            .await
            .expect("open migrates")
            .with_embedder(Arc::new(Words));
    assert_eq!(h.count("memory_vectors", "1 = 1").await, 2);
    let hits = mem
        .search(
            &Viewer::operator(),
            &MemoryQuery {
                text: "violet comet".into(),
                limit: 1,
                mode: SearchMode::Semantic,
                ..Default::default()
            },
        )
        .await
        .expect("search");
    assert_eq!(hits.first().map(|m| m.id.as_str()), Some("m0"));
    let opts: Vec<String> = c
        .query_one(
            "SELECT reloptions::TEXT[] FROM pg_class WHERE oid = $1::TEXT::regclass",
            &[&format!("{schema}.memories_fts")],
        )
        .await
        .expect("reloptions")
        .get(0);
    assert!(opts.iter().any(|o| o == "fastupdate=off"), "{opts:?}");
}

/// Turns stored at once go out together; one the server refuses (a NUL in its session id)
/// fails alone, and every other is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_turn_fails_alone_in_its_batch() {
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    let s = PgStore::new(h.db().await);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..40 {
        let s = s.clone();
        set.spawn(async move {
            let id = if i == 17 {
                "bad\0id".to_owned()
            } else {
                format!("s{i}")
            };
            (i, s.append_turn(&SessionKey::new("a", id), &[], None).await)
        });
    }
    while let Some(r) = set.join_next().await {
        let (i, r) = r.expect("join");
        assert_eq!(r.is_err(), i == 17, "turn {i}: {r:?}");
    }
    assert_eq!(h.count("sessions", "1 = 1").await, 39);
}

/// A turn stored under an id is stored once: a second write with the id stores nothing and
/// says so, and the stored turn is found by its id (both backends: a retried `/chat` and a
/// resumed turn rely on it on one node too).
async fn a_turn_id_is_stored_once(kind: Kind) {
    use strata_engine::llm::{ChatMessage, Role};
    let Some(h) = Harness::new(kind) else {
        return;
    };
    let s = h.store().await;
    let key = SessionKey::new("a", "s");
    let msgs = vec![
        ChatMessage::text(Role::User, "hi"),
        ChatMessage::text(Role::Assistant, "hello"),
    ];
    assert!(
        s.record_turn_once(&key, "m-1", &msgs, None, &[])
            .await
            .expect("first")
    );
    // At once from many tasks of two instances (each with its own pool and batches): each
    // id is stored exactly once, and the writes that lost the race are told so, not failed.
    let other = h.store().await;
    for n in 2..12 {
        let id = format!("m-{n}");
        let mut set = tokio::task::JoinSet::new();
        for i in 0..8 {
            let s = if i % 2 == 0 { s.clone() } else { other.clone() };
            let (key, msgs, id) = (key.clone(), msgs.clone(), id.clone());
            set.spawn(async move { s.record_turn_once(&key, &id, &msgs, None, &[]).await });
        }
        let mut stored = 0;
        while let Some(r) = set.join_next().await {
            stored += usize::from(r.expect("join").expect("write"));
        }
        assert_eq!(stored, 1, "{id}");
    }
    assert!(
        !s.record_turn_once(&key, "m-1", &msgs, None, &[])
            .await
            .expect("again")
    );
    assert_eq!(
        s.load(&key)
            .await
            .expect("load")
            .expect("some")
            .turns_since_summary,
        11
    );
    let found = s.stored_turn("m-1").await.expect("find").expect("stored");
    assert_eq!(found.last().map(|m| m.content.as_str()), Some("hello"));
    assert!(s.stored_turn("m-never").await.expect("find").is_none());
}
crate::both!(a_turn_id_is_stored_once);

/// A message delivered twice (the same turn id, to this instance or another) runs once:
/// the second delivery gets the stored answer, marked as replayed, and nothing is stored
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_delivered_twice_runs_once() {
    use strata_engine::turns::TurnRequest;
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    let (a, b) = (counters(&h).await, counters(&h).await);
    let req = |id: &str| TurnRequest {
        agent_id: "counter".into(),
        session_id: "s".into(),
        stream: None,
        scopes: Vec::new(),
        channel_kind: None,
        channel_id: "s".into(),
        sender: strata_engine::Principal::Operator,
        message: strata_engine::agent::Message::text("hi"),
        depth: 0,
        taint: None,
        turn_id: Some(id.into()),
    };
    let first = a.run_here(req("m-1")).await.expect("first");
    assert_eq!((first.text.as_str(), first.replayed), ("seen 0", false));
    for again in [a.run_here(req("m-1")).await, b.run_here(req("m-1")).await] {
        let again = again.expect("again");
        assert_eq!((again.text.as_str(), again.replayed), ("seen 0", true));
    }
    let next = b.run_here(req("m-2")).await.expect("next");
    assert_eq!((next.text.as_str(), next.replayed), ("seen 2", false));
    assert_eq!(h.count("turns", "1 = 1").await, 2);
}

/// A connector lease has one holder: of many instances asking at once exactly one gets it;
/// the others get it only after it runs out (by the database's clock) or is released; the
/// holder renews it, saves its resume point, and a new holder sees the old one's state,
/// who had it and a higher epoch. A holder whose lease was taken cannot renew it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_has_one_holder_and_passes_on_when_it_runs_out() {
    use strata_runtime::hub::Leases;
    let Some(h) = Harness::new(Kind::Postgres) else {
        return;
    };
    let leases = strata_postgres::PgLeases::new(h.db().await);
    let ttl = Duration::from_millis(600);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..8 {
        let l = leases.clone();
        set.spawn(async move {
            l.acquire("discord:main", &format!("i{i}"), ttl, None)
                .await
                .expect("acquire")
                .map(|g| (format!("i{i}"), g))
        });
    }
    let mut won = Vec::new();
    while let Some(r) = set.join_next().await {
        won.extend(r.expect("join"));
    }
    assert_eq!(won.len(), 1, "{won:?}");
    let (holder, first) = won.remove(0);
    assert_eq!(
        (first.epoch, first.taken_from, first.state),
        (1, None, None)
    );
    let other = if holder == "i0" { "i1" } else { "i0" };
    // Renewed with a resume point: same epoch; the other is still refused.
    let renewed = leases
        .acquire("discord:main", &holder, ttl, Some("after=42"))
        .await
        .expect("renew")
        .expect("still held");
    assert_eq!(renewed.epoch, 1);
    assert!(
        leases
            .acquire("discord:main", other, ttl, None)
            .await
            .expect("try")
            .is_none()
    );
    assert_eq!(
        leases.held().await.expect("held"),
        vec![("discord:main".to_owned(), holder.clone(), 1)]
    );
    // The holder stops renewing: after the lease runs out another takes it, with its state.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert!(leases.held().await.expect("held").is_empty());
    let taken = leases
        .acquire("discord:main", other, ttl, None)
        .await
        .expect("take")
        .expect("free");
    assert_eq!(taken.epoch, 2);
    assert_eq!(taken.taken_from.as_deref(), Some(holder.as_str()));
    assert_eq!(taken.state.as_deref(), Some("after=42"));
    // The old holder comes back: it has lost the lease and cannot renew it.
    assert!(
        leases
            .acquire("discord:main", &holder, ttl, None)
            .await
            .expect("late renew")
            .is_none()
    );
    // Released (a stopping instance): free at once, its state kept for the next.
    leases
        .acquire("discord:main", other, ttl, Some("after=77"))
        .await
        .expect("renew")
        .expect("held");
    leases
        .release("discord:main", other)
        .await
        .expect("release");
    let next = leases
        .acquire("discord:main", &holder, ttl, None)
        .await
        .expect("take")
        .expect("released");
    assert_eq!((next.epoch, next.state.as_deref()), (3, Some("after=77")));
    // A release by an instance that does not hold it changes nothing.
    leases
        .release("discord:main", other)
        .await
        .expect("release");
    assert_eq!(leases.held().await.expect("held").len(), 1);
}
