//! Budgets against a fake OpenAI server: the real provider, agent loop and budget gate. Every
//! call is priced so that one completion of `MAX` tokens costs exactly `CALL` dollars (input
//! is free, so the prompt estimate does not move the figures).

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_runtime::EnvExt;

use serde_json::json;
use strata_engine::access::AccessPolicy;
use strata_engine::agent::{Agent, AgentError, Message, TurnContext};
use strata_engine::audit::{Alert, AlertSink, NoAudit};
use strata_engine::config::Access;
use strata_engine::config::{
    BudgetAction, BudgetConfig, Config, LlmConfig, Person, PriceConfig, ScheduleConfig,
};
use strata_engine::llm::Usage;
use strata_engine::{Env, Principal};
use strata_llm::AgentContext;
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::approval::{ApprovalStatus, ApprovalStore, Approvals, MemoryApprovalStore};
use strata_runtime::budget::Budgets;
use strata_runtime::usage::{InMemoryUsage, ModelCall, Pricing, UsageMeter};
use strata_runtime::{Invoker, Registry};
use strata_test_support::{FakeResponse, FakeServer};

/// Completion tokens per call.
const MAX: u32 = 100;
/// What one call costs: `MAX` tokens at $1,000 per million.
const CALL: f64 = 0.1;

fn answer() -> FakeResponse {
    answer_with(1234)
}

fn answer_with(prompt_tokens: u64) -> FakeResponse {
    FakeResponse::ok(json!({
        "id": "c", "object": "chat.completion", "model": "budget-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Done."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": MAX}
    }))
}

fn config(tz: &str) -> Config {
    let mut c = Config::default();
    c.defaults.timezone = Some(tz.into());
    c.pricing.entry("openai".into()).or_default().insert(
        "budget-model".into(),
        PriceConfig {
            input_per_mtok: 0.0,
            output_per_mtok: 1000.0,
            cached_input_per_mtok: None,
            cache_write_per_mtok: None,
        },
    );
    c
}

fn usd(daily: f64, action: BudgetAction) -> BudgetConfig {
    BudgetConfig {
        daily_usd: Some(daily),
        action,
        ..BudgetConfig::default()
    }
}

#[derive(Default)]
struct Alerts(Mutex<Vec<Alert>>);

impl AlertSink for Alerts {
    fn alert(&self, a: &Alert) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(a.clone());
    }
}

impl Alerts {
    fn rules(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|a| format!("{}:{}", a.kind, a.rule))
            .collect()
    }
}

struct World {
    fake: FakeServer,
    agent: Arc<LlmAgent>,
    env: Arc<Env>,
    usage: Arc<InMemoryUsage>,
    alerts: Arc<Alerts>,
    approvals: Arc<Approvals>,
    approval_store: Arc<MemoryApprovalStore>,
    now_ms: Arc<AtomicI64>,
}

/// The agent `main` under `config`'s budgets, with `usage` already holding `before`, the
/// clock at `now_ms`.
async fn world(config: Config, before: Vec<ModelCall>, now_ms: i64) -> World {
    let fake = FakeServer::start().await.expect("fake");
    let d = std::env::temp_dir();
    let env = Arc::new(Env::new(config.clone(), d.clone(), d));
    let usage = Arc::new(InMemoryUsage::default());
    use strata_runtime::usage::UsageStore;
    usage.record_calls(&before).await.expect("seed");
    let pricing = Pricing::from_config(&config);
    env.attach_usage(Arc::new(UsageMeter::new(usage.clone(), pricing.clone())));
    let clock = Arc::new(AtomicI64::new(now_ms));
    let c = clock.clone();
    let budgets = Budgets::from_config(&config, pricing, usage.clone())
        .expect("valid budgets")
        .expect("budgets set")
        .with_clock(Arc::new(move || c.load(Ordering::SeqCst)));
    let approval_store = Arc::new(MemoryApprovalStore::default());
    let approvals = Arc::new(
        Approvals::new(
            approval_store.clone(),
            Arc::new(AccessPolicy::from_config(&config)),
        )
        .with_timeout(Duration::from_secs(10)),
    );
    let alerts = Arc::new(Alerts::default());
    let invoker = Invoker::new(Arc::new(Registry::empty()), env.clone(), Arc::new(NoAudit))
        .with_approvals(approvals.clone())
        .with_alert_sink(alerts.clone());
    let invoker = Arc::new(invoker);
    invoker.attach_budgets(Arc::new(budgets));
    let mut llm = LlmConfig::new("openai");
    llm.base_url = Some(fake.url.clone());
    llm.api_key = Some("test-key".into());
    llm.model = Some("budget-model".into());
    let provider = strata_llm::build(&llm, None, "defaults.llm", &AgentContext::bare("main"))
        .expect("provider");
    let agent = Arc::new(
        LlmAgent::new("main", "Be brief.", provider, "budget-model", invoker)
            .with_sampling(Some(MAX), None),
    );
    World {
        fake,
        agent,
        env,
        usage,
        alerts,
        approvals,
        approval_store,
        now_ms: clock,
    }
}

