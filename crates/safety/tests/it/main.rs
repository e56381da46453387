//! strata-safety's integration tests: the corpus gate and the held-out sets.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod corpus;
mod heldout;
