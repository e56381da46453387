//! The Claude Code CLI as a provider: one `claude --print --output-format stream-json` process
//! per turn, prompt on stdin, `--resume` for an existing CLI session.
//!
//! Claude Code runs its tools itself; ours reach it through `strata serve`'s MCP endpoint
//! (`--mcp-config`, a per-agent file naming `/mcp` with the agent's own token; each turn adds
//! an `X-Strata-Turn` header so the call runs as that turn's), so a turn through this
//! provider returns a final answer and no tool calls for the engine to run. The child gets a clean environment
//! (allow-listed variables only), runs in the agent's project directory, in its own process
//! group, and the whole group is killed when the wall-clock timeout expires.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use strata_engine::ToolFilter;
use strata_engine::config::Builtins;
use strata_engine::llm::*;
use strata_engine::secret::Secret;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Name of the MCP server our tools appear under in Claude Code (`mcp__strata__<tool>`).
pub const MCP_SERVER: &str = "strata";

/// Settings for one agent's CLI.
#[derive(Debug, Clone)]
pub struct ClaudeCodeSettings {
    /// The executable.
    pub command: PathBuf,
    /// Working directory.
    pub project_dir: PathBuf,
    /// Extra variables to pass through.
    pub env_allow: Vec<String>,
    /// Set as `ANTHROPIC_API_KEY` for the child when configured.
    pub api_key: Option<Secret>,
    /// Wall clock per turn.
    pub timeout: Duration,
    /// `--allowedTools` values.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools` values.
    pub disallowed_tools: Vec<String>,
    /// `--mcp-config` file naming our `/mcp` (written by `serve` for each Claude Code agent;
    /// absent in CLI runs, which serve no MCP).
    pub mcp_config: Option<PathBuf>,
    /// Which of the CLI's own tools the agent gets (`llm.builtins`).
    pub builtins: Builtins,
    /// `llm.disallow_builtins`.
    pub disallow_builtins: Vec<String>,
    /// The `--settings` value: the path of the agent's settings file, or the document itself
    /// (see [`BuiltinPolicy::settings`]) where there is no file.
    pub settings: std::ffi::OsString,
    /// Config path for error messages (`agents.main.llm`).
    pub config_path: String,
}

impl ClaudeCodeSettings {
    /// Maps the agent's tool filter onto Claude Code's names for our MCP tools.
    pub fn tool_flags(
        filter: &ToolFilter,
        registry_tools: &[String],
    ) -> (Vec<String>, Vec<String>) {
        let mcp = |n: &str| format!("mcp__{MCP_SERVER}__{n}");
        match filter {
            ToolFilter::All => (vec![format!("mcp__{MCP_SERVER}")], Vec::new()),
            ToolFilter::None => (Vec::new(), registry_tools.iter().map(|t| mcp(t)).collect()),
            ToolFilter::List(_) => {
                let (allowed, denied): (Vec<&String>, Vec<&String>) =
                    registry_tools.iter().partition(|t| filter.allows(t));
                (
                    allowed.into_iter().map(|t| mcp(t)).collect(),
                    denied.into_iter().map(|t| mcp(t)).collect(),
                )
            }
        }
    }
}

/// The CLI's built-in tools we know by name. `none` also passes `--tools ""`, which takes
/// away the ones added after this list was written.
pub const KNOWN_BUILTINS: &[&str] = &[
    "Bash",
    "BashOutput",
    "KillShell",
    "Edit",
    "MultiEdit",
    "Write",
    "NotebookEdit",
    "Read",
    "NotebookRead",
    "Glob",
    "Grep",
    "LS",
    "WebFetch",
    "WebSearch",
    "Task",
    "TodoWrite",
    "SlashCommand",
    "Skill",
    "ExitPlanMode",
];

/// The built-ins `read_only` allows: they read files and nothing else (no network: WebFetch
/// would go around the SSRF guard and the taint marks).
pub const READ_ONLY_BUILTINS: &[&str] = &["Read", "Glob", "Grep"];

/// The CLI's file tools, each denied the protected paths by its own rule (a `Read` rule
/// does not stop `Edit`).
const FILE_TOOLS: &[&str] = &["Read", "Edit", "Write", "NotebookEdit"];

/// Key files denied in every mode, wherever they are.
const KEY_FILES: &[&str] = &[
    "**/*.key",
    "**/*.pem",
    "**/*.p12",
    "**/id_rsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
    "~/.ssh/**",
    "~/.config/strata/**",
];

