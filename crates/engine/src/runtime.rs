//! The agent runtime: [`LlmAgent`] (the model ↔ tool loop) and [`AgentManager`] (sessions,
//! per-session serialisation, caching, summarisation).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::agent::{Agent, AgentError, Message, Reply, ToolRun, TurnContext};
use crate::config::SessionsConfig;
use crate::invoker::{Invocation, Invoker};
use crate::llm::{ChatMessage, CompletionRequest, LlmProvider, Role, ToolCall, Usage};
use crate::principal::Principal;
use crate::scope::Scope;
use crate::session::{SessionKey, SessionState, SessionStore, ToolLogEntry, turn_boundary};
use crate::tool::{RuntimeEnv, ToolSpec};

pub use crate::scope::ToolFilter;

/// Is this reply the `NO_REPLY` sentinel? It must open the text, optionally behind wrapper
/// punctuation (`**NO_REPLY**`, `[NO_REPLY]`, `` `NO_REPLY` ``).
pub fn is_no_reply(text: &str) -> bool {
    let t = text.trim_start();
    let t = t.trim_start_matches(|c: char| "*_`[({<\"'".contains(c));
    t.starts_with("NO_REPLY")
}

#[derive(Default)]
struct ToolCache {
    generation: u64,
    by_tier: HashMap<crate::access::Tier, Arc<[ToolSpec]>>,
}

/// The standard agent: an identity, a model, a tool set, and the loop between them.
pub struct LlmAgent {
    id: String,
    identity: String,
    provider: Arc<dyn LlmProvider>,
    model: String,
    tools: ToolFilter,
    max_rounds: u32,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    invoker: Arc<Invoker>,
    /// The specs the model sees, per sender tier — rebuilt when the registry changes.
    tool_cache: StdMutex<ToolCache>,
}

impl LlmAgent {
    /// An agent `id` speaking through `provider`/`model`, running tools through `invoker`.
    /// `identity` is its system instruction (the runtime appends context and memory).
    pub fn new(
        id: impl Into<String>,
        identity: impl Into<String>,
        provider: Arc<dyn LlmProvider>,
        model: impl Into<String>,
        invoker: Arc<Invoker>,
    ) -> Self {
        LlmAgent {
            id: id.into(),
            identity: identity.into(),
            provider,
            model: model.into(),
            tools: ToolFilter::None,
            max_rounds: 10,
            max_tokens: None,
            temperature: None,
            invoker,
            tool_cache: StdMutex::new(ToolCache::default()),
        }
    }

    /// Sets the tools the model may use.
    pub fn with_tools(mut self, tools: ToolFilter) -> Self {
        self.tools = tools;
        self.tool_cache = StdMutex::new(ToolCache::default());
        self
    }

    /// Sets the round limit (at least 1).
    pub fn with_max_rounds(mut self, rounds: u32) -> Self {
        self.max_rounds = rounds.max(1);
        self
    }

    /// Sets sampling options.
    pub fn with_sampling(mut self, max_tokens: Option<u32>, temperature: Option<f32>) -> Self {
        self.max_tokens = max_tokens;
        self.temperature = temperature;
        self
    }

    /// The provider's name.
    pub fn provider_name(&self) -> &str {
        self.provider.name()
    }

    /// The specs the model is shown when talking to `sender`: the agent's own tool list
    /// narrowed by access control (layers 2 and 3) — a tool that would be refused is not
    /// shown; one that needs approval is. Cached per sender tier until the registry changes.
    pub fn visible_tools(&self, sender: &Principal) -> Arc<[ToolSpec]> {
        let generation = self.invoker.registry().generation();
        let policy = self.invoker.policy();
        let tier = policy.tier(sender);
        let mut cache = self.tool_cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.generation != generation {
            cache.generation = generation;
            cache.by_tier.clear();
        }
        if let Some(specs) = cache.by_tier.get(&tier) {
            return specs.clone();
        }
        let specs: Arc<[ToolSpec]> = self
            .invoker
            .registry()
            .list()
            .into_iter()
            .filter(|t| self.tools.allows(&t.spec().name))
            .filter(|t| policy.visible(sender, &self.id, t.spec()))
            .map(|t| t.spec().clone())
            .collect();
        cache.by_tier.insert(tier, specs.clone());
        specs
    }

