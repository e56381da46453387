//! Attachments in, files out, and the progress message of a long turn.

use std::time::Duration;

use serde_json::json;
use strata_test_support::scripted::text;

use crate::world::*;
use strata_test_support::discord::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_land_in_the_agents_workspace_within_the_size_cap() {
    let w = world(vec![("ops", routing(Some(&[])), vec![text("got it")])]).await;
    let base = format!("http://127.0.0.1:{}/cdn", w.fake.port);
    let mut m = message(2001, "100", Some("9"), "42", false, "see attached", false);
    m["d"]["attachments"] = json!([
        {"id": "1", "filename": "report.txt", "size": 22, "url": format!("{base}/report.txt"),
         "proxy_url": format!("{base}/report.txt")},
        {"id": "2", "filename": "../../etc/passwd", "size": 22, "url": format!("{base}/passwd"),
         "proxy_url": format!("{base}/passwd")},
        {"id": "3", "filename": "huge.bin", "size": 900000000u64, "url": format!("{base}/huge"),
         "proxy_url": format!("{base}/huge")}
    ]);
    w.fake.push.send(m).expect("push");
    assert_eq!(w.wait_posted(1).await.len(), 1);
    let ws = w.dir_path.join("tmp/workspaces/ops/attachments");
    assert_eq!(
        std::fs::read_to_string(ws.join("2001-report.txt")).expect("saved"),
        "contents of report.txt"
    );
    // A hostile name stays inside the workspace.
    assert_eq!(
        std::fs::read_to_string(ws.join("2001-_.._etc_passwd")).expect("saved"),
        "contents of passwd"
    );
    let asked = w.providers["ops"].requests()[0]
        .messages
        .last()
        .map(|m| m.content.clone())
        .unwrap_or_default();
    assert!(asked.starts_with("see attached"), "{asked}");
    assert!(
        asked.contains(
            "[attachment saved: tmp/workspaces/ops/attachments/2001-report.txt (22 bytes)]"
        ),
        "{asked}"
    );
    assert!(asked.contains("[attachment huge.bin not saved"), "{asked}");
    assert!(!ws.join("2001-huge.bin").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_turn_shows_a_progress_message_naming_the_tool_then_removes_it() {
    let w = world_with(
        vec![(
            "ops",
            routing(Some(&[])),
            vec![
                strata_test_support::scripted::calls(&[("c1", "slow_report", json!({}))]),
                text("Here is the report."),
            ],
        )],
        |c| c.connectors.discord.progress_after_seconds = 1,
        None,
    )
    .await;
    w.fake
        .push
        .send(message(
            8801,
            "100",
            Some("9"),
            "42",
            false,
            "report please",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(2).await;
    assert_eq!(posted.len(), 2, "{posted:?}");
    assert_eq!(posted[0].1, "⏳ ops is working… (using `slow_report`)");
    assert_eq!(posted[1].1, "Here is the report.");
    // The progress message was deleted once the reply was there.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let deleted = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, _)| m == "DELETE" && p.starts_with("/api/v10/channels/100/messages/"))
        .count();
    assert_eq!(deleted, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_named_in_a_reply_are_attached_from_the_roots_only() {
    let w = world(vec![(
        "ops",
        routing(Some(&[])),
        vec![text("Here it is.\n[attach: tmp/out/report.csv]\n[attach: config/secrets.enc]\n[attach: ../etc/passwd]")],
    )])
    .await;
    std::fs::create_dir_all(w.dir_path.join("tmp/out")).expect("dir");
    std::fs::write(w.dir_path.join("tmp/out/report.csv"), "a,b\n1,2\n").expect("file");
    std::fs::create_dir_all(w.dir_path.join("config")).expect("dir");
    std::fs::write(w.dir_path.join("config/secrets.enc"), "SECRET").expect("file");
    w.fake
        .push
        .send(message(
            5501,
            "100",
            Some("9"),
            "42",
            false,
            "the report?",
            false,
        ))
        .expect("push");
    w.wait_posted(1).await;
    let rec = w.fake.rest.lock().expect("lock").clone();
    let (_, _, v) = rec
        .iter()
        .find(|(m, p, _)| m == "POST" && p.ends_with("/messages"))
        .expect("posted");
    assert_eq!(
        v["content"],
        "Here it is.\n(could not attach config/secrets.enc)\n(could not attach ../etc/passwd)"
    );
    let files = v["_files"].as_array().expect("files");
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0]["name"], "report.csv");
    assert_eq!(files[0]["body"], "a,b\n1,2\n");
    assert!(!format!("{v}").contains("SECRET"));
}