impl World {
    async fn turn_as(&self, sender: Principal, session: &str) -> Result<String, AgentError> {
        let turn = TurnContext::new("main", session, "c", sender, self.env.clone());
        self.agent
            .handle(turn, Message::text("go"))
            .await
            .map(|r| r.text)
    }

    async fn turn(&self) -> Result<String, AgentError> {
        self.turn_as(Principal::Operator, "s").await
    }

    fn calls_made(&self) -> usize {
        self.fake.requests().len()
    }
}

fn ms(rfc3339: &str) -> i64 {
    strata_runtime::usage::parse_since(rfc3339, 0).expect("time")
}

/// `block`: the second turn of the day is refused before its model call, with a sentence
/// for the sender; the alert goes out once; the budget renews at midnight of
/// `defaults.timezone` — here an hour after 23:30 in Stockholm, when it is still the same
/// day in UTC.
#[tokio::test]
async fn a_budget_blocks_the_second_turn_and_renews_at_the_next_local_day() {
    let mut c = config("Europe/Stockholm");
    c.agents.entry("main".into()).or_default().budget = Some(usd(1.5 * CALL, BudgetAction::Block));
    let w = world(c, vec![], ms("2026-12-04T22:30:00Z")).await;
    w.fake.script([answer(), answer()]);
    assert_eq!(w.turn().await.expect("first turn"), "Done.");
    let err = w.turn().await.expect_err("second turn blocked");
    let AgentError::Budget(text) = &err else {
        panic!("not a budget stop: {err:?}");
    };
    assert!(
        text.contains("daily budget of agent `main`")
            && text.contains("$0.15")
            && text.contains("2026-12-05 at 00:00 (Europe/Stockholm)"),
        "{text}"
    );
    assert_eq!(w.calls_made(), 1, "the blocked call was never sent");
    // Blocked again the same day: still one alert.
    assert!(w.turn().await.is_err());
    assert_eq!(w.alerts.rules(), ["budget:agent_daily_usd"]);
    // 23:30 UTC is 00:30 on the 5th in Stockholm: a new day there.
    w.now_ms.store(ms("2026-12-04T23:30:00Z"), Ordering::SeqCst);
    assert_eq!(w.turn().await.expect("renewed"), "Done.");
    assert_eq!(w.calls_made(), 2);
    // The agent asked for at most MAX tokens: the bound of each reservation.
    assert_eq!(w.fake.requests()[0].body["max_tokens"], json!(MAX));
}

