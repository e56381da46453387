//! `sessions.*`: where turns are kept, compaction and retention.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `sessions.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    /// Sessions kept in memory; the rest are on disk and reloaded on use.
    pub max_live: usize,
    /// Summarise a session after this many turns since the last summary (0 = never).
    pub summarize_after: u32,
    /// Turns kept verbatim after a summary.
    pub keep_turns: u32,
    /// Delete sessions idle for longer than this many days (0 = keep forever).
    pub retention_days: u32,
    /// The session database, relative to the data dir.
    pub database: PathBuf,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            max_live: 1024,
            summarize_after: 40,
            keep_turns: 6,
            retention_days: 90,
            database: "strata.db".into(),
        }
    }
}
