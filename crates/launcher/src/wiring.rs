//! Wiring the runtime from config: invoker, session store, agents, manager.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use strata_engine::ToolFilter;
use strata_engine::agent::Agent;
use strata_engine::agent_loop::LlmAgent;
use strata_engine::approval::{ApprovalChannel, ApprovalRecord, Approvals};
use strata_engine::audit::AuditSink;
use strata_engine::config::{AgentConfig, LlmConfig, LoadedConfig};
use strata_engine::manager::AgentManager;
use strata_engine::store::StateStore;
use strata_engine::{Env, Invoker, Registry};
use strata_store::JsonlAudit;

/// Everything a running Strata holds.
pub struct Wired {
    /// Runs turns.
    pub manager: Arc<AgentManager>,
    /// Runs tool calls.
    pub invoker: Arc<Invoker>,
    /// Sessions, rate-limit counters, approval requests (SQLite or PostgreSQL).
    pub store: Arc<dyn StateStore>,
    /// The PostgreSQL pool the store opened (`None` on SQLite).
    pub pool: crate::storage::Shared,
    /// Human approval of gated calls.
    pub approvals: Arc<Approvals>,
    /// Agent memory, when configured.
    pub memory: Option<strata_memory::Backend>,
    /// The audit log (closed on shutdown).
    pub audit: Arc<JsonlAudit>,
    /// Agents that could not start, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Per-boot tokens for CLI agents that reach our tools over MCP:
    /// (agent id, secret, tool scope).
    pub internal_tokens: Vec<(String, String, Option<Vec<String>>)>,
    /// The `vault:` references the config uses ([`vault_refs_in_use`]): what the
    /// `vault_check` job looks up in the vault.
    pub vault_refs: Vec<VaultRef>,
}

impl Wired {
    /// Before the process ends: model calls' usage still on its way to the store, then the
    /// store's own writes, then the audit log. Every command that built a runtime calls it.
    pub async fn finish(&self) {
        if let Some(u) = self.invoker.env().usage() {
            u.flush().await;
        }
        if let Err(e) = self.store.flush().await {
            tracing::warn!(error = %e, "last database writes not confirmed");
        }
        self.audit.close();
    }
}

/// The agent's upper-case id as used in environment variable names.
fn env_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The `llm` block an agent uses, with `STRATA_AGENT_<ID>_MODEL` applied.
pub fn agent_llm(cfg: &LoadedConfig, id: &str, agent: &AgentConfig) -> Option<(LlmConfig, String)> {
    agent_llm_in(&cfg.config, id, agent)
}

fn agent_llm_in(
    config: &strata_engine::config::Config,
    id: &str,
    agent: &AgentConfig,
) -> Option<(LlmConfig, String)> {
    let (mut llm, path) = match &agent.llm {
        Some(l) => (l.clone(), format!("agents.{id}.llm")),
        None => (config.defaults.llm.clone()?, "defaults.llm".to_owned()),
    };
    if let Ok(m) = std::env::var(format!("STRATA_AGENT_{}_MODEL", env_id(id))) {
        llm.model = Some(m);
    }
    Some((llm, path))
}

/// `agents/<id>/AGENTS.md` plus the configured instruction (or its env override).
pub fn identity(overlay: &Path, id: &str, agent: &AgentConfig) -> String {
    let file = std::fs::read_to_string(overlay.join("agents").join(id).join("AGENTS.md"))
        .unwrap_or_default();
    let instruction = std::env::var(format!("STRATA_AGENT_{}_INSTRUCTION", env_id(id)))
        .ok()
        .or_else(|| agent.instruction.clone())
        .unwrap_or_default();
    let mut s = file.trim().to_owned();
    if s.is_empty() {
        s = format!("You are the agent `{id}`.");
    }
    if !instruction.trim().is_empty() {
        s.push_str("\n\n");
        s.push_str(instruction.trim());
    }
    s
}

