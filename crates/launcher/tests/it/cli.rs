//! The real `strata` binary: exit codes, output contracts, config precedence through the
//! environment, and graceful shutdown.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

struct Overlay {
    dir: tempfile::TempDir,
}

impl Overlay {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        for sub in ["config", "agents/main", "tmp", "knowledgebase"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        std::fs::write(dir.path().join("knowledgebase/note.md"), "hello").expect("w");
        std::fs::write(dir.path().join("agents/main/AGENTS.md"), "# Main").expect("w");
        Overlay { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.path().join(rel), text).expect("write");
    }

    /// `strata --overlay <dir> ARGS` with a clean STRATA_* environment plus `env`.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        common::strata(self.path())
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("run strata")
    }
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn exit_codes() {
    let ov = Overlay::new();
    let cases: &[(&[&str], i32)] = &[
        (&["tools"], 0),
        (&["tools", "--json"], 0),
        (&["inspect", "--tool", "read_file"], 0),
        (&["inspect", "--tool", "read_file", "--json"], 0),
        (
            &[
                "invoke",
                "--tool",
                "read_file",
                "--args",
                r#"{"path":"knowledgebase/note.md"}"#,
            ],
            0,
        ),
        // Operational: unknown tool on invoke, a tool that fails, a validation error.
        (&["invoke", "--tool", "no_such_tool"], 1),
        (
            &[
                "invoke",
                "--tool",
                "read_file",
                "--args",
                r#"{"path":"../etc/passwd"}"#,
            ],
            1,
        ),
        (
            &["invoke", "--tool", "read_file", "--args", r#"{"path": 5}"#],
            1,
        ),
        // User input: unknown tool on inspect, missing --tool, bad --args, unknown subcommand.
        (&["inspect", "--tool", "no_such_tool"], 2),
        (&["inspect"], 2),
        (&["invoke"], 2),
        (&["invoke", "--tool", "read_file", "--args", "{not json"], 2),
        (&["invoke", "--tool", "read_file", "--args", "[1,2]"], 2),
        (&["invoke", "--tool", "read_file", "--args", "\"text\""], 2),
        (&["frobnicate"], 2),
        (&["--help"], 0),
    ];
    for (args, want) in cases {
        let o = ov.run(args, &[]);
        assert_eq!(code(&o), *want, "strata {args:?}\nstderr: {}", stderr(&o));
    }
}

#[test]
fn invoke_json_has_exactly_the_contract_keys() {
    let ov = Overlay::new();
    let o = ov.run(
        &[
            "invoke",
            "--tool",
            "read_file",
            "--json",
            "--request-id",
            "rid-7",
            "--args",
            r#"{"path":"knowledgebase/note.md"}"#,
        ],
        &[],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = stdout_json(&o);
    assert_eq!(common::sorted_keys(&v), common::INVOKE_RESULT_KEYS);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["ok"], true);
    assert_eq!(v["request_id"], "rid-7");
    assert_eq!(v["value"]["content"], "hello");

    // A failing call still prints the result object, with exit 1.
    let o = ov.run(&["invoke", "--tool", "nope", "--json"], &[]);
    assert_eq!(code(&o), 1);
    let v = stdout_json(&o);
    assert_eq!(v["status"], "unknown_tool");
    assert_eq!(v["ok"], false);
    assert!(v["error"].as_str().expect("error").contains("nope"));

    // Every call is audited, in the data dir.
    let audit = std::fs::read_to_string(ov.path().join("data/audit.jsonl")).expect("audit");
    let recs: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0]["request_id"], "rid-7");
    assert_eq!(recs[1]["status"], "unknown_tool");
}

