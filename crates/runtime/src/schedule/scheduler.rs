//! The scheduler: [`Scheduler::tick`] starts the runs that are due, each claimed in the
//! [`ScheduleStore`] first (so in a cluster one instance runs it, and a run whose instance
//! died is taken again once its claim lapses), cancelled past its timeout, never two of one
//! schedule at once; failures in a row push the next run back and raise an alert every
//! [`ALERT_AFTER`]. Time comes in as an argument: `serve` ticks every second with the
//! clock, tests with the instants they choose.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jiff::Timestamp;
use serde_json::json;

use crate::schedule::{RunRecord, Schedule, ScheduleState, ScheduleStore};
use strata_engine::audit::{Alert, AlertSink, AuditSink};
use strata_engine::config::CatchUp;
use strata_engine::session::StoreError;

/// Runs what a schedule says (a prompt, a skill, a job): the answer's text, or why not.
#[async_trait]
pub trait RunSchedule: Send + Sync {
    /// Runs `schedule`'s run due at `due` (Unix seconds): the pair names the run, so a run
    /// taken again after its instance died can be told from a new one (a turn's id).
    async fn run(&self, schedule: &Schedule, due: i64) -> Result<String, String>;
}

/// Failures in a row before an alert (and again at every multiple).
pub const ALERT_AFTER: i64 = 3;

/// A claim outlives its run's timeout by this much before another instance may take it.
const CLAIM_GRACE: Duration = Duration::from_secs(60);

/// The schedules, where their state is kept, and what runs them.
pub struct Scheduler {
    schedules: Vec<Schedule>,
    by_name: HashMap<String, usize>,
    store: Arc<dyn ScheduleStore>,
    runner: Arc<dyn RunSchedule>,
    instance: String,
    running: Mutex<HashSet<String>>,
    /// The latest time a tick was given: a run ends no earlier.
    latest: Mutex<Timestamp>,
    alerts: Vec<Arc<dyn AlertSink>>,
    audit: Option<Arc<dyn AuditSink>>,
}

