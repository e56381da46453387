//! The core tool pack against real files, SQLite and local HTTP fakes: one test binary.

mod agents;
mod files;
mod notes;
mod search;
mod team;
mod web;
