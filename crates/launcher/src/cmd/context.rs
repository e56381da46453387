//! What every command shares: the loaded config, registry and skills (`Context`), the
//! CLI's Invoker, logging, the tokio runtime, output and failure helpers.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use serde_json::Value;
use strata_engine::config::{LoadOptions, LoadedConfig};
use strata_store::JsonlAudit;

use crate::Launcher;
use crate::cli::GlobalArgs;
use strata_engine::Env;
use strata_runtime::Registry;

use crate::Exit;

/// Everything a command needs once config and registry are loaded.
pub(crate) struct Context {
    pub(crate) config: LoadedConfig,
    pub(crate) registry: Arc<Registry>,
    /// The skills; command skills are in `registry` as `skill__<name>` tools.
    pub(crate) skills: Arc<strata_runtime::skills::SkillSet>,
}

/// The Invoker of a CLI command (`invoke`, `skill run`, `mcp serve --stdio`): the audit log,
/// the store's rate-limit counters and approval requests, and approval requests shown on
/// stderr. [`CliInvoker::finish`] saves what is queued.
pub(crate) struct CliInvoker {
    pub(crate) invoker: Arc<strata_runtime::Invoker>,
    store: Arc<dyn strata_runtime::store::StateStore>,
    audit: Arc<JsonlAudit>,
}

impl CliInvoker {
    pub(crate) fn open(l: &Context, rt: &tokio::runtime::Runtime) -> anyhow::Result<Self> {
        let audit = Arc::new(open_audit(l)?);
        let (store, env) = rt.block_on(async {
            let (env, _) = crate::wiring::env(&l.config).await?;
            let store = open_store(l, &env).await?;
            anyhow::Ok((store, env))
        })?;
        let (invoker, approvals) = rt.block_on(async {
            crate::wiring::invoker(env, l.registry.clone(), audit.clone(), store.clone())
        });
        approvals.add_channel(Arc::new(crate::wiring::StderrApprovals));
        Ok(CliInvoker {
            invoker,
            store,
            audit,
        })
    }

    /// Waits for queued writes and closes the audit log.
    pub(crate) fn finish(self, rt: &tokio::runtime::Runtime) {
        if let Err(e) = rt.block_on(self.store.flush()) {
            tracing::warn!(error = %e, "rate-limit counters not saved");
        }
        drop(self.invoker);
        self.audit.close();
    }
}

/// What has to be flushed before the process ends (the OpenTelemetry export).
#[derive(Default)]
pub(crate) struct LogGuard {
    #[cfg(feature = "otel")]
    export: Option<strata_otel::Export>,
}

impl LogGuard {
    /// Sends the spans not sent yet.
    pub(crate) fn finish(self) {
        #[cfg(feature = "otel")]
        if let Some(e) = self.export
            && let Err(err) = e.shutdown()
        {
            tracing::warn!(error = %err, "spans not all exported");
        }
    }
}

/// A filter written before the engine's machinery moved to `strata-runtime` names
/// `strata_engine` for the tool calls and turns it wants to see: a `strata_engine=LEVEL`
/// directive also sets `strata_runtime` to that level, unless the filter names it itself.
fn engine_covers_runtime(directives: &str) -> String {
    let parts: Vec<&str> = directives.split(',').map(str::trim).collect();
    let names_runtime = parts.iter().any(|d| d.starts_with("strata_runtime"));
    let mut out: Vec<String> = parts.iter().map(|d| d.to_string()).collect();
    if !names_runtime {
        for d in &parts {
            if let Some(level) = d.strip_prefix("strata_engine=") {
                out.push(format!("strata_runtime={level}"));
            }
        }
    }
    out.join(",")
}

