//! Integration tests of the runtime: the invocation pipeline, approvals, taint, schedules,
//! skills, inbound routing and turns (one test binary, several modules).

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod approval;
mod flow;
mod inbound;
mod invoker;
mod monitor;
mod runtime;
mod schedule;
mod skills;
mod taint;

use std::sync::Arc;

use strata_engine::Env;
use strata_engine::config::Config;

/// A runtime environment over a temp overlay.
pub fn env_in(dir: &std::path::Path) -> Arc<Env> {
    let mut config = Config::default();
    config.tools.timeout_secs = 5;
    Arc::new(Env::new(config, dir.to_path_buf(), dir.join("data")))
}
