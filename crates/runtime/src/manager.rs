//! [`AgentManager`]: runs turns — one at a time per (agent, session), sessions in parallel —
//! keeps a bounded set of live sessions, stores every turn, and compacts long sessions.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use async_trait::async_trait;

use crate::env::EnvExt;
use crate::turns::TurnQueue;
use strata_engine::Env;
use strata_engine::agent::{Agent, AgentError, Reply, TurnContext};
use strata_engine::config::SessionsConfig;
use strata_engine::session::{SessionKey, SessionState, SessionStore, ToolLogEntry, turn_boundary};
use strata_engine::turns::{AgentDirectory, TurnRequest};

#[async_trait]
impl AgentDirectory for AgentManager {
    fn agent_ids(&self) -> Vec<String> {
        AgentManager::agent_ids(self)
    }

    async fn run_turn(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        self.turn(req).await
    }

    async fn deliver(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        // Nobody waits on it, so no worker can be left waiting for a worker: any depth
        // goes through the queue.
        match self.queue.get() {
            Some(q) => q.submit(req).await,
            None => self.run_here(req).await,
        }
    }

    async fn reset(&self, agent_id: &str, session_id: &str) -> Result<(), AgentError> {
        AgentManager::reset(self, agent_id, session_id).await
    }

    async fn recent_sessions(&self, agent_id: &str) -> Vec<String> {
        match self.store.list_sessions(agent_id, 200).await {
            Ok(list) => list
                .into_iter()
                .filter(|s| s.agent_id == agent_id)
                .map(|s| s.session_id)
                .collect(),
            Err(e) => {
                tracing::debug!(agent = %agent_id, error = %e, "sessions not listed");
                Vec::new()
            }
        }
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<SessionState>>>;

struct Live {
    slots: HashMap<SessionKey, (Slot, u64)>,
    tick: u64,
}

/// Runs turns: one at a time per (agent, session), different sessions in parallel; keeps at
/// most `sessions.max_live` sessions in memory (least recently used leave first, they stay on
/// disk); compacts long sessions into a summary.
pub struct AgentManager {
    policy: strata_engine::access::AccessPolicy,
    agents: HashMap<String, Arc<dyn Agent>>,
    store: Arc<dyn SessionStore>,
    env: Arc<Env>,
    cfg: SessionsConfig,
    live: StdMutex<Live>,
    /// Where inbound content-safety alerts go (the audit log, the log, the alert sinks).
    alerts: Option<Arc<crate::invoker::Invoker>>,
    /// The cluster's queue, when this instance shares the work with others.
    queue: std::sync::OnceLock<Arc<dyn TurnQueue>>,
}

impl AgentManager {
    /// A manager over `agents`, keeping sessions in `store`.
    pub fn new(agents: Vec<Arc<dyn Agent>>, store: Arc<dyn SessionStore>, env: Arc<Env>) -> Self {
        let cfg = env.config.sessions.clone();
        AgentManager {
            policy: strata_engine::access::AccessPolicy::from_config(&env.config),
            agents: agents.into_iter().map(|a| (a.id().to_owned(), a)).collect(),
            store,
            env,
            cfg,
            live: StdMutex::new(Live {
                slots: HashMap::new(),
                tick: 0,
            }),
            alerts: None,
            queue: std::sync::OnceLock::new(),
        }
    }

    /// Hands top-level turns to `queue` from now on (once; a second call is ignored):
    /// [`turn`](Self::turn) submits them there and whichever instance takes one calls
    /// [`run_here`](Self::run_here).
    pub fn set_queue(&self, queue: Arc<dyn TurnQueue>) {
        let _ = self.queue.set(queue);
    }

    /// Sends inbound content-safety alerts through `invoker` (audit log, log, alert sinks).
    pub fn with_alerts(mut self, invoker: Arc<crate::invoker::Invoker>) -> Self {
        self.alerts = Some(invoker);
        self
    }

    /// Scores a message from a sender who is not an owner (nor one of our agents) under
    /// `security.content_safety.inbound` for its connector: alerts at the alert threshold;
    /// under `wrap` the agent reads it inside an envelope naming the sender and the score,
    /// under `block` a message at the block threshold is refused.
    fn screen(&self, mut req: TurnRequest) -> Result<TurnRequest, AgentError> {
        use strata_engine::access::Tier;
        use strata_engine::config::{Access, SafetyPolicy};
        let tier = self.policy.tier(&req.sender);
        if matches!(tier, Tier::Person(Access::Owner) | Tier::Agent(_)) {
            return Ok(req);
        }
        let cfg = &self.env.config.security.content_safety;
        let connector = req.channel_id.split(':').next().unwrap_or_default();
        let policy = cfg.inbound.policy_for(connector);
        let a = strata_safety::analyse(&req.message.text);
        let alert = a.score >= cfg.alert_threshold;
        let blocked = policy == SafetyPolicy::Block && a.score >= cfg.block_threshold;
        let rules = strata_engine::safety::rule_names(&a.rules);
        if alert {
            let message = format!(
                "message from {} ({tier}) to `{}` via {connector} scored {}/10 for prompt injection ({rules}){}",
                req.sender,
                req.agent_id,
                a.score,
                if blocked { "; refused" } else { "" }
            );
            match &self.alerts {
                Some(inv) => inv.alert(strata_engine::audit::Alert {
                    kind: "inbound_safety",
                    rule: rules.clone(),
                    message,
                    agent_id: Some(req.agent_id.clone()),
                    tool: None,
                    request_id: None,
                    score: Some(a.score),
                }),
                None => tracing::warn!(agent = %req.agent_id, "{message}"),
            }
        }
        if blocked {
            return Err(AgentError::Denied(format!(
                "your message was not passed on: it reads like instructions to the agent                  (injection score {} ≥ {}; {rules})",
                a.score, cfg.block_threshold
            )));
        }
        if matches!(
            policy,
            SafetyPolicy::Wrap | SafetyPolicy::Block | SafetyPolicy::Redact
        ) {
            req.message.text = strata_engine::safety::wrap_message(
                &req.sender.to_string(),
                &tier.to_string(),
                a.score,
                &rules,
                &req.message.text,
            );
        }
        Ok(req)
    }

    /// Overrides the session settings (tests, embedders).
    pub fn with_sessions_config(mut self, cfg: SessionsConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// Agent ids, sorted.
    pub fn agent_ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self.agents.keys().cloned().collect();
        v.sort();
        v
    }

    /// The agent with this id.
    pub fn agent(&self, id: &str) -> Option<&Arc<dyn Agent>> {
        self.agents.get(id)
    }

    /// Sessions held in memory now.
    pub fn live_sessions(&self) -> usize {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .slots
            .len()
    }

    fn slot(&self, key: &SessionKey) -> Slot {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.tick += 1;
        let tick = live.tick;
        let slot = match live.slots.get_mut(key) {
            Some((slot, t)) => {
                *t = tick;
                slot.clone()
            }
            None => {
                let slot: Slot = Arc::new(tokio::sync::Mutex::new(None));
                live.slots.insert(key.clone(), (slot.clone(), tick));
                slot
            }
        };
        let cap = self.cfg.max_live.max(1);
        if live.slots.len() > cap {
            // Evict idle slots (nobody holds them) from the oldest, down to the cap.
            let mut idle: Vec<(SessionKey, u64)> = live
                .slots
                .iter()
                .filter(|(_, (s, _))| Arc::strong_count(s) == 1)
                .map(|(k, (_, t))| (k.clone(), *t))
                .collect();
            idle.sort_by_key(|(_, t)| *t);
            let excess = live.slots.len() - cap;
            for (k, _) in idle.into_iter().take(excess) {
                live.slots.remove(&k);
            }
        }
        slot
    }

    /// Runs one turn and stores it: through the cluster's queue when there is one (a turn
    /// asked for by another turn runs where its caller runs), here otherwise.
    pub async fn turn(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        match self.queue.get() {
            Some(q) if req.depth == 0 => {
                let id = req.turn_id.clone();
                let r = q.submit(req).await;
                // Answered from the store: the turn was done, though the member that ran it
                // may have died before ending its journal (its redelivery would end it only
                // after the queue's ack wait). End it now, as `run_here` does.
                if let (Ok(reply), Some(id), Some(j)) = (&r, &id, self.env.journal())
                    && reply.replayed
                {
                    j.close_if_open(id).await;
                }
                r
            }
            _ => self.run_here(req).await,
        }
    }

    /// Runs one turn in this process and stores it. A turn whose `turn_id` is stored already
    /// is not run again: its stored answer is returned.
    pub async fn run_here(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        // An agent id nobody configured is the caller's text, not a label value.
        let label = if self.agents.contains_key(&req.agent_id) {
            req.agent_id.clone()
        } else {
            "_unknown".to_owned()
        };
        let r = self.run_turn(req).await;
        let outcome = match &r {
            Ok(_) => "ok",
            Err(AgentError::Denied(_)) => "denied",
            Err(AgentError::Budget(_)) => "budget",
            Err(_) => "error",
        };
        strata_engine::meters::turn(&label, outcome);
        r
    }

    async fn run_turn(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        let agent = self.agents.get(&req.agent_id).cloned().ok_or_else(|| {
            AgentError::Other(format!(
                "unknown agent `{}`; agents: {}",
                req.agent_id,
                self.agent_ids().join(", ")
            ))
        })?;
        if let Err(e) = self.policy.may_talk(&req.sender, &req.agent_id) {
            if let Some(inv) = &self.alerts {
                inv.refusal(
                    "layer1",
                    &req.sender.to_string(),
                    &req.channel_id,
                    &e.to_string(),
                );
            }
            return Err(AgentError::Denied(e.to_string()));
        }
        // The turn journal (`journal.enabled`): the request as it came (a resumed turn is
        // screened again), under an id every run of the turn shares.
        let journal = self.env.journal();
        let mut req = req;
        // An id minted here names no stored turn and no journal yet: nothing to look up.
        let minted = journal.is_some() && req.turn_id.is_none();
        let start = journal.as_ref().map(|_| {
            req.turn_id
                .get_or_insert_with(|| uuid::Uuid::new_v4().to_string());
            crate::journal::TurnStart::of(&req)
        });
        let req = self.screen(req)?;
        let key = SessionKey::new(&req.agent_id, &req.session_id);
        let started = std::time::Instant::now();
        let slot = self.slot(&key);
        let mut guard = slot.lock().await;
        // Another instance sharing the store may have written this session since it was
        // loaded here: then it is read again.
        if let Some(v) = guard.as_ref().and_then(|s| s.version) {
            let now = self
                .store
                .version(&key)
                .await
                .map_err(|e| AgentError::Other(e.to_string()))?;
            if now != Some(v) {
                *guard = None;
            }
        }
        if guard.is_none() {
            let loaded = self
                .store
                .load(&key)
                .await
                .map_err(|e| AgentError::Other(e.to_string()))?;
            let state = match loaded {
                Some(s) => s,
                // Not stored yet: a shared store counts its writes from zero (asking would
                // not help — another instance may create it just after the answer, and
                // the next turn's version check reloads it then).
                None => SessionState {
                    version: self.store.versioned().then_some(0),
                    ..SessionState::default()
                },
            };
            *guard = Some(state);
        }
        if let Some(id) = req.turn_id.as_ref().filter(|_| !minted)
            && let Some(done) = self
                .store
                .stored_turn(id)
                .await
                .map_err(|e| AgentError::Other(e.to_string()))?
        {
            tracing::info!(agent = %key.agent_id, session = %key.session_id, turn = %id, "turn already done: its stored answer is returned");
            // Stored, but the process died before its journal was ended: end it now.
            if let Some(j) = &journal {
                j.close_if_open(id).await;
            }
            return Ok(Reply::from_stored(done));
        }
        // Durable before the turn does anything: from here a crash resumes it.
        let journaled = match (&journal, &start, &req.turn_id) {
            (Some(j), Some(start), Some(id)) => Some(j.begin(id, start, minted).await.map_err(|e| {
                AgentError::Other(format!(
                    "the turn journal is unavailable ({e}); the message was not taken — send it again when the store is back"
                ))
            })?),
            _ => None,
        };
        let state = guard.get_or_insert_with(SessionState::default);
        let mut ctx = TurnContext::new(
            &req.agent_id,
            &req.session_id,
            &req.channel_id,
            req.sender.clone(),
            self.env.clone(),
        );
        ctx.channel_kind = req.channel_kind.clone();
        ctx.stream = req.stream.clone();
        ctx.scopes = req.scopes.clone();
        ctx.summary = state.summary.clone();
        ctx.history = state.messages.clone();
        ctx.provider_state = state.provider_state.clone();
        ctx.depth = req.depth;
        // Taint: the asking turn's (an inter-agent call shares it), and what earlier turns of
        // this session took in — their content is still in the conversation the model reads.
        if let Some(t) = req.taint {
            ctx.taint = t;
        }
        for s in &state.taint {
            ctx.taint.mark(s.as_history());
        }
        if let Some(id) = &req.turn_id {
            ctx.turn_id = id.clone();
        }
        let taint = ctx.taint.clone();
        let turn_id = ctx.turn_id.clone();
        // Every log line of the turn (its tool calls' too) carries these fields.
        let span = tracing::info_span!(
            "turn",
            turn_id = %ctx.turn_id,
            agent = %key.agent_id,
            session = %key.session_id
        );
        let reply =
            tracing::Instrument::instrument(agent.handle(ctx, req.message), span.clone()).await;
        let _entered = span.enter();
        // Kept even when the turn failed: the content came in all the same.
        let before = state.taint.len();
        for s in taint.sources() {
            if state.taint.len() < strata_engine::taint::MAX_SOURCES && !state.taint.contains(&s) {
                state.taint.push(s);
            }
        }
        let tainted_now = state.taint.len() > before;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                // The session may not exist in the store yet; where it does, keep the mark.
                if tainted_now && let Err(se) = self.store.set_taint(&key, &state.taint).await {
                    tracing::error!(agent = %key.agent_id, session = %key.session_id, error = %se, "session taint not stored");
                }
                if let (Some(j), Some(tj)) = (&journal, &journaled) {
                    let outcome = match &e {
                        AgentError::Denied(_) => "denied",
                        AgentError::Budget(_) => "budget",
                        _ => "error",
                    };
                    j.end(tj.turn_id(), outcome);
                }
                return Err(e);
            }
        };
        tracing::info!(
            rounds = reply.rounds,
            tools = reply.tool_runs.len(),
            input_tokens = reply.usage.input_tokens,
            output_tokens = reply.usage.output_tokens,
            ms = started.elapsed().as_millis() as u64,
            "turn done"
        );

        let tool_log: Vec<ToolLogEntry> = reply
            .tool_runs
            .iter()
            .map(|r| ToolLogEntry {
                key: key.clone(),
                tool: r.tool.clone(),
                status: r.status.clone(),
                elapsed_ms: r.elapsed_ms,
                request_id: r.request_id.clone(),
            })
            .collect();
        // The turn's last records go ahead of its answer: on SQLite they share the answer's
        // commit or land before it (one writer, in order), so a stored turn's journal has
        // every step.
        if let Some(tj) = &journaled {
            tj.hand_off();
        }
        let stored = match &req.turn_id {
            Some(id) => {
                self.store
                    .record_turn_once(
                        &key,
                        id,
                        &reply.transcript,
                        reply.provider_state.as_ref(),
                        &tool_log,
                    )
                    .await
            }
            None => self
                .store
                .record_turn(
                    &key,
                    &reply.transcript,
                    reply.provider_state.as_ref(),
                    &tool_log,
                )
                .await
                .map(|()| true),
        };
        if let (Some(j), Some(tj)) = (&journal, &journaled)
            && stored.is_ok()
        {
            crate::journal::crash_point("turn_stored");
            j.end(tj.turn_id(), "ok");
            if crate::journal::crash_armed("turn_ended") {
                let _ = j.settle().await;
            }
            crate::journal::crash_point("turn_ended");
        }
        if let Ok(false) = stored {
            // Another instance stored this turn meanwhile: the session moved on elsewhere.
            tracing::warn!(agent = %key.agent_id, session = %key.session_id, "turn stored by another instance first; this run's answer is not kept");
            *guard = None;
            return Ok(reply);
        }
        if let Err(e) = stored {
            // The answer exists; losing its storage must not lose the answer.
            tracing::error!(agent = %key.agent_id, session = %key.session_id, error = %e, "turn not stored");
        } else {
            // Our own write; another instance's in between makes the next check differ.
            state.version = state.version.map(|v| v + 1);
        }
        // After the turn is stored, so the session exists to carry the mark.
        if tainted_now && let Err(e) = self.store.set_taint(&key, &state.taint).await {
            tracing::error!(agent = %key.agent_id, session = %key.session_id, error = %e, "session taint not stored");
        }
        state.messages.extend(reply.transcript.iter().cloned());
        state.turns_since_summary += 1;
        state.provider_state = reply.provider_state.clone();
        if self.cfg.summarize_after > 0 && state.turns_since_summary >= self.cfg.summarize_after {
            let who = strata_engine::agent::Compaction {
                session_id: &key.session_id,
                sender: &req.sender,
                turn_id: &turn_id,
                env: &self.env,
            };
            self.compact(&agent, &key, state, &who).await;
        }
        Ok(reply)
    }

