//! The memory conformance suite: scopes, hostile queries, hybrid recall against a real HTTP
//! embeddings server on 127.0.0.1, fallback, decay with an injected clock, dedup, forget
//! without a trace — each test against SQLite and PostgreSQL.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use strata_engine::Principal;
use strata_engine::config::{Access, Config, Person};
use strata_engine::memory::{
    MemoryQuery, MemoryScope, MemoryType, NewMemory, SearchMode, Stored, Viewer,
};
use strata_memory::{MemoryMaintenance, OpenAiEmbedder};

use crate::both;
use crate::harness::{Harness, Kind, MemOpts};

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

async fn contents(m: &Arc<dyn MemoryMaintenance>, v: &Viewer, text: &str) -> Vec<String> {
    let mut out: Vec<String> = m
        .search(v, &q(text))
        .await
        .expect("search")
        .into_iter()
        .map(|m| m.content)
        .collect();
    out.sort();
    out
}

async fn scope_visibility_matrix(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let mem = h.memory(&config(), MemOpts::default()).await;
    let op = Viewer::operator();
    let rows = [
        ("zebra fact for main", MemoryScope::Agent("main".into())),
        ("zebra fact for scout", MemoryScope::Agent("scout".into())),
        ("zebra fact for everyone", MemoryScope::Global),
        ("zebra fact for ops group", MemoryScope::Group("ops".into())),
        (
            "zebra secret of alice",
            MemoryScope::Private("person:alice".into()),
        ),
        (
            "zebra secret of bob",
            MemoryScope::Private("person:bob".into()),
        ),
    ];
    for (c, s) in rows {
        mem.store(&op, new(c, s)).await.expect("store");
    }
    let alice = Principal::Person {
        id: "discord:111".into(),
    };
    let bob = Principal::Person { id: "bob".into() };
    let stranger = Principal::Person {
        id: "discord:999".into(),
    };
    // main talking to Alice (via her Discord id) and to Bob in the same channel.
    let main_alice = mem.viewer(Some("main"), &alice);
    assert_eq!(main_alice.private_key.as_deref(), Some("person:alice"));
    assert_eq!(
        contents(&mem, &main_alice, "zebra").await,
        [
            "zebra fact for everyone",
            "zebra fact for main",
            "zebra fact for ops group",
            "zebra secret of alice"
        ]
    );
    let main_bob = mem.viewer(Some("main"), &bob);
    assert_eq!(
        contents(&mem, &main_bob, "zebra").await,
        [
            "zebra fact for everyone",
            "zebra fact for main",
            "zebra fact for ops group",
            "zebra secret of bob"
        ]
    );
    // An agent outside the group, a stranger: no group, no private memories of others.
    let scout = mem.viewer(Some("scout"), &stranger);
    assert_eq!(
        contents(&mem, &scout, "zebra").await,
        ["zebra fact for everyone", "zebra fact for scout"]
    );
    // fleet_read: other agents' agent-scoped memories too, still no one else's private ones.
    let mut cfg = config();
    cfg.memory.fleet_read = true;
    drop(mem);
    let mem = h.memory(&cfg, MemOpts::default()).await;
    let scout = mem.viewer(Some("scout"), &stranger);
    assert_eq!(
        contents(&mem, &scout, "zebra").await,
        [
            "zebra fact for everyone",
            "zebra fact for main",
            "zebra fact for scout"
        ]
    );
    // Writes: own agent scope, global, own groups, the sender's private scope only.
    let v = mem.viewer(Some("main"), &alice);
    assert!(
        mem.store(&v, new("x1 y1", MemoryScope::Agent("scout".into())))
            .await
            .is_err()
    );
    assert!(
        mem.store(&v, new("x2 y2", MemoryScope::Private("person:bob".into())))
            .await
            .is_err()
    );
    assert!(
        mem.store(
            &v,
            new("x3 y3", MemoryScope::Private("person:alice".into()))
        )
        .await
        .is_ok()
    );
    assert!(
        mem.store(&v, new("x4 y4", MemoryScope::Group("ops".into())))
            .await
            .is_ok()
    );
}
both!(scope_visibility_matrix);

