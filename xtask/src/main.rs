//! Project automation, in Rust so it runs wherever cargo does (the cargo-xtask pattern).
//!
//! ```text
//! cargo xtask test     the whole test suite (nextest when installed, else cargo test) + doctests
//! cargo xtask ci       rustfmt --check, clippy -D warnings, check-core, then `test`
//! cargo xtask bench    release-build benchmarks; results in target/bench/*.json
//! cargo xtask bench first-build   a new overlay's first build beside a built engine checkout
//! cargo xtask bench agentdojo [--suites a,b] [--quick] [--defence on|off]   the taint gate on
//!                      AgentDojo: a scripted obedient model, tools over MCP, nobody approving
//! cargo xtask deny     supply chain: cargo deny (advisories offline, licences, bans, sources)
//! cargo xtask dist     the release binary, its sha256, SBOM and systemd units in target/dist/
//! cargo xtask link-order [--package PKG]   remake PKG/link-order.txt (valgrind): the functions
//!                      `serve` runs, which the overlay's build.rs has lld lay out together
//! cargo xtask train-safety   fit the injection model to the corpus, regenerate its weights
//! cargo xtask setup [--answers FILE] [--maintainer]   the deployment wizard
//! cargo xtask new-overlay DIR [--name N] [--modules a,b]
//! cargo xtask new-module NAME [--dir DIR]
//! cargo xtask check-core   deployment details that must not be in core or modules
//! ```
//!
//! The last four run the `strata-setup` crate's binary, so this crate keeps no dependencies.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod agentdojo;
mod first_build;
mod link_order;

fn root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// A command as a person would type it.
fn shown(cmd: &Command) -> String {
    format!(
        "{} {}",
        cmd.get_program().to_string_lossy(),
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// Runs a command, echoing it; Err with a readable line when it fails.
fn run(mut cmd: Command) -> Result<(), String> {
    let shown = shown(&cmd);
    eprintln!("$ {shown}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run `{shown}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` failed ({status})"))
    }
}

fn has_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The target directory (`CARGO_TARGET_DIR`, relative to the workspace, or `target/`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_relative() { root().join(p) } else { p })
        .unwrap_or_else(|| root().join("target"))
}

/// Where skipped tests write what they did not test (`strata_test_support::skipped`).
fn skip_log() -> PathBuf {
    target_dir().join("test-skips.log")
}

/// `cargo <args> --manifest-path examples/downstream/Cargo.toml`, into the workspace's target
/// directory (the third-party crates the workspace compiled are reused).
fn downstream(args: &[&str]) -> Command {
    let mut c = cargo();
    c.args(args)
        .arg("--manifest-path")
        .arg(root().join("examples/downstream/Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir());
    c
}

/// Tests counted as the runners report them: a test that returned early because something
/// was missing is among `passed` there, and is taken out for the closing line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    passed: usize,
    failed: usize,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.passed += o.passed;
        self.failed += o.failed;
    }
}

/// Sums libtest's `test result: ok. 5 passed; 1 failed; …` lines (cargo test, doctests).
fn libtest_counts(out: &str) -> Counts {
    let mut c = Counts::default();
    for line in out.lines() {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            continue;
        };
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            let n = |i: usize| words.get(i).and_then(|w| w.parse::<usize>().ok());
            // `ok. 5 passed` / `FAILED. 3 passed` / ` 1 failed`
            let (num, what) = match words.as_slice() {
                [_, _, w] => (n(1), *w),
                [_, w] => (n(0), *w),
                _ => continue,
            };
            match (num, what) {
                (Some(k), "passed") => c.passed += k,
                (Some(k), "failed") => c.failed += k,
                _ => {}
            }
        }
    }
    c
}

/// The counts of nextest's JUnit report: `<testsuites … tests="N" failures="F" errors="E">`.
fn junit_counts(xml: &str) -> Option<Counts> {
    let start = xml.find("<testsuites")?;
    let tag = &xml[start..start + xml[start..].find('>')?];
    let attr = |name: &str| -> Option<usize> {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        tag[at..].split('"').next()?.parse().ok()
    };
    let tests = attr("tests")?;
    let failed = attr("failures").unwrap_or(0) + attr("errors").unwrap_or(0);
    Some(Counts {
        passed: tests.saturating_sub(failed),
        failed,
    })
}

