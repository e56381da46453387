//! Our MCP server driven by the official Python MCP client (`pip install mcp`), over stdio
//! (`strata mcp serve --stdio`) and over streamable HTTP (`strata serve`, `/mcp`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn script() -> PathBuf {
    strata_test_support::fixture("mcp_client.py")
}

fn overlay() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("knowledgebase")).expect("mkdir");
    std::fs::write(dir.path().join("knowledgebase/note.md"), "hello mcp\n").expect("w");
    dir
}

fn check(report: &Value) {
    assert_eq!(report["server"], "strata");
    assert_eq!(report["tools"], serde_json::json!(common::core_tools()));
    assert_eq!(report["schema_required"], serde_json::json!(["path"]));
    assert_eq!(report["ok"]["is_error"], false);
    let ok: Value =
        serde_json::from_str(report["ok"]["text"].as_str().expect("text")).expect("json");
    assert_eq!(ok["content"], "hello mcp\n");
    assert_eq!(report["bad"]["is_error"], true);
    assert!(
        report["bad"]["text"]
            .as_str()
            .expect("t")
            .starts_with("validation_error: invalid argument `path`")
    );
    assert_eq!(report["unknown"]["is_error"], true);
    assert!(
        report["unknown"]["text"]
            .as_str()
            .expect("t")
            .starts_with("unknown_tool")
    );
}

fn run_client(args: &[&str]) -> Value {
    let out = Command::new("python3")
        .arg(script())
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("a report line");
    serde_json::from_str(last).expect("report json")
}

fn audit_tools(dir: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(dir.join("data/audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (
                v["tool"].as_str().unwrap_or_default().to_owned(),
                v["status"].as_str().unwrap_or_default().to_owned(),
                v["principal"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn python_client_over_stdio() {
    if !common::python_mcp_available() {
        return;
    }
    let ov = overlay();
    let overlay_arg = ov.path().display().to_string();
    let report = run_client(&[
        "stdio",
        BIN,
        "--overlay",
        &overlay_arg,
        "mcp",
        "serve",
        "--stdio",
    ]);
    check(&report);
    let audit = audit_tools(ov.path());
    assert!(
        audit.contains(&("read_file".into(), "ok".into(), "operator".into())),
        "{audit:?}"
    );
    assert!(audit.contains(&(
        "read_file".into(),
        "validation_error".into(),
        "operator".into()
    )));
}

#[test]
fn python_client_over_streamable_http_with_the_same_tokens() {
    if !common::python_mcp_available() {
        return;
    }
    let ov = overlay();
    let served = common::serve(ov.path());
    let url = served.mcp.clone();
    let token = std::fs::read_to_string(ov.path().join("data/api-token")).expect("per-boot token");

    let report = run_client(&["http", &url, token.trim()]);
    check(&report);
    // The server is still running: its audit writer may not have appended the line yet.
    common::audit_when(ov.path(), |t| t.contains(r#""principal":"token:operator""#));
    let audit = audit_tools(ov.path());
    assert!(
        audit.contains(&("read_file".into(), "ok".into(), "token:operator".into())),
        "{audit:?}"
    );

    // A wrong token is refused like on the control API.
    let out = Command::new("python3")
        .arg(script())
        .args(["http", &url, "not-the-token"])
        .output()
        .expect("python3");
    assert!(!out.status.success());

    drop(served);
}

/// `strata serve` starts the configured external MCP servers and, when it stops, closes them:
/// no server process outlives it.
#[test]
fn serve_stops_its_external_mcp_servers() {
    if !strata_test_support::python_has("mcp.server.mcpserver", "mcp") {
        return;
    }
    let ov = overlay();
    let pid_file = ov.path().join("server.pid");
    let server = strata_test_support::fixture("mcp_pid_server.py");
    let config = serde_json::json!({"mcp": {"servers": {"ext": {
        "transport": "stdio",
        "command": "python3",
        "args": [server.display().to_string(), pid_file.display().to_string()],
    }}}});
    std::fs::create_dir_all(ov.path().join("config")).expect("mkdir");
    std::fs::write(
        ov.path().join("config/config.yaml"),
        serde_json::to_string(&config).expect("yaml is a superset of json"),
    )
    .expect("w");
    let mut served = common::serve(ov.path());
    let pid = std::fs::read_to_string(&pid_file)
        .expect("the server started before serve announced itself");
    let proc_dir = PathBuf::from(format!("/proc/{}", pid.trim()));
    assert!(proc_dir.exists(), "the MCP server runs");

    let stop = Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(stop.success());
    let status = served.child.wait().expect("wait");
    assert!(status.success(), "serve stops cleanly: {status}");
    // The child was reaped by serve; once serve is gone nothing can be left of it but a
    // process that kept running.
    assert!(
        !proc_dir.exists(),
        "MCP server {} outlived serve",
        pid.trim()
    );
}