/// 100 turns at once against a budget worth ten calls: only calls whose reservation fits are
/// made, so no more than ten (the issue allows one more).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_concurrent_turns_make_no_more_calls_than_the_budget_pays_for() {
    let mut c = config("UTC");
    c.defaults.budget = Some(usd(10.0 * CALL, BudgetAction::Block));
    let w = Arc::new(world(c, vec![], ms("2026-12-04T12:00:00Z")).await);
    w.fake.script((0..100).map(|_| answer()));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let w = w.clone();
        set.spawn(async move { w.turn().await });
    }
    let (mut answered, mut blocked) = (0, 0);
    while let Some(r) = set.join_next().await {
        match r.expect("task") {
            Ok(_) => answered += 1,
            Err(AgentError::Budget(_)) => blocked += 1,
            Err(e) => panic!("unexpected failure: {e}"),
        }
    }
    let made = w.calls_made();
    assert!(made <= 11, "{made} calls made against a budget worth 10");
    assert_eq!(answered, made, "every call made answered its turn");
    assert_eq!(answered + blocked, 100);
    assert_eq!(made, 10, "the budget pays for exactly ten");
    let spent: f64 = w.usage.calls().iter().filter_map(|c| c.cost_usd).sum();
    assert!(spent <= 10.0 * CALL + 1e-9, "spent {spent}");
}

