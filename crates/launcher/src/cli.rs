//! Command-line grammar.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Strata: an agent engine. Runs agents, serves tools, and lets you call them.
#[derive(Debug, Parser)]
#[command(name = "strata", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand takes.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// The overlay directory (config/, agents/, data/). Default: this binary's own overlay, or
    /// the current directory.
    #[arg(long, global = true, env = "STRATA_OVERLAY", value_name = "DIR")]
    pub overlay: Option<PathBuf>,
    /// Profile: also loads config/config.<P>.yaml and config/agents.<P>.yaml.
    #[arg(long, global = true, env = "STRATA_PROFILE", value_name = "P")]
    pub profile: Option<String>,
    /// Where runtime data lives (overrides `data_dir`).
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Overrides one config value, e.g. `--set server.port=9000` (repeatable, applied last).
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// More log output on stderr: `-v` info (debug for `serve`), `-vv` debug (trace for
    /// `serve`). `RUST_LOG` still wins.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Errors only on stderr (`serve`: warnings and errors), and no progress lines.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

impl GlobalArgs {
    /// The log level for a command whose usual level is `usual` (`warn` for the CLI,
    /// `log.level` for `serve`), after `-v`/`-q`.
    pub fn log_level(&self, usual: &str) -> String {
        const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];
        let at = LEVELS
            .iter()
            .position(|l| usual.eq_ignore_ascii_case(l))
            .unwrap_or(1);
        if self.quiet {
            // One step down and never below warnings: the CLI's `warn` becomes `error`,
            // serve's `info` becomes `warn`.
            return LEVELS[at.saturating_sub(1).min(1)].to_owned();
        }
        if self.verbose == 0 {
            return usual.to_owned();
        }
        LEVELS[(at + usize::from(self.verbose)).min(LEVELS.len() - 1)].to_owned()
    }
}