    async fn compact(
        &self,
        agent: &Arc<dyn Agent>,
        key: &SessionKey,
        state: &mut SessionState,
        who: &strata_engine::agent::Compaction<'_>,
    ) {
        let cut = turn_boundary(&state.messages, self.cfg.keep_turns as usize);
        if cut == 0 {
            return;
        }
        match agent
            .summarize(who, state.summary.as_deref(), &state.messages[..cut])
            .await
        {
            Ok(Some(summary)) => {
                let keep = state.messages.len() - cut;
                match self.store.compact(key, &summary, keep).await {
                    Ok(()) => {
                        state.version = state.version.map(|v| v + 1);
                        state.messages.drain(..cut);
                        state.summary = Some(summary);
                        state.turns_since_summary = 0;
                        tracing::info!(agent = %key.agent_id, session = %key.session_id, kept = keep, "session summarised");
                    }
                    Err(e) => tracing::warn!(error = %e, "summary not stored"),
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(agent = %key.agent_id, error = %e, "summarising failed; session kept as is")
            }
        }
    }

    /// Runs every journaled turn that no live process owns and that has no end (its process
    /// died) to its end, each in its own task, continuing from its last recorded step
    /// ([`crate::journal`]). Returns how many were started. `serve` calls it at start.
    pub async fn resume_unfinished(self: &Arc<Self>) -> Result<usize, AgentError> {
        let Some(journal) = self.env.journal() else {
            return Ok(0);
        };
        let orphans = journal
            .orphans()
            .await
            .map_err(|e| AgentError::Other(format!("unfinished turns not read: {e}")))?;
        let n = orphans.len();
        for t in orphans {
            let manager = self.clone();
            let req = t.start.into_request(&t.turn_id);
            tracing::info!(turn = %t.turn_id, agent = %req.agent_id, session = %req.session_id, "resuming a turn its process did not finish");
            tokio::spawn(async move {
                let id = t.turn_id;
                let channel = req.channel_id.clone();
                match manager.run_here(req).await {
                    Ok(r) => {
                        tracing::info!(turn = %id, "resumed turn finished; a retry with its id gets its answer");
                        manager.post_resumed_answer(&id, &channel, &r).await;
                    }
                    Err(e) => tracing::warn!(turn = %id, error = %e, "resumed turn failed"),
                }
            });
        }
        Ok(n)
    }

    /// Posts a resumed turn's answer where its message came from, when that is a running
    /// connector's channel (a Discord message; not `/chat`, whose caller retries for it): the
    /// process that ran it died before the connector could post it. Under the turn's id, so a
    /// connector that dedupes (Discord's nonce) makes no second message if the first process
    /// got as far as posting; through one that does not, an answer the first process had
    /// already stored (it may have gone out) is not posted again.
    async fn post_resumed_answer(&self, turn_id: &str, channel: &str, r: &Reply) {
        let Some(ch) = strata_engine::connector::ChannelRef::parse(channel) else {
            return;
        };
        let hub = self.env.connectors();
        if hub.get(&ch.connector).is_none()
            || r.silent
            || strata_engine::agent::is_no_reply(&r.text)
            || r.text.trim().is_empty()
            || (r.replayed && !hub.dedupes_sends(&ch))
        {
            return;
        }
        match hub.send_keyed(&ch, &r.text, None, Some(turn_id)).await {
            Ok(()) => {
                tracing::info!(turn = %turn_id, channel = %ch, "resumed turn's answer posted")
            }
            Err(e) => {
                tracing::warn!(turn = %turn_id, channel = %ch, error = %e, "resumed turn's answer not posted")
            }
        }
    }

    /// Forgets a session (`/reset`).
    pub async fn reset(&self, agent_id: &str, session_id: &str) -> Result<(), AgentError> {
        let key = SessionKey::new(agent_id, session_id);
        let slot = self.slot(&key);
        let mut guard = slot.lock().await;
        self.store
            .reset(&key)
            .await
            .map_err(|e| AgentError::Other(e.to_string()))?;
        // Read again at the next turn (a shared store gives it a new version).
        *guard = None;
        Ok(())
    }

    /// Deletes sessions idle longer than `sessions.retention_days` (no-op when 0).
    pub async fn prune(&self) -> Result<usize, AgentError> {
        if self.cfg.retention_days == 0 {
            return Ok(0);
        }
        let idle = Duration::from_secs(u64::from(self.cfg.retention_days) * 86_400);
        let n = self
            .store
            .prune(idle)
            .await
            .map_err(|e| AgentError::Other(e.to_string()))?;
        if n > 0 {
            // Cached copies of pruned sessions would resurrect them: drop idle slots.
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            live.slots.retain(|_, (s, _)| Arc::strong_count(s) > 1);
        }
        Ok(n)
    }
}