/// Per-run changes to an agent (skills pin a model, narrow tools, cap rounds).
#[derive(Debug, Clone, Default)]
pub struct AgentOverrides {
    /// Provider pin.
    pub llm: Option<LlmConfig>,
    /// Tools, intersected with the agent's own.
    pub tools: Option<Vec<String>>,
    /// Round limit.
    pub max_rounds: Option<u32>,
}

/// Where agents are built from: the config and the deployment's directories (owned, so a
/// running server can build a skill's one-off agent later: [`SkillTurns`]).
#[derive(Clone)]
pub struct Site {
    /// The merged config.
    pub config: Arc<strata_engine::config::Config>,
    /// The overlay.
    pub overlay_dir: std::path::PathBuf,
    /// The data directory.
    pub data_dir: std::path::PathBuf,
}

impl Site {
    /// The site `cfg` describes.
    pub fn of(cfg: &LoadedConfig) -> Self {
        Site {
            config: Arc::new(cfg.config.clone()),
            overlay_dir: cfg.overlay_dir.clone(),
            data_dir: cfg.data_dir.clone(),
        }
    }
}

/// Builds agent `id` as configured, with `overrides` applied.
pub fn build_agent(
    cfg: &LoadedConfig,
    id: &str,
    agent: &AgentConfig,
    invoker: &Arc<Invoker>,
    vault: Option<&dyn strata_engine::secret::Vault>,
    overrides: &AgentOverrides,
    mcp_config: Option<std::path::PathBuf>,
) -> Result<LlmAgent, String> {
    build_agent_at(
        &cfg.config,
        &cfg.overlay_dir,
        &cfg.data_dir,
        (id, agent),
        invoker,
        vault,
        overrides,
        mcp_config,
    )
}

#[allow(clippy::too_many_arguments)]
fn build_agent_at(
    config: &strata_engine::config::Config,
    overlay_dir: &Path,
    data_dir: &Path,
    (id, agent): (&str, &AgentConfig),
    invoker: &Arc<Invoker>,
    vault: Option<&dyn strata_engine::secret::Vault>,
    overrides: &AgentOverrides,
    mcp_config: Option<std::path::PathBuf>,
) -> Result<LlmAgent, String> {
    let (llm, path) = match &overrides.llm {
        Some(l) => (l.clone(), format!("skill llm for agent {id}")),
        None => agent_llm_in(config, id, agent).ok_or_else(|| {
            format!("no LLM provider: set `agents.{id}.llm` or `defaults.llm` (see README, \"Providers\")")
        })?,
    };
    let model = strata_llm::model_name(&llm).unwrap_or_default();
    if model.is_empty() && llm.provider != "claude-code" {
        return Err(format!(
            "`{path}.model` is required for provider `{}`",
            llm.provider
        ));
    }
    let base = ToolFilter::from_config(agent.tools.as_ref());
    let filter = match &overrides.tools {
        None => base,
        Some(list) => base.narrow(list),
    };
    let project_dir = agent
        .project_dir
        .as_ref()
        .map(|p| overlay_dir.join(p))
        .unwrap_or_else(|| overlay_dir.join("agents").join(id));
    let ctx = strata_llm::AgentContext {
        agent_id: id.to_owned(),
        project_dir,
        tools: filter.clone(),
        registry_tools: invoker
            .registry()
            .list()
            .iter()
            .map(|t| t.spec().name.clone())
            .collect(),
        mcp_config,
        protected_paths: protected_paths(overlay_dir, data_dir),
        settings_file: Some(
            data_dir
                .join("claude-code")
                .join(format!("{id}.settings.json")),
        ),
        alerts: Some(invoker.clone()),
    };
    let provider = strata_llm::build(&llm, vault, &path, &ctx).map_err(|e| e.to_string())?;
    // The Claude Code CLI keeps its own context: what it is sent is not the request itself.
    let window = (llm.provider != "claude-code").then(|| {
        llm.context_window
            .or_else(|| strata_engine::context_window::known_window(&llm.provider, &model))
    });
    Ok(LlmAgent::new(
        id,
        identity(overlay_dir, id, agent),
        provider,
        model,
        invoker.clone(),
    )
    .with_tools(filter)
    .with_max_rounds(overrides.max_rounds.or(agent.max_rounds).unwrap_or(10))
    .with_knowledge_index(agent.compression.apply(knowledge_index(
        overlay_dir,
        id,
        agent.knowledge_index_tokens.unwrap_or(400) as usize * 4,
    )))
    .with_sampling(llm.max_tokens, llm.temperature)
    .with_context_window(window.flatten())
    .with_streaming(llm.stream.unwrap_or(true)))
}

