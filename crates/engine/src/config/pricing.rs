//! `pricing.<provider>.<model>`: what a model's tokens cost (US dollars per million tokens).

use serde::{Deserialize, Serialize};

/// One model's prices.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// Prompt tokens not read from the cache.
    pub input_per_mtok: f64,
    /// Completion tokens.
    pub output_per_mtok: f64,
    /// Prompt tokens read from the cache (default: the input price).
    #[serde(default)]
    pub cached_input_per_mtok: Option<f64>,
    /// Prompt tokens written to the cache (default: the input price).
    #[serde(default)]
    pub cache_write_per_mtok: Option<f64>,
}
