//! Fitting a request into the model's context window (`llm.context_window`).
//!
//! A small local model (a 4,096-token llama.cpp server, say) refuses a request that does not
//! fit with a 400, and the turn is lost. Before each model call the agent loop estimates the
//! request and, when it would not fit, makes it fit in this order:
//!
//! 1. older turns of the session's history are left out, oldest first and whole (a tool call
//!    never without its result); the summary in the system instruction stays;
//! 2. only the tools the turn most likely needs are sent: every tool the agent's `tools:`
//!    list names exactly, the tools its recent turns called, then the others ranked by how
//!    many of the message's words their name and description share;
//! 3. if it still cannot fit, the turn stops with a [`TooBig`] that says what to change.
//!
//! Nothing here calls a tokenizer: the estimate is [`BYTES_PER_TOKEN`] bytes a token, which
//! over-counts English prose and JSON for the tokenizers in use (three to four bytes a token),
//! so a request judged to fit does.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use strata_engine::llm::{ChatMessage, CompletionRequest, Role};
use strata_engine::scope::ToolFilter;
use strata_engine::spec::ToolSpec;

/// Bytes counted as one token.
pub const BYTES_PER_TOKEN: usize = 3;

/// Tokens a vendor adds around each message and each tool (role markers, separators).
const PER_ITEM: usize = 6;

/// The context window the vendor documents for `model` of `provider`, in tokens, when known.
/// OpenAI-compatible servers run any model (llama.cpp, Ollama, vLLM): only OpenAI's own model
/// names are known; set `llm.context_window` for the others.
pub fn known_window(provider: &str, model: &str) -> Option<u32> {
    let m = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let starts = |p: &str| m.starts_with(p);
    match provider {
        "anthropic" | "claude-code" if starts("claude") => Some(200_000),
        "gemini" | "vertex" if starts("gemini-1.5") || starts("gemini-2") => Some(1_048_576),
        "openai" if starts("gpt-4.1") => Some(1_047_576),
        "openai" if starts("gpt-4o") || starts("gpt-4-turbo") || starts("o1") => Some(128_000),
        "openai" if starts("o3") || starts("o4") => Some(200_000),
        "openai" if starts("gpt-5") => Some(400_000),
        "openai" if starts("gpt-3.5-turbo") => Some(16_385),
        _ => None,
    }
}

/// Estimated tokens of `bytes` of text or JSON.
pub fn tokens_of(bytes: usize) -> usize {
    bytes.div_ceil(BYTES_PER_TOKEN)
}

fn message_tokens(m: &ChatMessage) -> usize {
    let calls: usize = m
        .tool_calls
        .iter()
        .map(|c| c.id.len() + c.name.len() + c.arguments.to_string().len())
        .sum();
    PER_ITEM + tokens_of(m.content.len() + calls + m.tool_call_id.as_ref().map_or(0, String::len))
}

/// Estimated tokens of one tool as sent (name, description, schema).
pub fn tool_tokens(t: &ToolSpec) -> usize {
    PER_ITEM + tokens_of(t.name.len() + t.description.len() + t.input_schema.to_string().len())
}

/// Estimated prompt tokens of a whole request.
pub fn request_tokens(req: &CompletionRequest) -> usize {
    PER_ITEM
        + tokens_of(req.system.as_ref().map_or(0, String::len))
        + req.messages.iter().map(message_tokens).sum::<usize>()
        + req.tools.iter().map(tool_tokens).sum::<usize>()
}

/// Tokens kept free for the answer: the request's `max_tokens`, else an eighth of the
/// window (256 to 4,096).
pub fn answer_reserve(window: u32, max_tokens: Option<u32>) -> usize {
    max_tokens.map_or_else(|| (window / 8).clamp(256, 4096), |n| n.min(window / 2)) as usize
}

/// What [`fit`] left out.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fitted {
    /// Messages of earlier turns left out (from the front).
    pub dropped_messages: usize,
    /// Tools not sent, by name.
    pub dropped_tools: Vec<String>,
    /// The estimate after fitting.
    pub tokens: usize,
}

/// A request that cannot fit, with what it is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooBig {
    /// The agent.
    pub agent: String,
    /// The window, in tokens.
    pub window: u32,
    /// Tokens kept for the answer.
    pub reserve: usize,
    /// The smallest request this could make, in tokens.
    pub tokens: usize,
    /// Of which the system instruction.
    pub system: usize,
    /// Of which the tools that must stay.
    pub tools: usize,
    /// Of which this turn's messages.
    pub turn: usize,
}

