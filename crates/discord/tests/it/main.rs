//! The real twilight clients against a fake Discord on 127.0.0.1 (`strata_test_support::discord`:
//! a gateway — WebSocket: HELLO, IDENTIFY, READY, heartbeats, dispatches pushed by the test —
//! and REST, every request recorded). Agents are real `LlmAgent`s under a real
//! `AgentManager`; only the model is scripted.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod accounts;
mod approvals;
mod files;
mod messages;
mod slash;
mod world;
