//! The agent loop: [`LlmAgent`], an identity, a model and a tool set, and the rounds between
//! the model and the tools. Every tool call goes through the [`Invoker`] with the agent's tool
//! list as a layer-3 [`Scope`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;

use async_trait::async_trait;
use serde_json::Value;

use crate::budget::{DEFAULT_MAX_TOKENS, PlannedCall};
use crate::env::EnvExt;
use crate::intent::Intent;
use crate::invoker::{Invocation, Invoker};
use crate::journal::{CallRecord, JournalCall, RecordedOutcome, TurnJournal, crash_point};
use crate::turns::TurnInfo;
use crate::usage::InputParts;
use strata_engine::ToolSpec;
use strata_engine::agent::{
    Agent, AgentError, Compaction, Message, Reply, ToolRun, TurnContext, is_no_reply,
};
use strata_engine::config::TaintMode;
use strata_engine::llm::{ChatMessage, CompletionRequest, LlmProvider, Role, ToolCall, Usage};
use strata_engine::principal::Principal;
use strata_engine::scope::{Scope, ToolFilter};
use strata_engine::taint::Check;
use strata_engine::taint::TaintSource;
use strata_engine::turns::TurnEvent;

/// Whose model call this is, for usage and budgets.
struct Caller<'a> {
    env: &'a strata_engine::Env,
    session: &'a str,
    sender: &'a Principal,
    turn_id: &'a str,
    /// `turn` or `summary`.
    purpose: &'static str,
    /// Where the text goes as it is written (turns somebody watches).
    stream: Option<&'a strata_engine::turns::TurnSink>,
    /// The turn's journal: a model call recorded before a crash is not made again.
    journal: Option<&'a TurnJournal>,
}

/// Bytes of the system instruction that are not the agent's own.
#[derive(Debug, Default, Clone, Copy)]
struct SystemParts {
    summary: usize,
    memory: usize,
}

/// What a request's prompt is made of, in bytes: the prompt estimate of a budget's
/// reservation and the shares of a call's prompt tokens. The conversation only grows within
/// a turn, so each message is measured once.
struct RequestSizes {
    system: SystemParts,
    tools: u64,
    /// Messages measured so far, and their bytes.
    counted: usize,
    history: u64,
    tool_outputs: u64,
}

/// The bytes of a tool list as the model is shown it (name, description, schema).
fn tool_bytes(tools: &[ToolSpec]) -> u64 {
    tools
        .iter()
        .map(|t| (t.name.len() + t.description.len() + t.input_schema.to_string().len()) as u64)
        .sum()
}

impl RequestSizes {
    fn new(system: SystemParts, tools: u64) -> RequestSizes {
        RequestSizes {
            system,
            tools,
            counted: 0,
            history: system.summary as u64,
            tool_outputs: 0,
        }
    }

    fn parts(&mut self, req: &CompletionRequest) -> InputParts {
        for m in req.messages.iter().skip(self.counted) {
            let n = m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.to_string().len())
                    .sum::<usize>();
            if m.role == Role::Tool {
                self.tool_outputs += n as u64;
            } else {
                self.history += n as u64;
            }
        }
        self.counted = req.messages.len();
        let system = req.system.as_deref().map_or(0, str::len);
        let (summary, memory) = (self.system.summary, self.system.memory);
        InputParts {
            system: system.saturating_sub(summary + memory) as u64,
            tools: self.tools,
            memory: memory as u64,
            history: self.history,
            tool_outputs: self.tool_outputs,
        }
    }
}

/// The first line of a summary made from a conversation that held outside content: a turn
/// that starts from such a summary is tainted (the summary may carry the content's orders).
pub const TAINTED_SUMMARY: &str = "[summary of a conversation that held outside content]";

#[derive(Default)]
struct ToolCache {
    generation: u64,
    /// The specs and their size in bytes ([`tool_bytes`]).
    by_tier: HashMap<strata_engine::access::Tier, (Arc<[ToolSpec]>, u64)>,
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
    /// The model's context window in tokens (`llm.context_window`, or what the vendor
    /// documents); `None` sends every request as it is.
    context_window: Option<u32>,
    invoker: Arc<Invoker>,
    /// The specs the model sees, per sender tier — rebuilt when the registry changes.
    tool_cache: StdMutex<ToolCache>,
    /// What the team's knowledge base holds, told to the model each turn (see
    /// [`with_knowledge_index`](Self::with_knowledge_index)).
    knowledge_index: Option<String>,
    /// Whether a turn somebody watches (`TurnContext::stream`) asks the provider to stream
    /// (`llm.stream`, default on).
    streaming: bool,
    /// How the model calls went (`Agent::health`).
    health: StdMutex<Option<strata_engine::agent::AgentHealth>>,
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
            context_window: None,
            invoker,
            tool_cache: StdMutex::new(ToolCache::default()),
            knowledge_index: None,
            streaming: true,
            health: StdMutex::new(None),
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

