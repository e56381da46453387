//! Schedules as data: when a schedule is due ([`When`]: cron in a time zone, every so long,
//! once), what it runs ([`Action`]), the [`Schedule`]s `schedules.*` describes (checked:
//! every problem names its key), and the [`ScheduleStore`] that keeps their state and runs —
//! in SQLite or PostgreSQL, so a restart catches up and a cluster runs each one once. The
//! runtime is [`crate::scheduler`].

mod scheduler;

pub use scheduler::{ALERT_AFTER, InMemorySchedules, RunSchedule, Scheduler, backoff};

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
pub use jiff::Timestamp;
pub use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use strata_engine::config::{CatchUp, Config, ScheduleConfig};
use strata_engine::principal::Principal;
use strata_engine::session::StoreError;

/// When a schedule is due.
#[derive(Debug, Clone)]
pub enum When {
    /// A cron expression (five or six fields, or `@daily`-style), read in a time zone.
    Cron {
        /// The expression as written.
        text: String,
        /// Parsed.
        cron: Box<croner::Cron>,
        /// Its zone (DST handled by the zone's rules).
        tz: TimeZone,
    },
    /// Every so long, counted from the previous run's due time.
    Every(Duration),
    /// Once, at this instant.
    Once(Timestamp),
}

/// Why a schedule's text does not read; the message names the text and what would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// A cron expression that does not parse.
    #[error("{0}")]
    Cron(String),
    /// A period or duration (`every: 15m`, `in 2h`) that does not read or is out of range.
    #[error("{0}")]
    Period(String),
    /// A time that does not read (or lands outside the calendar).
    #[error("{0}")]
    Time(String),
    /// A time zone this machine does not know.
    #[error("{0}")]
    Zone(String),
    /// `active_hours` that are not a range of times.
    #[error("{0}")]
    Hours(String),
}

impl When {
    /// A cron expression in `tz`.
    pub fn cron(text: &str, tz: TimeZone) -> Result<When, ScheduleError> {
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build();
        let cron = parser
            .parse(text)
            .map_err(|e| ScheduleError::Cron(format!("`{text}` is not a cron expression: {e}")))?;
        Ok(When::Cron {
            text: text.to_owned(),
            cron: Box::new(cron),
            tz,
        })
    }

    /// `every: 15m` (at least a second).
    pub fn every(text: &str) -> Result<When, ScheduleError> {
        let d = duration(text)?;
        if d < Duration::from_secs(1) {
            return Err(ScheduleError::Period(format!(
                "`{text}` is shorter than a second"
            )));
        }
        Ok(When::Every(d))
    }

    /// What a person or an agent may write: a cron expression, `every 15m`/`15m`, a local
    /// time (`2026-12-07T09:00` in `tz`), an instant with an offset, or `in 2h`.
    pub fn parse(text: &str, tz: &TimeZone, now: Timestamp) -> Result<When, ScheduleError> {
        let t = text.trim();
        if let Some(rest) = t.strip_prefix("in ") {
            let d = duration(rest)?;
            let far = |e: jiff::Error| ScheduleError::Period(format!("`{t}`: {e}"));
            let at = now
                .checked_add(jiff::SignedDuration::try_from(d).map_err(far)?)
                .map_err(far)?;
            return Ok(When::once(at));
        }
        if let Some(rest) = t.strip_prefix("every ") {
            return When::every(rest);
        }
        if let Ok(at) = t.parse::<Timestamp>() {
            return Ok(When::once(at));
        }
        if let Ok(local) = t.parse::<jiff::civil::DateTime>() {
            let at = local
                .to_zoned(tz.clone())
                .map_err(|e| ScheduleError::Time(format!("`{t}`: {e}")))?;
            return Ok(When::once(at.timestamp()));
        }
        if t.starts_with('@') || t.split_whitespace().count() >= 5 {
            return When::cron(t, tz.clone());
        }
        When::every(t).map_err(|_| {
            ScheduleError::Time(format!(
                "`{t}` is not a time: give a cron expression (`0 9 * * MON`), `every 15m`, \
                 a time (`2026-12-07T09:00`) or `in 2h`"
            ))
        })
    }

    /// A one-off time, to the whole second (schedules' state counts in seconds): a time
    /// between seconds is due at the next one.
    fn once(at: Timestamp) -> When {
        let s = at.as_second() + i64::from(at.subsec_nanosecond() > 0);
        When::Once(Timestamp::from_second(s).unwrap_or(at))
    }

