//! `current_time`: what time it is (models do not know).

use serde::Serialize;
use strata_engine::{ToolError, tool};

/// What `current_time` returns.
#[derive(Debug, Serialize)]
pub struct Now {
    /// RFC 3339 in UTC, milliseconds.
    pub utc: String,
    /// Seconds since the Unix epoch.
    pub unix: u64,
}

/// Returns the current date and time (UTC, RFC 3339) and the Unix timestamp. Use it before
/// reasoning about "today", deadlines or durations.
#[tool(side_effects = none, timeout_secs = 5)]
async fn current_time() -> Result<Now, ToolError> {
    let now = std::time::SystemTime::now();
    let unix = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| ToolError::failed(format!("clock before 1970: {e}")))?
        .as_secs();
    Ok(Now {
        utc: strata_engine::clock::now_rfc3339(),
        unix,
    })
}
