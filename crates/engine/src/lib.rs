//! # strata-engine
//!
//! The crate a team depends on to run agents with Strata. It defines the traits —
//! [`Tool`], [`agent::Agent`], [`llm::LlmProvider`], [`memory::MemoryBackend`],
//! [`connector::Connector`] — the compile-time tool registry ([`Registry`], fed by
//! [`macro@tool`]), the one invocation pipeline ([`Invoker`]) and the layered configuration
//! ([`config`]). It carries no HTTP server, database or chat client: those live in the other
//! `strata-*` crates and implement these traits.
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
pub mod agent_loop;
pub mod approval;
pub mod audit;
pub mod budget;
pub mod clock;
pub mod compress;
pub mod config;
pub mod connector;
pub mod context_window;
pub mod goal;
pub mod goals;
pub mod invoker;
pub mod llm;
pub mod manager;
pub mod memory;
pub mod message;
pub mod meters;
pub mod monitor;
pub mod paths;
pub mod principal;
pub mod ratelimit;
pub mod registry;
pub mod safety;
pub mod schedule;
pub mod scheduler;
pub mod schema;
pub mod scope;
pub mod secret;
pub mod session;
pub mod skills;
pub mod spec;
pub mod store;
pub mod taint;
mod tool;
pub mod turns;
pub mod usage;

pub use async_trait::async_trait;
pub use invoker::{Guard, Invocation, InvocationResult, Invoker, OutputFilter, Refusal, Status};
pub use principal::Principal;
pub use registry::{RegisteredTool, Registry, RegistryError};
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