/// How an agent's `llm.builtins` and `llm.disallow_builtins` reach the CLI: its flags and the
/// permission rules of its settings file.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltinPolicy {
    /// The mode.
    pub mode: Builtins,
    /// Taken away besides (names or rules).
    pub disallow: Vec<String>,
}

impl BuiltinPolicy {
    /// `--tools` (the CLI's list of built-ins it offers at all): `""` for none, the read-only
    /// three, or left out for all.
    pub fn tools_flag(&self) -> Option<String> {
        match self.mode {
            Builtins::None => Some(String::new()),
            Builtins::ReadOnly => Some(READ_ONLY_BUILTINS.join(",")),
            Builtins::All => None,
        }
    }

    /// Built-ins to name in `--allowedTools` (so they run without a prompt nobody answers).
    pub fn allowed(&self) -> Vec<String> {
        let list: &[&str] = match self.mode {
            Builtins::None => &[],
            Builtins::ReadOnly => READ_ONLY_BUILTINS,
            Builtins::All => KNOWN_BUILTINS,
        };
        list.iter()
            .filter(|b| !self.disallow.iter().any(|d| d == *b))
            .map(|b| (*b).to_owned())
            .collect()
    }

    /// Built-ins to name in `--disallowedTools`: every known one the mode does not give (for
    /// a CLI that predates `--tools`), then `disallow_builtins`.
    pub fn disallowed(&self) -> Vec<String> {
        let mut out: Vec<String> = match self.mode {
            Builtins::None => KNOWN_BUILTINS.iter().map(|b| (*b).to_owned()).collect(),
            Builtins::ReadOnly => KNOWN_BUILTINS
                .iter()
                .filter(|b| !READ_ONLY_BUILTINS.contains(b))
                .map(|b| (*b).to_owned())
                .collect(),
            Builtins::All => Vec::new(),
        };
        for d in &self.disallow {
            if !out.contains(d) {
                out.push(d.clone());
            }
        }
        out
    }

    /// The settings document (`--settings`): deny rules for every file tool on each protected
    /// path (`//` marks an absolute path in the CLI's rules) and on key files, the shell
    /// kept off the protected paths where a pattern can say so, and no way to switch the
    /// checks off.
    pub fn settings(protected: &[PathBuf]) -> Value {
        let mut deny = Vec::new();
        let mut paths: Vec<String> = Vec::new();
        for p in protected {
            let text = p.to_string_lossy();
            let abs = text.trim_end_matches('/');
            if abs.is_empty() {
                continue;
            }
            let rel = abs.trim_start_matches('/');
            paths.push(format!("//{rel}"));
            paths.push(format!("//{rel}/**"));
            deny.push(format!("Bash(*{abs}*)"));
        }
        paths.extend(KEY_FILES.iter().map(|k| (*k).to_owned()));
        for tool in FILE_TOOLS {
            for p in &paths {
                deny.push(format!("{tool}({p})"));
            }
        }
        json!({
            "permissions": {
                "deny": deny,
                "disableBypassPermissionsMode": "disable",
            }
        })
    }

