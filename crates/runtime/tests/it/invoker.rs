//! The Invoker pipeline: statuses, panics, timeouts, guards, audit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use strata_engine::{Principal, ToolContext, ToolError, async_trait, tool};
use strata_runtime::{
    Guard, Invocation, Invoker, OutputFilter, Refusal, RegisteredTool, Registry, Status,
};
use strata_store::JsonlAudit;

/// Repeats a word.
#[tool]
async fn repeat(
    _ctx: &ToolContext,
    /// The word.
    word: String,
    /// How often.
    times: u8,
    /// A secret that must never reach the audit log.
    api_key: Option<String>,
) -> Result<String, ToolError> {
    let _ = api_key;
    Ok(word.repeat(times.into()))
}

/// Always panics.
#[tool]
async fn boom() -> Result<(), ToolError> {
    panic!("kaboom {}", 42);
}

/// Fails with a message.
#[tool]
async fn fails() -> Result<(), String> {
    Err("the disk is on fire".into())
}

static TICKS: AtomicUsize = AtomicUsize::new(0);

/// Ticks forever.
#[tool(timeout_secs = 1)]
async fn forever() -> Result<(), ToolError> {
    loop {
        TICKS.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn invoker(dir: &std::path::Path) -> (Invoker, Arc<JsonlAudit>) {
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let audit = Arc::new(JsonlAudit::open(&dir.join("audit.jsonl")).expect("audit"));
    (Invoker::new(reg, crate::env_in(dir), audit.clone()), audit)
}

fn call(tool: &str, args: Value) -> Invocation {
    Invocation::new(tool, args, Principal::Operator)
}

fn audit_lines(audit: &JsonlAudit) -> Vec<Value> {
    audit.close();
    std::fs::read_to_string(audit.path())
        .expect("audit file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

#[tokio::test]
async fn ok_result_and_request_id_round_trip() {
    let dir = tempfile::tempdir().expect("tmp");
    let (inv, audit) = invoker(dir.path());
    let r = inv
        .invoke(
            call(
                "repeat",
                json!({"word": "ab", "times": 3, "api_key": "sk-live-123"}),
            )
            .with_request_id("req-1"),
        )
        .await;
    assert_eq!(r.status, Status::Ok);
    assert_eq!(r.value, json!("ababab"));
    assert_eq!(r.request_id, "req-1");
    assert!(r.error.is_none());
    let wire = serde_json::to_value(&r).expect("ser");
    let mut keys: Vec<&str> = wire
        .as_object()
        .expect("obj")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "elapsed_ms",
            "error",
            "ok",
            "request_id",
            "status",
            "tool",
            "value"
        ]
    );
    assert_eq!(wire["ok"], true);

    let lines = audit_lines(&audit);
    assert_eq!(lines.len(), 1);
    let rec = &lines[0];
    assert_eq!(rec["tool"], "repeat");
    assert_eq!(rec["status"], "ok");
    assert_eq!(rec["principal"], "operator");
    assert_eq!(rec["request_id"], "req-1");
    assert_eq!(rec["args"]["api_key"], "[redacted]");
    assert_eq!(rec["args"]["word"], "ab");
    assert!(rec["ts"].as_str().expect("ts").ends_with('Z'));
    assert!(rec["elapsed_ms"].is_number());
}

#[tokio::test]
async fn every_failure_is_a_status_with_an_audit_record() {
    let dir = tempfile::tempdir().expect("tmp");
    let (inv, audit) = invoker(dir.path());

    let r = inv.invoke(call("nope", json!({}))).await;
    assert_eq!(r.status, Status::UnknownTool);
    assert!(
        r.error
            .as_deref()
            .expect("msg")
            .contains("unknown tool `nope`")
    );

    let r = inv.invoke(call("repeat", json!(["ab", 3]))).await;
    assert_eq!(r.status, Status::ValidationError);
    assert!(
        r.error
            .as_deref()
            .expect("msg")
            .contains("must be a JSON object")
    );

    let r = inv
        .invoke(call("repeat", json!({"word": "ab", "times": "x"})))
        .await;
    assert_eq!(r.status, Status::ValidationError);
    assert!(
        r.error.as_deref().expect("msg").contains("`times`"),
        "{r:?}"
    );

    let r = inv.invoke(call("fails", json!({}))).await;
    assert_eq!(r.status, Status::Error);
    assert_eq!(r.error.as_deref(), Some("the disk is on fire"));
    assert_eq!(r.value, Value::Null);

    let statuses: Vec<String> = audit_lines(&audit)
        .iter()
        .map(|l| l["status"].as_str().expect("status").to_owned())
        .collect();
    assert_eq!(
        statuses,
        [
            "unknown_tool",
            "validation_error",
            "validation_error",
            "error"
        ]
    );
}

#[tokio::test]
async fn a_panic_becomes_an_error_and_the_invoker_keeps_working() {
    let dir = tempfile::tempdir().expect("tmp");
    let (inv, _audit) = invoker(dir.path());
    let r = inv.invoke(call("boom", json!({}))).await;
    assert_eq!(r.status, Status::Error);
    let msg = r.error.expect("msg");
    assert!(
        msg.contains("panicked") && msg.contains("kaboom 42"),
        "{msg}"
    );
    let r = inv
        .invoke(call("repeat", json!({"word": "x", "times": 2})))
        .await;
    assert_eq!(r.value, json!("xx"));
}

#[tokio::test]
async fn a_timeout_becomes_an_error_and_stops_the_tool() {
    let dir = tempfile::tempdir().expect("tmp");
    let (inv, _audit) = invoker(dir.path());
    let r = inv.invoke(call("forever", json!({}))).await;
    assert_eq!(r.status, Status::Error);
    assert!(
        r.error
            .as_deref()
            .expect("msg")
            .contains("timed out after 1s"),
        "{r:?}"
    );
    assert!(r.elapsed_ms >= 1000.0);
    // The task was aborted: the counter stops moving.
    let before = TICKS.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(TICKS.load(Ordering::SeqCst), before);
}

struct DenyAgents;

#[async_trait]
impl Guard for DenyAgents {
    fn name(&self) -> &str {
        "deny-agents"
    }
    async fn check(&self, _tool: &RegisteredTool, call: &Invocation) -> Result<(), Refusal> {
        match call.principal {
            Principal::Agent { .. } => Err(Refusal {
                status: Status::Denied,
                message: "layer 2: agents may not call this".into(),
            }),
            _ => Ok(()),
        }
    }
}

struct Upper;

impl OutputFilter for Upper {
    fn filter(&self, _tool: &RegisteredTool, value: Value) -> Value {
        match value {
            Value::String(s) => Value::String(s.to_uppercase()),
            v => v,
        }
    }
}

#[tokio::test]
async fn guards_run_after_validation_and_filters_after_execution() {
    let dir = tempfile::tempdir().expect("tmp");
    let (inv, audit) = invoker(dir.path());
    let inv = inv
        .with_guard(Arc::new(DenyAgents))
        .with_output_filter(Arc::new(Upper));
    let agent = Principal::Agent {
        id: "helper".into(),
    };

    let r = inv
        .invoke(Invocation::new(
            "repeat",
            json!({"word": "a", "times": 1}),
            agent.clone(),
        ))
        .await;
    assert_eq!(r.status, Status::Denied);
    assert_eq!(
        r.error.as_deref(),
        Some("layer 2: agents may not call this")
    );

    // A malformed call is reported as such before any guard looks at it.
    let r = inv
        .invoke(Invocation::new("repeat", json!({"word": "a"}), agent))
        .await;
    assert_eq!(r.status, Status::ValidationError);

    let r = inv
        .invoke(call("repeat", json!({"word": "a", "times": 2})))
        .await;
    assert_eq!(r.value, json!("AA"));
    let lines = audit_lines(&audit);
    assert_eq!(lines[0]["principal"], "agent:helper");
    assert_eq!(lines[0]["status"], "denied");
}
