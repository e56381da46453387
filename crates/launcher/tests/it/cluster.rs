//! Several `serve` processes as one Strata through NATS JetStream and PostgreSQL: every
//! `/chat` answered exactly once whichever instance takes it, a session's turns stored in
//! the order sent, nothing lost or doubled when an instance is killed or stopped mid-load;
//! one rate limit and approvals decided through any member; NATS going away and coming back.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

const BOSS: &str = "boss-token-0123456789";

/// A PostgreSQL schema and a JetStream stream of the test's own, dropped at the end.
struct Shared {
    pg: String,
    nats: String,
    name: String,
}

impl Shared {
    fn new() -> Option<Shared> {
        let pg = strata_test_support::postgres_url()?;
        let nats = strata_test_support::nats_url()?;
        Some(Shared {
            pg,
            nats,
            name: strata_test_support::unique_schema(),
        })
    }

    async fn pg(&self) -> tokio_postgres::Client {
        let (c, conn) = tokio_postgres::connect(&self.pg, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        c
    }

    async fn drop_now(&self) {
        let _ = self
            .pg()
            .await
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
            .await;
        if let Ok(nc) = async_nats::connect(self.nats.trim_start_matches("nats://")).await {
            let _ = async_nats::jetstream::new(nc)
                .delete_stream(&self.name)
                .await;
        }
    }
}

/// An overlay of one member: the same configuration for every instance, a data dir each.
fn member(llm: &str, s: &Shared) -> tempfile::TempDir {
    member_with(llm, s, "")
}

/// [`member`] with more configuration (`extra`, YAML at the top level).
fn member_with(llm: &str, s: &Shared, extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("agents/main")).expect("mkdir");
    common::write(
        d,
        "config/config.yaml",
        &(format!(
            "{}server:\n  tokens:\n    - {{name: boss, token: {BOSS}, tier: owner}}\n\
             storage:\n  backend: postgres\n  postgres:\n    url: {}\n    schema: {}\n    pool_size: 4\n\
             cluster:\n  enabled: true\n  nats_url: {}\n  stream: {}\n  ack_wait_secs: 3\n",
            common::fake_llm(llm, "literal-test-key", "fake-model"),
            s.pg,
            s.name,
            s.nats,
            s.name
        ) + extra),
    );
    common::write(d, "config/agents.yaml", "agents:\n  main: {}\n");
    dir
}

/// `n` members on `llm`, each with its overlay, started.
fn members(n: usize, llm: &str, s: &Shared) -> (Vec<tempfile::TempDir>, Vec<common::Served>) {
    let overlays: Vec<tempfile::TempDir> = (0..n).map(|_| member(llm, s)).collect();
    let served = overlays
        .iter()
        .map(|o| common::serve_with(o.path(), &[]))
        .collect();
    (overlays, served)
}

