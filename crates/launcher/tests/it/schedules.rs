//! Schedules through the binary: an agent's heartbeat speaks in its home channel on the fake
//! Discord only when it has something to say (`NO_REPLY` posts nothing).

use crate::common;

use std::time::Duration;

use strata_test_support::{FakeServer, openai};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_posts_only_when_it_has_something_to_say() {
    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([
        openai::text("NO_REPLY"),
        openai::text("The disk is 91% full."),
        openai::text("NO_REPLY"),
    ]);
    let discord = strata_test_support::discord::fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("agents/ops")).expect("mkdir");
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{llm}connectors:\n  discord:\n    api_proxy: 127.0.0.1:{port}\n    plain_http: true\n    \
             gateway_url: ws://127.0.0.1:{port}\n    accounts:\n      main:\n        token: env:PATH\n",
            llm = common::fake_llm(&llm.url, "literal-test-key", "fake-model"),
            port = discord.port,
        ),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  ops:\n    routing:\n      discord:\n        account: main\n        \
         channels: ['100']\n        home_channel: '100'\n    heartbeat:\n      every: 1s\n",
    );
    common::write(
        d,
        "agents/ops/HEARTBEAT.md",
        "Say so when the disk is more than 90% full.\n",
    );
    let served = common::serve(d);
    // Three beats: two answered NO_REPLY, one with something to say.
    for _ in 0..100 {
        if llm.requests().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        llm.requests().len() >= 3,
        "only {} beats",
        llm.requests().len()
    );
    let asked = llm.requests()[0].body["messages"].to_string();
    assert!(asked.contains("more than 90% full"), "{asked}");
    assert_eq!(
        discord.posted_in("100"),
        vec!["The disk is 91% full.".to_owned()],
        "NO_REPLY is never posted"
    );
    drop(served);
}
