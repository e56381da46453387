//! Schedules' state and runs in SQLite (the claim is one upsert, so of two claimers one
//! wins, and a lapsed claim can be taken again).

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, params};
use strata_engine::session::StoreError;
use strata_runtime::schedule::{RunRecord, ScheduleDef, ScheduleState, ScheduleStore};

use crate::SqliteStore;

fn state(r: &Row<'_>) -> rusqlite::Result<ScheduleState> {
    Ok(ScheduleState {
        name: r.get(0)?,
        next_run: r.get(1)?,
        last_run: r.get(2)?,
        last_status: r.get(3)?,
        last_duration_ms: r.get(4)?,
        failures: r.get(5)?,
        paused: r.get::<_, i64>(6)? != 0,
    })
}

fn run(r: &Row<'_>) -> rusqlite::Result<RunRecord> {
    Ok(RunRecord {
        name: r.get(0)?,
        due: r.get(1)?,
        instance: r.get(2)?,
        started_ms: r.get(3)?,
        finished_ms: r.get(4)?,
        status: r.get(5)?,
        detail: r.get(6)?,
    })
}

fn fail(e: impl std::fmt::Display) -> StoreError {
    StoreError::failed(e)
}

#[async_trait]
impl ScheduleStore for SqliteStore {
    async fn defs(&self) -> Result<Vec<ScheduleDef>, StoreError> {
        let rows: Vec<String> = self
            .with(|c| {
                c.prepare_cached("SELECT def FROM schedule_defs ORDER BY name")?
                    .query_map([], |r| r.get(0))?
                    .collect()
            })
            .await?;
        Ok(rows
            .iter()
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect())
    }

    async fn add_def(&self, def: &ScheduleDef) -> Result<bool, StoreError> {
        let (name, json) = (def.name.clone(), serde_json::to_string(def).map_err(fail)?);
        self.write(move |c| {
            c.execute(
                "INSERT INTO schedule_defs (name, def) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                params![name, json],
            )
        })
        .await
        .map(|n| n == 1)
    }

    async fn remove_def(&self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.write(move |c| c.execute("DELETE FROM schedule_defs WHERE name = ?1", [name]))
            .await
            .map(|n| n == 1)
    }

    async fn states(&self) -> Result<Vec<ScheduleState>, StoreError> {
        self.with(|c| {
            c.prepare_cached(
                "SELECT name, next_run, last_run, last_status, last_duration_ms, failures, \
                 paused FROM schedule_state ORDER BY name",
            )?
            .query_map([], state)?
            .collect()
        })
        .await
        .map_err(fail)
    }

    async fn state(&self, name: &str) -> Result<Option<ScheduleState>, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            c.prepare_cached(
                "SELECT name, next_run, last_run, last_status, last_duration_ms, failures, \
                 paused FROM schedule_state WHERE name = ?1",
            )?
            .query_row([name], state)
            .optional()
        })
        .await
    }

    async fn due(&self, now: i64) -> Result<Vec<ScheduleState>, StoreError> {
        self.with(move |c| {
            c.prepare_cached(
                "SELECT name, next_run, last_run, last_status, last_duration_ms, failures, \
                 paused FROM schedule_state WHERE paused = 0 AND next_run <= ?1",
            )?
            .query_map([now], state)?
            .collect()
        })
        .await
    }

    async fn save_state(&self, s: &ScheduleState) -> Result<(), StoreError> {
        let s = s.clone();
        self.write(move |c| {
            c.execute(
                "INSERT INTO schedule_state (name, next_run, last_run, last_status, \
                 last_duration_ms, failures, paused) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (name) DO UPDATE SET next_run = excluded.next_run, \
                 last_run = excluded.last_run, last_status = excluded.last_status, \
                 last_duration_ms = excluded.last_duration_ms, failures = excluded.failures, \
                 paused = excluded.paused",
                params![
                    s.name,
                    s.next_run,
                    s.last_run,
                    s.last_status,
                    s.last_duration_ms,
                    s.failures,
                    i64::from(s.paused)
                ],
            )
        })
        .await
        .map(|_| ())
    }

    async fn set_paused(&self, name: &str, paused: bool) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.write(move |c| {
            c.execute(
                "INSERT INTO schedule_state (name, paused) VALUES (?1, ?2) \
                 ON CONFLICT (name) DO UPDATE SET paused = excluded.paused",
                params![name, i64::from(paused)],
            )
        })
        .await
        .map(|_| ())
    }

    async fn run_now(&self, name: &str, now: i64) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.write(move |c| {
            c.execute(
                "INSERT INTO schedule_state (name, next_run) VALUES (?1, ?2) \
                 ON CONFLICT (name) DO UPDATE SET next_run = excluded.next_run",
                params![name, now],
            )
        })
        .await
        .map(|_| ())
    }

    async fn claim(
        &self,
        name: &str,
        due: i64,
        instance: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, StoreError> {
        let (name, instance) = (name.to_owned(), instance.to_owned());
        self.write(move |c| {
            c.execute(
                "INSERT INTO schedule_runs (name, due, instance, started_ms, status, until_ms) \
                 VALUES (?1, ?2, ?3, ?4, 'running', ?5) \
                 ON CONFLICT (name, due) DO UPDATE SET instance = excluded.instance, \
                 started_ms = excluded.started_ms, until_ms = excluded.until_ms \
                 WHERE schedule_runs.status = 'running' AND schedule_runs.until_ms <= ?4",
                params![name, due, instance, now_ms, until_ms],
            )
        })
        .await
        .map(|n| n == 1)
    }

    async fn finish(&self, r: &RunRecord) -> Result<(), StoreError> {
        let r = r.clone();
        self.write(move |c| {
            c.execute(
                "INSERT INTO schedule_runs (name, due, instance, started_ms, finished_ms, \
                 status, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (name, due) DO UPDATE SET instance = excluded.instance, \
                 started_ms = excluded.started_ms, finished_ms = excluded.finished_ms, \
                 status = excluded.status, detail = excluded.detail",
                params![
                    r.name,
                    r.due,
                    r.instance,
                    r.started_ms,
                    r.finished_ms,
                    r.status,
                    r.detail
                ],
            )
        })
        .await
        .map(|_| ())
    }

    async fn history(&self, name: &str, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            c.prepare_cached(
                "SELECT name, due, instance, started_ms, finished_ms, status, detail \
                 FROM schedule_runs WHERE name = ?1 ORDER BY due DESC, started_ms DESC LIMIT ?2",
            )?
            .query_map(params![name, limit as i64], run)?
            .collect()
        })
        .await
        .map_err(fail)
    }
}