    async fn system_prompt(&self, turn: &TurnContext, input: &Message) -> String {
        let mut s = self.identity.trim_end().to_owned();
        s.push_str(&format!(
            "\n\n[CONTEXT]\nagent: {}\nchannel: {}\nsender: {}\ntime: {}\n[/CONTEXT]",
            turn.agent_id,
            turn.channel_id,
            turn.sender,
            crate::audit::now_rfc3339()
        ));
        if let Some(summary) = &turn.summary {
            s.push_str(&format!(
                "\n\n[SUMMARY OF EARLIER CONVERSATION]\n{summary}\n[/SUMMARY]"
            ));
        }
        if let Some(mem) = &turn.env.memory {
            match mem.context_block(turn, &input.text).await {
                Ok(Some(block)) => {
                    s.push_str("\n\n");
                    s.push_str(&block);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(agent = %self.id, error = %e, "memory unavailable; turn goes on without it")
                }
            }
        }
        s
    }

    async fn run_tools(
        &self,
        turn: &TurnContext,
        calls: &[ToolCall],
    ) -> Vec<(ChatMessage, ToolRun)> {
        // What this turn is doing, for connectors' progress messages.
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        let board = turn.env.activity().clone();
        board.set(&self.id, &turn.session_id, Some(names.join(", ")));
        let out = self.run_tools_inner(turn, calls).await;
        board.set(&self.id, &turn.session_id, None);
        out
    }

    async fn run_tools_inner(
        &self,
        turn: &TurnContext,
        calls: &[ToolCall],
    ) -> Vec<(ChatMessage, ToolRun)> {
        let job = |call: ToolCall| {
            let mut inv = Invocation::new(
                call.name.clone(),
                call.arguments.clone(),
                turn.sender.clone(),
            );
            inv.agent_id = Some(self.id.clone());
            inv.session_id = Some(turn.session_id.clone());
            inv.channel_id = Some(turn.channel_id.clone());
            inv.depth = turn.depth;
            // Layer 3's narrowing for this agent (and skill run): the Invoker refuses and
            // audits a call outside it, like any other refusal.
            inv.scopes
                .push(Scope::agent(self.id.clone(), self.tools.clone()));
            one_call(self.invoker.clone(), inv, call)
        };
        // One call (the common case) runs inline; several run concurrently.
        if let [call] = calls {
            return vec![job(call.clone()).await];
        }
        let mut set = tokio::task::JoinSet::new();
        for (i, call) in calls.iter().cloned().enumerate() {
            let fut = job(call);
            set.spawn(async move { (i, fut.await) });
        }
        let mut out: Vec<(usize, (ChatMessage, ToolRun))> = Vec::with_capacity(calls.len());
        while let Some(j) = set.join_next().await {
            match j {
                Ok(x) => out.push(x),
                Err(e) => tracing::error!(error = %e, "tool task failed"),
            }
        }
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, r)| r).collect()
    }
}

/// Runs one tool call for the model and words the result for it.
async fn one_call(
    invoker: Arc<Invoker>,
    inv: Invocation,
    call: ToolCall,
) -> (ChatMessage, ToolRun) {
    let r = invoker.invoke(inv).await;
    let content = if r.ok() {
        match &r.value {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        }
    } else {
        format!(
            "error ({}): {}",
            r.status.as_str(),
            r.error.as_deref().unwrap_or("no message")
        )
    };
    let run = ToolRun {
        tool: r.tool,
        status: r.status.as_str().to_owned(),
        elapsed_ms: r.elapsed_ms,
        request_id: r.request_id,
    };
    (tool_message(&call, content), run)
}

fn tool_message(call: &ToolCall, content: String) -> ChatMessage {
    ChatMessage {
        role: Role::Tool,
        content,
        tool_calls: Vec::new(),
        tool_call_id: Some(call.id.clone()),
    }
}

