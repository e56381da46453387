//! strata-postgres: the store and memory conformance suites (every test against SQLite and
//! PostgreSQL) and what only PostgreSQL has (migrations under a lock, failures).

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod goals;
mod harness;
mod journal;
mod memory;
mod postgres;
mod store;
