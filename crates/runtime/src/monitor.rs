//! The behaviour monitor: per-agent patterns that often follow a successful injection.
//!
//! - `sensitive_after_web` — a sensitive tool shortly after the agent read web content;
//! - `new_tool` — a tool the agent never used before, once it has a baseline;
//! - `volume_spike` — more calls in a minute than usual;
//! - `sensitive_burst` — several distinct sensitive tools in a short window.
//!
//! Sensitive = gated, external side effects, `subprocess` or `secrets` capability, or listed
//! in `security.content_safety.monitor.sensitive_tools`. The monitor raises alerts (audit
//! log and alert sinks); it does not refuse calls — gating does that.
//!
//! A rule alerts **once per agent and session**: the first finding of a rule in a session is
//! an alert, later ones in that session are repeats ([`Finding::repeat`]), which the Invoker
//! writes to the audit log only (`"event": "alert_repeat"`, with the count) — the log keeps
//! everything the monitor saw, the people reading alerts see each pattern once. Calls without
//! a session count as one session per agent (for the life of the process): a scheduled or
//! API-driven agent is alerted once per rule until restart, and its repeats are in the log.
//! The last [`SESSIONS_REMEMBERED`] sessions of each agent are remembered; an older one that
//! comes back alerts afresh. What the members of a cluster tell each other moves the patterns
//! but not this memory: each member alerts a pattern once per session.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use strata_engine::access::matches_any;
use strata_engine::audit::Alert;
use strata_engine::config::MonitorConfig;
use strata_engine::{Capability, SideEffects, ToolSpec};

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Rule name.
    pub rule: &'static str,
    /// What happened.
    pub message: String,
    /// 0 for the rule's first finding in this agent's session (an alert); n for its n-th
    /// repeat there (recorded in the audit log, not alerted).
    pub repeat: u64,
}

impl Finding {
    /// Whether this finding is raised as an alert (the rule's first in its session).
    pub fn alerts(&self) -> bool {
        self.repeat == 0
    }
}

/// The audit-log form of a repeated finding: `alert`'s event with `"event": "alert_repeat"`
/// and `"repeat": n` (what was seen stays in the log; alert sinks are not told).
pub fn repeat_event(alert: &Alert, repeat: u64) -> Value {
    let mut v = alert.to_event();
    if let Value::Object(o) = &mut v {
        o.insert("event".into(), Value::String("alert_repeat".into()));
        o.insert("repeat".into(), Value::from(repeat));
    }
    v
}

/// Sessions per agent whose alerted rules are remembered (the oldest is forgotten first).
pub const SESSIONS_REMEMBERED: usize = 1024;

#[derive(Default)]
struct AgentState {
    last_web: Option<Instant>,
    seen: HashSet<String>,
    calls: u64,
    recent: VecDeque<Instant>,
    sensitive: VecDeque<(Instant, String)>,
    spike_alerted: Option<Instant>,
    /// Per session (`None`: calls without one), how often each rule was found there.
    found: HashMap<Option<String>, HashMap<&'static str, u64>>,
    /// The sessions of `found`, oldest first.
    found_order: VecDeque<Option<String>>,
}

impl AgentState {
    /// Counts `rule` in `session`: 0 the first time, then 1, 2…
    fn count(&mut self, session: Option<&str>, rule: &'static str) -> u64 {
        let key = session.map(str::to_owned);
        if !self.found.contains_key(&key) {
            if self.found_order.len() >= SESSIONS_REMEMBERED
                && let Some(old) = self.found_order.pop_front()
            {
                self.found.remove(&old);
            }
            self.found_order.push_back(key.clone());
        }
        let n = self.found.entry(key).or_default().entry(rule).or_insert(0);
        let before = *n;
        *n += 1;
        before
    }
}

/// What the monitor saw, as it tells the other members of a cluster (so per-agent
/// patterns spread over instances are seen as on one).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Observation {
    /// A call by `agent` of `tool`.
    Call {
        /// The agent.
        agent: String,
        /// The tool.
        tool: String,
        /// Whether it counts as sensitive.
        sensitive: bool,
    },
    /// `agent` received web content.
    WebRead {
        /// The agent.
        agent: String,
    },
}

/// Where local observations go (a cluster member publishes them).
pub type ObservationTap = Box<dyn Fn(Observation) + Send + Sync>;

