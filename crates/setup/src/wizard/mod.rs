//! `cargo xtask setup`: collect answers (from a file, or by asking), check what can be
//! checked, then write the overlay in steps recorded in a [`Journal`], rolling everything
//! back on a failure or Ctrl-C.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context as _, bail};
use zeroize::Zeroizing;

use crate::answers::Answers;
use crate::journal::Journal;
use crate::prompt::Prompter;

mod apply;
mod ask;
mod plan;

use apply::apply;
use ask::fill;
use plan::resolve;

/// How the wizard runs.
pub struct Options {
    /// The answers file, if any (then nothing is asked).
    pub answers: Option<PathBuf>,
    /// `--maintainer`: leave the engine clone's `origin` alone.
    pub maintainer: bool,
    /// The engine checkout running the wizard.
    pub engine_root: PathBuf,
}

/// The steps, in order; `STRATA_SETUP_FAIL_AFTER=<step>` fails the run after one (tests of
/// the rollback).
pub const STEPS: &[&str] = &["dirs", "crate", "vault", "config", "ops", "units", "remote"];

/// Everything resolved, ready to write.
struct Plan {
    a: Answers,
    overlay: PathBuf,
    name: String,
    modules: Vec<String>,
    update: bool,
    port: u16,
    passphrase: Option<Zeroizing<String>>,
    key_file: Option<PathBuf>,
    secrets: Vec<(String, Zeroizing<String>)>,
    agent_id: String,
    /// Whether config names the provider's key (`api_key: vault:<kind>-api-key`): when one
    /// was given, or when the provider cannot work without one (no `base_url`). A keyless
    /// local server gets no reference: doctor would fail on a key nobody has.
    key_ref: bool,
    /// The first agent's `tools:`.
    agent_tools: serde_json::Value,
    /// The engine checkout's target directory the overlay builds into, when it shares it.
    target_dir: Option<PathBuf>,
    notes: Vec<String>,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
}

fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The module crates available in the engine checkout (`modules/*/Cargo.toml`).
pub fn available_modules(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root.join("modules"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join("Cargo.toml").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Toolchain and optional tools: lines to show; an error when cargo itself is missing.
pub fn prerequisites() -> anyhow::Result<Vec<String>> {
    let version = |cmd: &str| {
        std::process::Command::new(cmd)
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned()
            })
    };
    let mut lines = Vec::new();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    match version(&cargo) {
        Some(v) => lines.push(format!("ok   {v}")),
        None => bail!("cargo is not on PATH: install the Rust toolchain (rustup.rs) first"),
    }
    for (cmd, why) in [
        ("git", "keeps the overlay under version control"),
        ("claude", "optional: the Claude Code CLI provider"),
        (
            "systemd-analyze",
            "optional: checks the rendered service units",
        ),
    ] {
        match version(cmd) {
            Some(v) => lines.push(format!("ok   {cmd}: {v}")),
            None => lines.push(format!("info {cmd} not found ({why})")),
        }
    }
    Ok(lines)
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

fn current_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "strata".into())
}

/// Whether `dir` holds an overlay made earlier (a crate with `config/`).
fn is_overlay(dir: &Path) -> bool {
    dir.join("Cargo.toml").is_file() && dir.join("config").is_dir()
}

/// `repository` of the engine workspace's `Cargo.toml` (the upstream URL).
pub fn engine_repository(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("repository = "))
        .map(|v| v.trim_matches('"').to_owned())
}

/// Runs the wizard; the summary lines on success. On failure everything written is rolled
/// back and the error says what happened.
pub fn run(opts: &Options, prompter: Option<&mut dyn Prompter>) -> anyhow::Result<Vec<String>> {
    let answers: Answers = match &opts.answers {
        Some(f) => {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            yaml_serde::from_str(&text)
                .with_context(|| format!("{} is not a valid answers file", f.display()))?
        }
        None => Answers::default(),
    };
    run_with(opts, answers, prompter)
}

