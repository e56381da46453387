//! The Invoker: the one path every tool call takes, whoever the caller.
//!
//! ```text
//! resolve → validate → access (layers 2 and 3) → behaviour monitor → rate limit (recorded
//! before execution) → custom guards → approval (gated calls wait; fail closed) → execute
//! (timeout, panic caught) → content safety (web-facing output) → output filters → audit
//! ```
//!
//! Surfaces (CLI, HTTP, MCP, the agent loop) build an [`Invocation`], call
//! [`Invoker::invoke`] and map the [`InvocationResult`] onto their protocol. None of them
//! re-implements a step.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::{ApprovalOutcome, ApprovalRecord, ApprovalStatus, Approvals, now_secs};
use crate::monitor::Monitor;
use crate::ratelimit::{RateLimiter, RateLog, RateVerdict};
use crate::registry::{RegisteredTool, Registry};
use strata_engine::access::{AccessPolicy, Decision};
use strata_engine::audit::{Alert, AlertSink, AuditRecord, AuditSink, now_rfc3339, redact};
use strata_engine::config::FailMode;
use strata_engine::config::TaintMode;
use strata_engine::principal::Principal;
use strata_engine::safety::ContentSafety;
use strata_engine::scope::Scope;
use strata_engine::taint::{Check, Taint, TaintPolicy, TaintSource, Trace};
use strata_engine::{Env, ToolContext, ToolError};

/// Outcome of an invocation. Serialised in snake_case; the names are a wire contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The tool ran and returned a value.
    Ok,
    /// The tool ran and failed, panicked or timed out.
    Error,
    /// No tool by that name.
    UnknownTool,
    /// The arguments do not fit the tool's schema.
    ValidationError,
    /// A guard refused the caller (access control).
    Denied,
    /// A guard refused because a rate limit is exhausted.
    RateLimited,
    /// A human (or the approval timeout) refused the call.
    ApprovalDenied,
}

impl Status {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::UnknownTool => "unknown_tool",
            Status::ValidationError => "validation_error",
            Status::Denied => "denied",
            Status::RateLimited => "rate_limited",
            Status::ApprovalDenied => "approval_denied",
        }
    }
}

/// A request to run a tool.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// Tool name.
    pub tool: String,
    /// Arguments (must be a JSON object).
    pub args: Value,
    /// Who is calling.
    pub principal: Principal,
    /// Caller-chosen id echoed in the result and audit; generated when `None`.
    pub request_id: Option<String>,
    /// Agent on whose behalf, if any.
    pub agent_id: Option<String>,
    /// Session, if any.
    pub session_id: Option<String>,
    /// Channel, if any.
    pub channel_id: Option<String>,
    /// Inter-agent depth of the turn making the call (0 for a person's message).
    pub depth: u32,
    /// Narrowings on top of the access policy (an agent's tool list, a token's scope): a
    /// call outside any of them is refused with status `denied`, before the tool is even
    /// looked up, so a scope never tells which tools exist beyond it.
    pub scopes: Vec<Scope>,
    /// The taint of the turn making the call (`None` outside a turn: the CLI, the control
    /// API). A tainted turn needs approval for gated effects; a source tool's result marks it.
    pub taint: Option<Taint>,
    /// The plan of the turn making the call (`None` outside an agent loop's turn: a Claude
    /// Code callback, the CLI): a tainted turn's gated call outside it waits for a person.
    pub intent: Option<Arc<crate::intent::Intent>>,
    /// The turn journal's record of this call (`None` outside a journaled turn): the call
    /// is recorded as started, durably, before the tool runs — or not run at all.
    pub journal: Option<crate::journal::JournalCall>,
    /// A person must approve this call, for this reason, whatever the policy says (a resumed
    /// turn's call whose outcome before the crash is unknown).
    pub reapprove: Option<String>,
}

impl Invocation {
    /// A call of `tool` with `args` by `principal`. An agent principal calls as itself (its
    /// id becomes `agent_id`, so its ceiling applies); anyone else has no agent context.
    pub fn new(tool: impl Into<String>, args: Value, principal: Principal) -> Self {
        let agent_id = match &principal {
            Principal::Agent { id } => Some(id.clone()),
            _ => None,
        };
        Invocation {
            tool: tool.into(),
            args,
            principal,
            request_id: None,
            agent_id,
            session_id: None,
            channel_id: None,
            depth: 0,
            scopes: Vec::new(),
            taint: None,
            intent: None,
            journal: None,
            reapprove: None,
        }
    }

