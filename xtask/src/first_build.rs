//! `cargo xtask bench first-build`: what a new deployment's first build costs beside an engine
//! checkout that has built the example, against the same overlay built on its own.
//!
//! In a fresh target directory (under `target/bench/`): (1) the quick start's build,
//! `cargo build -p strata-example`; (2) the wizard's own build, `strata-setup`; (3) the wizard
//! makes an overlay with the example's modules (`new-overlay`, which writes its
//! `.cargo/config.toml` pointing at that target directory) and it is built from its own
//! directory, as `cargo run` there would; (4) the same overlay built into a target directory
//! of its own — what every new deployment cost before. Each step: wall time, CPU time (user +
//! system of cargo and everything it ran) and the crates compiled (cargo's artefacts that were
//! not fresh). Figures in `target/bench/first-build.json`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::{cargo, root};

/// One measured build.
struct Step {
    name: &'static str,
    wall_s: f64,
    cpu_s: f64,
    compiled: usize,
}

/// CPU seconds used by this process's waited-for children so far (`/proc/self/stat`'s
/// `cutime` + `cstime`, in clock ticks of 1/100 s on Linux).
fn children_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // after[0] is field 3 (state): cutime is field 16, cstime field 17.
    let tick = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(16) + tick(17)) / 100.0
}

/// Runs a cargo build with JSON messages, counting the artefacts that were compiled.
fn measure(name: &'static str, mut cmd: Command) -> Result<Step, String> {
    cmd.arg("--message-format=json")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    eprintln!("== {name}");
    let cpu0 = children_cpu();
    let t0 = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| format!("{name}: cannot run cargo: {e}"))?;
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = children_cpu() - cpu0;
    if !out.status.success() {
        return Err(format!("{name}: cargo failed ({})", out.status));
    }
    let compiled = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\"") && l.contains("\"fresh\":false"))
        .count();
    eprintln!("   {wall_s:.0} s wall, {cpu_s:.0} s CPU, {compiled} crates compiled");
    Ok(Step {
        name,
        wall_s,
        cpu_s,
        compiled,
    })
}

pub fn first_build() -> Result<(), String> {
    let bench = root().join("target/bench");
    let work = bench.join("first-build");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let target = work.join("target");
    let mut steps = Vec::new();

    let mut c = cargo();
    c.env("CARGO_TARGET_DIR", &target)
        .args(["build", "-p", "strata-example"]);
    steps.push(measure("engine: cargo build -p strata-example", c)?);

    let mut c = cargo();
    c.env("CARGO_TARGET_DIR", &target).args([
        "build",
        "-p",
        "strata-setup",
        "--bin",
        "strata-setup",
    ]);
    steps.push(measure("wizard: cargo build -p strata-setup", c)?);

    let overlay = work.join("bench-deploy");
    let status = Command::new(target.join("debug/strata-setup"))
        .arg("new-overlay")
        .arg(&overlay)
        .args(["--name", "bench", "--modules", "ops,fleet"])
        .env("CARGO_TARGET_DIR", &target)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("new-overlay: {e}"))?;
    if !status.success() {
        return Err(format!("new-overlay failed ({status})"));
    }
    let shared = std::fs::read_to_string(overlay.join(".cargo/config.toml")).unwrap_or_default();
    if !shared.contains(&target.display().to_string()) {
        return Err(format!(
            "the overlay does not share {}: .cargo/config.toml says {shared:?}",
            target.display()
        ));
    }
    let overlay_build = |t: Option<&Path>| {
        let mut c = cargo();
        // From the overlay's directory, as `cargo run` there: its .cargo/config.toml applies.
        c.current_dir(&overlay)
            .env_remove("CARGO_TARGET_DIR")
            .arg("build");
        if let Some(t) = t {
            c.env("CARGO_TARGET_DIR", t);
        }
        c
    };
    steps.push(measure(
        "overlay beside the engine (shared target)",
        overlay_build(None),
    )?);
    let own: PathBuf = work.join("own-target");
    steps.push(measure(
        "the same overlay on its own (own target)",
        overlay_build(Some(&own)),
    )?);

    let rows: Vec<String> = steps
        .iter()
        .map(|s| {
            format!(
                "{{\"step\": {:?}, \"wall_s\": {:.1}, \"cpu_s\": {:.1}, \"crates_compiled\": {}}}",
                s.name, s.wall_s, s.cpu_s, s.compiled
            )
        })
        .collect();
    let json = format!("[\n  {}\n]\n", rows.join(",\n  "));
    std::fs::write(bench.join("first-build.json"), &json).map_err(|e| e.to_string())?;
    println!("| step | wall | CPU (user + sys) | crates compiled |\n|---|---|---|---|");
    for s in &steps {
        println!(
            "| {} | {:.0} s | {:.0} s | {} |",
            s.name, s.wall_s, s.cpu_s, s.compiled
        );
    }
    if let [.., shared, own] = steps.as_slice() {
        println!(
            "overlay beside the engine / on its own: {:.2}x the CPU time, {} of {} crates",
            shared.cpu_s / own.cpu_s.max(0.001),
            shared.compiled,
            own.compiled
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
