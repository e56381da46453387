//! What isolation costs per `terminal_exec` command: `true` run through `strata-sandbox` under
//! each backend this machine offers, against the same command spawned plainly
//! (`/bin/sh -c true`, no sandbox at all). Wall time per command, spawn to reaped.

use std::time::{Duration, Instant};

use strata_sandbox::{Limits, Mode, Spec};

use crate::{Report, Row, median, quantile};

fn spec(dir: &std::path::Path, mode: Mode) -> Spec {
    Spec {
        command: "true".into(),
        workspace: dir.join("ws"),
        cwd: dir.join("ws"),
        read_roots: ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"]
            .map(std::path::PathBuf::from)
            .to_vec(),
        hidden: vec![dir.join("config")],
        network: false,
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        timeout: Duration::from_secs(30),
        max_output: 4096,
        limits: Limits::default(),
        mode,
    }
}

pub fn run(quick: bool) -> Result<Report, String> {
    let (runs, calls) = if quick { (3, 40) } else { (5, 200) };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let probe = strata_sandbox::probe();
    let mut variants: Vec<(&str, Option<Mode>)> = vec![("plain sh -c (no sandbox)", None)];
    if probe.bwrap.is_some() {
        variants.push(("bubblewrap", Some(Mode::Bubblewrap)));
    } else {
        eprintln!("sandbox bench: bubblewrap not usable here, skipped");
    }
    if probe.landlock_abi.is_some() {
        variants.push(("landlock", Some(Mode::Landlock)));
    }
    variants.push(("none mode (rlimits, cgroup, group kill)", Some(Mode::None)));
    let mut rows = Vec::new();
    let mut plain_p50 = 0.0;
    for (name, mode) in variants {
        let mut tputs = Vec::new();
        let mut p50s = Vec::new();
        let mut p99s = Vec::new();
        for _ in 0..runs {
            let mut lat = Vec::with_capacity(calls);
            let start = Instant::now();
            for _ in 0..calls {
                let t = Instant::now();
                match mode {
                    None => {
                        let ok = std::process::Command::new("/bin/sh")
                            .args(["-c", "true"])
                            .status()
                            .map_err(|e| e.to_string())?;
                        if !ok.success() {
                            return Err("sh -c true failed".into());
                        }
                    }
                    Some(m) => {
                        let o = rt
                            .block_on(strata_sandbox::run(&spec(dir.path(), m)))
                            .map_err(|e| e.to_string())?;
                        if o.exit_code != 0 {
                            return Err(format!("{name}: exit {} {}", o.exit_code, o.stderr));
                        }
                    }
                }
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            tputs.push(calls as f64 / start.elapsed().as_secs_f64());
            lat.sort_by(f64::total_cmp);
            p50s.push(quantile(&lat, 0.5));
            p99s.push(quantile(&lat, 0.99));
        }
        let p50 = median(&mut p50s);
        let mut row = Row {
            name: name.into(),
            throughput_per_s: median(&mut tputs),
            p50_us: p50,
            p99_us: median(&mut p99s),
            ..Row::default()
        };
        if mode.is_none() {
            plain_p50 = p50;
        } else if plain_p50 > 0.0 {
            row.extra.insert("p50 / plain p50".into(), p50 / plain_p50);
        }
        rows.push(row);
    }
    Ok(Report {
        bench: "sandbox",
        runs,
        calls_per_run: calls,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        rows,
    })
}