fn secs(t: Timestamp) -> i64 {
    t.as_second()
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The delay after `failures` failures in a row: a minute, doubling, at most an hour.
pub fn backoff(failures: i64) -> Duration {
    let n = failures.clamp(1, 7) as u32 - 1;
    Duration::from_secs((60u64 << n).min(3600))
}

/// How long after its due time a run starts: the same on every instance (it depends only on
/// the schedule and the due time), below `jitter`.
fn jitter_of(s: &Schedule, due: i64) -> i64 {
    let j = s.jitter.as_secs() as i64;
    if j == 0 {
        return 0;
    }
    // FNV-1a over the name and the due time: stable across processes and versions.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.name.bytes().chain(due.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % j as u64) as i64
}

impl Scheduler {
    /// A scheduler of `schedules` keeping state in `store`, running through `runner`, as
    /// `instance`.
    pub fn new(
        schedules: Vec<Schedule>,
        store: Arc<dyn ScheduleStore>,
        runner: Arc<dyn RunSchedule>,
        instance: &str,
    ) -> Self {
        Scheduler {
            by_name: schedules
                .iter()
                .enumerate()
                .map(|(i, s)| (s.name.clone(), i))
                .collect(),
            schedules,
            store,
            runner,
            instance: instance.to_owned(),
            running: Mutex::new(HashSet::new()),
            latest: Mutex::new(Timestamp::UNIX_EPOCH),
            alerts: Vec::new(),
            audit: None,
        }
    }

    /// Alerts (failures in a row) go to `sinks` (`serve` passes the Invoker's, which records
    /// them in the audit log too).
    pub fn with_alerts(mut self, sinks: Vec<Arc<dyn AlertSink>>) -> Self {
        self.alerts = sinks;
        self
    }

    /// Each run's outcome is an audit event (`"event": "schedule"`) in `audit`.
    pub fn with_audit(mut self, audit: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// The schedules.
    pub fn schedules(&self) -> &[Schedule] {
        &self.schedules
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ScheduleStore> {
        &self.store
    }

    /// The configured schedules and those people asked for (read from the store now; one
    /// that no longer reads is left out with a warning).
    pub async fn current(&self) -> Result<Vec<Schedule>, StoreError> {
        let mut all = self.schedules.clone();
        for d in self.store.defs().await? {
            match d.schedule() {
                Ok(s) if !all.iter().any(|x| x.name == s.name) => all.push(s),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(schedule = %d.name, error = %e, "a stored schedule is left out")
                }
            }
        }
        Ok(all)
    }

    /// At start: a state for every schedule new to the store, and the runs missed while no
    /// instance ran — one run now (`catch_up: once`) or none (`skip`). A schedule whose time
    /// was changed is due at its new time.
    pub async fn start(&self, now: Timestamp) -> Result<(), StoreError> {
        let states: HashMap<String, ScheduleState> = self
            .store
            .states()
            .await?
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect();
        for s in &self.current().await? {
            let upcoming = s.when.next_after(now).map(secs);
            let mut st = states
                .get(&s.name)
                .cloned()
                .unwrap_or_else(|| ScheduleState {
                    name: s.name.clone(),
                    ..ScheduleState::default()
                });
            st.next_run = match st.next_run {
                Some(missed) if missed <= secs(now) => match s.catch_up {
                    CatchUp::Once => Some(missed),
                    CatchUp::Skip => {
                        tracing::info!(schedule = %s.name, "runs missed while stopped are skipped (catch_up: skip)");
                        upcoming
                    }
                },
                _ => upcoming,
            };
            self.store.save_state(&st).await?;
        }
        Ok(())
    }

    /// Starts every run due at `now` that this instance claims; returns their tasks.
    pub async fn tick(self: &Arc<Self>, now: Timestamp) -> Vec<tokio::task::JoinHandle<()>> {
        {
            let mut latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
            *latest = (*latest).max(now);
        }
        // Only what is due is read (an index in the stores): idle ticks cost one query.
        let states = match self.store.due(secs(now)).await {
            Ok(st) => st,
            Err(e) => {
                tracing::warn!(error = %e, "schedules not checked: their state is unreadable");
                return Vec::new();
            }
        };
        if states.is_empty() {
            return Vec::new();
        }
        let mut defs: Option<Vec<crate::schedule::ScheduleDef>> = None;
        let mut started = Vec::new();
        for st in states {
            let found = match self.by_name.get(&st.name) {
                Some(i) => Some(self.schedules[*i].clone()),
                None => {
                    // Made in conversation: read the definitions once per tick that needs them.
                    if defs.is_none() {
                        defs = Some(self.store.defs().await.unwrap_or_default());
                    }
                    defs.iter()
                        .flatten()
                        .find(|d| d.name == st.name)
                        .and_then(|d| d.schedule().ok())
                }
            };
            let Some(s) = found.as_ref() else {
                continue;
            };
            let Some(due) = st.next_run else { continue };
            if !s.enabled || st.paused || due + jitter_of(s, due) > secs(now) {
                continue;
            }
            if self
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&s.name)
            {
                continue; // ours, still going
            }
            if let Some(h) = &s.active_hours
                && !h.contains(at(due))
            {
                // Outside its hours: passed over, quietly.
                let mut st = st.clone();
                st.next_run = s.when.next_after(now).map(secs);
                if let Err(e) = self.store.save_state(&st).await {
                    tracing::warn!(schedule = %s.name, error = %e, "schedule state not saved");
                }
                continue;
            }
            let now_ms = now.as_millisecond();
            let until = now_ms + (s.timeout + CLAIM_GRACE).as_millis() as i64;
            match self
                .store
                .claim(&s.name, due, &self.instance, now_ms, until)
                .await
            {
                Ok(true) => {}
                Ok(false) => continue, // another instance has it
                Err(e) => {
                    tracing::warn!(schedule = %s.name, error = %e, "run not claimed");
                    continue;
                }
            }
            self.running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(s.name.clone());
            let me = self.clone();
            let s = s.clone();
            started.push(tokio::spawn(async move {
                me.run(&s, due, now).await;
                me.running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&s.name);
            }));
        }
        started
    }

    async fn run(&self, s: &Schedule, due: i64, now: Timestamp) {
        let clock = Instant::now();
        tracing::info!(schedule = %s.name, due = %at(due), "scheduled run started");
        let (status, detail) = match tokio::time::timeout(s.timeout, self.runner.run(s, due)).await
        {
            Ok(Ok(text)) => ("ok", Some(text.lines().next().unwrap_or("").to_owned())),
            Ok(Err(why)) => ("failed", Some(why)),
            Err(_) => (
                "timeout",
                Some(format!(
                    "cancelled after {}",
                    humantime::format_duration(s.timeout)
                )),
            ),
        };
        let took = clock.elapsed();
        let ended = now
            .checked_add(jiff::SignedDuration::try_from(took).unwrap_or_default())
            .unwrap_or(now)
            .max(*self.latest.lock().unwrap_or_else(|p| p.into_inner()));
        let started_ms = now.as_millisecond();
        let record = RunRecord {
            name: s.name.clone(),
            due,
            instance: self.instance.clone(),
            started_ms,
            finished_ms: Some(started_ms + took.as_millis() as i64),
            status: status.into(),
            detail: detail.clone(),
        };
        if let Err(e) = self.store.finish(&record).await {
            tracing::warn!(schedule = %s.name, error = %e, "run's end not recorded");
        }
        // Runs whose time came while this one ran were not started: say so.
        let mut next = s.when.next_after(at(due)).map(secs);
        let mut passed = 0;
        while let Some(n) = next.filter(|n| *n > due && *n <= secs(ended) && passed < 1000) {
            passed += 1;
            tracing::warn!(schedule = %s.name, due = %at(n), "run skipped: the previous one was still going");
            let skipped = RunRecord {
                due: n,
                started_ms: ended.as_millisecond(),
                finished_ms: Some(ended.as_millisecond()),
                status: "skipped".into(),
                detail: Some("the previous run was still going".into()),
                ..record.clone()
            };
            strata_engine::meters::schedule_run(&s.name, "skipped");
            let _ = self.store.finish(&skipped).await;
            next = s.when.next_after(at(n)).map(secs);
        }
        // The state: read again, so a pause set meanwhile stays.
        let mut st = self
            .store
            .state(&s.name)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| ScheduleState {
                name: s.name.clone(),
                ..ScheduleState::default()
            });
        st.failures = if status == "ok" { 0 } else { st.failures + 1 };
        if st.failures > 0 {
            let later = secs(ended) + backoff(st.failures).as_secs() as i64;
            next = next.map(|n| n.max(later));
        }
        // Made due again by an operator while it ran: keep that.
        st.next_run = match st.next_run {
            Some(asked) if asked != due && asked <= secs(ended) => Some(asked),
            _ => next,
        };
        st.last_run = Some(secs(now));
        st.last_status = Some(status.into());
        st.last_duration_ms = Some(took.as_millis() as i64);
        if let Err(e) = self.store.save_state(&st).await {
            tracing::warn!(schedule = %s.name, error = %e, "schedule state not saved");
        }
        tracing::info!(schedule = %s.name, status, ms = took.as_millis() as u64, "scheduled run ended");
        strata_engine::meters::schedule_run(&s.name, status);
        if let Some(a) = &self.audit {
            a.event(&json!({
                "ts": strata_engine::clock::now_rfc3339(),
                "event": "schedule",
                "name": s.name,
                "due": at(due).to_string(),
                "status": status,
                "detail": detail,
                "instance": self.instance,
                "principal": s.principal.to_string(),
                "ms": took.as_millis() as u64,
            }));
        }
        if st.failures > 0 && st.failures % ALERT_AFTER == 0 {
            let alert = Alert {
                kind: "schedule",
                rule: "failures".into(),
                message: format!(
                    "schedule `{}` failed {} times in a row (last: {})",
                    s.name,
                    st.failures,
                    detail.unwrap_or_default()
                ),
                agent_id: match &s.action {
                    crate::schedule::Action::Prompt { agent, .. }
                    | crate::schedule::Action::Heartbeat { agent, .. } => Some(agent.clone()),
                    _ => None,
                },
                tool: None,
                request_id: None,
                score: None,
            };
            strata_engine::meters::alert(alert.kind, &alert.rule);
            for sink in &self.alerts {
                sink.alert(&alert);
            }
        }
    }

    /// Ticks just after each whole second (due times are whole seconds, so a run starts
    /// within milliseconds of its time) until `stop`.
    pub async fn run_until(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let into = Timestamp::now().subsec_nanosecond() as u64;
            let wait = Duration::from_nanos(1_000_000_000 - into) + Duration::from_millis(2);
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(wait) => {}
            }
            let _ = self.tick(Timestamp::now()).await;
        }
    }
}

