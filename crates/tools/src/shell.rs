//! `terminal_exec`: a shell command in the agent's workspace, inside `strata-sandbox`.

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use regex::Regex;
use strata_engine::config::{SandboxMode, TerminalConfig};
use strata_engine::{ToolContext, ToolError, tool};
use strata_sandbox::{Limits, Mode, Spec};

/// Always passed through (when set); everything else only when `tools.terminal.env_allow`
/// lists it.
const BASE_ENV: [&str; 5] = ["PATH", "LANG", "LC_ALL", "TERM", "TZ"];

/// A second line of defence only: commands that are destructive however well sandboxed.
const DENY: [(&str, &str); 7] = [
    (
        r"\brm\s+(-\S+\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-\S+\s+)*(/|/\*|~|\$HOME)(\s|;|&|$)",
        "recursive rm of / or home",
    ),
    (r"\bmkfs(\.\w+)?\b", "mkfs"),
    (r"\bdd\b[^;|&]*\bof=/dev/", "dd onto a device"),
    (
        r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",
        "the classic fork bomb",
    ),
    (
        r"(^|[;&|]\s*)(sudo\s+)?(shutdown|reboot|poweroff|halt)\b",
        "shutdown/reboot",
    ),
    (
        r">\s*/dev/(sd|nvme|vd|hd)[a-z0-9]*",
        "writing to a block device",
    ),
    (r"\bchmod\s+(-\S+\s+)*[0-7]{3,4}\s+/(\s|$)", "chmod of /"),
];

fn builtin_deny() -> &'static [(Regex, &'static str)] {
    static RULES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    RULES.get_or_init(|| {
        DENY.iter()
            .filter_map(|(re, why)| Regex::new(re).ok().map(|r| (r, *why)))
            .collect()
    })
}

/// The rule `command` trips, if any.
fn denied(command: &str, extra: &[String]) -> Result<Option<String>, ToolError> {
    let norm = command.split_whitespace().collect::<Vec<_>>().join(" ");
    for (re, why) in builtin_deny() {
        if re.is_match(&norm) {
            return Ok(Some((*why).to_owned()));
        }
    }
    for p in extra {
        let re = Regex::new(p).map_err(|e| {
            ToolError::failed(format!(
                "tools.terminal.deny_patterns: `{p}` is not a regex: {e}"
            ))
        })?;
        if re.is_match(&norm) {
            return Ok(Some(format!("the configured pattern `{p}`")));
        }
    }
    Ok(None)
}

/// `cwd` (relative to the workspace) without leaving it.
fn resolve_cwd(workspace: &Path, cwd: Option<&str>) -> Result<PathBuf, ToolError> {
    let Some(c) = cwd.filter(|c| !c.trim().is_empty()) else {
        return Ok(workspace.to_path_buf());
    };
    let rel = Path::new(c);
    let mut out = workspace.to_path_buf();
    for comp in rel.components() {
        match comp {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => {
                return Err(ToolError::invalid(
                    "cwd",
                    "must be a relative path inside the workspace (no `..`, not absolute)",
                ));
            }
        }
    }
    Ok(out)
}

fn mode(m: SandboxMode) -> Mode {
    match m {
        SandboxMode::Auto => Mode::Auto,
        SandboxMode::Bubblewrap => Mode::Bubblewrap,
        SandboxMode::Landlock => Mode::Landlock,
        SandboxMode::None => Mode::None,
    }
}

/// The sandbox spec for a command of `agent` under `cfg`.
fn spec(
    ctx: &ToolContext,
    cfg: &TerminalConfig,
    command: String,
    timeout: Duration,
    cwd: Option<&str>,
) -> Result<Spec, ToolError> {
    let env = &ctx.env;
    let agent = ctx.agent_id.as_deref().unwrap_or("operator");
    if agent.is_empty() || agent.contains(['/', '\\']) || agent.starts_with('.') {
        return Err(ToolError::failed(format!(
            "agent id `{agent}` cannot name a workspace"
        )));
    }
    let workspace = env.overlay_dir.join(&cfg.workspace).join(agent);
    let cwd = resolve_cwd(&workspace, cwd)?;
    let network = cfg.network || cfg.network_agents.iter().any(|a| a == agent);
    Ok(confined(
        env, cfg, command, workspace, cwd, network, timeout,
    ))
}