    /// Writes [`settings`](Self::settings) to `path` (0600, replaced whole).
    pub fn write_settings(path: &std::path::Path, protected: &[PathBuf]) -> std::io::Result<()> {
        use std::io::Write;
        if let Some(dir) = path.parent() {
            strata_engine::paths::create_private_dir_all(dir)?;
        }
        let tmp = path.with_extension("json.tmp");
        let mut opts = std::fs::OpenOptions::new();
        opts.create(true).write(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(serde_json::to_string_pretty(&Self::settings(protected))?.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    }
}

/// The Claude Code provider.
pub struct ClaudeCodeProvider {
    settings: ClaudeCodeSettings,
    agent_id: String,
    alerts: Option<std::sync::Arc<strata_runtime::Invoker>>,
    /// When each refused tool was last reported (again after [`DENIAL_COOLDOWN`]).
    reported: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

/// A tool the CLI refused is reported again after this long.
pub const DENIAL_COOLDOWN: Duration = Duration::from_secs(6 * 3600);

/// The `provider_state` key holding the CLI's session id.
const SESSION_KEY: &str = "claude_session_id";

enum Outcome {
    Done(CompletionResponse),
    SessionGone,
}

impl ClaudeCodeProvider {
    /// A provider with these settings.
    pub fn new(settings: ClaudeCodeSettings) -> Self {
        Self::new_for(settings, "", None)
    }

    /// A provider for `agent_id` that reports the tools the CLI refuses to `alerts`.
    pub fn new_for(
        settings: ClaudeCodeSettings,
        agent_id: &str,
        alerts: Option<std::sync::Arc<strata_runtime::Invoker>>,
    ) -> Self {
        ClaudeCodeProvider {
            settings,
            agent_id: agent_id.to_owned(),
            alerts,
            reported: std::sync::Mutex::default(),
        }
    }

    /// The tools the CLI refused in a turn (`permission_denials` of its result) as alerts,
    /// each with what to change, once per [`DENIAL_COOLDOWN`].
    fn report_denials(&self, result: &serde_json::Value) {
        let Some(denied) = result["permission_denials"].as_array() else {
            return;
        };
        let agent = &self.agent_id;
        for d in denied {
            let tool = d["tool_name"].as_str().unwrap_or("a tool").to_owned();
            let fresh = {
                let mut last = self.reported.lock().unwrap_or_else(|p| p.into_inner());
                let now = std::time::Instant::now();
                let fresh = last
                    .get(&tool)
                    .is_none_or(|t| now.duration_since(*t) >= DENIAL_COOLDOWN);
                if fresh {
                    last.insert(tool.clone(), now);
                }
                fresh
            };
            if !fresh {
                continue;
            }
            let fix = match tool.strip_prefix("mcp__strata__") {
                Some(ours) => {
                    format!("add `{ours}` to `agents.{agent}.tools` if the agent should have it")
                }
                None => format!(
                    "if the agent should have it: `agents.{agent}.llm.builtins: all` (or \
                     `read_only` for Read, Glob and Grep) and `{tool}` out of \
                     `agents.{agent}.llm.disallow_builtins`"
                ),
            };
            let message = format!(
                "Claude Code refused `{tool}` to agent `{agent}` ({}) — {fix}",
                self.settings.config_path
            );
            tracing::warn!(agent = %agent, tool = %tool, "Claude Code refused a tool");
            if let Some(inv) = &self.alerts {
                inv.alert(strata_engine::audit::Alert {
                    kind: "permissions",
                    rule: "claude_code_denied".into(),
                    message,
                    agent_id: Some(agent.clone()),
                    tool: Some(tool),
                    request_id: None,
                    score: None,
                });
            }
        }
    }

    fn err(&self, detail: impl Into<String>) -> LlmError {
        LlmError::Unavailable {
            provider: "claude-code".into(),
            attempts: 1,
            detail: detail.into(),
        }
    }

    fn prompt(req: &CompletionRequest, resumed: bool) -> String {
        let mut p = String::new();
        if let Some(s) = &req.system {
            p.push_str(s.trim_end());
            p.push_str("\n\n---\n\n");
        }
        let (last, earlier) = match req.messages.split_last() {
            Some((l, e)) => (l.content.as_str(), e),
            None => ("", &[][..]),
        };
        // A fresh CLI session has not seen our history: hand it over as text.
        if !resumed && !earlier.is_empty() {
            p.push_str("Earlier in this conversation:\n");
            for m in earlier {
                let who = m.role.as_str();
                if !m.content.is_empty() {
                    p.push_str(&format!("{who}: {}\n", m.content));
                }
            }
            p.push_str("\nNow:\n");
        }
        p.push_str(last);
        p
    }

    async fn run_once(
        &self,
        req: &CompletionRequest,
        resume: Option<&str>,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<Outcome, LlmError> {
        let s = &self.settings;
        // Cleared environment + allow-list, own process group, killed when dropped.
        let mut cmd = strata_sandbox::host::command(&s.command, &s.env_allow);
        cmd.args(["--print", "--output-format", "stream-json", "--verbose"]);
        if !req.model.is_empty() {
            cmd.args(["--model", &req.model]);
        }
        if let Some(id) = resume {
            cmd.args(["--resume", id]);
        }
        // The CLI's own tools: what `llm.builtins` gives, on top of our MCP tools' flags.
        let policy = BuiltinPolicy {
            mode: s.builtins,
            disallow: s.disallow_builtins.clone(),
        };
        if let Some(tools) = policy.tools_flag() {
            cmd.arg("--tools").arg(tools);
        }
        let allowed: Vec<String> = policy
            .allowed()
            .into_iter()
            .chain(s.allowed_tools.iter().cloned())
            .collect();
        if !allowed.is_empty() {
            cmd.arg("--allowedTools").arg(allowed.join(","));
        }
        let disallowed: Vec<String> = policy
            .disallowed()
            .into_iter()
            .chain(s.disallowed_tools.iter().cloned())
            .collect();
        if !disallowed.is_empty() {
            cmd.arg("--disallowedTools").arg(disallowed.join(","));
        }
        cmd.arg("--settings").arg(&s.settings);
        if s.builtins != Builtins::All {
            // Only the MCP servers we name: none from the user's or the project's files.
            cmd.arg("--strict-mcp-config");
        }
        // With a running turn, the CLI's tool calls carry its id (`X-Strata-Turn`) so they run
        // as this turn's calls: its sender, its inter-agent depth. A per-run copy of the
        // config holds the header; it is removed when the run ends.
        let _turn_config = match (&s.mcp_config, &req.turn) {
            (Some(base), Some(turn)) => {
                let t = TurnConfig::write(base, turn)
                    .map_err(|e| self.err(format!("cannot write the per-turn MCP config: {e}")))?;
                cmd.arg("--mcp-config").arg(&t.0);
                Some(t)
            }
            (Some(base), None) => {
                cmd.arg("--mcp-config").arg(base);
                None
            }
            _ => None,
        };
        std::fs::create_dir_all(&s.project_dir).map_err(|e| {
            self.err(format!(
                "cannot create project dir {}: {e}",
                s.project_dir.display()
            ))
        })?;
        cmd.current_dir(&s.project_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(k) = &s.api_key {
            cmd.env("ANTHROPIC_API_KEY", k.expose());
        }
        let mut child = cmd.spawn().map_err(|e| {
            LlmError::Other(format!(
                "claude-code: cannot start `{}`: {e}; install Claude Code or set `{}.command`",
                s.command.display(),
                s.config_path
            ))
        })?;
        let pgid = child.id();
        let prompt = Self::prompt(req, resume.is_some());
        let mut stdin = child.stdin.take().ok_or_else(|| self.err("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| self.err("no stdout"))?;
        let mut stderr = child.stderr.take().ok_or_else(|| self.err("no stderr"))?;

        let work = async {
            stdin
                .write_all(prompt.as_bytes())
                .await
                .map_err(|e| self.err(format!("writing the prompt failed: {e}")))?;
            drop(stdin);
            let mut lines = BufReader::new(stdout).lines();
            let mut result: Option<Value> = None;
            let mut session: Option<String> = None;
            while let Some(line) = lines
                .next_line()
                .await
                .map_err(|e| self.err(format!("reading output failed: {e}")))?
            {
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if let Some(id) = v["session_id"].as_str() {
                    session = Some(id.to_owned());
                }
                match v["type"].as_str() {
                    Some("assistant") => {
                        for block in v["message"]["content"].as_array().into_iter().flatten() {
                            match block["type"].as_str() {
                                Some("tool_use") => tracing::debug!(
                                    tool = block["name"].as_str().unwrap_or("?"),
                                    "claude-code is using a tool"
                                ),
                                Some("text") => {
                                    if let Some(t) = block["text"].as_str() {
                                        on_event(StreamEvent::TextDelta(t.to_owned()));
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                    Some("result") => result = Some(v),
                    _ => {}
                }
            }
            let mut err_text = String::new();
            let _ = stderr.read_to_string(&mut err_text).await;
            let status = child
                .wait()
                .await
                .map_err(|e| self.err(format!("waiting for the CLI failed: {e}")))?;
            Ok::<_, LlmError>((result, session, err_text, status))
        };

        let (result, session, err_text, status) = match tokio::time::timeout(s.timeout, work).await
        {
            Ok(r) => r?,
            Err(_) => {
                strata_sandbox::host::kill_group(pgid);
                return Err(self.err(format!(
                    "timed out after {}s; the CLI's process group was killed",
                    s.timeout.as_secs()
                )));
            }
        };
        let lower = err_text.to_lowercase();
        if resume.is_some() && lower.contains("no conversation found") {
            return Ok(Outcome::SessionGone);
        }
        let Some(result) = result else {
            let detail = err_text.trim().chars().take(400).collect::<String>();
            return Err(classify(
                &self.settings.config_path,
                &format!("exited with {status} without a result: {detail}"),
            ));
        };
        let text = result["result"].as_str().unwrap_or_default().to_owned();
        if result["is_error"].as_bool() == Some(true)
            || result["subtype"].as_str().is_some_and(|st| st != "success")
        {
            let sub = result["subtype"].as_str().unwrap_or("error");
            return Err(classify(
                &self.settings.config_path,
                &format!("{sub}: {text}"),
            ));
        }
        self.report_denials(&result);
        // The CLI's `usage` is Anthropic's (cache tokens apart from `input_tokens`), and
        // it reports what the whole exchange cost.
        let u = &result["usage"];
        let n = |k: &str| u[k].as_u64().unwrap_or(0);
        let (read, written) = (
            n("cache_read_input_tokens"),
            n("cache_creation_input_tokens"),
        );
        let usage = Usage {
            input_tokens: n("input_tokens") + read + written,
            output_tokens: n("output_tokens"),
            cached_input_tokens: read,
            cache_write_tokens: written,
            cost_usd: result["total_cost_usd"].as_f64(),
        };
        let session = result["session_id"].as_str().map(str::to_owned).or(session);
        Ok(Outcome::Done(CompletionResponse {
            message: ChatMessage::text(Role::Assistant, text),
            stop: StopReason::EndTurn,
            usage,
            provider_state: session.map(|id| json!({ SESSION_KEY: id })),
        }))
    }
}

/// Turns CLI failures into errors a service operator can act on.
fn classify(config_path: &str, detail: &str) -> LlmError {
    let lower = detail.to_lowercase();
    if lower.contains("invalid api key")
        || lower.contains("/login")
        || lower.contains("not logged in")
        || lower.contains("authentication")
    {
        return LlmError::Auth {
            provider: "claude-code".into(),
            config_key: format!("{config_path}.api_key"),
            detail: detail.to_owned(),
        };
    }
    if lower.contains("usage limit") || lower.contains("rate limit") {
        return LlmError::Unavailable {
            provider: "claude-code".into(),
            attempts: 1,
            detail: format!("usage limit reached: {detail}"),
        };
    }
    LlmError::Unavailable {
        provider: "claude-code".into(),
        attempts: 1,
        detail: detail.to_owned(),
    }
}

#[async_trait]
impl LlmProvider for ClaudeCodeProvider {
    fn name(&self) -> &str {
        "claude-code"
    }

    async fn check(&self) -> Result<String, LlmError> {
        let cmd = &self.settings.command;
        let mut c = strata_sandbox::host::command(cmd, &self.settings.env_allow);
        c.arg("--version");
        match strata_sandbox::host::output(c, None, Duration::from_secs(30), 16 * 1024).await {
            Ok(o) if o.status.is_some_and(|s| s.success()) => Ok(format!(
                "claude-code: `{}` runs ({})",
                cmd.display(),
                o.stdout.trim()
            )),
            Ok(o) => Err(LlmError::Other(format!(
                "claude-code: `{} --version` {}: {}",
                cmd.display(),
                o.status
                    .map_or_else(|| "timed out".to_owned(), |s| format!("exited with {s}")),
                o.stderr.trim()
            ))),
            Err(e) => Err(LlmError::Other(format!(
                "claude-code: cannot start `{}`: {e}; install Claude Code or set `{}.command`",
                cmd.display(),
                self.settings.config_path
            ))),
        }
    }

    async fn complete(&self, req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
        self.complete_streaming(req, &mut |_| {}).await
    }

    async fn complete_streaming(
        &self,
        req: &CompletionRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<CompletionResponse, LlmError> {
        let resume = req
            .provider_state
            .as_ref()
            .and_then(|s| s[SESSION_KEY].as_str())
            .map(str::to_owned);
        match self.run_once(req, resume.as_deref(), on_event).await? {
            Outcome::Done(r) => Ok(r),
            Outcome::SessionGone => {
                tracing::info!("claude-code session is gone; starting a fresh one");
                match self.run_once(req, None, on_event).await? {
                    Outcome::Done(r) => Ok(r),
                    Outcome::SessionGone => Err(self.err("the CLI lost its session twice")),
                }
            }
        }
    }
}

/// The name of the header that carries the turn id to our MCP endpoint.
pub const TURN_HEADER: &str = "X-Strata-Turn";

/// A per-run copy of the MCP config with the turn header added to every server; removed on
/// drop.
struct TurnConfig(std::path::PathBuf);

impl TurnConfig {
    fn write(base: &std::path::Path, turn: &str) -> std::io::Result<TurnConfig> {
        use std::io::Write;
        let text = std::fs::read_to_string(base)?;
        let mut doc: Value = serde_json::from_str(&text)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        if let Some(servers) = doc["mcpServers"].as_object_mut() {
            for server in servers.values_mut() {
                if !server["headers"].is_object() {
                    server["headers"] = serde_json::json!({});
                }
                server["headers"][TURN_HEADER] = Value::String(turn.to_owned());
            }
        }
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let name = format!(
            "{}.turn-{}-{}.json",
            base.file_stem().and_then(|s| s.to_str()).unwrap_or("mcp"),
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let path = base.with_file_name(name);
        let mut opts = std::fs::OpenOptions::new();
        opts.create_new(true).write(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&path)?;
        f.write_all(doc.to_string().as_bytes())?;
        Ok(TurnConfig(path))
    }
}

impl Drop for TurnConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