#[test]
fn tools_json_lists_specs_with_layers() {
    let ov = Overlay::new();
    let o = ov.run(&["tools", "--json"], &[]);
    let v = stdout_json(&o);
    let tools = v["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    // Exactly the core tools, sorted, nothing else in this binary.
    assert!(strata_tools::link().is_sorted());
    assert_eq!(
        names,
        common::core_tools(),
        "sorted, core only in this binary"
    );
    for t in tools {
        assert_eq!(t["layer"], "core");
        assert_eq!(t["input_schema"]["type"], "object");
        for key in [
            "description",
            "capabilities",
            "side_effects",
            "hitl",
            "web_facing",
        ] {
            assert!(t.get(key).is_some(), "missing {key} in {t}");
        }
    }
}

fn port(ov: &Overlay, args: &[&str], env: &[(&str, &str)]) -> (Value, String) {
    let mut full = vec!["config", "show", "--origin", "--json"];
    full.extend_from_slice(args);
    let o = ov.run(&full, env);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = stdout_json(&o);
    let entry = &v["server.port"];
    (
        entry["value"].clone(),
        entry["origin"].as_str().expect("origin").to_owned(),
    )
}

#[test]
fn precedence_defaults_overlay_profile_env_flags() {
    let ov = Overlay::new();
    assert_eq!(port(&ov, &[], &[]), (Value::from(8770), "core".into()));
    ov.write("config/config.yaml", "server:\n  port: 9001\n");
    assert_eq!(
        port(&ov, &[], &[]),
        (Value::from(9001), "overlay:config/config.yaml".into())
    );
    ov.write("config/config.ops.yaml", "server:\n  port: 9002\n");
    assert_eq!(
        port(&ov, &["--profile", "ops"], &[]),
        (Value::from(9002), "profile:config/config.ops.yaml".into())
    );
    // The profile can also come from the environment.
    assert_eq!(
        port(&ov, &[], &[("STRATA_PROFILE", "ops")]).0,
        Value::from(9002)
    );
    let env = [("STRATA_SERVER__PORT", "9003")];
    assert_eq!(
        port(&ov, &["--profile", "ops"], &env),
        (Value::from(9003), "env:STRATA_SERVER__PORT".into())
    );
    assert_eq!(
        port(
            &ov,
            &["--profile", "ops", "--set", "server.port=9004"],
            &env
        ),
        (Value::from(9004), "flag:--set server.port".into())
    );
    // Variables that are not config (STRATA_OVERLAY, STRATA_VAULT_*) are not read as keys.
    assert_eq!(
        port(&ov, &[], &[("STRATA_VAULT_PASSPHRASE", "x")]).0,
        Value::from(9001)
    );
}

#[test]
fn config_errors_are_clear_and_fail_with_1() {
    let ov = Overlay::new();
    ov.write("config/config.yaml", "server:\n  prot: 1\n");
    let o = ov.run(&["tools"], &[]);
    assert_eq!(code(&o), 1);
    let e = stderr(&o);
    assert!(
        e.contains("config/config.yaml") && e.contains("did you mean `server.port`?"),
        "{e}"
    );

    let ov = Overlay::new();
    let o = ov.run(&["tools"], &[("STRATA_SERVR__PORT", "1")]);
    assert_eq!(code(&o), 1);
    let e = stderr(&o);
    assert!(
        e.contains("STRATA_SERVR") && e.contains("did you mean `server`?"),
        "{e}"
    );
}

#[test]
fn config_show_masks_secrets() {
    let ov = Overlay::new();
    ov.write(
        "config/config.yaml",
        "defaults:\n  llm:\n    provider: openai\n    api_key: sk-not-for-your-eyes\n",
    );
    for args in [
        &["config", "show"][..],
        &["config", "show", "--json"],
        &["config", "show", "--origin"],
    ] {
        let o = ov.run(args, &[]);
        assert_eq!(code(&o), 0);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            !text.contains("sk-not-for-your-eyes"),
            "{args:?} leaked: {text}"
        );
        assert!(text.contains("********"), "{args:?}: {text}");
    }
}

#[test]
fn config_show_origin_prints_numbers_as_written_in_100_columns() {
    let ov = Overlay::new();
    ov.write(
        "config/config.yaml",
        "defaults:\n  llm:\n    provider: openai\n    temperature: 0.2\n",
    );
    ov.write(
        "config/agents.yaml",
        &format!(
            "agents:\n  main:\n    instruction: \"{}\"\n",
            "long words ".repeat(30)
        ),
    );
    let o = ov.run(&["config", "show", "--origin"], &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("defaults.llm.temperature = 0.2 ")),
        "{text}"
    );
    assert!(!text.contains("0.20000000298023224"), "{text}");
    let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest <= 100, "a line of {widest} columns:\n{text}");
    // --json has the value whole, and the number as written too.
    let o = ov.run(&["config", "show", "--origin", "--json"], &[]);
    let v = stdout_json(&o);
    assert_eq!(v["defaults.llm.temperature"]["value"], json!(0.2));
    assert_eq!(
        v["agents.main.instruction"]["value"],
        json!("long words ".repeat(30))
    );
}

#[test]
fn doctor_passes_and_fails() {
    let ov = Overlay::new();
    let o = ov.run(&["doctor"], &[]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stdout));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("ok   data dir"), "{text}");
    assert!(text.contains("no LLM provider configured"), "{text}");

    // A data dir that cannot be created: a regular file stands in its way.
    ov.write("blocker", "x");
    let o = ov.run(
        &[
            "doctor",
            "--data-dir",
            ov.path().join("blocker/data").to_str().expect("utf8"),
        ],
        &[],
    );
    assert_eq!(code(&o), 1);
    assert!(String::from_utf8_lossy(&o.stdout).contains("FAIL data dir"));

    // A broken config is a failure too, reported on stdout like the other checks.
    ov.write("config/config.yaml", "tools: [\n");
    let o = ov.run(&["doctor"], &[]);
    assert_eq!(code(&o), 1);
    assert!(String::from_utf8_lossy(&o.stdout).contains("FAIL config"));
}

