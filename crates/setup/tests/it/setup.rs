//! The wizard end to end through its binary (what `cargo xtask setup --answers` runs): an
//! overlay from an answers file with a fake provider and a fake Discord on 127.0.0.1, built
//! with cargo, checked with its own `doctor` and `tools`; then updated in place, rolled back
//! from injected failures, and refused on a bad token. Plus check-core, remote
//! neutralisation and module scaffolding.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use strata_engine::secret::Vault as _;
use strata_test_support::{FakeResponse, FakeServer};

const SETUP: &str = env!("CARGO_BIN_EXE_strata-setup");

fn engine_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(PathBuf::from)
        .expect("root")
}

fn run_setup(answers: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(SETUP);
    c.args(["setup", "--answers"]).arg(answers);
    for (k, _) in std::env::vars() {
        if k.starts_with("STRATA_") {
            c.env_remove(k);
        }
    }
    // Tests write few secrets; 600,000 rounds per open would only slow them.
    c.env("STRATA_SETUP_VAULT_ITERATIONS", "2000");
    c.envs(env.iter().copied());
    c.output().expect("run strata-setup")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every file under `dir` (but build output) with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                if e.file_name() != "target" {
                    stack.push(p);
                }
            } else {
                out.insert(
                    p.strip_prefix(dir).expect("prefix").to_path_buf(),
                    std::fs::read(&p).unwrap_or_default(),
                );
            }
        }
    }
    out
}

/// The README's "Write your first tool" example, as a newcomer saves it.
fn readme_first_tool() -> String {
    let readme = std::fs::read_to_string(engine_root().join("README.md")).expect("README");
    let start = readme
        .find("```rust\nuse serde::Serialize;")
        .expect("the README's first tool");
    let code = &readme[start + "```rust\n".len()..];
    code[..code.find("```").expect("end of the block")].to_owned()
}

/// Builds an overlay into the engine's target directory with the features the workspace's own
/// test build has (every optional part), so what that build compiled is reused.
fn build_overlay(overlay: &Path, target: &Path) {
    let build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--offline",
            "--quiet",
            "--features",
            "full",
            "--manifest-path",
        ])
        .arg(overlay.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("cargo build");
    assert!(build.status.success(), "{}", text(&build));
}

