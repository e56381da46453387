//! CLI parity: `tools`, `inspect`, `invoke`, `events` with `--remote` against a running
//! server give the local commands' output and exit codes; `events` locally.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_strata");

struct Served {
    dir: tempfile::TempDir,
    server: common::Served,
    url: String,
    token: String,
}

fn serve() -> Served {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("knowledgebase")).expect("mkdir");
    std::fs::write(dir.path().join("knowledgebase/a.md"), "alpha").expect("w");
    let server = common::serve(dir.path());
    let token = std::fs::read_to_string(dir.path().join("data/api-token"))
        .expect("token")
        .trim()
        .to_owned();
    let url = server.base.clone();
    Served {
        dir,
        server,
        url,
        token,
    }
}

fn remote(s: &Served, args: &[&str]) -> Output {
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["--remote", &s.url, "--token", &s.token]);
    // No --overlay: remote commands need no local overlay.
    Command::new(BIN)
        .current_dir("/")
        .args(&full)
        .env_remove("STRATA_OVERLAY")
        .output()
        .expect("run")
}

#[test]
fn remote_commands_match_local_contracts() {
    let s = serve();
    let _alive = &s.server;
    let o = remote(&s, &["tools", "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let local = common::strata(s.dir.path())
        .args(["tools", "--json"])
        .output()
        .expect("run");
    let local: Value = serde_json::from_slice(&local.stdout).expect("json");
    assert!(
        v["tools"].as_array().expect("tools").len() > strata_tools::link().len(),
        "every core tool (strata-tools', the launcher's, the browser's), listed remotely"
    );
    assert_eq!(v["tools"], local["tools"], "the same list as locally");

    let o = remote(&s, &["inspect", "--tool", "read_file"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["layer"], "core");
    assert_eq!(
        remote(&s, &["inspect", "--tool", "nope"]).status.code(),
        Some(2)
    );

    let o = remote(
        &s,
        &[
            "invoke",
            "--tool",
            "read_file",
            "--args",
            r#"{"path":"knowledgebase/a.md"}"#,
            "--json",
            "--request-id",
            "rr-1",
        ],
    );
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(common::sorted_keys(&v), common::INVOKE_RESULT_KEYS);
    assert_eq!(v["value"]["content"], "alpha");
    assert_eq!(
        remote(&s, &["invoke", "--tool", "nope"]).status.code(),
        Some(1)
    );
    assert_eq!(
        remote(&s, &["invoke", "--tool", "read_file", "--args", "[1]"])
            .status
            .code(),
        Some(2)
    );

    let o = remote(&s, &["events", "--limit", "5"]);
    assert_eq!(o.status.code(), Some(0));
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert!(lines.iter().any(|e| e["request_id"] == "rr-1"), "{lines:?}");

    // A wrong token: a readable error and exit 1.
    let o = Command::new(BIN)
        .args(["tools", "--remote", &s.url, "--token", "wrong"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unauthorized (401)"));

    // The same events, read locally from the audit file.
    let o = Command::new(BIN)
        .arg("--overlay")
        .arg(s.dir.path())
        .args(["events", "--limit", "3"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0));
    let mut local: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    // The wrong token left a refusal record last.
    let refusal = local.pop().expect("three records");
    assert_eq!(
        (refusal["event"].as_str(), refusal["kind"].as_str()),
        (Some("refusal"), Some("unauthenticated"))
    );
    assert_eq!(local.len(), 2);
    assert_eq!(
        (
            local[0]["request_id"].as_str(),
            local[0]["principal"].as_str()
        ),
        (Some("rr-1"), Some("token:operator"))
    );
    assert_eq!(local[1]["status"], "unknown_tool");
}

#[test]
fn events_follow_prints_new_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut child = Command::new(BIN)
        .arg("--overlay")
        .arg(dir.path())
        .args(["events", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("follow");
    std::thread::sleep(Duration::from_millis(300));
    let o = Command::new(BIN)
        .arg("--overlay")
        .arg(dir.path())
        .args(["invoke", "--tool", "nope", "--request-id", "followed"])
        .output()
        .expect("invoke");
    assert_eq!(o.status.code(), Some(1));
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    let v: Value = serde_json::from_str(&line).expect("json");
    assert_eq!(v["request_id"], "followed");
    let _ = child.kill();
    let _ = child.wait();
}