    /// The knowledge base's index (the first lines of its `_index.md` files, or its files'
    /// titles), appended to the system instruction so the model knows what it can look up.
    pub fn with_knowledge_index(mut self, index: impl Into<String>) -> Self {
        let index = index.into();
        self.knowledge_index = (!index.trim().is_empty()).then_some(index);
        self
    }

    /// Whether watched turns stream from the provider (`llm.stream`; default on). Off, the
    /// watcher gets each round's text whole.
    pub fn with_streaming(mut self, on: bool) -> Self {
        self.streaming = on;
        self
    }

    /// Sets sampling options.
    pub fn with_sampling(mut self, max_tokens: Option<u32>, temperature: Option<f32>) -> Self {
        self.max_tokens = max_tokens;
        self.temperature = temperature;
        self
    }

    /// Sets the model's context window in tokens: each request is fitted into it before it
    /// is sent ([`crate::context_window::fit`]). `None` sends requests as they are.
    pub fn with_context_window(mut self, tokens: Option<u32>) -> Self {
        self.context_window = tokens.filter(|n| *n > 0);
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
        self.visible_tools_sized(sender).0
    }

    /// [`Self::visible_tools`] with their size in bytes (measured once per list).
    fn visible_tools_sized(&self, sender: &Principal) -> (Arc<[ToolSpec]>, u64) {
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
            .map(|t| {
                // On the wire the schema is compact: the same constraints in fewer tokens.
                let mut spec = t.spec().clone();
                spec.input_schema =
                    crate::context_window::compact_schema(&spec.input_schema, &spec.description);
                spec
            })
            .collect();
        let bytes = tool_bytes(&specs);
        cache.by_tier.insert(tier, (specs.clone(), bytes));
        (specs, bytes)
    }

    /// The system instruction, with the bytes of its summary and memory block (for the
    /// attribution of prompt tokens).
    async fn system_prompt(&self, turn: &TurnContext, input: &Message) -> (String, SystemParts) {
        let mut parts = SystemParts::default();
        let mut s = self.identity.trim_end().to_owned();
        let now = jiff::Timestamp::now();
        s.push_str(&format!(
            "\n\n[CONTEXT]\nagent: {}\nchannel: {}\nsender: {}\ntime: {}\n[/CONTEXT]",
            turn.agent_id,
            channel_line(turn),
            sender_line(&turn.env.config, self.invoker.policy(), &turn.sender, now),
            strata_engine::clock::now_rfc3339()
        ));
        if let Some(index) = &self.knowledge_index {
            s.push_str(
                "\n\n[KNOWLEDGE INDEX]\nWhat the knowledge base holds (read the files for more):\n",
            );
            s.push_str(index.trim_end());
            s.push_str("\n[/KNOWLEDGE INDEX]");
        }
        // The agent's own instruction, the context lines and the knowledge index are
        // configuration: values found in them are not steered.
        turn.taint.vouch_text(&s);
        if let Some(summary) = &turn.summary {
            if !summary.starts_with(TAINTED_SUMMARY) {
                turn.taint.vouch_text(summary);
            }
            let before = s.len();
            s.push_str(&format!(
                "\n\n[SUMMARY OF EARLIER CONVERSATION]\n{summary}\n[/SUMMARY]"
            ));
            parts.summary = s.len() - before;
        }
        if let Some(mem) = &turn.env.memory {
            match mem.context_block(&turn.memory_turn(), &input.text).await {
                Ok(Some(block)) => {
                    s.push_str("\n\n");
                    s.push_str(&block);
                    parts.memory = block.len() + 2;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(agent = %self.id, error = %e, "memory unavailable; turn goes on without it")
                }
            }
        }
        (s, parts)
    }

