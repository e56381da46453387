//! `state` and `events`: the running Strata as an agent may look at it — read-only, for
//! owners and coordinating agents (what `GET /api/state` and `strata events` show people).

use std::io::{Read, Seek, SeekFrom};
use strata_runtime::EnvExt;

use serde_json::{Value, json};
use strata_engine::access::Tier;
use strata_engine::config::{Access, AgentTier};
use strata_engine::{ToolContext, ToolError, tool};

/// Owners (a person, a token, the operator) and coordinator or privileged agents; anyone
/// else is told so. For tools that show the deployment's insides (`state`, `events`, `doctor`).
pub fn require_overseer(ctx: &ToolContext, what: &str) -> Result<(), ToolError> {
    match ctx.policy.tier(&ctx.principal) {
        Tier::Person(Access::Owner)
        | Tier::Agent(AgentTier::Coordinator | AgentTier::Privileged) => Ok(()),
        t => Err(ToolError::failed(format!(
            "denied: {what} is for owners and coordinator agents ({} is {t})",
            ctx.principal
        ))),
    }
}

/// The running deployment: its agents, its connectors with their state (connected,
/// reconnecting, or disabled with the reason) and what turns are doing now. Read-only;
/// owners and coordinator agents only.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 10)]
async fn state(ctx: &ToolContext) -> Result<Value, ToolError> {
    require_overseer(ctx, "`state`")?;
    let agents = ctx.env.agents().map(|d| d.agent_ids()).unwrap_or_default();
    Ok(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "agents": agents,
        "connectors": ctx.env.connectors().states(),
    }))
}

/// The newest records of the audit log (tool calls, approvals, alerts, refusals), oldest
/// first: `limit` (1..200, default 50), only those whose `tool` or `event` is `kind` when
/// given. Arguments in them are redacted as the log keeps them. Read-only; owners and
/// coordinator agents only.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 10)]
async fn events(
    ctx: &ToolContext,
    /// How many (1..200, default 50).
    limit: Option<u32>,
    /// Only records whose `tool` or `event` is this.
    kind: Option<String>,
) -> Result<Value, ToolError> {
    require_overseer(ctx, "`events`")?;
    let limit = limit.unwrap_or(50).clamp(1, 200) as usize;
    let path = ctx.env.data_dir.join(&ctx.env.config.tools.audit_log);
    let text = tokio::task::spawn_blocking(move || tail(&path, 1 << 20))
        .await
        .map_err(|e| ToolError::failed(format!("reading the audit log failed: {e}")))?
        .map_err(|e| ToolError::failed(format!("cannot read the audit log: {e}")))?;
    let mut records: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            kind.as_deref()
                .is_none_or(|k| v["tool"] == k || v["event"] == k)
        })
        .collect();
    let skip = records.len().saturating_sub(limit);
    records.drain(..skip);
    Ok(json!({"records": records}))
}

/// The last `max` bytes of `path` (from a line's start); empty when there is no file yet.
fn tail(path: &std::path::Path, max: u64) -> std::io::Result<String> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    let start = len.saturating_sub(max);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    Ok(if start > 0 {
        text.split_once('\n')
            .map(|(_, r)| r.to_owned())
            .unwrap_or_default()
    } else {
        text
    })
}
