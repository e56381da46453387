//! The agent loop: turns through the AgentManager against in-process providers.
//!
//! * engine overhead: a provider that answers instantly (one tool call, then text) — what is
//!   left of a turn's time once the provider's own time is taken out;
//! * concurrency: 1,000 sessions against a provider with 50 ms latency per call, compared
//!   with the ideal (every session's turns back to back with zero engine cost).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use strata_runtime::EnvExt;

use serde_json::json;
use strata_engine::ToolFilter;
use strata_engine::agent::Message;
use strata_engine::audit::AuditSink;
use strata_engine::config::JournalConfig;
use strata_engine::config::{Config, SessionsConfig};
use strata_engine::llm::*;
use strata_engine::session::{InMemoryStore, SessionStore};
use strata_engine::turns::TurnRequest;
use strata_engine::{Env, Principal, ToolError, async_trait, tool};
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::journal::{Journal, JournalStore};
use strata_runtime::manager::AgentManager;
use strata_runtime::{Invoker, Registry};
use strata_store::JsonlAudit;
use strata_store::SqliteStore;

use crate::{Report, Row, median, quantile};

/// Asks for one tool call (`bench_inc`, or with `effects` `bench_note`), then answers;
/// sleeps `latency` per call; counts its own time.
struct FakeProvider {
    latency: Duration,
    spent_ns: AtomicU64,
    effects: AtomicBool,
}

/// Returns its input plus one, as a tool with local side effects (the journal makes its
/// start durable before it runs).
#[tool(side_effects = local)]
async fn bench_note(
    /// A number.
    n: u64,
) -> Result<u64, ToolError> {
    Ok(n.wrapping_add(1))
}

#[async_trait]
impl LlmProvider for FakeProvider {
    fn name(&self) -> &str {
        "bench"
    }
    async fn complete(&self, req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let t0 = Instant::now();
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let last_is_tool = req.messages.last().is_some_and(|m| m.role == Role::Tool);
        let message = if last_is_tool {
            ChatMessage::text(Role::Assistant, "done")
        } else {
            ChatMessage {
                role: Role::Assistant,
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: if self.effects.load(Ordering::Relaxed) {
                        "bench_note".into()
                    } else {
                        "bench_inc".into()
                    },
                    arguments: json!({"n": req.messages.len()}),
                }],
                tool_call_id: None,
            }
        };
        self.spent_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(CompletionResponse {
            message,
            stop: StopReason::EndTurn,
            usage: Usage::default(),
            provider_state: None,
        })
    }
}

struct Setup {
    manager: Arc<AgentManager>,
    provider: Arc<FakeProvider>,
    _audit: Arc<JsonlAudit>,
    /// Turn ids given by the caller, numbered (`None`: the engine mints them).
    turn_ids: Option<Arc<AtomicU64>>,
}

/// Where a run keeps its sessions.
#[derive(Clone, Copy, PartialEq)]
enum Backend {
    InMemory,
    Sqlite,
    Postgres,
}

/// The store for one run (a fresh file, or a fresh schema dropped by the caller).
async fn store(
    dir: &std::path::Path,
    backend: Backend,
    tag: &str,
    schema: Option<&crate::pg::Schema>,
) -> Result<Arc<dyn SessionStore>, String> {
    Ok(match (backend, schema) {
        (Backend::InMemory, _) => Arc::new(InMemoryStore::default()),
        (Backend::Sqlite, _) => {
            Arc::new(SqliteStore::open(&dir.join(format!("{tag}.db"))).map_err(|e| e.to_string())?)
        }
        (Backend::Postgres, Some(s)) => Arc::new(strata_postgres::PgStore::new(s.db(16).await?)),
        (Backend::Postgres, None) => return Err("no PostgreSQL schema".into()),
    })
}

/// What a turn's model calls are accounted with.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Accounting {
    /// Nothing: no metrics recorder, no usage kept.
    Off,
    /// As `serve` runs: the Prometheus recorder and every call's usage priced and stored in
    /// the SQLite store beside the sessions.
    Metered,
    /// Metered, and every call reserved against a budget (one that is never reached).
    Budgeted,
}

fn setup(
    dir: &std::path::Path,
    latency: Duration,
    store: Arc<dyn SessionStore>,
    tag: &str,
) -> Result<Setup, String> {
    setup_with(dir, latency, store, None, Accounting::Off, None, tag)
}