#[async_trait]
impl Agent for LlmAgent {
    fn id(&self) -> &str {
        &self.id
    }

    fn provider(&self) -> Option<&str> {
        Some(self.provider.name())
    }

    async fn handle(&self, mut turn: TurnContext, input: Message) -> Result<Reply, AgentError> {
        let system = self.system_prompt(&turn, &input).await;
        let user = ChatMessage::text(Role::User, input.text.clone());
        // Tool calls that come back from outside the process find this turn by its ticket.
        let ticket = turn.env.turns().begin(TurnInfo {
            agent_id: self.id.clone(),
            session_id: turn.session_id.clone(),
            channel_id: turn.channel_id.clone(),
            sender: turn.sender.clone(),
            depth: turn.depth,
        });
        // The request is built once and grows round by round; nothing is cloned per round.
        let mut req = CompletionRequest {
            model: self.model.clone(),
            system: Some(system),
            messages: std::mem::take(&mut turn.history),
            tools: self.visible_tools(&turn.sender),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            provider_state: turn.provider_state.take(),
            turn: Some(ticket.id().to_owned()),
        };
        let first_new = req.messages.len();
        req.messages.push(user);
        let mut usage = Usage::default();
        let mut tool_runs = Vec::new();
        let mut rounds = 0;
        let final_text = loop {
            if rounds >= self.max_rounds {
                let text = format!(
                    "I stopped after {} rounds of tool calls without reaching an answer.",
                    self.max_rounds
                );
                req.messages
                    .push(ChatMessage::text(Role::Assistant, text.clone()));
                break text;
            }
            rounds += 1;
            let resp = self.provider.complete(&req).await?;
            usage.input_tokens += resp.usage.input_tokens;
            usage.output_tokens += resp.usage.output_tokens;
            if resp.provider_state.is_some() {
                req.provider_state = resp.provider_state;
            }
            let msg = resp.message;
            let calls = msg.tool_calls.clone();
            let text = (calls.is_empty()).then(|| msg.content.clone());
            req.messages.push(msg);
            if let Some(text) = text {
                break text;
            }
            for (m, run) in self.run_tools(&turn, &calls).await {
                req.messages.push(m);
                tool_runs.push(run);
            }
        };
        if let Some(mem) = &turn.env.memory
            && let Err(e) = mem.record_exchange(&turn, &input.text, &final_text).await
        {
            tracing::warn!(agent = %self.id, error = %e, "memory did not record the exchange");
        }
        let transcript = req.messages.split_off(first_new);
        Ok(Reply {
            silent: is_no_reply(&final_text),
            text: final_text,
            transcript,
            provider_state: req.provider_state,
            usage,
            rounds,
            tool_runs,
        })
    }

    async fn summarize(
        &self,
        previous: Option<&str>,
        messages: &[ChatMessage],
    ) -> Result<Option<String>, AgentError> {
        let mut text = String::new();
        if let Some(p) = previous {
            text.push_str(&format!("Earlier summary:\n{p}\n\n"));
        }
        text.push_str("Conversation:\n");
        for m in messages {
            let who = m.role.as_str();
            if !m.content.is_empty() {
                text.push_str(&format!("{who}: {}\n", m.content));
            }
            for c in &m.tool_calls {
                text.push_str(&format!("{who} called {}({})\n", c.name, c.arguments));
            }
        }
        let req = CompletionRequest {
            model: self.model.clone(),
            system: Some(
                "Summarise the conversation below for your own later reference: facts learned, \
                 decisions, open questions, the user's preferences. Be concise; no preamble."
                    .into(),
            ),
            messages: vec![ChatMessage::text(Role::User, text)],
            tools: Arc::from(Vec::new()),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            provider_state: None,
            turn: None,
        };
        let resp = self.provider.complete(&req).await?;
        let s = resp.message.content.trim().to_owned();
        Ok((!s.is_empty()).then_some(s))
    }
}

