//! Rate limits: sliding windows per (principal or agent, tool) over a minute, an hour and a
//! day.
//!
//! A call is recorded *before* the tool runs, so failed runs count too — but only a call that
//! is let through: a refused call is not counted, so a client that keeps retrying gets back
//! in as soon as the window has room, and the refusal says when (`retry_after_secs`). With a
//! local log
//! (SQLite in `strata-store`) counting happens in memory (one deque of timestamps per key and
//! tool that has a limit); every recorded call is also handed to the [`RateLog`] and its last
//! day is loaded before the first check, so counters survive a restart. With a shared log (a
//! database server several processes use, `strata-postgres`) the store counts: every check
//! records the call and reads the windows in one statement, so two processes together stay
//! under one limit. One [`RateLimiter`] per process is shared by every surface through the
//! [`crate::Invoker`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use strata_engine::config::{Limits, RateLimitMode, RateLimitsConfig};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateEvent {
    /// `agent:<id>` or the principal.
    pub key: String,
    /// Tool name.
    pub tool: String,
    /// Unix milliseconds.
    pub ts_ms: i64,
}

/// The spans of the three windows, in milliseconds: minute, hour, day.
pub const WINDOWS: [(&str, i64); 3] = [("minute", MINUTE), ("hour", HOUR), ("day", DAY)];

/// Where recorded calls persist.
#[async_trait]
pub trait RateLog: Send + Sync {
    /// Events newer than `since_ms`, any order.
    async fn load_since(
        &self,
        since_ms: i64,
    ) -> Result<Vec<RateEvent>, strata_engine::session::StoreError>;
    /// Records one event (may be asynchronous; must not block for long).
    fn append(&self, event: RateEvent);
    /// Whether other processes record into the same log and must count together with this
    /// one (a database server): the limiter then asks [`RateLog::record`] on every call
    /// instead of counting in memory.
    fn shared(&self) -> bool {
        false
    }
    /// Records `event` unless that would take one of [`WINDOWS`] over its cap in `caps`
    /// (`None`: no cap), and returns, per window, the events of its key and tool newer than
    /// `event.ts_ms - span` with this one counted (recorded or not) and the oldest recorded
    /// one — as one step no other recorder can interleave with.
    async fn record(
        &self,
        event: RateEvent,
        caps: [Option<u32>; 3],
    ) -> Result<RateCounts, strata_engine::session::StoreError>;
}

/// What a [`RateLog::record`] saw, per window of [`WINDOWS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateCounts {
    /// Calls in the window, the one asked about included.
    pub counts: [u32; 3],
    /// The oldest recorded call in the window (Unix ms).
    pub oldest: [Option<i64>; 3],
}

impl RateCounts {
    /// Whether the call fits every cap (then it is recorded).
    pub fn fits(&self, caps: [Option<u32>; 3]) -> bool {
        self.counts
            .iter()
            .zip(caps)
            .all(|(n, cap)| cap.is_none_or(|c| *n <= c))
    }
}

/// An exceeded window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    /// `minute`, `hour` or `day`.
    pub window: &'static str,
    /// Calls in the window, this one included.
    pub count: u32,
    /// The limit.
    pub limit: u32,
    /// Seconds until the window has room again (its oldest counted call leaves it).
    pub retry_after_secs: u64,
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rate limit: {} calls in the last {} (limit {}); room again in {} s",
            self.count, self.window, self.limit, self.retry_after_secs
        )
    }
}

/// What [`RateLimiter::check`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateVerdict {
    /// Under every limit (or no limit applies).
    Ok,
    /// Over a limit, and `mode: enforce`: refuse.
    Refuse(Exceeded),
    /// Over a limit, but `mode: log`: run it and alert.
    LogOnly(Exceeded),
    /// A shared counter could not be read: refuse (failing open would let every process
    /// run unlimited while the database is away).
    Unavailable(strata_engine::session::StoreError),
}