/// Logging to stderr (`log.*`), the last warnings kept for `strata status`, and — with
/// `telemetry.otlp_endpoint` in a binary built with the `otel` feature — spans exported.
pub(crate) fn init_logging(
    default_level: &str,
    json: bool,
    telemetry: Option<&strata_engine::config::TelemetryConfig>,
) -> LogGuard {
    let directives = std::env::var(tracing_subscriber::EnvFilter::DEFAULT_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default_level.to_string());
    let filter = tracing_subscriber::EnvFilter::try_new(engine_covers_runtime(&directives))
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(default_level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // Colour only for a person at a terminal: a file or journald gets plain text.
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let fmt = if json {
        tracing_subscriber::Layer::boxed(fmt.json())
    } else {
        tracing_subscriber::Layer::boxed(fmt)
    };
    let endpoint = telemetry.and_then(|t| t.otlp_endpoint.as_deref());
    #[cfg(feature = "otel")]
    let (otel, export, otel_error) = match endpoint {
        Some(e) => {
            let service = telemetry
                .and_then(|t| t.service_name.as_deref())
                .unwrap_or("strata");
            match strata_otel::layer(e, service) {
                Ok((layer, export)) => (Some(layer), Some(export), None),
                Err(err) => (None, None, Some(err.to_string())),
            }
        }
        None => (None, None, None),
    };
    #[cfg(not(feature = "otel"))]
    let otel_error = endpoint.map(|e| {
        format!(
            "`telemetry.otlp_endpoint` is {e}, but this binary was built without the launcher's \
             `otel` feature: no spans are exported (add `features = [\"otel\"]` to the overlay's \
             strata-launcher dependency)"
        )
    });
    // The last warnings and errors are kept for `strata status`.
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(crate::recent::layer());
    #[cfg(feature = "otel")]
    let _ = registry.with(otel).try_init();
    #[cfg(not(feature = "otel"))]
    let _ = registry.try_init();
    if let Some(e) = otel_error {
        tracing::warn!("{e}");
    }
    LogGuard {
        #[cfg(feature = "otel")]
        export,
    }
}

pub(crate) fn load(launcher: &Launcher, g: &GlobalArgs) -> anyhow::Result<Context> {
    let overlay_dir = g
        .overlay
        .clone()
        .or_else(|| launcher.overlay_default().cloned())
        .map_or_else(std::env::current_dir, Ok)
        .context("cannot determine the overlay directory")?;
    let modules = Registry::module_sources(launcher.modules())?;
    let options = LoadOptions {
        overlay_dir,
        profile: g.profile.clone(),
        modules,
        use_env: true,
        data_dir: g.data_dir.clone(),
        overrides: g.overrides.clone(),
    };
    let declared = launcher.modules().to_vec();
    let context = load_with(&options, &declared)?;
    // The `doctor` tool checks the files again the way this process read them.
    let _ = LOADED.set((options, declared));
    Ok(context)
}

/// How this process loaded its configuration (the first [`load`]), for loading it again.
static LOADED: std::sync::OnceLock<(LoadOptions, Vec<String>)> = std::sync::OnceLock::new();

/// The configuration, registry and skills as the files are now, loaded as this process
/// loaded them; `None` when this process did not start through the launcher's command line.
pub(crate) fn reload() -> Option<anyhow::Result<Context>> {
    LOADED
        .get()
        .map(|(options, declared)| load_with(options, declared))
}

fn load_with(options: &LoadOptions, declared: &[String]) -> anyhow::Result<Context> {
    let config = LoadedConfig::load(options)?;
    let registry = Arc::new(Registry::from_inventory(declared)?);
    let skills = Arc::new(strata_runtime::skills::SkillSet::load(
        strata_runtime::skills::dirs_for(&config),
    ));
    strata_tools::skill_tools::sync(&registry, &skills);
    Ok(Context {
        config,
        registry,
        skills,
    })
}

pub(crate) fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub(crate) fn fail(err: &anyhow::Error) -> Exit {
    eprintln!("error: {err:#}");
    Exit::Failure
}

pub(crate) fn out(text: &str) -> Exit {
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Exit::Ok,
        // A closed pipe (`strata tools | head`) is not worth a panic.
        Err(_) => Exit::Failure,
    }
}

/// `--args` as a JSON object, or the usage error to print.
pub(crate) fn parse_args_json(raw: &str) -> Result<Value, String> {
    match serde_json::from_str(raw) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!(
            "--args must be a JSON object like '{{\"path\": \"x\"}}', got {}",
            match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "null",
            }
        )),
        Err(e) => Err(format!("--args is not valid JSON: {e}")),
    }
}

