//! Schema migrations, embedded in the binary and applied at open: all pending steps in one
//! transaction that first takes an advisory lock for the schema, so two instances starting
//! at once apply them once (the second waits, then finds nothing to do). A database at a
//! newer version than this binary knows is refused, untouched.

use deadpool_postgres::Client;

use crate::db::{PgError, sql_error};

/// Migrations in order; the index + 1 is the version. Public for the tests that build an
/// older schema and open it with this binary.
#[doc(hidden)]
pub const MIGRATIONS: &[&str] = &[
    // 1: sessions, turns, the tool log, rate events, approvals, memories and their log.
    "CREATE TABLE sessions (
        id BIGSERIAL PRIMARY KEY,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        summary TEXT,
        turns_since_summary BIGINT NOT NULL DEFAULT 0,
        turn_count BIGINT NOT NULL DEFAULT 0,
        provider_state TEXT,
        taint TEXT,
        version BIGINT NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        UNIQUE (agent_id, session_id)
    );
    CREATE INDEX sessions_by_updated ON sessions (updated_at);
    CREATE TABLE turns (
        session BIGINT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        turn BIGINT NOT NULL,
        messages TEXT NOT NULL,
        message_count BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (session, turn)
    );
    CREATE TABLE tool_log (
        id BIGSERIAL PRIMARY KEY,
        ts BIGINT NOT NULL,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        status TEXT NOT NULL,
        elapsed_ms DOUBLE PRECISION NOT NULL,
        request_id TEXT NOT NULL,
        source_id BIGINT UNIQUE
    );
    CREATE INDEX tool_log_by_ts ON tool_log (ts);
    CREATE TABLE rate_events (
        id BIGSERIAL PRIMARY KEY,
        key TEXT NOT NULL,
        tool TEXT NOT NULL,
        ts_ms BIGINT NOT NULL,
        source_id BIGINT UNIQUE
    );
    CREATE INDEX rate_events_by_key ON rate_events (key, tool, ts_ms);
    CREATE INDEX rate_events_by_ts ON rate_events (ts_ms);
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        seq BIGSERIAL,
        agent_id TEXT,
        tool TEXT NOT NULL,
        principal TEXT NOT NULL,
        args TEXT NOT NULL,
        description TEXT NOT NULL,
        status TEXT NOT NULL,
        approver TEXT,
        reason TEXT,
        created_at BIGINT NOT NULL,
        decided_at BIGINT
    );
    CREATE INDEX approvals_by_status ON approvals (status, created_at);
    CREATE TABLE memories (
        mid BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        type TEXT NOT NULL,
        content TEXT NOT NULL,
        category TEXT,
        tags TEXT NOT NULL DEFAULT '[]',
        confidence DOUBLE PRECISION NOT NULL DEFAULT 1.0,
        pinned BOOLEAN NOT NULL DEFAULT FALSE,
        scope TEXT NOT NULL,
        created_by TEXT NOT NULL,
        access_count BIGINT NOT NULL DEFAULT 0,
        last_access BIGINT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        decayed_at BIGINT,
        archived BOOLEAN NOT NULL DEFAULT FALSE,
        archived_at BIGINT,
        embedding REAL[],
        embedder TEXT,
        taint TEXT,
        fts TSVECTOR NOT NULL
    );
    CREATE INDEX memories_fts ON memories USING GIN (fts);
    CREATE INDEX memories_by_scope ON memories (scope, archived);
    CREATE INDEX memories_by_updated ON memories (updated_at);
    CREATE TABLE memory_log (
        seq BIGSERIAL PRIMARY KEY,
        ts BIGINT NOT NULL,
        memory_id TEXT NOT NULL,
        mid BIGINT,
        action TEXT NOT NULL,
        actor TEXT NOT NULL,
        reason TEXT,
        source_id BIGINT UNIQUE
    );
    CREATE INDEX memory_log_by_memory ON memory_log (memory_id);",
    // 2: vectors in a table of their own, so a memory's row is a few hundred bytes, not two
    // kilobytes (recall reads rows, never vectors: those are ranked in process); room on each
    // page for access counts to be updated in place (HOT, no index touched); the full-text
    // index without a pending list, which every search would otherwise read through. A
    // session's row is updated by every turn: without an index on `updated_at` (retention's
    // rare scan reads the table instead) and with room on its page, in place (HOT).
    "DROP INDEX sessions_by_updated;
    ALTER TABLE sessions SET (fillfactor = 80);
    CREATE TABLE memory_vectors (
        mid BIGINT PRIMARY KEY REFERENCES memories (mid) ON DELETE CASCADE,
        embedding REAL[] NOT NULL,
        embedder TEXT
    );
    INSERT INTO memory_vectors (mid, embedding, embedder)
        SELECT mid, embedding, embedder FROM memories WHERE embedding IS NOT NULL;
    ALTER TABLE memories DROP COLUMN embedding, DROP COLUMN embedder;
    ALTER TABLE memories SET (fillfactor = 90);
    ALTER INDEX memories_fts SET (fastupdate = off);
    SELECT gin_clean_pending_list('memories_fts'::regclass);",
    // 3: a turn's stable id (a connector's message id, a request id), so a redelivered
    // message is answered from the stored turn instead of running again.
    "ALTER TABLE turns ADD COLUMN turn_id TEXT;
    CREATE UNIQUE INDEX turns_by_id ON turns (turn_id);",
    // 4: the members of a cluster, each one's row refreshed every few seconds while it runs.
    "CREATE TABLE cluster_members (
        id TEXT PRIMARY KEY,
        address TEXT,
        version TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        heartbeat_at BIGINT NOT NULL,
        in_flight BIGINT NOT NULL DEFAULT 0,
        turns_run BIGINT NOT NULL DEFAULT 0,
        answered_from_store BIGINT NOT NULL DEFAULT 0,
        redelivered BIGINT NOT NULL DEFAULT 0,
        stream_depth BIGINT,
        leases TEXT[] NOT NULL DEFAULT '{}'
    );",
    // 5: connector leases (one Discord gateway per bot account across the cluster), timed
    // by the database's clock; `state` is the holder's resume point for the next one.
    "CREATE TABLE connector_leases (
        name TEXT PRIMARY KEY,
        holder TEXT,
        epoch BIGINT NOT NULL DEFAULT 1,
        expires_at TIMESTAMPTZ NOT NULL,
        state TEXT
    );",
    // 6: every member's audit records, shipped from its log, for the cluster-wide
    // `/api/events` and `strata events` (each member's hash chain stays in its own file).
    "CREATE TABLE cluster_events (
        seq BIGSERIAL PRIMARY KEY,
        instance TEXT NOT NULL,
        ts TEXT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX cluster_events_by_ts ON cluster_events (ts, seq);",
    // 7: schedules: each one's state, and its runs (claimed before they start, so one
    // instance runs each due time; a lapsed claim can be taken again).
    "CREATE TABLE schedule_state (
        name TEXT PRIMARY KEY,
        next_run BIGINT,
        last_run BIGINT,
        last_status TEXT,
        last_duration_ms BIGINT,
        failures BIGINT NOT NULL DEFAULT 0,
        paused BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE TABLE schedule_runs (
        name TEXT NOT NULL,
        due BIGINT NOT NULL,
        instance TEXT NOT NULL,
        started_ms BIGINT NOT NULL,
        finished_ms BIGINT,
        status TEXT NOT NULL,
        detail TEXT,
        until_ms BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (name, due)
    );",
    // 8: schedules people asked for in conversation (`schedule_create`), as JSON.
    "CREATE TABLE schedule_defs (name TEXT PRIMARY KEY, def TEXT NOT NULL);",
    // 9: a tick reads only what is due.
    "CREATE INDEX schedule_state_due ON schedule_state (next_run) WHERE NOT paused;",
    // 10: every model call's tokens and cost (NULL: no price for the model).
    "CREATE TABLE model_calls (
        ts_ms BIGINT NOT NULL,
        agent TEXT NOT NULL,
        session TEXT NOT NULL,
        sender TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        purpose TEXT NOT NULL,
        input_tokens BIGINT NOT NULL,
        output_tokens BIGINT NOT NULL,
        cached_input_tokens BIGINT NOT NULL,
        cache_write_tokens BIGINT NOT NULL,
        cost_usd DOUBLE PRECISION
    );
    CREATE INDEX model_calls_by_ts ON model_calls (ts_ms);
    CREATE INDEX model_calls_by_turn ON model_calls (turn_id);",
    // 11: where each call's prompt tokens went (0 for calls recorded before).
    "ALTER TABLE model_calls
        ADD COLUMN in_system BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN in_tools BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN in_memory BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN in_history BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN in_tool_outputs BIGINT NOT NULL DEFAULT 0;",
    // 12: `storage migrate` copies model calls keyed by their SQLite row id.
    "ALTER TABLE model_calls ADD COLUMN source_id BIGINT UNIQUE;",
    // 13: goal workstreams: each goal as a versioned JSON document, and its append-only log.
    "CREATE TABLE goals (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        version BIGINT NOT NULL,
        created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        doc TEXT NOT NULL
    );
    CREATE TABLE goal_events (
        goal TEXT NOT NULL,
        seq BIGINT NOT NULL,
        at_ms BIGINT NOT NULL,
        actor TEXT NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL,
        reason TEXT,
        PRIMARY KEY (goal, seq)
    );",
    // 14: the turn journal (strata_runtime::journal): each turn's start and its steps.
    "CREATE TABLE journal_turns (
        turn_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        started_ms BIGINT NOT NULL,
        ended_ms BIGINT,
        outcome TEXT,
        resumed BIGINT NOT NULL DEFAULT 0,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        start TEXT NOT NULL
    );
    CREATE INDEX journal_turns_open ON journal_turns(started_ms) WHERE ended_ms IS NULL;
    CREATE INDEX journal_turns_ended ON journal_turns(ended_ms);
    CREATE TABLE journal_steps (
        turn_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (turn_id, seq)
    );",
    // 15: the idempotency key of the call that stored (or merged) a memory, on its log line:
    // the same call run again after a crash finds it.
    "ALTER TABLE memory_log ADD COLUMN idempotency_key TEXT;
    CREATE INDEX memory_log_by_key ON memory_log (idempotency_key) WHERE idempotency_key IS NOT NULL;",
];

