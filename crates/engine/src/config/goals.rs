//! `goals.*`: goal workstreams (`docs/GOALS.md`).

use serde::{Deserialize, Serialize};

/// `goals.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GoalsConfig {
    /// The connector account a goal's channel is made on (a Discord account's name); unset:
    /// goals have no channel of their own.
    pub connector: Option<String>,
    /// The category new goal channels go under (a Discord category's id; its server is the
    /// channel's server). Required with `connector`.
    pub category: Option<String>,
    /// Who may create goals: people's access (`owner`, `admin`, `staff`, `viewer`) and agents'
    /// tiers (`privileged`, `coordinator`, `assistant`). Default owners, coordinator and
    /// privileged agents.
    pub create_tiers: Vec<String>,
    /// Agent turns a goal's channel allows without a human message (default 30); replaces
    /// the bot-chain limit there, and a human message resets it.
    pub turn_budget: u32,
    /// How long a proposal stays open for objections (default `24h`).
    pub objection_window: String,
    /// How often an executing goal gets a stand-up turn in its channel (default `24h`).
    pub standup_every: String,
    /// A goal blocked on a person this long is reminded about (default `24h`), and again
    /// after as long.
    pub blocked_after: String,
    /// How often the `goal_nudge` job looks (default `15m`).
    pub nudge_interval: String,
}

impl Default for GoalsConfig {
    fn default() -> Self {
        GoalsConfig {
            connector: None,
            category: None,
            create_tiers: vec!["owner".into(), "coordinator".into(), "privileged".into()],
            turn_budget: 30,
            objection_window: "24h".into(),
            standup_every: "24h".into(),
            blocked_after: "24h".into(),
            nudge_interval: "15m".into(),
        }
    }
}

impl GoalsConfig {
    /// The durations, checked: `(objection window, stand-up every, blocked after, nudge
    /// interval)` in seconds, or the key that is wrong and why.
    pub fn durations(&self) -> Result<(u64, u64, u64, u64), super::InvalidSetting> {
        let read = |key: &str, v: &str| {
            humantime::parse_duration(v)
                .map(|d| d.as_secs())
                .map_err(|_| {
                    super::InvalidSetting::new(
                        format!("goals.{key}"),
                        format!("goals.{key}: `{v}` is not a duration (like 15m, 2h, 90s)"),
                    )
                })
        };
        let nudge = read("nudge_interval", &self.nudge_interval)?;
        if nudge == 0 {
            return Err(super::InvalidSetting::new(
                "goals.nudge_interval",
                "goals.nudge_interval must be at least 1s",
            ));
        }
        Ok((
            read("objection_window", &self.objection_window)?,
            read("standup_every", &self.standup_every)?,
            read("blocked_after", &self.blocked_after)?,
            nudge,
        ))
    }

    /// Checks the section: durations, tiers, and a category with a connector.
    pub fn check(&self) -> Result<(), super::InvalidSetting> {
        self.durations()?;
        for t in &self.create_tiers {
            if !matches!(
                t.as_str(),
                "owner" | "admin" | "staff" | "viewer" | "privileged" | "coordinator" | "assistant"
            ) {
                return Err(super::InvalidSetting::new(
                    "goals.create_tiers",
                    format!(
                        "goals.create_tiers: `{t}` is not a tier (owner, admin, staff, viewer, \
                         privileged, coordinator, assistant)"
                    ),
                ));
            }
        }
        if self.connector.is_some() && self.category.is_none() {
            return Err(super::InvalidSetting::new(
                "goals.connector",
                "goals.connector is set without goals.category: name the category \
                 goal channels go under",
            ));
        }
        Ok(())
    }
}