fn setup_with(
    dir: &std::path::Path,
    latency: Duration,
    store: Arc<dyn SessionStore>,
    usage: Option<Arc<dyn strata_runtime::usage::UsageStore>>,
    accounting: Accounting,
    journal: Option<(Arc<dyn JournalStore>, JournalConfig)>,
    tag: &str,
) -> Result<Setup, String> {
    let mut config = Config {
        sessions: SessionsConfig {
            max_live: 2048,
            summarize_after: 0,
            ..SessionsConfig::default()
        },
        ..Config::default()
    };
    config.pricing.entry("bench".into()).or_default().insert(
        "m".into(),
        strata_engine::config::PriceConfig {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
            cached_input_per_mtok: None,
            cache_write_per_mtok: None,
        },
    );
    if accounting == Accounting::Budgeted {
        config.defaults.budget = Some(strata_engine::config::BudgetConfig {
            daily_usd: Some(1e12),
            ..Default::default()
        });
    }
    let env = Arc::new(Env::new(
        config.clone(),
        dir.to_path_buf(),
        dir.join("data"),
    ));
    let pricing = strata_runtime::usage::Pricing::from_config(&config);
    if accounting != Accounting::Off
        && let Some(u) = &usage
    {
        // As `serve` keeps it: written by a background task.
        env.attach_usage(Arc::new(
            strata_runtime::usage::UsageMeter::new(u.clone(), pricing.clone()).in_background(),
        ));
    }
    if let Some((j, cfg)) = journal {
        // As `serve` keeps it (journal.enabled): every turn's start, model calls, tool calls.
        env.attach_journal(Arc::new(Journal::new(j, cfg)));
    }
    let registry = Arc::new(Registry::from_inventory(&[]).map_err(|e| e.to_string())?);
    let audit = Arc::new(
        JsonlAudit::open(&dir.join(format!("audit-{tag}.jsonl"))).map_err(|e| e.to_string())?,
    );
    let invoker = Arc::new(Invoker::new(
        registry,
        env.clone(),
        audit.clone() as Arc<dyn AuditSink>,
    ));
    if let (Accounting::Budgeted, Some(u)) = (accounting, &usage)
        && let Some(b) = strata_runtime::budget::Budgets::from_config(&config, pricing, u.clone())
            .map_err(|e| e.to_string())?
    {
        invoker.attach_budgets(Arc::new(b));
    }
    let provider = Arc::new(FakeProvider {
        latency,
        spent_ns: AtomicU64::new(0),
        effects: AtomicBool::new(false),
    });
    let agent = LlmAgent::new("bench", "You benchmark.", provider.clone(), "m", invoker)
        .with_tools(ToolFilter::All);
    let manager = Arc::new(AgentManager::new(vec![Arc::new(agent)], store, env));
    Ok(Setup {
        manager,
        provider,
        _audit: audit,
        turn_ids: None,
    })
}

impl Setup {
    /// A turn of session `session`: with the caller's turn id when `turn_ids` counts them.
    fn req(&self, session: usize) -> TurnRequest {
        let mut r = req(session);
        r.turn_id = self
            .turn_ids
            .as_ref()
            .map(|n| format!("bench-{}", n.fetch_add(1, Ordering::Relaxed)));
        r
    }
}

fn req(session: usize) -> TurnRequest {
    TurnRequest {
        agent_id: "bench".into(),
        session_id: format!("s{session}"),
        stream: None,
        scopes: Vec::new(),
        channel_kind: None,
        channel_id: "bench".into(),
        sender: Principal::Operator,
        message: Message::text("go"),
        depth: 0,
        taint: None,
        turn_id: None,
    }
}