/// Prompt skills run with their own `tools`, `max_rounds` and `llm` (Discord's slash
/// commands): a one-off agent built as `strata skill run` builds it, the same Invoker.
pub struct SkillTurns {
    /// Where agents are built from.
    pub site: Site,
    /// The Invoker every tool call goes through.
    pub invoker: Arc<Invoker>,
    /// The environment turns run in.
    pub env: Arc<strata_engine::Env>,
}

#[strata_engine::async_trait]
impl strata_engine::skills::SkillTurns for SkillTurns {
    async fn run_prompt_skill(
        &self,
        skill: &strata_engine::skills::SkillDef,
        req: strata_engine::turns::TurnRequest,
    ) -> Result<strata_engine::agent::Reply, strata_engine::agent::AgentError> {
        use strata_engine::agent::{Agent as _, AgentError, TurnContext};
        self.invoker
            .policy()
            .may_talk(&req.sender, &req.agent_id)
            .map_err(|e| AgentError::Denied(e.to_string()))?;
        let config = self
            .site
            .config
            .agents
            .get(&req.agent_id)
            .ok_or_else(|| AgentError::Other(format!("no agent `{}`", req.agent_id)))?;
        let overrides = AgentOverrides {
            llm: skill.llm.clone(),
            tools: skill.tools.clone(),
            max_rounds: skill.max_rounds,
        };
        let agent = build_agent_at(
            &self.site.config,
            &self.site.overlay_dir,
            &self.site.data_dir,
            (&req.agent_id, config),
            &self.invoker,
            self.env.vault.as_deref(),
            &overrides,
            None,
        )
        .map_err(AgentError::Other)?;
        let mut turn = TurnContext::new(
            &req.agent_id,
            &req.session_id,
            &req.channel_id,
            req.sender.clone(),
            self.env.clone(),
        );
        turn.channel_kind = req.channel_kind;
        turn.stream = req.stream;
        turn.scopes = req.scopes;
        turn.depth = req.depth;
        agent.handle(turn, req.message).await
    }
}

/// What the agent can look up, within `budget` bytes (about four per token): for the team's
/// `knowledgebase/` and the agent's own `agents/<id>/knowledgebase/`, the first lines of
/// `_index.md`, or where there is none, each Markdown or text file's title (its first
/// heading, else its name). Read when the agent is built.
pub fn knowledge_index(overlay: &Path, id: &str, budget: usize) -> String {
    if budget == 0 {
        return String::new();
    }
    let mut lines = Vec::new();
    for (dir, label) in [
        ("knowledgebase".to_owned(), "the team's"),
        (format!("agents/{id}/knowledgebase"), "your own"),
    ] {
        let root = overlay.join(&dir);
        let entries = match std::fs::read_to_string(root.join("_index.md")) {
            Ok(text) => text
                .lines()
                .map(str::trim_end)
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>(),
            Err(_) => titles(&root, &dir),
        };
        if !entries.is_empty() {
            lines.push(format!("{dir}/ ({label}):"));
            lines.extend(entries);
        }
    }
    let mut out = String::new();
    for l in lines {
        if out.len() + l.len() + 1 > budget {
            out.push_str("… (more in the files)\n");
            break;
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// `- <path> — <title>` for each `.md`/`.txt` file under `root` (two levels, sorted).
fn titles(root: &Path, shown_as: &str) -> Vec<String> {
    let mut files = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), 0)];
    while let Some((d, depth)) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() && depth < 1 {
                dirs.push((p, depth + 1));
            } else if ft.is_file() && p.extension().is_some_and(|x| x == "md" || x == "txt") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            let head = std::fs::read_to_string(&p)
                .ok()
                .and_then(|t| {
                    t.lines()
                        .take(20)
                        .find_map(|l| l.strip_prefix("# ").map(|h| h.trim().to_owned()))
                })
                .unwrap_or_default();
            if head.is_empty() {
                format!("- {shown_as}/{rel}")
            } else {
                format!("- {shown_as}/{rel} — {head}")
            }
        })
        .collect()
}

