//! `cargo xtask bench agentdojo [--suites a,b] [--quick] [--defence on|off] [harness args…]`:
//! the taint gate measured on the public AgentDojo benchmark (PyPI `agentdojo`), with a
//! scripted, fully obedient model and nobody approving — `benches/agentdojo/README.md`.
//!
//! (1) a virtualenv in `<target>/agentdojo-venv` with `benches/agentdojo/requirements.txt`
//! (pinned, installed under `constraints.txt`; reinstalled when either file changes);
//! (2) the `strata` binary (`strata-launcher`, debug, default features: the MCP client is one);
//! (3) `benches/agentdojo/harness.py`, which serves the suites' tools over MCP and the scripted
//! model over the OpenAI API, runs `strata serve` on a throwaway overlay per suite and drives
//! every task through `POST /chat`. Results: `<target>/agentdojo/results-*.{json,md}`.
//! The exit status is the harness's: with `--quick`, 1 when any attack succeeded.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{cargo, root, run, shown, target_dir};

/// The Python that makes the virtualenv: `STRATA_PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("STRATA_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The virtualenv's interpreter, made and filled when the pinned files changed since.
fn venv(dir: &Path) -> Result<PathBuf, String> {
    let bench = root().join("benches/agentdojo");
    let req = bench.join("requirements.txt");
    let cons = bench.join("constraints.txt");
    let wanted = format!(
        "{}\n{}",
        std::fs::read_to_string(&req).map_err(|e| format!("{}: {e}", req.display()))?,
        std::fs::read_to_string(&cons).map_err(|e| format!("{}: {e}", cons.display()))?
    );
    let py = dir.join("bin/python");
    let stamp = dir.join("strata-installed.txt");
    if py.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(py);
    }
    if !py.is_file() {
        let mut c = Command::new(python());
        c.args(["-m", "venv"]).arg(dir);
        run(c).map_err(|e| {
            format!("{e}: the AgentDojo bench needs Python 3.10+ with venv (apt-get install python3-venv), or STRATA_PYTHON")
        })?;
    }
    let mut pip = Command::new(&py);
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "-r",
    ])
    .arg(&req)
    .arg("-c")
    .arg(&cons);
    run(pip)?;
    std::fs::write(&stamp, wanted).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(py)
}

/// Builds `strata` and names the executable cargo made (from its JSON messages, so any
/// target directory is followed).
fn strata_binary() -> Result<PathBuf, String> {
    let mut c = cargo();
    c.args(["build", "-p", "strata-launcher", "--bin", "strata"])
        .arg("--message-format=json-render-diagnostics")
        .stderr(std::process::Stdio::inherit());
    eprintln!("$ {}", shown(&c));
    let out = c.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("building strata failed ({})", out.status));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .find_map(|l| {
            let rest = l.split_once("\"executable\":\"")?.1;
            rest.split_once('"')
                .map(|(p, _)| PathBuf::from(p.replace("\\\\", "\\")))
        })
        .ok_or_else(|| "cargo built strata but named no executable".into())
}

/// Makes (or checks) the benchmark's virtualenv: `Err` says why it cannot be had here.
pub fn prepare() -> Result<(), String> {
    venv(&target_dir().join("agentdojo-venv")).map(|_| ())
}

pub fn agentdojo(args: &[String]) -> Result<(), String> {
    let (mut suites, mut quick, mut defence, mut rest) = (None, false, "on".to_owned(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--suites" => suites = Some(it.next().cloned().ok_or("--suites needs a list")?),
            "--quick" => quick = true,
            "--defence" => {
                defence = it.next().cloned().ok_or("--defence needs on or off")?;
                if defence != "on" && defence != "off" {
                    return Err(format!("--defence is on or off, not `{defence}`"));
                }
            }
            _ => rest.push(a.clone()),
        }
    }
    let suites = suites.unwrap_or_else(|| {
        if quick {
            "banking,slack".into()
        } else {
            "banking,slack,workspace,travel".into()
        }
    });
    let py = venv(&target_dir().join("agentdojo-venv"))?;
    let bin = strata_binary()?;
    let mut c = Command::new(py);
    // No __pycache__ left in benches/agentdojo.
    c.env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(root())
        .arg(root().join("benches/agentdojo/harness.py"))
        .arg("--strata-bin")
        .arg(&bin)
        .arg("--out")
        .arg(target_dir().join("agentdojo"))
        .args(["--suites", &suites, "--defence", &defence]);
    if quick {
        c.arg("--quick");
    }
    c.args(&rest);
    run(c)
}
