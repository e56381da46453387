//! The export against a small OTLP/HTTP receiver on 127.0.0.1: one test binary.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod export;
