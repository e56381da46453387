//! The turn journal: what a turn did, step by step, written before it moves on — so a turn
//! that dies half-way (kill -9, out of memory, a deploy) continues from its last step instead
//! of starting again, and nothing it did happens twice (docs/DURABILITY.md).
//!
//! A turn's journal is its start (the request, enough to run it again) and its steps, each
//! keyed within the turn:
//!
//! | kind | key | written |
//! |---|---|---|
//! | `model` | `m<N>` (the turn's N-th model call) | after the response came, with the response |
//! | `tool_started` | `t<N>.<i>` (the i-th call of response N) | before the tool runs |
//! | `tool_done` | the same | after the call, with its outcome |
//! | `unknown_outcome` | the same | when a resumed turn did not run a call again |
//!
//! and its end (`ok`, `error`, `denied`, `budget`). The invariant: **no effect runs without its
//! durable `tool_started` record** — the Invoker writes it after every check and right before
//! the tool's own code, waits for its commit, and runs nothing when the write fails.
//!
//! A turn collects its records and hands them to one writer before it waits on anything slow
//! (a model call, an approval, storing its answer); the writer commits what has queued, of
//! every turn, in order and in one transaction. A turn waits for the commit only before a
//! tool runs, after a tool with side effects ran (its outcome) and before a caller's message
//! counts as taken (its start, when the caller named the turn); every other record is
//! written behind the turn, durable a commit later. A
//! record lost to a crash in that window is as if the process had died just before it; a
//! durable record makes every earlier one durable too.
//!
//! A resumed turn ([`Journal::begin`] on a turn id with a journal and no end) uses a recorded
//! model response as it is (not asked for or paid for again) and a recorded tool outcome as
//! it is; a call recorded as started with no outcome runs again only when that is safe (no
//! side effects, or the tool honours the idempotency key it gets again), and is otherwise
//! not repeated: the model is told its outcome is unknown ([`UNKNOWN_OUTCOME`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use strata_engine::config::{JournalConfig, UnknownOutcome};
use strata_engine::llm::{ChatMessage, CompletionRequest, CompletionResponse, StopReason, Usage};
use strata_engine::message::Message;
use strata_engine::principal::Principal;
use strata_engine::session::StoreError;
use strata_engine::taint::{Taint, TaintSource};
use strata_engine::turns::TurnRequest;

/// The status a call that was not run again gets (in the session's tool log and the model's
/// tool result).
pub const UNKNOWN_OUTCOME: &str = "unknown_outcome";

/// What a turn was asked to do: enough to run it again after a crash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    /// The agent.
    pub agent_id: String,
    /// Its session.
    pub session_id: String,
    /// The channel the message came from.
    pub channel_id: String,
    /// The channel's kind, as the model reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_kind: Option<String>,
    /// The caller's narrowings (a token's scope): a resumed turn keeps them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<strata_engine::scope::Scope>,
    /// Who sent it.
    pub sender: Principal,
    /// The message (text and attachments).
    pub message: Message,
    /// The asking turn's taint (an inter-agent turn shares it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taint: Vec<TaintSource>,
    /// Inter-agent depth.
    #[serde(default)]
    pub depth: u32,
}

impl TurnStart {
    /// The journaled form of `req`.
    pub fn of(req: &TurnRequest) -> TurnStart {
        TurnStart {
            agent_id: req.agent_id.clone(),
            session_id: req.session_id.clone(),
            channel_id: req.channel_id.clone(),
            channel_kind: req.channel_kind.clone(),
            scopes: req.scopes.clone(),
            sender: req.sender.clone(),
            message: req.message.clone(),
            taint: req.taint.as_ref().map(Taint::sources).unwrap_or_default(),
            depth: req.depth,
        }
    }

    /// The request again, under its turn id (nobody watches a resumed turn's tokens).
    pub fn into_request(self, turn_id: &str) -> TurnRequest {
        let taint = (!self.taint.is_empty()).then(|| {
            let t = Taint::new();
            for s in self.taint {
                t.mark(s);
            }
            t
        });
        TurnRequest {
            agent_id: self.agent_id,
            session_id: self.session_id,
            channel_id: self.channel_id,
            channel_kind: self.channel_kind,
            stream: None,
            scopes: self.scopes,
            sender: self.sender,
            message: self.message,
            depth: self.depth,
            taint,
            turn_id: Some(turn_id.to_owned()),
        }
    }
}

/// A turn as the journal lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalTurn {
    /// The turn id (the caller's `request_id`, a connector's message id, or generated).
    pub turn_id: String,
    /// Which process runs it (`host-pid`): a resumed turn is taken over by the resuming one.
    pub owner: String,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// When it ended; `None`: unfinished.
    pub ended_ms: Option<i64>,
    /// `ok`, `error`, `denied`, `budget`; `None`: unfinished.
    pub outcome: Option<String>,
    /// Times it was resumed after a crash.
    pub resumed: u32,
    /// Steps recorded (filled by listings).
    #[serde(default)]
    pub steps: u64,
    /// What it was asked to do.
    pub start: TurnStart,
}

/// One recorded step of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalStep {
    /// Its place in the turn's journal (from 1).
    pub seq: u64,
    /// When it was written (ms since the epoch).
    pub at_ms: i64,
    /// `model`, `tool_started`, `tool_done`, `unknown_outcome`.
    pub kind: String,
    /// What it is about within the turn (`m1`, `t1.0`).
    pub key: String,
    /// What was recorded.
    pub data: Value,
}

/// Which turns a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TurnFilter {
    /// Only turns without an end.
    pub unfinished: bool,
    /// At most this many, newest first (0: 100).
    pub limit: usize,
}

