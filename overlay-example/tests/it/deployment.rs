//! The example deployment binary: every layer linked, precedence visible, config valid.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_strata-example");

/// Runs the binary on its own overlay, with runtime data in a temp dir (never in the repo).
fn run(data: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    for (k, _) in std::env::vars() {
        if k.starts_with("STRATA_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .expect("run")
}

fn json(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("json")
}

#[test]
fn tools_from_every_layer_with_their_origin() {
    let data = tempfile::tempdir().expect("tmp");
    let v = json(&run(data.path(), &["tools", "--json"]));
    let layer_of = |name: &str| -> String {
        v["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not linked: {v}"))["layer"]
            .as_str()
            .expect("layer")
            .to_owned()
    };
    assert_eq!(layer_of("read_file"), "core");
    assert_eq!(layer_of("list_files"), "core");
    assert_eq!(layer_of("service_health"), "module:ops");
    for t in [
        "mind_api",
        "fleet_note",
        "ai_models",
        "upload_file_to_cms",
        "call_agent",
    ] {
        assert_eq!(layer_of(t), "module:fleet", "{t}");
    }
    assert_eq!(layer_of("agent_brief"), "overlay");
    // The overlay's system_info shadows the module's.
    assert_eq!(layer_of("system_info"), "overlay");
    let names: Vec<&str> = v["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert_eq!(names.iter().filter(|n| **n == "system_info").count(), 1);
}

#[test]
fn the_shadowing_tool_is_the_one_that_runs() {
    let data = tempfile::tempdir().expect("tmp");
    let v = json(&run(
        data.path(),
        &["invoke", "--tool", "system_info", "--json"],
    ));
    assert_eq!(v["status"], "ok");
    assert_eq!(v["value"]["deployment"], "example");
    assert!(
        v["value"]["cpus"].as_u64().expect("cpus") >= 1,
        "module data kept: {v}"
    );
}

#[test]
fn overlay_tool_reads_overlay_config() {
    let data = tempfile::tempdir().expect("tmp");
    let v = json(&run(
        data.path(),
        &[
            "invoke",
            "--tool",
            "agent_brief",
            "--json",
            "--args",
            r#"{"agent":"main"}"#,
        ],
    ));
    assert_eq!(v["value"]["name"], "Main");
    let tools = v["value"]["tools"].as_array().expect("a list, not `all`");
    assert!(tools.iter().any(|t| t == "system_info"), "{tools:?}");
    assert!(
        v["value"]["identity"]
            .as_str()
            .expect("identity")
            .starts_with("# Main")
    );
    let o = run(
        data.path(),
        &[
            "invoke",
            "--tool",
            "agent_brief",
            "--args",
            r#"{"agent":"ghost"}"#,
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no agent `ghost`"));
}

#[test]
fn example_config_is_valid_and_doctor_passes() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().expect("tmp");
    // A data dir other users can read fails the preflight, naming the fix.
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = run(data.path(), &["doctor"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("is readable by other users (755): chmod 700"),
        "{text}"
    );
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let o = run(data.path(), &["doctor"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
    assert!(text.contains("shadows module:ops"), "{text}");

    let v = json(&run(data.path(), &["config", "show", "--origin", "--json"]));
    assert_eq!(
        v["modules.ops.timeout_ms"]["origin"],
        "overlay:config/config.yaml"
    );
    assert_eq!(v["modules.fleet.mind_token"]["origin"], "module:fleet");
    // …whose vault reference is not warned about while the Mind is unused (no mind_url)…
    assert!(!text.contains("mind-token"), "{text}");
    // …and is, as a warning (a module default), once the overlay's layers point at a Mind.
    let o = run(
        data.path(),
        &[
            "--set",
            "modules.fleet.mind_url=http://127.0.0.1:9",
            "doctor",
        ],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(
            "warn `modules.fleet.mind_token` (set by module:fleet) refers to vault key `mind-token`"
        ),
        "{text}"
    );
    assert_eq!(v["team.people"]["origin"], "overlay:config/team.json");
    assert_eq!(
        v["agents.main.tools"]["origin"],
        "overlay:config/agents.yaml"
    );
}

#[test]
fn docs_tools_md_lists_every_core_and_module_tool() {
    let data = tempfile::tempdir().expect("tmp");
    let v = json(&run(data.path(), &["tools", "--json"]));
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/TOOLS.md"))
        .expect("docs/TOOLS.md");
    let missing: Vec<&str> = v["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter(|t| t["layer"] != "overlay" && t["layer"] != "runtime")
        .filter_map(|t| t["name"].as_str())
        .filter(|n| !doc.contains(&format!("| `{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/TOOLS.md has no row for {missing:?}"
    );
}

/// The built-in `health_check` job on the example deployment: the ops module's service
/// (`strata-api` on port 8770, not where this `serve` listens) is found down on the first
/// check and that is an alert in the audit log; the run is in the schedule's history.
#[test]
fn the_health_check_job_alerts_when_a_service_is_down() {
    let data = tempfile::tempdir().expect("tmp");
    let mut serve = Command::new(BIN);
    for (k, _) in std::env::vars() {
        if k.starts_with("STRATA_") {
            serve.env_remove(k);
        }
    }
    let mut child = serve
        .arg("--data-dir")
        .arg(data.path())
        .args([
            "serve",
            "--set",
            "server.port=0",
            "--set",
            "schedules.health_check.every=1s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve");
    let mut alerted = false;
    let mut ran = false;
    for _ in 0..150 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let h = run(
            data.path(),
            &["schedule", "history", "health_check", "--json"],
        );
        ran = h.status.success()
            && serde_json::from_slice::<Value>(&h.stdout)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .is_some_and(|runs| runs.iter().any(|r| r["status"] == "ok"));
        let events = run(data.path(), &["events", "--limit", "200"]);
        alerted = String::from_utf8_lossy(&events.stdout).lines().any(|l| {
            l.contains("\"event\":\"alert\"")
                && l.contains("\"kind\":\"health\"")
                && l.contains("strata-api is down")
        });
        if ran && alerted {
            break;
        }
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    assert!(ran, "no health_check run recorded");
    assert!(alerted, "no alert that strata-api is down");
}

/// The README's completions line works on a fresh account, where the completions directory
/// does not exist yet.
#[test]
fn the_readme_completions_line_works_without_the_directory() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README");
    let line = readme
        .lines()
        .find(|l| l.contains("completions bash >"))
        .expect("the README's completions line");
    let command = line
        .split("  #")
        .next()
        .unwrap_or(line)
        .replace("cargo run -p strata-example --", BIN);
    let home = tempfile::tempdir().expect("home");
    let o = Command::new("bash")
        .args(["-ec", &command])
        .env("HOME", home.path())
        .output()
        .expect("bash");
    assert!(
        o.status.success(),
        "`{command}`: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let script = std::fs::read_to_string(
        home.path()
            .join(".local/share/bash-completion/completions/strata-example"),
    )
    .expect("the completion script");
    assert!(script.contains("strata-example"), "{script}");
}

/// A tool in a file of its own under src/tools/ (`agent_brief.rs`) is compiled in by build.rs
/// with no `mod` line, and doctor finds every file there registered a tool.
#[test]
fn a_tool_file_needs_no_mod_line() {
    let mod_rs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/tools/mod.rs"))
        .expect("mod.rs");
    assert!(!mod_rs.contains("mod agent_brief"), "{mod_rs}");
    let data = tempfile::tempdir().expect("tmp");
    let v = json(&run(data.path(), &["tools", "--json"]));
    assert!(v.to_string().contains("\"agent_brief\""), "{v}");
    let o = run(data.path(), &["doctor"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("ok   src/tools: each of its 1 file(s) registered a tool"),
        "{text}"
    );
}
