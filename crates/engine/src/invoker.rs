//! The Invoker: the one path every tool call takes, whoever the caller.
//!
//! ```text
//! resolve → validate → guards (authorize, rate limit, approval: later issues) → execute
//! (timeout, panic caught) → output filters (content safety: later issue) → audit → result
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

use crate::audit::{AuditRecord, AuditSink, now_rfc3339, redact};
use crate::principal::Principal;
use crate::registry::{RegisteredTool, Registry};
use crate::tool::{RuntimeEnv, ToolContext, ToolError};

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
}

impl Invocation {
    /// A call of `tool` with `args` by `principal`, no agent context.
    pub fn new(tool: impl Into<String>, args: Value, principal: Principal) -> Self {
        Invocation {
            tool: tool.into(),
            args,
            principal,
            request_id: None,
            agent_id: None,
            session_id: None,
            channel_id: None,
        }
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
    env: Arc<RuntimeEnv>,
    audit: Arc<dyn AuditSink>,
    guards: Vec<Arc<dyn Guard>>,
    filters: Vec<Arc<dyn OutputFilter>>,
    default_timeout: Duration,
}

impl Invoker {
    /// An invoker over `registry`, auditing to `audit`. The default per-tool timeout is
    /// `tools.timeout_secs` from the config in `env`.
    pub fn new(registry: Arc<Registry>, env: Arc<RuntimeEnv>, audit: Arc<dyn AuditSink>) -> Self {
        let default_timeout = Duration::from_secs(env.config.tools.timeout_secs.max(1));
        Invoker {
            registry,
            env,
            audit,
            guards: Vec::new(),
            filters: Vec::new(),
            default_timeout,
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
    pub fn env(&self) -> &Arc<RuntimeEnv> {
        &self.env
    }

    /// Runs one call through every stage. Never panics, never returns `Err`: every outcome is
    /// an [`InvocationResult`], and every call leaves one audit record.
    pub async fn invoke(&self, call: Invocation) -> InvocationResult {
        let started = Instant::now();
        let request_id = call
            .request_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let resolved = self.registry.get(&call.tool);
        let (status, value, error) = match &resolved {
            None => (
                Status::UnknownTool,
                Value::Null,
                Some(format!(
                    "unknown tool `{}`; list the available tools with `strata tools`",
                    call.tool
                )),
            ),
            Some(tool) => self.run(tool, &call, &request_id).await,
        };
        let elapsed_ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
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
        });
        InvocationResult {
            status,
            value,
            error,
            elapsed_ms,
            tool: call.tool,
            request_id,
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
        // Execute in its own task: a panic stays there, a timeout aborts it.
        let ctx = ToolContext {
            agent_id: call.agent_id.clone(),
            session_id: call.session_id.clone(),
            channel_id: call.channel_id.clone(),
            principal: call.principal.clone(),
            request_id: request_id.to_owned(),
            env: self.env.clone(),
        };
        let timeout = tool.spec().timeout.unwrap_or(self.default_timeout);
        let t = tool.tool.clone();
        let args = call.args.clone();
        let mut handle = tokio::spawn(async move { t.call(&ctx, args).await });
        let joined = match tokio::time::timeout(timeout, &mut handle).await {
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
        match joined {
            Ok(Ok(out)) => {
                let mut value = out.0;
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
        }
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