impl std::fmt::Display for TooBig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request to agent `{}`'s model needs about {} tokens but its context window is \
             {} (llm.context_window) with {} kept for the answer — the instructions take about \
             {}, the tools it must keep {}, this turn's messages {}. Name fewer tools in \
             `agents.{}.tools` (every tool named there is always sent), raise \
             `llm.context_window` if the model allows more, or use a model with a bigger \
             context",
            self.agent,
            self.tokens,
            self.window,
            self.reserve,
            self.system,
            self.tools,
            self.turn,
            self.agent
        )
    }
}

/// Which tools must be sent whatever the window: the ones a `tools:` list names exactly.
pub fn named_tools(filter: &ToolFilter) -> HashSet<String> {
    match filter {
        ToolFilter::List(l) => l.iter().filter(|p| !p.contains('*')).cloned().collect(),
        _ => HashSet::new(),
    }
}

/// Makes `req` fit in `window` tokens (see the module's documentation). `first_new` is the
/// index of this turn's first message: the ones before it are earlier turns and may be left
/// out; the ones after are never touched. `recent` is the history as it was before any
/// trimming (the tools its last turns called are kept).
pub fn fit(
    agent: &str,
    req: &mut CompletionRequest,
    first_new: usize,
    window: u32,
    named: &HashSet<String>,
    recent: &[ChatMessage],
) -> Result<Fitted, TooBig> {
    let reserve = answer_reserve(window, req.max_tokens);
    let budget = (window as usize).saturating_sub(reserve);
    let mut out = Fitted {
        tokens: request_tokens(req),
        ..Fitted::default()
    };
    if out.tokens <= budget {
        return Ok(out);
    }
    // 1. Earlier turns, oldest first, whole.
    let first_new = first_new.min(req.messages.len());
    let mut cut = 0;
    let mut over = out.tokens - budget;
    let earlier = &req.messages[..first_new];
    while over > 0 && cut < first_new {
        // The next turn starts at the next user message after `cut`.
        let next = earlier[cut + 1..]
            .iter()
            .position(|m| m.role == Role::User)
            .map_or(first_new, |i| cut + 1 + i);
        let freed: usize = earlier[cut..next].iter().map(message_tokens).sum();
        cut = next;
        over = over.saturating_sub(freed);
    }
    // Never start on a tool result whose call was cut (a history that began mid-turn).
    while cut < first_new && req.messages[cut].role != Role::User {
        cut += 1;
    }
    if cut > 0 {
        req.messages.drain(..cut);
        out.dropped_messages = cut;
        out.tokens = request_tokens(req);
    }
    if out.tokens <= budget {
        return Ok(out);
    }
    // 2. The tools the turn most likely needs.
    let this_turn = first_new - cut;
    let called: HashSet<&str> = recent[strata_engine::session::turn_boundary(recent, 3)..]
        .iter()
        .chain(req.messages[this_turn..].iter())
        .flat_map(|m| m.tool_calls.iter().map(|c| c.name.as_str()))
        .collect();
    let words = message_words(req.messages[this_turn..].iter());
    let mut must: Vec<&ToolSpec> = Vec::new();
    let mut rest: Vec<(usize, &ToolSpec)> = Vec::new();
    for t in req.tools.iter() {
        if named.contains(&t.name) || called.contains(t.name.as_str()) {
            must.push(t);
        } else {
            rest.push((relevance(t, &words), t));
        }
    }
    // Highest relevance first; equal ones in the registry's order.
    rest.sort_by_key(|r| std::cmp::Reverse(r.0));
    let without_tools = out.tokens - req.tools.iter().map(tool_tokens).sum::<usize>();
    let must_tokens: usize = must.iter().map(|t| tool_tokens(t)).sum();
    let mut used = without_tools + must_tokens;
    if used > budget {
        let turn: usize = req.messages.iter().map(message_tokens).sum();
        return Err(TooBig {
            agent: agent.to_owned(),
            window,
            reserve,
            tokens: used,
            system: tokens_of(req.system.as_ref().map_or(0, String::len)),
            tools: must_tokens,
            turn,
        });
    }
    let mut keep: HashSet<&str> = must.iter().map(|t| t.name.as_str()).collect();
    for (_, t) in rest {
        let n = tool_tokens(t);
        if used + n <= budget {
            used += n;
            keep.insert(t.name.as_str());
        }
    }
    let (kept, dropped): (Vec<ToolSpec>, Vec<ToolSpec>) = req
        .tools
        .iter()
        .cloned()
        .partition(|t| keep.contains(t.name.as_str()));
    out.dropped_tools = dropped.into_iter().map(|t| t.name).collect();
    req.tools = Arc::from(kept);
    out.tokens = request_tokens(req);
    Ok(out)
}