/// `ask`: the turn that meets the budget waits for an approver. Approved, the budget grows by
/// its own size and the call is made; declined, the turn stops and the budget is not asked
/// about again until it renews.
#[tokio::test]
async fn ask_extends_the_budget_when_approved_and_stops_when_declined() {
    let mut c = config("UTC");
    c.agents.entry("main".into()).or_default().budget = Some(usd(CALL, BudgetAction::Ask));
    let w = Arc::new(world(c, vec![], ms("2026-12-04T12:00:00Z")).await);
    w.fake.script([answer(), answer(), answer()]);
    assert_eq!(w.turn().await.expect("within budget"), "Done.");
    // An approver who approves the first request and declines the second.
    let decisions = Arc::new(AtomicUsize::new(0));
    let (w2, d2) = (w.clone(), decisions.clone());
    let approver = tokio::spawn(async move {
        loop {
            let pending = w2
                .approval_store
                .list(Some(ApprovalStatus::Pending), 10)
                .await
                .expect("list");
            for r in pending {
                assert_eq!(r.tool, "budget");
                assert!(
                    r.description.contains("extend it by $0.10"),
                    "{}",
                    r.description
                );
                let approve = d2.fetch_add(1, Ordering::SeqCst) == 0;
                w2.approvals
                    .decide(&r.id, approve, &Principal::Operator, Some("test"))
                    .await
                    .expect("decide");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert_eq!(w.turn().await.expect("approved: extended"), "Done.");
    assert_eq!(w.calls_made(), 2);
    let err = w.turn().await.expect_err("declined");
    assert!(
        matches!(&err, AgentError::Budget(t) if t.contains("declined")),
        "{err:?}"
    );
    let err = w.turn().await.expect_err("still declined");
    assert!(matches!(&err, AgentError::Budget(_)), "{err:?}");
    approver.abort();
    assert_eq!(
        decisions.load(Ordering::SeqCst),
        2,
        "asked twice, not three times"
    );
    assert_eq!(w.calls_made(), 2);
}

/// `warn`: the call is made past the budget, and the alert goes out once.
#[tokio::test]
async fn warn_lets_the_call_through_and_alerts_once() {
    let mut c = config("UTC");
    c.agents.entry("main".into()).or_default().budget = Some(usd(CALL, BudgetAction::Warn));
    let w = world(c, vec![], ms("2026-12-04T12:00:00Z")).await;
    w.fake.script([answer(), answer(), answer()]);
    for _ in 0..3 {
        assert_eq!(w.turn().await.expect("warned, not blocked"), "Done.");
    }
    assert_eq!(w.calls_made(), 3);
    assert_eq!(w.alerts.rules(), ["budget:agent_daily_usd"]);
}

/// What a person spent before a restart counts: the sender's budget (a `team.json` person,
/// who writes from a Discord account listed in their contacts) starts from the store's
/// figures of the day, across agents; another sender is not held by it.
#[tokio::test]
async fn a_person_budget_counts_what_the_store_has_from_before_a_restart() {
    let mut c = config("UTC");
    c.team.people.push(Person {
        id: "ann".into(),
        name: "Ann Example".into(),
        access: Access::Staff,
        contacts: [("discord".to_owned(), "1001".to_owned())].into(),
        budget: Some(usd(1.5 * CALL, BudgetAction::Block)),
        role: None,
        timezone: None,
    });
    let earlier = ModelCall {
        ts_ms: ms("2026-12-04T08:00:00Z"),
        agent: "other-agent".into(),
        session: "x".into(),
        sender: "person:1001".into(),
        turn_id: "t0".into(),
        provider: "openai".into(),
        model: "budget-model".into(),
        purpose: "turn".into(),
        usage: Usage {
            output_tokens: u64::from(MAX),
            ..Usage::default()
        },
        cost_usd: Some(CALL),
        input_parts: Default::default(),
    };
    // Yesterday's spend does not count today.
    let mut yesterday = earlier.clone();
    yesterday.ts_ms = ms("2026-12-03T08:00:00Z");
    let w = world(c, vec![earlier, yesterday], ms("2026-12-04T12:00:00Z")).await;
    w.fake.script([answer(), answer()]);
    let err = w
        .turn_as(Principal::Person { id: "ann".into() }, "s")
        .await
        .expect_err("ann's budget is spent");
    assert!(
        matches!(&err, AgentError::Budget(t) if t.contains("sender `ann`")),
        "{err:?}"
    );
    assert_eq!(
        w.turn_as(Principal::Person { id: "bo".into() }, "s")
            .await
            .expect("bo has no budget"),
        "Done."
    );
    assert_eq!(w.calls_made(), 1);
}

/// A schedule's budget covers the model calls in its session, and tokens are a limit too.
#[tokio::test]
async fn a_schedule_token_budget_covers_its_session() {
    let mut c = config("UTC");
    c.schedules.insert(
        "digest".into(),
        ScheduleConfig {
            every: Some("1h".into()),
            prompt: Some("digest".into()),
            budget: Some(BudgetConfig {
                daily_tokens: Some(10_000),
                ..BudgetConfig::default()
            }),
            ..ScheduleConfig::default()
        },
    );
    let w = world(c, vec![], ms("2026-12-04T12:00:00Z")).await;
    // 20 prompt tokens (fewer than the estimate of three bytes a token) and 100 completion
    // tokens a call: turns until one's reservation no longer fits.
    w.fake.script((0..200).map(|_| answer_with(20)));
    let mut made = 0;
    let stop = loop {
        match w.turn_as(Principal::Operator, "schedule-digest").await {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made < 200, "the token budget never stopped the schedule");
    };
    assert!(
        matches!(&stop, AgentError::Budget(t) if t.contains("daily token budget of schedule `digest`")),
        "{stop:?}"
    );
    let tokens: u64 = w
        .usage
        .calls()
        .iter()
        .map(|c| c.usage.input_tokens + c.usage.output_tokens)
        .sum();
    assert!(tokens <= 10_000, "{tokens} tokens: over the budget");
    // Stopped only when the next call's worst case (well under 500 tokens) did not fit.
    assert!(tokens > 9_500, "{tokens} tokens: stopped too early");
    assert_eq!(tokens, made * 120);
    // Another session is not the schedule's.
    assert_eq!(
        w.turn_as(Principal::Operator, "s")
            .await
            .expect("not the schedule's"),
        "Done."
    );
}

/// Bad budgets are config errors naming the key.
#[test]
fn a_budget_without_a_limit_or_with_a_negative_one_names_its_key() {
    let mut c = config("UTC");
    c.agents.entry("main".into()).or_default().budget = Some(BudgetConfig::default());
    let e = Budgets::from_config(&c, Pricing::default(), Arc::new(InMemoryUsage::default()))
        .expect_err("no limit");
    assert!(
        e.to_string().contains("`agents.main.budget` sets no limit"),
        "{e}"
    );
    c.agents.entry("main".into()).or_default().budget = Some(usd(-1.0, BudgetAction::Block));
    let e = Budgets::from_config(&c, Pricing::default(), Arc::new(InMemoryUsage::default()))
        .expect_err("negative");
    assert!(
        e.to_string()
            .contains("`agents.main.budget.daily_usd` is -1"),
        "{e}"
    );
    let none = Budgets::from_config(
        &Config::default(),
        Pricing::default(),
        Arc::new(InMemoryUsage::default()),
    )
    .expect("valid");
    assert!(none.is_none(), "no budget, no gate");
}
