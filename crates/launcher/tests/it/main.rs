//! The `strata` binary and the launcher, driven as a user would: one test binary (each
//! file here used to link the whole dependency tree on its own).

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod channels;
mod chat;
mod chat_input;
mod claude_mcp;
mod cli;
mod cluster;
mod common;
mod context;
mod context_window;
mod contract;
mod dashboard;
mod durable;
mod extend;
mod goals;
mod logs;
mod mcp;
mod mcp_commands;
mod memory;
mod metrics;
mod remote;
mod schedules;
mod secrets;
mod security;
mod skills_repl;
mod status;
#[cfg(feature = "postgres")]
mod storage;
mod stream;
mod surfaces;
mod taint;
mod usage;
mod vault_refs;