/// Sequential turns over `sessions` sessions round-robin; returns (turns/s, p50 µs, p99 µs,
/// overhead µs per turn).
async fn sequential(
    s: &Setup,
    turns: usize,
    sessions: usize,
) -> Result<(f64, f64, f64, f64), String> {
    let mut lat = Vec::with_capacity(turns);
    let before = s.provider.spent_ns.load(Ordering::Relaxed);
    let t0 = Instant::now();
    for i in 0..turns {
        let t = Instant::now();
        let r = s
            .manager
            .turn(s.req(i % sessions))
            .await
            .map_err(|e| e.to_string())?;
        if r.text != "done" {
            return Err(format!("unexpected reply {}", r.text));
        }
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let wall = t0.elapsed().as_secs_f64();
    let provider_s = (s.provider.spent_ns.load(Ordering::Relaxed) - before) as f64 / 1e9;
    lat.sort_by(f64::total_cmp);
    let overhead_us = (wall - provider_s) / turns as f64 * 1e6;
    Ok((
        turns as f64 / wall,
        quantile(&lat, 0.5),
        quantile(&lat, 0.99),
        overhead_us,
    ))
}

/// `sessions` sessions (numbered from `first`) each running `per` turns back to back, all at
/// once.
async fn concurrent(s: &Setup, first: usize, sessions: usize, per: usize) -> Result<f64, String> {
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in first..first + sessions {
        let m = s.manager.clone();
        let reqs: Vec<TurnRequest> = (0..per).map(|_| s.req(i)).collect();
        set.spawn(async move {
            for r in reqs {
                m.turn(r).await.map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    Ok((sessions * per) as f64 / t0.elapsed().as_secs_f64())
}

/// The journal's settings in variant `variant` of the journal runs.
fn journal_config(variant: usize) -> JournalConfig {
    JournalConfig {
        commit_before_reads: variant != 3,
        ..JournalConfig::default()
    }
}

/// Variant 2 of the journal runs: the caller's turn ids and a tool with effects.
fn with_variant(s: &mut Setup, variant: usize) {
    if variant == 2 {
        s.provider.effects.store(true, Ordering::Relaxed);
        s.turn_ids = Some(Arc::new(AtomicU64::new(0)));
    }
}

pub fn run(quick: bool) -> Result<Report, String> {
    run_parts(quick, false)
}

/// Only the journal's runs of [`run`] (`cargo xtask bench journal`).
pub fn run_journal(quick: bool) -> Result<Report, String> {
    run_parts(quick, true)
}

fn run_parts(quick: bool, journal_only: bool) -> Result<Report, String> {
    let runs = if quick { 3 } else { 5 };
    let turns = if quick { 2_000 } else { 10_000 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    let pg = crate::pg::url();
    let mut backends = vec![
        ("in-memory store", Backend::InMemory),
        ("SQLite store", Backend::Sqlite),
    ];
    if pg.is_some() {
        backends.push(("PostgreSQL store", Backend::Postgres));
    }
    // A fresh schema per run, dropped after it.
    let schema = |tag: &str| pg.as_deref().map(|u| crate::pg::Schema::new(u, tag));
    // 1,000 sessions, 50 ms per provider call, 2 calls per turn: ideal = 1000 / 0.1 s.
    let sessions = 1000;
    let per = if quick { 3 } else { 5 };
    let latency = Duration::from_millis(50);
    let ideal = sessions as f64 / (2.0 * latency.as_secs_f64());
    if !journal_only {
        let mut overhead_by = std::collections::BTreeMap::new();
        for (label, backend) in &backends {
            let (mut tp, mut p50, mut p99, mut over) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for run in 0..runs {
                let tag = format!("seq{run}");
                let sc = schema(&tag);
                let st = rt.block_on(store(dir.path(), *backend, &tag, sc.as_ref()))?;
                let s = setup(dir.path(), Duration::ZERO, st, &tag)?;
                rt.block_on(sequential(&s, 200, 20))?; // warm-up
                let (t, a, b, o) = rt.block_on(sequential(&s, turns, 100))?;
                drop(s);
                if let Some(sc) = &sc {
                    rt.block_on(sc.drop_now());
                }
                tp.push(t);
                p50.push(a);
                p99.push(b);
                over.push(o);
            }
            let overhead = median(&mut over);
            overhead_by.insert(*label, overhead);
            let mut extra = std::collections::BTreeMap::new();
            extra.insert("engine_overhead_us_per_turn_median".into(), overhead);
            if let (Backend::Postgres, Some(sqlite)) = (backend, overhead_by.get("SQLite store")) {
                extra.insert(
                    "overhead_ratio_postgres_to_sqlite".into(),
                    overhead / sqlite,
                );
            }
            rows.push(Row {
                name: format!("instant provider, {label}"),
                throughput_per_s: median(&mut tp),
                p50_us: median(&mut p50),
                p99_us: median(&mut p99),
                extra,
            });
        }
        let mut ratio_by = std::collections::BTreeMap::new();
        for (label, backend) in &backends {
            let mut tp = Vec::new();
            for run in 0..runs.min(3) {
                let tag = format!("conc{run}");
                let sc = schema(&tag);
                let st = rt.block_on(store(dir.path(), *backend, &tag, sc.as_ref()))?;
                let s = setup(dir.path(), latency, st, &tag)?;
                // A running server's state: connections open, statements prepared, caches warm
                // (other sessions than the measured ones, so those start new as before).
                rt.block_on(concurrent(&s, 1_000_000, 64, 2))?;
                tp.push(rt.block_on(concurrent(&s, 0, sessions, per))?);
                drop(s);
                if let Some(sc) = &sc {
                    rt.block_on(sc.drop_now());
                }
            }
            let m = median(&mut tp);
            ratio_by.insert(*label, m / ideal);
            let mut extra = std::collections::BTreeMap::new();
            extra.insert("ideal_turns_per_s".into(), ideal);
            extra.insert("ratio_to_ideal".into(), m / ideal);
            if let (Backend::Postgres, Some(sqlite)) = (backend, ratio_by.get("SQLite store")) {
                extra.insert(
                    "throughput_ratio_postgres_to_sqlite".into(),
                    (m / ideal) / sqlite,
                );
            }
            rows.push(Row {
                name: format!("1000 sessions × 50 ms, {label}"),
                throughput_per_s: m,
                extra,
                ..Row::default()
            });
        }
        // Accounting off, metered (metrics + usage stored) and budgeted, on the SQLite store,
        // alternating within each run.
        let variants = [Accounting::Off, Accounting::Metered, Accounting::Budgeted];
        // The usage writer is a task of the runtime, as in `serve`.
        let _in_runtime = rt.enter();
        /// Per run: turns/s, p50 µs, p99 µs, overhead µs per turn; turns/s of 1,000 sessions
        /// against a 50 ms provider.
        type Figures = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);
        let mut figures: Vec<Figures> = variants.iter().map(|_| Default::default()).collect();
        for run in 0..runs {
            let mut order: Vec<usize> = (0..variants.len()).collect();
            order.rotate_left(run % variants.len());
            for i in order {
                let a = variants[i];
                crate::meters::set(a != Accounting::Off);
                let tag = format!("acct{run}-{i}");
                let sqlite = Arc::new(
                    SqliteStore::open(&dir.path().join(format!("{tag}.db")))
                        .map_err(|e| e.to_string())?,
                );
                let s = setup_with(
                    dir.path(),
                    Duration::ZERO,
                    sqlite.clone(),
                    Some(sqlite),
                    a,
                    None,
                    &tag,
                )?;
                rt.block_on(sequential(&s, 200, 20))?;
                let (t, p50, p99, o) = rt.block_on(sequential(&s, turns, 100))?;
                drop(s);
                // The same accounting under the concurrent load of real model latency.
                let sqlite = Arc::new(
                    SqliteStore::open(&dir.path().join(format!("{tag}-conc.db")))
                        .map_err(|e| e.to_string())?,
                );
                let s = setup_with(
                    dir.path(),
                    latency,
                    sqlite.clone(),
                    Some(sqlite),
                    a,
                    None,
                    &format!("{tag}-conc"),
                )?;
                rt.block_on(concurrent(&s, 1_000_000, 64, 2))?;
                let c = rt.block_on(concurrent(&s, 0, sessions, per))?;
                let f = &mut figures[i];
                f.0.push(t);
                f.1.push(p50);
                f.2.push(p99);
                f.3.push(o);
                f.4.push(c);
            }
        }
        crate::meters::set(false);
        let off_tp = median(&mut figures[0].0.clone());
        let off_conc = median(&mut figures[0].4.clone());
        for (a, f) in variants.iter().zip(figures.iter_mut()) {
            let tp = median(&mut f.0);
            let conc = median(&mut f.4);
            let mut extra = std::collections::BTreeMap::new();
            extra.insert(
                "engine_overhead_us_per_turn_median".into(),
                median(&mut f.3),
            );
            extra.insert("1000_sessions_x_50ms_turns_per_s".into(), conc);
            if *a != Accounting::Off {
                extra.insert(
                    "overhead_pct_of_throughput_vs_off".into(),
                    (off_tp / tp - 1.0) * 100.0,
                );
                extra.insert(
                    "1000_sessions_x_50ms_overhead_pct_vs_off".into(),
                    (off_conc / conc - 1.0) * 100.0,
                );
            }
            rows.push(Row {
                name: format!(
                    "instant provider, SQLite store, accounting {}",
                    match a {
                        Accounting::Off => "off",
                        Accounting::Metered => "metered",
                        Accounting::Budgeted => "budgeted",
                    }
                ),
                throughput_per_s: tp,
                p50_us: median(&mut f.1),
                p99_us: median(&mut f.2),
                extra,
            });
        }
    }
    // The turn journal off and on, on SQLite (and PostgreSQL when one answers), alternating
    // within each run: the time it adds to a turn with one tool call, and the 1,000-session
    // run against a 50 ms provider.
    let mut journal_backends = vec![("SQLite store", Backend::Sqlite)];
    if pg.is_some() {
        journal_backends.push(("PostgreSQL store", Backend::Postgres));
    }
    for (label, backend) in &journal_backends {
        // Per variant (off, on), per run: overhead µs per turn, turns/s, 1,000 × 50 ms
        // turns/s, p50 µs.
        // Variants: 0 off; 1 on (the tool reads, the engine mints the turn id: one commit
        // waited for, before the tool runs); 2 on, the caller's turn id and a tool with
        // effects (the start and the call's start: two commits waited for); 3 on with
        // `journal.commit_before_reads: false` (the read waits for nothing).
        type Samples = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);
        let mut f: [Samples; 4] = Default::default();
        for run in 0..runs {
            let order = if run % 2 == 0 {
                [0, 1, 2, 3]
            } else {
                [3, 2, 1, 0]
            };
            for variant in order {
                let on = usize::from(variant > 0);
                let tag = format!("journal{run}_{variant}");
                let open = |tag: String| {
                    let sc = schema(&tag);
                    let dir = dir.path().to_path_buf();
                    let st = rt.block_on(async {
                        Ok::<_, String>(match (backend, &sc) {
                            (Backend::Postgres, Some(s)) => {
                                Arc::new(strata_postgres::PgStore::new(s.db(16).await?))
                                    as Arc<dyn strata_runtime::store::StateStore>
                            }
                            _ => Arc::new(
                                SqliteStore::open(&dir.join(format!("{tag}.db")))
                                    .map_err(|e| e.to_string())?,
                            ),
                        })
                    })?;
                    Ok::<_, String>((st, sc))
                };
                let (st, sc) = open(tag.clone())?;
                let journal = (on == 1)
                    .then(|| (st.clone() as Arc<dyn JournalStore>, journal_config(variant)));
                let mut s = setup_with(
                    dir.path(),
                    Duration::ZERO,
                    st,
                    None,
                    Accounting::Off,
                    journal,
                    &tag,
                )?;
                with_variant(&mut s, variant);
                rt.block_on(sequential(&s, 200, 20))?;
                let (t, p50, _, o) = rt.block_on(sequential(&s, turns, 100))?;
                drop(s);
                if let Some(sc) = &sc {
                    rt.block_on(sc.drop_now());
                }
                let (st, sc) = open(format!("{tag}_conc"))?;
                let journal = (on == 1)
                    .then(|| (st.clone() as Arc<dyn JournalStore>, journal_config(variant)));
                let mut s = setup_with(
                    dir.path(),
                    latency,
                    st,
                    None,
                    Accounting::Off,
                    journal,
                    &format!("{tag}-conc"),
                )?;
                with_variant(&mut s, variant);
                rt.block_on(concurrent(&s, 1_000_000, 64, 2))?;
                let c = rt.block_on(concurrent(&s, 0, sessions, per))?;
                drop(s);
                if let Some(sc) = &sc {
                    rt.block_on(sc.drop_now());
                }
                f[variant].0.push(o);
                f[variant].1.push(t);
                f[variant].2.push(c);
                f[variant].3.push(p50);
            }
        }
        let off_over = median(&mut f[0].0.clone());
        for (variant, v) in f.iter_mut().enumerate() {
            let over = median(&mut v.0);
            let conc = median(&mut v.2);
            let mut extra = std::collections::BTreeMap::new();
            extra.insert("engine_overhead_us_per_turn_median".into(), over);
            extra.insert("1000_sessions_x_50ms_turns_per_s".into(), conc);
            extra.insert("1000_sessions_x_50ms_ratio_to_ideal".into(), conc / ideal);
            if variant > 0 {
                extra.insert("journal_added_us_per_turn".into(), over - off_over);
                extra.insert(
                    "journal_added_pct_of_engine_time".into(),
                    (over / off_over - 1.0) * 100.0,
                );
            }
            rows.push(Row {
                name: format!(
                    "instant provider, {label}, journal {}",
                    [
                        "off",
                        "on",
                        "on, caller's turn id, a tool with effects",
                        "on, commit_before_reads: false"
                    ][variant]
                ),
                throughput_per_s: median(&mut v.1),
                p50_us: median(&mut v.3),
                extra,
                ..Row::default()
            });
        }
    }
    Ok(Report {
        bench: if journal_only { "journal" } else { "agent" },
        runs,
        calls_per_run: turns,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        rows,
    })
}
