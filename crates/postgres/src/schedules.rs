//! Schedules' state and runs in PostgreSQL: shared by the instances, so each due time is
//! claimed by one (one upsert; a claim still `running` past its time can be taken again).

use strata_engine::async_trait;
use strata_engine::session::StoreError;
use strata_runtime::schedule::{RunRecord, ScheduleDef, ScheduleState, ScheduleStore};

use crate::PgStore;

const STATE_COLS: &str =
    "name, next_run, last_run, last_status, last_duration_ms, failures, paused";

#[async_trait]
impl ScheduleStore for PgStore {
    async fn defs(&self) -> Result<Vec<ScheduleDef>, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let rows = c
            .query("SELECT def FROM schedule_defs ORDER BY name", &[])
            .await
            .map_err(|e| db.fail(e))?;
        Ok(rows
            .iter()
            .filter_map(|r| serde_json::from_str(r.get::<_, &str>(0)).ok())
            .collect())
    }

    async fn add_def(&self, def: &ScheduleDef) -> Result<bool, StoreError> {
        let db = self.db();
        let json = serde_json::to_string(def).map_err(StoreError::failed)?;
        let c = db.client().await?;
        c.execute(
            "INSERT INTO schedule_defs (name, def) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&def.name, &json],
        )
        .await
        .map(|n| n == 1)
        .map_err(|e| db.fail(e))
    }

    async fn remove_def(&self, name: &str) -> Result<bool, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        c.execute("DELETE FROM schedule_defs WHERE name = $1", &[&name])
            .await
            .map(|n| n == 1)
            .map_err(|e| db.fail(e))
    }

    async fn states(&self) -> Result<Vec<ScheduleState>, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let rows = c
            .query(
                &format!("SELECT {STATE_COLS} FROM schedule_state ORDER BY name"),
                &[],
            )
            .await
            .map_err(|e| db.fail(e))?;
        Ok(rows.iter().map(state).collect())
    }

    async fn state(&self, name: &str) -> Result<Option<ScheduleState>, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let row = c
            .query_opt(
                &format!("SELECT {STATE_COLS} FROM schedule_state WHERE name = $1"),
                &[&name],
            )
            .await
            .map_err(|e| db.fail(e))?;
        Ok(row.as_ref().map(state))
    }

    async fn due(&self, now: i64) -> Result<Vec<ScheduleState>, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT {STATE_COLS} FROM schedule_state WHERE NOT paused AND next_run <= $1"
                ),
                &[&now],
            )
            .await
            .map_err(|e| db.fail(e))?;
        Ok(rows.iter().map(state).collect())
    }

    async fn save_state(&self, s: &ScheduleState) -> Result<(), StoreError> {
        let db = self.db();
        let c = db.client().await?;
        c.execute(
            &format!(
                "INSERT INTO schedule_state ({STATE_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (name) DO UPDATE SET next_run = excluded.next_run, \
                 last_run = excluded.last_run, last_status = excluded.last_status, \
                 last_duration_ms = excluded.last_duration_ms, failures = excluded.failures, \
                 paused = excluded.paused"
            ),
            &[
                &s.name,
                &s.next_run,
                &s.last_run,
                &s.last_status,
                &s.last_duration_ms,
                &s.failures,
                &s.paused,
            ],
        )
        .await
        .map(|_| ())
        .map_err(|e| db.fail(e))
    }

    async fn set_paused(&self, name: &str, paused: bool) -> Result<(), StoreError> {
        let db = self.db();
        let c = db.client().await?;
        c.execute(
            "INSERT INTO schedule_state (name, paused) VALUES ($1, $2) \
             ON CONFLICT (name) DO UPDATE SET paused = excluded.paused",
            &[&name, &paused],
        )
        .await
        .map(|_| ())
        .map_err(|e| db.fail(e))
    }

    async fn run_now(&self, name: &str, now: i64) -> Result<(), StoreError> {
        let db = self.db();
        let c = db.client().await?;
        c.execute(
            "INSERT INTO schedule_state (name, next_run) VALUES ($1, $2) \
             ON CONFLICT (name) DO UPDATE SET next_run = excluded.next_run",
            &[&name, &now],
        )
        .await
        .map(|_| ())
        .map_err(|e| db.fail(e))
    }

    async fn claim(
        &self,
        name: &str,
        due: i64,
        instance: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        c.execute(
            "INSERT INTO schedule_runs AS r (name, due, instance, started_ms, status, until_ms) \
             VALUES ($1, $2, $3, $4, 'running', $5) \
             ON CONFLICT (name, due) DO UPDATE SET instance = excluded.instance, \
             started_ms = excluded.started_ms, until_ms = excluded.until_ms \
             WHERE r.status = 'running' AND r.until_ms <= $4",
            &[&name, &due, &instance, &now_ms, &until_ms],
        )
        .await
        .map(|n| n == 1)
        .map_err(|e| db.fail(e))
    }

    async fn finish(&self, r: &RunRecord) -> Result<(), StoreError> {
        let db = self.db();
        let c = db.client().await?;
        c.execute(
            "INSERT INTO schedule_runs (name, due, instance, started_ms, finished_ms, status, \
             detail) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (name, due) DO UPDATE SET instance = excluded.instance, \
             started_ms = excluded.started_ms, finished_ms = excluded.finished_ms, \
             status = excluded.status, detail = excluded.detail",
            &[
                &r.name,
                &r.due,
                &r.instance,
                &r.started_ms,
                &r.finished_ms,
                &r.status,
                &r.detail,
            ],
        )
        .await
        .map(|_| ())
        .map_err(|e| db.fail(e))
    }

    async fn history(&self, name: &str, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let rows = c
            .query(
                "SELECT name, due, instance, started_ms, finished_ms, status, detail \
                 FROM schedule_runs WHERE name = $1 ORDER BY due DESC, started_ms DESC LIMIT $2",
                &[&name, &(limit as i64)],
            )
            .await
            .map_err(|e| db.fail(e))?;
        Ok(rows
            .iter()
            .map(|r| RunRecord {
                name: r.get(0),
                due: r.get(1),
                instance: r.get(2),
                started_ms: r.get(3),
                finished_ms: r.get(4),
                status: r.get(5),
                detail: r.get(6),
            })
            .collect())
    }
}

fn state(r: &tokio_postgres::Row) -> ScheduleState {
    ScheduleState {
        name: r.get(0),
        next_run: r.get(1),
        last_run: r.get(2),
        last_status: r.get(3),
        last_duration_ms: r.get(4),
        failures: r.get(5),
        paused: r.get(6),
    }
}
