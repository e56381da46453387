//! The crate's integration tests: one test binary (each binary links the whole dependency
//! tree), one module per area.

mod dist;
mod setup;
