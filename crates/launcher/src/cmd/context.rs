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
use strata_engine::{Env, Registry};

use crate::Exit;

/// Everything a command needs once config and registry are loaded.
pub(crate) struct Context {
    pub(crate) config: LoadedConfig,
    pub(crate) registry: Arc<Registry>,
    /// The skills; command skills are in `registry` as `skill__<name>` tools.
    pub(crate) skills: Arc<strata_engine::skills::SkillSet>,
}

/// The Invoker of a CLI command (`invoke`, `skill run`, `mcp serve --stdio`): the audit log,
/// the store's rate-limit counters and approval requests, and approval requests shown on
/// stderr. [`CliInvoker::finish`] saves what is queued.
pub(crate) struct CliInvoker {
    pub(crate) invoker: Arc<strata_engine::Invoker>,
    store: Arc<dyn strata_engine::store::StateStore>,
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

pub(crate) fn init_logging(default_level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
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
    // The last warnings and errors are kept for `strata status`.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(crate::recent::layer())
        .try_init();
}

pub(crate) fn load(launcher: &Launcher, g: &GlobalArgs) -> anyhow::Result<Context> {
    let overlay_dir = g
        .overlay
        .clone()
        .or_else(|| launcher.overlay_default().cloned())
        .map_or_else(std::env::current_dir, Ok)
        .context("cannot determine the overlay directory")?;
    let modules = Registry::module_sources(launcher.modules())?;
    let config = LoadedConfig::load(&LoadOptions {
        overlay_dir,
        profile: g.profile.clone(),
        modules,
        use_env: true,
        data_dir: g.data_dir.clone(),
        overrides: g.overrides.clone(),
    })?;
    let registry = Arc::new(Registry::from_inventory(launcher.modules())?);
    let skills = Arc::new(strata_engine::skills::SkillSet::load(
        strata_engine::skills::dirs_for(&config),
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
) -> anyhow::Result<Arc<dyn strata_engine::store::StateStore>> {
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