/// `/chat` with `request_id` on whichever instance is up, starting at `first`: the answer's
/// text. An instance that does not answer (killed) is skipped; the same id is sent again.
async fn chat(bases: &Mutex<Vec<Option<String>>>, first: usize, session: &str, k: usize) -> String {
    let c = common::client();
    let body = json!({
        "message": format!("{session} m{k}"),
        "agent": "main",
        "session_id": session,
        "request_id": format!("{session}-m{k}"),
    });
    for attempt in 0..200 {
        let base = {
            let b = bases.lock().expect("bases");
            b[(first + attempt) % b.len()].clone()
        };
        let Some(base) = base else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let r = c
            .post(format!("{base}/chat"))
            .header("X-Strata-Token", BOSS)
            .json(&body)
            .send()
            .await;
        // What went wrong, said in the test's output when the test fails.
        let why = match r {
            Ok(r) if r.status().is_success() => {
                let v: Value = r.json().await.expect("json");
                return v["response"].as_str().unwrap_or_default().to_owned();
            }
            Ok(r) => {
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                // The instance died while it waited for the answer: ask another.
                assert!(status.as_u16() >= 500, "{session} m{k}: {status} {text}");
                format!("{status} {text}")
            }
            Err(e) => e.to_string(),
        };
        eprintln!("{session} m{k}: attempt {attempt} on {base}: {why}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{session} m{k}: no instance answered");
}

/// A load of sessions over the instances: its clients, and how far each session got.
struct Load {
    set: tokio::task::JoinSet<()>,
    done: Arc<std::sync::atomic::AtomicUsize>,
    /// Per session, the message it waits for the answer to (`per` when it is through).
    at: Arc<Mutex<BTreeMap<String, usize>>>,
    /// When a test stops waiting and says what it was waiting for (before the harness's
    /// own timeout, which says nothing).
    deadline: tokio::time::Instant,
}

/// `sessions` sessions named `<prefix>NN`, each sending `per` messages back to back over
/// the instances up in `bases`, each answer checked.
fn start_load(
    bases: &Arc<Mutex<Vec<Option<String>>>>,
    prefix: &str,
    sessions: usize,
    per: usize,
) -> Load {
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let at = Arc::new(Mutex::new(BTreeMap::new()));
    let mut set = tokio::task::JoinSet::new();
    for s in 0..sessions {
        let (bases, done, at) = (bases.clone(), done.clone(), at.clone());
        let session = format!("{prefix}{s:02}");
        set.spawn(async move {
            for k in 0..per {
                at.lock().expect("at").insert(session.clone(), k);
                let answer = chat(&bases, s + k, &session, k).await;
                assert_eq!(answer, format!("echo: {session} m{k}"));
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            at.lock().expect("at").insert(session.clone(), per);
        });
    }
    Load {
        set,
        done,
        at,
        deadline: tokio::time::Instant::now() + Duration::from_secs(200),
    }
}

/// The servers' logs a failing cluster test shows: (name, tail).
type Logs = Mutex<Vec<(String, common::LogTail)>>;

/// Waits until `n` answers came. A client that failed fails the test with its own message;
/// past the load's deadline the test fails saying which sessions wait for what, what the
/// stream holds and what the servers logged.
async fn answered(load: &mut Load, n: usize, shared: &Shared, logs: &Logs) {
    while load.done.load(std::sync::atomic::Ordering::Relaxed) < n {
        while let Some(r) = load.set.try_join_next() {
            r.expect("a session's client failed");
        }
        if tokio::time::Instant::now() > load.deadline {
            panic!("{}", stuck(load, n, shared, logs).await);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for every client of `load` to end (see [`answered`]).
async fn finished(mut load: Load, total: usize, shared: &Shared, logs: &Logs) {
    answered(&mut load, total, shared, logs).await;
    while let Some(r) = load.set.join_next().await {
        r.expect("a session's client failed");
    }
}

/// What a load that stopped moving waits for.
async fn stuck(load: &Load, n: usize, shared: &Shared, logs: &Logs) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "{} of {n} answers after the deadline; sessions waiting (session: message):",
        load.done.load(std::sync::atomic::Ordering::Relaxed)
    );
    let per = load
        .at
        .lock()
        .expect("at")
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    for (session, k) in load.at.lock().expect("at").iter() {
        if *k < per {
            let _ = write!(out, " {session}: m{k}");
        }
    }
    match async_nats::connect(shared.nats.trim_start_matches("nats://")).await {
        Ok(nc) => {
            let js = async_nats::jetstream::new(nc);
            if let Ok(mut stream) = js.get_stream(&shared.name).await {
                if let Ok(info) = stream.info().await {
                    let _ = write!(out, "\nstream: {:?}", info.state);
                }
                let consumer: Result<async_nats::jetstream::consumer::PullConsumer, _> =
                    stream.get_consumer("workers").await;
                if let Ok(mut c) = consumer
                    && let Ok(info) = c.info().await
                {
                    let _ = write!(
                        out,
                        "\nconsumer: pending {}, ack pending {}, redelivered {}, waiting pulls {}, delivered {:?}, acknowledged {:?}",
                        info.num_pending,
                        info.num_ack_pending,
                        info.num_redelivered,
                        info.num_waiting,
                        info.delivered,
                        info.ack_floor
                    );
                }
            }
        }
        Err(e) => {
            let _ = write!(out, "\nNATS unreachable: {e}");
        }
    }
    for (name, tail) in logs.lock().expect("logs").iter() {
        let _ = write!(
            out,
            "\n--- {name}: its last lines\n{}",
            common::tail_text(tail)
        );
    }
    out
}

/// The stored turns, per session in turn order: (turn id, the user's message).
async fn stored(shared: &Shared) -> BTreeMap<String, Vec<(Option<String>, String)>> {
    let rows = shared
        .pg()
        .await
        .query(
            &format!(
                "SELECT s.session_id, t.turn_id, t.messages FROM {0}.turns t \
                 JOIN {0}.sessions s ON s.id = t.session ORDER BY s.session_id, t.turn",
                shared.name
            ),
            &[],
        )
        .await
        .expect("turns");
    let mut by_session: BTreeMap<String, Vec<(Option<String>, String)>> = BTreeMap::new();
    for r in &rows {
        let m: Value = serde_json::from_str(&r.get::<_, String>(2)).expect("messages");
        let user = m[0]["content"].as_str().unwrap_or_default().to_owned();
        by_session
            .entry(r.get(0))
            .or_default()
            .push((r.get(1), user));
    }
    by_session
}

/// Every session's `per` messages stored once each, in the order sent.
fn assert_once_in_order(
    by_session: &BTreeMap<String, Vec<(Option<String>, String)>>,
    sessions: usize,
    per: usize,
) {
    assert_eq!(by_session.len(), sessions);
    for (session, turns) in by_session {
        let users: Vec<&str> = turns.iter().map(|(_, u)| u.as_str()).collect();
        let want: Vec<String> = (0..per).map(|k| format!("{session} m{k}")).collect();
        assert_eq!(
            users, want,
            "{session}: turns missing, doubled or out of order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_answer_each_message_once_in_order_through_a_kill_and_a_stop() {
    let Some(shared) = Shared::new() else { return };
    let llm = strata_test_support::echo_llm(Duration::from_millis(20)).await;
    let overlays: Vec<tempfile::TempDir> = (0..3).map(|_| member(&llm, &shared)).collect();
    let mut served: Vec<Option<common::Served>> = overlays
        .iter()
        .map(|o| Some(common::serve_with(o.path(), &[])))
        .collect();
    let bases = Arc::new(Mutex::new(
        served
            .iter()
            .map(|s| s.as_ref().map(|s| s.base.clone()))
            .collect::<Vec<_>>(),
    ));
    let logs: Logs = Mutex::new(
        served
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, s)| (format!("instance {i}"), s.log.clone()))
            .collect(),
    );
    let (sessions, per) = (60usize, 10usize);
    let mut load = start_load(&bases, "s", sessions, per);
    // A third of the way in, instance 1 dies without a word; at two thirds it comes back.
    let total = sessions * per;
    answered(&mut load, total / 3, &shared, &logs).await;
    bases.lock().expect("bases")[1] = None;
    if let Some(mut s) = served[1].take() {
        s.child.kill().expect("kill -9");
        let _ = s.child.wait();
    }
    // Halfway, instance 2 is stopped the polite way (SIGTERM: it finishes what it runs and
    // takes nothing new) while it is under load.
    answered(&mut load, total / 2, &shared, &logs).await;
    bases.lock().expect("bases")[2] = None;
    drop(served[2].take());
    answered(&mut load, 2 * total / 3, &shared, &logs).await;
    for i in [1, 2] {
        let back = common::serve_with(overlays[i].path(), &[]);
        logs.lock()
            .expect("logs")
            .push((format!("instance {i}, restarted"), back.log.clone()));
        bases.lock().expect("bases")[i] = Some(back.base.clone());
        served[i] = Some(back);
    }
    finished(load, total, &shared, &logs).await;
    // What the store holds: every message once, each session's in the order sent, each
    // under its own message's id.
    let by_session = stored(&shared).await;
    assert_once_in_order(&by_session, sessions, per);
    for (id, user) in by_session.values().flatten() {
        assert_eq!(
            id.as_deref().map(|i| i.replace('-', " ")).as_deref(),
            Some(user.as_str()),
            "a turn stored under another message's id"
        );
    }
    // And they went through the queue: every turn was a message the workers took.
    let nc = async_nats::connect(shared.nats.trim_start_matches("nats://"))
        .await
        .expect("nats");
    let js = async_nats::jetstream::new(nc);
    let mut stream = js.get_stream(&shared.name).await.expect("stream");
    let mut consumer: async_nats::jetstream::consumer::PullConsumer =
        stream.get_consumer("workers").await.expect("consumer");
    let info = consumer.info().await.expect("consumer info");
    assert!(
        info.delivered.stream_sequence >= total as u64,
        "only {} turns went through the queue",
        info.delivered.stream_sequence
    );
    assert_eq!(
        stream.info().await.expect("info").state.messages,
        0,
        "turns left behind"
    );
    drop(served);
    shared.drop_now().await;
}

/// A session's messages sent one after another without waiting for the answers, each to
/// another instance, the first one slow: they run one at a time in the order sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_turns_run_in_the_order_sent_across_instances() {
    let Some(shared) = Shared::new() else { return };
    let llm = strata_test_support::echo_llm(Duration::from_millis(5)).await;
    let (overlays, served) = members(3, &llm, &shared);
    let texts = ["slow m0", "m1", "m2", "m3"];
    // The order that counts is the queue's: each message is sent once the one before it is
    // queued (a loaded machine may otherwise deliver the HTTP requests out of order).
    let nc = async_nats::connect(shared.nats.trim_start_matches("nats://"))
        .await
        .expect("nats");
    let js = async_nats::jetstream::new(nc);
    let mut stream = js.get_stream(&shared.name).await.expect("stream");
    let mut queued = stream.info().await.expect("info").state.last_sequence;
    let mut set = tokio::task::JoinSet::new();
    for (k, text) in texts.iter().enumerate() {
        let base = served[k % 3].base.clone();
        let text = text.to_string();
        set.spawn(async move {
            let (status, v) = common::api(
                "POST",
                &format!("{base}/chat"),
                BOSS,
                Some(json!({"message": text, "agent": "main", "session_id": "ordered"})),
            )
            .await;
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["response"], format!("echo: {text}"));
        });
        for _ in 0..500 {
            let now = stream.info().await.expect("info").state.last_sequence;
            if now > queued {
                queued = now;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    while let Some(r) = set.join_next().await {
        r.expect("client");
    }
    let rows = shared
        .pg()
        .await
        .query(
            &format!(
                "SELECT t.messages FROM {0}.turns t JOIN {0}.sessions s ON s.id = t.session \
                 WHERE s.session_id = 'ordered' ORDER BY t.turn",
                shared.name
            ),
            &[],
        )
        .await
        .expect("turns");
    let users: Vec<String> = rows
        .iter()
        .map(|r| {
            let m: Value = serde_json::from_str(&r.get::<_, String>(0)).expect("json");
            m[0]["content"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(users, texts, "turns ran out of the order they were sent");

    // The operator's view, from a member and from the command line: three instances up,
    // at their addresses, with the turns they ran.
    let (status, v) = common::api(
        "GET",
        &format!("{}/api/cluster", served[0].base),
        BOSS,
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let v = &v["value"];
    let mut addresses: Vec<&str> = v["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .filter(|i| i["alive"] == true)
        .filter_map(|i| i["address"].as_str())
        .collect();
    addresses.sort_unstable();
    let mut bases: Vec<&str> = served.iter().map(|s| s.base.as_str()).collect();
    bases.sort_unstable();
    assert_eq!(addresses, bases, "{v}");
    // The turns run, summed over the members' heartbeats (every five seconds).
    let mut run = 0;
    for _ in 0..40 {
        let (_, v) = common::api(
            "GET",
            &format!("{}/api/cluster", served[0].base),
            BOSS,
            None,
        )
        .await;
        run = v["value"]["instances"].as_array().map_or(0, |a| {
            a.iter().filter_map(|i| i["turns_run"].as_i64()).sum()
        });
        if run >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(run, 4, "turns run by the members");
    let cli = |ov: &std::path::Path| {
        let o = common::strata(ov)
            .args(["cluster", "status", "--json"])
            .output()
            .expect("cluster status");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).expect("json")
    };
    assert_eq!(
        cli(overlays[1].path())["instances"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    // Stopped with SIGTERM, each member leaves.
    drop(served);
    assert_eq!(
        cli(overlays[1].path())["instances"]
            .as_array()
            .map(Vec::len),
        Some(0)
    );
    shared.drop_now().await;
}

/// One rate limit across the members, every member's audit records in one `/api/events`
/// and `strata events`, and an approval asked for by a turn (wherever it runs) decided
/// through a third member's API: approved, denied, or left to time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_share_rate_limits_events_and_approvals() {
    use strata_test_support::{FakeServer, openai};
    let Some(shared) = Shared::new() else { return };
    let fake = FakeServer::start().await.expect("fake");
    let extra = "security:\n  hitl:\n    gated_tools: [list_files]\n    timeout: 4\n  \
                 rate_limits:\n    tools:\n      current_time: {per_minute: 10}\n";
    let overlays: Vec<tempfile::TempDir> = (0..3)
        .map(|_| member_with(&fake.url, &shared, extra))
        .collect();
    for o in &overlays {
        common::write(
            o.path(),
            "config/agents.yaml",
            "agents:\n  main:\n    tools: [list_files]\n",
        );
    }
    let served: Vec<common::Served> = overlays
        .iter()
        .map(|o| common::serve_with(o.path(), &[]))
        .collect();

    // 10 a minute across the three: 30 calls spread over them, exactly 10 run.
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..30 {
        let base = served[i % 3].base.clone();
        calls.spawn(async move {
            common::api(
                "POST",
                &format!("{base}/api/invoke"),
                BOSS,
                Some(json!({"tool": "current_time", "args": {}})),
            )
            .await
        });
    }
    let mut ok = 0;
    while let Some(r) = calls.join_next().await {
        let (_, v) = r.expect("join");
        match v["value"]["status"].as_str() {
            Some("ok") => ok += 1,
            Some("rate_limited") => {}
            other => panic!("unexpected {other:?}: {v}"),
        }
    }
    assert_eq!(ok, 10);

    // Each call left a record on the member that took it (besides the rate-limit alerts);
    // any member shows them all, as does `strata events` with the cluster's configuration.
    let mut instances = std::collections::BTreeSet::new();
    for _ in 0..100 {
        let (st, v) = common::api(
            "GET",
            &format!("{}/api/events?limit=1000", served[2].base),
            BOSS,
            None,
        )
        .await;
        assert_eq!(st, 200, "{v}");
        let calls: Vec<&Value> = v["value"]["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["tool"] == "current_time" && e["event"].is_null())
            .collect();
        instances = calls
            .iter()
            .filter_map(|e| e["instance"].as_str().map(str::to_owned))
            .collect();
        if calls.len() == 30 {
            break;
        }
        assert!(calls.len() < 30, "records doubled: {}", calls.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(instances.len(), 3, "{instances:?}");
    let out = common::strata(overlays[0].path())
        .args(["events", "--limit", "1000"])
        .output()
        .expect("events");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        lines
            .lines()
            .filter(|l| l.contains("\"tool\":\"current_time\"") && !l.contains("\"event\":"))
            .count(),
        30,
        "{lines}"
    );

    // A gated call: the turn waits; a third member's API decides, or nobody does.
    for (decision, answer) in [
        ("approve", "It ran."),
        ("deny", "It was refused."),
        ("timeout", "Nobody answered."),
    ] {
        fake.script([
            openai::tool_calls(&[("c1", "list_files", json!({"path": "."}))]),
            openai::text(answer),
        ]);
        let url = format!("{}/chat", served[0].base);
        let turn = tokio::spawn(async move {
            common::api(
                "POST",
                &url,
                BOSS,
                Some(json!({"message": "look around", "agent": "main", "session_id": decision})),
            )
            .await
        });
        let rows = common::pending(&served[1].base, BOSS).await;
        let id = rows[0]["id"].as_str().expect("id").to_owned();
        if decision != "timeout" {
            let (st, v) = common::api(
                "POST",
                &format!("{}/api/approvals/{id}/{decision}", served[2].base),
                BOSS,
                Some(json!({"reason": "test"})),
            )
            .await;
            assert_eq!(st, 200, "{v}");
        }
        let (st, v) = turn.await.expect("turn");
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["response"], answer);
        // What the model was told about the call says how it was decided.
        let told = fake
            .requests()
            .last()
            .map(|r| r.body["messages"].to_string())
            .unwrap_or_default();
        match decision {
            "approve" => assert!(!told.contains("denied"), "{told}"),
            "deny" => assert!(told.contains("denied"), "{told}"),
            _ => assert!(told.contains("nobody approved"), "{told}"),
        }
        // Every member sees how it ended.
        let (_, v) = common::api(
            "GET",
            &format!("{}/api/approvals?status=all", served[2].base),
            BOSS,
            None,
        )
        .await;
        let row = v["value"]["approvals"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["id"] == id.as_str())
            .cloned()
            .unwrap_or_default();
        let want = match decision {
            "approve" => "approved",
            "deny" => "denied",
            _ => "timeout",
        };
        assert_eq!(row["status"], want, "{v}");
    }
    drop(served);
    shared.drop_now().await;
}

/// A turn that failed runs again when its client sends the same request id again, on the
/// instance that ran it or on another — the id is not refused for JetStream's whole
/// duplicate window (two minutes of 502s) — and a request answered once is answered from the
/// store when it comes again, not run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_failed_runs_again_when_its_request_is_sent_again() {
    let Some(shared) = Shared::new() else { return };
    let llm = strata_test_support::echo_llm(Duration::from_millis(5)).await;
    let (_overlays, served) = members(2, &llm, &shared);
    let ask = |on: usize, id: &str, text: &str| {
        let url = format!("{}/chat", served[on].base);
        let body =
            json!({"message": text, "agent": "main", "session_id": "again", "request_id": id});
        async move { common::api("POST", &url, BOSS, Some(body)).await }
    };
    // Refused by the model the first time; asked again through the other instance, then
    // through the same one.
    for (first, again, id, text) in [
        (0, 1, "again-1", "fail once: first"),
        (0, 0, "again-2", "fail once: second"),
    ] {
        let (status, v) = ask(first, id, text).await;
        assert_eq!(status, 502, "{id} the first time: {v}");
        let (status, v) = ask(again, id, text).await;
        assert_eq!(
            (status, &v["response"]),
            (200, &json!(format!("echo: {text}"))),
            "{id} sent again: {v}"
        );
    }
    // Answered ones asked again: the stored answers.
    for (on, id, text) in [
        (0, "again-1", "fail once: first"),
        (1, "again-2", "fail once: second"),
    ] {
        let (status, v) = ask(on, id, text).await;
        assert_eq!(
            (status, &v["response"]),
            (200, &json!(format!("echo: {text}"))),
            "{v}"
        );
    }
    let by_session = stored(&shared).await;
    let turns: Vec<(Option<&str>, &str)> = by_session["again"]
        .iter()
        .map(|(id, user)| (id.as_deref(), user.as_str()))
        .collect();
    assert_eq!(
        turns,
        [
            (Some("again-1"), "fail once: first"),
            (Some("again-2"), "fail once: second")
        ],
        "each request stored once, under its own id"
    );
    drop(served);
    shared.drop_now().await;
}

/// NATS goes away under load and comes back: the members reconnect, and every message is
/// still answered once (a `/chat` that failed while NATS was away is sent again with its
/// `request_id`), each session's turns stored once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_nats_loses_nothing() {
    let Some(mut shared) = Shared::new() else {
        return;
    };
    let direct = shared.nats.clone();
    let proxy =
        strata_test_support::TcpProxy::start(&strata_test_support::url_host_port(&direct)).await;
    shared.nats = format!("nats://{}", proxy.addr);
    let llm = strata_test_support::echo_llm(Duration::from_millis(20)).await;
    let (_overlays, served) = members(2, &llm, &shared);
    let bases = Arc::new(Mutex::new(
        served
            .iter()
            .map(|s| Some(s.base.clone()))
            .collect::<Vec<_>>(),
    ));
    let logs: Logs = Mutex::new(
        served
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("instance {i}"), s.log.clone()))
            .collect(),
    );
    let (sessions, per) = (20usize, 10usize);
    let mut load = start_load(&bases, "n", sessions, per);
    answered(&mut load, sessions * per / 3, &shared, &logs).await;
    proxy.cut().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.restore();
    finished(load, sessions * per, &shared, &logs).await;
    assert_once_in_order(&stored(&shared).await, sessions, per);
    drop(served);
    shared.nats = direct;
    shared.drop_now().await;
}

/// A Discord message id made from the time, as Discord makes them (what a new holder
/// fetches after is one of these).
fn snowflake(seq: u64) -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    ((ms - 1_420_070_400_000) << 22) + seq
}

/// The member holding `lease`, as `/api/cluster` shows it: its address.
async fn holder_of(base: &str, lease: &str) -> Option<String> {
    let (status, v) = common::api("GET", &format!("{base}/api/cluster"), BOSS, None).await;
    assert_eq!(status, 200, "{v}");
    v["value"]["instances"].as_array()?.iter().find_map(|m| {
        m["leases"]
            .as_array()?
            .iter()
            .any(|l| l == lease)
            .then(|| m["address"].as_str().unwrap_or_default().to_owned())
    })
}

/// Two members, one Discord bot account: only one gateway session is ever open; the
/// holder is killed; the other takes the account over within the lease time and answers
/// the message sent while nobody held it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_holds_a_discord_account_and_another_takes_it_over() {
    use std::sync::atomic::Ordering::SeqCst;
    let Some(shared) = Shared::new() else { return };
    let llm = strata_test_support::echo_llm(Duration::from_millis(20)).await;
    let fake = strata_test_support::discord::fake().await;
    let lease_secs = 2u64;
    let discord = common::fake_discord(fake.port);
    let overlays: Vec<tempfile::TempDir> = (0..2)
        .map(|_| {
            let o = member_with(&llm, &shared, &discord);
            let d = o.path();
            common::write(
                d,
                "config/agents.yaml",
                "agents:\n  main:\n    routing:\n      discord:\n        account: main\n        \
                 channels: ['100']\n",
            );
            common::write(
                d,
                "config/team.json",
                r#"{"people": [{"id": "olivia", "name": "Owner Example", "access": "owner",
                    "contacts": {"discord": "42"}}]}"#,
            );
            o
        })
        .collect();
    // A short lease, on the command line (the shared config writes the `cluster` mapping).
    let lease = format!("cluster.lease_secs={lease_secs}");
    let mut served: Vec<Option<common::Served>> = overlays
        .iter()
        .map(|o| Some(common::serve_with(o.path(), &["--set", &lease])))
        .collect();
    let bases: Vec<String> = served
        .iter()
        .map(|s| s.as_ref().map(|s| s.base.clone()).unwrap_or_default())
        .collect();
    // One gateway, and it stays one while both members run a few lease periods.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while fake.identified.lock().expect("lock").is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(2 * lease_secs)).await;
    assert_eq!(fake.identified.lock().expect("lock").len(), 1);
    assert_eq!(fake.most_connected.load(SeqCst), 1, "two gateway sessions");
    let holder = holder_of(&bases[0], "discord:main")
        .await
        .expect("a member holds the account");
    let h = bases
        .iter()
        .position(|b| *b == holder)
        .expect("holder is a member");

    let reply_to = |id: u64| {
        let fake = fake.clone();
        async move {
            for _ in 0..600 {
                let n = fake
                    .posted_in("100")
                    .iter()
                    .filter(|t| t.contains(&format!("hello {id}")))
                    .count();
                if n > 0 {
                    // Any second answer would come right behind the first.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    return fake
                        .posted_in("100")
                        .iter()
                        .filter(|t| t.contains(&format!("hello {id}")))
                        .count();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            0
        }
    };
    let say = |id: u64| {
        strata_test_support::discord::message(
            id,
            "100",
            Some("9"),
            "42",
            false,
            &format!("hello {id}"),
            false,
        )
    };
    let first = snowflake(1);
    fake.send(say(first));
    assert_eq!(reply_to(first).await, 1, "the holder answers once");

    // The holder dies; a message arrives while no member holds the account.
    if let Some(mut s) = served[h].take() {
        s.child.kill().expect("kill -9");
        let _ = s.child.wait();
    }
    let killed = std::time::Instant::now();
    while fake.connected.load(SeqCst) > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gap = snowflake(2);
    fake.send(say(gap));
    while fake.identified.lock().expect("lock").len() < 2
        && killed.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(lease_secs + 3),
        "taken over after {took:?} (lease {lease_secs} s)"
    );
    assert_eq!(
        reply_to(gap).await,
        1,
        "the message sent in the gap is answered once"
    );
    let other = 1 - h;
    assert_eq!(
        holder_of(&bases[other], "discord:main").await.as_deref(),
        Some(bases[other].as_str())
    );
    assert_eq!(fake.most_connected.load(SeqCst), 1, "two gateway sessions");
    assert_eq!(reply_to(first).await, 1, "the first message answered again");
    // Each message is one stored turn.
    let by_session = stored(&shared).await;
    let ids: Vec<Option<String>> = by_session
        .values()
        .flatten()
        .map(|(i, _)| i.clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            Some(format!("discord:{first}:main")),
            Some(format!("discord:{gap}:main"))
        ]
    );
    drop(served);
    shared.drop_now().await;
}

/// A message one agent sends another (`send_to_agent`) is shared work like a person's: it
/// goes through the queue, so the member that sent it can die while the turn runs and the
/// turn still runs once, on whichever member, under the receipt's id. (Run where it was
/// sent, the turn died with its member.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_an_agent_outlives_the_member_that_sent_it() {
    let Some(shared) = Shared::new() else { return };
    let llm = strata_test_support::echo_llm(Duration::from_millis(20)).await;
    let overlays: Vec<tempfile::TempDir> = (0..2).map(|_| member(&llm, &shared)).collect();
    let mut sender = common::serve_with(overlays[0].path(), &[]);
    let other = common::serve_with(overlays[1].path(), &[]);
    let (st, v) = common::api(
        "POST",
        &format!("{}/api/invoke", sender.base),
        BOSS,
        Some(json!({"tool": "send_to_agent", "args": {"agent": "main", "message": "a slow note for main"}})),
    )
    .await;
    assert_eq!((st, &v["value"]["ok"]), (200, &json!(true)), "{v}");
    let receipt = v["value"]["value"]["receipt"]
        .as_str()
        .expect("receipt")
        .to_owned();
    // The turn is queued at once and takes over half a second (`slow`): kill the sender
    // while it runs, wherever it runs.
    tokio::time::sleep(Duration::from_millis(250)).await;
    sender.child.kill().expect("kill -9");
    let _ = sender.child.wait();
    let mut turns = Vec::new();
    for _ in 0..300 {
        turns = stored(&shared)
            .await
            .remove("inbox-main")
            .unwrap_or_default();
        if !turns.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        turns,
        [(
            Some(format!("send_to_agent:{receipt}")),
            "a slow note for main".to_owned()
        )],
        "the message's turn, run once"
    );
    drop(other);
    shared.drop_now().await;
}

/// A member killed in the middle of a turn — after its POST went out, before the outcome was
/// recorded — does not lose the turn or repeat what it finished: the queue redelivers the turn
/// to another member, which continues from the journal the dead one kept in PostgreSQL. The
/// answered model call is not made again, and the POST goes out again only with its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_killed_mid_turn_is_continued_from_its_journal_by_another() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let Some(shared) = Shared::new() else { return };
    let (sink, landed) = strata_test_support::effect_sink().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let target = format!("{sink}/orders/7");
    let llm = strata_test_support::llm_fn(Duration::from_millis(5), move |body| {
        counted.fetch_add(1, Ordering::SeqCst);
        let done = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["role"] == "tool");
        if done {
            strata_test_support::openai::text("order 7 posted")
        } else {
            strata_test_support::openai::tool_calls(&[(
                "c1",
                "http_request",
                json!({"method": "POST", "url": target, "body": "order 7"}),
            )])
        }
    })
    .await;
    let extra = "security:\n  network:\n    allow: [127.0.0.1]\n  rate_limits:\n    mode: log\n";
    let overlays: Vec<tempfile::TempDir> =
        (0..3).map(|_| member_with(&llm, &shared, extra)).collect();
    for o in &overlays {
        common::write(
            o.path(),
            "config/agents.yaml",
            "agents:\n  main:\n    tools: [http_request]\n    capabilities: [network, secrets]\n",
        );
    }
    // Alone at first, so it takes the turn; it dies once the POST has run.
    let mut first = common::serve_env(
        overlays[0].path(),
        &[],
        &[("STRATA_TEST_CRASH_AT", "tool_ran:1")],
    );
    let body = json!({"message": "post order 7", "agent": "main", "session_id": "orders",
                      "request_id": "order-7"});
    let r = common::client()
        .post(format!("{}/chat", first.base))
        .header("X-Strata-Token", BOSS)
        .json(&body)
        .send()
        .await;
    assert!(r.is_err(), "the first member answered: {r:?}");
    let _ = first.child.wait();
    drop(first);
    let others: Vec<common::Served> = overlays[1..]
        .iter()
        .map(|o| common::serve_with(o.path(), &[]))
        .collect();
    let (st, v) = common::api(
        "POST",
        &format!("{}/chat", others[0].base),
        BOSS,
        Some(body),
    )
    .await;
    assert_eq!(
        (st, v["response"].as_str()),
        (200, Some("order 7 posted")),
        "{v}"
    );
    // Two model calls in all: the first was answered before the kill and not asked again.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let keys: std::collections::BTreeSet<Option<String>> = landed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(m, p, _)| m == "POST" && p == "/orders/7")
        .map(|(_, _, k)| k.clone())
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys.iter().all(Option::is_some), "{keys:?}");
    let by_session = stored(&shared).await;
    assert_eq!(
        by_session["orders"],
        [(Some("order-7".to_owned()), "post order 7".to_owned())],
        "the turn stored once"
    );
    let (_, j) = common::api(
        "GET",
        &format!("{}/api/turns/order-7", others[1].base),
        BOSS,
        None,
    )
    .await;
    assert_eq!(j["value"]["turn"]["outcome"], "ok", "{j}");
    assert_eq!(j["value"]["turn"]["resumed"], 1, "{j}");
    drop(others);
    shared.drop_now().await;
}

