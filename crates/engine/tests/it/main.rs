//! Integration tests of the engine's public API (one test binary, several modules). The
//! runtime's own are in `crates/runtime/tests`.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod access;
mod compress;
mod config;
mod paths;
mod safety;
mod schema;
mod tidy;
