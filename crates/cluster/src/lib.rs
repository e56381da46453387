//! Several `strata serve` instances as one: every top-level turn becomes a message on a
//! NATS JetStream work-queue stream, and whichever instance takes it runs it.
//!
//! * **Exactly one answer per inbound message.** Delivery is at least once (a turn taken by
//!   an instance that dies is handed to another after `ack_wait`); the turn's `turn_id` is
//!   the message's `Nats-Msg-Id` (JetStream drops a second publication inside its duplicate
//!   window) and is stored with the turn in PostgreSQL in the same statement, so a turn run
//!   to the end is answered from the store when its message comes again, never run twice.
//! * **Per-session order.** A session's turns share one subject; an instance runs a turn
//!   only when it is the oldest message left on that subject (a direct get of the subject's
//!   first message), otherwise it hands it back for a moment. Work-queue retention deletes
//!   a message when it is acknowledged, which happens after the turn is stored, so the next
//!   turn of the session starts after the previous one ended, on whichever instance.
//! * **Long turns** tell JetStream they are still in progress every third of `ack_wait`.
//! * **The answer** goes back on a core NATS subject derived from the turn id, which every
//!   waiter for that id (the instance that took the request, or another one a retrying
//!   client reached) listens on; a waiter also looks in the store every two seconds, so a
//!   lost answer costs a delay, not the answer.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer, stream};
use async_trait::async_trait;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use strata_engine::agent::{AgentError, Reply};
use strata_engine::config::ClusterConfig;
use strata_engine::session::SessionStore;
use strata_engine::turns::TurnRequest;
use strata_runtime::journal::TurnStart;
use strata_runtime::manager::AgentManager;
use strata_runtime::turns::TurnQueue;
use tokio::sync::{Semaphore, watch};

/// Setting up the cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The server did not answer or refused.
    #[error(
        "NATS at {target} is unreachable: {reason} — check that nats-server runs with \
         JetStream (-js), that `cluster.nats_url` names it, and its credentials"
    )]
    Unreachable {
        /// The servers, without passwords.
        target: String,
        /// Why.
        reason: String,
    },
    /// The stream or consumer could not be made.
    #[error("NATS JetStream: {0}")]
    JetStream(String),
    /// A setting is wrong.
    #[error("{0}")]
    Config(String),
}

/// How long a turn behind an earlier one of its session waits before it is offered again.
const ORDER_WAIT: Duration = Duration::from_millis(100);
/// How often a waiter looks in the store for an answer that did not arrive.
const POLL: Duration = Duration::from_secs(2);
/// Turns one instance runs at once.
const MAX_IN_FLIGHT: usize = 256;
/// The durable consumer every instance pulls from.
const CONSUMER: &str = "workers";

/// One turn on the wire: its id and what the turn journal keeps of its request (the same
/// fields, so the wire format is the journal's start).
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    turn_id: String,
    #[serde(flatten)]
    start: TurnStart,
}

impl Job {
    fn into_request(self) -> TurnRequest {
        self.start.into_request(&self.turn_id)
    }
}

/// How a turn ended, sent back to whoever waits for it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Outcome {
    Ok { reply: Box<Reply> },
    Denied { message: String },
    Budget { message: String },
    Failed { message: String },
}

impl Outcome {
    fn into_result(self) -> Result<Reply, AgentError> {
        match self {
            Outcome::Ok { reply } => Ok(*reply),
            Outcome::Denied { message } => Err(AgentError::Denied(message)),
            Outcome::Budget { message } => Err(AgentError::Budget(message)),
            Outcome::Failed { message } => Err(AgentError::Other(message)),
        }
    }
}

