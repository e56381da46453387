//! Strata's metrics: one catalogue ([`CATALOGUE`]) and one function per event, called where the
//! event happens (the Invoker, the agent loop, the approval queue, the scheduler, connectors,
//! stores).
//!
//! They go through the `metrics` facade: without an installed recorder every call is a no-op
//! (tests and the CLI pay nothing); `serve` installs the Prometheus exporter and renders
//! `/metrics`. Label values are bounded: tool names from the registry (an unknown tool is
//! counted as `_unknown`), agent, model, connector and schedule names from the config, rule
//! names from code — never a session id, a sender or text from a user.

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};
use std::time::Duration;

use metrics::{
    Counter, Histogram, Label, Unit, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};

/// Handles already registered with the recorder, by metric name and label values. Every
/// tool call, model call and turn looks its handles up here — a hash of a few short strings
/// under a read lock — instead of building and registering a labelled key each time, which
/// cost more than the rest of a tool call's bookkeeping (`cargo xtask bench invoke`).
struct Handles<T> {
    /// By the hash of name and values: the entries with that hash (name, values…).
    map: RwLock<HashMap<u64, Vec<Entry<T>>>>,
}

/// A handle under its full key (the name, then the label values).
type Entry<T> = (Box<[Box<str>]>, T);

impl<T> Handles<T> {
    fn new() -> Self {
        Handles {
            map: RwLock::new(HashMap::new()),
        }
    }

    /// Runs `apply` on the handle of `name` with these label values, made by `make` on first
    /// use. A hit takes a read lock and hashes a few short strings; nothing is allocated or
    /// cloned.
    fn with(
        &self,
        name: &'static str,
        values: &[&str],
        make: impl FnOnce() -> T,
        apply: impl FnOnce(&T),
    ) {
        let hash = fnv1a(name, values);
        let same = |k: &[Box<str>]| {
            k.len() == values.len() + 1
                && *k[0] == *name
                && k[1..].iter().zip(values).all(|(a, b)| **a == **b)
        };
        {
            let map = self.map.read().unwrap_or_else(|p| p.into_inner());
            if let Some((_, h)) = map.get(&hash).and_then(|v| v.iter().find(|(k, _)| same(k))) {
                apply(h);
                return;
            }
        }
        let handle = make();
        apply(&handle);
        let key: Box<[Box<str>]> = std::iter::once(name)
            .chain(values.iter().copied())
            .map(Box::from)
            .collect();
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        let slot = map.entry(hash).or_default();
        if !slot.iter().any(|(k, _)| same(k)) {
            slot.push((key, handle));
        }
    }

    fn clear(&self) {
        self.map.write().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// FNV-1a over the name and the values (a separator between them): short keys, no need for
/// a keyed hash — every entry's full key is compared on a hit.
fn fnv1a(name: &str, values: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in std::iter::once(name).chain(values.iter().copied()) {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

static COUNTERS: LazyLock<Handles<Counter>> = LazyLock::new(Handles::new);
static HISTOGRAMS: LazyLock<Handles<Histogram>> = LazyLock::new(Handles::new);
/// A tool call's counter and histogram, found with one lookup.
static TOOL_HANDLES: LazyLock<Handles<(Counter, Histogram)>> = LazyLock::new(Handles::new);

fn labels(keys: &[&'static str], values: &[&str]) -> Vec<Label> {
    keys.iter()
        .zip(values)
        .map(|(k, v)| Label::new(*k, (*v).to_owned()))
        .collect()
}

/// Adds `n` to counter `name` with label `keys` = `values`.
fn count(name: &'static str, keys: &[&'static str], values: &[&str], n: u64) {
    COUNTERS.with(
        name,
        values,
        || counter!(name, labels(keys, values)),
        |c| c.increment(n),
    );
}

/// Records `v` in histogram `name` with label `keys` = `values`.
fn observe(name: &'static str, keys: &[&'static str], values: &[&str], v: f64) {
    HISTOGRAMS.with(
        name,
        values,
        || histogram!(name, labels(keys, values)),
        |h| h.record(v),
    );
}

/// Drops the cached handles, so the next events register again with the recorder installed
/// now (the launcher calls it after installing one; a handle taken before is a no-op).
pub fn forget_handles() {
    COUNTERS.clear();
    HISTOGRAMS.clear();
    TOOL_HANDLES.clear();
}

/// The kind of a metric, as Prometheus types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution in buckets.
    Histogram,
}

/// One metric: name, kind, labels and help (the help is also the documentation).
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// The exported name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its label names.
    pub labels: &'static [&'static str],
    /// One line for people.
    pub help: &'static str,
}