async fn hostile_queries_are_just_words(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let mem = h.memory(&config(), MemOpts::default()).await;
    let op = Viewer::operator();
    mem.store(
        &op,
        new(
            "The deploy key lives in the vault (NEAR the door)",
            MemoryScope::Global,
        ),
    )
    .await
    .expect("store");
    for hostile in [
        r#"deploy" OR 1=1 --"#,
        "NEAR(deploy vault, 2)",
        "deploy*",
        "(((deploy",
        "content:deploy",
        "'; DROP TABLE memories; --",
        "🔑 deploy 🚪",
        "\"\"\"",
        "^deploy AND NOT vault",
    ] {
        let r = mem.search(&op, &q(hostile)).await;
        assert!(r.is_ok(), "{hostile}: {r:?}");
    }
    assert_eq!(contents(&mem, &op, "🔑 deploy 🚪").await.len(), 1);
    assert!(contents(&mem, &op, "🔑 🚪 ???").await.is_empty());
    // The table survived the "DROP TABLE".
    assert_eq!(mem.stats().await.expect("stats").total, 1);
}
both!(hostile_queries_are_just_words);

/// A deterministic embeddings server: hashed bag of words in 32 dimensions, with synonyms
/// folded together so "automobile" lands where "car" does (what keyword search cannot do).
async fn embeddings_server() -> (String, Arc<AtomicI64>) {
    let calls = Arc::new(AtomicI64::new(0));
    let c2 = calls.clone();
    let app = axum::Router::new().route(
        "/v1/embeddings",
        post(move |Json(body): Json<Value>| {
            let calls = c2.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                let inputs: Vec<String> = body["input"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let data: Vec<Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let mut v = vec![0.0f32; 32];
                        for w in t.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
                            let w = match w {
                                "automobile" | "vehicle" => "car",
                                "" | "the" | "a" | "is" | "my" => continue,
                                w => w,
                            };
                            let h = w
                                .bytes()
                                .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
                            v[(h % 32) as usize] += 1.0;
                        }
                        json!({"index": i, "embedding": v})
                    })
                    .collect();
                Json(json!({"object": "list", "data": data, "model": body["model"]}))
            }
        }),
    );
    let addr = strata_test_support::serve(app).await;
    let url = format!("http://{}/v1", addr);
    (url, calls)
}

async fn hybrid_recall_with_embeddings_and_keyword_fallback(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let (url, calls) = embeddings_server().await;
    let emb =
        OpenAiEmbedder::new(&url, "fake-embed", None, Duration::from_secs(5)).expect("embedder");
    let mem = h
        .memory(
            &config(),
            MemOpts {
                embedder: Some(Arc::new(emb)),
                ..Default::default()
            },
        )
        .await;
    let op = Viewer::operator();
    for c in [
        "my car is red",
        "the server runs in Oslo",
        "lunch is at noon",
    ] {
        mem.store(&op, new(c, MemoryScope::Global))
            .await
            .expect("store");
    }
    assert!(calls.load(Ordering::SeqCst) >= 3);
    // Keyword search misses the synonym; semantic and hybrid find it.
    let search = |mode, text: &'static str| {
        let mem = &mem;
        let op = &op;
        async move {
            mem.search(
                op,
                &MemoryQuery {
                    text: text.into(),
                    limit: 1,
                    mode,
                    ..Default::default()
                },
            )
            .await
            .expect("search")
            .into_iter()
            .map(|m| m.content)
            .collect::<Vec<_>>()
        }
    };
    assert!(
        search(SearchMode::Keyword, "automobile colour")
            .await
            .is_empty()
    );
    assert_eq!(
        search(SearchMode::Semantic, "automobile colour").await,
        ["my car is red"]
    );
    assert_eq!(
        search(SearchMode::Hybrid, "automobile colour").await,
        ["my car is red"]
    );
    assert_eq!(
        search(SearchMode::Hybrid, "server Oslo").await,
        ["the server runs in Oslo"]
    );
    // Access stats were updated by recall.
    let all = mem.list(&op, None, None, 10).await.expect("list");
    let car = all.iter().find(|m| m.content.contains("car")).expect("car");
    assert!(car.access_count >= 2 && car.last_access.is_some());
    // Near-duplicates merge (cosine ≥ threshold in the same scope).
    let again = mem
        .store(&op, new("My car is red!", MemoryScope::Global))
        .await
        .expect("store");
    assert!(matches!(again, Stored::Merged(_)), "{again:?}");
    let other_scope = mem
        .store(&op, new("my car is red", MemoryScope::Agent("main".into())))
        .await
        .expect("store");
    assert!(matches!(other_scope, Stored::Created(_)));

    // The embedder goes away: recall falls back to keywords, stores still work.
    let dead = OpenAiEmbedder::new(
        "http://127.0.0.1:9/v1",
        "gone",
        None,
        Duration::from_millis(500),
    )
    .expect("e");
    drop(mem);
    let mem = h
        .memory(
            &config(),
            MemOpts {
                embedder: Some(Arc::new(dead)),
                ..Default::default()
            },
        )
        .await;
    let r = mem
        .search(
            &op,
            &MemoryQuery {
                text: "server Oslo".into(),
                limit: 3,
                mode: SearchMode::Hybrid,
                ..Default::default()
            },
        )
        .await
        .expect("fallback");
    assert_eq!(r[0].content, "the server runs in Oslo");
    assert!(
        mem.store(&op, new("stored without a vector", MemoryScope::Global))
            .await
            .is_ok()
    );
}
both!(hybrid_recall_with_embeddings_and_keyword_fallback);

