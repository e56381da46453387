//! # strata-setup
//!
//! Onboarding and deployment, behind `cargo xtask setup | new-overlay | new-module |
//! check-core` (xtask runs this crate's binary so xtask itself stays dependency-free):
//!
//! - [`wizard`]: the setup wizard — answers from a file or asked on a terminal
//!   ([`prompt`]), checked ([`validate`]), then written step by step with a [`journal`] that
//!   rolls everything back on failure or Ctrl-C; re-running on an overlay updates it.
//! - [`render`]: the overlay crate's and a module crate's files.
//! - [`units`]: systemd units with real paths.
//! - [`dist`]: `cargo xtask dist` — the binary, its sha256, SBOM and units in `target/dist/`.
//! - [`remote`]: a team clone's `origin` → `upstream` with pushing disabled.
//! - [`check_core`]: deployment details that must not be in core or modules.

pub mod answers;
pub mod check_core;
pub mod dist;
pub mod journal;
pub mod prompt;
pub mod remote;
pub mod render;
pub mod units;
pub mod validate;
pub mod wizard;
