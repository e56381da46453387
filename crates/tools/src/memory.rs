//! The memory tools: store, search (hybrid or semantic), forget, list — over whatever
//! `MemoryBackend` the deployment runs, seen through the caller's scopes.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use strata_engine::memory::{
    Memory, MemoryBackend, MemoryQuery, MemoryScope, MemoryType, NewMemory, SearchMode, Viewer,
};
use strata_engine::schemars::JsonSchema;
use strata_engine::{ToolContext, ToolError, tool};

/// What kind of memory.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(crate = "strata_engine::schemars")]
pub enum Kind {
    /// Facts and knowledge.
    Semantic,
    /// Events and exchanges.
    Episodic,
    /// How to do things.
    Procedural,
}

impl From<Kind> for MemoryType {
    fn from(k: Kind) -> Self {
        match k {
            Kind::Semantic => MemoryType::Semantic,
            Kind::Episodic => MemoryType::Episodic,
            Kind::Procedural => MemoryType::Procedural,
        }
    }
}

fn backend(ctx: &ToolContext) -> Result<&dyn MemoryBackend, ToolError> {
    ctx.env.memory.as_deref().ok_or_else(|| {
        ToolError::failed("memory is off in this deployment (`memory.backend: none`)")
    })
}

fn viewer(ctx: &ToolContext, mem: &dyn MemoryBackend) -> Viewer {
    mem.viewer(ctx.agent_id.as_deref(), &ctx.principal)
}

fn failed(e: strata_engine::memory::MemoryError) -> ToolError {
    ToolError::failed(e.message())
}

/// The calling turn's taint, when memory takes part in taint tracking.
fn turn_taint(ctx: &ToolContext) -> Option<&strata_engine::Taint> {
    ctx.taint
        .as_ref()
        .filter(|_| ctx.config().security.taint.tracks_memory())
}

/// What the model sees of a memory.
fn show(m: &Memory) -> Value {
    json!({
        "id": m.id,
        "type": m.memory_type.as_str(),
        "content": m.content,
        "category": m.category,
        "tags": m.tags,
        "scope": m.scope.to_string(),
        "pinned": m.pinned,
        "confidence": (m.confidence * 100.0).round() / 100.0,
        "created_at": m.created_at,
        "stored_by_tainted_turn": m.taint.is_some(),
    })
}

/// `agent`, `private`, `global`, `group:<name>`, or a full scope.
fn parse_scope(v: &Viewer, s: &str) -> Result<MemoryScope, ToolError> {
    match s {
        "agent" => Ok(v.default_scope()),
        "private" => v
            .private_key
            .clone()
            .map(MemoryScope::Private)
            .ok_or_else(|| ToolError::invalid("scope", "no private scope: the sender is unknown")),
        other => other
            .parse()
            .map_err(|e: strata_engine::memory::MemoryError| {
                ToolError::invalid("scope", e.message())
            }),
    }
}

/// Remembers something for later conversations. Use it for facts worth keeping (preferences,
/// names, decisions, how-tos), not for chit-chat. Near-duplicates in the same scope are merged.
/// Scope: `agent` (default: this agent only), `private` (only in conversations with the
/// current person), `global` (every agent), or `group:<name>`.
#[tool(capabilities = [memory], side_effects = local, timeout_secs = 30, idempotent)]
async fn memory_store(
    ctx: &ToolContext,
    /// What to remember, as a self-contained sentence.
    content: String,
    /// Kind of memory (default semantic).
    r#type: Option<Kind>,
    /// A category such as `preferences` or `infrastructure`.
    category: Option<String>,
    /// Free tags.
    tags: Option<Vec<String>>,
    /// `agent` (default), `private`, `global` or `group:<name>`.
    scope: Option<String>,
    /// Keep it forever and always in context.
    pinned: Option<bool>,
) -> Result<Value, ToolError> {
    let mem = backend(ctx)?;
    let v = viewer(ctx, mem);
    if content.trim().is_empty() {
        return Err(ToolError::invalid("content", "must not be empty"));
    }
    let scope = match scope.as_deref() {
        None => v.default_scope(),
        Some(s) => parse_scope(&v, s)?,
    };
    let by = match &ctx.agent_id {
        Some(a) => format!("agent:{a}"),
        None => ctx.principal.to_string(),
    };
    // Stored from a tainted turn: marked with why, and with the content's injection score.
    let taint = strata_engine::memory::taint_note(turn_taint(ctx), &content);
    let stored = mem
        .store(
            &v,
            NewMemory {
                content,
                memory_type: r#type.map(Into::into).unwrap_or_default(),
                category,
                tags: tags.unwrap_or_default(),
                scope,
                pinned: pinned.unwrap_or(false),
                created_by: by,
                confidence: None,
                taint,
                // Kept with the store: the same call run again returns what this one made.
                idempotency_key: ctx.idempotency_key().map(str::to_owned),
            },
        )
        .await
        .map_err(failed)?;
    Ok(serde_json::to_value(stored).unwrap_or(Value::Null))
}