/// What a CLI provider's own tools must never touch: the data directory (tokens, stores,
/// the audit log), the vault's files and its key file, as absolute paths
/// (`~/.config/strata/` is denied by the provider itself).
fn protected_paths(overlay_dir: &Path, data_dir: &Path) -> Vec<std::path::PathBuf> {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let config = overlay_dir.join("config");
    let mut out = vec![abs(data_dir)];
    for f in ["secrets.enc", "secrets.salt"] {
        out.push(abs(&config.join(f)));
    }
    if let Some(key) = std::env::var_os("STRATA_VAULT_KEY_FILE") {
        out.push(abs(Path::new(&key)));
    }
    out
}

/// Writes Claude Code's MCP config for agent `id` (0600): our endpoint, its own token.
fn write_mcp_config(
    cfg: &LoadedConfig,
    id: &str,
    url: &str,
    token: &str,
) -> anyhow::Result<std::path::PathBuf> {
    use std::io::Write;
    let dir = cfg.data_dir.join("mcp");
    strata_engine::paths::create_private_dir_all(&dir)?;
    let path = dir.join(format!("{id}.json"));
    let doc = serde_json::json!({"mcpServers": {strata_llm::claude_code::MCP_SERVER: {
        "type": "http", "url": url, "headers": {"Authorization": format!("Bearer {token}")}
    }}});
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).write(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&path)?;
    f.write_all(serde_json::to_string_pretty(&doc)?.as_bytes())?;
    Ok(path)
}