/// The configured state store (sessions, rate-limit counters, approvals), its `vault:`
/// references resolved with `env`'s vault.
pub(crate) async fn open_store(
    l: &Context,
    env: &Env,
) -> anyhow::Result<Arc<dyn strata_runtime::store::StateStore>> {
    crate::storage::open_store(&l.config, env.vault.as_deref())
        .await
        .map(|(s, _)| s)
}

pub(crate) fn open_audit(l: &Context) -> Result<JsonlAudit, strata_store::audit_log::AuditError> {
    JsonlAudit::open_rotating(&audit_path(l), (&l.config.config.security.audit).into())
}

pub(crate) fn audit_path(l: &Context) -> PathBuf {
    l.config.data_dir.join(&l.config.config.tools.audit_log)
}

/// Prints a turn's text to the terminal as the model writes it (`strata chat`, `repl`).
/// Text written before a tool call is the model thinking aloud: it stays on screen, and the
/// tool call is shown on stderr. [`Self::finish`] completes the answer's line — or prints the
/// reply whole where what streamed was not it (an answer the engine wrote, a budget's
/// sentence).
pub(crate) struct LivePrinter {
    round: std::sync::Arc<std::sync::Mutex<String>>,
    sink: strata_engine::turns::TurnSink,
}

impl LivePrinter {
    /// A printer whose text starts after `prefix` (the repl's `agent> `).
    pub(crate) fn new(prefix: &str) -> Self {
        Self::waiting(prefix, None)
    }

    /// [`LivePrinter::new`] with a spinner saying `waiting` until the first token or tool
    /// call arrives.
    pub(crate) fn waiting(prefix: &str, waiting: Option<String>) -> Self {
        use strata_engine::turns::TurnEvent;
        let round: std::sync::Arc<std::sync::Mutex<String>> = Default::default();
        let shown = round.clone();
        let prefix = prefix.to_owned();
        let spinner = waiting.map(Progress::start);
        let sink = strata_engine::turns::TurnSink::new(move |e| {
            if let Some(s) = &spinner {
                s.stop();
            }
            let mut r = shown.lock().unwrap_or_else(|p| p.into_inner());
            let mut stdout = std::io::stdout().lock();
            match e {
                TurnEvent::Token { text } => {
                    if r.is_empty() {
                        let _ = write!(stdout, "{prefix}");
                    }
                    r.push_str(&text);
                    let _ = write!(stdout, "{text}");
                    let _ = stdout.flush();
                }
                TurnEvent::ToolStart { tool, .. } => {
                    if !r.is_empty() {
                        let _ = writeln!(stdout);
                        let _ = stdout.flush();
                    }
                    r.clear();
                    eprintln!("  (using {tool}…)");
                }
                TurnEvent::ToolEnd { .. } => {}
            }
        });
        LivePrinter { round, sink }
    }

    /// The sink to put on the turn.
    pub(crate) fn sink(&self) -> strata_engine::turns::TurnSink {
        self.sink.clone()
    }

    /// Ends the output: a newline after the streamed answer, or the reply's text (after
    /// `prefix`) when the last round's text was not the reply. `None` text: print nothing
    /// more than the newline that ends what streamed.
    pub(crate) fn finish(&self, prefix: &str, reply: Option<&str>) {
        let r = self.round.lock().unwrap_or_else(|p| p.into_inner());
        let mut stdout = std::io::stdout().lock();
        match reply {
            Some(text) if r.trim_end() == text.trim_end() => {
                let _ = writeln!(stdout);
            }
            Some(text) => {
                if !r.is_empty() {
                    let _ = writeln!(stdout);
                }
                let _ = writeln!(stdout, "{prefix}{text}");
            }
            None => {
                if !r.is_empty() {
                    let _ = writeln!(stdout);
                }
            }
        }
        let _ = stdout.flush();
    }
}

