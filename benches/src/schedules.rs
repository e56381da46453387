//! The scheduler with 10,000 schedules on the real SQLite store: the memory they take, the
//! CPU a minute of idle ticking costs (none due), and how late runs start after their due
//! time when ~170 fall due every second (the tick is once a second, so up to a second is
//! the design).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_engine::config::CatchUp;
use strata_runtime::schedule::{Action, Schedule, ScheduleState, ScheduleStore, Timestamp, When};
use strata_runtime::schedule::{RunSchedule, Scheduler};

use crate::{Report, Row, quantile};

const N: usize = 10_000;

/// Records how late each run started.
struct Late {
    due: Mutex<HashMap<String, i64>>,
    late_ms: Mutex<Vec<f64>>,
}

#[strata_engine::async_trait]
impl RunSchedule for Late {
    async fn run(&self, s: &Schedule, _due: i64) -> Result<String, String> {
        let now = Timestamp::now().as_millisecond();
        if let Some(due) = self.due.lock().map_err(|e| e.to_string())?.get(&s.name) {
            self.late_ms
                .lock()
                .map_err(|e| e.to_string())?
                .push((now - due * 1000) as f64);
        }
        Ok("done".into())
    }
}

fn schedule(i: usize) -> Result<Schedule, String> {
    Ok(Schedule {
        name: format!("s{i:05}"),
        when: When::every("1h").map_err(|e| e.to_string())?,
        action: Action::Job("memory_decay".into()),
        session: format!("schedule-s{i:05}"),
        deliver_to: None,
        timeout: Duration::from_secs(60),
        jitter: Duration::ZERO,
        catch_up: CatchUp::Once,
        enabled: true,
        principal: strata_engine::Principal::Operator,
        active_hours: None,
    })
}

/// Resident memory of this process, in bytes.
fn rss() -> f64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |pages| pages * 4096.0)
}

/// CPU time of this process (user + system), in seconds.
fn cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // Fields 14 and 15 of stat (utime, stime), counted after the command's closing paren.
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

pub fn run(quick: bool) -> Result<Report, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = Arc::new(
        strata_store::SqliteStore::open(&dir.path().join("strata.db"))
            .map_err(|e| e.to_string())?,
    );
    let before = rss();
    let schedules = (0..N).map(schedule).collect::<Result<Vec<_>, _>>()?;
    let runner = Arc::new(Late {
        due: Mutex::new(HashMap::new()),
        late_ms: Mutex::new(Vec::new()),
    });
    let sch = Arc::new(Scheduler::new(
        schedules,
        store.clone(),
        runner.clone(),
        "bench",
    ));
    rt.block_on(sch.start(Timestamp::now()))
        .map_err(|e| e.to_string())?;
    let held = rss() - before;

    // Idle: nothing due for an hour; a minute (20 s with --quick) of ticking.
    let idle = if quick { 20 } else { 60 };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let t0 = (cpu(), Instant::now());
    let ticking = rt.spawn(sch.clone().run_until(rx.clone()));
    std::thread::sleep(Duration::from_secs(idle));
    let idle_cpu = (cpu() - t0.0) / t0.1.elapsed().as_secs_f64() * 60.0;
    let _ = stop.send(true);
    let _ = rt.block_on(ticking);

    // Busy: every schedule due within the next minute (about 170 a second).
    let spread = if quick { 20 } else { 60 };
    let now = Timestamp::now().as_second();
    rt.block_on(async {
        for i in 0..N {
            let name = format!("s{i:05}");
            let due = now + 2 + (i % spread) as i64;
            runner
                .due
                .lock()
                .map_err(|e| e.to_string())?
                .insert(name.clone(), due);
            store
                .save_state(&ScheduleState {
                    name,
                    next_run: Some(due),
                    ..ScheduleState::default()
                })
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(())
    })?;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let t1 = (cpu(), Instant::now());
    let ticking = rt.spawn(sch.clone().run_until(rx));
    std::thread::sleep(Duration::from_secs(spread as u64 + 4));
    let busy_cpu = (cpu() - t1.0) / t1.1.elapsed().as_secs_f64() * 60.0;
    let _ = stop.send(true);
    let _ = rt.block_on(ticking);
    let mut late = runner.late_ms.lock().map_err(|e| e.to_string())?.clone();
    late.sort_by(f64::total_cmp);
    let ran = late.len();
    let mut extra = std::collections::BTreeMap::new();
    extra.insert("schedules".into(), N as f64);
    extra.insert("memory_held_mb".into(), held / 1e6);
    extra.insert("idle_cpu_s_per_min".into(), idle_cpu);
    extra.insert("busy_cpu_s_per_min".into(), busy_cpu);
    extra.insert("runs_started".into(), ran as f64);
    Ok(Report {
        bench: "schedules",
        runs: 1,
        calls_per_run: ran,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        rows: vec![Row {
            name: "10,000 schedules: due → start".into(),
            throughput_per_s: ran as f64 / (spread as f64 + 4.0),
            p50_us: quantile(&late, 0.5) * 1000.0,
            p99_us: quantile(&late, 0.99) * 1000.0,
            extra,
        }],
    })
}