/// The running agents, as tools see them (`ask_agent`, `send_to_agent`, `list_capabilities`).
#[async_trait]
pub trait AgentDirectory: Send + Sync {
    /// Agent ids, sorted.
    fn agent_ids(&self) -> Vec<String>;
    /// Runs a turn (layer 1 applies).
    async fn run_turn(&self, req: TurnRequest) -> Result<Reply, AgentError>;
    /// Forgets a session's conversation (`/reset`).
    async fn reset(&self, agent_id: &str, session_id: &str) -> Result<(), AgentError> {
        let _ = (agent_id, session_id);
        Err(AgentError::Other(
            "resetting sessions is not supported here".into(),
        ))
    }
}

#[async_trait]
impl AgentDirectory for AgentManager {
    fn agent_ids(&self) -> Vec<String> {
        AgentManager::agent_ids(self)
    }

    async fn run_turn(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        self.turn(req).await
    }

    async fn reset(&self, agent_id: &str, session_id: &str) -> Result<(), AgentError> {
        AgentManager::reset(self, agent_id, session_id).await
    }
}

/// A turn to run.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// Agent id.
    pub agent_id: String,
    /// Session id (usually the channel id).
    pub session_id: String,
    /// Channel id.
    pub channel_id: String,
    /// Who sent it.
    pub sender: Principal,
    /// The message.
    pub message: Message,
    /// Inter-agent depth.
    pub depth: u32,
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
    policy: crate::access::AccessPolicy,
    agents: HashMap<String, Arc<dyn Agent>>,
    store: Arc<dyn SessionStore>,
    env: Arc<RuntimeEnv>,
    cfg: SessionsConfig,
    live: StdMutex<Live>,
}

