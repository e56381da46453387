//! `call_agent`: one run of an external agent CLI.

use std::time::Duration;

use serde_json::{Value, json};
use strata_engine::{ToolContext, ToolError, tool};

/// Bytes kept of the CLI's output (stdout and stderr each).
const MAX_OUTPUT: usize = 64 * 1024;

/// Delegates a self-contained task to the external agent CLI this deployment configures
/// (`modules.fleet.agent_command`) and returns what it printed. The other agent runs with
/// its own access, outside Strata's sandbox, so every call needs a human's approval.
#[tool(capabilities = [subprocess], side_effects = external, hitl, timeout_secs = 620)]
async fn call_agent(
    ctx: &ToolContext,
    /// The task, self-contained.
    prompt: String,
    /// Seconds before the CLI is killed: 5 to 600, default 120.
    timeout: Option<u64>,
) -> Result<Value, ToolError> {
    if prompt.trim().is_empty() {
        return Err(ToolError::invalid("prompt", "must not be empty"));
    }
    let cfg = crate::config(ctx)?;
    let Some((program, args)) = cfg.agent_command.split_first() else {
        return Err(ToolError::failed(
            "call_agent is off: set `modules.fleet.agent_command` (e.g. [claude, -p, \"{prompt}\"])",
        ));
    };
    let timeout = Duration::from_secs(timeout.unwrap_or(120).clamp(5, 600));
    let placeholder = args.iter().any(|a| a.contains("{prompt}"));
    // Cleared environment + allow-list, own process group — killed at the timeout and after
    // a normal exit alike — and capped output: strata-sandbox's one helper for such children.
    let mut cmd = strata_sandbox::host::command(program, &cfg.agent_env_allow);
    cmd.args(args.iter().map(|a| a.replace("{prompt}", &prompt)))
        .current_dir(&ctx.env.overlay_dir);
    let input = (!placeholder).then(|| prompt.clone().into_bytes());
    let strata_sandbox::host::Output {
        status,
        stdout,
        stdout_truncated,
        stderr,
    } = strata_sandbox::host::output(cmd, input, timeout, MAX_OUTPUT)
        .await
        .map_err(|e| ToolError::failed(format!("cannot start `{program}`: {e}")))?;
    let Some(status) = status else {
        return Err(ToolError::failed(format!(
            "`{program}` did not finish within {} s and was stopped; partial output: {}",
            timeout.as_secs(),
            stdout.chars().take(2000).collect::<String>()
        )));
    };
    if !status.success() {
        return Err(ToolError::failed(format!(
            "`{program}` exited with {}: {}",
            status.code().map_or("a signal".into(), |c| c.to_string()),
            stderr.trim().chars().take(2000).collect::<String>()
        )));
    }
    Ok(json!({
        "output": stdout,
        "truncated": stdout_truncated,
    }))
}