async fn decay_archives_and_purges_with_an_injected_clock(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let mut cfg = config();
    cfg.memory.decay.daily_rate = 0.1;
    cfg.memory.decay.grace_days = 3;
    cfg.memory.decay.archive_below = 0.45;
    cfg.memory.decay.purge_after_days = 10;
    let now = Arc::new(AtomicI64::new(1_000_000_000));
    let n2 = now.clone();
    let mem = h
        .memory(
            &cfg,
            MemOpts {
                clock: Some(Arc::new(move || n2.load(Ordering::SeqCst))),
                ..Default::default()
            },
        )
        .await;
    let op = Viewer::operator();
    let plain = mem
        .store(&op, new("plain quokka", MemoryScope::Global))
        .await
        .expect("s");
    let mut p = new("pinned quokka", MemoryScope::Global);
    p.pinned = true;
    mem.store(&op, p).await.expect("s");
    let used = mem
        .store(&op, new("used wombat", MemoryScope::Global))
        .await
        .expect("s");
    let day = 86_400;
    // Within the grace period nothing decays.
    now.fetch_add(2 * day, Ordering::SeqCst);
    assert_eq!(mem.decay(false).await.expect("decay").decayed, 0);
    // Eight days in: 5 days past grace → confidence 0.5 → still visible. The wombat was used
    // yesterday, so it does not decay.
    now.fetch_add(6 * day, Ordering::SeqCst);
    assert_eq!(contents(&mem, &op, "wombat").await.len(), 1);
    let dry = mem.decay(true).await.expect("dry run");
    assert_eq!(dry.decayed, 1);
    let real = mem.decay(false).await.expect("decay");
    assert_eq!(dry, real, "the dry run predicts the real run");
    let all = mem.list(&op, None, None, 10).await.expect("list");
    let c = all
        .iter()
        .find(|m| m.id == plain.id())
        .map(|m| m.confidence);
    assert!(c.is_some_and(|c| (c - 0.5).abs() < 0.01), "{c:?}");
    // A day later it falls under 0.45: archived, hidden from recall; the pinned one stays.
    now.fetch_add(day, Ordering::SeqCst);
    let r = mem.decay(false).await.expect("decay");
    assert_eq!(r.archived, [plain.id().to_owned()]);
    assert_eq!(contents(&mem, &op, "quokka").await, ["pinned quokka"]);
    // Ten days after archiving it is purged.
    now.fetch_add(10 * day, Ordering::SeqCst);
    let r = mem.decay(false).await.expect("decay");
    assert_eq!(r.purged, [plain.id().to_owned()]);
    let hist = mem.history(plain.id()).await.expect("history");
    let actions: Vec<&str> = hist.iter().map(|h| h.1.as_str()).collect();
    assert_eq!(actions, ["insert", "archive", "purge"]);
    let _ = used;
}
both!(decay_archives_and_purges_with_an_injected_clock);

