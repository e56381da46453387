//! The SQLite store: sessions and security state: one test binary.

mod security;
mod sessions;