    /// Adds a scope the call must stay inside.
    pub fn within(mut self, scope: Scope) -> Self {
        self.scopes.push(scope);
        self
    }

    /// Makes the call part of a turn with this taint.
    pub fn tainted_by(mut self, taint: Taint) -> Self {
        self.taint = Some(taint);
        self
    }

    /// Sets the request id.
    pub fn with_request_id(mut self, id: impl Into<String>) -> Self {
        self.request_id = Some(id.into());
        self
    }
}

/// What came of an invocation. JSON shape (a contract):
/// `{"status", "value", "error", "elapsed_ms", "tool", "request_id", "ok"}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InvocationResult {
    /// Outcome.
    pub status: Status,
    /// The tool's output when `ok`, else `null`.
    pub value: Value,
    /// What went wrong, when not `ok`.
    pub error: Option<String>,
    /// Wall time in the pipeline, milliseconds.
    pub elapsed_ms: f64,
    /// Tool name as requested.
    pub tool: String,
    /// Request id.
    pub request_id: String,
    /// The call was refused by one of its [`Invocation::scopes`] (not part of the wire
    /// shape: surfaces that answer such a refusal differently, like the control API's 403,
    /// read it).
    #[serde(skip)]
    pub out_of_scope: bool,
    /// For `rate_limited`: seconds until the window that refused the call has room again
    /// (a refused call is not counted, so a retry after this is let through).
    pub retry_after_secs: Option<u64>,
}

impl InvocationResult {
    /// `status == ok`.
    pub fn ok(&self) -> bool {
        self.status == Status::Ok
    }
}

impl Serialize for InvocationResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("InvocationResult", 7)?;
        st.serialize_field("status", &self.status)?;
        st.serialize_field("value", &self.value)?;
        st.serialize_field("error", &self.error)?;
        st.serialize_field("elapsed_ms", &self.elapsed_ms)?;
        st.serialize_field("tool", &self.tool)?;
        st.serialize_field("request_id", &self.request_id)?;
        st.serialize_field("ok", &self.ok())?;
        if let Some(secs) = self.retry_after_secs {
            st.serialize_field("retry_after_secs", &secs)?;
        }
        st.end()
    }
}

/// A guard's refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// One of `Denied`, `RateLimited`, `ApprovalDenied` (anything else is treated as `Denied`).
    pub status: Status,
    /// Why, for the caller (the model reads it).
    pub message: String,
}

/// A pre-execution stage: access control, rate limits and approval plug in here, in order.
#[async_trait]
pub trait Guard: Send + Sync {
    /// Short name for logs.
    fn name(&self) -> &str;
    /// Lets the call through or refuses it.
    async fn check(&self, tool: &RegisteredTool, call: &Invocation) -> Result<(), Refusal>;
}

/// A post-execution stage on successful output (content safety on web-facing tools).
pub trait OutputFilter: Send + Sync {
    /// Returns the value the caller gets.
    fn filter(&self, tool: &RegisteredTool, value: Value) -> Value;
}

/// Runs tool calls through the pipeline.
pub struct Invoker {
    registry: Arc<Registry>,
    env: Arc<Env>,
    audit: Arc<dyn AuditSink>,
    policy: Arc<AccessPolicy>,
    limiter: Arc<RateLimiter>,
    approvals: Option<Arc<Approvals>>,
    safety: ContentSafety,
    taint: TaintPolicy,
    monitor: Monitor,
    alert_sinks: Vec<Arc<dyn AlertSink>>,
    guards: Vec<Arc<dyn Guard>>,
    filters: Vec<Arc<dyn OutputFilter>>,
    default_timeout: Duration,
    budgets: std::sync::OnceLock<Arc<crate::budget::Budgets>>,
    refusals: std::sync::Mutex<RefusalLog>,
}

/// How many refusal records the audit log takes per minute: per (kind, principal), and in
/// all. Past them a flood is counted and summed up in one record when its minute is over.
const REFUSALS_PER_KEY: u32 = 10;
const REFUSALS_PER_MINUTE: u32 = 100;

/// The refusals recorded this minute.
#[derive(Default)]
struct RefusalLog {
    minute: u64,
    total: u32,
    by_key: std::collections::HashMap<(String, String), u32>,
    suppressed: u64,
}