    /// One model call: reserved against the budgets that apply, timed, its usage stored
    /// and its reservation settled.
    async fn call_model(
        &self,
        who: &Caller<'_>,
        req: &CompletionRequest,
        sizes: &mut RequestSizes,
    ) -> Result<strata_engine::llm::CompletionResponse, AgentError> {
        // A call a resumed turn made before its crash: its response as recorded, neither
        // asked for nor paid for again.
        let numbered = who.journal.map(|j| (j, j.next_model_call()));
        if let Some((j, n)) = numbered {
            if let Some(resp) = j.recorded_model(n) {
                tracing::debug!(
                    call = n,
                    purpose = who.purpose,
                    "model response taken from the turn journal"
                );
                return Ok(resp);
            }
            // What the turn recorded is written while the model answers.
            j.hand_off();
            crash_point("model_call");
        }
        let reservation = match self.invoker.budgets() {
            Some(b) => b
                .reserve(
                    &PlannedCall {
                        agent: &self.id,
                        sender: who.sender,
                        session: who.session,
                        provider: self.provider.name(),
                        model: &req.model,
                        prompt_bytes: sizes.parts(req).as_array().iter().sum::<u64>() as usize,
                        max_tokens: req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                    },
                    self.invoker.approvals().map(|a| a.as_ref()),
                    &|a| self.invoker.alert(a),
                )
                .await
                .map_err(|stop| AgentError::Budget(stop.0))?,
            None => None,
        };
        let called = std::time::Instant::now();
        // A span inside the turn's: traces show each model call beside the tool calls.
        let span = tracing::info_span!(
            "model_call",
            provider = self.provider.name(),
            model = %req.model,
            purpose = who.purpose
        );
        let resp = match who.stream {
            Some(sink) if self.streaming => {
                let mut on_event = |e: strata_engine::llm::StreamEvent| {
                    if let strata_engine::llm::StreamEvent::TextDelta(t) = e
                        && !t.is_empty()
                    {
                        sink.send(TurnEvent::Token { text: t });
                    }
                };
                let call = self.provider.complete_streaming(req, &mut on_event);
                tracing::Instrument::instrument(call, span).await
            }
            Some(sink) => {
                let r = tracing::Instrument::instrument(self.provider.complete(req), span).await;
                if let Ok(r) = &r
                    && !r.message.content.is_empty()
                {
                    sink.send(TurnEvent::Token {
                        text: r.message.content.clone(),
                    });
                }
                r
            }
            None => tracing::Instrument::instrument(self.provider.complete(req), span).await,
        };
        strata_engine::meters::model_call(
            self.provider.name(),
            &req.model,
            resp.is_ok(),
            called.elapsed(),
        );
        {
            let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
            let (calls, failures) = h.as_ref().map_or((0, 0), |h| (h.calls, h.failures));
            *h = Some(strata_engine::agent::AgentHealth {
                last_call_ok: resp.is_ok(),
                last_call_at: strata_engine::clock::now_rfc3339(),
                last_error: resp.as_ref().err().map(|e| e.to_string()),
                calls: calls + 1,
                failures: failures + u64::from(resp.is_err()),
            });
        }
        // A failed call releases its reservation when dropped.
        let resp = resp?;
        if let Some((j, n)) = numbered {
            // Not recording costs a second call after a crash, not a wrong answer.
            if let Err(e) = j.record_model(n, who.purpose, req, &resp).await {
                tracing::warn!(error = %e, "model response not journaled; a crash now would ask for it again");
            }
            j.crash_point("model_recorded").await;
        }
        if let Some(meter) = who.env.usage() {
            meter
                .record(crate::usage::ModelCall {
                    ts_ms: strata_engine::clock::now_ms(),
                    agent: self.id.clone(),
                    session: who.session.to_owned(),
                    sender: who.sender.to_string(),
                    turn_id: who.turn_id.to_owned(),
                    provider: self.provider.name().to_owned(),
                    model: req.model.clone(),
                    purpose: who.purpose.into(),
                    usage: resp.usage,
                    cost_usd: None,
                    input_parts: InputParts::apportion(resp.usage.input_tokens, sizes.parts(req)),
                })
                .await;
        }
        if let (Some(r), Some(b)) = (reservation, self.invoker.budgets()) {
            b.settle(r, self.provider.name(), &req.model, &resp.usage);
        }
        Ok(resp)
    }

