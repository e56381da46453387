//! What a deployment's `main.rs` sets up — the [`Launcher`]: its modules, its default
//! overlay — and the exit codes of every command ([`Exit`]). Running it (`Launcher::run`)
//! is the crate root's, above the commands.

use std::path::PathBuf;
use std::process::ExitCode;

/// Exit codes (a contract for scripts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success.
    Ok = 0,
    /// Operational failure, unknown tool on `invoke`, or a tool status other than `ok`.
    Failure = 1,
    /// User input error: bad flags, unknown tool on `inspect`, `--args` not a JSON object.
    Usage = 2,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

/// Builds and runs a Strata binary.
#[derive(Debug, Clone)]
pub struct Launcher {
    modules: Vec<String>,
    default_overlay: Option<PathBuf>,
}

impl Default for Launcher {
    fn default() -> Self {
        Self::new()
    }
}

impl Launcher {
    /// A launcher with the core tools linked.
    pub fn new() -> Self {
        // Referencing the crate keeps its `inventory` registrations in the binary.
        let _ = strata_tools::link();
        #[cfg(feature = "browser")]
        let _ = strata_browser::link();
        Launcher {
            modules: Vec::new(),
            default_overlay: None,
        }
    }

    /// Declares a module, in precedence order: a later module's tool shadows an earlier one's.
    /// Pass the module crate's `link()` so the linker keeps it.
    pub fn module(mut self, name: &str) -> Self {
        self.modules.push(name.to_owned());
        self
    }

    /// The overlay to use when neither `--overlay` nor `STRATA_OVERLAY` is given. Deployment
    /// binaries pass their own crate directory.
    pub fn default_overlay(mut self, dir: impl Into<PathBuf>) -> Self {
        self.default_overlay = Some(dir.into());
        self
    }

    pub(crate) fn modules(&self) -> &[String] {
        &self.modules
    }

    pub(crate) fn overlay_default(&self) -> Option<&PathBuf> {
        self.default_overlay.as_ref()
    }
}