/// Per-agent state, shared by every surface.
pub struct Monitor {
    cfg: MonitorConfig,
    agents: Mutex<HashMap<String, AgentState>>,
    tap: std::sync::OnceLock<ObservationTap>,
}

impl Monitor {
    /// A monitor with `cfg`.
    pub fn new(cfg: MonitorConfig) -> Self {
        Monitor {
            cfg,
            agents: Mutex::new(HashMap::new()),
            tap: std::sync::OnceLock::new(),
        }
    }

    /// Whether `spec` counts as sensitive (`gated` from the access policy).
    pub fn is_sensitive(&self, spec: &ToolSpec, gated: bool) -> bool {
        gated
            || spec.side_effects == SideEffects::External
            || spec
                .capabilities
                .iter()
                .any(|c| matches!(c, Capability::Subprocess | Capability::Secrets))
            || matches_any(&self.cfg.sensitive_tools, &spec.name)
    }

    /// Observes a call by `agent` before it runs, outside any session.
    pub fn observe(&self, agent: &str, tool: &str, sensitive: bool) -> Vec<Finding> {
        self.observe_at(agent, None, tool, sensitive, Instant::now())
    }

    /// Observes a call by `agent` in `session` before it runs: a rule's first finding in
    /// the session alerts, later ones are repeats (see the module's page).
    pub fn observe_in(
        &self,
        agent: &str,
        session: Option<&str>,
        tool: &str,
        sensitive: bool,
    ) -> Vec<Finding> {
        self.observe_at(agent, session, tool, sensitive, Instant::now())
    }

    /// Sends every local observation to `tap` from now on (once; later calls are ignored
    /// and return false).
    pub fn set_tap(&self, tap: ObservationTap) -> bool {
        self.tap.set(tap).is_ok()
    }

    /// Takes in what another member saw: the state moves as if it had happened here, and
    /// no alert is raised for it (the member where it happened raises those).
    pub fn observed_elsewhere(&self, o: &Observation) {
        let now = Instant::now();
        match o {
            Observation::Call {
                agent,
                tool,
                sensitive,
            } => {
                let _ = self.step(agent, tool, *sensitive, now);
            }
            Observation::WebRead { agent } => self.note_web(agent, now),
        }
    }

    /// [`Monitor::observe_in`] at a given instant (tests).
    pub fn observe_at(
        &self,
        agent: &str,
        session: Option<&str>,
        tool: &str,
        sensitive: bool,
        now: Instant,
    ) -> Vec<Finding> {
        let mut found = self.step(agent, tool, sensitive, now);
        if !found.is_empty() {
            let mut all = self.agents.lock().unwrap_or_else(|p| p.into_inner());
            let st = all.entry(agent.to_owned()).or_default();
            for f in &mut found {
                f.repeat = st.count(session, f.rule);
            }
        }
        if self.cfg.enabled
            && let Some(tap) = self.tap.get()
        {
            tap(Observation::Call {
                agent: agent.to_owned(),
                tool: tool.to_owned(),
                sensitive,
            });
        }
        found
    }

