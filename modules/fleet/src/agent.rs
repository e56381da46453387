//! `call_agent`: one run of an external agent CLI.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use strata_engine::{ToolContext, ToolError, tool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes kept of the CLI's output (stdout and stderr each).
const MAX_OUTPUT: usize = 64 * 1024;

const BASE_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TERM"];

async fn capped<R: tokio::io::AsyncRead + Unpin>(mut r: R) -> (String, bool) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut more = false;
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                more |= n > room;
            }
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), more)
}

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
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args.iter().map(|a| a.replace("{prompt}", &prompt)))
        .env_clear()
        .envs(
            BASE_ENV
                .iter()
                .map(|s| (*s).to_owned())
                .chain(cfg.agent_env_allow.iter().cloned())
                .filter_map(|k| std::env::var(&k).ok().map(|v| (k, v))),
        )
        .current_dir(&ctx.env.overlay_dir)
        .stdin(if placeholder {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| ToolError::failed(format!("cannot start `{program}`: {e}")))?;
    if !placeholder && let Some(mut stdin) = child.stdin.take() {
        let p = prompt.clone();
        tokio::spawn(async move {
            let _ = stdin.write_all(p.as_bytes()).await;
        });
    }
    let out = child.stdout.take().map(|r| tokio::spawn(capped(r)));
    let err = child.stderr.take().map(|r| tokio::spawn(capped(r)));
    let pid = child.id();
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(s) => Some(s.map_err(|e| ToolError::failed(format!("waiting for `{program}`: {e}")))?),
        Err(_) => None,
    };
    // The CLI's whole process group goes, on timeout and after a normal exit alike.
    if let Some(p) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
    }
    let _ = child.wait().await;
    let join = |h: Option<tokio::task::JoinHandle<(String, bool)>>| async move {
        match h {
            Some(h) => tokio::time::timeout(Duration::from_secs(2), h)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => Default::default(),
        }
    };
    let (stdout, stdout_truncated) = join(out).await;
    let (stderr, _) = join(err).await;
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
