//! `schedules.*`: cron jobs, recurring prompts and the built-in jobs' times
//! (`strata_runtime::schedule` checks and reads them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `schedules.<name>`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleConfig {
    /// A cron expression: five fields (`0 9 * * MON-FRI`), six with seconds first, or
    /// `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`.
    pub cron: Option<String>,
    /// Instead of `cron`: every so long (`15m`, `2h`, `90s`).
    pub every: Option<String>,
    /// The zone `cron` is read in (`Europe/Stockholm`); default `defaults.timezone`, else UTC.
    pub timezone: Option<String>,
    /// The agent that answers `prompt` (default `defaults.agent`, or the only agent).
    pub agent: Option<String>,
    /// What the agent is asked each time.
    pub prompt: Option<String>,
    /// Instead of `prompt`: a command skill to run (as its tool `skill__<name>`).
    pub skill: Option<String>,
    /// The skill's parameters.
    pub params: BTreeMap<String, String>,
    /// Instead of `prompt`: a built-in job (`memory_decay`, `session_retention`,
    /// `audit_verify`).
    pub job: Option<String>,
    /// The session the prompt's turns keep (default `schedule-<name>`).
    pub session: Option<String>,
    /// Where the answer goes (`discord:<account>:<channel id>`); none: kept in the session
    /// and the run's history only.
    pub deliver_to: Option<String>,
    /// A run lasting longer is cancelled (default 10m).
    pub timeout: Option<String>,
    /// Each run starts up to this much after it is due (default none).
    pub jitter: Option<String>,
    /// After a restart that missed runs: `once` (one run now) or `skip`.
    pub catch_up: CatchUp,
    /// Off: never runs (the built-in jobs are on unless turned off here).
    #[serde(default = "super::yes")]
    pub enabled: bool,
    /// What the model calls in the schedule's session may spend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::BudgetConfig>,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            cron: None,
            every: None,
            timezone: None,
            agent: None,
            prompt: None,
            skill: None,
            params: BTreeMap::new(),
            job: None,
            session: None,
            deliver_to: None,
            timeout: None,
            jitter: None,
            budget: None,
            catch_up: CatchUp::Once,
            enabled: true,
        }
    }
}

impl ScheduleConfig {
    /// `self` over a built-in job's entry: what `self` says wins; the job and, unless `self`
    /// gives a time, the built-in time stay.
    pub fn over(self, builtin: ScheduleConfig) -> ScheduleConfig {
        let has_time = self.cron.is_some() || self.every.is_some();
        ScheduleConfig {
            cron: if has_time { self.cron } else { builtin.cron },
            every: if has_time { self.every } else { builtin.every },
            job: self.job.or(builtin.job),
            ..self
        }
    }
}

/// What a restart that missed runs does.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// One run now for all that were missed.
    #[default]
    Once,
    /// None: the next one at its time.
    Skip,
}
