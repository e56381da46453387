//! The SQLite store: sessions and security state: one test binary.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod sessions;