/// Builds the runtime. Agents that cannot start are listed in `skipped`. With `mcp_url`
/// (the running server's `/mcp`), each Claude Code agent gets a per-boot token and an MCP
/// config pointing there, so its tool calls share our Invoker, limits and audit.
pub async fn build(
    cfg: &LoadedConfig,
    registry: Arc<Registry>,
    mcp_url: Option<&str>,
) -> anyhow::Result<Wired> {
    ensure_data_dir(&cfg.data_dir)
        .with_context(|| format!("cannot create data dir {}", cfg.data_dir.display()))?;
    let audit = Arc::new(JsonlAudit::open_rotating(
        &cfg.data_dir.join(&cfg.config.tools.audit_log),
        (&cfg.config.security.audit).into(),
    )?);
    let vault = process_vault(cfg)?;
    let vault_ref = vault
        .as_deref()
        .map(|v| v as &dyn strata_engine::secret::Vault);
    let (store, shared) = crate::storage::open_store(cfg, vault_ref).await?;
    let (env, memory) = env_with(cfg, vault, &shared).await?;
    let (invoker, approvals) = invoker(env.clone(), registry, audit.clone(), store.clone());
    let mut agents = Vec::new();
    let mut skipped = Vec::new();
    let mut internal_tokens = Vec::new();
    for (id, a) in &cfg.config.agents {
        let is_cli = agent_llm(cfg, id, a).is_some_and(|(l, _)| l.provider == "claude-code");
        let mcp_config = match (is_cli, mcp_url) {
            (true, Some(url)) => {
                let token = crate::http::generate_token()?;
                let path = write_mcp_config(cfg, id, url, &token)?;
                let scope = match ToolFilter::from_config(a.tools.as_ref()) {
                    ToolFilter::All => None,
                    ToolFilter::None => Some(Vec::new()),
                    ToolFilter::List(l) => Some(l),
                };
                internal_tokens.push((id.clone(), token, scope));
                Some(path)
            }
            _ => None,
        };
        match build_agent(
            cfg,
            id,
            a,
            &invoker,
            env.vault.as_deref(),
            &AgentOverrides::default(),
            mcp_config,
        ) {
            Ok(agent) => agents.push(Arc::new(agent) as Arc<dyn Agent>),
            Err(e) => skipped.push((id.clone(), e)),
        }
    }
    let manager = Arc::new(
        AgentManager::new(agents, store.clone(), env.clone()).with_alerts(invoker.clone()),
    );
    // Inter-agent tools reach the agents through the environment (weakly: no cycle).
    let directory: std::sync::Weak<dyn strata_engine::turns::AgentDirectory> =
        Arc::downgrade(&manager) as std::sync::Weak<AgentManager>;
    env.attach_agents(directory);
    // The `schedule_*` tools keep what people ask for beside the configured schedules.
    env.attach_schedules(store.clone());
    // Every model call's tokens, priced, kept beside the sessions.
    let pricing = strata_engine::usage::Pricing::from_config(&cfg.config);
    env.attach_usage(Arc::new(
        strata_engine::usage::UsageMeter::new(store.clone(), pricing.clone()).in_background(),
    ));
    // Every model call reserved against the budgets that apply, before it is made.
    if let Some(b) =
        strata_engine::budget::Budgets::from_config(&cfg.config, pricing, store.clone())
            .map_err(anyhow::Error::msg)?
    {
        invoker.attach_budgets(Arc::new(b));
    }
    Ok(Wired {
        manager,
        invoker,
        store,
        pool: shared,
        approvals,
        memory,
        audit,
        skipped,
        internal_tokens,
        vault_refs: vault_refs_in_use(cfg),
    })
}

/// The runtime environment of a process: config, directories, and the memory backend
/// `memory.*` asks for (a memory that cannot open is an error, not a silent downgrade).
pub async fn env(cfg: &LoadedConfig) -> anyhow::Result<(Arc<Env>, Option<strata_memory::Backend>)> {
    env_with(cfg, process_vault(cfg)?, &None).await
}

/// The runtime environment without memory (commands that open memory themselves).
pub fn env_without_memory(cfg: &LoadedConfig) -> anyhow::Result<Arc<Env>> {
    let mut env = Env::new(
        cfg.config.clone(),
        cfg.overlay_dir.clone(),
        cfg.data_dir.clone(),
    );
    if let Some(v) = process_vault(cfg)? {
        env = env.with_vault(v);
    }
    Ok(without_mcp_client(Arc::new(env)))
}

/// A binary built without the launcher's `mcp-client` feature says so to `install_mcp`
/// (before it writes a server that `serve` would then refuse to start with).
fn without_mcp_client(env: Arc<Env>) -> Arc<Env> {
    #[cfg(not(feature = "mcp-client"))]
    {
        struct NoClient;
        #[strata_engine::async_trait]
        impl strata_engine::McpHost for NoClient {
            async fn add_server(
                &self,
                _: &str,
                _: strata_engine::config::McpServerConfig,
            ) -> Result<Vec<String>, String> {
                Err(NO_CLIENT.into())
            }
            fn unavailable(&self) -> Option<String> {
                Some(NO_CLIENT.into())
            }
        }
        const NO_CLIENT: &str = "this binary was built without the launcher's `mcp-client` feature: it cannot run \
             MCP servers";
        env.attach_mcp(Arc::new(NoClient));
    }
    env
}

