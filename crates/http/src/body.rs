//! Request bodies as serde types. Every body is a JSON object; a field of the wrong type is
//! named in the error (`field `tool` must be a non-empty string`), and bodies of the control
//! API refuse unknown fields, so a misspelt field is an error instead of being ignored.

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// A string of at least one character (`minLength: 1` in the OpenAPI document: exactly what
/// it says, so a lone space is a string like any other).
#[derive(Debug, Clone)]
pub struct NonEmpty(pub String);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) if !s.is_empty() => Ok(NonEmpty(s)),
            _ => Err(D::Error::custom("must be a non-empty string")),
        }
    }
}

/// A string (null or absent: use `Option<Text>`).
#[derive(Debug, Clone)]
pub struct Text(pub String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Text(s)),
            _ => Err(D::Error::custom("must be a string")),
        }
    }
}

/// A JSON object.
#[derive(Debug, Clone, Default)]
pub struct Object(pub Map<String, Value>);

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Object(m) => Ok(Object(m)),
            _ => Err(D::Error::custom("must be a JSON object")),
        }
    }
}

/// The largest integer a JSON number keeps exactly in every client (2^53 - 1).
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// A task id: a string or a number, written as text.
#[derive(Debug, Clone)]
pub struct TaskId(pub String);

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(TaskId(s)),
            // A whole number a JSON client keeps exactly (±(2^53 - 1)); JSON Schema's
            // integers include `12.0`, written here as the integer it is.
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64 => {
                    Ok(TaskId(format!("{}", f as i64)))
                }
                _ => Err(D::Error::custom(format!(
                    "must be a string or a whole number within ±{MAX_SAFE_INTEGER}"
                ))),
            },
            _ => Err(D::Error::custom("must be a string or a number")),
        }
    }
}

/// `POST /api/invoke`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvokeBody {
    /// The tool.
    pub tool: Option<NonEmpty>,
    /// Its arguments (default `{}`).
    #[serde(default)]
    pub args: Option<Object>,
    /// Echoed in the result and the audit log.
    #[serde(default)]
    pub request_id: Option<Text>,
}

/// `POST /api/approvals/{id}/approve|deny` (the body is optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    /// Why, for the record.
    #[serde(default)]
    pub reason: Option<Text>,
}

/// `POST /chat`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatBody {
    /// What to say.
    pub message: Option<NonEmpty>,
    /// To whom (default `defaults.agent`).
    #[serde(default)]
    pub agent: Option<Text>,
    /// Which conversation (default: a new one).
    #[serde(default)]
    pub session_id: Option<Text>,
    /// The caller's id for this message: a request sent again with the same id (a retry,
    /// to this or another instance) is answered from the stored turn, not run twice.
    #[serde(default)]
    pub request_id: Option<NonEmpty>,
    /// Answer as server-sent events while the agent works (`token`, `tool_start`,
    /// `tool_end`, then `final` or `error`).
    #[serde(default)]
    pub stream: Option<bool>,
}

/// `POST /execute`: the two fields we act on; everything else the sender includes (title,
/// description, priority, input data…) is kept and stored with the task as sent.
#[derive(Debug, Deserialize)]
pub struct ExecuteBody {
    /// The task's id.
    pub task_id: Option<TaskId>,
    /// The agent to run it.
    pub assigned_agent: Option<NonEmpty>,
    /// Its title, put in the agent's prompt (a string or null).
    #[serde(default)]
    pub title: Option<Text>,
    /// What to do, put in the agent's prompt (a string or null).
    #[serde(default)]
    pub description: Option<Text>,
}

/// Parses `bytes` as a JSON object of type `T`; the error says what is wrong and where.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("invalid JSON: {e}"))?;
    if !v.is_object() {
        return Err("the body must be a JSON object".into());
    }
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner().to_string();
        if path == "." {
            inner
        } else {
            format!("field `{path}` {inner}")
        }
    })
}

/// `Some(v)` or the error naming the missing field.
pub fn required<T>(v: Option<T>, field: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("field `{field}` is missing"))
}
