//! The linear model: a logistic regression over the rule features and a few others
//! ([`EXTRA`]). Its weights are fitted offline to `corpus/train.jsonl` by
//! `cargo xtask train-safety` and written into `model_weights.rs`; scoring is a sum of
//! weights, so it is deterministic and costs nothing next to the rules.
//!
//! Character n-grams were tried as features too: across the corpus's source split they
//! learnt the training sources' wording (12.8 % false alarms on the test split) unless
//! regularised until none was left, so the model weighs what the rules found and nothing
//! else.

use std::collections::BTreeSet;

use crate::model_weights::{BIAS, EXTRA_WEIGHTS, RULE_WEIGHTS};

/// Features that are not rules.
pub const EXTRA: [&str; 3] = [
    // A decoded layer held a rule match.
    "layer_rule",
    // The text hides invisible characters and a rule matched.
    "invisible_with_rule",
    // A decoded layer exists at all.
    "layer_present",
];

/// The weights of [`EXTRA`] before training.
pub const EXTRA_PRIORS: [f32; 3] = [3.0, 1.5, 0.0];

/// The model's log-odds for a text with these rule and extra features.
pub fn logit(rules: &BTreeSet<&str>, extra: &BTreeSet<&str>) -> f32 {
    let mut z = BIAS;
    for (name, w) in RULE_WEIGHTS {
        if rules.contains(name) {
            z += w;
        }
    }
    for (name, w) in EXTRA_WEIGHTS {
        if extra.contains(name) {
            z += w;
        }
    }
    z
}

/// The committed weights: the intercept, then every feature's weight (rules, then
/// [`EXTRA`]), as `train::fit` orders them.
pub fn committed() -> (f32, Vec<(&'static str, f32)>) {
    (
        BIAS,
        RULE_WEIGHTS.iter().chain(EXTRA_WEIGHTS).copied().collect(),
    )
}

/// The logistic function.
pub fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}