    fn step(&self, agent: &str, tool: &str, sensitive: bool, now: Instant) -> Vec<Finding> {
        if !self.cfg.enabled {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut all = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        let st = all.entry(agent.to_owned()).or_default();
        let ago = |secs: u64| now.checked_sub(Duration::from_secs(secs));
        if sensitive
            && let Some(web) = st.last_web
            && ago(self.cfg.web_window_secs).is_none_or(|t| web >= t)
        {
            out.push(Finding {
                rule: "sensitive_after_web",
                message: format!(
                    "agent `{agent}` called sensitive tool `{tool}` {}s after reading web content",
                    now.saturating_duration_since(web).as_secs()
                ),
                repeat: 0,
            });
        }
        if st.calls >= u64::from(self.cfg.baseline_calls) && !st.seen.contains(tool) {
            out.push(Finding {
                rule: "new_tool",
                message: format!(
                    "agent `{agent}` called `{tool}` for the first time after {} calls",
                    st.calls
                ),
                repeat: 0,
            });
        }
        st.calls += 1;
        st.seen.insert(tool.to_owned());
        if let Some(edge) = ago(60) {
            while st.recent.front().is_some_and(|t| *t < edge) {
                st.recent.pop_front();
            }
        }
        st.recent.push_back(now);
        let spike_quiet = st
            .spike_alerted
            .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(60));
        if st.recent.len() > self.cfg.spike_per_minute as usize && spike_quiet {
            st.spike_alerted = Some(now);
            out.push(Finding {
                rule: "volume_spike",
                message: format!(
                    "agent `{agent}` made {} tool calls in the last minute (threshold {})",
                    st.recent.len(),
                    self.cfg.spike_per_minute
                ),
                repeat: 0,
            });
        }
        if sensitive {
            if let Some(edge) = ago(self.cfg.sensitive_window_secs) {
                while st.sensitive.front().is_some_and(|(t, _)| *t < edge) {
                    st.sensitive.pop_front();
                }
            }
            let was: HashSet<&str> = st.sensitive.iter().map(|(_, n)| n.as_str()).collect();
            let fresh = !was.contains(tool);
            let distinct = was.len() + usize::from(fresh);
            if fresh && distinct >= self.cfg.sensitive_distinct as usize {
                out.push(Finding {
                    rule: "sensitive_burst",
                    message: format!(
                        "agent `{agent}` used {distinct} distinct sensitive tools within {}s",
                        self.cfg.sensitive_window_secs
                    ),
                    repeat: 0,
                });
            }
            st.sensitive.push_back((now, tool.to_owned()));
        }
        out
    }

    /// Notes that `agent` just received web content.
    pub fn web_read(&self, agent: &str) {
        self.web_read_at(agent, Instant::now());
    }

    /// [`Monitor::web_read`] at a given instant (tests).
    pub fn web_read_at(&self, agent: &str, now: Instant) {
        if !self.cfg.enabled {
            return;
        }
        self.note_web(agent, now);
        if let Some(tap) = self.tap.get() {
            tap(Observation::WebRead {
                agent: agent.to_owned(),
            });
        }
    }