/// Runs `cmd` with its standard output echoed as it comes and kept, for the counts in it.
fn run_captured(mut cmd: Command) -> (Result<(), String>, String) {
    use std::io::{BufRead as _, Write as _};
    let shown = shown(&cmd);
    eprintln!("$ {shown}");
    let mut child = match cmd.stdout(std::process::Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => return (Err(format!("cannot run `{shown}`: {e}")), String::new()),
    };
    let mut kept = String::new();
    if let Some(out) = child.stdout.take() {
        let mut stdout = std::io::stdout();
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = writeln!(stdout, "{line}");
            kept.push_str(&line);
            kept.push('\n');
        }
    }
    let result = match child.wait() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("`{shown}` failed ({s})")),
        Err(e) => Err(format!("`{shown}`: {e}")),
    };
    (result, kept)
}

/// The tests that said they did not run, per reason: (distinct tests, [(what, tests)]).
fn not_run(log: &Path) -> (usize, Vec<(String, usize)>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut tests: Vec<&str> = Vec::new();
    let mut reasons: Vec<(String, Vec<&str>)> = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, " | ");
        let (Some(test), Some(what)) = (parts.next(), parts.next()) else {
            continue;
        };
        if !tests.contains(&test) {
            tests.push(test);
        }
        match reasons.iter_mut().find(|(w, _)| w == what) {
            Some((_, t)) if !t.contains(&test) => t.push(test),
            Some(_) => {}
            None => reasons.push((what.to_owned(), vec![test])),
        }
    }
    (
        tests.len(),
        reasons.into_iter().map(|(w, t)| (w, t.len())).collect(),
    )
}

/// The one closing line: `509 passed, 17 not run: <why> (n), …, 0 failed`.
fn closing_line(c: Counts, not_run: usize, reasons: &[(String, usize)]) -> String {
    let passed = c.passed.saturating_sub(not_run);
    if not_run == 0 {
        return format!("{passed} passed, 0 not run, {} failed", c.failed);
    }
    let why: Vec<String> = reasons.iter().map(|(w, n)| format!("{w} ({n})")).collect();
    format!(
        "{passed} passed, {not_run} not run: {}, {} failed",
        why.join(", "),
        c.failed
    )
}

/// The run's closing lines: one per thing not tested (how many tests it held back) and the
/// command that enables it. Under `CI` a skip fails the run.
fn skip_summary(log: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    // (what, enable, the distinct tests that reported it)
    let mut seen: Vec<(String, String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, " | ");
        let (Some(test), Some(what), Some(enable)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        match seen.iter_mut().find(|(w, e, _)| w == what && e == enable) {
            Some((_, _, tests)) if !tests.iter().any(|t| t == test) => tests.push(test.to_owned()),
            Some(_) => {}
            None => seen.push((what.to_owned(), enable.to_owned(), vec![test.to_owned()])),
        }
    }
    if seen.is_empty() {
        eprintln!("nothing skipped");
        return Ok(());
    }
    eprintln!("skipped ({}):", seen.len());
    for (what, enable, tests) in &seen {
        let n = tests.len();
        let tests = if n == 1 {
            "1 test".to_owned()
        } else {
            format!("{n} tests")
        };
        eprintln!("  - {what} [{tests}] — enable: {enable}");
    }
    if std::env::var_os("CI").is_some() {
        return Err("under CI nothing may be skipped".into());
    }
    Ok(())
}

/// The whole suite; its last line is the honest total (`N passed, N not run: …, N failed`):
/// a test that returned early for a missing tool or service is not counted as passed.
fn test(extra: &[String]) -> Result<(), String> {
    let log = skip_log();
    let _ = std::fs::remove_file(&log);
    let mut counts = Counts::default();
    let ran = run_tests(extra, &log, &mut counts);
    // The downstream example is a workspace of its own (as a team's crate is): its tests run
    // after the workspace's, into the same target directory.
    let ran = ran.and(if extra.is_empty() {
        let (r, out) = run_captured(downstream(&["test"]));
        counts.add(libtest_counts(&out));
        r
    } else {
        Ok(())
    });
    // The injection defence on AgentDojo, a quick run: fails when any attack succeeds.
    let ran = ran.and(if extra.is_empty() {
        agentdojo_quick(&log, &mut counts)
    } else {
        Ok(())
    });
    let summary = skip_summary(&log);
    let (n, reasons) = not_run(&log);
    eprintln!("{}", closing_line(counts, n, &reasons));
    ran.and(summary)
}

