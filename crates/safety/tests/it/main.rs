//! strata-safety's integration tests: the corpus gate.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod corpus;