    fn note_web(&self, agent: &str, now: Instant) {
        if !self.cfg.enabled {
            return;
        }
        let mut all = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        let st = all.entry(agent.to_owned()).or_default();
        st.last_web = Some(st.last_web.map_or(now, |w| w.max(now)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> MonitorConfig {
        MonitorConfig {
            baseline_calls: 3,
            spike_per_minute: 4,
            sensitive_distinct: 2,
            sensitive_window_secs: 60,
            web_window_secs: 300,
            ..Default::default()
        }
    }

    fn rules(f: &[Finding]) -> Vec<&'static str> {
        f.iter().map(|f| f.rule).collect()
    }

    fn has(f: &[Finding], rule: &str) -> bool {
        f.iter().any(|f| f.rule == rule)
    }

    #[test]
    fn sensitive_tool_after_web_content() {
        let m = Monitor::new(cfg());
        let t0 = Instant::now();
        assert!(m.observe_at("a", None, "write", true, t0).is_empty());
        m.web_read_at("a", t0);
        let f = m.observe_at("a", None, "write", true, t0 + Duration::from_secs(10));
        assert_eq!(rules(&f), ["sensitive_after_web"]);
        // Outside the window: quiet. Other agents: unaffected.
        let later = t0 + Duration::from_secs(400);
        assert!(m.observe_at("a", None, "write", true, later).is_empty());
        assert!(
            m.observe_at("b", None, "write", true, t0 + Duration::from_secs(1))
                .is_empty()
        );
        // Non-sensitive tools after web content are fine.
        m.web_read_at("a", later);
        assert!(m.observe_at("a", None, "write", false, later).is_empty());
    }

    #[test]
    fn never_seen_tool_after_baseline() {
        let m = Monitor::new(cfg());
        let t = Instant::now();
        for _ in 0..3 {
            assert!(m.observe_at("a", None, "read", false, t).is_empty());
        }
        assert_eq!(
            rules(&m.observe_at("a", None, "odd", false, t)),
            ["new_tool"]
        );
        assert!(!has(&m.observe_at("a", None, "odd", false, t), "new_tool"));
    }

    #[test]
    fn volume_spike_alerts_once_per_minute() {
        let m = Monitor::new(MonitorConfig {
            baseline_calls: 1000,
            ..cfg()
        });
        let t = Instant::now();
        let mut spikes = 0;
        for i in 0..10 {
            let f = m.observe_at("a", None, "read", false, t + Duration::from_millis(i));
            spikes += f.iter().filter(|f| f.rule == "volume_spike").count();
        }
        assert_eq!(spikes, 1);
    }

    #[test]
    fn distinct_sensitive_tools_in_a_window() {
        let m = Monitor::new(cfg());
        let t = Instant::now();
        assert!(m.observe_at("a", None, "shell", true, t).is_empty());
        assert!(m.observe_at("a", None, "shell", true, t).is_empty());
        assert_eq!(
            rules(&m.observe_at("a", None, "mail", true, t)),
            ["sensitive_burst"]
        );
        // After the window the count starts again.
        let later = t + Duration::from_secs(120);
        assert!(!has(
            &m.observe_at("a", None, "post", true, later),
            "sensitive_burst"
        ));
    }

    #[test]
    fn a_rule_alerts_once_per_agent_and_session() {
        let m = Monitor::new(cfg());
        let t = Instant::now();
        m.web_read_at("a", t);
        let alerts = |session, n: u64| -> Vec<u64> {
            (0..n)
                .flat_map(|i| {
                    m.observe_at("a", session, "mail", true, t + Duration::from_millis(i))
                })
                .filter(|f| f.rule == "sensitive_after_web")
                .map(|f| f.repeat)
                .collect()
        };
        // Five trips in one session: one alert, then repeats 1..=4 (still reported, for the log).
        assert_eq!(alerts(Some("s1"), 5), [0, 1, 2, 3, 4]);
        // Another session of the same agent: alerted again, once.
        assert_eq!(alerts(Some("s2"), 2), [0, 1]);
        // No session: one more "session" per agent; another agent is its own.
        assert_eq!(alerts(None, 2), [0, 1]);
        m.web_read_at("b", t);
        let f = m.observe_at("b", Some("s1"), "mail", true, t);
        assert!(f.iter().all(Finding::alerts) && !f.is_empty(), "{f:?}");
        // A remembered session stays quiet however many come after it, up to the bound.
        for i in 0..SESSIONS_REMEMBERED - 3 {
            let _ = m.observe_at("a", Some(&format!("x{i}")), "mail", true, t);
        }
        assert_eq!(alerts(Some("s2"), 1), [2]);
        // The oldest is forgotten once the bound is passed.
        let _ = m.observe_at("a", Some("y"), "mail", true, t);
        assert_eq!(alerts(Some("s1"), 1), [0]);
    }

    #[test]
    fn a_repeat_is_an_audit_event_not_an_alert() {
        let alert = Alert {
            kind: "behaviour",
            rule: "sensitive_after_web".into(),
            message: "m".into(),
            agent_id: Some("a".into()),
            tool: Some("mail".into()),
            request_id: Some("r".into()),
            score: None,
        };
        let v = repeat_event(&alert, 3);
        assert_eq!(v["event"], "alert_repeat");
        assert_eq!(v["repeat"], 3);
        assert_eq!(v["rule"], "sensitive_after_web");
        assert!(v["ts"].is_string());
    }

    #[test]
    fn what_another_member_saw_moves_the_state_but_raises_nothing_here() {
        let (a, b) = (
            std::sync::Arc::new(Monitor::new(cfg())),
            std::sync::Arc::new(Monitor::new(cfg())),
        );
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (to_b, log) = (b.clone(), seen.clone());
        assert!(a.set_tap(Box::new(move |o| {
            log.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(o.clone());
            to_b.observed_elsewhere(&o);
        })));
        assert!(!a.set_tap(Box::new(|_| {})), "one tap");
        a.web_read("x");
        assert!(a.observe("x", "shell", false).is_empty());
        // On b: the web read and the call happened, though nothing was alerted there.
        assert_eq!(
            rules(&b.observe("x", "mail", true)),
            ["sensitive_after_web"]
        );
        assert_eq!(
            *seen.lock().unwrap_or_else(|p| p.into_inner()),
            vec![
                Observation::WebRead { agent: "x".into() },
                Observation::Call {
                    agent: "x".into(),
                    tool: "shell".into(),
                    sensitive: false
                }
            ]
        );
        // Observations from elsewhere are not passed on again.
        b.observed_elsewhere(&Observation::WebRead { agent: "y".into() });
        assert_eq!(seen.lock().unwrap_or_else(|p| p.into_inner()).len(), 2);
    }
}
