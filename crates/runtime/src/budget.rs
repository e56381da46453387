//! Budgets that never overshoot: before each model call its worst case (the prompt's
//! estimate plus `max_tokens`, at the model's price) is *reserved* against every budget that
//! applies — the agent's (`agents.<id>.budget`, else `defaults.budget`), the sender's (a
//! `team.json` person's `budget`) and the schedule's (`schedules.<name>.budget`, over the
//! schedule's session) — and settled with the real usage when the call returns. A call whose
//! reservation does not fit is not made (`block`), is made with an alert (`warn`), or waits
//! for an approver to extend the budget by its own size until the period ends (`ask`).
//!
//! Because a call is made only once its reservation fits, concurrent turns cannot together
//! pass a budget unless a call costs more than its reservation (the prompt estimate is
//! conservative: three bytes a token).
//!
//! Spend so far is read from the usage store when a budget is first used in a period (so a
//! restart keeps counting), then kept here. Periods are the day and the calendar month of
//! `defaults.timezone` (UTC when unset). Each instance of a cluster keeps its own
//! reservations and its own running figures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::civil::Date;
use jiff::tz::TimeZone;

use crate::approval::{ApprovalOutcome, ApprovalRecord, ApprovalStatus, Approvals};
use crate::usage::{Pricing, UsageBy, UsageQuery, UsageStore};
use strata_engine::audit::Alert;
use strata_engine::config::{BudgetAction, BudgetConfig, Config, InvalidSetting};
use strata_engine::principal::Principal;

/// The completion size reserved (and sent as `max_tokens`) for a call of an agent with a
/// budget but no `llm.max_tokens`: without a bound the worst case is unknown.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Bytes per token in the prompt estimate: tokenisers average about four bytes a token on
/// English text; three leaves room for code and other languages.
const BYTES_PER_TOKEN: usize = 3;

/// Tolerance of dollar comparisons (sums of float prices).
const EPSILON_USD: f64 = 1e-9;

/// Milliseconds since the epoch (a clock tests can set).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Who a budget belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeKind {
    /// An agent's model calls.
    Agent,
    /// Model calls of turns for a person.
    Sender,
    /// Model calls in a schedule's session.
    Schedule,
}

impl ScopeKind {
    /// The label (`agent`, `sender`, `schedule`).
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Agent => "agent",
            ScopeKind::Sender => "sender",
            ScopeKind::Schedule => "schedule",
        }
    }
}

/// One limit of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Window {
    DailyUsd,
    MonthlyUsd,
    DailyTokens,
}

impl Window {
    const ALL: [Window; 3] = [Window::DailyUsd, Window::MonthlyUsd, Window::DailyTokens];

    fn index(self) -> usize {
        self as usize
    }

    fn rule(self) -> &'static str {
        match self {
            Window::DailyUsd => "daily_usd",
            Window::MonthlyUsd => "monthly_usd",
            Window::DailyTokens => "daily_tokens",
        }
    }

    fn limit(self, b: &BudgetConfig) -> Option<f64> {
        match self {
            Window::DailyUsd => b.daily_usd,
            Window::MonthlyUsd => b.monthly_usd,
            Window::DailyTokens => b.daily_tokens.map(|t| t as f64),
        }
    }
}

/// A budget that applies to a call.
#[derive(Debug, Clone)]
struct Scope {
    kind: ScopeKind,
    /// The agent id, person id or schedule name.
    name: String,
    budget: BudgetConfig,
}

impl Scope {
    fn key(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.name)
    }

    fn describe(&self) -> String {
        format!("{} `{}`", self.kind.as_str(), self.name)
    }
}

/// One scope's figures in the current periods.
#[derive(Debug)]
struct Ledger {
    day: Date,
    month: (i16, i8),
    /// Spent in the day, the month, and tokens in the day (settled calls).
    spent: [f64; 3],
    /// Reserved by calls in flight (dollars, tokens).
    reserved_usd: f64,
    reserved_tokens: f64,
    /// Extensions approvers granted, per window, for the current period.
    extra: [f64; 3],
    /// An approver declined to extend this window in the current period.
    declined: [bool; 3],
    /// The alert for this window went out in the current period.
    alerted: [bool; 3],
    /// Held while an approver is asked, so concurrent calls wait for one answer.
    asking: Arc<tokio::sync::Mutex<()>>,
    /// Asks that went unanswered: a call that waited behind one stops too.
    unanswered: u64,
}