/// Where journals are kept: the state store (SQLite, PostgreSQL).
#[async_trait]
pub trait JournalStore: Send + Sync {
    /// Records a turn's start; `false` when a journal with its id exists (left as it is).
    async fn journal_begin(&self, turn: &JournalTurn) -> Result<bool, StoreError>;
    /// Marks a journal taken over by `owner` (a resume): clears its end, counts the resume.
    async fn journal_reopen(&self, turn_id: &str, owner: &str) -> Result<(), StoreError>;
    /// Appends steps (their `seq` chosen by the caller, unique within the turn).
    async fn journal_append(&self, turn_id: &str, steps: &[JournalStep]) -> Result<(), StoreError>;
    /// Records the turn's end.
    async fn journal_end(&self, turn_id: &str, at_ms: i64, outcome: &str)
    -> Result<(), StoreError>;
    /// A turn's journal with its steps in order.
    async fn journal_turn(
        &self,
        turn_id: &str,
    ) -> Result<Option<(JournalTurn, Vec<JournalStep>)>, StoreError>;
    /// Turns, newest first.
    async fn journal_turns(&self, filter: TurnFilter) -> Result<Vec<JournalTurn>, StoreError>;
    /// Deletes the journals of turns that ended before `before_ms`; returns how many.
    async fn journal_prune(&self, before_ms: i64) -> Result<u64, StoreError>;
    /// Writes `ops` in order, as one commit where the store can (SQLite and PostgreSQL do):
    /// the journal's writer hands every write queued meanwhile, of every turn, to one call.
    /// The default writes them one by one.
    async fn journal_write(&self, ops: &[JournalOp]) -> Result<(), StoreError> {
        for op in ops {
            match op {
                JournalOp::Begin(t) => self.journal_begin(t).await.map(|_| ())?,
                JournalOp::Append { turn_id, steps } => {
                    self.journal_append(turn_id, steps).await?;
                }
                JournalOp::End {
                    turn_id,
                    at_ms,
                    outcome,
                } => self.journal_end(turn_id, *at_ms, outcome).await?,
            }
        }
        Ok(())
    }
    /// Whether the store keeps an ordered write queue of its own ([`Self::journal_queue`]):
    /// then the journal hands writes to it directly, and a barrier is a
    /// [`Self::journal_write`] that waits its turn in that queue. SQLite has one (its writer
    /// thread); otherwise the journal's own writer task orders and batches the writes.
    fn journal_ordered(&self) -> bool {
        false
    }
    /// Queues `ops` to be written after every write queued or started before (a
    /// [`Self::journal_write`] included), without waiting; only called when
    /// [`Self::journal_ordered`]. A failure is the store's to log.
    fn journal_queue(&self, ops: Vec<JournalOp>) {
        drop(ops);
    }
}

/// One write of [`JournalStore::journal_write`].
#[derive(Debug, Clone, PartialEq)]
pub enum JournalOp {
    /// A turn's start (as [`JournalStore::journal_begin`]: kept when its id exists).
    Begin(Box<JournalTurn>),
    /// Steps of a turn.
    Append {
        /// The turn.
        turn_id: String,
        /// Its steps.
        steps: Vec<JournalStep>,
    },
    /// A turn's end.
    End {
        /// The turn.
        turn_id: String,
        /// When (ms since the epoch).
        at_ms: i64,
        /// `ok`, `error`, `denied`, `budget`.
        outcome: String,
    },
}

/// Most writes the writer hands to one [`JournalStore::journal_write`].
const WRITER_BATCH: usize = 512;

/// Writes queued for the writer, and, for a barrier, who waits for their commit.
struct Queued {
    ops: Vec<JournalOp>,
    done: Option<tokio::sync::oneshot::Sender<Result<(), StoreError>>>,
}

/// The journal's one writer: writes are queued in the order they are made and committed in
/// that order, whatever is queued at once in one commit (group commit across turns). A
/// caller that must not go on before its write is durable — an effect about to run, a
/// message about to be acknowledged — waits for its commit, which is also the commit of
/// everything queued before it (a *barrier*); every other write is written behind the turn,
/// within a commit's time, without the turn waiting for it.
struct Writer {
    store: Arc<dyn JournalStore>,
    tx: StdMutex<Option<tokio::sync::mpsc::UnboundedSender<Queued>>>,
}

impl Writer {
    fn new(store: Arc<dyn JournalStore>) -> Writer {
        Writer {
            store,
            tx: StdMutex::new(None),
        }
    }

