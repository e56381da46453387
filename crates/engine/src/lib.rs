//! # strata-engine
//!
//! The contract a team builds on to extend Strata: what to implement, and the data those
//! implementations exchange with the runtime. Implement
//!
//! - a **tool** with [`macro@tool`] on an `async fn(&ToolContext, …) -> Result<T, ToolError>`
//!   (below); put it in a crate that calls [`declare_module!`] and link that crate into an
//!   overlay — every tool linked in is registered;
//! - a **connector** ([`connector::Connector`]): messages in from a chat or a socket as
//!   [`connector::InboundMessage`]s, replies out as [`connector::OutboundMessage`]s;
//! - a **memory backend** ([`memory::MemoryBackend`]): a context block before each turn and
//!   the exchange recorded after it;
//! - an **agent** ([`agent::Agent`]) when the model ↔ tool loop is not what you want;
//! - an **LLM provider** ([`llm::LlmProvider`]) for a model API Strata does not speak.
//!
//! The data they see: [`ToolContext`] and the [`Env`] it carries (configuration, vault,
//! memory, the running agents, and the runtime's services by type), [`Principal`] (who is
//! asking), [`Taint`] (what untrusted content the turn has read), the layered
//! [`config`]. What runs them — the registry, the invocation pipeline, the agent loop, the
//! scheduler, budgets, goals — is `strata-runtime`, which the launcher uses and a team does
//! not need. `examples/downstream/` in the repository is a crate built on this contract alone.
//!
//! ## A tool
//!
//! ```
//! use strata_engine::{tool, ToolContext, ToolError};
//!
//! /// Adds two numbers.
//! #[tool(side_effects = none)]
//! async fn add(
//!     _ctx: &ToolContext,
//!     /// The first addend.
//!     a: i64,
//!     /// The second addend.
//!     b: i64,
//! ) -> Result<i64, ToolError> {
//!     a.checked_add(b).ok_or_else(|| ToolError::failed("overflow"))
//! }
//! ```

// The contract: every public item says what it is for (ARCHITECTURE.md, "API boundaries").
#![deny(missing_docs)]

pub mod access;
pub mod agent;
pub mod audit;
pub mod clock;
pub mod compress;
pub mod config;
pub mod connector;
pub mod llm;
pub mod memory;
pub mod message;
pub mod meters;
pub mod paths;
pub mod principal;
pub mod provenance;
pub mod safety;
pub mod schema;
pub mod scope;
pub mod secret;
pub mod session;
pub mod spec;
pub mod taint;
mod tool;
pub mod turns;

pub use async_trait::async_trait;
pub use principal::Principal;
pub use schemars;
pub use scope::{Scope, ToolFilter, ToolPattern};
pub use strata_macros::tool;
pub use taint::Taint;
pub use tool::{
    Capability, Component, ComponentKind, Env, Layer, McpHost, SideEffects, Tool, ToolContext,
    ToolDirectory, ToolError, ToolOutput, ToolRegistration, ToolSpec,
};

/// Items the macros expand to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use figment;
    pub use inventory;
    pub use schemars;
    pub use serde;
    pub use serde_json;

    pub use crate::schema::{check_args, input_schema, parse_args, to_output};
}

declare_core!();

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme {}