const fn m(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        labels,
        help,
    }
}

/// Tool calls.
pub const TOOL_CALLS: &str = "strata_tool_calls_total";
/// Tool call latency.
pub const TOOL_CALL_SECONDS: &str = "strata_tool_call_duration_seconds";
/// Rate-limit refusals.
pub const RATE_LIMITED: &str = "strata_rate_limit_rejections_total";
/// Turns.
pub const TURNS: &str = "strata_turns_total";
/// Turns resumed from their journal.
pub const TURNS_RESUMED: &str = "strata_turns_resumed_total";
/// Calls a resumed turn did not run again.
pub const UNKNOWN_OUTCOME: &str = "strata_tool_calls_unknown_outcome_total";
/// Model calls.
pub const MODEL_CALLS: &str = "strata_model_calls_total";
/// Model call latency.
pub const MODEL_CALL_SECONDS: &str = "strata_model_call_duration_seconds";
/// Tokens.
pub const TOKENS: &str = "strata_tokens_total";
/// Cost.
pub const COST: &str = "strata_cost_microdollars_total";
/// Budgets reached.
pub const BUDGET_REACHED: &str = "strata_budget_reached_total";
/// Approvals waiting.
pub const APPROVALS_PENDING: &str = "strata_approvals_pending";
/// Age of the oldest waiting approval.
pub const APPROVAL_OLDEST: &str = "strata_approvals_oldest_pending_seconds";
/// Approvals decided.
pub const APPROVALS_DECIDED: &str = "strata_approvals_decided_total";
/// Alerts.
pub const ALERTS: &str = "strata_alerts_total";
/// Taint escalations.
pub const TAINT_ESCALATIONS: &str = "strata_taint_escalations_total";
/// Memory operations.
pub const MEMORY_OPS: &str = "strata_memory_operations_total";
/// Memory recall latency.
pub const MEMORY_RECALL_SECONDS: &str = "strata_memory_recall_duration_seconds";
/// Connector state.
pub const CONNECTOR_UP: &str = "strata_connector_up";
/// Connector reconnects.
pub const CONNECTOR_RECONNECTS: &str = "strata_connector_reconnects_total";
/// Live sessions.
pub const LIVE_SESSIONS: &str = "strata_live_sessions";
/// Scheduled runs.
pub const SCHEDULE_RUNS: &str = "strata_schedule_runs_total";
/// Store errors.
pub const STORE_ERRORS: &str = "strata_store_errors_total";
/// Build info.
pub const BUILD_INFO: &str = "strata_build_info";