    /// The first instant this is due strictly after `after`; `None` when it never is again.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            When::Cron { cron, tz, .. } => {
                let from = after.to_zoned(tz.clone());
                cron.find_next_occurrence(&from, false)
                    .ok()
                    .map(|z| z.timestamp())
            }
            When::Every(d) => {
                let d = jiff::SignedDuration::try_from(*d).ok()?;
                after.checked_add(d).ok()
            }
            When::Once(at) => (*at > after).then_some(*at),
        }
    }

    /// One line for people (`cron 0 9 * * MON-FRI (Europe/Stockholm)`, `every 15m`…).
    pub fn describe(&self) -> String {
        match self {
            When::Cron { text, tz, .. } => {
                format!("cron {text} ({})", tz.iana_name().unwrap_or("UTC"))
            }
            When::Every(d) => format!("every {}", humantime::format_duration(*d)),
            When::Once(at) => format!("once at {at}"),
        }
    }
}

/// A duration as config and people write it: `15m`, `1h 30m`, `90s`, or a number of seconds.
pub fn duration(text: &str) -> Result<Duration, ScheduleError> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(t)
        .map_err(|_| ScheduleError::Period(format!("`{t}` is not a duration (like 15m, 2h, 90s)")))
}

/// A time zone by its IANA name (`Europe/Stockholm`), or UTC.
pub fn zone(name: &str) -> Result<TimeZone, ScheduleError> {
    if name.eq_ignore_ascii_case("utc") {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name)
        .map_err(|_| ScheduleError::Zone(format!("`{name}` is not a time zone this machine knows")))
}

/// What a schedule runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A turn of `agent` with `prompt`.
    Prompt {
        /// The agent.
        agent: String,
        /// What it is asked.
        prompt: String,
    },
    /// A skill with `params`: a command skill runs as its tool (`skill__<name>`), a prompt
    /// skill as a turn of `agent` with the rendered prompt.
    Skill {
        /// The skill.
        name: String,
        /// Its parameters.
        params: BTreeMap<String, String>,
        /// The agent a prompt skill asks (`agent`, else `defaults.agent` or the only one).
        agent: Option<String>,
    },
    /// A built-in job ([`JOBS`]).
    Job(String),
    /// `agents.<id>.heartbeat`: the agent's standing instructions (a file under
    /// `agents/<id>/`, read at each beat), answered with `NO_REPLY` when there is nothing
    /// to say.
    Heartbeat {
        /// The agent.
        agent: String,
        /// The file, relative to `agents/<agent>/`.
        prompt_file: String,
    },
}

/// Local times of day a schedule runs between (`08:00-20:00`; past midnight when the end
/// is earlier than the start), in a zone.
#[derive(Debug, Clone)]
pub struct ActiveHours {
    /// From.
    pub start: jiff::civil::Time,
    /// Until.
    pub end: jiff::civil::Time,
    /// Read in.
    pub tz: TimeZone,
}

impl ActiveHours {
    /// `08:00-20:00` in `tz`.
    pub fn parse(text: &str, tz: TimeZone) -> Result<ActiveHours, ScheduleError> {
        let bad =
            || ScheduleError::Hours(format!("`{text}` is not a range of times like 08:00-20:00"));
        let (a, b) = text.split_once('-').ok_or_else(bad)?;
        let t = |s: &str| s.trim().parse::<jiff::civil::Time>().map_err(|_| bad());
        Ok(ActiveHours {
            start: t(a)?,
            end: t(b)?,
            tz,
        })
    }

    /// Whether `at` falls inside.
    pub fn contains(&self, at: Timestamp) -> bool {
        let now = at.to_zoned(self.tz.clone()).time();
        if self.start <= self.end {
            self.start <= now && now < self.end
        } else {
            now >= self.start || now < self.end
        }
    }
}

/// The built-in jobs.
pub const JOBS: &[&str] = &[
    "memory_decay",
    "session_retention",
    "audit_verify",
    "vault_check",
    "health_check",
    "integrity_check",
    "permission_check",
    "goal_nudge",
];