/// Acting on a running server instead of this binary.
#[derive(Debug, Args, Clone)]
pub struct RemoteArgs {
    /// Base URL of a running Strata (e.g. `http://127.0.0.1:8770`).
    #[arg(long, value_name = "URL", requires = "token")]
    pub remote: Option<String>,
    /// Its control token (or set STRATA_TOKEN).
    #[arg(long, value_name = "T", env = "STRATA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Starts the runtime and runs until SIGINT or SIGTERM.
    Serve,
    /// Lists the tools linked into this binary (or a running server's, with --remote).
    Tools {
        /// Prints `{"tools": [ToolSpec…]}` with each tool's layer.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Shows one tool's spec and input schema.
    Inspect {
        /// Tool name.
        #[arg(long, value_name = "NAME")]
        tool: String,
        /// Prints the spec as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Prints the most recent audit records (newest last), optionally following new ones.
    Events {
        /// How many (1..1000).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Keep printing records as they are written.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Calls a tool through the invocation pipeline (audited like every call).
    Invoke {
        /// Tool name.
        #[arg(long, value_name = "NAME")]
        tool: String,
        /// Arguments as a JSON object.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
        /// Request id to record (default: a new UUID).
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
        /// Prints the full InvocationResult as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Preflight: config, overlay layout, data dir, vault and the keys the config references,
    /// sandbox, service units; exits non-zero on a fatal problem.
    Doctor {
        /// Also ask each provider and Discord whether they accept their credentials.
        #[arg(long)]
        online: bool,
    },
    /// Skills: list them, or run one.
    Skill {
        #[command(subcommand)]
        command: SkillCommand,
    },
    /// An interactive conversation with an agent in the terminal.
    Repl {
        /// Agent id (default: `defaults.agent`, the only agent, or `main`).
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
        /// Session id (default `repl`).
        #[arg(long, value_name = "ID", default_value = "repl")]
        session: String,
    },
    /// The audit log.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// The MCP server over this binary's tools.
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Human approval of gated tool calls: list requests, approve or deny them.
    Approvals {
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// The encrypted vault in config/: init, set, get, list, rm, rekey, doctor. The passphrase
    /// comes from STRATA_VAULT_KEY_FILE, ~/.config/strata/vault-key or STRATA_VAULT_PASSPHRASE.
    Vault {
        #[command(subcommand)]
        command: VaultCommand,
    },
    /// Agent memory: search, list, show, forget, stats, export, import, decay.
    Memory {
        #[command(subcommand)]
        command: MemoryCommand,
    },
    /// Where state is kept: `status` (backend, schema version, row counts, pool) and
    /// `migrate --from sqlite --to postgres`.
    Storage {
        #[command(subcommand)]
        command: StorageCommand,
    },
    /// The cluster (`cluster.*`): its members as the database knows them.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Schedules (`schedules.*` and the built-in jobs): their state, runs, pause and resume.
    Schedule {
        #[command(subcommand)]
        command: ScheduleCommand,
    },
    /// Prints the shell completion script for `bash`, `zsh`, `fish`, `elvish` or
    /// `powershell` (e.g. `strata completions bash > /etc/bash_completion.d/strata`).
    /// Needs no overlay.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Goal workstreams (docs/GOALS.md): `list`, `show ID`, `events ID`.
    Goal {
        #[command(subcommand)]
        command: GoalCommand,
    },
    /// The turn journal (docs/DURABILITY.md): `list [--unfinished]`, `show TURN_ID`.
    Turns {
        #[command(subcommand)]
        command: TurnsCommand,
    },
    /// The integrity baseline (SHA-256 of the binary, config, units, agent identity and
    /// skill files): `check` compares, `accept` takes a new one.
    Integrity {
        #[command(subcommand)]
        command: IntegrityCommand,
    },
    /// Content safety: see what the sanitiser and the injection scorer make of a text.
    Safety {
        #[command(subcommand)]
        command: SafetyCommand,
    },
    /// Model calls' tokens and cost from the store, summed per agent, model, sender, UTC
    /// day, turn or session (prices: `pricing.*` over the shipped defaults).
    Usage {
        /// `agent`, `model`, `sender`, `day`, `turn` or `session`.
        #[arg(long, default_value = "agent")]
        by: String,
        /// From when: `7d`, `24h`, `2026-12-01` or an RFC 3339 time (default: everything).
        #[arg(long)]
        since: Option<String>,
        /// Only this turn's calls.
        #[arg(long, value_name = "ID")]
        turn: Option<String>,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// One screen on the running `serve`: instances, agents and their health, connectors,
    /// pending approvals, today's spend by agent, budgets, the last warnings and errors. It
    /// finds the server from `server.bind`/`server.port` and reads its token from
    /// `server.tokens` or `<data_dir>/api-token`; exits 1 when it cannot reach it (and shows
    /// what the store alone says).
    Status {
        #[command(flatten)]
        remote: RemoteArgs,
        /// Prints the server's JSON (`GET /api/status`).
        #[arg(long)]
        json: bool,
    },
    /// Sends one message to an agent and prints the answer.
    Chat {
        /// Agent id (default: `defaults.agent`, the only agent, or `main`).
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
        /// Session id; turns in one session share history (default `cli`).
        #[arg(long, value_name = "ID", default_value = "cli")]
        session: String,
        /// The message.
        message: String,
    },
}

/// `strata cluster …`
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Shows each instance (id, address, version, started, last heartbeat, leases, turns
    /// in flight) and the work queue's depth and redeliveries.
    Status {
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `strata schedule …` (the state is in the store `serve` uses: a change is seen by the
/// running instances within a second).
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Every schedule: when, what, next and last run, failures.
    List {
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// One schedule and its last runs.
    Show {
        /// The schedule.
        name: String,
    },
    /// Makes a schedule due now (a running `serve` starts it within a second).
    Run {
        /// The schedule.
        name: String,
    },
    /// Pauses a schedule until `resume`.
    Pause {
        /// The schedule.
        name: String,
    },
    /// Resumes a paused schedule.
    Resume {
        /// The schedule.
        name: String,
    },
    /// A schedule's runs, newest first.
    History {
        /// The schedule.
        name: String,
        /// How many (1–1000).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `strata goal …`: goals as the store `serve` uses keeps them.
#[derive(Debug, Subcommand)]
pub enum GoalCommand {
    /// Every goal: id, state, title, participants, open tasks and proposals.
    List {
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// One goal in full (JSON): participants, tasks, proposals with their votes.
    Show {
        /// The goal's id.
        id: String,
    },
    /// A goal's log: every change, who made it, when and why (oldest first).
    Events {
        /// The goal's id.
        id: String,
        /// How many of the newest (1–10000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `strata turns …`: the turn journal as the store `serve` uses keeps it.
#[derive(Debug, Subcommand)]
pub enum TurnsCommand {
    /// Journaled turns, newest first: id, agent, session, outcome (`unfinished` while one runs
    /// or when its process died), times resumed, steps.
    List {
        /// Only turns without an end.
        #[arg(long)]
        unfinished: bool,
        /// How many (1–10000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// One turn and every step it recorded: time, kind, status, tokens or time, detail.
    Show {
        /// The turn's id (a `/chat` caller's `request_id`, a connector's message id, …).
        id: String,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `strata integrity …` (the baseline is `<data_dir>/integrity.json`).
#[derive(Debug, Subcommand)]
pub enum IntegrityCommand {
    /// Compares the watched files with the baseline; exits 1 when any differs.
    Check {
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// Takes a new baseline of the files as they are now (after an intended change), saying
    /// what differs from the old one.
    Accept,
}

/// `strata storage …`
#[derive(Debug, Subcommand)]
pub enum StorageCommand {
    /// Shows the configured backend, its schema version, row counts and pool state.
    Status {
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// Copies sessions, memories (with vectors), approvals, counters and logs from one backend
    /// into another (`--from sqlite --to postgres`); running it again copies nothing twice.
    Migrate {
        /// The backend to read: `sqlite` (the data dir's files).
        #[arg(long, value_name = "BACKEND")]
        from: String,
        /// The backend to write: `postgres` (`storage.postgres`, and `memory.postgres` when set).
        #[arg(long, value_name = "BACKEND")]
        to: String,
        /// Counts what is there on both sides and writes nothing.
        #[arg(long)]
        dry_run: bool,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Prints the merged configuration (secrets masked).
    Show {
        /// Shows which layer set each value.
        #[arg(long)]
        origin: bool,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// Prints the JSON Schema of a config file (from the config types), for editors that
    /// validate YAML: `config` (config/config.yaml, agents.yaml and their profiles, the
    /// default), `team` (config/team.json) or `mcp` (config/mcp.yaml). Needs no overlay.
    Schema {
        /// Which file.
        #[arg(value_enum, default_value = "config")]
        file: SchemaFile,
    },
}

/// The config files `strata config schema` describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemaFile {
    /// config/config.yaml and config/agents.yaml (the whole configuration).
    Config,
    /// config/team.json.
    Team,
    /// config/mcp.yaml.
    Mcp,
}

#[derive(Debug, Subcommand)]
pub enum SkillCommand {
    /// Lists the skills with their origin.
    List {
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// Runs a skill: a command skill prints the command's output; a prompt skill runs a turn.
    Run {
        /// Skill name (`<agent>:<name>` for agent skills).
        name: String,
        /// A parameter, `key=value` (repeatable).
        #[arg(long = "param", value_name = "KEY=VALUE")]
        params: Vec<String>,
        /// Agent for prompt skills (default as for `chat`).
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Serves MCP (for clients that spawn a process). The running server also serves MCP over
    /// HTTP at `/mcp`.
    Serve {
        /// Speak MCP on stdin/stdout (the only transport of this command).
        #[arg(long)]
        stdio: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Checks the log's hash chain and reports the first broken link.
    Verify {
        /// The log to check (default: the configured audit log in the data dir).
        #[arg(long, value_name = "PATH")]
        file: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Lists approval requests, newest first (pending ones unless --all).
    List {
        /// All requests, decided ones too.
        #[arg(long)]
        all: bool,
        /// How many (1..1000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Approves a pending request: the waiting call runs.
    Approve {
        /// Request id (from `strata approvals list`).
        id: String,
        /// A note recorded with the decision.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Denies a pending request: the waiting call does not run.
    Deny {
        /// Request id (from `strata approvals list`).
        id: String,
        /// Why (the agent is told).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum SafetyCommand {
    /// Prints what the sanitiser removes, the injection score, the matched rules and the
    /// verdict under the configured policy.
    Scan {
        /// A file, or `-` for stdin.
        input: String,
        /// Prints the result as JSON.
        #[arg(long, conflicts_with = "jsonl")]
        json: bool,
        /// Reads one JSON object per line (with a `text` field) and prints one result per line.
        #[arg(long)]
        jsonl: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Searches every scope (the operator sees all).
    Search {
        /// What to look for.
        query: String,
        /// Most results.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// keyword, semantic or hybrid.
        #[arg(long, default_value = "hybrid")]
        mode: String,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists memories, newest first.
    List {
        /// Only changed since (Unix seconds or RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Only this scope (`agent:<id>`, `private:<person>`, `global`, `group:<name>`).
        #[arg(long)]
        scope: Option<String>,
        /// Most results.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows one memory and its change log.
    Show {
        /// Memory id.
        id: String,
    },
    /// Erases one memory (text, search entry, vector); the reason is logged.
    Forget {
        /// Memory id.
        id: String,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Counts per scope and type.
    Stats {
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
    /// Writes every memory as JSON lines (stdout, or --file).
    Export {
        /// Output file.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Reads JSON lines (`content`, `scope`, optional `type`, `category`, `tags`, `pinned`,
    /// `confidence`) from a file or `-` and stores each, printing its id as it is committed.
    Import {
        /// A file, or `-` for stdin.
        input: String,
    },
    /// Applies confidence decay now (what `serve` does every `memory.decay.interval_hours`).
    Decay {
        /// Shows what would change without changing it.
        #[arg(long)]
        dry_run: bool,
        /// Prints JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum VaultCommand {
    /// Creates an empty vault (600,000 PBKDF2 iterations, a new salt).
    Init,
    /// Stores a secret; the value is one line read from standard input.
    Set {
        /// The key (`vault:<key>` in config).
        key: String,
        /// Read the value from standard input (the default when it is not a terminal).
        #[arg(long)]
        from_stdin: bool,
    },
    /// Prints a secret.
    Get {
        /// The key.
        key: String,
    },
    /// Lists the keys (never the values).
    List,
    /// Removes a secret.
    Rm {
        /// The key.
        key: String,
    },
    /// Re-encrypts with a new salt and 600,000 iterations (new passphrase from
    /// STRATA_VAULT_NEW_PASSPHRASE when set).
    Rekey,
    /// Checks permissions, iteration count, duplicate spellings and stray whitespace.
    Doctor,
}