async fn keyword_dedup_and_forget_without_a_trace(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let mem = h.memory(&config(), MemOpts::default()).await;
    let op = Viewer::operator();
    let a = mem
        .store(
            &op,
            new("The backup server is called nightjar", MemoryScope::Global),
        )
        .await
        .expect("s");
    let b = mem
        .store(
            &op,
            new("the backup server is called Nightjar.", MemoryScope::Global),
        )
        .await
        .expect("s");
    assert_eq!(b, Stored::Merged(a.id().to_owned()));
    assert_eq!(mem.stats().await.expect("stats").total, 1);
    assert!(
        mem.forget(&op, a.id(), "asked to forget", "person:alice")
            .await
            .expect("forget")
    );
    assert!(!mem.forget(&op, a.id(), "again", "x").await.expect("forget"));
    drop(mem);
    // Look underneath: no row, no full-text entry, the log keeps who and why but not the
    // content.
    assert_eq!(h.count("memories", "1 = 1").await, 0);
    assert_eq!(
        h.count(
            "memory_log",
            "action = 'delete' AND actor = 'person:alice' AND reason = 'asked to forget'"
        )
        .await,
        1
    );
    assert_eq!(
        h.count("memory_log", "lower(reason) LIKE '%nightjar%'")
            .await,
        0
    );
    match h.kind {
        Kind::Sqlite => {
            let path = h.dir.path().join("memory.db");
            let c = rusqlite::Connection::open(&path).expect("open raw");
            c.execute_batch(
                "CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, memories_fts, 'row')",
            )
            .expect("vocab");
            let terms: i64 = c
                .query_row(
                    "SELECT COUNT(*) FROM temp.v WHERE term LIKE 'nightjar%'",
                    [],
                    |r| r.get(0),
                )
                .expect("vocab");
            assert_eq!(terms, 0);
            drop(c);
            let raw = std::fs::read(&path).expect("read file");
            assert!(
                !raw.windows(8).any(|w| w.eq_ignore_ascii_case(b"nightjar")),
                "the content is overwritten on disk (secure_delete)"
            );
        }
        Kind::Postgres => {
            // No page of the table or of its full-text index holds the word any more.
            let c = crate::harness::raw(&h.url).await;
            c.batch_execute(&format!("SET search_path TO {}", h.schema))
                .await
                .expect("path");
            c.batch_execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
                .await
                .expect("pageinspect (PostgreSQL's contrib, in Debian's postgresql package)");
            // A transaction elsewhere (another test, here) can hold the dead row back from
            // VACUUM for a while; forget scrubs again later, as this does sooner.
            let mut left = Vec::new();
            for attempt in 0..40 {
                left.clear();
                for rel in ["memories", "memories_fts"] {
                    let found: i64 = c
                        .query_one(
                            "SELECT COUNT(*) FROM generate_series(0, (pg_relation_size($1::TEXT) / 8192)::INT - 1) b \
                             WHERE position('nightjar'::BYTEA IN get_raw_page($1::TEXT, b)) > 0",
                            &[&rel],
                        )
                        .await
                        .expect("pages")
                        .get(0);
                    if found > 0 {
                        left.push(rel);
                    }
                }
                if left.is_empty() {
                    break;
                }
                assert!(
                    attempt < 39,
                    "pages of {left:?} still hold the forgotten word"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
                strata_postgres::scrub(h.db().await.as_ref()).await;
            }
            let hits: i64 = c
                .query_one(
                    "SELECT COUNT(*) FROM memories WHERE fts @@ to_tsquery('english', 'nightjar')",
                    &[],
                )
                .await
                .expect("fts")
                .get(0);
            assert_eq!(hits, 0);
        }
    }
}
both!(keyword_dedup_and_forget_without_a_trace);

async fn very_common_query_words_do_not_drag_in_everything(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let mem = h.memory(&config(), MemOpts::default()).await;
    let op = Viewer::operator();
    // "ticket" is in 1,200 memories (over the 1,000 floor and 5 %), "zephyr" in two.
    let mut items: Vec<NewMemory> = (0..1200)
        .map(|i| {
            new(
                &format!("ticket number {i} was closed"),
                MemoryScope::Global,
            )
        })
        .collect();
    items.push(new("zephyr ticket escalated", MemoryScope::Global));
    items.push(new("the zephyr rollout is paused", MemoryScope::Global));
    let n = items.len();
    mem.bulk_insert(items, vec![None; n]).await.expect("bulk");
    // With a rarer word present, the common one is dropped from the query: only the two
    // zephyr memories, not eight closed tickets filling the remaining slots.
    assert_eq!(
        contents(&mem, &op, "zephyr ticket").await,
        ["the zephyr rollout is paused", "zephyr ticket escalated"]
    );
    // Alone, a common word still finds its memories.
    assert_eq!(contents(&mem, &op, "ticket").await.len(), 10);
    // Several common words: only the rarest is kept ("number" is in 1,200, "ticket" in 1,202).
    let r = contents(&mem, &op, "ticket number").await;
    assert_eq!(r.len(), 10);
    assert!(r.iter().all(|c| c.contains("number")), "{r:?}");
}
both!(very_common_query_words_do_not_drag_in_everything);

/// A refusal says what kind it is, alike on both backends: empty content and a write to
/// another person's private scope are `Invalid` (the caller's to fix), not a backend failure.
async fn refusals_carry_their_kind(kind: Kind) {
    use strata_engine::memory::MemoryError;
    let Some(h) = Harness::new(kind) else { return };
    let mem = h.memory(&config(), MemOpts::default()).await;
    let op = Viewer::operator();
    let e = mem
        .store(&op, new("   ", MemoryScope::Global))
        .await
        .expect_err("empty content is refused");
    assert!(matches!(e, MemoryError::Invalid(_)), "{e:?}");
    assert_eq!(e.to_string(), "memory: content is empty");
    let bob = mem.viewer(Some("main"), &Principal::Person { id: "bob".into() });
    let e = mem
        .store(
            &bob,
            new(
                "alice's secret",
                MemoryScope::Private("person:alice".into()),
            ),
        )
        .await
        .expect_err("another person's private scope is refused");
    assert!(matches!(e, MemoryError::Invalid(_)), "{e:?}");
}
both!(refusals_carry_their_kind);

/// A store with an idempotency key, made again with the same key (the call run again after a
/// crash), returns what the first made — `Created` with its id, or `Merged` into the memory
/// it merged into — and changes nothing: no second log line, no second merge.
async fn a_store_made_again_with_its_key_returns_the_first(kind: Kind) {
    let Some(h) = Harness::new(kind) else { return };
    let mem = h.memory(&config(), MemOpts::default()).await;
    let op = Viewer::operator();
    let keyed = |content: &str, key: &str| NewMemory {
        idempotency_key: Some(key.into()),
        ..new(content, MemoryScope::Global)
    };
    let first = mem
        .store(&op, keyed("The release train leaves on Thursdays", "k-1"))
        .await
        .expect("store");
    assert!(matches!(first, Stored::Created(_)), "{first:?}");
    let again = mem
        .store(&op, keyed("The release train leaves on Thursdays", "k-1"))
        .await
        .expect("again");
    assert_eq!(again, first);
    // A near-duplicate under another key merges; made again, it is that merge, once.
    let merged = mem
        .store(&op, keyed("the release train leaves on Thursdays.", "k-2"))
        .await
        .expect("merge");
    assert_eq!(merged, Stored::Merged(first.id().to_owned()));
    let again = mem
        .store(&op, keyed("the release train leaves on Thursdays.", "k-2"))
        .await
        .expect("again");
    assert_eq!(again, merged);
    assert_eq!(mem.stats().await.expect("stats").total, 1);
    drop(mem);
    assert_eq!(h.count("memory_log", "action = 'insert'").await, 1);
    assert_eq!(h.count("memory_log", "action = 'merge'").await, 1);
}
both!(a_store_made_again_with_its_key_returns_the_first);