    /// Queues `ops` (started on the runtime of the first write, and again when that runtime
    /// is gone).
    fn queue(&self, mut q: Queued) {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = tx.as_ref() {
            match t.send(q) {
                Ok(()) => return,
                Err(tokio::sync::mpsc::error::SendError(back)) => q = back,
            }
        }
        let (t, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(write_loop(self.store.clone(), rx));
        if t.send(q).is_err() {
            tracing::error!("the journal writer did not start; a journal write was lost");
        }
        *tx = Some(t);
    }

    /// Queues `ops` and returns at once.
    fn behind(&self, ops: Vec<JournalOp>) {
        if self.store.journal_ordered() {
            self.store.journal_queue(ops);
        } else {
            self.queue(Queued { ops, done: None });
        }
    }

    /// Queues `ops` and waits until they, and everything queued before, are durable.
    async fn barrier(&self, ops: Vec<JournalOp>) -> Result<(), StoreError> {
        if self.store.journal_ordered() {
            return self.store.journal_write(&ops).await;
        }
        let (done, rx) = tokio::sync::oneshot::channel();
        self.queue(Queued {
            ops,
            done: Some(done),
        });
        rx.await
            .map_err(|_| StoreError::Unavailable("the journal writer has stopped".into()))?
    }
}

async fn write_loop(
    store: Arc<dyn JournalStore>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Queued>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < WRITER_BATCH {
            match rx.try_recv() {
                Ok(q) => batch.push(q),
                Err(_) => break,
            }
        }
        let mut ops = Vec::new();
        let mut parts = Vec::with_capacity(batch.len());
        for q in batch {
            let from = ops.len();
            ops.extend(q.ops);
            parts.push((from..ops.len(), q.done));
        }
        let all = if ops.is_empty() {
            Ok(())
        } else {
            store.journal_write(&ops).await
        };
        match all {
            Ok(()) => {
                for (_, done) in parts {
                    if let Some(d) = done {
                        let _ = d.send(Ok(()));
                    }
                }
            }
            // One bad write must not take the others with it: each caller's writes again,
            // on their own.
            Err(e) if parts.len() > 1 => {
                tracing::debug!(error = %e, "a shared journal commit failed; writing each part alone");
                for (range, done) in parts {
                    let r = if range.is_empty() {
                        Ok(())
                    } else {
                        store.journal_write(&ops[range]).await
                    };
                    report(&r, done.is_none());
                    if let Some(d) = done {
                        let _ = d.send(r);
                    }
                }
            }
            Err(e) => {
                let r = Err(e);
                let (_, done) = parts.pop().unwrap_or((0..0, None));
                report(&r, done.is_none());
                if let Some(d) = done {
                    let _ = d.send(r);
                }
            }
        }
    }
}

/// A write nobody waits for is logged when it fails (a waiting caller handles its error).
fn report(r: &Result<(), StoreError>, behind: bool) {
    if let (Err(e), true) = (r, behind) {
        tracing::warn!(error = %e, "a journal write failed; a crash before the turn's next durable step would repeat what it recorded (model calls), never an effect");
    }
}

/// A tool call of a journaled turn, as the Invoker gets it: it records the call as started
/// (durably) right before the tool's code runs, and hands the tool its idempotency key.
#[derive(Debug, Clone)]
pub struct JournalCall {
    /// The turn's journal.
    pub turn: Arc<TurnJournal>,
    /// The call's key within the turn (`t<N>.<i>`).
    pub key: String,
    /// Its idempotency key ([`TurnJournal::idempotency_key`]).
    pub idempotency_key: String,
    /// The call had started before a crash without an outcome and runs again (its tool is
    /// safe to repeat): the tool sees it as [`strata_engine::ToolContext::is_resumed_call`].
    pub resumed: bool,
}

/// A recorded tool call, as a resumed turn finds it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallRecord {
    /// Not recorded: run it.
    New,
    /// Started, no outcome: the process died while it ran (or just after).
    Started,
    /// Its outcome.
    Done(RecordedOutcome),
}

/// A call's outcome as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedOutcome {
    /// `ok`, `error`, `denied`, …, or [`UNKNOWN_OUTCOME`].
    pub status: String,
    /// What the model was told.
    pub content: String,
    /// The pipeline's request id.
    pub request_id: String,
    /// How long it took.
    pub elapsed_ms: f64,
}

/// The id a process writes as a journal's owner: host and pid.
pub fn owner_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let host = host.trim();
    format!(
        "{}-{}",
        if host.is_empty() { "strata" } else { host },
        std::process::id()
    )
}

