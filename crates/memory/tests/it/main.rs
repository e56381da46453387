//! Memory backends: SQLite files and a fake Honcho server: one test binary.

mod honcho;
mod sqlite;