/// Schedules' state and runs in memory (tests, embedders without a database).
#[derive(Default)]
pub struct InMemorySchedules {
    defs: Mutex<Vec<crate::schedule::ScheduleDef>>,
    states: Mutex<HashMap<String, ScheduleState>>,
    runs: Mutex<Vec<(RunRecord, i64)>>,
}

#[async_trait]
impl ScheduleStore for InMemorySchedules {
    async fn defs(&self) -> Result<Vec<crate::schedule::ScheduleDef>, StoreError> {
        Ok(self.defs.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    async fn add_def(&self, def: &crate::schedule::ScheduleDef) -> Result<bool, StoreError> {
        let mut all = self.defs.lock().unwrap_or_else(|p| p.into_inner());
        if all.iter().any(|d| d.name == def.name) {
            return Ok(false);
        }
        all.push(def.clone());
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(true)
    }

    async fn remove_def(&self, name: &str) -> Result<bool, StoreError> {
        let mut all = self.defs.lock().unwrap_or_else(|p| p.into_inner());
        let before = all.len();
        all.retain(|d| d.name != name);
        Ok(all.len() < before)
    }

    async fn states(&self) -> Result<Vec<ScheduleState>, StoreError> {
        let mut v: Vec<ScheduleState> = self
            .states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    async fn save_state(&self, state: &ScheduleState) -> Result<(), StoreError> {
        self.states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(state.name.clone(), state.clone());
        Ok(())
    }

    async fn set_paused(&self, name: &str, paused: bool) -> Result<(), StoreError> {
        let mut all = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let st = all.entry(name.to_owned()).or_insert_with(|| ScheduleState {
            name: name.to_owned(),
            ..ScheduleState::default()
        });
        st.paused = paused;
        Ok(())
    }

    async fn run_now(&self, name: &str, now: i64) -> Result<(), StoreError> {
        let mut all = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let st = all.entry(name.to_owned()).or_insert_with(|| ScheduleState {
            name: name.to_owned(),
            ..ScheduleState::default()
        });
        st.next_run = Some(now);
        Ok(())
    }

    async fn claim(
        &self,
        name: &str,
        due: i64,
        instance: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((r, until)) = runs
            .iter_mut()
            .find(|(r, _)| r.name == name && r.due == due)
        {
            if r.status != "running" || *until > now_ms {
                return Ok(false);
            }
            r.instance = instance.to_owned();
            r.started_ms = now_ms;
            *until = until_ms;
            return Ok(true);
        }
        runs.push((
            RunRecord {
                name: name.to_owned(),
                due,
                instance: instance.to_owned(),
                started_ms: now_ms,
                finished_ms: None,
                status: "running".into(),
                detail: None,
            },
            until_ms,
        ));
        Ok(true)
    }

    async fn finish(&self, run: &RunRecord) -> Result<(), StoreError> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        match runs
            .iter_mut()
            .find(|(r, _)| r.name == run.name && r.due == run.due)
        {
            Some((r, _)) => *r = run.clone(),
            None => runs.push((run.clone(), 0)),
        }
        Ok(())
    }

    async fn history(&self, name: &str, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<RunRecord> = runs
            .iter()
            .filter(|(r, _)| r.name == name)
            .map(|(r, _)| r.clone())
            .collect();
        v.sort_by(|a, b| b.due.cmp(&a.due).then(b.started_ms.cmp(&a.started_ms)));
        v.truncate(limit);
        Ok(v)
    }
}