/// A mistake in the command (an unknown schedule or goal): exit code 2.
#[derive(Debug)]
pub(crate) struct Usage(pub(crate) String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Prints what a command's work made, or its error: a [`Usage`] mistake exits 2, anything
/// else 1.
pub(crate) fn finish(done: anyhow::Result<String>) -> Exit {
    match done {
        Ok(text) => out(&text),
        Err(e) => match e.downcast_ref::<Usage>() {
            Some(u) => {
                eprintln!("error: {}", u.0);
                Exit::Usage
            }
            None => fail(&e),
        },
    }
}

/// `-q`: no progress lines.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `-q` for this process.
pub(crate) fn set_quiet(q: bool) {
    QUIET.store(q, std::sync::atomic::Ordering::Relaxed);
}

/// Whether stdout is a terminal with colour allowed.
pub(crate) fn colour_on_stdout() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdout()) && colour_allowed()
}

fn colour_allowed() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// A spinner with a message on stderr while something waits on the network or takes
/// seconds — only for a person at a terminal: nothing on a pipe, a file or under `-q`.
/// Cleared when dropped. Plain characters (`|/-\`) under `NO_COLOR` or `TERM=dumb`.
pub(crate) struct Progress {
    running: std::sync::Mutex<Option<Running>>,
    message: std::sync::Arc<std::sync::Mutex<String>>,
}

struct Running {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    pub(crate) fn start(message: impl Into<String>) -> Progress {
        let shown = std::io::IsTerminal::is_terminal(&std::io::stderr())
            && !QUIET.load(std::sync::atomic::Ordering::Relaxed);
        let message = std::sync::Arc::new(std::sync::Mutex::new(message.into()));
        if !shown {
            return Progress {
                running: std::sync::Mutex::new(None),
                message,
            };
        }
        let shared = message.clone();
        let fancy = colour_allowed();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            use std::io::Write as _;
            let frames: &[&str] = if fancy {
                &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]
            } else {
                &["|", "/", "-", "\\"]
            };
            let started = std::time::Instant::now();
            let mut widest = 0;
            for i in 0.. {
                let secs = started.elapsed().as_secs();
                let message = shared.lock().unwrap_or_else(|p| p.into_inner()).clone();
                widest = widest.max(message.chars().count());
                let line = if fancy {
                    format!(
                        "\r\x1b[2K\x1b[36m{}\x1b[0m {message} \x1b[2m{secs}s\x1b[0m",
                        frames[i % frames.len()]
                    )
                } else {
                    format!("\r{} {message} {secs}s ", frames[i % frames.len()])
                };
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(line.as_bytes());
                let _ = err.flush();
                drop(err);
                match rx.recv_timeout(std::time::Duration::from_millis(100)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            }
            let clear = if fancy {
                "\r\x1b[2K".to_owned()
            } else {
                format!("\r{}\r", " ".repeat(widest + 12))
            };
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(clear.as_bytes());
            let _ = err.flush();
        });
        Progress {
            running: std::sync::Mutex::new(Some(Running { stop: tx, thread })),
            message,
        }
    }

    /// Changes the message (a count that moves).
    pub(crate) fn set(&self, message: impl Into<String>) {
        *self.message.lock().unwrap_or_else(|p| p.into_inner()) = message.into();
    }

    /// Clears the line and stops (the first output is about to be written).
    pub(crate) fn stop(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(r) = running {
            let _ = r.stop.send(());
            let _ = r.thread.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::engine_covers_runtime;

    #[test]
    fn an_engine_directive_also_reaches_the_runtime() {
        assert_eq!(
            engine_covers_runtime("info,strata_engine=debug"),
            "info,strata_engine=debug,strata_runtime=debug"
        );
        // A filter that names the runtime itself is left as written.
        assert_eq!(
            engine_covers_runtime("info,strata_engine=debug,strata_runtime=warn"),
            "info,strata_engine=debug,strata_runtime=warn"
        );
        assert_eq!(engine_covers_runtime("warn"), "warn");
        // A narrower target is not widened.
        assert_eq!(
            engine_covers_runtime("strata_engine::taint=trace"),
            "strata_engine::taint=trace"
        );
    }
}