impl Invoker {
    /// An invoker over `registry`, auditing to `audit`. The default per-tool timeout is
    /// `tools.timeout_secs` from the config in `env`.
    pub fn new(registry: Arc<Registry>, env: Arc<Env>, audit: Arc<dyn AuditSink>) -> Self {
        // Tools that record events of their own (a browser's refused requests) write here.
        env.attach_audit(audit.clone());
        let default_timeout = Duration::from_secs(env.config.tools.timeout_secs.max(1));
        let sec = &env.config.security;
        Invoker {
            policy: Arc::new(AccessPolicy::from_config(&env.config)),
            limiter: Arc::new(RateLimiter::new(sec.rate_limits.clone(), None)),
            approvals: None,
            safety: ContentSafety::new(sec.content_safety.clone()),
            taint: TaintPolicy::new(sec.taint.clone()),
            monitor: Monitor::new(sec.content_safety.monitor.clone()),
            alert_sinks: Vec::new(),
            registry,
            env,
            audit,
            guards: Vec::new(),
            filters: Vec::new(),
            default_timeout,
            refusals: Default::default(),
            budgets: std::sync::OnceLock::new(),
        }
    }

    /// Persists rate-limit counters through `log` (a local log's last day is read before the
    /// first check; a shared log counts every call itself).
    pub fn with_rate_log(mut self, log: Arc<dyn RateLog>) -> Self {
        self.limiter = Arc::new(RateLimiter::new(
            self.env.config.security.rate_limits.clone(),
            Some(log),
        ));
        self
    }

    /// Gated calls wait on `approvals`. Without it they are refused (or run, under
    /// `security.hitl.fail_mode: open`).
    pub fn with_approvals(mut self, approvals: Arc<Approvals>) -> Self {
        self.approvals = Some(approvals);
        self
    }

    /// Sends alerts to `sink` as well as to the audit log.
    pub fn with_alert_sink(mut self, sink: Arc<dyn AlertSink>) -> Self {
        self.alert_sinks.push(sink);
        self
    }

    /// Sets the budgets every model call of the agents running through this invoker is
    /// reserved against (once; later calls are ignored).
    pub fn attach_budgets(&self, budgets: Arc<crate::budget::Budgets>) {
        let _ = self.budgets.set(budgets);
    }

    /// The budgets, once attached.
    pub fn budgets(&self) -> Option<&Arc<crate::budget::Budgets>> {
        self.budgets.get()
    }

    /// The access policy every call is checked against.
    pub fn policy(&self) -> &Arc<AccessPolicy> {
        &self.policy
    }

    /// The behaviour monitor (a cluster member shares its observations with the others).
    pub fn monitor(&self) -> &Monitor {
        &self.monitor
    }

    /// The approval hub, when one is attached.
    pub fn approvals(&self) -> Option<&Arc<Approvals>> {
        self.approvals.as_ref()
    }

    /// The content-safety stage (its configuration, and `strata safety scan`).
    pub fn safety(&self) -> &ContentSafety {
        &self.safety
    }

    /// The taint policy (`security.taint`), for the agent loop that starts turns.
    pub fn taint_policy(&self) -> &TaintPolicy {
        &self.taint
    }

    /// Records a refusal that happened before any tool call — a request without a valid
    /// token (`unauthenticated`), a sender refused at layer 1 (`layer1`) — as an audit event
    /// with its principal (`unknown` when nobody was recognised) and route. At most
    /// `REFUSALS_PER_KEY` per kind and principal and `REFUSALS_PER_MINUTE` in all are written
    /// each minute; the rest are counted and one `suppressed` event says how many when the
    /// minute is over, so a flood cannot fill the disk.
    pub fn refusal(&self, kind: &str, principal: &str, route: &str, detail: &str) {
        let minute = strata_engine::clock::now_ms() as u64 / 60_000;
        let (write, summary) = {
            let mut log = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
            let mut summary = None;
            if log.minute != minute {
                if log.suppressed > 0 {
                    summary = Some(log.suppressed);
                }
                *log = RefusalLog {
                    minute,
                    ..RefusalLog::default()
                };
            }
            let key = (kind.to_owned(), principal.to_owned());
            let n = log.by_key.get(&key).copied().unwrap_or(0);
            let write = n < REFUSALS_PER_KEY && log.total < REFUSALS_PER_MINUTE;
            if write {
                log.total += 1;
                if log.by_key.len() < 10_000 {
                    log.by_key.insert(key, n + 1);
                }
            } else {
                log.suppressed += 1;
            }
            (write, summary)
        };
        if let Some(n) = summary {
            self.audit.event(&serde_json::json!({
                "ts": strata_engine::clock::now_rfc3339(), "event": "refusal", "kind": "suppressed",
                "suppressed": n,
                "detail": format!("{n} more refusals in the previous minute were not written one by one"),
            }));
        }
        tracing::info!(kind, principal, route, "refused: {detail}");
        if write {
            self.audit.event(&serde_json::json!({
                "ts": strata_engine::clock::now_rfc3339(), "event": "refusal", "kind": kind,
                "principal": principal, "route": route, "detail": detail,
            }));
        }
    }