/// Whichever command writes first makes the data directory private: `strata invoke` on a fresh
/// overlay used to create it with the umask's 0755 through the audit log and the store, and
/// the next `doctor` failed on it.
#[test]
fn the_first_command_makes_the_data_dir_private() {
    use std::os::unix::fs::PermissionsExt;
    let ov = Overlay::new();
    let o = ov.run(&["invoke", "--tool", "current_time"], &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let data = ov.path().join("data");
    let mode = std::fs::metadata(&data)
        .expect("data dir")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    let o = ov.run(&["doctor"], &[]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!text.contains("readable by other users"), "{text}");
}

#[test]
fn missing_overlay_is_an_operational_error() {
    let o = Command::new(BIN)
        .args(["--overlay", "/definitely/not/an/overlay", "tools"])
        .output()
        .expect("run");
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("does not exist"));
}

fn wait_for_line(reader: &mut impl BufRead, needle: &str, deadline: Instant) -> Vec<String> {
    let mut seen = Vec::new();
    let mut line = String::new();
    while Instant::now() < deadline {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {
                seen.push(line.trim_end().to_owned());
                if line.contains(needle) {
                    return seen;
                }
            }
            Err(_) => break,
        }
    }
    panic!("`{needle}` never appeared; saw:\n{}", seen.join("\n"));
}