/// One schedule, checked and ready to run.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Its name (`schedules.<name>`).
    pub name: String,
    /// When.
    pub when: When,
    /// What.
    pub action: Action,
    /// The session a prompt's turns keep (`schedule-<name>` unless set).
    pub session: String,
    /// Where the answer is posted (`discord:<account>:<channel>`); `None`: nowhere.
    pub deliver_to: Option<String>,
    /// A run taking longer is cancelled.
    pub timeout: Duration,
    /// Each run starts up to this much later than due (spreads runs due together).
    pub jitter: Duration,
    /// After a restart that missed runs: one run now, or none.
    pub catch_up: CatchUp,
    /// Off: never due.
    pub enabled: bool,
    /// Who the run acts as (the operator for configured schedules).
    pub principal: Principal,
    /// Due times outside these hours are passed over.
    pub active_hours: Option<ActiveHours>,
}

/// A run lasting longer than this without a `timeout` is cancelled.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The built-in jobs, on by default at quiet times (each can be changed or turned off under
/// `schedules.<job>`): memory decay daily at 03:30 (every `memory.decay.interval_hours`
/// when that is not 24; off when it is 0), session retention hourly, the audit chain checked
/// daily at 04:45, the vault's references daily at 04:50, the integrity baseline hourly at
/// :40, the ops module's services every five minutes (when it has some).
pub fn builtin(name: &str, config: &Config) -> Option<ScheduleConfig> {
    let job = Some(name.to_owned());
    let c = match name {
        "memory_decay" => match config.memory.decay.interval_hours {
            24 => ScheduleConfig {
                cron: Some("30 3 * * *".into()),
                job,
                ..ScheduleConfig::default()
            },
            h => ScheduleConfig {
                every: Some(format!("{}h", h.max(1))),
                job,
                enabled: h > 0,
                ..ScheduleConfig::default()
            },
        },
        "session_retention" => ScheduleConfig {
            cron: Some("15 * * * *".into()),
            job,
            ..ScheduleConfig::default()
        },
        "audit_verify" => ScheduleConfig {
            cron: Some("45 4 * * *".into()),
            job,
            ..ScheduleConfig::default()
        },
        "vault_check" => ScheduleConfig {
            cron: Some("50 4 * * *".into()),
            job,
            ..ScheduleConfig::default()
        },
        // Hourly: a changed binary or identity file should not wait for a day.
        "integrity_check" => ScheduleConfig {
            cron: Some("40 * * * *".into()),
            job,
            ..ScheduleConfig::default()
        },
        // Rights gone wrong while running: every `security.permission_watch.interval`.
        "permission_check" => ScheduleConfig {
            every: Some(config.security.permission_watch.interval.clone()),
            job,
            ..ScheduleConfig::default()
        },
        // Goals' stand-ups, due tasks, closing windows, long waits: every
        // `goals.nudge_interval`.
        "goal_nudge" => ScheduleConfig {
            every: Some(config.goals.nudge_interval.clone()),
            job,
            ..ScheduleConfig::default()
        },
        // Needs a `service_health` tool (the ops module) and services to check.
        "health_check" => ScheduleConfig {
            every: Some("5m".into()),
            job,
            enabled: config
                .modules
                .get("ops")
                .and_then(|o| o.get("services"))
                .and_then(|s| s.as_array())
                .is_some_and(|s| !s.is_empty()),
            ..ScheduleConfig::default()
        },
        _ => return None,
    };
    Some(c)
}