impl Ledger {
    fn used(&self, w: Window) -> f64 {
        self.spent[w.index()]
            + match w {
                Window::DailyTokens => self.reserved_tokens,
                _ => self.reserved_usd,
            }
    }

    /// Starts new periods when the day or month has changed.
    fn roll(&mut self, day: Date) {
        if day != self.day {
            for w in [Window::DailyUsd, Window::DailyTokens] {
                let i = w.index();
                (self.spent[i], self.extra[i]) = (0.0, 0.0);
                (self.declined[i], self.alerted[i]) = (false, false);
            }
            self.day = day;
        }
        let month = (day.year(), day.month());
        if month != self.month {
            let i = Window::MonthlyUsd.index();
            (self.spent[i], self.extra[i]) = (0.0, 0.0);
            (self.declined[i], self.alerted[i]) = (false, false);
            self.month = month;
        }
    }
}

/// The model call about to be made.
#[derive(Debug, Clone)]
pub struct PlannedCall<'a> {
    /// The agent.
    pub agent: &'a str,
    /// Who the turn is for.
    pub sender: &'a Principal,
    /// The session.
    pub session: &'a str,
    /// The provider as configured.
    pub provider: &'a str,
    /// The model.
    pub model: &'a str,
    /// Bytes of everything sent as the prompt (system, messages, tool schemas).
    pub prompt_bytes: usize,
    /// The completion bound sent.
    pub max_tokens: u32,
}

/// Why a call may not be made: the sentence for the sender.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct BudgetStop(pub String);

/// What reached a budget did, for [`Budgets::reserve`]'s loop.
enum Verdict {
    Fits,
    Stop(String),
    Ask {
        scope: Scope,
        window: Window,
        asking: Arc<tokio::sync::Mutex<()>>,
        unanswered: u64,
        text: String,
    },
}

struct Inner {
    state: Mutex<HashMap<String, Ledger>>,
}

/// The budgets of a process.
pub struct Budgets {
    agents: HashMap<String, BudgetConfig>,
    default: Option<BudgetConfig>,
    /// Person ids and contact ids (bare and `connector:id`) → person id.
    people: HashMap<String, String>,
    person_budgets: HashMap<String, BudgetConfig>,
    /// Session → (schedule name, budget).
    schedules: HashMap<String, (String, BudgetConfig)>,
    tz: TimeZone,
    tz_name: String,
    pricing: Pricing,
    store: Arc<dyn UsageStore>,
    clock: Clock,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Budgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budgets")
            .field("agents", &self.agents.len())
            .field("default", &self.default.is_some())
            .field("people", &self.person_budgets.len())
            .field("schedules", &self.schedules.len())
            .finish_non_exhaustive()
    }
}

impl Budgets {
    /// The budgets `config` sets, counted against `store`'s usage and priced by `pricing`;
    /// `None` when it sets none. An invalid budget is an error naming its key.
    pub fn from_config(
        config: &Config,
        pricing: Pricing,
        store: Arc<dyn UsageStore>,
    ) -> Result<Option<Budgets>, InvalidSetting> {
        let mut agents = HashMap::new();
        for (id, a) in &config.agents {
            if let Some(b) = a.budget {
                b.check(&format!("agents.{id}.budget"))?;
                agents.insert(id.clone(), b);
            }
        }
        if let Some(b) = &config.defaults.budget {
            b.check("defaults.budget")?;
        }
        let mut people = HashMap::new();
        let mut person_budgets = HashMap::new();
        for p in &config.team.people {
            if let Some(b) = p.budget {
                b.check(&format!("team.people[{}].budget", p.id))?;
                person_budgets.insert(p.id.clone(), b);
            }
            people.insert(p.id.clone(), p.id.clone());
            for (connector, contact) in &p.contacts {
                people.insert(contact.clone(), p.id.clone());
                people.insert(format!("{connector}:{contact}"), p.id.clone());
            }
        }
        let mut schedules = HashMap::new();
        for (name, s) in &config.schedules {
            if let Some(b) = s.budget {
                b.check(&format!("schedules.{name}.budget"))?;
                let session = s
                    .session
                    .clone()
                    .unwrap_or_else(|| format!("schedule-{name}"));
                schedules.insert(session, (name.clone(), b));
            }
        }
        if agents.is_empty()
            && config.defaults.budget.is_none()
            && person_budgets.is_empty()
            && schedules.is_empty()
        {
            return Ok(None);
        }
        let tz_name = config
            .defaults
            .timezone
            .clone()
            .unwrap_or_else(|| "UTC".into());
        let tz = TimeZone::get(&tz_name).map_err(|_| {
            InvalidSetting::new(
                "defaults.timezone",
                format!("`defaults.timezone`: `{tz_name}` is not a time zone"),
            )
        })?;
        Ok(Some(Budgets {
            agents,
            default: config.defaults.budget,
            people,
            person_budgets,
            schedules,
            tz,
            tz_name,
            pricing,
            store,
            clock: Arc::new(strata_engine::clock::now_ms),
            inner: Arc::new(Inner {
                state: Mutex::new(HashMap::new()),
            }),
        }))
    }