/// `bench agentdojo --quick` as one test of the suite: passed, failed (an attack succeeded, or
/// the run broke), or — outside CI, when the benchmark cannot be installed (no Python venv,
/// no PyPI) — not run, with the reason in the skip log. Under `CI=true` that is a failure.
fn agentdojo_quick(log: &Path, counts: &mut Counts) -> Result<(), String> {
    const NAME: &str = "xtask agentdojo_quick";
    match agentdojo::prepare() {
        Ok(()) => {}
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIP {NAME}: {e}");
            // As a test that returns early: counted, then taken off as not run.
            counts.passed += 1;
            let line = format!(
                "{NAME} | Python 3.10+ with venv and PyPI (the AgentDojo quick run) | \
                 apt-get install python3-venv, or STRATA_PYTHON=<python 3.10+>, with PyPI reachable\n"
            );
            use std::io::Write as _;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .map_err(|e| format!("{}: {e}", log.display()))?;
            return Ok(());
        }
        Err(e) => {
            counts.failed += 1;
            return Err(format!("{NAME}: {e}"));
        }
    }
    match agentdojo::agentdojo(&["--quick".to_owned()]) {
        Ok(()) => {
            counts.passed += 1;
            Ok(())
        }
        Err(e) => {
            counts.failed += 1;
            Err(format!("{NAME}: {e}"))
        }
    }
}

fn run_tests(extra: &[String], log: &Path, counts: &mut Counts) -> Result<(), String> {
    if has_nextest() {
        // nextest does not run doctests (the README and API examples are doctests): run them
        // first, so the suite's closing lines are nextest's summary.
        let mut d = cargo();
        d.args(["test", "--workspace", "--doc"]);
        let (doc, out) = run_captured(d);
        counts.add(libtest_counts(&out));
        doc?;
        let profile = if std::env::var_os("CI").is_some() {
            "ci"
        } else {
            "default"
        };
        let junit = target_dir().join("nextest").join(profile).join("junit.xml");
        let _ = std::fs::remove_file(&junit);
        let mut c = cargo();
        c.env("STRATA_SKIP_LOG", log);
        c.args(["nextest", "run", "--workspace", "--no-fail-fast"]);
        c.args(["--profile", profile]);
        c.args(extra);
        let ran = run(c);
        match std::fs::read_to_string(&junit)
            .ok()
            .and_then(|x| junit_counts(&x))
        {
            Some(c) => counts.add(c),
            None => eprintln!("no test counts: nextest wrote no {}", junit.display()),
        }
        ran
    } else {
        eprintln!("cargo-nextest not installed: using cargo test");
        let mut c = cargo();
        c.env("STRATA_SKIP_LOG", log);
        c.args(["test", "--workspace", "--no-fail-fast"])
            .args(extra);
        let (ran, out) = run_captured(c);
        counts.add(libtest_counts(&out));
        ran
    }
}

fn ci() -> Result<(), String> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run(clippy)?;
    // The launcher with every optional part off still builds, warning-free.
    let mut lean = cargo();
    lean.args([
        "clippy",
        "--quiet",
        "-p",
        "strata-launcher",
        "--no-default-features",
        "--",
        "-D",
        "warnings",
    ]);
    run(lean)?;
    // The downstream example, its own workspace: formatted and lint-free too.
    run(downstream(&["fmt", "--check"]))?;
    let mut c = downstream(&["clippy", "--all-targets"]);
    c.args(["--", "-D", "warnings"]);
    run(c)?;
    setup_tool(&["check-core".to_owned()])?;
    test(&[])
}

