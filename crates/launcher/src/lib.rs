//! # strata-launcher
//!
//! Wiring and the command line. A deployment binary is one `main.rs`:
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     strata_launcher::Launcher::new()
//!         // .module(strata_mod_ops::link())   // modules, in precedence order
//!         .default_overlay(env!("CARGO_MANIFEST_DIR"))
//!         .run()
//! }
//! ```
//!
//! [`Launcher::run`] parses the command line, loads the layered config, builds the tool
//! registry from everything linked in, and runs the subcommand.

mod cli;
pub mod cluster;
mod cmd;
mod discord;
mod features;
mod http;
pub mod integrity;
mod metrics;
pub mod permissions;
mod preflight;
mod recent;
mod remote;
mod schedules;
pub mod storage;
pub mod wiring;

/// Skills from the command line and the watcher `serve` runs.
pub use cmd::skill as skills_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

pub use cli::Cli;

// The launcher's own tools (`doctor`) are core tools.
strata_engine::declare_core!();

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

    /// Parses `std::env::args` and runs the command.
    pub fn run(self) -> ExitCode {
        self.run_with(std::env::args_os()).into()
    }

    /// Parses `args` (including the program name) and runs the command.
    pub fn run_with<I, T>(self, args: I) -> Exit
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let cli = match Cli::try_parse_from(args) {
            Ok(c) => c,
            Err(e) => {
                let _ = e.print();
                return if e.use_stderr() {
                    Exit::Usage
                } else {
                    Exit::Ok
                };
            }
        };
        cmd::dispatch(&self, cli)
    }

    pub(crate) fn modules(&self) -> &[String] {
        &self.modules
    }

    pub(crate) fn overlay_default(&self) -> Option<&PathBuf> {
        self.default_overlay.as_ref()
    }
}

/// Runs the core-only launcher: `strata_launcher::run()`.
pub fn run() -> ExitCode {
    Launcher::new().run()
}