    /// The completion bound sent: the agent's, or [`DEFAULT_MAX_TOKENS`] when a budget
    /// applies (a reservation needs a worst case).
    fn max_tokens(&self) -> Option<u32> {
        self.max_tokens.or_else(|| {
            self.invoker
                .budgets()
                .is_some_and(|b| b.covers_agent(&self.id))
                .then_some(DEFAULT_MAX_TOKENS)
        })
    }

    /// Marks the turn's taint with what it starts from: a sender below the trusted tier, and
    /// outside content still in its history (a source tool's result) or summary.
    fn taint_at_start(&self, turn: &TurnContext, input: &Message) {
        let policy = self.invoker.taint_policy();
        if !policy.enabled() {
            return;
        }
        let tier = self.invoker.policy().tier(&turn.sender);
        // The person's message is the trusted request values are traced against; a message
        // from a sender below the trusted tier is outside content itself.
        if policy.sender_taints(tier) {
            turn.taint.take_in(
                TaintSource::message(&turn.sender.to_string(), tier),
                &Value::String(input.text.clone()),
            );
        } else {
            turn.taint.vouch_text(&input.text);
        }
        if let Some(summary) = turn
            .summary
            .as_deref()
            .filter(|s| s.starts_with(TAINTED_SUMMARY))
        {
            turn.taint.take_in(
                TaintSource::history(None, "a summary of earlier outside content"),
                &Value::String(summary.to_owned()),
            );
        }
        for (tool, args) in self.source_calls(&turn.history) {
            let from = TaintSource::tool(tool, args);
            turn.taint
                .mark(TaintSource::history(Some(tool), from.detail));
        }
        // What the conversation's earlier turns took in is in the history: when the session
        // carries taint, the whole history is untrusted text (no part of it is vouched for).
        if turn.taint.is_tainted() {
            let mut text = String::new();
            for m in &turn.history {
                text.push_str(&m.content);
                text.push('\n');
                for c in &m.tool_calls {
                    text.push_str(&strata_engine::provenance::text_of(&c.arguments));
                }
            }
            turn.taint.observe_blind(&text);
        }
    }

    /// The turn's plan ([`Intent`]): asked of the model with nothing but the planning
    /// instruction, the tool list and the person's message (no tool result, memory or
    /// earlier conversation), plus the tools called while the turn was clean. A message from
    /// a sender below the trusted tier gets an empty plan: nothing it asks for is trusted.
    async fn plan(
        &self,
        journal: &Option<Arc<TurnJournal>>,
        turn: &TurnContext,
        input: &Message,
        tools: &[ToolSpec],
        clean: &std::collections::BTreeSet<String>,
    ) -> Intent {
        let tier = self.invoker.policy().tier(&turn.sender);
        let mut intent = Intent::default();
        if !self.invoker.taint_policy().sender_taints(tier) {
            let req = CompletionRequest {
                model: self.model.clone(),
                system: Some(Intent::prompt(tools)),
                messages: vec![ChatMessage::text(Role::User, input.text.clone())],
                tools: Arc::from(Vec::new()),
                max_tokens: Some(512),
                temperature: Some(0.0),
                provider_state: None,
                turn: None,
            };
            let who = Caller {
                env: &turn.env,
                session: &turn.session_id,
                sender: &turn.sender,
                turn_id: &turn.turn_id,
                purpose: "plan",
                stream: None,
                journal: journal.as_deref(),
            };
            let mut sizes = RequestSizes::new(SystemParts::default(), 0);
            match self.call_model(&who, &req, &mut sizes).await {
                Ok(resp) => match Intent::parse(&resp.message.content, tools) {
                    Some(i) => intent = i,
                    None => tracing::warn!(
                        agent = %self.id,
                        "the model's plan was not a tool list; every gated call of this turn asks"
                    ),
                },
                Err(e) => tracing::warn!(
                    agent = %self.id, error = %e,
                    "no plan for a tainted turn; every gated call of it asks"
                ),
            }
        }
        intent.extend(clean.iter().cloned());
        tracing::info!(agent = %self.id, session = %turn.session_id, plan = %intent.describe(), "turn planned");
        intent
    }

    /// Whether the taint gate checks `call` as an effect (the plan decides it).
    fn is_gated_effect(&self, turn: &TurnContext, call: &ToolCall) -> bool {
        let tier = self.invoker.policy().tier(&turn.sender);
        self.invoker.registry().get(&call.name).is_some_and(|t| {
            self.invoker.taint_policy().checks(t.spec(), tier) == Some(Check::Effect)
        })
    }