/// 32 hex digits of SHA-256: a subject token for any string.
fn digest(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// This instance's default name: the host's name and the process id.
pub fn default_instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let host = if host.is_empty() {
        "strata".into()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

/// `nats://user:password@host` → `nats://host` for messages.
fn without_credentials(url: &str) -> String {
    url.split(',')
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}{}", &u[..s + 3], &u[at + 1..]),
            (None, Some(at)) => u[at + 1..].to_owned(),
            _ => u.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Counters for `cluster status`.
#[derive(Default)]
struct Counters {
    in_flight: AtomicUsize,
    ran: AtomicU64,
    answered_from_store: AtomicU64,
    redelivered: AtomicU64,
}

/// What a member shares with the others besides NATS.
pub struct Shared {
    /// The store turns are kept in (answers are looked for there).
    pub store: Arc<dyn SessionStore>,
    /// The members' table (heartbeats, `cluster status`); `None`: not kept.
    pub members: Option<strata_postgres::Members>,
    /// This instance's control API, as the others show it.
    pub address: Option<String>,
    /// Every member's audit records (`/api/events`); `None`: not kept.
    pub events: Option<strata_postgres::ClusterEvents>,
}

/// How often a member writes its heartbeat; a member silent for three is shown as gone.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// This instance's membership: the NATS connection, the stream, and the store answers are
/// looked for in.
pub struct Cluster {
    client: async_nats::Client,
    js: jetstream::Context,
    stream: stream::Stream,
    name: String,
    instance: String,
    ack_wait: Duration,
    store: Arc<dyn SessionStore>,
    members: Option<strata_postgres::Members>,
    events: Option<strata_postgres::ClusterEvents>,
    address: Option<String>,
    started_at: i64,
    counters: Counters,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Cluster {
    /// Connects to `url` (already resolved from `vault:`/`env:`) with `cfg`'s credentials
    /// and TLS files (relative to `base`), and makes sure the stream and the workers'
    /// consumer exist.
    pub async fn connect(
        cfg: &ClusterConfig,
        url: &str,
        base: &Path,
        shared: Shared,
    ) -> Result<Arc<Cluster>, ClusterError> {
        let instance = cfg.instance_id.clone().unwrap_or_else(default_instance_id);
        let target = without_credentials(url);
        let mut opts = async_nats::ConnectOptions::new()
            .name(format!("strata {instance}"))
            .connection_timeout(Duration::from_secs(5));
        if let Some(f) = &cfg.creds_file {
            opts = opts.credentials_file(base.join(f)).await.map_err(|e| {
                ClusterError::Config(format!("`cluster.creds_file` {}: {e}", f.display()))
            })?;
        }
        if let Some(f) = &cfg.tls_ca_file {
            opts = opts.add_root_certificates(base.join(f)).require_tls(true);
        }
        if let (Some(c), Some(k)) = (&cfg.tls_cert_file, &cfg.tls_key_file) {
            opts = opts
                .add_client_certificate(base.join(c), base.join(k))
                .require_tls(true);
        }
        let addrs: Vec<async_nats::ServerAddr> = url
            .split(',')
            .map(|u| {
                u.trim().parse().map_err(|e| {
                    ClusterError::Config(format!(
                        "`cluster.nats_url` `{}` is not a NATS URL: {e}",
                        without_credentials(u)
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        let client = opts
            .connect(addrs)
            .await
            .map_err(|e| ClusterError::Unreachable {
                target: target.clone(),
                reason: e.to_string(),
            })?;
        let js = jetstream::new(client.clone());
        let name = cfg.stream.clone();
        let ack_wait = Duration::from_secs(cfg.ack_wait_secs.max(1));
        let stream = js
            .get_or_create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![format!("{name}.turn.>")],
                retention: stream::RetentionPolicy::WorkQueue,
                storage: stream::StorageType::File,
                allow_direct: true,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .map_err(|e| ClusterError::JetStream(format!("stream `{name}`: {e}")))?;
        stream
            .get_or_create_consumer(
                CONSUMER,
                consumer::pull::Config {
                    durable_name: Some(CONSUMER.into()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait,
                    max_ack_pending: 10_000,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| ClusterError::JetStream(format!("consumer `{CONSUMER}`: {e}")))
            .map(|_: consumer::PullConsumer| ())?;
        tracing::info!(%instance, nats = %target, stream = %name, "cluster member");
        Ok(Arc::new(Cluster {
            client,
            js,
            stream,
            name,
            instance,
            ack_wait,
            store: shared.store,
            members: shared.members,
            events: shared.events,
            address: shared.address,
            started_at: unix_now(),
            counters: Counters::default(),
        }))
    }

    /// This instance's name.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Turns running here now.
    pub fn in_flight(&self) -> usize {
        self.counters.in_flight.load(Ordering::Relaxed)
    }

    /// (turns run here, answered from the store, taken again after another instance).
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.counters.ran.load(Ordering::Relaxed),
            self.counters.answered_from_store.load(Ordering::Relaxed),
            self.counters.redelivered.load(Ordering::Relaxed),
        )
    }

    /// Messages waiting in the stream (not yet acknowledged).
    pub async fn depth(&self) -> Result<u64, ClusterError> {
        let mut s = self.stream.clone();
        s.info()
            .await
            .map(|i| i.state.messages)
            .map_err(|e| ClusterError::JetStream(e.to_string()))
    }

    fn turn_subject(&self, agent: &str, session: &str) -> String {
        format!(
            "{}.turn.{}",
            self.name,
            digest(&format!("{agent}\0{session}"))
        )
    }

    fn reply_subject(&self, turn_id: &str) -> String {
        format!("{}.reply.{}", self.name, digest(turn_id))
    }

    /// Starts taking turns for `manager`, and writing this member's heartbeat, until the
    /// returned handle is stopped.
    pub fn start(self: &Arc<Self>, manager: Arc<AgentManager>) -> Worker {
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(self.clone().work(manager, rx.clone()));
        let beat = tokio::spawn(self.clone().heartbeat(rx));
        Worker { stop, task, beat }
    }

    /// Shares `invoker`'s behaviour monitor with the other members: what it sees here is
    /// published on `<stream>.monitor` (core NATS, at most once — a lost observation only
    /// weakens a heuristic), and what the others see moves its state here, so a pattern
    /// spread over members (a burst, a spike, a new tool) is seen as on one instance. Alerts
    /// are raised by the member whose call completes the pattern.
    pub async fn share_monitor(
        self: &Arc<Self>,
        invoker: Arc<strata_runtime::Invoker>,
    ) -> Result<tokio::task::JoinHandle<()>, ClusterError> {
        use strata_runtime::monitor::Observation;
        #[derive(Serialize, Deserialize)]
        struct Seen {
            from: String,
            #[serde(flatten)]
            observation: Observation,
        }
        let subject = format!("{}.monitor", self.name);
        let mut heard = self
            .client
            .subscribe(subject.clone())
            .await
            .map_err(|e| ClusterError::JetStream(format!("subscribing to {subject}: {e}")))?;
        // A SUB and another connection's PUB are not ordered by the server: wait for its PONG so
        // the subscription is in place before this returns.
        self.client
            .flush()
            .await
            .map_err(|e| ClusterError::JetStream(format!("subscribing to {subject}: {e}")))?;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Observation>(4096);
        invoker.monitor().set_tap(Box::new(move |o| {
            let _ = tx.try_send(o);
        }));
        let (client, me) = (self.client.clone(), self.instance.clone());
        let publisher = tokio::spawn(async move {
            while let Some(observation) = rx.recv().await {
                let seen = Seen {
                    from: me.clone(),
                    observation,
                };
                if let Ok(body) = serde_json::to_vec(&seen) {
                    let _ = client.publish(subject.clone(), body.into()).await;
                }
            }
        });
        let me = self.instance.clone();
        Ok(tokio::spawn(async move {
            while let Some(m) = heard.next().await {
                match serde_json::from_slice::<Seen>(&m.payload) {
                    Ok(seen) if seen.from != me => {
                        invoker.monitor().observed_elsewhere(&seen.observation)
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "a monitor observation not understood"),
                }
            }
            publisher.abort();
        }))
    }

    /// This member's row as it is now.
    async fn row(&self) -> strata_postgres::MemberRow {
        let c = &self.counters;
        strata_postgres::MemberRow {
            id: self.instance.clone(),
            address: self.address.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            started_at: self.started_at,
            heartbeat_at: unix_now(),
            in_flight: c.in_flight.load(Ordering::Relaxed) as i64,
            turns_run: c.ran.load(Ordering::Relaxed) as i64,
            answered_from_store: c.answered_from_store.load(Ordering::Relaxed) as i64,
            redelivered: c.redelivered.load(Ordering::Relaxed) as i64,
            stream_depth: self.depth().await.ok().map(|d| d as i64),
            leases: Vec::new(),
        }
    }

    async fn heartbeat(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let Some(members) = self.members.clone() else {
            return;
        };
        loop {
            let row = self.row().await;
            if let Err(e) = members.beat(&row).await {
                tracing::warn!(error = %e, "cluster: heartbeat not written");
            }
            tokio::select! {
                _ = stop.changed() => break,
                _ = tokio::time::sleep(HEARTBEAT) => {}
            }
        }
        if let Err(e) = members.remove(&self.instance).await {
            tracing::warn!(error = %e, "cluster: leaving, the member's row stays until it is stale");
        }
    }

    async fn work(self: Arc<Self>, manager: Arc<AgentManager>, mut stop: watch::Receiver<bool>) {
        let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        'outer: loop {
            let consumer: consumer::PullConsumer = match self.stream.get_consumer(CONSUMER).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "cluster: no consumer; retrying");
                    tokio::select! {
                        _ = stop.changed() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            // A few at a time, so turns spread over the instances that have room.
            let mut msgs = match consumer.stream().max_messages_per_batch(8).messages().await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "cluster: pulling failed; retrying");
                    tokio::select! {
                        _ = stop.changed() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            loop {
                let permit = tokio::select! {
                    _ = stop.changed() => break 'outer,
                    p = permits.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break 'outer,
                    },
                };
                let next = tokio::select! {
                    _ = stop.changed() => break 'outer,
                    m = msgs.next() => m,
                };
                match next {
                    Some(Ok(m)) => {
                        let (me, manager) = (self.clone(), manager.clone());
                        tokio::spawn(async move {
                            me.handle(m, &manager).await;
                            drop(permit);
                        });
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "cluster: pulling failed; pulling again");
                        continue 'outer;
                    }
                    None => continue 'outer,
                }
            }
        }
        // Stopping: turns already running finish (their answers are stored and sent);
        // nothing new is taken, and what was pulled but not started is handed back.
        let _ = tokio::time::timeout(
            Duration::from_secs(60),
            permits.acquire_many(MAX_IN_FLIGHT as u32),
        )
        .await;
        tracing::info!(instance = %self.instance, "cluster: stopped taking turns");
    }

    async fn handle(&self, m: jetstream::Message, manager: &AgentManager) {
        let (seq, delivered) = match m.info() {
            Ok(i) => (i.stream_sequence, i.delivered),
            Err(e) => {
                tracing::warn!(error = %e, "cluster: a message without JetStream metadata");
                return;
            }
        };
        let job: Job = match serde_json::from_slice(&m.payload) {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(seq, error = %e, "cluster: an unreadable turn is dropped");
                let _ = m.ack_with(AckKind::Term).await;
                return;
            }
        };
        // An earlier turn of the session is still waiting or running: this one waits.
        match self
            .stream
            .direct_get_next_for_subject(m.subject.to_string(), None)
            .await
        {
            Ok(head) if head.sequence < seq => {
                let _ = m.ack_with(AckKind::Nak(Some(ORDER_WAIT))).await;
                return;
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(seq, error = %e, "cluster: order check failed; running"),
        }
        if delivered > 1 {
            self.counters.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        let m = Arc::new(m);
        let alive = {
            let (m, every) = (m.clone(), self.ack_wait / 3);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    if let Err(e) = m.ack_with(AckKind::Progress).await {
                        tracing::warn!(error = %e, "cluster: in-progress signal failed");
                    }
                }
            })
        };
        let turn_id = job.turn_id.clone();
        let known = delivered > 1 && matches!(self.store.stored_turn(&turn_id).await, Ok(Some(_)));
        let result = manager.run_here(job.into_request()).await;
        alive.abort();
        self.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
        if known {
            self.counters
                .answered_from_store
                .fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.ran.fetch_add(1, Ordering::Relaxed);
        }
        let outcome = match result {
            Ok(reply) => Outcome::Ok {
                reply: Box::new(reply),
            },
            Err(AgentError::Denied(message)) => Outcome::Denied { message },
            Err(AgentError::Budget(message)) => Outcome::Budget { message },
            Err(e) => Outcome::Failed {
                message: e.to_string(),
            },
        };
        match serde_json::to_vec(&outcome) {
            Ok(body) => {
                if let Err(e) = self
                    .client
                    .publish(self.reply_subject(&turn_id), body.into())
                    .await
                {
                    tracing::warn!(turn = %turn_id, error = %e, "cluster: answer not sent; the waiter finds it in the store");
                }
            }
            Err(e) => tracing::error!(turn = %turn_id, error = %e, "cluster: answer not encodable"),
        }
        // Acknowledged last: until then, a death here hands the turn to another instance,
        // which finds it stored (or runs it, if it was not).
        for attempt in 0..3 {
            match m.double_ack().await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(turn = %turn_id, attempt, error = %e, "cluster: acknowledgement failed");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

impl Cluster {
    /// Publishes a turn on `subject` under the message id `id` and waits for the stream's
    /// acknowledgement.
    async fn queue(
        &self,
        subject: &str,
        id: &str,
        body: bytes::Bytes,
    ) -> Result<jetstream::publish::PublishAck, String> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        self.js
            .publish_with_headers(subject.to_owned(), headers, body)
            .await
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())
    }

    /// Whether the message at `sequence` has left the stream (acknowledged: its turn ended).
    async fn ended(&self, sequence: u64) -> bool {
        matches!(
            self.stream.direct_get(sequence).await,
            Err(e) if matches!(e.kind(), stream::DirectGetErrorKind::NotFound)
        )
    }
}

#[async_trait]
impl TurnQueue for Cluster {
    async fn submit(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        let other = |what: &str, e: &dyn std::fmt::Display| {
            AgentError::Other(format!("cluster: {what}: {e}"))
        };
        let turn_id = req
            .turn_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let subject = self.turn_subject(&req.agent_id, &req.session_id);
        let job = Job {
            turn_id: turn_id.clone(),
            start: TurnStart::of(&req),
        };
        let body = serde_json::to_vec(&job).map_err(|e| other("encoding the turn", &e))?;
        // Listening before publishing: the answer cannot come before the subscription.
        let mut answers = self
            .client
            .subscribe(self.reply_subject(&turn_id))
            .await
            .map_err(|e| other("listening for the answer", &e))?;
        let body = bytes::Bytes::from(body);
        let mut ack = self
            .queue(&subject, &turn_id, body.clone())
            .await
            .map_err(|e| other("queueing the turn", &e))?;
        if ack.duplicate {
            // An earlier try of this request (a client sending its request id again). Stored:
            // that is the answer. Still queued or running: wait for it below. Ended without
            // a stored turn (it failed or was refused there): the client is asking again, so
            // it runs again — under a message id of its own, since JetStream would drop the
            // turn id's for its whole duplicate window; the turn id stored with the turn
            // still keeps it to one run that is kept.
            if let Some(done) = self
                .store
                .stored_turn(&turn_id)
                .await
                .map_err(|e| other("looking for the answer", &e))?
            {
                return Ok(Reply::from_stored(done));
            }
            if self.ended(ack.sequence).await
                && self
                    .store
                    .stored_turn(&turn_id)
                    .await
                    .map_err(|e| other("looking for the answer", &e))?
                    .is_none()
            {
                let again = format!("{turn_id}.again.{}", uuid::Uuid::new_v4().simple());
                tracing::info!(turn = %turn_id, "cluster: an earlier try of this turn ended unanswered; it runs again");
                ack = self
                    .queue(&subject, &again, body)
                    .await
                    .map_err(|e| other("queueing the turn", &e))?;
            }
        }
        let mut gone = 0;
        loop {
            tokio::select! {
                m = answers.next() => {
                    let Some(m) = m else {
                        return Err(AgentError::Other("cluster: the connection to NATS closed while waiting for the answer".into()));
                    };
                    let outcome: Outcome = serde_json::from_slice(&m.payload)
                        .map_err(|e| other("reading the answer", &e))?;
                    return outcome.into_result();
                }
                _ = tokio::time::sleep(POLL) => {
                    if let Ok(Some(done)) = self.store.stored_turn(&turn_id).await {
                        return Ok(Reply::from_stored(done));
                    }
                    // Acknowledged (gone from the stream) without a stored turn: it was
                    // refused or failed there, and its answer did not reach us.
                    if self.ended(ack.sequence).await {
                        gone += 1;
                        if gone >= 2 {
                            return Err(AgentError::Other(format!(
                                "cluster: turn {turn_id} ended on another instance without an answer reaching this one (refused or failed there: see its log)"
                            )));
                        }
                    } else {
                        gone = 0;
                    }
                }
            }
        }
    }
}

/// The running worker of [`Cluster::start`].
pub struct Worker {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    beat: tokio::task::JoinHandle<()>,
}

impl Worker {
    /// Stops taking turns and waits (at most a minute) for the running ones to end; then
    /// the member leaves the members' table.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let _ = self.beat.await;
    }
}

#[async_trait]
impl strata_runtime::turns::ClusterView for Cluster {
    async fn status(&self) -> Result<serde_json::Value, String> {
        let now = unix_now();
        // The others as of their last heartbeat, this one as it is now.
        let mut own = self.row().await;
        let mut rows = match &self.members {
            Some(m) => m.list().await.map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        // Leases are the database's to say, for this one too.
        if let Some(stored) = rows.iter().find(|r| r.id == own.id) {
            own.leases = stored.leases.clone();
        }
        rows.retain(|r| r.id != own.id);
        rows.push(own);
        rows.sort_by(|a, b| a.id.cmp(&b.id));
        let instances: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["alive"] =
                    serde_json::Value::Bool(now - r.heartbeat_at <= 3 * HEARTBEAT.as_secs() as i64);
                v
            })
            .collect();
        Ok(serde_json::json!({
            "instance": self.instance,
            "stream": self.name,
            "stream_depth": self.depth().await.ok(),
            "redelivered": rows.iter().map(|r| r.redelivered).sum::<i64>(),
            "instances": instances,
        }))
    }

    async fn events(&self, limit: usize) -> Option<Result<Vec<serde_json::Value>, String>> {
        let events = self.events.as_ref()?;
        Some(
            events
                .tail(limit as i64)
                .await
                .map(|(records, _)| records)
                .map_err(|e| e.to_string()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_tokens_and_credentials_stay_out_of_messages() {
        let d = digest("agent\0a session with spaces.and.dots");
        assert_eq!(d.len(), 32);
        assert!(d.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            without_credentials("nats://app:secret@h1:4222,nats://app:secret@h2:4222"),
            "nats://h1:4222,nats://h2:4222"
        );
        assert_eq!(without_credentials("h1:4222"), "h1:4222");
        let id = default_instance_id();
        assert!(id.ends_with(&std::process::id().to_string()), "{id}");
    }
}