/// The overlay's vault, opened the way this process may (stdin for `serve`).
fn process_vault(cfg: &LoadedConfig) -> anyhow::Result<Option<Arc<strata_vault::FileVault>>> {
    let config_dir = cfg.overlay_dir.join("config");
    let stdin_ok = PASSPHRASE_FROM_STDIN.load(std::sync::atomic::Ordering::Relaxed);
    Ok(open_vault_from(&config_dir, stdin_ok)?.map(Arc::new))
}

/// [`env`] with the vault already open and the store's PostgreSQL pool to share.
async fn env_with(
    cfg: &LoadedConfig,
    vault: Option<Arc<strata_vault::FileVault>>,
    shared: &crate::storage::Shared,
) -> anyhow::Result<(Arc<Env>, Option<strata_memory::Backend>)> {
    let mut env = Env::new(
        cfg.config.clone(),
        cfg.overlay_dir.clone(),
        cfg.data_dir.clone(),
    );
    if let Some(v) = vault {
        env = env.with_vault(v);
    }
    let memory = crate::storage::open_memory(cfg, env.vault.as_deref(), shared).await?;
    if let Some(m) = &memory {
        env = env.with_memory(m.as_dyn());
    }
    Ok((without_mcp_client(Arc::new(env)), memory))
}

/// The Invoker of a process with every stage wired: rate-limit counters and approval
/// requests in the state store (shared with other processes on the same data dir or
/// database).
pub fn invoker(
    env: Arc<Env>,
    registry: Arc<Registry>,
    audit: Arc<dyn AuditSink>,
    store: Arc<dyn StateStore>,
) -> (Arc<Invoker>, Arc<Approvals>) {
    let mut inv = Invoker::new(registry, env.clone(), audit).with_rate_log(store.clone());
    if let Some(ch) = env.config.security.alert_channel.clone() {
        inv = inv.with_alert_sink(Arc::new(strata_engine::connector::ChannelAlerts::new(
            env.connectors().clone(),
            ch,
        )));
    }
    let approvals = Arc::new(Approvals::new(store.clone(), inv.policy().clone()));
    // Goal workstreams over the same store; their gated decisions wait on these approvals.
    // (A bad `goals.*` is refused at start by the schedules' check, which names the key.)
    match strata_engine::goals::Goals::new(store, &env.config.goals) {
        Ok(goals) => {
            goals.attach_gate(approvals.clone());
            env.attach_goals(Arc::new(goals));
        }
        Err(e) => tracing::error!("goals are off: {e}"),
    }
    (Arc::new(inv.with_approvals(approvals.clone())), approvals)
}

/// Tells the terminal about approval requests (CLI runs: `strata invoke`, `chat`, `repl`).
pub struct StderrApprovals;

#[strata_engine::async_trait]
impl ApprovalChannel for StderrApprovals {
    fn name(&self) -> &str {
        "terminal"
    }

    async fn post(&self, r: &ApprovalRecord) {
        eprintln!(
            "approval needed: {}
  approve: strata approvals approve {id}
  deny:    strata approvals deny {id}",
            r.description,
            id = r.id
        );
    }

    async fn outcome(&self, r: &ApprovalRecord) {
        eprintln!(
            "approval {}: {}{}",
            r.id,
            r.status.as_str(),
            r.approver
                .as_deref()
                .map(|a| format!(" by {a}"))
                .unwrap_or_default()
        );
    }
}

