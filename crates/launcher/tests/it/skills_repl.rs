//! Skills and the REPL through the real binary; the skills watcher in-process.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_runtime::skills::{SkillDir, SkillSet};
use strata_test_support::{FakeServer, openai};
use tokio::io::AsyncWriteExt;

const BIN: &str = env!("CARGO_BIN_EXE_strata");

use crate::common::{self, write};

fn overlay(url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    write(d, "config/config.yaml", &common::fake_llm(url, "k", "fake"));
    write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [read_file, list_files]\n",
    );
    write(d, "agents/main/AGENTS.md", "# Main");
    write(
        d,
        "skills/shout.yaml",
        "name: shout\ndescription: Upper-cases text.\nparameters:\n  text: {type: string, required: true}\ncommand: printf '%s' {text} | tr a-z A-Z\ngated: false\n",
    );
    write(
        d,
        "skills/brief.yaml",
        "name: brief\ndescription: Briefs on a topic.\nparameters:\n  topic: {required: true}\nprompt: Brief me on {topic}.\ntools: [read_file, terminal_exec]\nmax_rounds: 2\n",
    );
    write(
        d,
        "agents/main/skills/hello.yaml",
        "name: hello\ndescription: Agent skill.\ncommand: echo hi from main\ngated: false\n",
    );
    dir
}

async fn strata(dir: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("--overlay").arg(dir).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    if let Some(input) = stdin {
        let mut s = child.stdin.take().expect("stdin");
        s.write_all(input.as_bytes()).await.expect("write");
        drop(s);
    }
    child.wait_with_output().await.expect("wait")
}

fn text(o: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skill_list_and_command_skill() {
    let fake = FakeServer::start().await.expect("fake");
    let ov = overlay(&fake.url);
    let o = strata(ov.path(), &["skill", "list", "--json"], None).await;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let names: Vec<&str> = v["skills"]
        .as_array()
        .expect("a")
        .iter()
        .map(|s| s["name"].as_str().expect("n"))
        .collect();
    assert_eq!(names, ["brief", "main:hello", "shout"]);

    let o = strata(
        ov.path(),
        &[
            "skill",
            "run",
            "shout",
            "--param",
            "text=hello; touch pwned",
        ],
        None,
    )
    .await;
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(out.trim(), "HELLO; TOUCH PWNED");
    assert!(
        !ov.path().join("pwned").exists(),
        "parameters are quoted, never run"
    );

    let o = strata(ov.path(), &["skill", "run", "main:hello"], None).await;
    assert_eq!(text(&o).0.trim(), "hi from main");

    let o = strata(ov.path(), &["skill", "run", "shout"], None).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("needs parameter `text`"));
    let o = strata(ov.path(), &["skill", "run", "shoot"], None).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("did you mean `shout`?"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_skill_runs_a_turn_with_the_skill_restrictions() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([openai::text("Rust is a language.")]);
    let ov = overlay(&fake.url);
    let o = strata(
        ov.path(),
        &["skill", "run", "brief", "--param", "topic=Rust"],
        None,
    )
    .await;
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(out.trim(), "Rust is a language.");
    let req = &fake.requests()[0].body;
    assert_eq!(
        req["messages"].as_array().expect("m").last().expect("last")["content"],
        "Brief me on Rust."
    );
    let tools: Vec<&str> = req["tools"]
        .as_array()
        .expect("t")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("n"))
        .collect();
    assert_eq!(tools, ["read_file"], "skill tools ∩ agent tools");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repl_turns_commands_and_reset() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([openai::text("first answer"), openai::text("after reset")]);
    let ov = overlay(&fake.url);
    let o = strata(
        ov.path(),
        &["repl"],
        Some("/skills\nhello\n/reset\nagain\n/bogus\n/quit\n"),
    )
    .await;
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.contains("main:hello"), "{out}");
    assert!(out.contains("main> first answer"), "{out}");
    assert!(out.contains("(session reset)"), "{out}");
    assert!(out.contains("main> after reset"), "{out}");
    assert!(out.contains("unknown command /bogus"), "{out}");
    let second = &fake.requests()[1].body["messages"];
    let contents: Vec<&str> = second
        .as_array()
        .expect("m")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        !contents.contains(&"hello"),
        "reset cleared the history: {contents:?}"
    );
}

