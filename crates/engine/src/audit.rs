//! What the audit log records and where records go: [`AuditRecord`], the [`AuditSink`] and
//! [`AlertSink`] seams, [`AuditLog`] (reading it back), [`Alert`], and redaction (by key name
//! and by value shape). The JSONL file with its hash chain and rotation is storage:
//! `strata_store::audit_log`.

use serde::Serialize;
use serde_json::Value;

/// One audit record. Field names are a contract: operators' scripts read them.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// RFC 3339 UTC timestamp with milliseconds.
    pub ts: String,
    /// Request id of the invocation.
    pub request_id: String,
    /// Tool name as requested.
    pub tool: String,
    /// The tool's layer, when it resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<String>,
    /// Who called (`operator`, `agent:main`, `token:ci`…).
    pub principal: String,
    /// Agent on whose behalf, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Session, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Outcome status (`ok`, `error`, …).
    pub status: String,
    /// Wall time spent in the pipeline.
    pub elapsed_ms: f64,
    /// The arguments with secrets redacted.
    pub args: Value,
    /// The error message, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What had tainted the calling turn when the call was decided (absent when untainted).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "taint_list")]
    pub taint: Option<std::sync::Arc<[crate::taint::TaintSource]>>,
}

fn taint_list<S: serde::Serializer>(
    v: &Option<std::sync::Arc<[crate::taint::TaintSource]>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(list) => s.collect_seq(list.iter()),
        None => s.serialize_none(),
    }
}

/// Where audit records go.
pub trait AuditSink: Send + Sync {
    /// Records one invocation. Must not fail the call: sinks log their own problems.
    fn record(&self, record: &AuditRecord);

    /// Records another event (an alert, an approval decision): a JSON object with an
    /// `event` field. The default discards it.
    fn event(&self, _event: &Value) {}
}

/// The audit log read back (`GET /api/events`), wherever it is kept.
pub trait AuditLog: Send + Sync {
    /// The last `n` records and events, oldest first; an empty or missing log has none.
    /// Blocks on storage: call it off the async threads.
    fn tail(&self, n: usize) -> std::io::Result<Vec<Value>>;
}

/// A security alert: content safety, the behaviour monitor, rate-limit trips, approvals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// `content_safety`, `behaviour`, `rate_limit` or `approval`.
    pub kind: &'static str,
    /// The rule or outcome (`instruction_override`, `sensitive_after_web`, `minute`…).
    pub rule: String,
    /// One line for people.
    pub message: String,
    /// Agent, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Tool, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The invocation's request id, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Content-safety score, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
}

impl Alert {
    /// The audit-log form: `{"ts", "event": "alert", ...}`.
    pub fn to_event(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(o) = &mut v {
            o.insert("event".into(), Value::String("alert".into()));
            o.insert("ts".into(), Value::String(now_rfc3339()));
        }
        v
    }
}

/// Where alerts go besides the audit log (a Discord channel, a pager…).
pub trait AlertSink: Send + Sync {
    /// Delivers one alert. Must not block for long: queue and send elsewhere.
    fn alert(&self, alert: &Alert);
}

/// Discards records (benchmarks of the bare pipeline, embedders with their own audit).
pub struct NoAudit;

impl AuditSink for NoAudit {
    fn record(&self, _: &AuditRecord) {}
}

const REDACTED: &str = "[redacted]";

pub use crate::secret::is_secret_key;

/// A copy of `v` with the values of secret-looking keys replaced by `"[redacted]"`.
pub fn redact(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if is_secret_key(k) && !v.is_null() {
                        Value::String(REDACTED.to_owned())
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::String(s) => Value::String(redact_text(s).into_owned()),
        other => other.clone(),
    }
}

