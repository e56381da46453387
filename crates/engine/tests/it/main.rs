//! Integration tests of the engine's public API (one test binary, several modules).

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod access;
mod approval;
mod compress;
mod config;
mod inbound;
mod invoker;
mod paths;
mod runtime;
mod safety;
mod schedule;
mod schema;
mod skills;
mod taint;
mod tidy;

use std::sync::Arc;

use strata_engine::config::Config;
use strata_engine::{Env, ToolContext};

/// A runtime environment over a temp overlay.
pub fn env_in(dir: &std::path::Path) -> Arc<Env> {
    let mut config = Config::default();
    config.tools.timeout_secs = 5;
    Arc::new(Env::new(config, dir.to_path_buf(), dir.join("data")))
}

/// Silences "unused" for helpers only some modules use.
#[allow(dead_code)]
pub fn ctx(env: Arc<Env>) -> ToolContext {
    ToolContext {
        agent_id: None,
        session_id: None,
        channel_id: None,
        principal: strata_engine::Principal::Operator,
        request_id: "test".into(),
        policy: Arc::new(strata_engine::access::AccessPolicy::from_config(
            &env.config,
        )),
        tools: Arc::new(strata_engine::Registry::empty()),
        env,
        depth: 0,
        taint: None,
    }
}