    /// The calls of taint-source tools in `messages` (their results are in there too).
    fn source_calls<'m>(
        &self,
        messages: &'m [ChatMessage],
    ) -> impl Iterator<Item = (&'m str, &'m Value)> + use<'_, 'm> {
        let policy = self.invoker.taint_policy();
        let registry = self.invoker.registry();
        messages
            .iter()
            .flat_map(|m| m.tool_calls.iter())
            .filter(move |c| {
                registry
                    .get(&c.name)
                    .is_some_and(|t| policy.is_source(t.spec()))
            })
            .map(|c| (c.name.as_str(), &c.arguments))
    }

    async fn run_tools(
        &self,
        turn: &TurnContext,
        calls: &[ToolCall],
        intent: Option<Arc<Intent>>,
        journal: Option<(&Arc<TurnJournal>, u32)>,
    ) -> Vec<(ChatMessage, ToolRun)> {
        // What this turn is doing, for connectors' progress messages.
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        let board = turn.env.activity().clone();
        board.set(&self.id, &turn.session_id, Some(names.join(", ")));
        let out = self.run_tools_inner(turn, calls, intent, journal).await;
        board.set(&self.id, &turn.session_id, None);
        out
    }

    async fn run_tools_inner(
        &self,
        turn: &TurnContext,
        calls: &[ToolCall],
        intent: Option<Arc<Intent>>,
        journal: Option<(&Arc<TurnJournal>, u32)>,
    ) -> Vec<(ChatMessage, ToolRun)> {
        let job = |i: usize, call: ToolCall| {
            let mut inv = Invocation::new(
                call.name.clone(),
                call.arguments.clone(),
                turn.sender.clone(),
            );
            inv.agent_id = Some(self.id.clone());
            inv.session_id = Some(turn.session_id.clone());
            inv.channel_id = Some(turn.channel_id.clone());
            inv.depth = turn.depth;
            inv.taint = Some(turn.taint.clone());
            inv.intent = intent.clone();
            // Layer 3's narrowing for this agent (and skill run): the Invoker refuses and
            // audits a call outside it, like any other refusal.
            inv.scopes
                .push(Scope::agent(self.id.clone(), self.tools.clone()));
            // The caller's own narrowings (a token's scope on `/chat`) hold for its turns.
            inv.scopes.extend(turn.scopes.iter().cloned());
            inv.journal = journal.map(|(j, step)| {
                let key = format!("t{step}.{i}");
                JournalCall {
                    idempotency_key: j.idempotency_key(&key, &call.name, &call.arguments),
                    key,
                    turn: j.clone(),
                    resumed: false,
                }
            });
            one_call(self.invoker.clone(), inv, call, turn.stream.clone())
        };
        // One call (the common case) runs inline; several run concurrently.
        if let [call] = calls {
            return vec![job(0, call.clone()).await];
        }
        let mut set = tokio::task::JoinSet::new();
        for (i, call) in calls.iter().cloned().enumerate() {
            let fut = job(i, call);
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

/// What the model is told of a call a resumed turn did not run again.
fn unknown_outcome_text(tool: &str, declined: bool) -> String {
    format!(
        "error ({}): `{tool}` had started when Strata stopped, and whether it took effect is \
         unknown; it was not run again{}. Check its effect (or ask the user) before calling it \
         again.",
        crate::journal::UNKNOWN_OUTCOME,
        if declined {
            " (a person was asked and did not approve running it again)"
        } else {
            ""
        }
    )
}

/// A call a resumed turn will not run again: recorded, counted, and worded for the model.
async fn not_run_again(j: &JournalCall, call: &ToolCall, declined: bool) -> (ChatMessage, ToolRun) {
    strata_engine::meters::unknown_outcome(&call.name, "skipped");
    let outcome = RecordedOutcome {
        status: crate::journal::UNKNOWN_OUTCOME.into(),
        content: unknown_outcome_text(&call.name, declined),
        request_id: uuid::Uuid::new_v4().to_string(),
        elapsed_ms: 0.0,
    };
    if let Err(e) = j
        .turn
        .record_outcome(
            crate::journal::UNKNOWN_OUTCOME,
            &j.key,
            &call.name,
            &outcome,
            true,
        )
        .await
    {
        tracing::warn!(error = %e, "the unknown outcome was not journaled");
    }
    (
        tool_message(call, outcome.content),
        ToolRun {
            tool: call.name.clone(),
            status: outcome.status,
            elapsed_ms: 0.0,
            request_id: outcome.request_id,
        },
    )
}

/// Runs one tool call for the model and words the result for it. In a resumed turn, a call
/// with a recorded outcome is not run again (the outcome is used), and one recorded as
/// started without an outcome runs again only when that is safe (`journal.unknown_outcome`).
async fn one_call(
    invoker: Arc<Invoker>,
    mut inv: Invocation,
    call: ToolCall,
    stream: Option<strata_engine::turns::TurnSink>,
) -> (ChatMessage, ToolRun) {
    let mut asked_again = false;
    if let Some(j) = inv.journal.clone() {
        match j.turn.call(&j.key) {
            CallRecord::New => {}
            CallRecord::Done(rec) => {
                invoker.replay_taint(&inv, &rec.content);
                let run = ToolRun {
                    tool: call.name.clone(),
                    status: rec.status,
                    elapsed_ms: rec.elapsed_ms,
                    request_id: rec.request_id,
                };
                return (tool_message(&call, rec.content), run);
            }
            CallRecord::Started => {
                let safe = invoker.registry().get(&call.name).is_some_and(|t| {
                    let spec = t.spec();
                    spec.side_effects == strata_engine::SideEffects::None || spec.idempotent
                });
                if safe && let Some(j) = inv.journal.as_mut() {
                    j.resumed = true;
                }
                if !safe {
                    // `journal.unknown_outcome`, read once: `ask` (a person may have it run
                    // again) or `skip`.
                    let ask = invoker.env().journal().is_some_and(|jr| {
                        jr.unknown_outcome() == strata_engine::config::UnknownOutcome::Ask
                    });
                    invoker.alert(strata_engine::audit::Alert {
                        kind: "unknown_outcome",
                        rule: "started_without_outcome".into(),
                        message: format!(
                            "turn {} was resumed after a crash: its call of `{}` ({}) had started and its outcome is unknown; {}",
                            j.turn.turn_id(),
                            call.name,
                            j.key,
                            if ask {
                                "a person is asked whether to run it again"
                            } else {
                                "it is not run again"
                            }
                        ),
                        agent_id: inv.agent_id.clone(),
                        tool: Some(call.name.clone()),
                        request_id: None,
                        score: None,
                    });
                    if !ask {
                        return not_run_again(&j, &call, false).await;
                    }
                    asked_again = true;
                    inv.reapprove = Some(format!(
                        "`{}` had started before Strata stopped and whether it took effect is unknown: approve only to run it again",
                        call.name
                    ));
                }
            }
        }
    }
    if let Some(s) = &stream {
        s.send(TurnEvent::ToolStart {
            id: call.id.clone(),
            tool: call.name.clone(),
        });
    }
    let journal = inv.journal.clone();
    let r = invoker.invoke(inv.clone()).await;
    if asked_again && let Some(j) = &journal {
        if r.status == crate::invoker::Status::ApprovalDenied {
            return not_run_again(j, &call, true).await;
        }
        strata_engine::meters::unknown_outcome(&call.name, "approved");
    }
    if let Some(s) = &stream {
        s.send(TurnEvent::ToolEnd {
            id: call.id.clone(),
            tool: call.name.clone(),
            status: r.status.as_str().to_owned(),
            elapsed_ms: r.elapsed_ms,
        });
    }
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
    if let Some(j) = &journal {
        let outcome = RecordedOutcome {
            status: run.status.clone(),
            content: content.clone(),
            request_id: run.request_id.clone(),
            elapsed_ms: run.elapsed_ms,
        };
        // A finished effect's outcome is durable before the turn goes on; a read's goes with
        // the next hand-off.
        let effect = invoker
            .registry()
            .get(&call.name)
            .is_none_or(|t| t.spec().side_effects != strata_engine::SideEffects::None);
        if let Err(e) = j
            .turn
            .record_outcome("tool_done", &j.key, &call.name, &outcome, effect)
            .await
        {
            tracing::warn!(error = %e, tool = %call.name, "the call's outcome was not journaled; a crash now would leave it unknown");
        }
        j.turn.crash_point("tool_done").await;
    }
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

    fn health(&self) -> Option<strata_engine::agent::AgentHealth> {
        self.health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    async fn handle(&self, mut turn: TurnContext, input: Message) -> Result<Reply, AgentError> {
        // The journal the manager opened for this turn (none when `journal.enabled` is off).
        let journal = turn.env.journal().and_then(|j| j.live(&turn.turn_id));
        self.taint_at_start(&turn, &input);
        let (system, system_parts) = self.system_prompt(&turn, &input).await;
        let user = ChatMessage::text(Role::User, input.text.clone());
        // Tool calls that come back from outside the process find this turn by its ticket.
        let ticket = turn.env.turns().begin(TurnInfo {
            agent_id: self.id.clone(),
            session_id: turn.session_id.clone(),
            channel_id: turn.channel_id.clone(),
            sender: turn.sender.clone(),
            depth: turn.depth,
            taint: turn.taint.clone(),
            scopes: turn.scopes.clone(),
        });
        // The request is built once and grows round by round; nothing is cloned per round.
        let (mut tools, mut tools_bytes) = self.visible_tools_sized(&turn.sender);
        // The caller's narrowings (a token's scope) hide what they would refuse.
        if !turn.scopes.is_empty() {
            let kept: Arc<[ToolSpec]> = tools
                .iter()
                .filter(|t| turn.scopes.iter().all(|s| s.filter.allows(&t.name)))
                .cloned()
                .collect();
            tools_bytes = tool_bytes(&kept);
            tools = kept;
        }
        let mut req = CompletionRequest {
            model: self.model.clone(),
            system: Some(system),
            messages: std::mem::take(&mut turn.history),
            tools,
            max_tokens: self.max_tokens(),
            temperature: self.temperature,
            provider_state: turn.provider_state.take(),
            turn: Some(ticket.id().to_owned()),
        };
        let mut first_new = req.messages.len();
        req.messages.push(user);
        // The history as it came, for the tools its last turns called (when tools must go).
        let recent: Vec<ChatMessage> = if self.context_window.is_some() {
            req.messages[..first_new].to_vec()
        } else {
            Vec::new()
        };
        let named = crate::context_window::named_tools(&self.tools);
        let mut sizes = RequestSizes::new(system_parts, tools_bytes);
        let who = Caller {
            env: &turn.env,
            session: &turn.session_id,
            sender: &turn.sender,
            turn_id: &turn.turn_id,
            purpose: "turn",
            stream: turn.stream.as_ref(),
            journal: journal.as_deref(),
        };
        let mut usage = Usage::default();
        let mut tool_runs = Vec::new();
        let mut rounds = 0;
        // The plan, made the first time a tainted turn is about to make a gated call, and the
        // tools called while the turn was clean (chosen before anything untrusted came in).
        let mut intent: Option<Arc<Intent>> = None;
        let mut clean_calls = std::collections::BTreeSet::new();
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
            if let Some(window) = self.context_window {
                match crate::context_window::fit(
                    &self.id, &mut req, first_new, window, &named, &recent,
                ) {
                    Ok(f) => {
                        if f.dropped_messages > 0 || !f.dropped_tools.is_empty() {
                            tracing::info!(
                                agent = %self.id,
                                window,
                                tokens = f.tokens,
                                earlier_messages_left_out = f.dropped_messages,
                                tools_left_out = f.dropped_tools.len(),
                                "request fitted into the context window"
                            );
                            first_new -= f.dropped_messages;
                            // What is measured for usage starts again from the new request.
                            sizes = RequestSizes::new(system_parts, tool_bytes(&req.tools));
                        }
                    }
                    Err(too_big) => {
                        let text = too_big.to_string();
                        // After tools ran, the turn ends with what it did kept; before, it
                        // did not happen.
                        if rounds > 1 {
                            req.messages
                                .push(ChatMessage::text(Role::Assistant, text.clone()));
                            break text;
                        }
                        return Err(AgentError::Other(text));
                    }
                }
            }
            let resp = match self.call_model(&who, &req, &mut sizes).await {
                Ok(r) => r,
                // A budget reached after tools ran ends the turn with what it did kept in the
                // session; reached before anything ran, the turn did not happen.
                Err(AgentError::Budget(text)) if rounds > 1 => {
                    req.messages
                        .push(ChatMessage::text(Role::Assistant, text.clone()));
                    break text;
                }
                Err(e) => return Err(e),
            };
            // The number of the model call that asked for these tools: their journal keys.
            let step = journal.as_ref().map_or(0, |j| j.model_calls());
            usage.add(&resp.usage);
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
            let clean = !turn.taint.is_tainted();
            if intent.is_none()
                && !clean
                && self.invoker.taint_policy().mode() == TaintMode::Flow
                && calls.iter().any(|c| self.is_gated_effect(&turn, c))
            {
                intent = Some(Arc::new(
                    self.plan(&journal, &turn, &input, &req.tools, &clean_calls)
                        .await,
                ));
            }
            for (m, run) in self
                .run_tools(
                    &turn,
                    &calls,
                    intent.clone(),
                    journal.as_ref().map(|j| (j, step)),
                )
                .await
            {
                req.messages.push(m);
                tool_runs.push(run);
            }
            if clean {
                clean_calls.extend(calls.iter().map(|c| c.name.clone()));
            }
        };
        if let Some(mem) = &turn.env.memory
            && let Err(e) = mem
                .record_exchange(&turn.memory_turn(), &input.text, &final_text)
                .await
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
            replayed: false,
        })
    }

    async fn summarize(
        &self,
        who: &Compaction<'_>,
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
            max_tokens: self.max_tokens(),
            temperature: self.temperature,
            provider_state: None,
            turn: None,
        };
        let caller = Caller {
            env: who.env,
            session: who.session_id,
            sender: who.sender,
            turn_id: who.turn_id,
            purpose: "summary",
            stream: None,
            journal: None,
        };
        let mut sizes = RequestSizes::new(SystemParts::default(), 0);
        let resp = self.call_model(&caller, &req, &mut sizes).await?;
        let s = resp.message.content.trim().to_owned();
        if s.is_empty() {
            return Ok(None);
        }
        // A summary of outside content carries it on: say so where the next turn looks.
        let tainted = previous.is_some_and(|p| p.starts_with(TAINTED_SUMMARY))
            || self.source_calls(messages).next().is_some();
        Ok(Some(if tainted && !s.starts_with(TAINTED_SUMMARY) {
            format!("{TAINTED_SUMMARY}\n{s}")
        } else {
            s
        }))
    }
}