/// Whether the process named by `owner` ([`owner_id`]) runs on this host now. A process of
/// another host counts as gone: only a single node resumes turns at start (the cluster's
/// queue redelivers its own), and a single node's host name changes with its container.
fn owner_alive(owner: &str) -> bool {
    let Some((host, pid)) = owner.rsplit_once('-') else {
        return false;
    };
    let me = owner_id();
    let my_host = me.rsplit_once('-').map_or("", |(h, _)| h);
    if host != my_host {
        return false;
    }
    let Ok(pid) = pid.parse::<i32>() else {
        return false;
    };
    if pid == std::process::id() as i32 {
        return false;
    }
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

/// 32 hex digits of SHA-256 over the parts, separated.
fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A digest of what a model request asks (its model, system, messages and tool names).
pub fn request_digest(req: &CompletionRequest) -> String {
    let messages = serde_json::to_string(&req.messages).unwrap_or_default();
    let tools: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    digest(&[
        &req.model,
        req.system.as_deref().unwrap_or_default(),
        &messages,
        &tools.join(","),
    ])
}

/// The test-only crash switch: `STRATA_TEST_CRASH_AT=<point>:<n>` kills this process with
/// SIGKILL the n-th time it passes `<point>` (`model_call`, `model_recorded`, `tool_started`,
/// `tool_ran`, `tool_done`, `turn_stored`, `turn_ended`). The kill-point tests set it;
/// nobody else should.
///
/// A point named after a record (`model_recorded`, `tool_started`, `tool_done`,
/// `turn_ended`) is passed once the record is durable ([`TurnJournal::crash_point`]): a
/// record written behind the turn can be lost to a crash in the commit's time after it was
/// made, which is the same as the process dying just before it.
pub fn crash_point(point: &str) {
    static SEEN: StdMutex<Option<HashMap<String, u64>>> = StdMutex::new(None);
    let Some((want, n)) = crash_at() else { return };
    if want != point {
        return;
    }
    let count = {
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        let m = seen.get_or_insert_with(HashMap::new);
        let c = m.entry(point.to_owned()).or_insert(0);
        *c += 1;
        *c
    };
    if count == *n {
        eprintln!("STRATA_TEST_CRASH_AT: killed at {point}:{n}");
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        // SIGKILL is not delivered synchronously everywhere: nothing more runs meanwhile.
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}

fn crash_at() -> &'static Option<(String, u64)> {
    static AT: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
    AT.get_or_init(|| {
        let v = std::env::var("STRATA_TEST_CRASH_AT").ok()?;
        let (p, n) = v.rsplit_once(':')?;
        Some((p.to_owned(), n.parse().ok()?))
    })
}

/// Whether `STRATA_TEST_CRASH_AT` names `point` (at any count).
pub fn crash_armed(point: &str) -> bool {
    crash_at().as_ref().is_some_and(|(p, _)| p == point)
}

/// The journal of every turn this process runs (`EnvExt::journal`).
pub struct Journal {
    store: Arc<dyn JournalStore>,
    writer: Arc<Writer>,
    cfg: JournalConfig,
    owner: String,
    live: StdMutex<HashMap<String, Arc<TurnJournal>>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// A journal writing to `store`, as this process ([`owner_id`]).
    pub fn new(store: Arc<dyn JournalStore>, cfg: JournalConfig) -> Journal {
        Journal {
            writer: Arc::new(Writer::new(store.clone())),
            store,
            cfg,
            owner: owner_id(),
            live: StdMutex::new(HashMap::new()),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn JournalStore> {
        &self.store
    }

    /// What a resumed turn does with a call whose outcome is unknown.
    pub fn unknown_outcome(&self) -> UnknownOutcome {
        self.cfg.unknown_outcome
    }

    /// Starts (or, for a turn id with an unfinished journal, resumes) the journal of turn
    /// `turn_id`.
    ///
    /// A turn id the caller brought (a `request_id`, a connector's message id, a queued
    /// turn's id) may have a journal already, and the caller may acknowledge the message
    /// once this returns: the start is durable by then. An id minted for this turn
    /// (`minted`) has no journal anywhere and nobody to acknowledge: its start is written
    /// behind, before any step of the turn (and so durable before any effect).
    pub async fn begin(
        &self,
        turn_id: &str,
        req: &TurnStart,
        minted: bool,
    ) -> Result<Arc<TurnJournal>, StoreError> {
        let new = minted || self.store.journal_begin(&self.row(turn_id, req)).await?;
        let tj = if new {
            let tj = TurnJournal::new(turn_id, self.writer.clone(), self.cfg.max_step_bytes, &[]);
            if minted {
                tj.push(JournalOp::Begin(Box::new(self.row(turn_id, req))));
            }
            tj
        } else {
            // An earlier run of this id in this process may still have writes queued (its
            // end): they land first.
            self.settle().await?;
            let (found, steps) = match self.store.journal_turn(turn_id).await? {
                Some((t, steps)) => (Some(t), steps),
                None => (None, Vec::new()),
            };
            // Accepted by this process and not started yet (`accept`): its first run.
            let accepted = steps.is_empty()
                && found
                    .as_ref()
                    .is_some_and(|t| t.owner == self.owner && t.ended_ms.is_none());
            if !accepted {
                self.store.journal_reopen(turn_id, &self.owner).await?;
                strata_engine::meters::turn_resumed();
                tracing::info!(
                    turn = %turn_id,
                    steps = steps.len(),
                    "turn resumed from its journal: recorded steps are not done again"
                );
            }
            TurnJournal::new(
                turn_id,
                self.writer.clone(),
                self.cfg.max_step_bytes,
                &steps,
            )
        };
        let mut tj = tj;
        tj.commit_before_reads = self.cfg.commit_before_reads;
        let tj = Arc::new(tj);
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(turn_id.to_owned(), tj.clone());
        Ok(tj)
    }

    /// Records a turn accepted to run later (a `send_to_agent` delivery): durable when this
    /// returns, so the turn runs even when this process dies first — at its next start.
    pub async fn accept(&self, turn_id: &str, req: &TurnStart) -> Result<(), StoreError> {
        self.store
            .journal_begin(&self.row(turn_id, req))
            .await
            .map(|_| ())
    }

    /// A new journal of turn `turn_id`, owned by this process, started now.
    fn row(&self, turn_id: &str, req: &TurnStart) -> JournalTurn {
        JournalTurn {
            turn_id: turn_id.to_owned(),
            owner: self.owner.clone(),
            started_ms: strata_engine::clock::now_ms(),
            ended_ms: None,
            outcome: None,
            resumed: 0,
            steps: 0,
            start: req.clone(),
        }
    }

    /// The journal of a turn running in this process.
    pub fn live(&self, turn_id: &str) -> Option<Arc<TurnJournal>> {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(turn_id)
            .cloned()
    }

    /// Ends the turn's journal with `outcome`, written behind: the turn's answer is stored
    /// already, and a crash before the end lands finds that answer at the next start and
    /// ends the journal then (a failure is logged: the answer stands).
    pub fn end(&self, turn_id: &str, outcome: &str) {
        let live = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(turn_id);
        let mut ops = live.map(|tj| tj.take()).unwrap_or_default();
        ops.push(JournalOp::End {
            turn_id: turn_id.to_owned(),
            at_ms: strata_engine::clock::now_ms(),
            outcome: outcome.to_owned(),
        });
        self.writer.behind(ops);
    }

    /// Waits until every journal write made so far is durable (what a reader of the journal
    /// in this process calls first, and the process before it exits).
    pub async fn settle(&self) -> Result<(), StoreError> {
        self.writer.barrier(Vec::new()).await
    }

    /// Ends turn `turn_id`'s journal as `ok` when it has none yet (a turn whose answer was
    /// stored just before the process died).
    pub async fn close_if_open(&self, turn_id: &str) {
        match self.store.journal_turn(turn_id).await {
            Ok(Some((t, _))) if t.ended_ms.is_none() => self.end(turn_id, "ok"),
            Ok(_) => {}
            Err(e) => tracing::warn!(turn = %turn_id, error = %e, "journal not read"),
        }
    }

    /// Forgets a live turn without ending its journal (a turn that could not start here).
    pub fn drop_live(&self, turn_id: &str) {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(turn_id);
    }

    /// Turns with no end that no live process on this host owns: what a start resumes.
    pub async fn orphans(&self) -> Result<Vec<JournalTurn>, StoreError> {
        let list = self
            .store
            .journal_turns(TurnFilter {
                unfinished: true,
                limit: 10_000,
            })
            .await?;
        Ok(list
            .into_iter()
            .filter(|t| t.owner != self.owner && !owner_alive(&t.owner))
            .collect())
    }

    /// Deletes journals of turns that ended more than `journal.retain_days` ago.
    pub async fn prune(&self) -> Result<u64, StoreError> {
        if self.cfg.retain_days == 0 {
            return Ok(0);
        }
        let before = strata_engine::clock::now_ms() - i64::from(self.cfg.retain_days) * 86_400_000;
        self.store.journal_prune(before).await
    }
}

/// The journal of one running turn: what it recorded before (when resumed) and the writer of
/// its new steps.
pub struct TurnJournal {
    turn_id: String,
    writer: Arc<Writer>,
    /// `journal.commit_before_reads`.
    commit_before_reads: bool,
    /// Records made since the last hand-off to the writer, in order.
    pending: StdMutex<Vec<JournalOp>>,
    max_step_bytes: usize,
    seq: AtomicU64,
    models: AtomicU32,
    recorded_models: HashMap<u32, CompletionResponse>,
    recorded_calls: HashMap<String, CallRecord>,
    resumed: bool,
}

impl Drop for TurnJournal {
    /// A turn that stops without an end (its task cancelled) still writes what it recorded.
    fn drop(&mut self) {
        let ops = std::mem::take(self.pending.get_mut().unwrap_or_else(|p| p.into_inner()));
        if !ops.is_empty() && tokio::runtime::Handle::try_current().is_ok() {
            self.writer.behind(ops);
        }
    }
}

impl std::fmt::Debug for TurnJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnJournal")
            .field("turn_id", &self.turn_id)
            .field("resumed", &self.resumed)
            .finish_non_exhaustive()
    }
}

fn response_of(data: &Value) -> Option<CompletionResponse> {
    if data.get("cut").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let message: ChatMessage = serde_json::from_value(data.get("message")?.clone()).ok()?;
    let usage: Usage = data
        .get("usage")
        .and_then(|u| serde_json::from_value(u.clone()).ok())
        .unwrap_or_default();
    let stop = data
        .get("stop")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or(if message.tool_calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        });
    Some(CompletionResponse {
        message,
        stop,
        usage,
        provider_state: data.get("provider_state").cloned().filter(|v| !v.is_null()),
    })
}

