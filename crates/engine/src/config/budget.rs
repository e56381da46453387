//! `budget` blocks: what an agent, a person or a schedule may spend (checked by
//! `strata_runtime::budget`). Used under `agents.<id>.budget`, `defaults.budget`, a `team.json`
//! person's `budget` and `schedules.<name>.budget`.

use serde::{Deserialize, Serialize};

/// `{daily_usd, monthly_usd, daily_tokens, action}`: at least one limit.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// US dollars per day (the day of `defaults.timezone`, else UTC).
    pub daily_usd: Option<f64>,
    /// US dollars per calendar month.
    pub monthly_usd: Option<f64>,
    /// Tokens (prompt and completion) per day.
    pub daily_tokens: Option<u64>,
    /// What reaching a limit does (default `block`).
    pub action: BudgetAction,
}

/// What reaching a budget does.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum BudgetAction {
    /// The model call is not made; the turn stops with a message to the sender.
    #[default]
    Block,
    /// The call is made; an alert says the budget is passed.
    Warn,
    /// An approver is asked whether to extend it (by its own size, until the period ends).
    Ask,
}

impl BudgetAction {
    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetAction::Block => "block",
            BudgetAction::Warn => "warn",
            BudgetAction::Ask => "ask",
        }
    }
}

impl BudgetConfig {
    /// Checks the limits; `key` names the block in errors (`agents.main.budget`).
    pub fn check(&self, key: &str) -> Result<(), super::InvalidSetting> {
        if self.daily_usd.is_none() && self.monthly_usd.is_none() && self.daily_tokens.is_none() {
            return Err(super::InvalidSetting::new(
                key,
                format!("`{key}` sets no limit: give daily_usd, monthly_usd or daily_tokens"),
            ));
        }
        for (name, v) in [
            ("daily_usd", self.daily_usd),
            ("monthly_usd", self.monthly_usd),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(super::InvalidSetting::new(
                    format!("{key}.{name}"),
                    format!("`{key}.{name}` is {v}: a budget is a number of dollars, 0 or more"),
                ));
            }
        }
        Ok(())
    }
}