/// Every metric Strata exports. `docs/OPERATIONS.md` lists each (a test checks).
pub const CATALOGUE: &[Metric] = &[
    m(
        TOOL_CALLS,
        Kind::Counter,
        &["tool", "layer", "status"],
        "Tool calls through the Invoker, by tool, the layer that registered it (core, module, overlay, runtime; none when unknown) and outcome (ok, error, unknown_tool, validation_error, denied, rate_limited, approval_denied).",
    ),
    m(
        TOOL_CALL_SECONDS,
        Kind::Histogram,
        &["tool"],
        "Time from a call entering the Invoker to its result, approval waits included.",
    ),
    m(
        RATE_LIMITED,
        Kind::Counter,
        &["tool", "window"],
        "Calls refused by a rate limit, by tool and the window that was full (minute, hour, day, burst…).",
    ),
    m(
        TURNS,
        Kind::Counter,
        &["agent", "outcome"],
        "Agent turns, by agent (`_unknown` for an id no agent has) and outcome (ok, error, denied, budget).",
    ),
    m(
        TURNS_RESUMED,
        Kind::Counter,
        &[],
        "Turns continued from their journal after the process that ran them died (their recorded steps were not done again).",
    ),
    m(
        UNKNOWN_OUTCOME,
        Kind::Counter,
        &["tool", "decision"],
        "Tool calls a resumed turn found started with no recorded outcome, whose tool neither is free of side effects nor honours an idempotency key, by tool and decision (skipped: not run again; approved: a person had it run again).",
    ),
    m(
        MODEL_CALLS,
        Kind::Counter,
        &["provider", "model", "status"],
        "Calls to a model provider, by provider, model and outcome (ok, error).",
    ),
    m(
        MODEL_CALL_SECONDS,
        Kind::Histogram,
        &["provider", "model"],
        "Latency of one model call.",
    ),
    m(
        TOKENS,
        Kind::Counter,
        &["agent", "model", "kind"],
        "Tokens by agent, model and kind (input: all prompt tokens, cached_input: the part read from the vendor's cache, output).",
    ),
    m(
        COST,
        Kind::Counter,
        &["agent", "model"],
        "Cost in millionths of a US dollar of the priced model calls, each call rounded to the nearest one (calls to unpriced models add nothing; strata usage has the exact figures). Divide by 1e6 for dollars.",
    ),
    m(
        BUDGET_REACHED,
        Kind::Counter,
        &["scope", "action"],
        "Model calls that met a reached budget, by the budget's scope (agent, sender, schedule) and its action (block: the call was not made; warn: it was; ask: an approver was asked).",
    ),
    m(
        APPROVALS_PENDING,
        Kind::Gauge,
        &[],
        "Approval requests waiting for a person (read from the store at each scrape).",
    ),
    m(
        APPROVAL_OLDEST,
        Kind::Gauge,
        &[],
        "Age in seconds of the oldest approval request still waiting (0 when none).",
    ),
    m(
        APPROVALS_DECIDED,
        Kind::Counter,
        &["outcome"],
        "Approval requests decided, by outcome (approved, denied, timeout, error).",
    ),
    m(
        ALERTS,
        Kind::Counter,
        &["kind", "rule"],
        "Security and operations alerts, by kind (content_safety, inbound_safety, behaviour, rate_limit, approval, schedule) and rule.",
    ),
    m(
        TAINT_ESCALATIONS,
        Kind::Counter,
        &["tool"],
        "Calls that needed a person's approval only because their turn was tainted by outside content.",
    ),
    m(
        MEMORY_OPS,
        Kind::Counter,
        &["op", "status"],
        "Memory backend operations (recall, record, search, store, get, forget, list) by outcome (ok, error).",
    ),
    m(
        MEMORY_RECALL_SECONDS,
        Kind::Histogram,
        &[],
        "Time to build a turn's memory block (recall).",
    ),
    m(
        CONNECTOR_UP,
        Kind::Gauge,
        &["connector"],
        "1 while a connector is connected, 0 while it is not.",
    ),
    m(
        CONNECTOR_RECONNECTS,
        Kind::Counter,
        &["connector"],
        "Times a connector lost its connection.",
    ),
    m(
        LIVE_SESSIONS,
        Kind::Gauge,
        &[],
        "Sessions held in memory by this instance (read at each scrape).",
    ),
    m(
        SCHEDULE_RUNS,
        Kind::Counter,
        &["schedule", "status"],
        "Scheduled runs, by schedule name and status (ok, failed, timeout).",
    ),
    m(
        STORE_ERRORS,
        Kind::Counter,
        &["backend"],
        "Errors from the state store (sqlite, postgres).",
    ),
    m(
        BUILD_INFO,
        Kind::Gauge,
        &["version"],
        "Always 1; the version label is the running build.",
    ),
];

/// Registers every metric's help text and unit with the installed recorder (once, at start).
pub fn describe() {
    for d in CATALOGUE {
        let unit = if d.name.ends_with("_seconds") {
            Some(Unit::Seconds)
        } else {
            None
        };
        match (d.kind, unit) {
            (Kind::Counter, _) => describe_counter!(d.name, d.help),
            (Kind::Gauge, _) => describe_gauge!(d.name, d.help),
            (Kind::Histogram, Some(u)) => describe_histogram!(d.name, u, d.help),
            (Kind::Histogram, None) => describe_histogram!(d.name, d.help),
        }
    }
}

/// The build's version, as `strata_build_info{version} 1`.
pub fn build_info(version: &str) {
    gauge!(BUILD_INFO, "version" => version.to_owned()).set(1.0);
}

/// One tool call's outcome and latency.
pub fn tool_call(tool: &str, layer: &str, status: &str, took: Duration) {
    let values = [tool, layer, status];
    TOOL_HANDLES.with(
        TOOL_CALLS,
        &values,
        || {
            (
                counter!(TOOL_CALLS, labels(&["tool", "layer", "status"], &values)),
                histogram!(TOOL_CALL_SECONDS, labels(&["tool"], &[tool])),
            )
        },
        |(c, h)| {
            c.increment(1);
            h.record(took.as_secs_f64());
        },
    );
}