impl AgentManager {
    /// A manager over `agents`, keeping sessions in `store`.
    pub fn new(
        agents: Vec<Arc<dyn Agent>>,
        store: Arc<dyn SessionStore>,
        env: Arc<RuntimeEnv>,
    ) -> Self {
        let cfg = env.config.sessions.clone();
        AgentManager {
            policy: crate::access::AccessPolicy::from_config(&env.config),
            agents: agents.into_iter().map(|a| (a.id().to_owned(), a)).collect(),
            store,
            env,
            cfg,
            live: StdMutex::new(Live {
                slots: HashMap::new(),
                tick: 0,
            }),
        }
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

    /// Runs one turn and stores it.
    pub async fn turn(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        let agent = self.agents.get(&req.agent_id).cloned().ok_or_else(|| {
            AgentError::Other(format!(
                "unknown agent `{}`; agents: {}",
                req.agent_id,
                self.agent_ids().join(", ")
            ))
        })?;
        self.policy
            .may_talk(&req.sender, &req.agent_id)
            .map_err(|e| AgentError::Denied(e.to_string()))?;
        let key = SessionKey::new(&req.agent_id, &req.session_id);
        let started = std::time::Instant::now();
        let slot = self.slot(&key);
        let mut guard = slot.lock().await;
        if guard.is_none() {
            let loaded = self
                .store
                .load(&key)
                .await
                .map_err(|e| AgentError::Other(e.to_string()))?;
            *guard = Some(loaded.unwrap_or_default());
        }
        let state = guard.get_or_insert_with(SessionState::default);
        let mut ctx = TurnContext::new(
            &req.agent_id,
            &req.session_id,
            &req.channel_id,
            req.sender.clone(),
            self.env.clone(),
        );
        ctx.summary = state.summary.clone();
        ctx.history = state.messages.clone();
        ctx.provider_state = state.provider_state.clone();
        ctx.depth = req.depth;
        let reply = agent.handle(ctx, req.message).await?;
        tracing::debug!(
            agent = %key.agent_id,
            session = %key.session_id,
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
        if let Err(e) = self
            .store
            .record_turn(
                &key,
                &reply.transcript,
                reply.provider_state.as_ref(),
                &tool_log,
            )
            .await
        {
            // The answer exists; losing its storage must not lose the answer.
            tracing::error!(agent = %key.agent_id, session = %key.session_id, error = %e, "turn not stored");
        }
        state.messages.extend(reply.transcript.iter().cloned());
        state.turns_since_summary += 1;
        state.provider_state = reply.provider_state.clone();
        if self.cfg.summarize_after > 0 && state.turns_since_summary >= self.cfg.summarize_after {
            self.compact(&agent, &key, state).await;
        }
        Ok(reply)
    }

    async fn compact(&self, agent: &Arc<dyn Agent>, key: &SessionKey, state: &mut SessionState) {
        let cut = turn_boundary(&state.messages, self.cfg.keep_turns as usize);
        if cut == 0 {
            return;
        }
        match agent
            .summarize(state.summary.as_deref(), &state.messages[..cut])
            .await
        {
            Ok(Some(summary)) => {
                let keep = state.messages.len() - cut;
                match self.store.compact(key, &summary, keep).await {
                    Ok(()) => {
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

    /// Forgets a session (`/reset`).
    pub async fn reset(&self, agent_id: &str, session_id: &str) -> Result<(), AgentError> {
        let key = SessionKey::new(agent_id, session_id);
        let slot = self.slot(&key);
        let mut guard = slot.lock().await;
        self.store
            .reset(&key)
            .await
            .map_err(|e| AgentError::Other(e.to_string()))?;
        *guard = Some(SessionState::default());
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

/// A turn in progress, as tool calls that arrive from outside the process (a CLI agent's
/// MCP callbacks) find it: whose turn it is, for whom, and how deep in an inter-agent chain.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnInfo {
    /// The agent running the turn.
    pub agent_id: String,
    /// Its session.
    pub session_id: String,
    /// Its channel.
    pub channel_id: String,
    /// Who the turn is for (access control judges the tool calls by them).
    pub sender: Principal,
    /// Inter-agent depth.
    pub depth: u32,
}

/// Turns in progress by an unguessable id (`RuntimeEnv::turns`). A CLI provider hands the id
/// to its tool callbacks (`X-Strata-Turn`), so a call made by the CLI runs as a call of this
/// turn; the id is only valid while the turn runs.
#[derive(Debug, Default)]
pub struct TurnRegistry {
    live: StdMutex<HashMap<String, TurnInfo>>,
}

/// Removes its turn from the registry when dropped.
#[derive(Debug)]
pub struct TurnTicket {
    id: String,
    registry: Arc<TurnRegistry>,
}

impl TurnTicket {
    /// The turn's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for TurnTicket {
    fn drop(&mut self) {
        let mut m = self.registry.live.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(&self.id);
    }
}

impl TurnRegistry {
    /// Registers a running turn until the ticket is dropped.
    pub fn begin(self: &Arc<Self>, info: TurnInfo) -> TurnTicket {
        let id = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let mut m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(id.clone(), info);
        TurnTicket {
            id,
            registry: self.clone(),
        }
    }

    /// The running turn with this id.
    pub fn get(&self, id: &str) -> Option<TurnInfo> {
        let m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        m.get(id).cloned()
    }

    /// Turns running now.
    pub fn len(&self) -> usize {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// No turn is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The tools each running turn is using right now, by (agent, session): what a connector's
/// progress message names.
#[derive(Debug, Default)]
pub struct ActivityBoard {
    now: StdMutex<HashMap<(String, String), String>>,
}

impl ActivityBoard {
    /// Records (or with `None` clears) what `agent` is doing in `session`.
    pub fn set(&self, agent: &str, session: &str, tools: Option<String>) {
        let mut m = self.now.lock().unwrap_or_else(|p| p.into_inner());
        let key = (agent.to_owned(), session.to_owned());
        match tools {
            Some(t) => {
                m.insert(key, t);
            }
            None => {
                m.remove(&key);
            }
        }
    }

    /// The tools `agent` is using in `session`, if any.
    pub fn get(&self, agent: &str, session: &str) -> Option<String> {
        let m = self.now.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&(agent.to_owned(), session.to_owned())).cloned()
    }
}
