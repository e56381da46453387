//! Benchmarks. `cargo xtask bench [--quick] [NAME…]` runs them in release mode (`cluster`
//! only when named: it needs PostgreSQL and NATS), prints a
//! table and writes `target/bench/<name>.json`. Figures are medians over several runs; no
//! test ever asserts on them.

mod agent;
mod cluster;
mod dashboard;
mod invoke;
mod memory;
mod meters;
mod pg;
mod safety;
mod sandbox;
mod schedules;
mod serve;

use std::path::PathBuf;

use serde::Serialize;

/// One measured variant.
#[derive(Debug, Serialize, Default)]
pub struct Row {
    /// Variant name.
    pub name: String,
    /// Calls per second (median over runs).
    pub throughput_per_s: f64,
    /// Median per-call latency, microseconds (median over runs).
    pub p50_us: f64,
    /// 99th percentile per-call latency, microseconds (median over runs).
    pub p99_us: f64,
    /// Free-form extra figures (ratios, overheads).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra: std::collections::BTreeMap<String, f64>,
}

/// A bench's report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Bench name.
    pub bench: &'static str,
    /// Runs per variant.
    pub runs: usize,
    /// Calls per run.
    pub calls_per_run: usize,
    /// CPUs available.
    pub cpus: usize,
    /// Results.
    pub rows: Vec<Row>,
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// The `q` quantile of sorted `v`.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn print(report: &Report) {
    println!(
        "\n{} — {} runs × {} calls, {} CPUs (medians)",
        report.bench, report.runs, report.calls_per_run, report.cpus
    );
    println!(
        "{:<36} {:>14} {:>10} {:>10}",
        "variant", "calls/s", "p50 µs", "p99 µs"
    );
    for r in &report.rows {
        println!(
            "{:<36} {:>14.0} {:>10.1} {:>10.1}",
            r.name, r.throughput_per_s, r.p50_us, r.p99_us
        );
        for (k, v) in &r.extra {
            println!("    {k}: {v:.3}");
        }
    }
}

fn write(report: &Report) -> std::io::Result<PathBuf> {
    let dir = std::env::var_os("STRATA_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/bench"));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{}.json", report.bench));
    let text = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(&path, text)?;
    Ok(path)
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let wanted: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    // `cluster` needs PostgreSQL and NATS on this machine: it runs when named.
    let all = [
        "invoke",
        "agent",
        "journal",
        "memory",
        "safety",
        "sandbox",
        "serve",
        "schedules",
        "dashboard",
        "cluster",
    ];
    for name in &wanted {
        if !all.contains(name) {
            eprintln!("unknown bench `{name}`; known: {}", all.join(", "));
            return std::process::ExitCode::from(2);
        }
    }
    for name in all {
        // `journal` is the journal's part of `agent`: on its own only when named.
        if (!wanted.is_empty() || name == "cluster" || name == "journal") && !wanted.contains(&name)
        {
            continue;
        }
        let report = match name {
            "invoke" => invoke::run(quick),
            "agent" => agent::run(quick),
            "journal" => agent::run_journal(quick),
            "memory" => memory::run(quick),
            "safety" => safety::run(quick),
            "sandbox" => sandbox::run(quick),
            "serve" => serve::run(quick),
            "schedules" => schedules::run(quick),
            "dashboard" => dashboard::run(quick),
            "cluster" => cluster::run(quick),
            _ => unreachable!("checked above"),
        };
        match report {
            Ok(r) => {
                print(&r);
                match write(&r) {
                    Ok(p) => println!("written to {}", p.display()),
                    Err(e) => eprintln!("cannot write report: {e}"),
                }
            }
            Err(e) => {
                eprintln!("bench {name} failed: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