/// The schedules `config` describes, the built-in jobs first (each overridden by a
/// `schedules.<job>` of the same name), or every problem found, each naming its key.
pub fn from_config(config: &Config) -> Result<Vec<Schedule>, Vec<String>> {
    let default_tz = config.defaults.timezone.as_deref().unwrap_or("UTC");
    let mut all: BTreeMap<String, ScheduleConfig> = JOBS
        .iter()
        .filter_map(|j| builtin(j, config).map(|c| ((*j).to_owned(), c)))
        .collect();
    for (name, c) in &config.schedules {
        let merged = match all.remove(name) {
            // A built-in's entry changes what it names and keeps the rest.
            Some(b) => c.clone().over(b),
            None => c.clone(),
        };
        all.insert(name.clone(), merged);
    }
    let (mut out, mut problems) = (Vec::new(), Vec::new());
    if let Err(e) = config.goals.check() {
        problems.push(e.message);
    }
    for (name, c) in &all {
        match one(name, c, config, default_tz) {
            Ok(s) => out.push(s),
            Err(p) => problems.extend(p),
        }
    }
    for (id, a) in &config.agents {
        let Some(h) = a.heartbeat.as_ref().filter(|h| h.enabled && a.enabled) else {
            continue;
        };
        let key = |k: &str| format!("`agents.{id}.heartbeat.{k}`");
        let when = When::every(&h.every).map_err(|e| format!("{}: {e}", key("every")));
        let hours = match (&h.active_hours, zone(default_tz)) {
            (None, _) => Ok(None),
            (Some(t), Ok(tz)) => ActiveHours::parse(t, tz)
                .map(Some)
                .map_err(|e| format!("{}: {e}", key("active_hours"))),
            (Some(_), Err(e)) => Err(format!("`defaults.timezone`: {e}")),
        };
        if let Some(d) = &h.deliver_to
            && strata_engine::connector::ChannelRef::parse(d).is_none()
        {
            problems.push(format!(
                "{}: `{d}` is not a channel (`discord:<account>:<channel id>`)",
                key("deliver_to")
            ));
        }
        if h.prompt_file.contains("..") || h.prompt_file.starts_with('/') {
            problems.push(format!(
                "{}: a file under `agents/{id}/`, not `{}`",
                key("prompt_file"),
                h.prompt_file
            ));
        }
        match (when, hours) {
            (Ok(when), Ok(active_hours)) => out.push(Schedule {
                name: format!("heartbeat-{id}"),
                when,
                action: Action::Heartbeat {
                    agent: id.clone(),
                    prompt_file: h.prompt_file.clone(),
                },
                session: format!("heartbeat-{id}"),
                deliver_to: h.deliver_to.clone(),
                timeout: DEFAULT_TIMEOUT,
                jitter: Duration::ZERO,
                catch_up: CatchUp::Skip,
                enabled: true,
                principal: Principal::Operator,
                active_hours,
            }),
            (w, hrs) => problems.extend(w.err().into_iter().chain(hrs.err())),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

fn one(
    name: &str,
    c: &ScheduleConfig,
    config: &Config,
    default_tz: &str,
) -> Result<Schedule, Vec<String>> {
    let key = |k: &str| format!("`schedules.{name}.{k}`");
    let mut problems = Vec::new();
    if name.is_empty()
        || !name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    {
        problems.push(format!(
            "`schedules.{name}`: a schedule's name is letters, digits, `_` and `-`"
        ));
    }
    let tz_name = c.timezone.as_deref().unwrap_or(default_tz);
    let tz = match zone(tz_name) {
        Ok(tz) => Some(tz),
        Err(e) => {
            let k = if c.timezone.is_some() {
                key("timezone")
            } else {
                "`defaults.timezone`".to_owned()
            };
            problems.push(format!("{k}: {e}"));
            None
        }
    };
    let when = match (&c.cron, &c.every) {
        (Some(_), Some(_)) => {
            problems.push(format!("{}: give `cron` or `every`, not both", key("cron")));
            None
        }
        (None, None) => {
            problems.push(format!("`schedules.{name}`: needs `cron` or `every`"));
            None
        }
        (Some(cron), None) => tz.and_then(|tz| {
            When::cron(cron, tz)
                .map_err(|e| problems.push(format!("{}: {e}", key("cron"))))
                .ok()
        }),
        (None, Some(every)) => When::every(every)
            .map_err(|e| problems.push(format!("{}: {e}", key("every"))))
            .ok(),
    };
    let agent = c
        .agent
        .clone()
        .or_else(|| config.defaults.agent.clone())
        .or_else(|| {
            (config.agents.len() == 1)
                .then(|| config.agents.keys().next().cloned())
                .flatten()
        });
    let action = match (&c.prompt, &c.skill, &c.job) {
        (Some(prompt), None, None) => match agent {
            Some(a) if config.agents.contains_key(&a) => Some(Action::Prompt {
                agent: a,
                prompt: prompt.clone(),
            }),
            Some(a) => {
                problems.push(format!(
                    "{}: no agent `{a}` (agents: {})",
                    key("agent"),
                    config.agents.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
                None
            }
            None => {
                problems.push(format!("{}: which agent runs the prompt?", key("agent")));
                None
            }
        },
        (None, Some(skill), None) => match agent {
            Some(a) if !config.agents.contains_key(&a) => {
                problems.push(format!("{}: no agent `{a}`", key("agent")));
                None
            }
            agent => Some(Action::Skill {
                name: skill.clone(),
                params: c.params.clone(),
                agent,
            }),
        },
        (None, None, Some(job)) if JOBS.contains(&job.as_str()) => Some(Action::Job(job.clone())),
        (None, None, Some(job)) => {
            problems.push(format!(
                "{}: no built-in job `{job}` (jobs: {})",
                key("job"),
                JOBS.join(", ")
            ));
            None
        }
        (None, None, None) => {
            problems.push(format!(
                "`schedules.{name}`: needs `prompt` (with `agent`), `skill` or `job`"
            ));
            None
        }
        _ => {
            problems.push(format!(
                "`schedules.{name}`: give one of `prompt`, `skill` and `job`"
            ));
            None
        }
    };
    if let Some(d) = &c.deliver_to
        && strata_engine::connector::ChannelRef::parse(d).is_none()
    {
        problems.push(format!(
            "{}: `{d}` is not a channel (`discord:<account>:<channel id>`)",
            key("deliver_to")
        ));
    }
    let mut dur = |k: &str, v: &Option<String>, default: Duration| match v {
        None => default,
        Some(t) => duration(t).unwrap_or_else(|e| {
            problems.push(format!("{}: {e}", key(k)));
            default
        }),
    };
    let timeout = dur("timeout", &c.timeout, DEFAULT_TIMEOUT);
    let jitter = dur("jitter", &c.jitter, Duration::ZERO);
    match (when, action) {
        (Some(when), Some(action)) if problems.is_empty() => Ok(Schedule {
            name: name.to_owned(),
            when,
            action,
            session: c
                .session
                .clone()
                .unwrap_or_else(|| format!("schedule-{name}")),
            deliver_to: c.deliver_to.clone(),
            timeout,
            jitter,
            catch_up: c.catch_up,
            enabled: c.enabled,
            principal: Principal::Operator,
            active_hours: None,
        }),
        _ => Err(problems),
    }
}

/// A schedule's state as the store keeps it (times in Unix seconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// The schedule.
    pub name: String,
    /// When it is next due; `None`: never again.
    pub next_run: Option<i64>,
    /// When it last started.
    pub last_run: Option<i64>,
    /// How that run ended (`ok`, `failed`, `timeout`).
    pub last_status: Option<String>,
    /// How long it took.
    pub last_duration_ms: Option<i64>,
    /// Failures in a row.
    pub failures: i64,
    /// Paused by an operator.
    pub paused: bool,
}

/// One run, as the history shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The schedule.
    pub name: String,
    /// When it was due (Unix seconds): with the name, the run's identity.
    pub due: i64,
    /// The instance that ran it.
    pub instance: String,
    /// When it started (Unix milliseconds).
    pub started_ms: i64,
    /// When it ended; `None` while it runs.
    pub finished_ms: Option<i64>,
    /// `running`, `ok`, `failed`, `timeout` or `skipped`.
    pub status: String,
    /// The answer's first line, or why it failed.
    pub detail: Option<String>,
}

/// A schedule a person asked for in conversation (`schedule_create`): kept in the store, run
/// as the person who asked, never more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleDef {
    /// Its name.
    pub name: String,
    /// Who asked: the runs act as them.
    pub owner: Principal,
    /// The agent that answers.
    pub agent: String,
    /// When, as [`When::parse`] reads it (a one-off time is kept as the instant it names).
    pub when: String,
    /// The zone `when` is read in.
    pub timezone: String,
    /// What the agent is asked each time.
    pub prompt: String,
    /// Where the answer goes.
    pub deliver_to: Option<String>,
    /// When it was made (Unix seconds).
    pub created_at: i64,
    /// The idempotency key of the call that made it (a journaled turn's `schedule_create`):
    /// the same call run again after a crash finds it and makes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// Schedules one sender may keep at once.
pub const MAX_PER_SENDER: usize = 20;

impl ScheduleDef {
    /// As a schedule.
    pub fn schedule(&self) -> Result<Schedule, ScheduleError> {
        let tz = zone(&self.timezone)?;
        let made = Timestamp::from_second(self.created_at)
            .map_err(|e| ScheduleError::Time(format!("made at {}: {e}", self.created_at)))?;
        let when = When::parse(&self.when, &tz, made)?;
        Ok(Schedule {
            name: self.name.clone(),
            when,
            action: Action::Prompt {
                agent: self.agent.clone(),
                prompt: self.prompt.clone(),
            },
            session: format!("schedule-{}", self.name),
            deliver_to: self.deliver_to.clone(),
            timeout: DEFAULT_TIMEOUT,
            jitter: Duration::ZERO,
            catch_up: CatchUp::Once,
            enabled: true,
            principal: self.owner.clone(),
            active_hours: None,
        })
    }
}

/// Where schedules' state and runs are kept.
#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// The schedules people asked for, by name.
    async fn defs(&self) -> Result<Vec<ScheduleDef>, StoreError>;
    /// Keeps `def`; `false` when its name is taken.
    async fn add_def(&self, def: &ScheduleDef) -> Result<bool, StoreError>;
    /// Drops `name` (its state and history stay); `false` when there was none.
    async fn remove_def(&self, name: &str) -> Result<bool, StoreError>;
    /// Every schedule's state.
    async fn states(&self) -> Result<Vec<ScheduleState>, StoreError>;
    /// One schedule's state. The default reads them all.
    async fn state(&self, name: &str) -> Result<Option<ScheduleState>, StoreError> {
        Ok(self.states().await?.into_iter().find(|s| s.name == name))
    }
    /// The states of schedules due at `now` (not paused, `next_run <= now`): what a tick
    /// reads. The stores answer from an index; this default filters [`states`](Self::states).
    async fn due(&self, now: i64) -> Result<Vec<ScheduleState>, StoreError> {
        Ok(self
            .states()
            .await?
            .into_iter()
            .filter(|s| !s.paused && s.next_run.is_some_and(|n| n <= now))
            .collect())
    }
    /// Writes `state` (whole).
    async fn save_state(&self, state: &ScheduleState) -> Result<(), StoreError>;
    /// Sets or clears `paused` (creating the row when missing).
    async fn set_paused(&self, name: &str, paused: bool) -> Result<(), StoreError>;
    /// Makes `name` due now (`schedule run`).
    async fn run_now(&self, name: &str, now: i64) -> Result<(), StoreError>;
    /// Claims the run of `name` due at `due` for `instance` until `until_ms`: true for one
    /// claimer only; a claim still `running` past its `until_ms` (its instance died) can be
    /// taken again.
    async fn claim(
        &self,
        name: &str,
        due: i64,
        instance: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Records how a claimed run ended (or a skipped one).
    async fn finish(&self, run: &RunRecord) -> Result<(), StoreError>;
    /// The newest `limit` runs of `name`, newest first.
    async fn history(&self, name: &str, limit: usize) -> Result<Vec<RunRecord>, StoreError>;
}

/// Makes `name` due at `now` (`strata schedule run`, `POST /api/schedules/{name}/run`), or
/// the second after its last run's due time when that is not before `now`: a due time is
/// run at most once (it is the run's claim), so asking again within the second of the last
/// run would otherwise make a due time that can never be claimed, and the schedule would
/// wait on it for good. Returns the due time set.
pub async fn make_due(
    store: &dyn ScheduleStore,
    name: &str,
    now: i64,
) -> Result<i64, strata_engine::session::StoreError> {
    let last = store.history(name, 1).await?;
    let due = last.first().map_or(now, |r| now.max(r.due + 1));
    store.run_now(name, due).await?;
    Ok(due)
}

/// Each schedule with its state, as `strata schedule list` and `GET /api/schedules` show
/// them (times as RFC 3339).
pub fn overview(schedules: &[Schedule], states: &[ScheduleState]) -> Vec<serde_json::Value> {
    let time = |t: Option<i64>| {
        t.and_then(|s| Timestamp::from_second(s).ok())
            .map(|t| t.to_string())
    };
    schedules
        .iter()
        .map(|s| {
            let st = states.iter().find(|x| x.name == s.name);
            let (kind, what) = match &s.action {
                Action::Prompt { agent, .. } => ("prompt", agent.clone()),
                Action::Skill { name, .. } => ("skill", name.clone()),
                Action::Job(j) => ("job", j.clone()),
                Action::Heartbeat { agent, .. } => ("heartbeat", agent.clone()),
            };
            serde_json::json!({
                "name": s.name,
                "when": s.when.describe(),
                "kind": kind,
                "runs": what,
                "deliver_to": s.deliver_to,
                "enabled": s.enabled,
                "paused": st.is_some_and(|x| x.paused),
                "next_run": time(st.and_then(|x| x.next_run)),
                "last_run": time(st.and_then(|x| x.last_run)),
                "last_status": st.and_then(|x| x.last_status.clone()),
                "last_duration_ms": st.and_then(|x| x.last_duration_ms),
                "failures": st.map_or(0, |x| x.failures),
            })
        })
        .collect()
}