/// The agent `chat`/`repl` talk to when none is named.
pub fn default_agent(cfg: &LoadedConfig) -> Result<String, String> {
    if let Some(a) = &cfg.config.defaults.agent {
        return Ok(a.clone());
    }
    let ids: Vec<&String> = cfg.config.agents.keys().collect();
    match ids.as_slice() {
        [] => Err("no agents configured: add one under `agents:` in config/agents.yaml".into()),
        [one] => Ok((*one).clone()),
        _ if cfg.config.agents.contains_key("main") => Ok("main".into()),
        _ => Err(format!(
            "several agents ({}); pick one with --agent or set `defaults.agent`",
            ids.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Creates the data directory (and missing parents) private to this user (0700): sessions,
/// memory and the audit log live there. An existing directory is left as it is (`strata
/// doctor` fails when others can read it).
pub fn ensure_data_dir(dir: &Path) -> std::io::Result<()> {
    strata_engine::paths::create_private_dir_all(dir)
}

/// Set by commands whose standard input is free (`serve`): the vault's passphrase may then
/// come from one line of stdin or a terminal prompt when the environment names none.
pub static PASSPHRASE_FROM_STDIN: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The overlay's vault (`config/secrets.enc`), opened with the passphrase from the
/// environment (`STRATA_VAULT_KEY_FILE`, `~/.config/strata/vault-key`,
/// `STRATA_VAULT_PASSPHRASE`), or asked for when stdin is a terminal. No vault: `None`. A vault without a passphrase: `None` and a
/// warning (its `vault:` references then fail, naming the key). A wrong passphrase: an error.
pub fn open_vault(config_dir: &std::path::Path) -> anyhow::Result<Option<strata_vault::FileVault>> {
    open_vault_from(config_dir, false)
}

/// Logs every `vault:` reference the vault cannot answer, with the config path that wants it
/// (`serve` at start; what needs a secret at start also fails there, naming both again). Only
/// the references the configuration uses ([`vault_refs_in_use`]).
pub fn warn_missing_vault_refs(
    cfg: &LoadedConfig,
    vault: Option<&dyn strata_engine::secret::Vault>,
) {
    for (path, key) in missing_vault_refs(cfg, vault) {
        tracing::warn!(
            config = %path,
            key = %key,
            "`{path}` refers to vault key `{key}`, which {}: whatever uses it fails until `strata vault set {key} --from-stdin`",
            if vault.is_some() { "the vault does not hold" } else { "cannot be read (no vault open)" }
        );
    }
}

/// The `vault:` references the configuration uses ([`vault_refs_in_use`]) that the vault
/// cannot answer, as (config path, key).
pub fn missing_vault_refs(
    cfg: &LoadedConfig,
    vault: Option<&dyn strata_engine::secret::Vault>,
) -> Vec<(String, String)> {
    vault_refs_in_use(cfg)
        .into_iter()
        .filter(|r| vault.is_none_or(|v| v.get(&r.key).is_none()))
        .map(|r| (r.path, r.key))
        .collect()
}

/// A `vault:` reference in the merged configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultRef {
    /// Its dotted config path (`modules.fleet.mind_token`).
    pub path: String,
    /// The vault key it names (`mind-token`).
    pub key: String,
    /// The layer that set it, as `strata config show --origin` names it (`core`,
    /// `module:fleet`, `overlay:config/config.yaml`, `env:STRATA_…`, `flag:--set …`).
    pub layer: String,
}

/// Whether `layer` is a default rather than the team's own setting: the core's or a module's
/// `default.yaml`.
fn is_default_layer(layer: &str) -> bool {
    layer == "core" || layer.starts_with("module:")
}

/// The `vault:` references the configuration uses — what `serve` warns about at start,
/// `doctor` checks and the `vault_check` job alerts on. One the team set (overlay, profile,
/// environment, a flag) always counts. One only a default names (core or a module's
/// `default.yaml`) counts once the team configured the section it sits in: some other key
/// under the same parent has a value from a team layer that is neither null nor the value
/// the defaults give it. So the fleet module's `modules.fleet.mind_token: vault:mind-token`
/// counts when `modules.fleet.mind_url` is set, not while the team's `modules.fleet` only
/// restates the defaults (`mind_url: null`, `timeout_secs: 20`) and nothing uses the token.
pub fn vault_refs_in_use(cfg: &LoadedConfig) -> Vec<VaultRef> {
    let tree = serde_json::to_value(&cfg.config).unwrap_or_default();
    let refs = strata_engine::secret::vault_refs(&tree);
    if refs.is_empty() {
        return Vec::new();
    }
    let origins: std::collections::HashMap<String, String> = cfg
        .origins()
        .into_iter()
        .map(|(k, _, layer)| (k, layer))
        .collect();
    // The origins name leaves, and an array is one leaf: a reference inside one
    // (`server.tokens.0.token`) was set by whoever set the array.
    let layer_of = |path: &str| -> Option<&str> {
        let mut p = path;
        loop {
            if let Some(l) = origins.get(p) {
                return Some(l.as_str());
            }
            p = &p[..p.rfind('.')?];
        }
    };
    let mut leaves = Vec::new();
    leaves_of("", &tree, &mut leaves);
    let defaults = default_tree(cfg);
    refs.into_iter()
        .filter_map(|(path, key)| {
            let layer = layer_of(&path).unwrap_or("core").to_owned();
            let counts = !is_default_layer(&layer)
                || match path.rsplit_once('.') {
                    // A reference at the top level has no section to look at.
                    None => true,
                    Some((parent, _)) => {
                        let prefix = format!("{parent}.");
                        leaves.iter().any(|(k, v)| {
                            *k != path
                                && k.starts_with(&prefix)
                                && !v.is_null()
                                && layer_of(k).is_some_and(|l| !is_default_layer(l))
                                && value_at(&defaults, k) != Some(*v)
                        })
                    }
                };
            counts.then_some(VaultRef { path, key, layer })
        })
        .collect()
}

/// What the defaults alone give: the core's and each module's `default.yaml` (under
/// `modules.<name>`), as JSON.
fn default_tree(cfg: &LoadedConfig) -> serde_json::Value {
    let mut tree =
        serde_json::to_value(strata_engine::config::Config::default()).unwrap_or_default();
    if let Some(modules) = tree.as_object_mut().and_then(|t| {
        t.entry("modules")
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()
    }) {
        for m in &cfg.modules {
            let section: serde_json::Value =
                yaml_serde::from_str(m.default_yaml).unwrap_or(serde_json::Value::Null);
            modules.insert(m.name.clone(), section);
        }
    }
    tree
}

/// The value at a dotted path (objects only, as the origins name leaves).
fn value_at<'a>(tree: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(tree, |v, k| v.get(k))
}

/// Every leaf under `v` with its dotted path, the way `LoadedConfig::origins` lists them (an
/// array or an empty object is one leaf).
fn leaves_of<'a>(
    prefix: &str,
    v: &'a serde_json::Value,
    out: &mut Vec<(String, &'a serde_json::Value)>,
) {
    match v {
        serde_json::Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves_of(&key, v, out);
            }
        }
        other => out.push((prefix.to_owned(), other)),
    }
}

/// [`open_vault`], also reading one line of standard input when `allow_stdin` and it is not a
/// terminal. On a terminal, both ask (no echo) when the environment names no passphrase.
pub fn open_vault_from(
    config_dir: &std::path::Path,
    allow_stdin: bool,
) -> anyhow::Result<Option<strata_vault::FileVault>> {
    if !strata_vault::FileVault::exists(config_dir) {
        return Ok(None);
    }
    // The environment first; then stdin (only where the command leaves it free) or, on a
    // terminal, a prompt.
    let pass = strata_vault::passphrase(allow_stdin)?;
    let Some(pass) = pass else {
        tracing::warn!(
            vault = %config_dir.join("secrets.enc").display(),
            "a vault is here but no passphrase was given: set STRATA_VAULT_KEY_FILE or STRATA_VAULT_PASSPHRASE"
        );
        return Ok(None);
    };
    Ok(Some(strata_vault::FileVault::open(config_dir, &pass)?))
}
