//! In-process invoke pipeline: resolve → validate → execute → audit, for a trivial tool.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use strata_engine::audit::{AuditSink, NoAudit};
use strata_engine::config::Config;
use strata_engine::taint::{Taint, TaintSource};
use strata_engine::{Env, Principal, ToolError, tool};
use strata_runtime::{Invocation, Invoker, Registry, Status};
use strata_store::JsonlAudit;

use crate::{Report, Row, median, quantile};

/// Returns its input plus one.
#[tool]
async fn bench_inc(
    /// A number.
    n: u64,
) -> Result<u64, ToolError> {
    Ok(n.wrapping_add(1))
}

struct Measured {
    throughput: f64,
    p50_us: f64,
    p99_us: f64,
}

/// `calls` invocations spread over `tasks` concurrent tasks; per-call latencies recorded.
/// With `taint`, every call is part of a turn that has read a web page (the gate is checked;
/// `bench_inc` has no gated capability, so nothing waits).
async fn measure(
    invoker: Arc<Invoker>,
    calls: usize,
    tasks: usize,
    taint: Option<Taint>,
) -> Result<Measured, String> {
    let per_task = calls / tasks;
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let inv = invoker.clone();
        let taint = taint.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per_task);
            for i in 0..per_task {
                let mut call = Invocation::new("bench_inc", json!({"n": i}), Principal::Operator);
                call.taint = taint.clone();
                let t0 = Instant::now();
                let r = inv.invoke(call).await;
                lat.push(t0.elapsed().as_secs_f64() * 1e6);
                if r.status != Status::Ok {
                    return Err(format!("task {t}: {:?}", r.error));
                }
            }
            Ok(lat)
        }));
    }
    let mut all = Vec::with_capacity(calls);
    for h in handles {
        all.extend(h.await.map_err(|e| e.to_string())??);
    }
    let wall = started.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    Ok(Measured {
        throughput: all.len() as f64 / wall,
        p50_us: quantile(&all, 0.5),
        p99_us: quantile(&all, 0.99),
    })
}

pub fn run(quick: bool) -> Result<Report, String> {
    let runs = if quick { 3 } else { 7 };
    let calls = if quick { 20_000 } else { 100_000 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let env = Arc::new(Env::new(
        Config::default(),
        dir.path().to_path_buf(),
        dir.path().join("data"),
    ));
    let _ = strata_tools::link();
    let registry = Arc::new(Registry::from_inventory(&[]).map_err(|e| e.to_string())?);
    let mut rows = Vec::new();
    // The same pipeline with a rate limit that is never reached, counted in memory and
    // persisted to SQLite: what the rate-limit stage costs per call.
    let mut limited_cfg = Config::default();
    limited_cfg.security.rate_limits.defaults.per_day = Some(u32::MAX);
    let limited_env = Arc::new(Env::new(
        limited_cfg,
        dir.path().to_path_buf(),
        dir.path().join("data"),
    ));
    let tainted = Taint::new();
    tainted.mark(TaintSource::tool(
        "read_url",
        &json!({"url": "https://example.invalid/page"}),
    ));
    for (label, tasks, with_audit, limited, taint) in [
        ("1 task, JSONL audit", 1, true, false, None),
        (
            "1 task, JSONL audit, tainted turn",
            1,
            true,
            false,
            Some(tainted.clone()),
        ),
        ("64 tasks, JSONL audit", 64, true, false, None),
        (
            "64 tasks, JSONL audit, tainted turn",
            64,
            true,
            false,
            Some(tainted.clone()),
        ),
        ("1 task, no audit", 1, false, false, None),
        ("64 tasks, no audit", 64, false, false, None),
        ("1 task, audit + rate limit (SQLite)", 1, true, true, None),
        (
            "64 tasks, audit + rate limit (SQLite)",
            64,
            true,
            true,
            None,
        ),
    ] {
        let (mut tp, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs {
            let audit: Arc<dyn AuditSink> = if with_audit {
                let path = dir.path().join(format!("audit-{tasks}-{run}.jsonl"));
                Arc::new(JsonlAudit::open(&path).map_err(|e| e.to_string())?)
            } else {
                Arc::new(NoAudit)
            };
            let invoker = if limited {
                let store = strata_store::SqliteStore::open(
                    &dir.path().join(format!("rate-{tasks}-{run}.db")),
                )
                .map_err(|e| e.to_string())?;
                Invoker::new(registry.clone(), limited_env.clone(), audit)
                    .with_rate_log(Arc::new(store))
            } else {
                Invoker::new(registry.clone(), env.clone(), audit)
            };
            let invoker = Arc::new(invoker);
            // Warm-up.
            rt.block_on(measure(
                invoker.clone(),
                1_000.max(tasks),
                tasks,
                taint.clone(),
            ))?;
            let m = rt.block_on(measure(invoker, calls, tasks, taint.clone()))?;
            tp.push(m.throughput);
            p50.push(m.p50_us);
            p99.push(m.p99_us);
        }
        rows.push(Row {
            name: label.to_owned(),
            throughput_per_s: median(&mut tp),
            p50_us: median(&mut p50),
            p99_us: median(&mut p99),
            ..Row::default()
        });
    }
    // Metrics off and on (the Prometheus recorder `serve` installs), alternating within each
    // run so drift falls on both alike.
    for (label, tasks) in [("1 task", 1), ("64 tasks", 64)] {
        let mut figures: [(Vec<f64>, Vec<f64>, Vec<f64>); 2] = Default::default();
        for run in 0..runs {
            let order = if run % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for on in order {
                crate::meters::set(on);
                let path = dir
                    .path()
                    .join(format!("audit-metrics-{tasks}-{run}-{on}.jsonl"));
                let audit: Arc<dyn AuditSink> =
                    Arc::new(JsonlAudit::open(&path).map_err(|e| e.to_string())?);
                let invoker = Arc::new(Invoker::new(registry.clone(), env.clone(), audit));
                rt.block_on(measure(invoker.clone(), 1_000.max(tasks), tasks, None))?;
                let m = rt.block_on(measure(invoker, calls, tasks, None))?;
                let f = &mut figures[usize::from(on)];
                f.0.push(m.throughput);
                f.1.push(m.p50_us);
                f.2.push(m.p99_us);
            }
        }
        crate::meters::set(false);
        let [mut off, mut on] = figures;
        let (off_tp, on_tp) = (median(&mut off.0), median(&mut on.0));
        for (name, f, tp) in [("off", &mut off, off_tp), ("on", &mut on, on_tp)] {
            let mut extra = std::collections::BTreeMap::new();
            if name == "on" {
                extra.insert(
                    "metrics_overhead_pct_of_throughput".into(),
                    (off_tp / tp - 1.0) * 100.0,
                );
            }
            rows.push(Row {
                name: format!("{label}, JSONL audit, metrics {name}"),
                throughput_per_s: tp,
                p50_us: median(&mut f.1),
                p99_us: median(&mut f.2),
                extra,
            });
        }
    }
    Ok(Report {
        bench: "invoke",
        runs,
        calls_per_run: calls,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        rows,
    })
}