/// [`run`] with the answers given.
/// The config the plan will write, read by the engine's own typed config (unknown keys refused
/// everywhere) before anything is written: a wizard that generated a key `serve` would refuse
/// fails here, not on the operator's first start.
fn check_generated_config(plan: &Plan) -> anyhow::Result<()> {
    let mut merged = apply::main_config(plan);
    if let (Some(m), serde_json::Value::Object(agents)) =
        (merged.as_object_mut(), apply::agents_config(plan))
    {
        m.extend(agents);
    }
    serde_path_to_error::deserialize::<_, strata_engine::config::Config>(merged).map_err(|e| {
        anyhow::anyhow!(
            "the wizard would write a config the engine refuses at `{}`: {} (a bug in the \
             wizard; nothing was written)",
            e.path(),
            e.inner()
        )
    })?;
    Ok(())
}

pub fn run_with(
    opts: &Options,
    mut answers: Answers,
    prompter: Option<&mut dyn Prompter>,
) -> anyhow::Result<Vec<String>> {
    let mut lines = prerequisites()?;
    let interactive = prompter.is_some();
    if let Some(p) = prompter {
        // On a terminal the checks come first, before the questions.
        for l in lines.drain(..) {
            eprintln!("{l}");
        }
        fill(&mut answers, p, &opts.engine_root)?;
    }
    let plan = resolve(answers, &opts.engine_root, interactive)?;
    check_generated_config(&plan)?;
    lines.extend(plan.notes.iter().cloned());
    let stop = Arc::new(AtomicBool::new(false));
    let sig = signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
        .context("installing the Ctrl-C handler")?;
    let mut journal = Journal::new(&plan.overlay);
    let result = apply(
        &plan,
        &opts.engine_root,
        opts.maintainer,
        &mut journal,
        &stop,
    );
    signal_hook::low_level::unregister(sig);
    match result {
        Ok(()) => {
            lines.push(format!(
                "{} overlay `{}` at {}",
                if plan.update { "updated" } else { "created" },
                plan.name,
                plan.overlay.display()
            ));
            lines.extend(journal.report.iter().map(|l| format!("  {l}")));
            if let Some(t) = &plan.target_dir {
                lines.push(format!(
                    "builds go to {} (shared with the engine checkout: what it compiled is reused; \
                     .cargo/config.toml says so)",
                    t.display()
                ));
            }
            lines.extend(next_steps(&plan));
            Ok(lines)
        }
        Err(e) => {
            let left = journal.rollback();
            if left.is_empty() {
                bail!("{e:#}\nsetup rolled back: nothing it wrote remains");
            }
            bail!(
                "{e:#}\nsetup rolled back, but these could not be undone:\n  {}",
                left.join("\n  ")
            )
        }
    }
}

/// The closing "next" block: the commands of docs/DEPLOY.md's "3. Build, check, run" for
/// this overlay (a test holds the two together), the vault's passphrase included.
fn next_steps(plan: &Plan) -> Vec<String> {
    let mut out = vec![
        "next (docs/DEPLOY.md, \"3. Build, check, run\"):".to_owned(),
        format!("  cd {}", plan.overlay.display()),
    ];
    match (&plan.key_file, &plan.passphrase) {
        (Some(k), _) => out.push(format!("  export STRATA_VAULT_KEY_FILE={}", k.display())),
        (None, Some(_)) => out.push(
            "  read -rs STRATA_VAULT_PASSPHRASE && export STRATA_VAULT_PASSPHRASE".to_owned(),
        ),
        (None, None) => {}
    }
    out.push("  cargo run -- doctor".to_owned());
    out.push("  cargo run -- serve".to_owned());
    out
}