impl TurnJournal {
    fn new(
        turn_id: &str,
        writer: Arc<Writer>,
        max_step_bytes: usize,
        steps: &[JournalStep],
    ) -> TurnJournal {
        let mut recorded_models = HashMap::new();
        let mut recorded_calls = HashMap::new();
        for s in steps {
            match s.kind.as_str() {
                "model" => {
                    if let (Some(n), Some(r)) = (
                        s.key.strip_prefix('m').and_then(|n| n.parse().ok()),
                        response_of(&s.data),
                    ) {
                        recorded_models.insert(n, r);
                    }
                }
                "tool_started" => {
                    recorded_calls
                        .entry(s.key.clone())
                        .or_insert(CallRecord::Started);
                }
                "tool_done" | "unknown_outcome" => {
                    if let Ok(o) = serde_json::from_value::<RecordedOutcome>(s.data.clone())
                        && s.data.get("cut").and_then(Value::as_bool) != Some(true)
                    {
                        recorded_calls.insert(s.key.clone(), CallRecord::Done(o));
                    }
                }
                _ => {}
            }
        }
        TurnJournal {
            turn_id: turn_id.to_owned(),
            writer,
            commit_before_reads: true,
            pending: StdMutex::new(Vec::new()),
            max_step_bytes,
            seq: AtomicU64::new(steps.iter().map(|s| s.seq).max().unwrap_or(0)),
            models: AtomicU32::new(0),
            recorded_models,
            recorded_calls,
            resumed: !steps.is_empty(),
        }
    }

    /// The turn id.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// Whether this run continues one that died.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// The number of the model call about to be made (1, 2, …): the key of its record.
    pub fn next_model_call(&self) -> u32 {
        self.models.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Model calls numbered so far (the number of the latest).
    pub fn model_calls(&self) -> u32 {
        self.models.load(Ordering::SeqCst)
    }

    /// The response recorded for model call `n` before a crash.
    pub fn recorded_model(&self, n: u32) -> Option<CompletionResponse> {
        self.recorded_models.get(&n).cloned()
    }

    /// What the journal says of call `key` (`t<N>.<i>`).
    pub fn call(&self, key: &str) -> CallRecord {
        self.recorded_calls
            .get(key)
            .cloned()
            .unwrap_or(CallRecord::New)
    }

    /// The idempotency key of call `key` of `tool` with `args` in this turn: the same on
    /// every run of the turn.
    pub fn idempotency_key(&self, key: &str, tool: &str, args: &Value) -> String {
        digest(&[&self.turn_id, key, tool, &args.to_string()])
    }

    /// [`crash_point`] after a record: when the switch names `point`, the turn's records are
    /// made durable first.
    pub async fn crash_point(&self, point: &str) {
        if crash_armed(point) {
            let _ = self.writer.barrier(self.take()).await;
        }
        crash_point(point);
    }

    fn push(&self, op: JournalOp) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(op);
    }