/// A call refused by a rate limit.
pub fn rate_limited(tool: &str, window: &str) {
    counter!(RATE_LIMITED, "tool" => tool.to_owned(), "window" => window.to_owned()).increment(1);
}

/// A call escalated to approval because its turn was tainted.
pub fn taint_escalation(tool: &str) {
    counter!(TAINT_ESCALATIONS, "tool" => tool.to_owned()).increment(1);
}

/// An approval decided (`approved`, `denied`, `timeout`, `error`).
pub fn approval_decided(outcome: &str) {
    counter!(APPROVALS_DECIDED, "outcome" => outcome.to_owned()).increment(1);
}

/// The approval queue as the store has it.
pub fn approvals_pending(count: usize, oldest_secs: u64) {
    gauge!(APPROVALS_PENDING).set(count as f64);
    gauge!(APPROVAL_OLDEST).set(oldest_secs as f64);
}

/// An alert. A rule list (`a, b`) counts once per rule.
pub fn alert(kind: &str, rule: &str) {
    for r in rule.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        counter!(ALERTS, "kind" => kind.to_owned(), "rule" => r.to_owned()).increment(1);
    }
}

/// A model call that met a reached budget.
pub fn budget_reached(scope: &'static str, action: &'static str) {
    counter!(BUDGET_REACHED, "scope" => scope, "action" => action).increment(1);
}

/// A turn resumed from its journal.
pub fn turn_resumed() {
    count(TURNS_RESUMED, &[], &[], 1);
}

/// A call of `tool` with an unknown outcome: `skipped` or `approved` (run again).
pub fn unknown_outcome(tool: &str, decision: &str) {
    count(UNKNOWN_OUTCOME, &["tool", "decision"], &[tool, decision], 1);
}

/// A finished turn (`ok`, `error`, `denied`).
pub fn turn(agent: &str, outcome: &str) {
    count(TURNS, &["agent", "outcome"], &[agent, outcome], 1);
}

/// One model call: outcome and latency.
pub fn model_call(provider: &str, model: &str, ok: bool, took: Duration) {
    let status = if ok { "ok" } else { "error" };
    count(
        MODEL_CALLS,
        &["provider", "model", "status"],
        &[provider, model, status],
        1,
    );
    observe(
        MODEL_CALL_SECONDS,
        &["provider", "model"],
        &[provider, model],
        took.as_secs_f64(),
    );
}

/// One model call's tokens and (when priced) cost.
pub fn spend(agent: &str, model: &str, input: u64, cached: u64, output: u64, cost: Option<f64>) {
    let t = |kind: &'static str, n: u64| {
        count(
            TOKENS,
            &["agent", "model", "kind"],
            &[agent, model, kind],
            n,
        );
    };
    t("input", input);
    t("cached_input", cached);
    t("output", output);
    // The facade's counters are integers: cost is counted in microdollars.
    if let Some(c) = cost.filter(|c| c.is_finite() && *c > 0.0) {
        count(
            COST,
            &["agent", "model"],
            &[agent, model],
            (c * 1e6).round() as u64,
        );
    }
}

/// A memory operation's outcome.
pub fn memory_op(op: &'static str, ok: bool) {
    let status = if ok { "ok" } else { "error" };
    count(MEMORY_OPS, &["op", "status"], &[op, status], 1);
}

/// How long a recall took.
pub fn memory_recall(took: Duration) {
    observe(MEMORY_RECALL_SECONDS, &[], &[], took.as_secs_f64());
}

/// A connector connected (`true`) or lost its connection (`false`; counted as a reconnect
/// when it had been up).
pub fn connector_state(connector: &str, up: bool) {
    let g = gauge!(CONNECTOR_UP, "connector" => connector.to_owned());
    g.set(if up { 1.0 } else { 0.0 });
    if !up {
        counter!(CONNECTOR_RECONNECTS, "connector" => connector.to_owned()).increment(1);
    }
}

/// Sessions held in memory.
pub fn live_sessions(n: usize) {
    gauge!(LIVE_SESSIONS).set(n as f64);
}

/// A scheduled run's end.
pub fn schedule_run(schedule: &str, status: &str) {
    counter!(SCHEDULE_RUNS, "schedule" => schedule.to_owned(), "status" => status.to_owned())
        .increment(1);
}

/// A state-store error.
pub fn store_error(backend: &'static str) {
    counter!(STORE_ERRORS, "backend" => backend).increment(1);
}