#[test]
fn serve_runs_until_sigterm_and_stops_cleanly() {
    let ov = Overlay::new();
    let (mut child, mut err) = common::spawn_serve(ov.path(), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let seen = wait_for_line(&mut err, "strata is running", deadline);
    let all = seen.join("\n");
    assert!(all.contains("registry loaded"), "{all}");
    assert!(all.contains("No LLM provider is configured"), "{all}");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    wait_for_line(
        &mut err,
        "stopped",
        Instant::now() + Duration::from_secs(30),
    );
    let exit = child.wait().expect("wait");
    assert_eq!(exit.code(), Some(0));
}

#[test]
fn serve_refuses_a_public_bind_without_a_token() {
    let ov = Overlay::new();
    let o = ov.run(
        &[
            "serve",
            "--set",
            "server.bind=0.0.0.0",
            "--set",
            "server.port=0",
        ],
        &[],
    );
    assert_eq!(code(&o), 1);
    let e = stderr(&o);
    assert!(
        e.contains("refusing to bind 0.0.0.0") && e.contains("server.tokens"),
        "{e}"
    );
}

#[test]
fn audit_verify_reports_the_first_broken_link() {
    let ov = Overlay::new();
    for i in 0..3 {
        let o = ov.run(
            &[
                "invoke",
                "--tool",
                "current_time",
                "--request-id",
                &format!("v{i}"),
            ],
            &[],
        );
        assert_eq!(code(&o), 0);
    }
    let o = ov.run(&["audit", "verify"], &[]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ok: 3 records"));
    let path = ov.path().join("data/audit.jsonl");
    let text = std::fs::read_to_string(&path).expect("audit");
    std::fs::write(&path, text.replacen("\"v1\"", "\"vX\"", 1)).expect("tamper");
    let o = ov.run(&["audit", "verify"], &[]);
    assert_eq!(code(&o), 1);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("broken at line 2"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn audit_rotation_keeps_one_chain_across_files_and_processes() {
    let ov = Overlay::new();
    for i in 0..6 {
        let o = ov.run(
            &[
                "invoke",
                "--tool",
                "current_time",
                "--request-id",
                &format!("r{i}"),
                "--set",
                "security.audit.max_bytes=300",
            ],
            &[],
        );
        assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert!(
        ov.path().join("data/audit.jsonl.2").exists(),
        "rotated twice or more"
    );
    let o = ov.run(&["audit", "verify"], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(code(&o), 0, "{text}");
    assert!(text.contains("ok: 6 records in"), "{text}");
    // Removing a whole rotated file in the middle breaks the chain at the next one.
    std::fs::remove_file(ov.path().join("data/audit.jsonl.2")).expect("rm");
    std::fs::rename(
        ov.path().join("data/audit.jsonl.3"),
        ov.path().join("data/audit.jsonl.2"),
    )
    .ok();
    let o = ov.run(&["audit", "verify"], &[]);
    assert_eq!(code(&o), 1, "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn terminal_exec_runs_sandboxed_through_the_binary() {
    let ov = Overlay::new();
    ov.write("config/secrets.enc", "VAULT-TOKEN-abc");
    let invoke = |args: &str, env: &[(&str, &str)]| {
        let o = ov.run(
            &[
                "invoke",
                "--tool",
                "terminal_exec",
                "--json",
                "--args",
                args,
            ],
            env,
        );
        stdout_json(&o)
    };
    let probe = strata_sandbox::probe();
    if probe.bwrap.is_none() && probe.landlock_abi.is_none() {
        // Fails closed: no sandbox, no command.
        let v = invoke(r#"{"command":"echo hi"}"#, &[]);
        assert_eq!(v["status"], "error");
        strata_test_support::skipped(
            "the sandboxed part of the terminal test",
            &format!("a working sandbox: {}", probe.report().join("; ")),
        );
        return;
    }
    let v = invoke(
        &format!(
            r#"{{"command":"echo made > out.txt; cat {}/config/secrets.enc; env; exit 4"}}"#,
            ov.path().display()
        ),
        &[("PLANTED_SECRET", "planted-value-xyz"), ("LANG", "C.UTF-8")],
    );
    assert_eq!(v["status"], "ok", "{v}");
    let text = v["value"].as_str().expect("text result");
    assert!(text.starts_with("[sandbox: "), "{text}");
    assert!(text.contains("\nexit_code: 4\nstdout:\n"), "{text}");
    assert!(text.contains("\nstderr:\n"), "{text}");
    assert!(!text.contains("VAULT-TOKEN"), "{text}");
    assert!(!text.contains("planted-value-xyz"), "{text}");
    assert!(
        text.contains("LANG=C.UTF-8"),
        "allow-listed variables pass: {text}"
    );
    assert_eq!(
        std::fs::read_to_string(ov.path().join("tmp/workspaces/operator/out.txt")).expect("made"),
        "made\n"
    );
    // The timeout is clamped to at least 5 s; a bad cwd and destructive commands are refused.
    let v = invoke(r#"{"command":"pwd","cwd":"../.."}"#, &[]);
    assert_eq!(v["status"], "validation_error", "{v}");
    let v = invoke(r#"{"command":"rm -rf /"}"#, &[]);
    assert_eq!(v["status"], "validation_error", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("second line of defence")
    );

    // doctor says which protections this machine has.
    let o = ov.run(&["doctor"], &[]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("sandbox:"), "{text}");
    assert!(
        text.contains("landlock:") && text.contains("bubblewrap"),
        "{text}"
    );
}

#[test]
fn doctor_opens_the_vault_with_the_passphrase_from_the_environment() {
    let ov = Overlay::new();
    let mut v = strata_vault::FileVault::create_with_iterations(
        &ov.path().join("config"),
        "open sesame",
        1000,
    )
    .expect("vault");
    v.set("openai-key", "sk-test").expect("set");
    let o = ov.run(&["doctor"], &[("STRATA_VAULT_PASSPHRASE", "open sesame")]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(code(&o), 0, "{text}");
    assert!(
        text.contains("ok   vault") && text.contains("(1 keys)"),
        "{text}"
    );
    assert!(!text.contains("sk-test"));
    let o = ov.run(&["doctor"], &[("STRATA_VAULT_PASSPHRASE", "wrong")]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(code(&o), 1, "{text}");
    assert!(text.contains("FAIL vault: wrong passphrase"), "{text}");
    let o = ov.run(&["doctor"], &[]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("no passphrase was given"), "{text}");
}

#[test]
fn vault_commands_round_trip_and_never_take_secrets_as_arguments() {
    let ov = Overlay::new();
    let pass = [("STRATA_VAULT_PASSPHRASE", "open sesame")];
    // No passphrase: a usage error, nothing created.
    let o = ov.run(&["vault", "init"], &[]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(!ov.path().join("config/secrets.enc").exists());
    let o = ov.run(&["vault", "init"], &pass);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // set reads the value from stdin.
    let set = |key: &str, value: &str| {
        run_with_stdin(
            &ov,
            &["vault", "set", key, "--from-stdin"],
            &pass,
            &format!("{value}\n"),
        )
    };
    assert_eq!(code(&set("openai-key", "sk-abc")), 0);
    assert_eq!(code(&set("openai_key", " padded ")), 0);
    let o = ov.run(&["vault", "get", "openai-key"], &pass);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "sk-abc");
    let o = ov.run(&["vault", "list"], &pass);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "openai-key\nopenai_key"
    );
    // doctor flags the two spellings and the whitespace.
    let o = ov.run(&["vault", "doctor"], &pass);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(code(&o), 1, "{text}");
    assert!(
        text.contains("spelled several ways: openai-key, openai_key"),
        "{text}"
    );
    assert!(
        text.contains("`openai_key` has leading or trailing whitespace"),
        "{text}"
    );
    assert!(!text.contains("sk-abc"));
    let o = ov.run(&["vault", "rm", "openai_key"], &pass);
    assert_eq!(code(&o), 0);
    // rekey to a new passphrase: the old one stops working, the secrets stay.
    let o = ov.run(
        &["vault", "rekey"],
        &[
            ("STRATA_VAULT_PASSPHRASE", "open sesame"),
            ("STRATA_VAULT_NEW_PASSPHRASE", "new one"),
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = ov.run(&["vault", "get", "openai-key"], &pass);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("wrong passphrase"), "{}", stderr(&o));
    let o = ov.run(
        &["vault", "get", "openai-key"],
        &[("STRATA_VAULT_PASSPHRASE", "new one")],
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "sk-abc");
    let o = ov.run(
        &["vault", "get", "nope"],
        &[("STRATA_VAULT_PASSPHRASE", "new one")],
    );
    assert_eq!(code(&o), 1);
}

/// `strata --overlay <dir> ARGS` with `input` on standard input.
fn run_with_stdin(ov: &Overlay, args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
    use std::io::Write;
    let mut child = common::strata(ov.path())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("write");
    drop(stdin);
    child.wait_with_output().expect("wait")
}

#[test]
fn the_passphrase_comes_from_one_stdin_line_and_serve_names_missing_vault_keys() {
    let ov = Overlay::new();
    let o = run_with_stdin(&ov, &["vault", "init"], &[], "line pass\n");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = run_with_stdin(
        &ov,
        &["vault", "set", "brave-key", "--from-stdin"],
        &[("STRATA_VAULT_PASSPHRASE", "line pass")],
        "brave-secret\n",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = run_with_stdin(&ov, &["vault", "list"], &[], "line pass\n");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "brave-key");
    let o = run_with_stdin(&ov, &["vault", "list"], &[], "not it\n");
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("wrong passphrase"), "{}", stderr(&o));
    // set's stdin is the value: without the environment there is no passphrase, and the
    // error says so rather than taking the value as the passphrase.
    let o = run_with_stdin(&ov, &["vault", "set", "k", "--from-stdin"], &[], "v\n");
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("the value comes on stdin"),
        "{}",
        stderr(&o)
    );

    // serve: the passphrase on stdin, a reference the vault holds and one it does not.
    ov.write(
        "config/config.yaml",
        "tools:\n  web_search:\n    brave_api_key: vault:brave-key\n    tavily_api_key: vault:tavily-key\n",
    );
    let mut child = Command::new(BIN)
        .arg("--overlay")
        .arg(ov.path())
        .args(["serve", "--set", "server.port=0"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"line pass\n").expect("write");
    }
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let seen = wait_for_line(
        &mut err,
        "strata is running",
        Instant::now() + Duration::from_secs(60),
    );
    let all = seen.join("\n");
    assert!(
        all.contains("`tools.web_search.tavily_api_key` refers to vault key `tavily-key`"),
        "{all}"
    );
    assert!(!all.contains("brave-key`, which"), "{all}");
    // A second serve of the same profile on the same data dir is refused by the lock file.
    let o = ov.run(
        &["serve", "--set", "server.port=0"],
        &[("STRATA_VAULT_PASSPHRASE", "line pass")],
    );
    assert_ne!(code(&o), 0);
    let text = stderr(&o);
    assert!(
        text.contains("another `strata serve` of profile `main` is running"),
        "{text}"
    );
    assert!(text.contains(&child.id().to_string()), "{text}");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

#[test]
fn a_profile_turns_off_agents_and_discord_accounts_the_base_config_defines() {
    let ov = Overlay::new();
    ov.write("config/agents.yaml", "agents:\n  main:\n    name: Main\n");
    ov.write(
        "config/config.yaml",
        "connectors:\n  discord:\n    accounts:\n      main: {token: 'env:MAIN_TOKEN'}\n",
    );
    ov.write(
        "config/agents.ops.yaml",
        "agents:\n  main: {enabled: false}\n  ops:\n    name: Ops\n",
    );
    ov.write(
        "config/config.ops.yaml",
        "connectors:\n  discord:\n    accounts:\n      main: {enabled: false}\n      ops: {token: 'env:OPS_TOKEN'}\n",
    );
    let shown = |args: &[&str]| {
        let mut full = vec!["config", "show", "--json"];
        full.extend_from_slice(args);
        let o = ov.run(&full, &[]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        stdout_json(&o)
    };
    let base = shown(&[]);
    let keys = |v: &Value, ptr: &str| -> Vec<String> {
        v.pointer(ptr)
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(keys(&base, "/agents"), ["main"]);
    assert_eq!(keys(&base, "/connectors/discord/accounts"), ["main"]);
    let ops = shown(&["--profile", "ops"]);
    assert_eq!(keys(&ops, "/agents"), ["ops"]);
    assert_eq!(keys(&ops, "/connectors/discord/accounts"), ["ops"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_online_asks_the_provider_and_discord_with_the_vaults_credentials() {
    use strata_test_support::{FakeResponse, FakeServer};
    let llm = FakeServer::start().await.expect("llm");
    let discord = FakeServer::start().await.expect("discord");
    let ov = Overlay::new();
    let mut v = strata_vault::FileVault::create_with_iterations(
        &ov.path().join("config"),
        "doctor pass",
        1000,
    )
    .expect("vault");
    v.set("openai-api-key", "sk-doctor").expect("set");
    v.set("discord-main", "discord-doctor-token").expect("set");
    let proxy = discord.url.trim_start_matches("http://").to_owned();
    ov.write(
        "config/config.yaml",
        &format!(
            "defaults:\n  llm: {{provider: openai, model: m, api_key: 'vault:openai-api-key', base_url: '{}/v1'}}\n\
             connectors:\n  discord:\n    api_proxy: '{proxy}'\n    plain_http: true\n    accounts:\n      main: {{token: 'vault:discord-main'}}\n",
            llm.url
        ),
    );
    let env = [("STRATA_VAULT_PASSPHRASE", "doctor pass")];
    // Offline: nothing is asked, and the references resolve.
    let o = ov.run(&["doctor"], &env);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(code(&o), 0, "{out}");
    assert!(
        out.contains("vault holds the 2 key(s) the config references"),
        "{out}"
    );
    assert!(llm.requests().is_empty() && discord.requests().is_empty());
    // Online, both accept.
    llm.script([FakeResponse::ok(serde_json::json!({"data": []}))]);
    discord.script([FakeResponse::ok(
        serde_json::json!({"id": "1", "username": "doc-bot", "discriminator": "0", "mfa_enabled": false}),
    )]);
    let o = ov.run(&["doctor", "--online"], &env);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(code(&o), 0, "{out}");
    assert!(
        out.contains("ok   defaults.llm: openai accepts the key"),
        "{out}"
    );
    assert!(
        out.contains("ok   Discord account `main`: token valid (bot `doc-bot` (1))"),
        "{out}"
    );
    let r = llm.requests();
    assert_eq!(r[0].path, "/v1/models");
    assert_eq!(
        r[0].headers.get("authorization").map(String::as_str),
        Some("Bearer sk-doctor")
    );
    let r = discord.requests();
    assert_eq!(r[0].path, "/api/v10/users/@me");
    assert_eq!(
        r[0].headers.get("authorization").map(String::as_str),
        Some("Bot discord-doctor-token")
    );
    // Online, both refuse: two FAIL lines, exit 1, no secret printed.
    llm.script([FakeResponse::status(
        401,
        serde_json::json!({"error": {"message": "bad key"}}),
    )]);
    discord.script([FakeResponse::status(
        401,
        serde_json::json!({"message": "401: Unauthorized"}),
    )]);
    let o = ov.run(&["doctor", "--online"], &env);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(code(&o), 1, "{out}");
    assert!(
        out.contains("FAIL defaults.llm: openai: authentication failed (401"),
        "{out}"
    );
    assert!(
        out.contains("FAIL Discord account `main`: Discord rejected the bot token (401)"),
        "{out}"
    );
    assert!(
        !out.contains("sk-doctor") && !out.contains("discord-doctor-token"),
        "{out}"
    );
    // A key the overlay references but the vault lacks fails offline, naming both.
    v.remove("discord-main").expect("rm");
    let o = ov.run(&["doctor"], &env);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(code(&o), 1, "{out}");
    assert!(
        out.contains("FAIL `connectors.discord.accounts.main.token` (set by overlay:config/config.yaml) refers to vault key `discord-main`: the vault does not hold it"),
        "{out}"
    );
}

/// On a terminal (a pseudo-terminal from util-linux `script`) with no passphrase in the
/// environment, the vault asks for it without echoing it.
#[test]
fn on_a_terminal_the_vault_asks_for_its_passphrase_without_echo() {
    use std::io::Write;
    if !strata_test_support::pty_available() {
        return;
    }
    let ov = Overlay::new();
    let mut v = strata_vault::FileVault::create_with_iterations(
        &ov.path().join("config"),
        "typed secret words",
        1000,
    )
    .expect("vault");
    v.set("visible-key-name", "value").expect("set");
    let cmd = format!("{BIN} --overlay {} vault list", ov.path().display());
    let mut child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env_remove("STRATA_VAULT_PASSPHRASE")
        .env_remove("STRATA_VAULT_KEY_FILE")
        .env("HOME", ov.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script");
    let mut stdin = child.stdin.take().expect("stdin");
    // Type only once the prompt is up: keys typed earlier would be echoed by the terminal
    // before the prompt turns echo off.
    let screen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut out = child.stdout.take().expect("stdout");
    let reader = {
        let screen = screen.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 1024];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = screen.lock() {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !screen.lock().is_ok_and(|s| s.contains("vault passphrase:")) {
        assert!(Instant::now() < deadline, "no prompt");
        std::thread::sleep(Duration::from_millis(20));
    }
    stdin.write_all(b"typed secret words\r").expect("type");
    stdin.flush().expect("flush");
    let status = child.wait().expect("wait");
    drop(stdin);
    reader.join().expect("reader");
    let screen = screen.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(status.success(), "{screen}");
    assert!(screen.contains("vault passphrase:"), "{screen}");
    assert!(screen.contains("visible-key-name"), "{screen}");
    assert!(
        !screen.contains("typed secret words"),
        "the passphrase was echoed: {screen}"
    );
}

/// `compress_context` through the binary: `report` writes nothing; `standard` keeps the
/// original beside the file and refuses a second time; `decompress_context` restores it
/// byte for byte.
#[test]
fn compress_and_decompress_a_knowledge_file() {
    let ov = Overlay::new();
    let original = "---\ntitle: Guide\n---\n# Setup\n\nIt is important to note that you basically   need `cargo  build` first,\nin order to get https://example.com/very/just working.\n\n\n\nThat is really all.\n";
    ov.write("knowledgebase/guide.md", original);
    let path = ov.path().join("knowledgebase/guide.md");
    let invoke = |tool: &str, args: &str| {
        let o = ov.run(&["invoke", "--tool", tool, "--args", args], &[]);
        let v = serde_json::from_slice::<Value>(&o.stdout)
            .unwrap_or_else(|_| Value::String(stderr(&o)));
        (code(&o), v)
    };
    let (c, v) = invoke(
        "compress_context",
        r#"{"path": "knowledgebase/guide.md", "level": "report"}"#,
    );
    assert_eq!(c, 0, "{v}");
    assert_eq!(v["written"], false, "{v}");
    assert!(v["saved_bytes"].as_u64().is_some_and(|n| n > 0), "{v}");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), original);
    let (c, v) = invoke("compress_context", r#"{"path": "knowledgebase/guide.md"}"#);
    assert_eq!(c, 0, "{v}");
    let compressed = std::fs::read_to_string(&path).expect("read");
    assert_eq!(
        compressed,
        "---\ntitle: Guide\n---\n# Setup\n\nYou need `cargo  build` first,\nto get https://example.com/very/just working.\n\nThat is all.\n"
    );
    assert_eq!(
        std::fs::read_to_string(ov.path().join("knowledgebase/guide.md.original"))
            .expect("original"),
        original
    );
    let (c, v) = invoke("compress_context", r#"{"path": "knowledgebase/guide.md"}"#);
    assert_ne!(c, 0, "compressed twice: {v}");
    assert!(v.to_string().contains("compressed already"), "{v}");
    let (c, v) = invoke(
        "decompress_context",
        r#"{"path": "knowledgebase/guide.md"}"#,
    );
    assert_eq!(c, 0, "{v}");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), original);
    assert!(!ov.path().join("knowledgebase/guide.md.original").exists());
    // Outside the tool roots: refused.
    let (c, _) = invoke("compress_context", r#"{"path": "config/config.yaml"}"#);
    assert_ne!(c, 0);
}

/// `strata config schema` describes the files as `serve` reads them: the example overlay's
/// config, agents, team and MCP files validate against it (Python's jsonschema, the
/// validator editors' plugins are built on), and a misspelt key does not.
#[test]
fn the_config_schema_accepts_the_example_files_and_refuses_a_misspelt_key() {
    if !strata_test_support::python_has("jsonschema", "jsonschema")
        || !strata_test_support::python_has("yaml", "pyyaml")
    {
        return;
    }
    let empty = tempfile::tempdir().expect("tmp");
    let dir = tempfile::tempdir().expect("tmp");
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../overlay-example/config");
    let mut cases = Vec::new();
    for (which, file) in [
        ("config", "config.yaml"),
        ("config", "agents.yaml"),
        ("team", "team.json"),
        ("mcp", "mcp.yaml"),
    ] {
        // Needs no overlay: run where there is none.
        let out = common::strata(empty.path())
            .args(["config", "schema", which])
            .output()
            .expect("schema");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let schema = dir.path().join(format!("{which}.schema.json"));
        std::fs::write(&schema, &out.stdout).expect("write");
        cases.push((schema.clone(), example.join(file), true));
        if which == "config" && file == "config.yaml" {
            let bad = dir.path().join("misspelt.yaml");
            std::fs::write(&bad, "server:\n  prot: 8770\n").expect("write");
            cases.push((schema, bad, false));
        }
    }
    let script = "import json, sys, yaml, jsonschema\n\
                  schema = json.load(open(sys.argv[1]))\n\
                  doc = yaml.safe_load(open(sys.argv[2])) or {}\n\
                  errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))\n\
                  print('\\n'.join(e.message for e in errors))\n\
                  sys.exit(1 if errors else 0)\n";
    for (schema, file, valid) in cases {
        let out = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&schema)
            .arg(&file)
            .output()
            .expect("python3");
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.success(),
            valid,
            "{} against {}: {said}{}",
            file.display(),
            schema.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        if !valid {
            assert!(said.contains("'prot'"), "{said}");
        }
    }
}

/// `strata completions <shell>`: a script for the binary's own name, with the subcommands,
/// that the shell accepts; no overlay needed.
#[test]
fn completions_are_scripts_the_shells_accept() {
    let empty = tempfile::tempdir().expect("tmp");
    let script = |shell: &str| {
        let out = common::strata(empty.path())
            .args(["completions", shell])
            .output()
            .expect("completions");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let bash = script("bash");
    assert!(bash.contains("complete -F _strata"), "{bash}");
    for sub in ["serve", "goal", "schedule", "completions"] {
        assert!(bash.contains(sub), "bash completion lacks `{sub}`");
    }
    let path = empty.path().join("strata.bash");
    std::fs::write(&path, &bash).expect("write");
    let checked = std::process::Command::new("bash")
        .arg("-n")
        .arg(&path)
        .output()
        .expect("bash -n");
    assert!(
        checked.status.success(),
        "bash refuses the script: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(script("zsh").starts_with("#compdef strata"));
    assert!(script("fish").contains("complete -c strata"));
    let bad = common::strata(empty.path())
        .args(["completions", "tcsh"])
        .output()
        .expect("completions");
    assert_eq!(bad.status.code(), Some(2));
}

/// `strata ARGS` on a pseudo-terminal (util-linux `script`), with `env`; what the terminal
/// showed.
fn on_a_terminal(ov: &Overlay, args: &str, env: &[(&str, &str)]) -> String {
    let cmd = format!("{BIN} --overlay {} {args}", ov.path().display());
    let mut c = Command::new("script");
    c.args(["-qfec", &cmd, "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("script");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn doctor_colours_its_levels_on_a_terminal_only() {
    if !strata_test_support::pty_available() {
        return;
    }
    let ov = Overlay::new();
    let tty = on_a_terminal(&ov, "doctor", &[]);
    assert!(tty.contains("\x1b[32mok  \x1b[0m"), "{tty:?}");
    let no_colour = on_a_terminal(&ov, "doctor", &[("NO_COLOR", "1")]);
    assert!(!no_colour.contains('\x1b'), "{no_colour:?}");
    assert!(no_colour.contains("ok   data dir"), "{no_colour:?}");
    let piped = ov.run(&["doctor"], &[]);
    assert!(!String::from_utf8_lossy(&piped.stdout).contains('\x1b'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_shows_a_spinner_on_a_terminal_while_the_model_thinks_and_never_when_piped() {
    if !strata_test_support::pty_available() {
        return;
    }
    let slow = strata_test_support::echo_llm(Duration::from_millis(800)).await;
    let ov = Overlay::new();
    ov.write(
        "config/config.yaml",
        &crate::common::fake_llm(&slow, "none", "fake"),
    );
    ov.write("config/agents.yaml", "agents:\n  main: {}\n");
    let screen = tokio::task::spawn_blocking({
        let ov_path = ov.path().to_path_buf();
        move || {
            let cmd = format!("{BIN} --overlay {} chat hello", ov_path.display());
            let o = Command::new("script")
                .args(["-qfec", &cmd, "/dev/null"])
                .env_remove("NO_COLOR")
                .env("TERM", "xterm")
                .stdin(Stdio::null())
                .output()
                .expect("script");
            String::from_utf8_lossy(&o.stdout).into_owned()
        }
    })
    .await
    .expect("join");
    assert!(screen.contains("main is thinking"), "{screen:?}");
    assert!(screen.contains("echo: hello"), "{screen:?}");
    // -q: no spinner, the answer still.
    let quiet = on_a_terminal(&ov, "-q chat hello", &[]);
    assert!(!quiet.contains("thinking"), "{quiet:?}");
    assert!(quiet.contains("echo: hello"), "{quiet:?}");
    // Piped: only the answer.
    let o = ov.run(&["chat", "hello"], &[]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "echo: hello");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("thinking"));
}

#[test]
fn verbose_and_quiet_set_the_log_level() {
    let ov = Overlay::new();
    let call = ["invoke", "--tool", "current_time"];
    let with = |flags: &[&str]| {
        let mut args: Vec<&str> = flags.to_vec();
        args.extend(call);
        ov.run(&args, &[])
    };
    let normal = with(&[]);
    assert_eq!(code(&normal), 0, "{}", stderr(&normal));
    assert!(!stderr(&normal).contains("DEBUG"), "{}", stderr(&normal));
    // -vv: the Invoker's debug lines (the CLI's usual level is warn).
    let debug = with(&["-vv"]);
    assert!(
        stderr(&debug).contains("DEBUG") && stderr(&debug).contains("tool call done"),
        "{}",
        stderr(&debug)
    );
    // Logs go to stderr only: stdout is the call's result either way.
    assert!(!debug.stdout.is_empty() && !String::from_utf8_lossy(&debug.stdout).contains("DEBUG"));
    let quiet = with(&["-q"]);
    assert_eq!(code(&quiet), 0);
    assert!(stderr(&quiet).is_empty(), "-q: {}", stderr(&quiet));
    let both = with(&["-v", "-q"]);
    assert_eq!(code(&both), 2, "-v and -q conflict");
}