async fn search(
    ctx: &ToolContext,
    query: String,
    limit: Option<u32>,
    kind: Option<Kind>,
    category: Option<String>,
    mode: SearchMode,
) -> Result<Value, ToolError> {
    let mem = backend(ctx)?;
    let v = viewer(ctx, mem);
    let limit = limit.unwrap_or(8);
    if !(1..=50).contains(&limit) {
        return Err(ToolError::invalid("limit", "must be between 1 and 50"));
    }
    let found = mem
        .search(
            &v,
            &MemoryQuery {
                text: query,
                limit: limit as usize,
                memory_type: kind.map(Into::into),
                category,
                mode,
            },
        )
        .await
        .map_err(failed)?;
    strata_engine::memory::mark_recalled(turn_taint(ctx), &found);
    Ok(json!({"memories": found.iter().map(show).collect::<Vec<_>>()}))
}

/// Searches what this agent may remember (its own, global, its groups', and the current
/// person's private memories): keywords and meaning combined. Best matches first.
#[tool(capabilities = [memory], side_effects = none, timeout_secs = 30)]
async fn memory_search(
    ctx: &ToolContext,
    /// What to look for.
    query: String,
    /// Most results (default 8, at most 50).
    limit: Option<u32>,
    /// Only this kind.
    r#type: Option<Kind>,
    /// Only this category.
    category: Option<String>,
) -> Result<Value, ToolError> {
    search(ctx, query, limit, r#type, category, SearchMode::Hybrid).await
}

/// Searches memories by meaning only (finds paraphrases and synonyms keywords miss). Falls
/// back to keywords when no embedder is configured.
#[tool(capabilities = [memory], side_effects = none, timeout_secs = 30)]
async fn memory_semantic_search(
    ctx: &ToolContext,
    /// What to look for.
    query: String,
    /// Most results (default 8, at most 50).
    limit: Option<u32>,
) -> Result<Value, ToolError> {
    search(ctx, query, limit, None, None, SearchMode::Semantic).await
}

/// Forgets a memory for good (its text, search entry and vector are erased; the reason is
/// logged). Give the `id` from a search, or a `query` to forget the best match.
#[tool(capabilities = [memory], side_effects = local, timeout_secs = 30)]
async fn memory_forget(
    ctx: &ToolContext,
    /// The memory's id.
    id: Option<String>,
    /// Instead of an id: forget the memory that best matches this text.
    query: Option<String>,
    /// Why (kept in the change log).
    reason: String,
) -> Result<Value, ToolError> {
    let mem = backend(ctx)?;
    let v = viewer(ctx, mem);
    let by = match &ctx.agent_id {
        Some(a) => format!("agent:{a} for {}", ctx.principal),
        None => ctx.principal.to_string(),
    };
    let target = match (id, query) {
        (Some(id), None) => id,
        (None, Some(q)) => {
            let hits = mem
                .search(
                    &v,
                    &MemoryQuery {
                        text: q.clone(),
                        limit: 1,
                        mode: SearchMode::Keyword,
                        ..Default::default()
                    },
                )
                .await
                .map_err(failed)?;
            match hits.into_iter().next() {
                Some(m) => m.id,
                None => return Err(ToolError::failed(format!("no memory matches `{q}`"))),
            }
        }
        _ => {
            return Err(ToolError::invalid(
                "id",
                "give exactly one of `id` and `query`",
            ));
        }
    };
    let forgotten = mem
        .forget(&v, &target, &reason, &by)
        .await
        .map_err(failed)?;
    if !forgotten {
        return Err(ToolError::failed(format!(
            "no memory `{target}` visible here"
        )));
    }
    Ok(json!({"forgotten": target}))
}

/// Lists memories, newest first, optionally only those changed since a time or in one scope.
#[tool(capabilities = [memory], side_effects = none, timeout_secs = 30)]
async fn memory_list(
    ctx: &ToolContext,
    /// Unix seconds, or an RFC 3339 time (`2026-01-31T00:00:00Z`).
    since: Option<String>,
    /// `agent`, `private`, `global`, `group:<name>` or a full scope.
    scope: Option<String>,
    /// Most results (default 50, at most 500).
    limit: Option<u32>,
) -> Result<Value, ToolError> {
    let mem = backend(ctx)?;
    let v = viewer(ctx, mem);
    let since = match since.as_deref() {
        None => None,
        Some(s) => Some(match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) => humantime::parse_rfc3339_weak(s)
                .map_err(|e| ToolError::invalid("since", format!("`{s}`: {e}")))?
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        }),
    };
    let scope = scope.as_deref().map(|s| parse_scope(&v, s)).transpose()?;
    let limit = limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ToolError::invalid("limit", "must be between 1 and 500"));
    }
    let found = mem
        .list(&v, since, scope.as_ref(), limit as usize)
        .await
        .map_err(failed)?;
    strata_engine::memory::mark_recalled(turn_taint(ctx), &found);
    Ok(json!({"memories": found.iter().map(show).collect::<Vec<_>>()}))
}