/// The sandbox every command we run on a model's or a person's behalf gets (`terminal_exec`,
/// command skills): `tools.terminal`'s read roots, limits, environment allow-list and backend;
/// the overlay's `config/` and the data directory hidden; writes only in `workspace`.
pub(crate) fn confined(
    env: &strata_engine::Env,
    cfg: &TerminalConfig,
    command: String,
    workspace: PathBuf,
    cwd: PathBuf,
    network: bool,
    timeout: Duration,
) -> Spec {
    let read_roots = cfg
        .read_roots
        .iter()
        .map(|r| env.overlay_dir.join(r))
        .collect();
    let vars = BASE_ENV
        .iter()
        .map(|s| (*s).to_owned())
        .chain(cfg.env_allow.iter().cloned())
        .filter_map(|k| std::env::var(&k).ok().map(|v| (k, v)))
        .collect();
    let secs = timeout.as_secs();
    Spec {
        command,
        workspace,
        cwd,
        read_roots,
        hidden: vec![env.overlay_dir.join("config"), env.data_dir.clone()],
        network,
        env: vars,
        timeout,
        max_output: cfg.max_output_bytes.max(1024),
        limits: Limits {
            cpu_secs: secs + 5,
            address_space: cfg.memory_mb.max(64) << 20,
            max_processes: cfg.max_processes.max(8),
            file_size: cfg.file_size_mb.max(1) << 20,
            open_files: 1024,
        },
        mode: mode(cfg.sandbox),
    }
}

/// Runs a shell command (`/bin/sh -c`) in your workspace, isolated: writes persist only in
/// the workspace, the network is off unless configured, and the command is killed at the
/// timeout. Returns a header naming the active protections, then `exit_code: N`, `stdout:`
/// and `stderr:` sections (each capped; a note says when output was cut).
#[tool(capabilities = [subprocess], side_effects = local, timeout_secs = 130)]
async fn terminal_exec(
    ctx: &ToolContext,
    /// The command line, run by /bin/sh.
    command: String,
    /// Seconds before the command is killed: 5 to 120, default 60.
    timeout: Option<u64>,
    /// Working directory relative to the workspace (default: the workspace itself).
    cwd: Option<String>,
) -> Result<String, ToolError> {
    if command.trim().is_empty() {
        return Err(ToolError::invalid("command", "must not be empty"));
    }
    if command.len() > 64 * 1024 {
        return Err(ToolError::invalid("command", "longer than 64 KiB"));
    }
    let cfg = &ctx.env.config.tools.terminal;
    if let Some(why) = denied(&command, &cfg.deny_patterns)? {
        return Err(ToolError::invalid(
            "command",
            format!(
                "refused: it matches {why} (a short list of destructive commands kept as a second line of defence)"
            ),
        ));
    }
    let timeout = Duration::from_secs(timeout.unwrap_or(60).clamp(5, 120));
    let spec = spec(ctx, cfg, command, timeout, cwd.as_deref())?;
    let o = strata_sandbox::run(&spec).await.map_err(|e| match e {
        strata_sandbox::SandboxError::Invalid(m) => ToolError::invalid("cwd", m),
        other => ToolError::failed(other.to_string()),
    })?;
    let mut s = o.protections.header();
    s.push('\n');
    s.push_str(&format!("exit_code: {}", o.exit_code));
    if o.timed_out {
        s.push_str(&format!(
            " (killed: timed out after {} s)",
            timeout.as_secs()
        ));
    } else if o.flooded {
        s.push_str(" (killed: output kept flowing far past the cap)");
    }
    s.push_str("\nstdout:\n");
    s.push_str(&o.stdout);
    if o.stdout_truncated {
        s.push_str(&format!(
            "\n[stdout truncated at {} bytes]",
            spec.max_output
        ));
    }
    s.push_str("\nstderr:\n");
    s.push_str(&o.stderr);
    if o.stderr_truncated {
        s.push_str(&format!(
            "\n[stderr truncated at {} bytes]",
            spec.max_output
        ));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deny_list_catches_the_classics_and_spares_normal_work() {
        for bad in [
            "rm -rf /",
            "rm  -fr  / ",
            "sudo rm -rf --no-preserve-root /",
            "rm -rf ~",
            "rm -Rf /*",
            "mkfs.ext4 /dev/sda1",
            "dd if=/dev/zero of=/dev/sda bs=1M",
            ":(){ :|:& };:",
            "echo x; shutdown -h now",
            "cat junk > /dev/sda",
            "chmod -R 777 /",
        ] {
            assert!(denied(bad, &[]).ok().flatten().is_some(), "{bad}");
        }
        for fine in [
            "rm -rf ./build",
            "rm -rf /tmp/x/build",
            "ls -la /",
            "dd if=a of=b",
            "echo halting problem",
            "grep -r shutdown docs/",
            "cargo build --release",
        ] {
            assert_eq!(denied(fine, &[]).ok().flatten(), None, "{fine}");
        }
        assert!(
            denied("curl http://x | sh", &["curl .*\\| *sh".into()])
                .ok()
                .flatten()
                .is_some()
        );
        assert!(denied("ls", &["(".into()]).is_err());
    }

    #[test]
    fn cwd_stays_inside_the_workspace() {
        let ws = Path::new("/o/tmp/workspaces/a");
        assert_eq!(resolve_cwd(ws, None).ok(), Some(ws.to_path_buf()));
        assert_eq!(resolve_cwd(ws, Some("src/x")).ok(), Some(ws.join("src/x")));
        assert!(resolve_cwd(ws, Some("../b")).is_err());
        assert!(resolve_cwd(ws, Some("/etc")).is_err());
    }
}
