//! The core tool pack against real files, SQLite and local HTTP fakes: one test binary.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod agents;
mod extend;
mod files;
mod notes;
mod search;
mod team;
mod web;