    fn take(&self) -> Vec<JournalOp> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Hands the records made so far to the writer, without waiting for their commit: what
    /// the turn does before it waits on something slow — a model call, a tool, a person —
    /// so they are durable meanwhile. Records made between two hand-offs share one commit.
    pub fn hand_off(&self) {
        let ops = self.take();
        if !ops.is_empty() {
            self.writer.behind(ops);
        }
    }

    /// Writes one step: with `durable`, returns once it (and every record before it) is
    /// durable; otherwise keeps it for the turn's next hand-off ([`Self::hand_off`]).
    async fn append(
        &self,
        kind: &str,
        key: &str,
        mut data: Value,
        durable: bool,
    ) -> Result<(), StoreError> {
        let bytes = data.to_string().len();
        if bytes > self.max_step_bytes {
            data = json!({ "cut": true, "bytes": bytes });
        }
        let step = JournalStep {
            seq: self.seq.fetch_add(1, Ordering::SeqCst) + 1,
            at_ms: strata_engine::clock::now_ms(),
            kind: kind.to_owned(),
            key: key.to_owned(),
            data,
        };
        let op = JournalOp::Append {
            turn_id: self.turn_id.clone(),
            steps: vec![step],
        };
        if durable {
            let mut ops = self.take();
            ops.push(op);
            self.writer.barrier(ops).await
        } else {
            self.push(op);
            Ok(())
        }
    }

    /// Records model call `n`'s response (and a digest of what was asked, its purpose).
    pub async fn record_model(
        &self,
        n: u32,
        purpose: &str,
        req: &CompletionRequest,
        resp: &CompletionResponse,
    ) -> Result<(), StoreError> {
        self.append(
            "model",
            &format!("m{n}"),
            json!({
                "purpose": purpose,
                "request_digest": request_digest(req),
                "message": resp.message,
                "stop": resp.stop,
                "usage": resp.usage,
                "provider_state": resp.provider_state,
            }),
            // Lost in a crash, it is asked for again; before any call it asked for runs, the
            // call's durable start has made it durable too.
            false,
        )
        .await
    }

    /// Records that call `key` is about to run, durable — with every record before it, the
    /// model response that asked for the call among them — before the tool's code runs: no
    /// effect runs without its record (the invariant), and nothing the model asked for runs
    /// before its answer is kept (a crash after never asks for that answer again). With
    /// `journal.commit_before_reads: false`, a tool without side effects does not wait: its
    /// record goes with the turn's next hand-off.
    pub async fn record_started(
        &self,
        key: &str,
        tool: &str,
        args: &Value,
        side_effects: strata_engine::SideEffects,
        idempotency_key: &str,
    ) -> Result<(), StoreError> {
        self.append(
            "tool_started",
            key,
            json!({
                "tool": tool,
                "args": strata_engine::audit::redact(args),
                "side_effects": side_effects,
                "idempotency_key": idempotency_key,
            }),
            self.commit_before_reads || side_effects != strata_engine::SideEffects::None,
        )
        .await
    }

    /// Records call `key`'s outcome (`kind`: `tool_done` or `unknown_outcome`). With
    /// `durable` (a call with side effects, an unknown outcome) it is durable when this
    /// returns: a crash after never finds the call started without an outcome, so a finished
    /// effect is neither sent again nor reported unknown. Otherwise (a read) it goes with the
    /// turn's next hand-off: lost in a crash, the read runs again.
    pub async fn record_outcome(
        &self,
        kind: &str,
        key: &str,
        tool: &str,
        outcome: &RecordedOutcome,
        durable: bool,
    ) -> Result<(), StoreError> {
        let mut data = serde_json::to_value(outcome).unwrap_or(Value::Null);
        if let Some(o) = data.as_object_mut() {
            o.insert("tool".into(), Value::String(tool.to_owned()));
        }
        self.append(kind, key, data, durable).await
    }
}