    /// Reads time from `clock` instead of the system's (tests move it across midnight).
    pub fn with_clock(mut self, clock: Clock) -> Budgets {
        self.clock = clock;
        self
    }

    /// Whether any budget may apply to `agent`'s calls.
    pub fn covers_agent(&self, agent: &str) -> bool {
        self.agents.contains_key(agent)
            || self.default.is_some()
            || !self.person_budgets.is_empty()
            || !self.schedules.is_empty()
    }

    fn scopes(&self, call: &PlannedCall<'_>) -> Vec<Scope> {
        let mut out = Vec::new();
        if let Some(b) = self.agents.get(call.agent).or(self.default.as_ref()) {
            out.push(Scope {
                kind: ScopeKind::Agent,
                name: call.agent.to_owned(),
                budget: *b,
            });
        }
        if let Some(person) = self.person_of(call.sender)
            && let Some(b) = self.person_budgets.get(&person)
        {
            out.push(Scope {
                kind: ScopeKind::Sender,
                name: person,
                budget: *b,
            });
        }
        if let Some((name, b)) = self.schedules.get(call.session) {
            out.push(Scope {
                kind: ScopeKind::Schedule,
                name: name.clone(),
                budget: *b,
            });
        }
        out
    }

    fn person_of(&self, p: &Principal) -> Option<String> {
        match p {
            Principal::Person { id } => self.people.get(id).cloned(),
            _ => None,
        }
    }

    fn now(&self) -> jiff::Zoned {
        let ts = jiff::Timestamp::from_millisecond((self.clock)())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        ts.to_zoned(self.tz.clone())
    }

    /// The start of `day` and of its month, in ms since the epoch.
    fn period_starts(&self, day: Date) -> (i64, i64) {
        let start = |d: Date| {
            d.to_zoned(self.tz.clone())
                .map(|z| z.timestamp().as_millisecond())
                .unwrap_or(0)
        };
        (start(day), start(day.first_of_month()))
    }

    /// Spend so far in the periods of `day` for `scope`, from the store: (day $, month $,
    /// day tokens).
    async fn load(&self, scope: &Scope, day: Date) -> Result<[f64; 3], String> {
        let (day_ms, month_ms) = self.period_starts(day);
        let by = match scope.kind {
            ScopeKind::Agent => UsageBy::Agent,
            ScopeKind::Sender => UsageBy::Sender,
            ScopeKind::Schedule => UsageBy::Session,
        };
        let matches = |key: &str| match scope.kind {
            ScopeKind::Agent => key == scope.name,
            ScopeKind::Sender => key
                .strip_prefix("person:")
                .and_then(|id| self.people.get(id))
                .is_some_and(|p| *p == scope.name),
            ScopeKind::Schedule => self
                .schedules
                .get(key)
                .is_some_and(|(name, _)| *name == scope.name),
        };
        let mut out = [0.0; 3];
        for (since, day_too) in [(month_ms, false), (day_ms, true)] {
            let rows = self
                .store
                .usage(&UsageQuery {
                    by,
                    since_ms: Some(since),
                    turn_id: None,
                })
                .await
                .map_err(|e| {
                    format!("the budget cannot be checked: the usage store failed ({e})")
                })?;
            for r in rows.iter().filter(|r| matches(&r.key)) {
                if day_too {
                    out[Window::DailyUsd.index()] += r.cost_usd;
                    out[Window::DailyTokens.index()] += (r.input_tokens + r.output_tokens) as f64;
                } else {
                    out[Window::MonthlyUsd.index()] += r.cost_usd;
                }
            }
        }
        Ok(out)
    }