/// The channel as the model reads it: its id and, where known, its kind.
fn channel_line(turn: &TurnContext) -> String {
    let id = &turn.channel_id;
    let kind = turn.channel_kind.clone().or_else(|| {
        let k = match id.split(':').next().unwrap_or_default() {
            "cli" | "repl" => "the command line",
            "http" => "the HTTP API (/chat)",
            "execute" => "the HTTP API (/execute)",
            "schedule" => "a scheduled run",
            "side" => "a side session between agents",
            _ => return None,
        };
        Some(k.to_owned())
    });
    match kind {
        Some(k) => format!("{id} ({k})"),
        None => id.clone(),
    }
}

/// Who is talking, as the team roster knows them: display name, tier, role and local time
/// for a person on the roster; anyone else marked as not on it.
pub(crate) fn sender_line(
    config: &strata_engine::config::Config,
    policy: &strata_engine::access::AccessPolicy,
    sender: &Principal,
    now: jiff::Timestamp,
) -> String {
    let tier = policy.tier(sender);
    match sender {
        Principal::Person { .. } => {
            let person = policy
                .person_id(sender)
                .and_then(|id| config.team.people.iter().find(|p| p.id == id));
            let Some(p) = person else {
                return match tier {
                    strata_engine::access::Tier::Unknown => {
                        format!("{sender} — unknown sender, not on the team roster")
                    }
                    t => format!("{sender} — not on the team roster by name; tier {t}"),
                };
            };
            let mut out = format!("{} ({sender}; tier {tier}", p.name);
            if let Some(role) = p.role.as_deref().filter(|r| !r.trim().is_empty()) {
                out.push_str(&format!("; role: {}", role.trim()));
            }
            if let Some(tz) = p.timezone.as_deref() {
                match crate::schedule::zone(tz) {
                    Ok(zone) => out.push_str(&format!(
                        "; timezone {tz}, local time {}",
                        now.to_zoned(zone).strftime("%a %Y-%m-%d %H:%M")
                    )),
                    Err(_) => out.push_str(&format!("; timezone {tz}")),
                }
            }
            out.push(')');
            out
        }
        Principal::Agent { .. } => format!("{sender} (an agent of this deployment; tier {tier})"),
        Principal::Token { .. } => format!("{sender} (an API token; tier {tier})"),
        Principal::Operator => {
            format!("{sender} (the local operator at the command line; tier {tier})")
        }
        Principal::Unknown => format!("{sender} — unknown sender, not on the team roster"),
    }
}