    /// Records `alert` in the audit log, the tracing log and every alert sink.
    pub fn alert(&self, alert: Alert) {
        strata_engine::meters::alert(alert.kind, &alert.rule);
        tracing::warn!(kind = alert.kind, rule = %alert.rule, tool = ?alert.tool, agent = ?alert.agent_id, "security alert: {}", alert.message);
        self.audit.event(&alert.to_event());
        for s in &self.alert_sinks {
            s.alert(&alert);
        }
    }

    /// Adds a guard after the existing ones.
    pub fn with_guard(mut self, guard: Arc<dyn Guard>) -> Self {
        self.guards.push(guard);
        self
    }

    /// Adds an output filter after the existing ones.
    pub fn with_output_filter(mut self, filter: Arc<dyn OutputFilter>) -> Self {
        self.filters.push(filter);
        self
    }

    /// The registry this invoker resolves against.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The shared runtime environment.
    pub fn env(&self) -> &Arc<Env> {
        &self.env
    }

    /// Runs one call through every stage. Never panics, never returns `Err`: every outcome is
    /// an [`InvocationResult`], and every call leaves one audit record. The call is a tracing
    /// span (`tool`, with the tool and request id) inside its turn's.
    pub async fn invoke(&self, mut call: Invocation) -> InvocationResult {
        let request_id = call
            .request_id
            .get_or_insert_with(|| uuid::Uuid::new_v4().to_string())
            .clone();
        let span = tracing::info_span!("tool", tool = %call.tool, request_id = %request_id);
        let r = tracing::Instrument::instrument(self.run_call(call), span.clone()).await;
        span.in_scope(|| {
            tracing::debug!(
                status = r.status.as_str(),
                ms = r.elapsed_ms,
                "tool call done"
            );
        });
        r
    }

    async fn run_call(&self, call: Invocation) -> InvocationResult {
        let started = Instant::now();
        let request_id = call
            .request_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        // The taint as the call was decided (a source's own record shows the turn before it).
        let taint_before = call
            .taint
            .as_ref()
            .filter(|t| t.is_tainted())
            .map(Taint::snapshot);
        let out_of_scope = call
            .scopes
            .iter()
            .find_map(|s| s.check(&call.tool).err().map(|e| e.0));
        let resolved = match out_of_scope {
            Some(_) => None,
            None => self.registry.get(&call.tool),
        };
        let (status, value, error) = match (&resolved, &out_of_scope) {
            (_, Some(denied)) => (Status::Denied, Value::Null, Some(denied.clone())),
            (None, None) => (
                Status::UnknownTool,
                Value::Null,
                Some(format!(
                    "unknown tool `{}`; list the available tools with `strata tools`",
                    call.tool
                )),
            ),
            (Some(tool), None) => self.run(tool, &call, &request_id).await,
        };
        // The rate-limit stage hands its retry time over in the value, which a refused call
        // does not otherwise have.
        let (value, retry_after_secs) = match status {
            Status::RateLimited => (
                Value::Null,
                value.get("retry_after_secs").and_then(Value::as_u64),
            ),
            _ => (value, None),
        };
        let took = started.elapsed();
        let elapsed_ms = (took.as_secs_f64() * 1e6).round() / 1e3;
        // Labels stay bounded: a name the registry does not know is not a label value.
        let known = resolved.is_some() || self.registry.get(&call.tool).is_some();
        strata_engine::meters::tool_call(
            if known { &call.tool } else { "_unknown" },
            &resolved
                .as_ref()
                .map_or_else(|| "none".to_owned(), |t| t.layer.to_string()),
            status.as_str(),
            took,
        );
        self.audit.record(&AuditRecord {
            ts: now_rfc3339(),
            request_id: request_id.clone(),
            tool: call.tool.clone(),
            layer: resolved.as_ref().map(|t| t.layer.to_string()),
            principal: call.principal.to_string(),
            agent_id: call.agent_id.clone(),
            session_id: call.session_id.clone(),
            status: status.as_str().to_owned(),
            elapsed_ms,
            args: redact(&call.args),
            error: error.clone(),
            taint: taint_before,
        });
        InvocationResult {
            status,
            value,
            error,
            elapsed_ms,
            tool: call.tool,
            request_id,
            out_of_scope: out_of_scope.is_some(),
            retry_after_secs,
        }
    }