/// The lower-cased words (three letters or more) of the user's messages.
fn message_words<'a>(messages: impl Iterator<Item = &'a ChatMessage>) -> HashSet<String> {
    messages
        .filter(|m| m.role == Role::User)
        .flat_map(|m| words(&m.content))
        .collect()
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
}

/// How many of `words` the tool's name and description share (a word in the name counts
/// three times).
fn relevance(t: &ToolSpec, words: &HashSet<String>) -> usize {
    let name: HashSet<String> = t
        .name
        .split(['_', '-'])
        .map(str::to_lowercase)
        .filter(|w| w.len() >= 3)
        .collect();
    let desc: HashSet<String> = self::words(&t.description).collect();
    words
        .iter()
        .map(|w| {
            let stem = |s: &String| s.starts_with(w.as_str()) || w.starts_with(s.as_str());
            3 * usize::from(name.iter().any(stem)) + usize::from(desc.contains(w))
        })
        .sum()
}

/// A tool's JSON Schema as sent to a model: the same constraints in fewer bytes. Rust's
/// numeric `format`s (`uint16`, `double`…) go (the bounds that matter stay as `minimum` and
/// `maximum`), an optional field's `["T", "null"]` type becomes `T` (it is not `required`
/// anyway), `$schema` and `title` go, and a `description` that repeats the tool's own is left
/// out.
pub fn compact_schema(schema: &Value, tool_description: &str) -> Value {
    let mut v = schema.clone();
    if let Value::Object(o) = &mut v {
        o.remove("$schema");
        o.remove("title");
        if o.get("description")
            .and_then(Value::as_str)
            .is_some_and(|d| d.trim() == tool_description.trim())
        {
            o.remove("description");
        }
    }
    compact_in_place(&mut v);
    v
}