/// A time in ms since the epoch as RFC 3339 (UTC).
fn at(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The first `n` characters of `s`, with `…` when cut.
fn preview(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().nth(n).is_some() {
        out.push('…');
    }
    out
}

/// A turn as `strata turns list` and `GET /api/turns` show it.
pub fn summary(t: &JournalTurn) -> Value {
    json!({
        "turn_id": t.turn_id,
        "agent": t.start.agent_id,
        "session": t.start.session_id,
        "channel": t.start.channel_id,
        "sender": t.start.sender.to_string(),
        "started": at(t.started_ms),
        "ended": t.ended_ms.map(at),
        "outcome": t.outcome.as_deref().unwrap_or("unfinished"),
        "resumed": t.resumed,
        "steps": t.steps,
        "owner": t.owner,
        "message": preview(&t.start.message.text, 120),
    })
}

/// One step as `strata turns show` and `GET /api/turns/{id}` show it: its time, kind, key,
/// status and cost (tokens for a model call, time for a tool call) and a short detail.
pub fn step_view(s: &JournalStep) -> Value {
    let d = &s.data;
    let cut = d.get("cut").and_then(Value::as_bool) == Some(true);
    let mut v = json!({
        "seq": s.seq,
        "at": at(s.at_ms),
        "kind": s.kind,
        "key": s.key,
    });
    let o = v.as_object_mut();
    let Some(o) = o else { return v };
    if cut {
        o.insert("status".into(), json!("cut"));
        o.insert(
            "detail".into(),
            json!(format!(
                "{} bytes: longer than journal.max_step_bytes; not kept",
                d["bytes"]
            )),
        );
        return v;
    }
    match s.kind.as_str() {
        "model" => {
            o.insert("status".into(), json!("ok"));
            o.insert("purpose".into(), d["purpose"].clone());
            o.insert("input_tokens".into(), d["usage"]["input_tokens"].clone());
            o.insert("output_tokens".into(), d["usage"]["output_tokens"].clone());
            let calls: Vec<&str> = d["message"]["tool_calls"]
                .as_array()
                .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
                .unwrap_or_default();
            let detail = if calls.is_empty() {
                preview(d["message"]["content"].as_str().unwrap_or_default(), 200)
            } else {
                format!("calls {}", calls.join(", "))
            };
            o.insert("detail".into(), json!(detail));
        }
        "tool_started" => {
            o.insert("status".into(), json!("started"));
            o.insert("tool".into(), d["tool"].clone());
            o.insert("side_effects".into(), d["side_effects"].clone());
            o.insert("idempotency_key".into(), d["idempotency_key"].clone());
            o.insert("detail".into(), json!(preview(&d["args"].to_string(), 200)));
        }
        _ => {
            o.insert("status".into(), d["status"].clone());
            o.insert("tool".into(), d["tool"].clone());
            o.insert("elapsed_ms".into(), d["elapsed_ms"].clone());
            o.insert(
                "detail".into(),
                json!(preview(d["content"].as_str().unwrap_or_default(), 200)),
            );
        }
    }
    v
}

/// A turn with its steps (`strata turns show`, `GET /api/turns/{id}`).
pub fn detail(t: &JournalTurn, steps: &[JournalStep]) -> Value {
    let mut v = json!({ "turn": summary(t) });
    v["steps"] = Value::Array(steps.iter().map(step_view).collect());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idempotency_key_names_the_turn_the_step_the_tool_and_the_arguments() {
        let store = Arc::new(Writer::new(recording(0)));
        let a = TurnJournal::new("turn-1", store.clone(), 1024, &[]);
        let b = TurnJournal::new("turn-1", store.clone(), 1024, &[]);
        let args = json!({"path": "a.txt", "content": "x"});
        let k = a.idempotency_key("t1.0", "write_file", &args);
        assert_eq!(k, b.idempotency_key("t1.0", "write_file", &args));
        assert_eq!(k.len(), 32);
        for other in [
            TurnJournal::new("turn-2", store.clone(), 1024, &[]).idempotency_key(
                "t1.0",
                "write_file",
                &args,
            ),
            a.idempotency_key("t1.1", "write_file", &args),
            a.idempotency_key("t1.0", "read_file", &args),
            a.idempotency_key("t1.0", "write_file", &json!({"path": "a.txt"})),
        ] {
            assert_ne!(k, other);
        }
        // Parts cannot run into each other.
        assert_ne!(digest(&["ab", "c"]), digest(&["a", "bc"]));
    }

    #[test]
    fn recorded_steps_come_back_as_responses_and_outcomes() {
        let resp = CompletionResponse {
            message: ChatMessage::text(strata_engine::llm::Role::Assistant, "hi"),
            stop: StopReason::EndTurn,
            usage: Usage::default(),
            provider_state: None,
        };
        let step = |seq, kind: &str, key: &str, data| JournalStep {
            seq,
            at_ms: 0,
            kind: kind.into(),
            key: key.into(),
            data,
        };
        let done = RecordedOutcome {
            status: "ok".into(),
            content: "42".into(),
            request_id: "r".into(),
            elapsed_ms: 1.0,
        };
        let steps = vec![
            step(
                1,
                "model",
                "m1",
                json!({"message": resp.message, "stop": "end_turn", "usage": resp.usage}),
            ),
            step(2, "tool_started", "t1.0", json!({})),
            step(
                3,
                "tool_done",
                "t1.0",
                serde_json::to_value(&done).unwrap_or_default(),
            ),
            step(4, "tool_started", "t1.1", json!({})),
            step(5, "model", "m2", json!({"cut": true, "bytes": 9})),
        ];
        let tj = TurnJournal::new("t", Arc::new(Writer::new(recording(0))), 1024, &steps);
        assert!(tj.resumed());
        assert_eq!(tj.recorded_model(1), Some(resp));
        // A cut response is asked for again.
        assert_eq!(tj.recorded_model(2), None);
        assert_eq!(tj.call("t1.0"), CallRecord::Done(done));
        assert_eq!(tj.call("t1.1"), CallRecord::Started);
        assert_eq!(tj.call("t2.0"), CallRecord::New);
        // New steps continue after the recorded ones.
        assert_eq!(tj.seq.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn a_turn_is_orphaned_when_its_process_is_gone_here_or_it_ran_on_another_host() {
        let me = owner_id();
        // This process: alive, but never an orphan of its own (`orphans` skips it by name).
        assert!(!owner_alive(&me));
        let host = me.rsplit_once('-').map_or("", |(h, _)| h).to_owned();
        // A live process on this host: the one that started this test.
        let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        assert!(owner_alive(&format!("{host}-{parent}")));
        // A pid no process has.
        assert!(!owner_alive(&format!("{host}-2147483646")));
        // Another host (a single node's earlier container), or nothing readable.
        assert!(!owner_alive("some-other-host-1"));
        assert!(!owner_alive("garbage"));
    }

    /// Records each `journal_write` it gets (one per commit); refuses any batch touching
    /// turn `bad`; holds a write while `gate` has no permit.
    struct Recording {
        batches: StdMutex<Vec<Vec<JournalOp>>>,
        gate: tokio::sync::Semaphore,
    }

    /// A recording store whose writes wait for `permits` permits (more are added by a test).
    fn recording(permits: usize) -> Arc<Recording> {
        Arc::new(Recording {
            batches: StdMutex::new(Vec::new()),
            gate: tokio::sync::Semaphore::new(permits),
        })
    }

    fn turn_of(op: &JournalOp) -> &str {
        match op {
            JournalOp::Begin(t) => &t.turn_id,
            JournalOp::Append { turn_id, .. } | JournalOp::End { turn_id, .. } => turn_id,
        }
    }

    #[async_trait]
    impl JournalStore for Recording {
        async fn journal_write(&self, ops: &[JournalOp]) -> Result<(), StoreError> {
            let permit = self.gate.acquire().await.map_err(StoreError::failed)?;
            permit.forget();
            if ops.iter().any(|o| turn_of(o) == "bad") {
                return Err(StoreError::failed("refused"));
            }
            self.batches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(ops.to_vec());
            Ok(())
        }
        async fn journal_begin(&self, _: &JournalTurn) -> Result<bool, StoreError> {
            unreachable!("the writer writes through journal_write")
        }
        async fn journal_reopen(&self, _: &str, _: &str) -> Result<(), StoreError> {
            Ok(())
        }
        async fn journal_append(&self, _: &str, _: &[JournalStep]) -> Result<(), StoreError> {
            unreachable!("the writer writes through journal_write")
        }
        async fn journal_end(&self, _: &str, _: i64, _: &str) -> Result<(), StoreError> {
            unreachable!("the writer writes through journal_write")
        }
        async fn journal_turn(
            &self,
            _: &str,
        ) -> Result<Option<(JournalTurn, Vec<JournalStep>)>, StoreError> {
            Ok(None)
        }
        async fn journal_turns(&self, _: TurnFilter) -> Result<Vec<JournalTurn>, StoreError> {
            Ok(Vec::new())
        }
        async fn journal_prune(&self, _: i64) -> Result<u64, StoreError> {
            Ok(0)
        }
    }

    fn end(turn: &str) -> JournalOp {
        JournalOp::End {
            turn_id: turn.into(),
            at_ms: 1,
            outcome: "ok".into(),
        }
    }

    #[tokio::test]
    async fn writes_behind_land_in_order_and_a_barrier_waits_for_all_before_it() {
        let store = recording(0);
        let w = Writer::new(store.clone());
        // The first write is held in its commit; what comes meanwhile queues up.
        w.behind(vec![end("a")]);
        tokio::task::yield_now().await;
        w.behind(vec![end("b"), end("c")]);
        w.behind(vec![end("d")]);
        let barrier = w.barrier(vec![end("e")]);
        tokio::pin!(barrier);
        // Not durable while the commits before it are not.
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), &mut barrier)
                .await
                .is_err()
        );
        store.gate.add_permits(2);
        barrier.await.expect("barrier");
        let batches = store
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let turns: Vec<Vec<&str>> = batches
            .iter()
            .map(|b| b.iter().map(turn_of).collect())
            .collect();
        // Everything queued during the first commit went in the second, in order.
        assert_eq!(turns, [vec!["a"], vec!["b", "c", "d", "e"]]);
    }

    #[tokio::test]
    async fn a_bad_write_fails_its_own_caller_and_not_the_writes_it_shared_a_commit_with() {
        let store = recording(0);
        let w = Writer::new(store.clone());
        w.behind(vec![end("first")]);
        tokio::task::yield_now().await;
        w.behind(vec![end("a")]);
        let bad = w.barrier(vec![end("bad")]);
        let good = w.barrier(vec![end("b")]);
        store.gate.add_permits(10);
        let (bad, good) = tokio::join!(bad, good);
        assert!(bad.is_err());
        good.expect("the other caller's write landed");
        let landed: Vec<String> = store
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flatten()
            .map(|o| turn_of(o).to_owned())
            .collect();
        assert_eq!(landed, ["first", "a", "b"]);
    }

    #[tokio::test]
    async fn a_tools_start_waits_for_its_commit_and_a_reads_only_when_set_to() {
        let store = recording(0);
        let writer = Arc::new(Writer::new(store.clone()));
        let mut tj = TurnJournal::new("t", writer, 1024, &[]);
        use strata_engine::SideEffects;
        async fn started(tj: &TurnJournal, key: &str, fx: SideEffects) -> bool {
            let args = json!({"path": "a.txt"});
            tokio::time::timeout(
                std::time::Duration::from_millis(50),
                tj.record_started(key, "read_file", &args, fx, "k"),
            )
            .await
            .is_ok()
        }
        // By default even a read waits for the commit (held here: it does not return).
        assert!(!started(&tj, "t1.0", SideEffects::None).await);
        tj.commit_before_reads = false;
        // Not for a read, then: its record waits for the turn's next hand-off …
        assert!(started(&tj, "t2.0", SideEffects::None).await);
        assert_eq!(tj.take().len(), 1);
        // … but an effect always waits.
        assert!(!started(&tj, "t3.0", SideEffects::Local).await);
    }
}
