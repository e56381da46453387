//! # strata-postgres
//!
//! PostgreSQL behind the engine's store traits, for deployments whose instances share one
//! database (`storage.backend: postgres`, `memory.backend: postgres`; `docs/STORAGE.md`):
//!
//! - [`PgStore`]: sessions and their tool log, approval requests and rate-limit counters
//!   (counted in the database, so several instances stay under one limit);
//! - [`PgMemory`]: agent memory with `tsvector` full-text search (GIN) and vectors stored
//!   per row and ranked in process as the SQLite backend ranks them;
//! - [`Db`]: the pool (tokio-postgres + deadpool), every connection in the deployment's
//!   schema with a statement timeout, over TLS as the URL's `sslmode` asks, reconnecting
//!   with backoff;
//! - migrations embedded in the binary, applied at open under an advisory lock.
//!
//! Every statement is a constant with parameters; the one identifier that cannot be a
//! parameter, the schema, is checked against `[a-z_][a-z0-9_]*` first.

mod batch;
mod db;
mod events;
mod goals;
mod journal;
mod leases;
mod members;
mod memory;
mod migrate;
mod schedules;
mod store;
mod tls;
mod usage;

pub use db::{Db, PgError};
pub use events::ClusterEvents;
pub use leases::PgLeases;
pub use members::{MemberRow, Members};
pub use memory::{PgMemory, scrub};
pub use migrate::{MIGRATIONS, SCHEMA_VERSION, TABLES};
pub use store::PgStore;