/// The process-wide limiter.
pub struct RateLimiter {
    cfg: RateLimitsConfig,
    log: Option<Arc<dyn RateLog>>,
    /// Set once a local log's last day has been read into `windows`.
    loaded: tokio::sync::OnceCell<()>,
    windows: Mutex<HashMap<(String, String), VecDeque<i64>>>,
}

fn caps(limits: Limits) -> [Option<u32>; 3] {
    [limits.per_minute, limits.per_hour, limits.per_day]
}

/// The first window whose count is over its limit, at `now_ms`.
fn over(limits: Limits, seen: RateCounts, now_ms: i64) -> Option<Exceeded> {
    WINDOWS
        .iter()
        .zip(caps(limits))
        .zip(seen.counts.iter().zip(seen.oldest))
        .find_map(|(((window, span), limit), (count, oldest))| {
            let limit = limit?;
            let until = oldest.map_or(1, |t| t + span - now_ms);
            let retry_after_secs = u64::try_from(until.max(1)).unwrap_or(1).div_ceil(1000);
            (*count > limit).then_some(Exceeded {
                window,
                count: *count,
                limit,
                retry_after_secs,
            })
        })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The entry of `map` for `tool`: exact name first, then the longest matching `prefix*`.
fn lookup(map: &std::collections::BTreeMap<String, Limits>, tool: &str) -> Option<Limits> {
    strata_engine::scope::best_match(map, tool).copied()
}

impl RateLimiter {
    /// A limiter over `cfg`, persisting to `log` when given (a local log's last day is read
    /// before the first check).
    pub fn new(cfg: RateLimitsConfig, log: Option<Arc<dyn RateLog>>) -> Self {
        RateLimiter {
            cfg,
            log,
            loaded: tokio::sync::OnceCell::new(),
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Reads a local log's last day into the in-memory windows (once).
    async fn load(&self, log: &dyn RateLog) {
        self.loaded
            .get_or_init(|| async {
                match log.load_since(now_ms() - DAY).await {
                    Ok(mut events) => {
                        events.sort_by_key(|e| e.ts_ms);
                        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
                        for e in events {
                            let q = w.entry((e.key, e.tool)).or_default();
                            // Calls counted before the load finished stay in order.
                            let at = q.partition_point(|&t| t <= e.ts_ms);
                            q.insert(at, e.ts_ms);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "rate-limit history not loaded; counters start at zero")
                    }
                }
            })
            .await;
    }

    /// The limits for `tool` called on behalf of `agent`: agent override, then per-tool entry,
    /// then defaults — each window inherited from the next level when unset.
    pub fn limits_for(&self, agent: Option<&str>, tool: &str) -> Limits {
        let mut l = lookup(&self.cfg.tools, tool)
            .unwrap_or_default()
            .or(self.cfg.defaults);
        if let Some(a) = agent
            && let Some(map) = self.cfg.agents.get(a)
            && let Some(o) = lookup(map, tool)
        {
            l = o.or(l);
        }
        l
    }

    /// Records a call of `tool` by `key` (before it runs) and says whether it is over a limit.
    pub async fn check(&self, key: &str, agent: Option<&str>, tool: &str) -> RateVerdict {
        let limits = self.limits_for(agent, tool);
        if limits.is_unlimited() {
            return RateVerdict::Ok;
        }
        let ts_ms = now_ms();
        match &self.log {
            Some(log) if log.shared() => {
                let event = RateEvent {
                    key: key.to_owned(),
                    tool: tool.to_owned(),
                    ts_ms,
                };
                match log.record(event, self.enforced(limits)).await {
                    Ok(seen) => self.verdict(over(limits, seen, ts_ms)),
                    Err(e) => RateVerdict::Unavailable(e),
                }
            }
            Some(log) => {
                self.load(log.as_ref()).await;
                self.check_at(key, agent, tool, ts_ms)
            }
            None => self.check_at(key, agent, tool, ts_ms),
        }
    }

    /// The caps a call is refused at (none in `mode: log`, where every call runs and counts).
    fn enforced(&self, limits: Limits) -> [Option<u32>; 3] {
        if self.cfg.mode == RateLimitMode::Log {
            [None; 3]
        } else {
            caps(limits)
        }
    }

    fn verdict(&self, exceeded: Option<Exceeded>) -> RateVerdict {
        match exceeded {
            None => RateVerdict::Ok,
            Some(e) if self.cfg.mode == RateLimitMode::Log => RateVerdict::LogOnly(e),
            Some(e) => RateVerdict::Refuse(e),
        }
    }

    /// [`RateLimiter::check`] at a given time, counted in memory (and appended to a local
    /// log), without reading the log first.
    pub fn check_at(&self, key: &str, agent: Option<&str>, tool: &str, ts_ms: i64) -> RateVerdict {
        let limits = self.limits_for(agent, tool);
        if limits.is_unlimited() {
            return RateVerdict::Ok;
        }
        let (seen, fits) = {
            let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
            let q = w.entry((key.to_owned(), tool.to_owned())).or_default();
            while q.front().is_some_and(|&t| t <= ts_ms - DAY) {
                q.pop_front();
            }
            // The deque is in time order: a binary search finds each window's start; this
            // call counts as if it were recorded.
            let end = q.partition_point(|&t| t <= ts_ms);
            let mut seen = RateCounts::default();
            for (i, (_, span)) in WINDOWS.iter().enumerate() {
                let start = q.partition_point(|&t| t <= ts_ms - span);
                seen.counts[i] = (end - start + 1) as u32;
                seen.oldest[i] = q.get(start).copied().filter(|_| start < end);
            }
            let fits = seen.fits(self.enforced(limits));
            if fits {
                q.insert(end, ts_ms);
            }
            (seen, fits)
        };
        if fits && let Some(log) = &self.log {
            log.append(RateEvent {
                key: key.to_owned(),
                tool: tool.to_owned(),
                ts_ms,
            });
        }
        self.verdict(over(limits, seen, ts_ms))
    }

    /// Whether any limit is configured at all (the Invoker skips the stage otherwise).
    pub fn is_active(&self) -> bool {
        !self.cfg.defaults.is_unlimited()
            || self.cfg.tools.values().any(|l| !l.is_unlimited())
            || self
                .cfg
                .agents
                .values()
                .any(|m| m.values().any(|l| !l.is_unlimited()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn lim(m: Option<u32>, h: Option<u32>, d: Option<u32>) -> Limits {
        Limits {
            per_minute: m,
            per_hour: h,
            per_day: d,
        }
    }

    #[test]
    fn specific_entries_win_and_inherit_unset_windows() {
        let cfg = RateLimitsConfig {
            mode: RateLimitMode::Enforce,
            defaults: lim(Some(10), Some(100), Some(1000)),
            tools: BTreeMap::from([
                ("web_*".into(), lim(Some(5), None, None)),
                ("web_search".into(), lim(Some(3), None, None)),
                ("we*".into(), lim(Some(7), None, None)),
            ]),
            agents: BTreeMap::from([(
                "scout".into(),
                BTreeMap::from([("web_*".into(), lim(None, Some(20), None))]),
            )]),
        };
        let r = RateLimiter::new(cfg, None);
        assert_eq!(
            r.limits_for(None, "web_search"),
            lim(Some(3), Some(100), Some(1000))
        );
        assert_eq!(
            r.limits_for(None, "web_fetch"),
            lim(Some(5), Some(100), Some(1000))
        );
        assert_eq!(
            r.limits_for(None, "weather"),
            lim(Some(7), Some(100), Some(1000))
        );
        assert_eq!(
            r.limits_for(None, "other"),
            lim(Some(10), Some(100), Some(1000))
        );
        assert_eq!(
            r.limits_for(Some("scout"), "web_search"),
            lim(Some(3), Some(20), Some(1000))
        );
        assert_eq!(
            r.limits_for(Some("other"), "web_fetch"),
            lim(Some(5), Some(100), Some(1000))
        );
    }

    #[test]
    fn windows_slide() {
        let cfg = RateLimitsConfig {
            defaults: lim(Some(2), Some(3), None),
            ..Default::default()
        };
        let r = RateLimiter::new(cfg, None);
        let t0 = 1_000_000_000;
        assert_eq!(r.check_at("k", None, "t", t0), RateVerdict::Ok);
        assert_eq!(r.check_at("k", None, "t", t0 + 1), RateVerdict::Ok);
        let RateVerdict::Refuse(e) = r.check_at("k", None, "t", t0 + 2) else {
            panic!("third call in a minute must be refused")
        };
        assert_eq!((e.window, e.count, e.limit), ("minute", 3, 2));
        assert_eq!(
            e.retry_after_secs, 60,
            "the first call leaves the minute at t0 + 60 s"
        );
        // Other keys and tools have their own windows.
        assert_eq!(r.check_at("other", None, "t", t0 + 3), RateVerdict::Ok);
        assert_eq!(r.check_at("k", None, "u", t0 + 3), RateVerdict::Ok);
        // A minute later the minute window is clear and the hour holds the two calls that
        // ran (the refused one was not counted): one more fits, the next does not.
        assert_eq!(
            r.check_at("k", None, "t", t0 + MINUTE + 10),
            RateVerdict::Ok
        );
        let RateVerdict::Refuse(e) = r.check_at("k", None, "t", t0 + MINUTE + 11) else {
            panic!("hour limit")
        };
        assert_eq!((e.window, e.count, e.limit), ("hour", 4, 3));
        assert_eq!(
            e.retry_after_secs,
            ((HOUR - MINUTE - 11) as u64).div_ceil(1000)
        );
        // An hour later everything has slid out.
        assert_eq!(
            r.check_at("k", None, "t", t0 + HOUR + MINUTE + 11),
            RateVerdict::Ok
        );
    }

    #[test]
    fn a_client_retrying_in_a_loop_is_let_back_in_when_the_window_has_room() {
        let cfg = RateLimitsConfig {
            defaults: lim(Some(60), None, None),
            ..Default::default()
        };
        let r = RateLimiter::new(cfg, None);
        let t0 = 1_000_000_000;
        for i in 0..60 {
            assert_eq!(
                r.check_at("k", None, "t", t0 + i * 100),
                RateVerdict::Ok,
                "{i}"
            );
        }
        // Retrying every 10 ms for the rest of the minute: refused, never counted.
        let mut t = t0 + 6_000;
        while t < t0 + MINUTE {
            match r.check_at("k", None, "t", t) {
                RateVerdict::Refuse(e) => {
                    assert_eq!((e.count, e.limit), (61, 60), "at {t}");
                    let due = ((t0 + MINUTE - t) as u64).div_ceil(1000);
                    assert_eq!(e.retry_after_secs, due.max(1), "at {t}");
                }
                other => panic!("at {t}: {other:?}"),
            }
            t += 10;
        }
        // 60 s after the first call it has left the window: the client is back in.
        assert_eq!(r.check_at("k", None, "t", t0 + MINUTE + 1), RateVerdict::Ok);
        assert!(matches!(
            r.check_at("k", None, "t", t0 + MINUTE + 2),
            RateVerdict::Refuse(_)
        ));
        assert_eq!(
            r.check_at("k", None, "t", t0 + MINUTE + 101),
            RateVerdict::Ok
        );
    }

    #[test]
    fn log_mode_lets_calls_through_but_reports() {
        let cfg = RateLimitsConfig {
            mode: RateLimitMode::Log,
            defaults: lim(Some(1), None, None),
            ..Default::default()
        };
        let r = RateLimiter::new(cfg, None);
        assert_eq!(r.check_at("k", None, "t", 5), RateVerdict::Ok);
        assert!(matches!(
            r.check_at("k", None, "t", 6),
            RateVerdict::LogOnly(_)
        ));
    }

    #[test]
    fn no_limits_means_inactive_and_untracked() {
        let r = RateLimiter::new(RateLimitsConfig::default(), None);
        assert!(!r.is_active());
        assert_eq!(r.check_at("k", None, "t", 1), RateVerdict::Ok);
        assert!(r.windows.lock().map(|w| w.is_empty()).unwrap_or(false));
    }
}