/// Each command of the wizard's closing "next" block is in docs/DEPLOY.md's section 3, with
/// the paths as placeholders.
fn assert_next_steps_are_documented(out: &str, overlay: &Path) {
    let deploy = std::fs::read_to_string(engine_root().join("docs/DEPLOY.md")).expect("DEPLOY.md");
    let section = deploy
        .split("## 3. Build, check, run")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("DEPLOY.md section 3");
    let steps: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("next (docs/DEPLOY.md"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert!(steps.len() >= 3, "no next steps in: {out}");
    assert!(
        steps.contains(&format!("cd {}", overlay.display()).as_str()),
        "{steps:?}"
    );
    for step in steps {
        // The command up to the first path it names.
        let command = step
            .split_once('=')
            .map(|(k, _)| format!("{k}="))
            .unwrap_or_else(|| {
                if step.starts_with("cd ") {
                    "cd ".to_owned()
                } else {
                    step.to_owned()
                }
            });
        assert!(
            section.contains(&command),
            "the wizard's next step `{step}` is not in docs/DEPLOY.md section 3"
        );
    }
}

fn whoami() -> String {
    let o = Command::new("id").arg("-un").output().expect("id");
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

struct Fakes {
    llm: FakeServer,
    discord: FakeServer,
}

fn answers(dir: &Path, f: &Fakes, agent: &str, modules: &[&str], binary: &Path) -> String {
    format!(
        r#"overlay_dir: {overlay}
name: acme
modules: [{modules}]
maintainer: true
port: 18770
vault:
  passphrase: env:T_VAULT_PASS
  key_file: {keys}/acme.vault-key
provider:
  kind: openai
  model: gpt-4o-mini
  api_key: env:T_OPENAI_KEY
  base_url: {llm}/v1
discord:
  token: env:T_DISCORD_TOKEN
  guild: "000000000000000100"
  api_proxy: {discord}
  plain_http: true
owner:
  name: Example Owner
  discord_id: "000000000000000001"
agent:
  id: {agent}
  name: Helper {agent}
  description: Answers the team's questions.
  tier: coordinator
  channels: ["000000000000000200"]
approvals:
  channel: "000000000000000300"
  approvers: [owner]
rate_limits: {{per_minute: 30, per_hour: 500}}
ops:
  discord_token: env:T_OPS_TOKEN
units:
  user: {user}
  binary: {binary}
"#,
        overlay = dir.join("acme").display(),
        keys = dir.join("keys").display(),
        modules = modules.join(", "),
        llm = f.llm.url,
        discord = f.discord.url.trim_start_matches("http://"),
        user = whoami(),
        binary = binary.display(),
    )
}

/// A temporary directory, the fakes, and an answers file for agent `main` with `modules`
/// (units pointing at a binary that is never built).
async fn answered(modules: &[&str]) -> (tempfile::TempDir, Fakes, PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let f = Fakes {
        llm: FakeServer::start().await.expect("llm"),
        discord: FakeServer::start().await.expect("discord"),
    };
    let file = tmp.path().join("answers.yaml");
    let text = answers(tmp.path(), &f, "main", modules, Path::new("/usr/bin/true"));
    std::fs::write(&file, text).expect("w");
    (tmp, f, file)
}

const SECRETS: [(&str, &str); 4] = [
    ("T_VAULT_PASS", "a long vault passphrase"),
    ("T_OPENAI_KEY", "sk-test-key-for-the-fake-provider"),
    ("T_DISCORD_TOKEN", "fake-discord-main-token"),
    ("T_OPS_TOKEN", "fake-discord-ops-token"),
];

/// Discord's `GET /users/@me` answer for a bot.
fn bot_user(id: &str, name: &str) -> serde_json::Value {
    serde_json::json!({"id": id, "username": name, "discriminator": "0", "bot": true, "mfa_enabled": false})
}

fn script_ok(f: &Fakes) {
    f.llm.script([FakeResponse::ok(
        serde_json::json!({"object": "list", "data": []}),
    )]);
    f.discord.script([
        FakeResponse::ok(bot_user("000000000000000042", "acme-bot")),
        FakeResponse::ok(bot_user("000000000000000043", "acme-ops")),
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wizard_makes_an_overlay_that_builds_passes_doctor_and_updates_in_place() {
    let tmp = tempfile::tempdir().expect("tmp");
    let f = Fakes {
        llm: FakeServer::start().await.expect("llm"),
        discord: FakeServer::start().await.expect("discord"),
    };
    let overlay = tmp.path().join("acme");
    // The engine's own target directory: what the overlay shares with the engine's build
    // (same lock file, same profile) is reused rather than built and stored a second time.
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(PathBuf::from)
        .expect("target dir");
    let binary = target.join("debug/strata-acme");
    let file = tmp.path().join("answers.yaml");
    std::fs::write(
        &file,
        answers(tmp.path(), &f, "main", &["ops", "fleet"], &binary),
    )
    .expect("w");
    script_ok(&f);
    let engine_status = || {
        git(
            &engine_root(),
            &["status", "--porcelain", "--untracked-files=all"],
        )
    };
    let engine_before = engine_status();
    let o = run_setup(&file, &SECRETS);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("created overlay `acme`"), "{out}");
    // Making a deployment changes nothing in the engine checkout.
    assert_eq!(
        engine_status(),
        engine_before,
        "the wizard wrote into the engine checkout"
    );
    assert!(out.contains("ok   Discord: bot `acme-bot`"), "{out}");

    // The credentials were checked with one cheap call each, carrying the secret.
    let llm = f.llm.requests();
    assert_eq!(llm.len(), 1);
    assert_eq!(
        (llm[0].method.as_str(), llm[0].path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(
        llm[0].headers.get("authorization").map(String::as_str),
        Some("Bearer sk-test-key-for-the-fake-provider")
    );
    let dc = f.discord.requests();
    assert_eq!(dc.len(), 2);
    assert_eq!(dc[0].path, "/api/v10/users/@me");
    assert_eq!(
        dc[0].headers.get("authorization").map(String::as_str),
        Some("Bot fake-discord-main-token")
    );

    // No secret in clear anywhere in the overlay; config refers to the vault.
    for (path, bytes) in tree(&overlay) {
        let t = String::from_utf8_lossy(&bytes);
        for (_, secret) in &SECRETS {
            assert!(
                !t.contains(secret),
                "{} holds a secret in clear",
                path.display()
            );
        }
    }
    let config = std::fs::read_to_string(overlay.join("config/config.yaml")).expect("config");
    assert!(config.contains("api_key: vault:openai-api-key"), "{config}");
    assert!(config.contains("token: vault:discord-main"), "{config}");
    assert!(config.contains("per_minute: 30"), "{config}");
    let team: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(overlay.join("config/team.json")).expect("team"),
    )
    .expect("json");
    assert_eq!(team["people"][0]["access"], "owner");
    assert_eq!(
        team["people"][0]["contacts"]["discord"],
        "000000000000000001"
    );
    let cargo = std::fs::read_to_string(overlay.join("Cargo.toml")).expect("cargo");
    assert!(cargo.contains("strata-mod-fleet = { path = "), "{cargo}");
    let gitignore = std::fs::read_to_string(overlay.join(".gitignore")).expect("gi");
    for must in ["/config/secrets.enc", "/data/", "/tmp/", "vault-key"] {
        assert!(gitignore.contains(must), "{must}");
    }
    // The vault holds the three secrets; the key file is private and holds the passphrase.
    let v = strata_vault::FileVault::open(&overlay.join("config"), "a long vault passphrase")
        .expect("vault opens");
    assert_eq!(v.keys(), ["discord-main", "discord-ops", "openai-api-key"]);
    let key_file = tmp.path().join("keys/acme.vault-key");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file)
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // It builds into the engine checkout's target directory, reusing what that compiled.
    let shared = std::fs::read_to_string(overlay.join(".cargo/config.toml")).expect("config");
    assert!(shared.contains("target-dir = "), "{shared}");
    // The closing steps are docs/DEPLOY.md's, the vault's key file among them.
    assert_next_steps_are_documented(&out, &overlay);
    assert!(
        out.contains(&format!(
            "export STRATA_VAULT_KEY_FILE={}",
            tmp.path().join("keys/acme.vault-key").display()
        )),
        "{out}"
    );

    // A tool saved in a file of its own is compiled in without a `mod` line (the README's
    // first tool, as a newcomer would save it); a file with no tool is named by doctor.
    std::fs::write(
        overlay.join("src/tools/count_words.rs"),
        readme_first_tool(),
    )
    .expect("w");
    std::fs::write(
        overlay.join("src/tools/text_helpers.rs"),
        "//! Helpers, no tool.\n#[allow(dead_code)]\npub fn words(s: &str) -> usize {\n    s.split_whitespace().count()\n}\n",
    )
    .expect("w");
    build_overlay(&overlay, &target);
    let strata = |args: &[&str]| {
        Command::new(&binary)
            .arg("--overlay")
            .arg(&overlay)
            .args(args)
            .env("STRATA_VAULT_KEY_FILE", &key_file)
            .env("STRATA_SYSTEMD_DIR", tmp.path().join("no-units-installed"))
            .env_remove("STRATA_VAULT_PASSPHRASE")
            .output()
            .expect("run overlay binary")
    };
    // …its doctor passes…
    let o = strata(&["doctor"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    assert!(
        out.contains("ok   vault") && out.contains("holds the 2 key(s) the config references"),
        "{out}"
    );
    assert!(
        out.contains("info unit strata-acme.service not installed"),
        "{out}"
    );
    // …and it serves the chosen modules' tools and its own.
    let o = strata(&["tools"]);
    let out = text(&o);
    for tool in [
        "system_info",
        "service_health",
        "mind_api",
        "call_agent",
        "acme_about",
        "count_words",
    ] {
        assert!(out.contains(tool), "{tool} missing: {out}");
    }
    // The README's tool names the file it could not read.
    let o = strata(&[
        "invoke",
        "--tool",
        "count_words",
        "--args",
        r#"{"path": "knowledgebase/missing.md"}"#,
    ]);
    assert!(
        text(&o).contains("knowledgebase/missing.md"),
        "{}",
        text(&o)
    );
    let o = strata(&["doctor"]);
    let out = text(&o);
    assert!(
        out.contains("text_helpers.rs registered no tool") && !out.contains("count_words.rs"),
        "{out}"
    );
    // The ops profile runs only the ops agent and the ops bot.
    let o = strata(&["--profile", "ops", "config", "show", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let keys = |p: &str| -> Vec<String> {
        shown
            .pointer(p)
            .and_then(|v| v.as_object())
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(keys("/agents"), ["ops"]);
    assert_eq!(keys("/connectors/discord/accounts"), ["ops"]);
    assert_eq!(shown["server"]["port"], 18771);

    // The rendered units pass systemd's own check where it is installed.
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        for unit in ["strata-acme.service", "strata-acme-ops.service"] {
            let o = Command::new("systemd-analyze")
                .arg("verify")
                .arg(overlay.join("systemd").join(unit))
                .output()
                .expect("verify");
            let complaints: Vec<String> = String::from_utf8_lossy(&o.stderr)
                .lines()
                .filter(|l| l.contains(unit))
                .map(str::to_owned)
                .collect();
            assert!(
                o.status.success() && complaints.is_empty(),
                "{unit}: {complaints:?} {}",
                text(&o)
            );
        }
    } else {
        eprintln!("systemd-analyze not installed: unit verification skipped");
    }

    // Re-running with other answers updates in place: the team's own changes stay.
    std::fs::write(overlay.join("knowledgebase/ours.md"), "our notes").expect("w");
    let mut cfg: serde_json::Value = yaml_serde::from_str(&config).expect("yaml");
    cfg["log"] = serde_json::json!({"level": "debug"});
    std::fs::write(
        overlay.join("config/config.yaml"),
        yaml_serde::to_string(&cfg).expect("y"),
    )
    .expect("w");
    std::fs::write(
        overlay.join("agents/main/AGENTS.md"),
        "# Main, edited by the team\n",
    )
    .expect("w");
    std::fs::write(&file, answers(tmp.path(), &f, "helper", &["ops"], &binary)).expect("w");
    script_ok(&f);
    let o = run_setup(&file, &SECRETS);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("updated overlay `acme`"), "{}", text(&o));
    let agents = std::fs::read_to_string(overlay.join("config/agents.yaml")).expect("agents");
    assert!(
        agents.contains("main:") && agents.contains("helper:"),
        "{agents}"
    );
    let config = std::fs::read_to_string(overlay.join("config/config.yaml")).expect("config");
    assert!(config.contains("level: debug"), "{config}");
    assert_eq!(
        std::fs::read_to_string(overlay.join("agents/main/AGENTS.md")).expect("md"),
        "# Main, edited by the team\n"
    );
    assert!(overlay.join("agents/helper/AGENTS.md").is_file());
    assert_eq!(
        std::fs::read_to_string(overlay.join("knowledgebase/ours.md")).expect("r"),
        "our notes"
    );
    let cargo = std::fs::read_to_string(overlay.join("Cargo.toml")).expect("cargo");
    assert!(
        cargo.contains("strata-mod-ops") && !cargo.contains("strata-mod-fleet"),
        "{cargo}"
    );
    let v = strata_vault::FileVault::open(&overlay.join("config"), "a long vault passphrase")
        .expect("vault");
    assert_eq!(v.keys().len(), 3);

    // A failure late in an update puts every file back byte for byte.
    let before = tree(&overlay);
    let key_before = std::fs::read(&key_file).expect("key");
    std::fs::write(&file, answers(tmp.path(), &f, "third", &["fleet"], &binary)).expect("w");
    script_ok(&f);
    let o = run_setup(
        &file,
        &[SECRETS.as_slice(), &[("STRATA_SETUP_FAIL_AFTER", "units")]].concat(),
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("setup rolled back: nothing it wrote remains"),
        "{}",
        text(&o)
    );
    let after = tree(&overlay);
    let changed: Vec<_> = before
        .iter()
        .filter(|(p, b)| after.get(*p) != Some(b))
        .map(|(p, _)| p.display().to_string())
        .chain(
            after
                .keys()
                .filter(|p| !before.contains_key(*p))
                .map(|p| p.display().to_string()),
        )
        .collect();
    assert!(changed.is_empty(), "not restored: {changed:?}");
    assert_eq!(std::fs::read(&key_file).expect("key"), key_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_refused_first_run_leaves_nothing_behind() {
    let (tmp, f, file) = answered(&["ops"]).await;
    // A failure injected after each step in turn: the overlay and the key file are gone.
    for step in ["dirs", "crate", "vault", "config", "ops", "units"] {
        script_ok(&f);
        let o = run_setup(
            &file,
            &[SECRETS.as_slice(), &[("STRATA_SETUP_FAIL_AFTER", step)]].concat(),
        );
        assert!(!o.status.success(), "{step}");
        assert!(
            text(&o).contains(&format!("after step `{step}`")),
            "{}",
            text(&o)
        );
        assert!(
            !tmp.path().join("acme").exists(),
            "overlay left after a failure at {step}"
        );
        assert!(
            !tmp.path().join("keys").exists(),
            "key dir left after a failure at {step}"
        );
    }
    // Ctrl-C (a real SIGINT) between two steps: rolled back the same way, exit non-zero.
    script_ok(&f);
    let o = run_setup(
        &file,
        &[
            SECRETS.as_slice(),
            &[("STRATA_SETUP_SIGINT_AFTER", "config")],
        ]
        .concat(),
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("interrupted (Ctrl-C)") && text(&o).contains("rolled back"),
        "{}",
        text(&o)
    );
    assert!(!tmp.path().join("acme").exists());
    assert!(!tmp.path().join("keys").exists());
    // A token Discord rejects stops the run before anything is written.
    f.llm
        .script([FakeResponse::ok(serde_json::json!({"data": []}))]);
    f.discord.script([FakeResponse::status(
        401,
        serde_json::json!({"message": "401: Unauthorized"}),
    )]);
    let o = run_setup(&file, &SECRETS);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("Discord rejected the bot token"),
        "{}",
        text(&o)
    );
    assert!(!tmp.path().join("acme").exists());
    // A missing secret variable names itself; a typo in the answers is refused.
    let o = run_setup(&file, &SECRETS[..2]);
    assert!(
        text(&o).contains("`discord.token` names $T_DISCORD_TOKEN, which is not set"),
        "{}",
        text(&o)
    );
    std::fs::write(&file, "overlay_dir: x\nnmae: typo\n").expect("w");
    let o = run_setup(&file, &[]);
    assert!(!o.status.success());
    assert!(text(&o).contains("unknown field `nmae`"), "{}", text(&o));
    // A directory that is neither empty nor an overlay is not touched.
    let busy = tmp.path().join("busy");
    std::fs::create_dir_all(&busy).expect("mkdir");
    std::fs::write(busy.join("precious.txt"), "keep").expect("w");
    std::fs::write(
        &file,
        format!(
            "overlay_dir: {}\nname: busy\nunits: {{enabled: false}}\n",
            busy.display()
        ),
    )
    .expect("w");
    let o = run_setup(&file, &[]);
    assert!(
        text(&o).contains("is not empty and is not a Strata overlay"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read_dir(&busy).expect("rd").count(), 1);
}

#[test]
fn check_core_flags_planted_deployment_details_and_passes_on_the_tree() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("crates/x/src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::create_dir_all(tmp.path().join("modules/m/config")).expect("mkdir");
    // Each planted line is one violation; placeholders beside them are not.
    std::fs::write(
        src.join("lib.rs"),
        [
            "const CHANNEL: &str = \"1187432987654321098\";", // check-core: allow
            "const PLACEHOLDER: &str = \"000000000000000001\";",
            "let key = \"sk-proj-Zq8xW3vB9nL2mK7pR4tY6uI1oA5sD0fG\";", // check-core: allow
            "let short = \"sk-test\";",
            "// mail ops-lead@acme-corp.io for access", // check-core: allow
            "// docs: owner@example.com",
            "let p = \"/home/jdoe/deploy/config\";", // check-core: allow
            "let q = \"/home/user/overlay\";",
        ]
        .join("\n"),
    )
    .expect("w");
    std::fs::write(
        tmp.path().join("modules/m/config/default.yaml"),
        "token: AKIAQWERTYUIOPASDFGH\n", // check-core: allow
    )
    .expect("w");
    let o = Command::new(SETUP)
        .args(["check-core", "--root"])
        .arg(tmp.path())
        .output()
        .expect("run");
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    for (line, kind) in [
        ("lib.rs:1", "Discord snowflake"),
        ("lib.rs:3", "OpenAI-style key"),
        ("lib.rs:5", "e-mail address"),
        ("lib.rs:7", "absolute home path"),
        ("default.yaml:1", "AWS access key"),
    ] {
        assert!(
            out.lines().any(|l| l.contains(line) && l.contains(kind)),
            "{line} {kind}: {out}"
        );
    }
    assert!(out.contains("5 finding(s)"), "{out}");
    // The secret itself is not printed whole.
    assert!(!out.contains("Zq8xW3vB9nL2mK7pR4tY6uI1oA5sD0fG"), "{out}");
    // The engine's own tree is clean.
    let o = Command::new(SETUP)
        .args(["check-core"])
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", text(&o));
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git");
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

#[test]
fn a_team_clone_of_the_engine_cannot_push_to_it() {
    use strata_setup::remote::{Outcome, neutralise, restore};
    let upstream = "https://example.invalid/strata";
    let tmp = tempfile::tempdir().expect("tmp");
    let repo = tmp.path();
    git(repo, &["init", "-q"]);
    git(
        repo,
        &["remote", "add", "origin", "git@example.invalid:strata.git"],
    );
    // A maintainer is left alone, by flag or by the clone's config.
    assert_eq!(
        neutralise(repo, upstream, true).expect("n"),
        Outcome::Maintainer
    );
    git(repo, &["config", "strata.maintainer", "true"]);
    assert_eq!(
        neutralise(repo, upstream, false).expect("n"),
        Outcome::Maintainer
    );
    git(repo, &["config", "--unset", "strata.maintainer"]);
    // Anyone else: origin becomes upstream with pushing disabled, and is told how to undo.
    match neutralise(repo, upstream, false).expect("n") {
        Outcome::Neutralised(msg) => {
            assert!(msg.contains("git remote rename upstream origin"), "{msg}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(git(repo, &["remote"]), "upstream");
    assert_eq!(
        git(repo, &["remote", "get-url", "--push", "upstream"]),
        "DISABLED"
    );
    assert_eq!(
        git(repo, &["remote", "get-url", "upstream"]),
        "git@example.invalid:strata.git"
    );
    let push = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["push", "upstream", "HEAD"])
        .output()
        .expect("push");
    assert!(!push.status.success());
    assert_eq!(
        neutralise(repo, upstream, false).expect("n"),
        Outcome::AlreadyDone
    );
    restore(repo, "git@example.invalid:strata.git").expect("restore");
    assert_eq!(
        git(repo, &["remote", "get-url", "--push", "origin"]),
        "git@example.invalid:strata.git"
    );
    // A clone of something else is not touched.
    git(
        repo,
        &[
            "remote",
            "set-url",
            "origin",
            "https://example.invalid/other",
        ],
    );
    assert!(matches!(
        neutralise(repo, upstream, false).expect("n"),
        Outcome::NotUpstream(_)
    ));
    assert_eq!(git(repo, &["remote"]), "origin");
}

#[test]
fn new_module_scaffolds_a_crate_cargo_accepts() {
    let tmp = tempfile::tempdir().expect("tmp");
    let o = Command::new(SETUP)
        .args(["new-module", "billing", "--dir"])
        .arg(tmp.path())
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", text(&o));
    let dir = tmp.path().join("billing");
    for f in ["Cargo.toml", "src/lib.rs", "config/default.yaml"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let lib = std::fs::read_to_string(dir.join("src/lib.rs")).expect("lib");
    assert!(lib.contains("declare_module!(\"billing\"") && lib.contains("async fn billing_ping"));
    let meta = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--offline",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(dir.join("Cargo.toml"))
        .output()
        .expect("metadata");
    assert!(meta.status.success(), "{}", text(&meta));
    assert!(String::from_utf8_lossy(&meta.stdout).contains("\"name\":\"strata-mod-billing\""));
    // Twice is refused; a bad name is refused.
    let o = Command::new(SETUP)
        .args(["new-module", "billing", "--dir"])
        .arg(tmp.path())
        .output()
        .expect("run");
    assert!(!o.status.success());
    let o = Command::new(SETUP)
        .args(["new-module", "Bad_Name", "--dir"])
        .arg(tmp.path())
        .output()
        .expect("run");
    assert!(text(&o).contains("lower-case letters"), "{}", text(&o));
}

#[test]
fn the_example_overlay_has_the_layout_the_wizard_generates() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("fresh");
    let o = Command::new(SETUP)
        .args(["new-overlay"])
        .arg(&dir)
        .args(["--name", "fresh", "--modules", "ops,fleet"])
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", text(&o));
    let example = engine_root().join("overlay-example");
    assert_eq!(
        std::fs::read_to_string(dir.join(".gitignore")).expect("generated"),
        std::fs::read_to_string(example.join(".gitignore")).expect("example"),
        "overlay-example/.gitignore differs from what the wizard writes"
    );
    for rel in tree(&dir).keys() {
        let name = rel.to_string_lossy();
        // The example keeps its own lock in the workspace's, and placeholders for empty dirs
        // only where it has no content; as a workspace member it builds into the workspace's
        // target directory without a .cargo/config.toml saying so.
        if name == "Cargo.lock" || name.ends_with(".gitkeep") || name == ".cargo/config.toml" {
            continue;
        }
        assert!(
            example.join(rel).exists(),
            "overlay-example lacks {name}, which the wizard generates"
        );
    }
}

/// Runs `strata-setup setup` on a real pseudo-terminal (util-linux `script`), typing `keys`
/// one answer at a time; its exit and what the screen showed.
fn typed_setup(keys: &[String]) -> (Output, String) {
    use std::io::Write;
    // Type-ahead works (the keys wait in the pty), so the pause only paces the screen.
    const KEY_DELAY_MS: u64 = 150;
    let mut child = Command::new("script")
        .args(["-qfec", &format!("{SETUP} setup"), "/dev/null"])
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script");
    let mut stdin = child.stdin.take().expect("stdin");
    for k in keys {
        std::thread::sleep(std::time::Duration::from_millis(KEY_DELAY_MS));
        stdin.write_all(k.as_bytes()).expect("type");
        stdin.flush().expect("flush");
    }
    std::thread::sleep(std::time::Duration::from_millis(400));
    drop(stdin);
    let o = child.wait_with_output().expect("wait");
    let screen = String::from_utf8_lossy(&o.stdout).into_owned();
    (o, screen)
}

/// The interactive wizard on a real pseudo-terminal (util-linux `script`), keys typed one
/// answer at a time: inquire's prompts, defaults and filtering, end to end.
#[test]
fn the_wizard_on_a_terminal_takes_typed_answers() {
    if !strata_test_support::pty_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("typed");
    let keys: Vec<String> = vec![
        format!("{}\r", dir.display()), // where
        "\r".into(),                    // name: the directory's
        "\r".into(),                    // two-layer
        "\r".into(),                    // no vault
        "none\r".into(),                // provider, found by typing to filter
        "\r".into(),                    // no Discord
        "Typed Owner\r".into(),         // owner
        "\r".into(),                    // agent id: main
        "\r".into(),                    // display name
        "\r".into(),                    // description
        "\r".into(),                    // tier: coordinator
        "\r".into(),                    // approvers: owners
        "15\r".into(),                  // per minute
        "\r".into(),                    // per hour
        "\r".into(),                    // no ops instance
        "n\r".into(),                   // no units
    ];
    let (o, screen) = typed_setup(&keys);
    assert!(o.status.success(), "{screen}");
    assert!(screen.contains("created overlay `typed`"), "{screen}");
    let team = std::fs::read_to_string(dir.join("config/team.json")).expect("team");
    assert!(team.contains("Typed Owner"), "{team}");
    let cfg = std::fs::read_to_string(dir.join("config/config.yaml")).expect("config");
    assert!(
        cfg.contains("per_minute: 15") && !cfg.contains("defaults:\n  llm"),
        "{cfg}"
    );
    assert!(!dir.join("systemd").exists() && !dir.join("config/secrets.enc").exists());
}

/// A fork or a mirror of the engine — any `origin` URL — is known by the commit its history
/// starts at, and neutralised like a clone of the engine's own URL.
#[test]
fn a_mirror_of_the_engine_is_known_by_its_root_commit() {
    use strata_setup::remote::{Engine, Outcome, neutralise_engine};
    let tmp = tempfile::tempdir().expect("tmp");
    let engine_repo = tmp.path().join("engine");
    std::fs::create_dir_all(&engine_repo).expect("mkdir");
    git(&engine_repo, &["init", "-q"]);
    git(
        &engine_repo,
        &["config", "user.email", "dev@example.invalid"],
    );
    git(&engine_repo, &["config", "user.name", "Example Dev"]);
    git(
        &engine_repo,
        &["commit", "-q", "--allow-empty", "-m", "first"],
    );
    let root = git(&engine_repo, &["rev-list", "--max-parents=0", "HEAD"]);
    let engine = Engine {
        upstream: vec!["https://example.invalid/strata".into()],
        root_commit: Some(root),
    };
    // The team's clone comes from a mirror on their own server.
    let team = tmp.path().join("team");
    let o = Command::new("git")
        .args(["clone", "-q"])
        .arg(&engine_repo)
        .arg(&team)
        .output()
        .expect("clone");
    assert!(o.status.success());
    git(
        &team,
        &[
            "remote",
            "set-url",
            "origin",
            "https://git.example.invalid/team/strata-mirror.git",
        ],
    );
    assert!(matches!(
        neutralise_engine(&team, &engine, false).expect("n"),
        Outcome::Neutralised(_)
    ));
    assert_eq!(
        git(&team, &["remote", "get-url", "--push", "upstream"]),
        "DISABLED"
    );
    // Another project on the same server is left alone.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    git(&other, &["init", "-q"]);
    git(&other, &["config", "user.email", "dev@example.invalid"]);
    git(&other, &["config", "user.name", "Example Dev"]);
    git(
        &other,
        &["commit", "-q", "--allow-empty", "-m", "unrelated"],
    );
    git(
        &other,
        &[
            "remote",
            "add",
            "origin",
            "https://git.example.invalid/team/other.git",
        ],
    );
    assert!(matches!(
        neutralise_engine(&other, &engine, false).expect("n"),
        Outcome::NotUpstream(_)
    ));
    // The engine's own Cargo.toml names its root commit (and its URLs once it has public
    // ones — none that are placeholders), and the root commit is this checkout's (where its
    // history is here to ask).
    let ws = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("root");
    let ours = Engine::of_workspace(ws).expect("[workspace.metadata.strata]");
    assert!(ours.root_commit.is_some());
    assert!(
        ours.upstream.iter().all(|u| !u.contains("example.invalid")),
        "{:?}",
        ours.upstream
    );
    let here = git(ws, &["rev-list", "--max-parents=0", "HEAD"]);
    if !here.is_empty() && git(ws, &["rev-parse", "--is-shallow-repository"]) == "false" {
        assert!(
            here.lines().any(|r| Some(r) == ours.root_commit.as_deref()),
            "root_commit in Cargo.toml is not this history's root: {here}"
        );
    }
}

/// The pre-commit hook refuses a commit on `main`, lets one on a branch through (this
/// repository has no xtask to run check-core with), and leaves someone else's hook alone.
#[test]
fn the_pre_commit_hook_keeps_commits_off_main() {
    let tmp = tempfile::tempdir().expect("tmp");
    let repo = tmp.path();
    git(repo, &["init", "-q", "-b", "main"]);
    git(repo, &["config", "user.email", "dev@example.invalid"]);
    git(repo, &["config", "user.name", "Example Dev"]);
    let o = Command::new(SETUP)
        .args(["install-hook", "--root"])
        .arg(repo)
        .output()
        .expect("install-hook");
    assert!(o.status.success(), "{o:?}");
    let commit = |msg: &str| {
        Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["commit", "-q", "--allow-empty", "-m", msg])
            .output()
            .expect("commit")
    };
    let on_main = commit("on main");
    assert!(!on_main.status.success());
    assert!(String::from_utf8_lossy(&on_main.stderr).contains("no commits on main"));
    git(repo, &["switch", "-q", "-c", "work"]);
    assert!(commit("on a branch").status.success());
    // Installing again replaces ours; someone else's hook is not overwritten.
    assert!(
        Command::new(SETUP)
            .args(["install-hook", "--root"])
            .arg(repo)
            .status()
            .expect("again")
            .success()
    );
    std::fs::write(repo.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n").expect("w");
    let o = Command::new(SETUP)
        .args(["install-hook", "--root"])
        .arg(repo)
        .output()
        .expect("install-hook");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not Strata's"),
        "{o:?}"
    );
}

/// The key checks wait on the network: a person at a terminal sees what is being checked
/// (and the line is cleared after); a pipe gets none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_checks_show_a_progress_line_on_a_terminal_only() {
    if !strata_test_support::pty_available() {
        return;
    }
    let (tmp, f, file) = answered(&[]).await;
    let refused = || {
        FakeResponse::status(
            401,
            serde_json::json!({"error": {"message": "bad key", "type": "invalid_request_error"}}),
        )
    };
    f.llm.script([refused()]);
    let cmd = format!("{SETUP} setup --answers {}", file.display());
    let o = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env("TERM", "xterm")
        .env("STRATA_SETUP_VAULT_ITERATIONS", "2000")
        .envs(SECRETS)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script");
    let screen = String::from_utf8_lossy(&o.stdout);
    assert!(
        screen.contains("checking the openai key with the provider…\r\x1b[2K"),
        "{screen:?}"
    );
    assert!(screen.contains("provider check failed"), "{screen:?}");
    f.llm.script([refused()]);
    let piped = run_setup(&file, &SECRETS);
    assert!(
        text(&piped).contains("provider check failed"),
        "{}",
        text(&piped)
    );
    assert!(!text(&piped).contains("checking"), "{}", text(&piped));
    assert!(!tmp.path().join("acme").exists());
}

/// Starts `binary --overlay overlay serve` on a free port; (child, base URL, control token).
fn serve_overlay(binary: &Path, overlay: &Path) -> (std::process::Child, String, String) {
    use std::io::BufRead as _;
    let mut child = Command::new(binary)
        .arg("--overlay")
        .arg(overlay)
        .args(["serve", "--set", "server.port=0"])
        .env_remove("STRATA_VAULT_PASSPHRASE")
        .env("STRATA_SYSTEMD_DIR", overlay.join("no-units-installed"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("serve");
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let (mut line, mut said) = (String::new(), String::new());
    let base = loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            panic!("serve did not announce its address; it said:\n{said}");
        }
        said.push_str(&line);
        if let Some(i) = line.find("control API on ") {
            let rest = &line[i + "control API on ".len()..];
            break rest
                .split(',')
                .next()
                .unwrap_or_default()
                .trim()
                .trim_end_matches("/api")
                .to_owned();
        }
    };
    // Keep draining its log so it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    let token = std::fs::read_to_string(overlay.join("data/api-token"))
        .expect("per-boot token")
        .trim()
        .to_owned();
    (child, base, token)
}

/// The requests of a keyless check: the model list, then one tiny call, neither with a key.
fn assert_keyless_check(reqs: &[strata_test_support::Recorded], model: &str) {
    let seen: Vec<(&str, &str)> = reqs
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        seen,
        [("GET", "/v1/models"), ("POST", "/v1/chat/completions")],
        "{reqs:?}"
    );
    assert!(
        reqs.iter()
            .all(|r| !r.headers.contains_key("authorization"))
    );
    assert_eq!(reqs[1].body["model"], model, "{:?}", reqs[1].body);
}

/// A local OpenAI-compatible server without a key, set up from an answers file and on a
/// terminal: no key reference is written, the check reaches the server (models, one tiny
/// call), doctor passes, serve starts the agent and /chat answers through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_local_server_is_checked_passes_doctor_and_answers() {
    let tmp = tempfile::tempdir().expect("tmp");
    let llm = FakeServer::start().await.expect("llm");
    let models = || {
        FakeResponse::ok(
            serde_json::json!({"object": "list", "data": [{"id": "local-model", "object": "model"}]}),
        )
    };
    llm.script([models(), strata_test_support::openai::text("OK")]);
    let overlay = tmp.path().join("answers/local");
    let file = tmp.path().join("answers.yaml");
    std::fs::write(
        &file,
        format!(
            "overlay_dir: {}/answers/sub/../local\nname: local\nmodules: []\nmaintainer: true\n\
             provider: {{kind: openai, model: local-model, base_url: {}/v1}}\n\
             owner: {{name: Example Owner}}\nunits: {{enabled: false}}\n",
            tmp.path().display(),
            llm.url
        ),
    )
    .expect("w");
    let o = run_setup(&file, &[]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    // The path as a person would write it: no `sub/..` left in what is shown or written.
    assert!(
        out.contains(&format!(
            "created overlay `local` at {}\n",
            overlay.display()
        )) && !out.contains("/../"),
        "{out}"
    );
    assert!(out.contains("model `local-model` answered"), "{out}");
    assert_keyless_check(&llm.requests(), "local-model");
    let config = std::fs::read_to_string(overlay.join("config/config.yaml")).expect("config");
    assert!(
        !config.contains("api_key") && config.contains(&format!("base_url: {}/v1", llm.url)),
        "{config}"
    );
    // The agent gets a short list fitted to the answers, not `all`.
    let agents = std::fs::read_to_string(overlay.join("config/agents.yaml")).expect("agents");
    let doc: serde_json::Value = yaml_serde::from_str(&agents).expect("yaml");
    let tools = doc["agents"]["main"]["tools"]
        .as_array()
        .expect("a list")
        .clone();
    assert!(
        tools.len() < 20 && tools.contains(&serde_json::json!("local_about")),
        "{agents}"
    );

    // The same on a terminal: typed answers, the check answered yes.
    let typed = tmp.path().join("typed/local");
    if strata_test_support::pty_available() {
        llm.script([models(), strata_test_support::openai::text("OK")]);
        let keys: Vec<String> = vec![
            format!("{}\r", typed.display()), // where
            "\r".into(),                      // name: the directory's, `local`
            "\r".into(),                      // two-layer
            "\r".into(),                      // no vault
            "openai\r".into(),                // provider
            "local-model\r".into(),           // model
            "\r".into(),                      // no key
            format!("{}/v1\r", llm.url),      // base URL
            "\r".into(),                      // check it now: yes
            "\r".into(),                      // no Discord
            "Typed Owner\r".into(),           // owner
            "\r".into(),                      // agent id: main
            "\r".into(),                      // display name
            "\r".into(),                      // description
            "\r".into(),                      // tier
            "\r".into(),                      // approvers: owners
            "\r".into(),                      // per minute
            "\r".into(),                      // per hour
            "\r".into(),                      // no ops instance
            "n\r".into(),                     // no units
        ];
        let (o, screen) = typed_setup(&keys);
        assert!(o.status.success(), "{screen}");
        assert!(screen.contains("model `local-model` answered"), "{screen}");
        assert_keyless_check(&llm.requests()[2..], "local-model");
        let cfg = std::fs::read_to_string(typed.join("config/config.yaml")).expect("config");
        assert!(!cfg.contains("api_key"), "{cfg}");
    }

    // Built (beside the engine, into its target directory), doctor passes for both…
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(PathBuf::from)
        .expect("target dir");
    build_overlay(&overlay, &target);
    let binary = target.join("debug/strata-local");
    for dir in [&overlay, &typed] {
        if !dir.exists() {
            continue;
        }
        let o = Command::new(&binary)
            .arg("--overlay")
            .arg(dir)
            .arg("doctor")
            .env_remove("STRATA_VAULT_PASSPHRASE")
            .env("STRATA_SYSTEMD_DIR", dir.join("no-units-installed"))
            .output()
            .expect("doctor");
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        assert!(!out.contains("FAIL"), "{out}");
    }
    // …and serve runs the agent, which answers /chat through the local server.
    llm.script([strata_test_support::openai::text(
        "hello from the local model",
    )]);
    let (mut child, base, token) = serve_overlay(&binary, &overlay);
    let answer = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .post(format!("{base}/chat"))
        .header("X-Strata-Token", &token)
        .json(&serde_json::json!({"message": "hello?"}))
        .send()
        .await
        .expect("chat");
    let status = answer.status();
    let body: serde_json::Value = answer.json().await.unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{body}");
    assert!(
        body.to_string().contains("hello from the local model"),
        "{body}"
    );
    let last = llm.requests().last().cloned().expect("a request");
    assert_eq!(last.path, "/v1/chat/completions");
    assert!(!last.headers.contains_key("authorization"));
}