/// The durable-turn kill points in the cluster: the scripted turn of `durable.rs` (a read, an
/// append that does not honour keys, a POST that does) on one member, killed at each step
/// boundary; the client's retry goes to another member, which continues the turn from the
/// journal the dead one kept in PostgreSQL. The same assertions as on one node: the turn ends
/// once, no answered model call is made again, each effect lands once (the append at most
/// once and alerted when its outcome is unknown), the POST again only under its key.
mod every_step {
    use super::{BOSS, Shared, member_with};
    use serde_json::json;
    use strata_test_support::{FakeResponse, FakeServer};

    async fn member_killed_at(point: &str) {
        let Some(shared) = Shared::new() else { return };
        let fake = FakeServer::start().await.expect("fake llm");
        let sink = FakeServer::start().await.expect("sink");
        sink.script((0..10).map(|_| FakeResponse::ok(json!({"stored": true}))));
        crate::durable::script(&fake, &sink.url);
        let config = crate::durable::turn_config("skip");
        let members: Vec<tempfile::TempDir> = (0..2)
            .map(|_| member_with(&fake.url, &shared, &config))
            .collect();
        for m in &members {
            crate::durable::turn_files(m.path());
        }
        crate::durable::killed_at_in(
            point,
            (&fake, &sink),
            (members[0].path(), members[1].path()),
            BOSS,
        )
        .await;
        shared.drop_now().await;
    }

    crate::durable::every_kill_point!(member_killed_at);
}