    /// The worst case of `call`: (dollars, tokens). Dollars are 0 for a model without a price.
    fn worst_case(&self, call: &PlannedCall<'_>) -> (f64, f64) {
        let input = call.prompt_bytes.div_ceil(BYTES_PER_TOKEN) as f64;
        let output = f64::from(call.max_tokens);
        let usd = self
            .pricing
            .price(call.provider, call.model)
            .map_or(0.0, |p| {
                (input * p.input_per_mtok + output * p.output_per_mtok) / 1e6
            });
        (usd, input + output)
    }

    /// Reserves `call`'s worst case against every budget that applies. `Ok(None)`: none
    /// applies. A reached budget stops the call (`block`, `ask` declined or unanswered),
    /// lets it through with an alert (`warn`), or asks `approvals` first (`ask`; without an
    /// approval hub it stops). Alerts go to `alert`, once per budget, limit and period.
    pub async fn reserve(
        &self,
        call: &PlannedCall<'_>,
        approvals: Option<&Approvals>,
        alert: &(dyn Fn(Alert) + Send + Sync),
    ) -> Result<Option<Reservation>, BudgetStop> {
        let scopes = self.scopes(call);
        if scopes.is_empty() {
            return Ok(None);
        }
        let (usd, tokens) = self.worst_case(call);
        loop {
            let day = self.now().date();
            // Figures of budgets not seen yet in this process come from the store.
            let missing: Vec<&Scope> = {
                let state = self.lock();
                scopes
                    .iter()
                    .filter(|s| !state.contains_key(&s.key()))
                    .collect()
            };
            for s in missing {
                let spent = self.load(s, day).await.map_err(BudgetStop)?;
                self.lock().entry(s.key()).or_insert_with(|| Ledger {
                    day,
                    month: (day.year(), day.month()),
                    spent,
                    reserved_usd: 0.0,
                    reserved_tokens: 0.0,
                    extra: [0.0; 3],
                    declined: [false; 3],
                    alerted: [false; 3],
                    asking: Arc::default(),
                    unanswered: 0,
                });
            }
            match self.decide(call, &scopes, day, usd, tokens, alert) {
                Verdict::Fits => {
                    return Ok(Some(Reservation {
                        inner: self.inner.clone(),
                        keys: scopes.iter().map(Scope::key).collect(),
                        usd,
                        tokens,
                        tz: self.tz.clone(),
                        clock: self.clock.clone(),
                        settled: false,
                    }));
                }
                Verdict::Stop(text) => return Err(BudgetStop(text)),
                Verdict::Ask {
                    scope,
                    window,
                    asking,
                    unanswered,
                    text,
                } => {
                    let Some(approvals) = approvals else {
                        return Err(BudgetStop(format!(
                            "{text} No approver can be asked to extend it here."
                        )));
                    };
                    let _one_ask = asking.lock().await;
                    // Another call asked while this one waited: take its answer.
                    let (gone_unanswered, still_reached) = {
                        let mut state = self.lock();
                        let l = state.get_mut(&scope.key());
                        match l {
                            Some(l) => {
                                l.roll(self.now().date());
                                let limit = window.limit(&scope.budget).unwrap_or(f64::INFINITY)
                                    + l.extra[window.index()];
                                let need = if window == Window::DailyTokens {
                                    tokens
                                } else {
                                    usd
                                };
                                (
                                    l.unanswered != unanswered,
                                    l.declined[window.index()]
                                        || l.used(window) + need > limit + EPSILON_USD,
                                )
                            }
                            None => (false, true),
                        }
                    };
                    if gone_unanswered {
                        return Err(BudgetStop(format!(
                            "{text} An approver was asked to extend it and has not answered."
                        )));
                    }
                    if !still_reached {
                        continue;
                    }
                    strata_engine::meters::budget_reached(scope.kind.as_str(), "ask");
                    let outcome = approvals
                        .request(self.ask_record(call, &scope, window, &text))
                        .await;
                    let mut state = self.lock();
                    let Some(l) = state.get_mut(&scope.key()) else {
                        continue;
                    };
                    match outcome {
                        ApprovalOutcome::Approved { by } => {
                            tracing::info!(budget = %scope.key(), limit = window.rule(), approver = %by, "budget extended");
                            l.extra[window.index()] += window.limit(&scope.budget).unwrap_or(0.0);
                        }
                        ApprovalOutcome::Denied { by, .. } => {
                            l.declined[window.index()] = true;
                            return Err(BudgetStop(format!("{text} {by} declined to extend it.")));
                        }
                        ApprovalOutcome::TimedOut | ApprovalOutcome::Failed(_) => {
                            l.unanswered += 1;
                            return Err(BudgetStop(format!(
                                "{text} An approver was asked to extend it and has not answered."
                            )));
                        }
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Ledger>> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks `scopes` under one lock and reserves in all of them when the call may go on.
    fn decide(
        &self,
        call: &PlannedCall<'_>,
        scopes: &[Scope],
        day: Date,
        usd: f64,
        tokens: f64,
        alert: &(dyn Fn(Alert) + Send + Sync),
    ) -> Verdict {
        let mut state = self.lock();
        let mut ask = None;
        for s in scopes {
            let Some(l) = state.get_mut(&s.key()) else {
                continue;
            };
            l.roll(day);
            for w in Window::ALL {
                let Some(limit) = w.limit(&s.budget) else {
                    continue;
                };
                let need = if w == Window::DailyTokens {
                    tokens
                } else {
                    usd
                };
                if l.used(w) + need <= limit + l.extra[w.index()] + EPSILON_USD {
                    continue;
                }
                let text =
                    self.reached_text(s, w, limit + l.extra[w.index()], l.used(w), need, day);
                if !l.alerted[w.index()] {
                    l.alerted[w.index()] = true;
                    alert(Alert {
                        kind: "budget",
                        rule: format!("{}_{}", s.kind.as_str(), w.rule()),
                        message: format!("{text} (action: {})", s.budget.action.as_str()),
                        agent_id: Some(call.agent.to_owned()),
                        tool: None,
                        request_id: None,
                        score: None,
                    });
                }
                match s.budget.action {
                    BudgetAction::Warn => {
                        strata_engine::meters::budget_reached(s.kind.as_str(), "warn");
                    }
                    BudgetAction::Block => {
                        strata_engine::meters::budget_reached(s.kind.as_str(), "block");
                        return Verdict::Stop(text);
                    }
                    BudgetAction::Ask if l.declined[w.index()] => {
                        strata_engine::meters::budget_reached(s.kind.as_str(), "block");
                        return Verdict::Stop(format!("{text} An approver declined to extend it."));
                    }
                    BudgetAction::Ask => {
                        if ask.is_none() {
                            ask = Some(Verdict::Ask {
                                scope: s.clone(),
                                window: w,
                                asking: l.asking.clone(),
                                unanswered: l.unanswered,
                                text,
                            });
                        }
                    }
                }
            }
        }
        if let Some(a) = ask {
            return a;
        }
        for s in scopes {
            if let Some(l) = state.get_mut(&s.key()) {
                l.reserved_usd += usd;
                l.reserved_tokens += tokens;
            }
        }
        Verdict::Fits
    }

    /// The sentence for a reached budget.
    fn reached_text(
        &self,
        s: &Scope,
        w: Window,
        limit: f64,
        used: f64,
        need: f64,
        day: Date,
    ) -> String {
        let (what, amount, used, need) = match w {
            Window::DailyTokens => (
                "daily token budget",
                format!("{} tokens", limit.round()),
                format!("{} tokens", used.round()),
                format!("{} tokens", need.round()),
            ),
            Window::DailyUsd => (
                "daily budget",
                format!("${limit:.2}"),
                format!("${used:.4}"),
                format!("${need:.4}"),
            ),
            Window::MonthlyUsd => (
                "monthly budget",
                format!("${limit:.2}"),
                format!("${used:.4}"),
                format!("${need:.4}"),
            ),
        };
        let renews = match w {
            Window::MonthlyUsd => day
                .first_of_month()
                .checked_add(jiff::Span::new().months(1))
                .unwrap_or(day),
            _ => day.tomorrow().unwrap_or(day),
        };
        format!(
            "The {what} of {} is reached ({amount}; {used} spent or reserved, and the next model \
             call may cost up to {need}). It renews on {renews} at 00:00 ({}).",
            s.describe(),
            self.tz_name
        )
    }

    fn ask_record(
        &self,
        call: &PlannedCall<'_>,
        scope: &Scope,
        window: Window,
        text: &str,
    ) -> ApprovalRecord {
        let size = match window {
            Window::DailyTokens => format!("{} tokens", scope.budget.daily_tokens.unwrap_or(0)),
            _ => format!("${:.2}", window.limit(&scope.budget).unwrap_or(0.0)),
        };
        ApprovalRecord {
            id: format!("budget-{}", uuid::Uuid::new_v4().simple()),
            agent_id: Some(call.agent.to_owned()),
            tool: "budget".into(),
            principal: call.sender.to_string(),
            args: serde_json::json!({
                "scope": scope.kind.as_str(),
                "name": scope.name,
                "limit": window.rule(),
                "extend_by": size,
            }),
            description: format!("{text} Approve to extend it by {size} until it renews."),
            status: ApprovalStatus::Pending,
            approver: None,
            reason: None,
            created_at: crate::approval::now_secs(),
            decided_at: None,
        }
    }

    /// Settles `r` with what the call used (priced here: a model without a price counts 0
    /// dollars).
    pub fn settle(
        &self,
        r: Reservation,
        provider: &str,
        model: &str,
        usage: &strata_engine::llm::Usage,
    ) {
        let cost = self.pricing.cost(provider, model, usage);
        r.settle(cost, usage.input_tokens + usage.output_tokens);
    }

    /// Each budget's figures now: (scope key, limit name, limit, spent or reserved).
    pub fn snapshot(&self) -> Vec<(String, &'static str, f64, f64)> {
        let state = self.lock();
        let mut out = Vec::new();
        let all = self
            .agents
            .iter()
            .map(|(id, b)| (ScopeKind::Agent, id.clone(), *b))
            .chain(
                self.person_budgets
                    .iter()
                    .map(|(id, b)| (ScopeKind::Sender, id.clone(), *b)),
            )
            .chain(
                self.schedules
                    .values()
                    .map(|(n, b)| (ScopeKind::Schedule, n.clone(), *b)),
            );
        for (kind, name, budget) in all {
            let s = Scope { kind, name, budget };
            for w in Window::ALL {
                if let Some(limit) = w.limit(&budget) {
                    let (used, extra) = state
                        .get(&s.key())
                        .map_or((0.0, 0.0), |l| (l.used(w), l.extra[w.index()]));
                    out.push((s.key(), w.rule(), limit + extra, used));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
        out
    }
}

/// A call's reservation: settled with the real usage, or released when dropped (the call
/// failed or the turn was cancelled).
pub struct Reservation {
    inner: Arc<Inner>,
    keys: Vec<String>,
    usd: f64,
    tokens: f64,
    tz: TimeZone,
    clock: Clock,
    settled: bool,
}

impl Reservation {
    /// Replaces the reservation with what the call cost (`None`: unknown, counted as 0
    /// dollars) and the tokens it used.
    pub fn settle(mut self, cost_usd: Option<f64>, tokens: u64) {
        self.apply(cost_usd.unwrap_or(0.0), tokens as f64);
        self.settled = true;
    }

    fn apply(&self, usd: f64, tokens: f64) {
        let day = jiff::Timestamp::from_millisecond((self.clock)())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
            .to_zoned(self.tz.clone())
            .date();
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        for k in &self.keys {
            if let Some(l) = state.get_mut(k) {
                l.reserved_usd = (l.reserved_usd - self.usd).max(0.0);
                l.reserved_tokens = (l.reserved_tokens - self.tokens).max(0.0);
                l.roll(day);
                l.spent[Window::DailyUsd.index()] += usd;
                l.spent[Window::MonthlyUsd.index()] += usd;
                l.spent[Window::DailyTokens.index()] += tokens;
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            self.apply(0.0, 0.0);
        }
    }
}
