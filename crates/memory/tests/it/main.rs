//! Memory backends: SQLite files and a fake Honcho server: one test binary.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod honcho;
mod sqlite;