    async fn run(
        &self,
        tool: &RegisteredTool,
        call: &Invocation,
        request_id: &str,
    ) -> (Status, Value, Option<String>) {
        // Validate.
        if !call.args.is_object() {
            return (
                Status::ValidationError,
                Value::Null,
                Some(format!(
                    "arguments must be a JSON object, got {}",
                    json_type(&call.args)
                )),
            );
        }
        if let Err(e) = tool.tool.validate(&call.args) {
            return (Status::ValidationError, Value::Null, Some(e.to_string()));
        }
        let spec = tool.spec();
        let agent = call.agent_id.as_deref();
        let mk_alert = |kind, rule: String, message: String, score| Alert {
            kind,
            rule,
            message,
            agent_id: call.agent_id.clone(),
            tool: Some(call.tool.clone()),
            request_id: Some(request_id.to_owned()),
            score,
        };
        // Access control, layers 2 and 3.
        let decision = self.policy.decide(&call.principal, agent, spec);
        let approval_reason = match decision {
            Decision::Deny { layer, message } => {
                return (
                    Status::Denied,
                    Value::Null,
                    Some(format!("denied (layer {layer}): {message}")),
                );
            }
            Decision::Approve(reason) => Some(reason),
            Decision::Allow => None,
        };
        // Taint: a turn that took in outside content asks a person before a call that
        // content steers (security.taint.mode: flow), or before every gated effect (turn).
        let tier = self.policy.tier(&call.principal);
        let approval_reason = match (
            call.taint.as_ref().filter(|t| t.is_tainted()),
            self.taint.checks(spec, tier),
        ) {
            (Some(t), Some(check)) => match self.steered(t, check, call) {
                Some(how) => {
                    strata_engine::meters::taint_escalation(&call.tool);
                    let mut why = format!(
                        "tainted: {} before asking to run `{}`",
                        t.explain(),
                        call.tool
                    );
                    if !how.is_empty() {
                        why.push_str(": ");
                        why.push_str(&how);
                    }
                    Some(match approval_reason {
                        Some(r) => format!("{r}; {why}"),
                        None => why,
                    })
                }
                None => approval_reason,
            },
            _ => approval_reason,
        };
        // Behaviour monitor (alerts only; a rule once per agent and session, repeats logged).
        if let Some(a) = agent {
            let sensitive = self.monitor.is_sensitive(spec, self.policy.is_gated(spec));
            for f in self
                .monitor
                .observe_in(a, call.session_id.as_deref(), &call.tool, sensitive)
            {
                let alert = mk_alert("behaviour", f.rule.to_owned(), f.message, None);
                match f.repeat {
                    0 => self.alert(alert),
                    n => self.audit.event(&crate::monitor::repeat_event(&alert, n)),
                }
            }
        }
        // Rate limit: recorded before the tool runs, so failures count.
        let key = match agent {
            Some(a) => format!("agent:{a}"),
            None => call.principal.to_string(),
        };
        match self.limiter.check(&key, agent, &call.tool).await {
            RateVerdict::Ok => {}
            RateVerdict::Unavailable(e) => {
                let msg = format!(
                    "rate-limit counters unavailable ({e}); the call was not run — try again when the store is back"
                );
                return (Status::Error, Value::Null, Some(msg));
            }
            RateVerdict::Refuse(e) => {
                strata_engine::meters::rate_limited(&call.tool, e.window);
                let msg = format!("{e} for {key} on `{}`", call.tool);
                self.alert(mk_alert(
                    "rate_limit",
                    e.window.to_owned(),
                    msg.clone(),
                    None,
                ));
                return (
                    Status::RateLimited,
                    serde_json::json!({"retry_after_secs": e.retry_after_secs}),
                    Some(msg),
                );
            }
            RateVerdict::LogOnly(e) => {
                let msg = format!("{e} for {key} on `{}` (mode: log, call allowed)", call.tool);
                self.alert(mk_alert("rate_limit", e.window.to_owned(), msg, None));
            }
        }
        // Guards.
        for g in &self.guards {
            if let Err(r) = g.check(tool, call).await {
                let status = match r.status {
                    Status::RateLimited | Status::ApprovalDenied | Status::Denied => r.status,
                    _ => Status::Denied,
                };
                tracing::debug!(guard = g.name(), tool = %call.tool, "call refused");
                return (status, Value::Null, Some(r.message));
            }
        }
        // A resumed turn's call with an unknown outcome runs again only with a person's yes.
        let approval_reason = match (approval_reason, &call.reapprove) {
            (Some(r), Some(again)) => Some(format!("{again}; {r}")),
            (r, again) => r.or_else(|| again.clone()),
        };
        // Approval.
        if let Some(reason) = approval_reason
            && let Err(msg) = {
                // What the turn recorded is written while a person decides.
                if let Some(j) = &call.journal {
                    j.turn.hand_off();
                }
                self.approve(call, request_id, &reason).await
            }
        {
            return (Status::ApprovalDenied, Value::Null, Some(msg));
        }
        // Execute in its own task: a panic stays there, a timeout aborts it.
        let ctx = ToolContext {
            agent_id: call.agent_id.clone(),
            session_id: call.session_id.clone(),
            channel_id: call.channel_id.clone(),
            principal: call.principal.clone(),
            request_id: request_id.to_owned(),
            env: self.env.clone(),
            depth: call.depth,
            policy: self.policy.clone(),
            tools: self.registry.clone(),
            taint: call.taint.clone(),
            idempotency_key: call.journal.as_ref().map(|j| j.idempotency_key.clone()),
            resumed: call.journal.as_ref().is_some_and(|j| j.resumed),
        };
        // The journal's record that the call is about to run, durable before it does: no
        // effect ever runs without it.
        if let Some(j) = &call.journal {
            if let Err(e) = j
                .turn
                .record_started(
                    &j.key,
                    &call.tool,
                    &call.args,
                    spec.side_effects,
                    &j.idempotency_key,
                )
                .await
            {
                return (
                    Status::Error,
                    Value::Null,
                    Some(format!(
                        "the turn journal is unavailable ({e}); `{}` was not run — try again when the store is back",
                        call.tool
                    )),
                );
            }
            j.turn.crash_point("tool_started").await;
            // Not waited for (`journal.commit_before_reads: false`) and the tool may take a
            // while (it reaches the network or starts a process): what the turn recorded is
            // written while it runs.
            if spec.capabilities.iter().any(|c| {
                matches!(
                    c,
                    strata_engine::Capability::Network | strata_engine::Capability::Subprocess
                )
            }) {
                j.turn.hand_off();
            }
        }
        let timeout = tool.spec().timeout.unwrap_or(self.default_timeout);
        // What the result is to the turn: untrusted content from a source, or trusted content
        // from a tool whose own arguments are clean and that brought no new taint.
        let marks_before = call.taint.as_ref().map(Taint::marks);
        // A source that vouches for fields of its result does not vouch for a value its own
        // arguments carried from untrusted content (an echo).
        let echoes: Vec<String> = match (&call.taint, spec.trusted_fields.is_empty()) {
            (Some(t), false) => t.steered_values(&call.args),
            _ => Vec::new(),
        };
        let source = call
            .taint
            .as_ref()
            .filter(|_| self.taint.is_source(spec))
            .map(|_| TaintSource::tool(&call.tool, &call.args));
        let t = tool.tool.clone();
        let args = call.args.clone();
        let mut handle = tokio::spawn(async move { t.call(&ctx, args).await });
        let joined = tokio::time::timeout(timeout, &mut handle).await;
        if call.journal.is_some() {
            crate::journal::crash_point("tool_ran");
        }
        // What the tool returned (or failed with) reaches the model: a source taints the turn
        // whatever came of the call.
        if let (Some(t), Some(source)) = (&call.taint, &source) {
            // Observed before it is marked (with what it returned, below): a trace never sees
            // the source blind.
            t.observe(source, "");
            if t.mark(source.clone()) {
                self.audit.event(&serde_json::json!({
                    "ts": now_rfc3339(), "event": "taint", "request_id": request_id,
                    "tool": call.tool, "agent_id": call.agent_id,
                    "session_id": call.session_id, "source": source,
                }));
            }
        }
        let joined = match joined {
            Ok(j) => j,
            Err(_) => {
                handle.abort();
                return (
                    Status::Error,
                    Value::Null,
                    Some(format!(
                        "tool `{}` timed out after {}; it was stopped",
                        call.tool,
                        humantime::format_duration(timeout)
                    )),
                );
            }
        };
        let result = match joined {
            Ok(Ok(out)) => {
                let mut value = out.0;
                if spec.web_facing {
                    let filtered = self.safety.filter(&call.tool, value);
                    let scan = &filtered.scan;
                    if scan.alert {
                        self.alert(mk_alert(
                            "content_safety",
                            strata_engine::safety::rule_names(&scan.rules),
                            format!(
                                "output of `{}` scored {}/10 for prompt injection ({:?})",
                                call.tool, scan.score, scan.verdict
                            ),
                            Some(scan.score),
                        ));
                    }
                    if let Some(a) = agent {
                        self.monitor.web_read(a);
                    }
                    value = match filtered.value {
                        Ok(v) => v,
                        Err(msg) => return (Status::Error, Value::Null, Some(msg)),
                    };
                }
                for f in &self.filters {
                    value = f.filter(tool, value);
                }
                (Status::Ok, value, None)
            }
            Ok(Err(e @ ToolError::InvalidArgs { .. })) => {
                (Status::ValidationError, Value::Null, Some(e.to_string()))
            }
            Ok(Err(ToolError::Failed(msg))) => (Status::Error, Value::Null, Some(msg)),
            Err(join) if join.is_panic() => {
                let payload = join.into_panic();
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_owned());
                tracing::error!(tool = %call.tool, panic = %msg, "tool panicked");
                (
                    Status::Error,
                    Value::Null,
                    Some(format!("tool `{}` panicked: {msg}", call.tool)),
                )
            }
            Err(join) => (
                Status::Error,
                Value::Null,
                Some(format!("tool `{}` was cancelled: {join}", call.tool)),
            ),
        };
        if let Some(t) = &call.taint {
            let text = || match &result.2 {
                None => strata_engine::provenance::text_of(&result.1),
                Some(e) => e.clone(),
            };
            match &source {
                // A source that vouches for some fields of its structured result: their
                // values are trusted content, the rest is not.
                Some(source) if result.2.is_none() && !spec.trusted_fields.is_empty() => {
                    t.take_in_fields(source, &result.1, &spec.trusted_fields, &echoes)
                }
                Some(source) => t.observe(source, &text()),
                None if marks_before == Some(t.marks()) && t.trace(&call.args) == Trace::Clean => {
                    t.vouch_text(&text())
                }
                None => {}
            }
        }
        result
    }

    /// Marks `call`'s turn as running the call would have, for a call whose outcome a
    /// resumed turn takes from its journal (`text`: what the model was told): a source's
    /// result taints the turn; another tool's, from clean arguments, is vouched for.
    pub fn replay_taint(&self, call: &Invocation, text: &str) {
        let (Some(t), Some(tool)) = (&call.taint, self.registry.get(&call.tool)) else {
            return;
        };
        if self.taint.is_source(tool.spec()) {
            let source = TaintSource::tool(&call.tool, &call.args);
            t.observe(&source, "");
            t.mark(source.clone());
            let fields = &tool.spec().trusted_fields;
            match serde_json::from_str::<Value>(text) {
                Ok(v) if !fields.is_empty() && (v.is_object() || v.is_array()) => {
                    let echoes = t.steered_values(&call.args);
                    t.take_in_fields(&source, &v, fields, &echoes);
                }
                _ => t.observe(&source, text),
            }
        } else if t.trace(&call.args) == Trace::Clean {
            t.vouch_text(text);
        }
    }

    /// Why a tainted turn's call of `call.tool` needs a person (`Some`: the reasons, empty
    /// for `mode: turn`'s gated effects, which need no more), or `None` when it does not.
    fn steered(&self, t: &Taint, check: Check, call: &Invocation) -> Option<String> {
        let mut why = Vec::new();
        if check == Check::Effect {
            match (self.taint.mode(), &call.intent) {
                (TaintMode::Turn, _) => return Some(String::new()),
                (TaintMode::Flow, None) => {
                    why.push("no plan made from your request alone covers this call".to_owned())
                }
                (TaintMode::Flow, Some(i)) if !i.allows(&call.tool) => why.push(format!(
                    "your request did not call for `{}` (planned: {})",
                    call.tool,
                    i.describe()
                )),
                (TaintMode::Flow, Some(_)) => {}
            }
        }
        match t.trace(&call.args) {
            Trace::Clean => {}
            Trace::Steered(v) => why.extend(
                v.iter()
                    // A call that only sends its arguments out is steered by an address or a
                    // query, not by a channel or file an earlier read found.
                    .filter(|s| {
                        check == Check::Effect
                            || strata_engine::provenance::addresses_out(&s.argument, &s.value)
                    })
                    .take(3)
                    .map(ToString::to_string),
            ),
            Trace::Untraceable => why.push(
                "what the turn took in cannot be traced to (too much of it, or it came in \
                 on another instance)"
                    .to_owned(),
            ),
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

impl Invoker {
    /// Waits for a human's decision on a gated call; `Err` is the text the caller gets.
    async fn approve(
        &self,
        call: &Invocation,
        request_id: &str,
        reason: &str,
    ) -> Result<(), String> {
        let fail_open = self.env.config.security.hitl.fail_mode == FailMode::Open;
        let Some(approvals) = &self.approvals else {
            let msg = format!(
                "`{}` needs human approval ({reason}) but no approval channel is running; \
                 the tool did not run",
                call.tool
            );
            return if fail_open {
                tracing::warn!(tool = %call.tool, "{msg} — allowed by fail_mode: open");
                Ok(())
            } else {
                Err(msg)
            };
        };
        let args = redact(&call.args);
        let on_behalf = call
            .agent_id
            .as_deref()
            .map(|a| format!("agent `{a}` (for {})", call.principal))
            .unwrap_or_else(|| call.principal.to_string());
        let record = ApprovalRecord {
            id: request_id.to_owned(),
            agent_id: call.agent_id.clone(),
            tool: call.tool.clone(),
            principal: call.principal.to_string(),
            description: format!(
                "{on_behalf} wants to run `{}` with {}; reason: {reason}",
                call.tool,
                preview(&args)
            ),
            args,
            status: ApprovalStatus::Pending,
            approver: None,
            reason: None,
            created_at: now_secs(),
            decided_at: None,
        };
        self.audit.event(&serde_json::json!({
            "ts": now_rfc3339(), "event": "approval", "id": request_id, "tool": call.tool,
            "status": "pending", "description": record.description,
        }));
        let outcome = approvals.request(record).await;
        let (status, approver, result) = match &outcome {
            ApprovalOutcome::Approved { by } => ("approved", Some(by.clone()), Ok(())),
            ApprovalOutcome::Denied { by, reason } => (
                "denied",
                Some(by.clone()),
                Err(format!(
                    "{by} denied `{}`{}; the tool did not run",
                    call.tool,
                    reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                )),
            ),
            ApprovalOutcome::TimedOut => (
                "timeout",
                None,
                Err(format!(
                    "nobody approved `{}` within {}; the tool did not run",
                    call.tool,
                    humantime::format_duration(approvals.timeout())
                )),
            ),
            ApprovalOutcome::Failed(e) => (
                "error",
                None,
                Err(format!(
                    "the approval of `{}` failed ({e}); the tool did not run",
                    call.tool
                )),
            ),
        };
        strata_engine::meters::approval_decided(status);
        self.audit.event(&serde_json::json!({
            "ts": now_rfc3339(), "event": "approval", "id": request_id, "tool": call.tool,
            "status": status, "approver": approver,
        }));
        self.alert(Alert {
            kind: "approval",
            rule: status.to_owned(),
            message: format!(
                "approval of `{}` {status}{}",
                call.tool,
                approver.map(|a| format!(" by {a}")).unwrap_or_default()
            ),
            agent_id: call.agent_id.clone(),
            tool: Some(call.tool.clone()),
            request_id: Some(request_id.to_owned()),
            score: None,
        });
        match result {
            Err(msg)
                if fail_open
                    && matches!(
                        outcome,
                        ApprovalOutcome::TimedOut | ApprovalOutcome::Failed(_)
                    ) =>
            {
                tracing::warn!(tool = %call.tool, "{msg} — allowed by fail_mode: open");
                Ok(())
            }
            r => r,
        }
    }
}

/// A short one-line rendering of arguments for people.
fn preview(args: &Value) -> String {
    let s = args.to_string();
    if s.chars().count() > 300 {
        format!("{}…", s.chars().take(300).collect::<String>())
    } else {
        s
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