/// The newest schema version this binary knows.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The tables `storage status` counts, in the order `storage migrate` copies them.
pub const TABLES: &[&str] = &[
    "sessions",
    "turns",
    "tool_log",
    "approvals",
    "rate_events",
    "model_calls",
    "goals",
    "goal_events",
    "journal_turns",
    "journal_steps",
    "memories",
    "memory_vectors",
    "memory_log",
];

/// Applies pending migrations to `schema` (created when missing).
pub(crate) async fn run(client: &mut Client, target: &str, schema: &str) -> Result<(), PgError> {
    let fail = |e: tokio_postgres::Error| PgError::Migration {
        target: target.to_owned(),
        schema: schema.to_owned(),
        reason: sql_error(&e),
    };
    let tx = client.transaction().await.map_err(fail)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('strata-migrate:' || $1, 0))",
        &[&schema],
    )
    .await
    .map_err(fail)?;
    // The schema is an identifier (checked by `Db::connect`), not a parameter.
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
         SET LOCAL search_path TO \"{schema}\";
         CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL);"
    ))
    .await
    .map_err(fail)?;
    let found: Option<i64> = tx
        .query_opt("SELECT version FROM schema_version", &[])
        .await
        .map_err(fail)?
        .map(|r| r.get(0));
    let found = found.unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(PgError::TooNew {
            target: target.to_owned(),
            schema: schema.to_owned(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(step).await.map_err(fail)?;
        tracing::info!(version = i + 1, schema, "PostgreSQL schema migrated");
    }
    if found < SCHEMA_VERSION {
        tx.execute("DELETE FROM schema_version", &[])
            .await
            .map_err(fail)?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&SCHEMA_VERSION],
        )
        .await
        .map_err(fail)?;
    }
    tx.commit().await.map_err(fail)
}

/// The version the schema is at.
pub(crate) async fn version(client: &Client) -> Result<i64, tokio_postgres::Error> {
    Ok(client
        .query_opt("SELECT version FROM schema_version", &[])
        .await?
        .map_or(0, |r| r.get(0)))
}