/// Takes `--no-default-features` or `--features F` (with its value from `it`) into `out`, as
/// cargo's arguments; false for any other argument.
fn feature_arg(
    a: &str,
    it: &mut std::slice::Iter<'_, String>,
    out: &mut Vec<String>,
) -> Result<bool, String> {
    match a {
        "--no-default-features" => out.push(a.to_owned()),
        "--features" => {
            let f = it.next().ok_or("--features needs a list")?;
            out.extend(["--features".to_owned(), f.clone()]);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// `cargo xtask bench [--profile P] [--package PKG] [--no-default-features] [--features F]
/// [bench args…]`: the serve bench runs a real binary — `strata` (the launcher) by default,
/// or PKG's (`strata-example`) — built with profile P (`release` by default; `production` is
/// what `cargo xtask dist` ships) and the features given (to measure a leaner build).
fn bench(extra: &[String]) -> Result<(), String> {
    let (mut profile, mut package, mut rest) = ("release".to_owned(), None, Vec::new());
    let mut features: Vec<String> = Vec::new();
    let mut it = extra.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--profile" => profile = it.next().cloned().ok_or("--profile needs a name")?,
            "--package" => package = Some(it.next().cloned().ok_or("--package needs a name")?),
            _ if feature_arg(a, &mut it, &mut features)? => {}
            _ => rest.push(a.clone()),
        }
    }
    let (pkg, bin) = match package.as_deref() {
        None | Some("strata-launcher") => ("strata-launcher", "strata"),
        Some(p) => (p, p),
    };
    let mut b = cargo();
    b.args([
        "build",
        "--quiet",
        "--profile",
        &profile,
        "-p",
        pkg,
        "--bin",
        bin,
    ]);
    b.args(&features);
    run(b)?;
    let dir = if profile == "dev" { "debug" } else { &profile };
    let mut c = cargo();
    c.args(["run", "--release", "--quiet", "-p", "strata-bench", "--"])
        .args(&rest)
        .env("STRATA_BENCH_OUT", root().join("target/bench"))
        .env(
            "STRATA_BENCH_BIN",
            root().join("target").join(dir).join(bin),
        );
    run(c)
}

/// Where cargo-deny looks for the RustSec database given `deny.toml`'s `db-path` and
/// `db-urls`: the URL's last segment and its XxHash64 (cargo-deny 0.20's layout).
const ADVISORY_DIR: &str = "target/advisory-db/advisory-db-3157b0e258782691";

/// The offline RustSec snapshot: `STRATA_ADVISORY_DB`, else `../shared/advisory-db` beside
/// the checkout.
fn advisory_snapshot() -> Option<PathBuf> {
    let p = std::env::var_os("STRATA_ADVISORY_DB")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/advisory-db"));
    p.join("crates").is_dir().then_some(p)
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type()?.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// `cargo deny check` with `deny.toml`, offline. The snapshot is data, not a git checkout,
/// and cargo-deny reads a checkout: it is copied under target/ and committed there (once per
/// snapshot). Without a snapshot the advisories check is skipped with a line saying so.
fn deny() -> Result<(), String> {
    let has = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["deny", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        return Err(
            "cargo-deny is not installed: `cargo install --locked cargo-deny@0.20.2`".into(),
        );
    }
    let mut checks = vec!["bans", "licenses", "sources"];
    match advisory_snapshot() {
        Some(src) => {
            let dst = root().join(ADVISORY_DIR);
            let stamp = std::fs::read_to_string(src.join("SNAPSHOT.md")).unwrap_or_default();
            let date = stamp
                .split(['(', ')'])
                .find(|p| p.len() == 10 && p.as_bytes().get(4) == Some(&b'-'))
                .unwrap_or("unknown date")
                .to_owned();
            let current = std::fs::read_to_string(dst.join("SNAPSHOT.md")).unwrap_or_default();
            if current != stamp || !dst.join(".git").is_dir() {
                let _ = std::fs::remove_dir_all(&dst);
                copy_tree(&src, &dst).map_err(|e| format!("copying {}: {e}", src.display()))?;
                let git = |args: &[&str]| {
                    let mut c = Command::new("git");
                    c.current_dir(&dst)
                        .args([
                            "-c",
                            "user.name=strata",
                            "-c",
                            "user.email=strata@localhost",
                        ])
                        .args(args)
                        .stdout(std::process::Stdio::null());
                    run(c)
                };
                git(&["init", "-q", "-b", "main"])?;
                git(&["add", "-A"])?;
                git(&["commit", "-q", "-m", "RustSec advisory-db snapshot"])?;
            }
            eprintln!(
                "advisories: the RustSec snapshot of {date} in {}",
                src.display()
            );
            checks.insert(0, "advisories");
        }
        None => eprintln!(
            "advisories: SKIPPED — no RustSec snapshot at ../shared/advisory-db; set \
             STRATA_ADVISORY_DB to a copy of the advisory-db repository's files to check them"
        ),
    }
    let mut c = cargo();
    c.args(["deny", "--offline", "check"]).args(&checks);
    run(c)
}

/// Fits the prompt-injection model to the committed corpus and writes its weights as Rust
/// source (`crates/safety/src/model_weights.rs`); `cargo test -p strata-safety` then checks
/// the corpus gate.
fn train_safety() -> Result<(), String> {
    let mut c = cargo();
    c.args([
        "run",
        "--release",
        "--quiet",
        "-p",
        "strata-safety",
        "--features",
        "train",
        "--bin",
        "strata-safety-train",
    ]);
    run(c)?;
    let mut f = cargo();
    f.args(["fmt", "-p", "strata-safety"]);
    run(f)
}

/// Runs `strata-setup <args>` (built on first use).
///
/// The build shows cargo's own progress on stderr (the first one compiles ~250 crates for a
/// minute or more: a silent terminal for that long looks hung); the binary's path comes from
/// cargo's JSON messages on stdout, so a target directory set anywhere is followed.
fn setup_tool(args: &[String]) -> Result<(), String> {
    eprintln!(
        "building the setup tool (strata-setup; the first time compiles the engine's crates)…"
    );
    let out = cargo()
        .args(["build", "-p", "strata-setup", "--bin", "strata-setup"])
        .arg("--message-format=json-render-diagnostics")
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("building strata-setup failed ({})", out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let exe = stdout
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .find_map(|l| {
            let rest = l.split_once("\"executable\":\"")?.1;
            rest.split_once('"').map(|(p, _)| p.replace("\\\\", "\\"))
        })
        .ok_or("cargo built strata-setup but named no executable")?;
    let mut c = Command::new(exe);
    c.args(args);
    // Relative paths in the arguments mean the caller's directory, not the workspace root.
    if let Ok(here) = std::env::current_dir() {
        c.current_dir(here);
    }
    let status = c
        .status()
        .map_err(|e| format!("cannot run strata-setup: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("strata-setup {} failed ({status})", args.join(" ")))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => ("help", &[][..]),
    };
    let result = match cmd {
        "test" => test(rest),
        "ci" => ci(),
        "bench" if rest.first().is_some_and(|a| a == "first-build") => first_build::first_build(),
        "bench" if rest.first().is_some_and(|a| a == "agentdojo") => {
            agentdojo::agentdojo(&rest[1..])
        }
        "bench" => bench(rest),
        "deny" => deny(),
        "link-order" => link_order::link_order(rest),
        "train-safety" => train_safety(),
        "setup" | "new-overlay" | "new-module" | "check-core" | "install-hook" | "dist" => {
            setup_tool(&args)
        }
        "help" | "--help" | "-h" => {
            println!(
                "cargo xtask <command>\n\n  test    run the whole test suite\n  ci      fmt check, clippy -D warnings, check-core, test\n  bench   run benchmarks (release), write target/bench/*.json\n  bench first-build   a wizard-made overlay's first build beside a built engine checkout vs on its own\n  bench agentdojo [--suites a,b] [--quick] [--defence on|off]   AgentDojo with a scripted obedient model, nobody approving; target/agentdojo/\n  dist    target/dist/: the binary (production profile), sha256, CycloneDX SBOM, systemd units\n  deny    supply chain: cargo deny check (advisories from the offline RustSec snapshot)\n  link-order [--package PKG]   remake PKG/link-order.txt (needs valgrind): the functions serve runs, laid out together by lld\n  train-safety      fit the injection model to crates/safety/corpus/train.jsonl, write crates/safety/src/model_weights.rs\n  setup   the deployment wizard (--answers FILE to script it)\n  new-overlay DIR   an empty overlay crate\n  new-module NAME   a module crate in modules/\n  check-core        fail on deployment details in core or modules\n  install-hook      a pre-commit hook: no commits on main, none that fail check-core"
            );
            Ok(())
        }
        other => Err(format!("unknown xtask `{other}`; try `cargo xtask help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_that_skipped_is_not_run_rather_than_passed() {
        let dir = std::env::temp_dir().join(format!("xtask-skip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("skips.log");
        // Two lines from one test (one reason twice), one from another.
        std::fs::write(
            &log,
            "it::sandbox::a | the bubblewrap tests | apt-get install bubblewrap\n\
             it::sandbox::a | the bubblewrap tests | apt-get install bubblewrap\n\
             it::ui::b | the browser tests | apt-get install chromium-driver\n",
        )
        .expect("log");
        // nextest's report of the run: 12 tests, one failed.
        let junit = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="12" failures="1" errors="0" uuid="x" timestamp="t" time="1.0">
<testsuite name="strata-build" tests="12" disabled="0" errors="0" failures="1">"#;
        let mut c = junit_counts(junit).expect("counts");
        assert_eq!(
            c,
            Counts {
                passed: 11,
                failed: 1
            }
        );
        // The doctests, as cargo test prints them.
        c.add(libtest_counts(
            "running 3 tests\ntest result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\
             test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n",
        ));
        let (n, reasons) = not_run(&log);
        assert_eq!(n, 2);
        assert_eq!(
            closing_line(c, n, &reasons),
            "14 passed, 2 not run: the bubblewrap tests (1), the browser tests (1), 2 failed"
        );
        assert_eq!(closing_line(c, 0, &[]), "16 passed, 0 not run, 2 failed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