fn compact_in_place(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.get("format").and_then(Value::as_str).is_some_and(|f| {
                matches!(
                    f,
                    "int8"
                        | "int16"
                        | "int32"
                        | "int64"
                        | "uint"
                        | "uint8"
                        | "uint16"
                        | "uint32"
                        | "uint64"
                        | "float"
                        | "double"
                )
            }) {
                o.remove("format");
            }
            if let Some(Value::Array(types)) = o.get("type")
                && types.len() == 2
                && types.iter().any(|t| t == "null")
                && let Some(t) = types.iter().find(|t| *t != "null").cloned()
            {
                o.insert("type".into(), t);
            }
            // A schema's title is a string; a property called `title` is an object.
            if o.get("title").is_some_and(Value::is_string) {
                o.remove("title");
            }
            for (_, child) in o.iter_mut() {
                compact_in_place(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(compact_in_place),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use strata_engine::llm::ToolCall;

    fn tool(name: &str, description: &str, pad: usize) -> ToolSpec {
        ToolSpec::new(
            name,
            description,
            json!({"type": "object", "properties": {"x": {"type": "string", "description": "y".repeat(pad)}}}),
        )
    }

    fn user(t: &str) -> ChatMessage {
        ChatMessage::text(Role::User, t)
    }

    fn assistant(t: &str) -> ChatMessage {
        ChatMessage::text(Role::Assistant, t)
    }

    fn req(messages: Vec<ChatMessage>, tools: Vec<ToolSpec>) -> CompletionRequest {
        CompletionRequest {
            model: "m".into(),
            system: Some("You are terse.".into()),
            messages,
            tools: Arc::from(tools),
            ..Default::default()
        }
    }

    #[test]
    fn a_request_that_fits_is_left_alone() {
        let mut r = req(vec![user("hi")], vec![tool("a", "A.", 10)]);
        let f = fit("main", &mut r, 0, 4096, &HashSet::new(), &[]).expect("fits");
        assert_eq!((f.dropped_messages, f.dropped_tools.len()), (0, 0));
        assert_eq!(r.messages.len(), 1);
    }

    #[test]
    fn older_turns_go_first_whole_and_this_turn_stays() {
        let big = "word ".repeat(400); // ~670 tokens each
        let mut history = Vec::new();
        for i in 0..6 {
            history.push(user(&format!("question {i} {big}")));
            history.push(ChatMessage {
                role: Role::Assistant,
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: format!("c{i}"),
                    name: "a".into(),
                    arguments: json!({}),
                }],
                tool_call_id: None,
            });
            history.push(ChatMessage {
                role: Role::Tool,
                content: "result".into(),
                tool_calls: vec![],
                tool_call_id: Some(format!("c{i}")),
            });
            history.push(assistant("answer"));
        }
        let first_new = history.len();
        history.push(user("the question now"));
        let mut r = req(history.clone(), vec![tool("a", "A.", 10)]);
        let f = fit("main", &mut r, first_new, 2048, &HashSet::new(), &history).expect("fits");
        assert!(
            f.dropped_messages > 0 && f.dropped_messages.is_multiple_of(4),
            "{f:?}"
        );
        assert!(f.tokens <= 2048 - answer_reserve(2048, None), "{f:?}");
        assert_eq!(r.messages[0].role, Role::User, "starts at a turn");
        assert_eq!(
            r.messages.last().map(|m| m.content.as_str()),
            Some("the question now")
        );
        assert!(f.dropped_tools.is_empty(), "history went before tools");
    }

    #[test]
    fn tools_named_called_or_relevant_are_kept_the_rest_go() {
        let mut tools: Vec<ToolSpec> = (0..30)
            .map(|i| tool(&format!("tool_{i}"), "Does a thing.", 600))
            .collect();
        tools.push(tool("weather_report", "The weather for a city.", 600));
        tools.push(tool("named_one", "Always here.", 600));
        tools.push(tool("used_before", "Called last turn.", 600));
        let history = vec![
            user("earlier"),
            ChatMessage {
                role: Role::Assistant,
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c".into(),
                    name: "used_before".into(),
                    arguments: json!({}),
                }],
                tool_call_id: None,
            },
            ChatMessage {
                role: Role::Tool,
                content: "ok".into(),
                tool_calls: vec![],
                tool_call_id: Some("c".into()),
            },
            assistant("done"),
        ];
        let mut messages = history.clone();
        messages.push(user("What is the weather in Oslo?"));
        let mut r = req(messages, tools);
        let named = named_tools(&ToolFilter::List(vec!["named_one".into(), "tool_*".into()]));
        let f = fit("main", &mut r, 4, 4096, &named, &history).expect("fits");
        let sent: Vec<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
        for t in ["weather_report", "named_one", "used_before"] {
            assert!(sent.contains(&t), "{t} kept: {sent:?}");
        }
        assert!(!f.dropped_tools.is_empty());
        assert!(f.tokens <= 4096 - answer_reserve(4096, None));
    }

    #[test]
    fn what_cannot_fit_says_what_to_change() {
        let tools: Vec<ToolSpec> = (0..10).map(|i| tool(&format!("t{i}"), "x", 3000)).collect();
        let named: HashSet<String> = tools.iter().map(|t| t.name.clone()).collect();
        let mut r = req(vec![user("hi")], tools);
        let e = fit("main", &mut r, 0, 4096, &named, &[]).expect_err("too big");
        let s = e.to_string();
        for part in [
            "agents.main.tools",
            "llm.context_window",
            "bigger context",
            "4096",
        ] {
            assert!(s.contains(part), "{part} in {s}");
        }
        assert!(e.tools > e.system);
    }

    #[test]
    fn compact_schemas_keep_their_meaning_in_fewer_bytes() {
        let s = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Args",
            "description": "Reads a file.",
            "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint16", "minimum": 0, "maximum": 65535},
                "note": {"type": ["string", "null"], "description": "Optional."},
                "when": {"type": "string", "format": "date-time"}
            },
            "required": ["n"]
        });
        let c = compact_schema(&s, "Reads a file.");
        assert_eq!(
            c,
            json!({
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 0, "maximum": 65535},
                    "note": {"type": "string", "description": "Optional."},
                    "when": {"type": "string", "format": "date-time"}
                },
                "required": ["n"]
            })
        );
    }

    #[test]
    fn vendors_windows_are_known_where_documented() {
        assert_eq!(
            known_window("anthropic", "claude-sonnet-4-5"),
            Some(200_000)
        );
        assert_eq!(known_window("openai", "gpt-4o-mini"), Some(128_000));
        assert_eq!(known_window("openai", "qwen2.5-7b-instruct"), None);
        assert_eq!(
            known_window("gemini", "google/gemini-2.5-flash"),
            Some(1_048_576)
        );
    }
}
