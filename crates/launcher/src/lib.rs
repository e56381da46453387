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

mod approvals;
mod cli;
pub mod cluster;
mod cmd;
mod discord;
mod features;
mod http;
pub mod integrity;
mod launcher;
mod metrics;
pub mod permissions;
mod preflight;
mod recent;
mod remote;
mod schedules;
pub mod storage;
mod token;
pub mod wiring;

/// Skills from the command line and the watcher `serve` runs.
pub use cmd::skill as skills_cmd;

use std::process::ExitCode;

use clap::Parser;

pub use cli::Cli;
pub use launcher::{Exit, Launcher};

// The launcher's own tools (`doctor`) are core tools.
strata_engine::declare_core!();

impl Launcher {
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
}

/// Runs the core-only launcher: `strata_launcher::run()`.
pub fn run() -> ExitCode {
    Launcher::new().run()
}