#[test]
fn the_watcher_reloads_changed_skills() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "skills/a.yaml",
        "name: a\ndescription: one\ncommand: echo 1\n",
    );
    let skills = Arc::new(SkillSet::load(vec![SkillDir {
        path: dir.path().join("skills"),
        origin: "overlay".into(),
        prefix: String::new(),
    }]));
    let registry = Arc::new(strata_runtime::Registry::empty());
    strata_tools::skill_tools::sync(&registry, &skills);
    assert!(registry.get("skill__a").is_some());
    let _guard =
        strata_launcher::skills_cmd::watch(skills.clone(), registry.clone()).expect("watcher");
    write(
        dir.path(),
        "skills/a.yaml",
        "name: a\ndescription: two\ncommand: echo 2\n",
    );
    write(
        dir.path(),
        "skills/b.yaml",
        "name: b\ndescription: new\ncommand: echo b\n",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let snap = skills.snapshot();
        let tools_follow = registry
            .get("skill__a")
            .is_some_and(|t| t.spec().description.starts_with("two"))
            && registry.get("skill__b").is_some();
        if snap.get("a").is_some_and(|s| s.def.description == "two")
            && snap.contains_key("b")
            && tools_follow
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "watcher did not reload: {:?}",
            snap.keys().collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A command skill run from the CLI is a call of its tool through the Invoker: it waits for
/// a human (gated by default), runs in the sandbox (the overlay read-only, `config/` hidden,
/// writes only in its workspace), leaves audit records, and counts against rate limits.
#[test]
fn a_command_skill_from_the_cli_is_gated_sandboxed_audited_and_rate_limited() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    write(
        d,
        "config/config.yaml",
        "security:\n  rate_limits:\n    tools:\n      \"skill__*\": {per_minute: 1}\n",
    );
    write(
        d,
        "skills/stamp.yaml",
        "name: stamp\ndescription: Stamps a word.\nparameters:\n  word: {type: string, required: true}\ncommand: |\n  printf 'stamped %s' {word}\n  touch escaped 2>/dev/null\n  touch \"$HOME/kept\"\n  cat config/config.yaml 2>/dev/null || printf ' (config hidden)'\n",
    );
    let mut run = common::strata(d)
        .args(["skill", "run", "stamp", "--param", "word=x"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // It waits for an approval, which another process gives.
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        let o = common::strata(d)
            .args(["approvals", "list", "--json"])
            .output()
            .expect("list");
        let last = format!("{:?}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        if let Some(row) = v["approvals"].as_array().and_then(|a| a.first()) {
            assert_eq!(row["tool"], "skill__stamp", "{row}");
            assert_eq!(row["principal"], "operator", "{row}");
            break row["id"].as_str().expect("id").to_owned();
        }
        if run.try_wait().ok().flatten().is_some() {
            let o = run.wait_with_output().expect("output");
            panic!("skill run ended without asking: {:?}", text(&o));
        }
        assert!(
            Instant::now() < deadline,
            "no approval request appeared; last list: {last}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let o = common::strata(d)
        .args(["approvals", "approve", &id])
        .output()
        .expect("approve");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run.wait_with_output().expect("skill run");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(out.trim(), "stamped x (config hidden)");
    assert!(!d.join("escaped").exists(), "the overlay is not writable");
    assert!(
        d.join("tmp/workspaces/skills/skill__stamp/kept").exists(),
        "the skill's workspace is"
    );

    // A second run inside the minute is refused by the rate limit before anyone is asked.
    let o = common::strata(d)
        .args(["skill", "run", "stamp", "--param", "word=y"])
        .stdin(Stdio::null())
        .output()
        .expect("second run");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("rate_limited"), "{err}");

    let audit = std::fs::read_to_string(d.join("data/audit.jsonl")).expect("audit log");
    let calls: Vec<serde_json::Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["tool"] == "skill__stamp" && v.get("event").is_none())
        .collect();
    let statuses: Vec<&str> = calls.iter().filter_map(|v| v["status"].as_str()).collect();
    assert_eq!(statuses, ["ok", "rate_limited"], "{audit}");
    assert_eq!(calls[0]["args"]["word"], "x");
    assert_eq!(calls[0]["principal"], "operator");
}
