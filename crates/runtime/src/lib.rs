//! # strata-runtime
//!
//! What runs the contract of `strata-engine`: the tool [`Registry`] fed by `#[tool]`, the one
//! invocation pipeline ([`Invoker`]: schema, access, rate limits, approval, taint, audit,
//! content safety), the agent loop and the [`manager::AgentManager`] that routes turns, the
//! scheduler, budgets and usage metering, goals, skills, and the [`store::StateStore`] a
//! storage backend implements. The launcher, the surfaces and the storage crates use it.
//!
//! It is not an API boundary: its items change with the engine's needs. A team extending
//! Strata builds on `strata-engine` alone (docs/ARCHITECTURE.md, "API boundaries").

pub mod agent_loop;
pub mod approval;
pub mod budget;
pub mod context_window;
pub mod env;
pub mod goal;
pub mod hub;
pub mod intent;
pub mod invoker;
pub mod journal;
pub mod manager;
pub mod monitor;
pub mod ratelimit;
pub mod registry;
pub mod schedule;
pub mod skills;
pub mod store;
pub mod turns;
pub mod usage;

pub use env::EnvExt;
pub use invoker::{Guard, Invocation, InvocationResult, Invoker, OutputFilter, Refusal, Status};
pub use registry::{RegisteredTool, Registry, RegistryError};

strata_engine::declare_core!();