fn secret_shapes() -> &'static (regex::RegexSet, Vec<(regex::Regex, &'static str)>) {
    static SHAPES: std::sync::LazyLock<(regex::RegexSet, Vec<(regex::Regex, &'static str)>)> =
        std::sync::LazyLock::new(|| {
            let pats: &[(&str, &str)] = &[
                // PEM private keys (the whole block, or to the end when cut off).
                (
                    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
                    "[redacted private key]",
                ),
                // Authorization header values.
                (
                    r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{16,}",
                    "$1 [redacted]",
                ),
                // JWTs.
                (
                    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
                    "[redacted jwt]",
                ),
                // OpenAI / Anthropic style keys.
                (r"\bsk-[A-Za-z0-9_-]{20,}", "[redacted api key]"),
                // GitHub tokens.
                (
                    r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
                    "[redacted api key]",
                ),
                // AWS access key ids.
                (r"\b(AKIA|ASIA)[0-9A-Z]{16}\b", "[redacted api key]"),
                // Google API keys.
                (r"\bAIza[0-9A-Za-z_-]{35}", "[redacted api key]"),
                // Slack tokens.
                (r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "[redacted api key]"),
                // Stripe keys.
                (
                    r"\b[rsp]k_(live|test)_[A-Za-z0-9]{16,}",
                    "[redacted api key]",
                ),
                // Discord bot tokens.
                (
                    r"\b[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}",
                    "[redacted api key]",
                ),
            ];
            #[allow(clippy::expect_used)]
            let set = regex::RegexSet::new(pats.iter().map(|(p, _)| *p))
                .expect("built-in secret patterns");
            #[allow(clippy::expect_used)]
            let each = pats
                .iter()
                .map(|(p, r)| (regex::Regex::new(p).expect("built-in secret pattern"), *r))
                .collect();
            (set, each)
        });
    &SHAPES
}

/// `text` with values shaped like secrets (API keys of common vendors, JWTs, PEM private
/// keys, bearer/basic credentials) replaced by a marker.
pub fn redact_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() < 16 {
        return std::borrow::Cow::Borrowed(text);
    }
    let (set, each) = secret_shapes();
    let hits = set.matches(text);
    if !hits.matched_any() {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut s = text.to_owned();
    for i in hits.iter() {
        let (re, rep) = &each[i];
        s = re.replace_all(&s, *rep).into_owned();
    }
    std::borrow::Cow::Owned(s)
}

pub use crate::clock::now_rfc3339;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redacts_secret_keys_at_any_depth() {
        let v = json!({
            "path": "a.txt",
            "api_key": "sk-1",
            "headers": {"Authorization": "Bearer x", "Accept": "text/plain"},
            "list": [{"password": "p"}, {"monkey": "banana", "keyword": "k"}],
            "signingKey": "s",
            "token": null
        });
        let r = redact(&v);
        assert_eq!(
            r,
            json!({
                "path": "a.txt",
                "api_key": "[redacted]",
                "headers": {"Authorization": "[redacted]", "Accept": "text/plain"},
                "list": [{"password": "[redacted]"}, {"monkey": "banana", "keyword": "k"}],
                "signingKey": "[redacted]",
                "token": null
            })
        );
    }

    #[test]
    fn redacts_values_shaped_like_secrets() {
        // Test vectors shaped like secrets, none real. check-core: allow
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"; // check-core: allow
        let v = json!({
            "cmd": "curl -H 'Authorization: Bearer abcdefghijklmnop1234' https://x",
            "note": format!("key: {pem} done"),
            "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "list": ["sk-proj-abcdefghijklmnopqrstuv", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAABCDEFGHIJKLMNOP"], // check-core: allow
            "plain": "nothing secret in this sentence at all",
        });
        let r = redact(&v);
        assert_eq!(
            r["cmd"],
            "curl -H 'Authorization: Bearer [redacted]' https://x"
        );
        assert_eq!(r["note"], "key: [redacted private key] done");
        assert_eq!(r["jwt"], "[redacted jwt]");
        assert_eq!(
            r["list"],
            json!([
                "[redacted api key]",
                "[redacted api key]",
                "[redacted api key]"
            ])
        );
        assert_eq!(r["plain"], v["plain"]);
    }
}
