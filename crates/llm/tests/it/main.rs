//! The providers against fake vendor servers on 127.0.0.1 speaking their wire formats: one test binary.

mod anthropic_gemini;
mod claude_code;
mod openai;