/// `p` with `.` and `..` taken out lexically (it may not exist yet, so not `canonicalize`):
/// `/work/engine/../acme` is shown and written as `/work/acme`.
pub fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The non-empty, trimmed items of a comma-separated answer.
fn comma_list(answer: &str) -> Vec<String> {
    answer
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Answers in order, each checked against the question it expects (a substring).
    struct Scripted(VecDeque<(&'static str, &'static str)>);

    impl Scripted {
        fn next(&mut self, q: &str) -> &'static str {
            let (want, answer) = self
                .0
                .pop_front()
                .unwrap_or_else(|| panic!("unexpected question: {q}"));
            assert!(q.contains(want), "asked `{q}`, expected `{want}`");
            answer
        }
    }

    /// Runs the wizard as a maintainer with the answers `p` types; every scripted question
    /// must have been asked. The closing lines.
    fn run_scripted(p: &mut Scripted) -> Vec<String> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .map(PathBuf::from)
            .expect("root");
        let a = Answers {
            maintainer: true,
            ..Default::default()
        };
        let opts = Options {
            answers: None,
            maintainer: true,
            engine_root: root,
        };
        let lines = run_with(&opts, a, Some(p)).expect("wizard");
        assert!(p.0.is_empty(), "questions not asked: {:?}", p.0);
        lines
    }

    impl Prompter for Scripted {
        fn text(&mut self, q: &str, default: Option<&str>) -> anyhow::Result<String> {
            let a = self.next(q);
            Ok(if a.is_empty() {
                default.unwrap_or("").to_owned()
            } else {
                a.to_owned()
            })
        }
        fn confirm(&mut self, q: &str, _default: bool) -> anyhow::Result<bool> {
            Ok(self.next(q) == "y")
        }
        fn select(&mut self, q: &str, options: &[&str]) -> anyhow::Result<usize> {
            let a = self.next(q);
            options
                .iter()
                .position(|o| o.starts_with(a))
                .ok_or_else(|| anyhow::anyhow!("no option {a}"))
        }
        fn multi_select(&mut self, q: &str, options: &[&str]) -> anyhow::Result<Vec<usize>> {
            let a = self.next(q);
            Ok(a.split(',')
                .filter_map(|x| options.iter().position(|o| *o == x))
                .collect())
        }
        fn secret(&mut self, q: &str) -> anyhow::Result<Zeroizing<String>> {
            Ok(Zeroizing::new(self.next(q).to_owned()))
        }
    }

    #[test]
    fn the_interactive_wizard_asks_in_order_and_writes_what_was_typed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("team-bot");
        let dir_s: &'static str = Box::leak(dir.display().to_string().into_boxed_str());
        let key_file = tmp.path().join("key");
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .map(PathBuf::from)
            .expect("root");
        let mut p = Scripted(VecDeque::from([
            ("Where should", dir_s),
            ("Deployment name", ""),
            ("Layers", "three-layer"),
            ("Modules to link", "ops"),
            ("Vault passphrase", "typed passphrase"),
            ("passphrase again", "typed passphrase"),
            ("key file", "y"),
            ("LLM provider", "anthropic"),
            ("Model", ""),
            ("anthropic API key", "typed-anthropic-key"),
            ("Check it now", "n"),
            ("Discord bot", "n"),
            ("Owner's name", "Example Owner"),
            ("First agent's id", "helper"),
            ("display name", "Helper"),
            ("What it is for", ""),
            ("tier", "assistant"),
            ("Approvers", ""),
            ("per minute", "20"),
            ("per hour", ""),
            ("ops", "n"),
            ("systemd units", "n"),
        ]));
        let mut a = Answers::default();
        a.vault.key_file = Some(key_file.clone());
        a.maintainer = true;
        let opts = Options {
            answers: None,
            maintainer: true,
            engine_root: root,
        };
        let lines = run_with(&opts, a, Some(&mut p)).expect("wizard");
        assert!(p.0.is_empty(), "questions not asked: {:?}", p.0);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("created overlay `team-bot`")),
            "{lines:?}"
        );
        let cfg = std::fs::read_to_string(dir.join("config/config.yaml")).expect("config");
        assert!(
            cfg.contains("provider: anthropic") && cfg.contains("model: claude-sonnet-4-5"),
            "{cfg}"
        );
        assert!(
            cfg.contains("per_minute: 20") && cfg.contains("per_hour: 1000"),
            "{cfg}"
        );
        assert!(!cfg.contains("typed-anthropic-key"));
        let v =
            strata_vault::FileVault::open(&dir.join("config"), "typed passphrase").expect("vault");
        use strata_engine::secret::Vault as _;
        assert_eq!(
            v.get("anthropic-api-key")
                .map(|s| s.expose().to_owned())
                .as_deref(),
            Some("typed-anthropic-key")
        );
        assert!(!dir.join("systemd").exists());
        let team = std::fs::read_to_string(dir.join("config/team.json")).expect("team");
        assert!(team.contains("\"agent_tier\": \"assistant\""), "{team}");
    }

    #[test]
    fn the_interactive_wizard_takes_a_key_file_path() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("keyed");
        let dir_s: &'static str = Box::leak(dir.display().to_string().into_boxed_str());
        // Typed relative to the working directory, with a `..` in it.
        let key = tmp.path().join("keys/keyed.vault-key");
        let typed: &'static str = Box::leak(
            format!("{}/keys/../keys/keyed.vault-key", tmp.path().display()).into_boxed_str(),
        );
        let mut p = Scripted(VecDeque::from([
            ("Where should", dir_s),
            ("Deployment name", ""),
            ("Layers", "two-layer"),
            ("Vault passphrase", "typed passphrase"),
            ("passphrase again", "typed passphrase"),
            ("key file", "y"),
            ("Key file path", typed),
            ("LLM provider", "none"),
            ("Discord bot", "n"),
            ("Owner's name", "Example Owner"),
            ("First agent's id", ""),
            ("display name", ""),
            ("What it is for", ""),
            ("tier", "assistant"),
            ("Approvers", ""),
            ("per minute", ""),
            ("per hour", ""),
            ("ops", "n"),
            ("systemd units", "n"),
        ]));
        let lines = run_scripted(&mut p);
        assert_eq!(
            std::fs::read_to_string(&key)
                .expect("the key file")
                .trim_end(),
            "typed passphrase"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.trim() == format!("export STRATA_VAULT_KEY_FILE={}", key.display())),
            "{lines:?}"
        );
    }

    #[test]
    fn the_ops_instance_on_claude_code_gets_the_clis_own_tools() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("ops-bot");
        let dir_s: &'static str = Box::leak(dir.display().to_string().into_boxed_str());
        let mut p = Scripted(VecDeque::from([
            ("Where should", dir_s),
            ("Deployment name", ""),
            ("Layers", "three-layer"),
            ("Modules to link", "ops"),
            ("Vault passphrase", "typed passphrase"),
            ("passphrase again", "typed passphrase"),
            ("key file", "n"),
            ("LLM provider", "claude-code"),
            ("Model", "sonnet"),
            ("Check it now", "n"),
            ("Discord bot", "n"),
            ("Owner's name", "Example Owner"),
            ("First agent's id", "helper"),
            ("display name", "Helper"),
            ("What it is for", ""),
            ("tier", "assistant"),
            ("Approvers", ""),
            ("per minute", ""),
            ("per hour", ""),
            ("ops", "y"),
            ("systemd units", "n"),
        ]));
        run_scripted(&mut p);
        let ops = std::fs::read_to_string(dir.join("config/agents.ops.yaml")).expect("ops");
        let doc: serde_json::Value = yaml_serde::from_str(&ops).expect("yaml");
        let llm = &doc["agents"]["ops"]["llm"];
        assert_eq!(llm["provider"], "claude-code", "{ops}");
        assert_eq!(llm["builtins"], "all", "{ops}");
        assert_eq!(llm["model"], "sonnet", "{ops}");
        // The main agent keeps the default: no built-ins.
        let main = std::fs::read_to_string(dir.join("config/config.yaml")).expect("config");
        assert!(!main.contains("builtins"), "{main}");
    }
}

#[cfg(test)]
mod normalize_tests {
    use super::*;

    #[test]
    fn a_path_is_shown_without_dot_and_dot_dot() {
        assert_eq!(
            normalize(Path::new("/work/engine/../acme/./deploy")),
            PathBuf::from("/work/acme/deploy")
        );
        assert_eq!(normalize(Path::new("../x/../y")), PathBuf::from("../y"));
    }
}
