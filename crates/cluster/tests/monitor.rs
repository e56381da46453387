//! Two members' behaviour monitors over a real NATS server: a pattern whose steps happen on
//! different members is seen as if on one instance, and alerted by the member whose call
//! completes it.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use strata_engine::Env;
use strata_engine::config::{ClusterConfig, Config};
use strata_runtime::Invoker;

struct Member {
    _cluster: Arc<strata_cluster::Cluster>,
    invoker: Arc<Invoker>,
    _sharing: tokio::task::JoinHandle<()>,
}

async fn member(nats: &str, stream: &str, id: &str, dir: &std::path::Path) -> Member {
    let mut config = Config::default();
    let m = &mut config.security.content_safety.monitor;
    m.sensitive_distinct = 2;
    m.spike_per_minute = 1000;
    m.baseline_calls = 1000;
    let env = Arc::new(Env::new(config, dir.to_path_buf(), dir.join(id)));
    let invoker = Arc::new(Invoker::new(
        Arc::new(strata_runtime::Registry::empty()),
        env,
        Arc::new(strata_engine::audit::NoAudit),
    ));
    let cfg = ClusterConfig {
        enabled: true,
        instance_id: Some(id.into()),
        stream: stream.into(),
        ..ClusterConfig::default()
    };
    let cluster = strata_cluster::Cluster::connect(
        &cfg,
        nats,
        dir,
        strata_cluster::Shared {
            store: Arc::new(strata_engine::session::InMemoryStore::default()),
            members: None,
            address: None,
            events: None,
        },
    )
    .await
    .expect("connect");
    let sharing = cluster
        .share_monitor(invoker.clone())
        .await
        .expect("share the monitor");
    Member {
        _cluster: cluster,
        invoker,
        _sharing: sharing,
    }
}

/// Waits until `heard` has had `agent`'s observation from member `from` (others are passed
/// over), and a moment more for the members' own subscriptions. False when it did not come:
/// core NATS delivers at most once, and a client the server found too slow to read (a loaded
/// CI machine) loses what was sent meanwhile — the sharing is best effort by design, so the
/// test then repeats the step under a fresh agent name.
async fn published(heard: &mut async_nats::Subscriber, from: &str, agent: &str) -> bool {
    let wanted = async {
        while let Some(m) = heard.next().await {
            let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap_or_default();
            if v["from"] == from && v["agent"] == agent {
                return;
            }
        }
        panic!("the subscription closed");
    };
    if tokio::time::timeout(Duration::from_secs(10), wanted)
        .await
        .is_err()
    {
        eprintln!("{from}'s observation of {agent} not heard within 10 s; repeating the step");
        return false;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_spread_over_members_is_seen_as_on_one() {
    let Some(nats) = strata_test_support::nats_url() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let stream = strata_test_support::unique_schema();
    let (a, b) = (
        member(&nats, &stream, "a", dir.path()).await,
        member(&nats, &stream, "b", dir.path()).await,
    );
    // A listener of our own: once it has heard a's observation, b has too (give it a moment).
    let client = async_nats::connect(nats.trim_start_matches("nats://"))
        .await
        .expect("nats");
    let mut heard = client
        .subscribe(format!("{stream}.monitor"))
        .await
        .expect("subscribe");
    // The server has the subscription once it has answered a PING sent after it.
    client.flush().await.expect("flush");
    let rules = |f: Vec<strata_runtime::monitor::Finding>| -> Vec<&'static str> {
        f.into_iter().map(|f| f.rule).collect()
    };

    // Web content read on a; a sensitive call on b right after. Each step gets a fresh agent
    // name per attempt, so an attempt whose observation was lost leaves no state behind.
    let mut seen = false;
    for attempt in 0..3 {
        let agent = format!("helper{attempt}");
        a.invoker.monitor().web_read(&agent);
        if !published(&mut heard, "a", &agent).await {
            continue;
        }
        let found = b.invoker.monitor().observe(&agent, "terminal_exec", true);
        assert_eq!(rules(found), vec!["sensitive_after_web"]);
        seen = true;
        break;
    }
    assert!(seen, "a's web read never reached b in three attempts");

    // Two distinct sensitive tools, one on each member: a burst, alerted by the second.
    let mut seen = false;
    for attempt in 0..3 {
        let agent = format!("coder{attempt}");
        let first = a.invoker.monitor().observe(&agent, "write_file", true);
        assert!(first.is_empty(), "{first:?}");
        if !published(&mut heard, "a", &agent).await {
            continue;
        }
        let second = b.invoker.monitor().observe(&agent, "terminal_exec", true);
        assert_eq!(rules(second), vec!["sensitive_burst"]);
        seen = true;
        break;
    }
    assert!(seen, "a's call never reached b in three attempts");

    // A lone instance with the same calls sees neither pattern: the sharing did it.
    let lone = strata_runtime::monitor::Monitor::new({
        let mut c = Config::default().security.content_safety.monitor;
        c.sensitive_distinct = 2;
        c.spike_per_minute = 1000;
        c.baseline_calls = 1000;
        c
    });
    assert!(lone.observe("coder", "terminal_exec", true).is_empty());

    if let Ok(nc) = async_nats::connect(nats.trim_start_matches("nats://")).await {
        let _ = async_nats::jetstream::new(nc).delete_stream(&stream).await;
    }
}
