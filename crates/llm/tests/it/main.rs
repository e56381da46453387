//! The providers against fake vendor servers on 127.0.0.1 speaking their wire formats: one test binary.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod anthropic_gemini;
mod budget;
mod claude_code;
mod openai;
mod usage;
