//! `browser.*`: the headless Chromium behind `browse_url` and `browser`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `browser.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BrowserConfig {
    /// The Chromium (or Chrome) binary; unset: `chromium`, `chromium-browser`,
    /// `google-chrome` or `google-chrome-stable`, the first found on `PATH`.
    pub executable: Option<PathBuf>,
    /// Most `browser` sessions open at once (default 3); `browse_url` uses one more while it runs.
    pub max_sessions: usize,
    /// Longest wait for a page to load or a `wait_for` selector to appear (default 30 s).
    pub timeout_secs: u64,
    /// A `browser` session unused this long is closed (default 600 s).
    pub idle_secs: u64,
}

impl Default for BrowserConfig {
    fn default() -> Self {
        BrowserConfig {
            executable: None,
            max_sessions: 3,
            timeout_secs: 30,
            idle_secs: 600,
        }
    }
}
