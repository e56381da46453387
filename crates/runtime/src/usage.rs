//! Token usage and cost: every model call's [`Usage`] as its vendor reported it, priced by
//! `pricing.<provider>.<model>` over shipped defaults, and kept per call (agent, session,
//! sender, turn) in the store, where `strata usage` and `GET /api/usage` sum it.
//!
//! A model without a price has its tokens counted and its cost left unknown — never
//! invented. A cost the vendor reports (the Claude Code CLI's `total_cost_usd`) wins over a
//! computed one.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use strata_engine::config::{Config, PriceConfig};
use strata_engine::llm::Usage;
use strata_engine::session::StoreError;

/// When the shipped prices were read from the vendors' published price lists. They change:
/// `pricing.<provider>.<model>` in config overrides any of them.
pub const DEFAULT_PRICES_TAKEN: &str = "2025-08";

/// `(vendor, model, input, output, cached input, cache write)` in US dollars per million
/// tokens, as of [`DEFAULT_PRICES_TAKEN`]. A model name matches an entry equal to it or
/// starting with it and a `-` (dated snapshots); the longest entry wins.
pub const DEFAULT_PRICES: &[(&str, &str, f64, f64, f64, f64)] = &[
    ("openai", "gpt-5", 1.25, 10.0, 0.125, 1.25),
    ("openai", "gpt-5-mini", 0.25, 2.0, 0.025, 0.25),
    ("openai", "gpt-5-nano", 0.05, 0.40, 0.005, 0.05),
    ("openai", "gpt-4.1", 2.0, 8.0, 0.50, 2.0),
    ("openai", "gpt-4.1-mini", 0.40, 1.60, 0.10, 0.40),
    ("openai", "gpt-4.1-nano", 0.10, 0.40, 0.025, 0.10),
    ("openai", "gpt-4o", 2.50, 10.0, 1.25, 2.50),
    ("openai", "gpt-4o-mini", 0.15, 0.60, 0.075, 0.15),
    ("openai", "o3", 2.0, 8.0, 0.50, 2.0),
    ("openai", "o3-mini", 1.10, 4.40, 0.55, 1.10),
    ("openai", "o4-mini", 1.10, 4.40, 0.275, 1.10),
    ("anthropic", "claude-opus-4", 15.0, 75.0, 1.50, 18.75),
    ("anthropic", "claude-sonnet-4", 3.0, 15.0, 0.30, 3.75),
    ("anthropic", "claude-3-7-sonnet", 3.0, 15.0, 0.30, 3.75),
    ("anthropic", "claude-haiku-4-5", 1.0, 5.0, 0.10, 1.25),
    ("anthropic", "claude-3-5-haiku", 0.80, 4.0, 0.08, 1.0),
    ("gemini", "gemini-2.5-pro", 1.25, 10.0, 0.31, 1.25),
    ("gemini", "gemini-2.5-flash", 0.30, 2.50, 0.075, 0.30),
    ("gemini", "gemini-2.5-flash-lite", 0.10, 0.40, 0.025, 0.10),
    ("gemini", "gemini-2.0-flash", 0.10, 0.40, 0.025, 0.10),
];

/// The vendor whose price list a provider's models are on (`vertex` serves Gemini's,
/// `claude-code` Anthropic's).
pub fn vendor(provider: &str) -> &str {
    match provider {
        "vertex" => "gemini",
        "claude-code" => "anthropic",
        p => p,
    }
}

/// Prices: config over the shipped defaults.
#[derive(Debug, Clone, Default)]
pub struct Pricing {
    table: BTreeMap<String, BTreeMap<String, PriceConfig>>,
}

impl Pricing {
    /// The defaults with `config.pricing` over them.
    pub fn from_config(config: &Config) -> Pricing {
        let mut table: BTreeMap<String, BTreeMap<String, PriceConfig>> = BTreeMap::new();
        for (v, m, i, o, c, w) in DEFAULT_PRICES {
            table.entry((*v).to_owned()).or_default().insert(
                (*m).to_owned(),
                PriceConfig {
                    input_per_mtok: *i,
                    output_per_mtok: *o,
                    cached_input_per_mtok: Some(*c),
                    cache_write_per_mtok: Some(*w),
                },
            );
        }
        for (p, models) in &config.pricing {
            for (m, price) in models {
                table
                    .entry(p.clone())
                    .or_default()
                    .insert(m.clone(), *price);
            }
        }
        Pricing { table }
    }

    /// The price of `model` on `provider`: under the provider's own name first (config may
    /// price an OpenAI-compatible server), then its vendor's.
    pub fn price(&self, provider: &str, model: &str) -> Option<&PriceConfig> {
        [provider, vendor(provider)].into_iter().find_map(|p| {
            let models = self.table.get(p)?;
            models
                .iter()
                .filter(|(name, _)| {
                    model == name.as_str()
                        || model
                            .strip_prefix(name.as_str())
                            .is_some_and(|rest| rest.starts_with('-'))
                })
                .max_by_key(|(name, _)| name.len())
                .map(|(_, p)| p)
        })
    }

    /// What `usage` cost: the vendor's figure where it gave one, else from the price; `None`
    /// when neither is known.
    pub fn cost(&self, provider: &str, model: &str, usage: &Usage) -> Option<f64> {
        if let Some(c) = usage.cost_usd {
            return Some(c);
        }
        let p = self.price(provider, model)?;
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let written = usage.cache_write_tokens.min(usage.input_tokens - cached);
        let plain = usage.input_tokens - cached - written;
        let per = |n: u64, rate: f64| n as f64 * rate / 1_000_000.0;
        Some(
            per(plain, p.input_per_mtok)
                + per(cached, p.cached_input_per_mtok.unwrap_or(p.input_per_mtok))
                + per(written, p.cache_write_per_mtok.unwrap_or(p.input_per_mtok))
                + per(usage.output_tokens, p.output_per_mtok),
        )
    }
}

/// Where a call's prompt tokens went: the vendor's `input_tokens` shared out by the bytes
/// of each part of the request (the vendor counts the whole, not the parts). All zero when
/// unknown (a call recorded without them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InputParts {
    /// The agent's identity and the `[CONTEXT]` block.
    pub system: u64,
    /// The tool schemas the model is shown.
    pub tools: u64,
    /// The memory block.
    pub memory: u64,
    /// Earlier messages, the session's summary and the new message.
    pub history: u64,
    /// Tool results in the conversation.
    pub tool_outputs: u64,
}

impl InputParts {
    /// `input_tokens` shared out in proportion to `bytes` (largest remainders, so the parts
    /// add up to the whole).
    pub fn apportion(input_tokens: u64, bytes: InputParts) -> InputParts {
        let b = bytes.as_array();
        let total: u64 = b.iter().sum();
        if total == 0 {
            return InputParts::default();
        }
        let mut out = [0u64; 5];
        let mut rest: Vec<(u64, usize)> = Vec::with_capacity(5);
        for (i, n) in b.iter().enumerate() {
            let exact = u128::from(input_tokens) * u128::from(*n);
            out[i] = (exact / u128::from(total)) as u64;
            rest.push(((exact % u128::from(total)) as u64, i));
        }
        let left = input_tokens - out.iter().sum::<u64>();
        rest.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, i) in rest.into_iter().take(left as usize) {
            out[i] += 1;
        }
        InputParts::from_array(out)
    }

    /// `[system, tools, memory, history, tool_outputs]`.
    pub fn as_array(&self) -> [u64; 5] {
        [
            self.system,
            self.tools,
            self.memory,
            self.history,
            self.tool_outputs,
        ]
    }

    /// From `[system, tools, memory, history, tool_outputs]`.
    pub fn from_array(a: [u64; 5]) -> InputParts {
        InputParts {
            system: a[0],
            tools: a[1],
            memory: a[2],
            history: a[3],
            tool_outputs: a[4],
        }
    }

    /// Adds `other` part by part.
    pub fn add(&mut self, other: &InputParts) {
        let (a, b) = (self.as_array(), other.as_array());
        *self = InputParts::from_array(std::array::from_fn(|i| a[i] + b[i]));
    }
}

/// One model call, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// When it ended (ms since the epoch).
    pub ts_ms: i64,
    /// The agent.
    pub agent: String,
    /// Its session.
    pub session: String,
    /// Who the turn was for (`Principal`'s display form).
    pub sender: String,
    /// The turn.
    pub turn_id: String,
    /// The provider as configured (`openai`, `anthropic`, `claude-code`…).
    pub provider: String,
    /// The model asked.
    pub model: String,
    /// `turn` (the model ↔ tool loop) or `summary` (compacting a session).
    pub purpose: String,
    /// Tokens as the vendor reported them.
    pub usage: Usage,
    /// US dollars, or `None` when unknown.
    pub cost_usd: Option<f64>,
    /// Where its prompt tokens went.
    #[serde(default)]
    pub input_parts: InputParts,
}

/// A usage question that does not read; the message names the text and what would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageInputError {
    /// A `since` that is not a span, a date or a time.
    #[error("`{0}` is not a time (like 7d, 24h, 1h30m, 2026-12-01 or 2026-12-01T09:00:00Z)")]
    Since(String),
    /// A `by` that is not a grouping.
    #[error("`{0}` is not a grouping (agent, model, sender, day, turn, session)")]
    Grouping(String),
}

/// A starting time as people write it: a span back from `now_ms` made of one to four
/// `<count><unit>` parts (`7d`, `24h`, `1h30m`; units s, m, h, d, w; counts up to six
/// digits), a UTC date `2026-12-01`, or an RFC 3339 time. In milliseconds since the epoch.
/// Exactly what the OpenAPI document's `since` says (its `SINCE_SPAN_PATTERN`).
pub fn parse_since(text: &str, now_ms: i64) -> Result<i64, UsageInputError> {
    let t = text.trim();
    if let Some(ms) = span_ms(t) {
        return Ok(now_ms - ms);
    }
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return Ok(ts.as_millisecond());
    }
    if let Ok(date) = t.parse::<jiff::civil::Date>()
        && let Ok(z) = date.to_zoned(jiff::tz::TimeZone::UTC)
    {
        return Ok(z.timestamp().as_millisecond());
    }
    Err(UsageInputError::Since(t.to_owned()))
}

/// The span `parse_since` accepts, as a JSON Schema (ECMA) pattern.
pub const SINCE_SPAN_PATTERN: &str = "^([0-9]{1,6}[smhdw]){1,4}$";

/// `1h30m` in milliseconds, or `None` when `t` is not such a span.
fn span_ms(t: &str) -> Option<i64> {
    let (mut total, mut parts, mut digits) = (0i64, 0, 0usize);
    let mut count = 0i64;
    for c in t.chars() {
        if let Some(d) = c.to_digit(10) {
            digits += 1;
            if digits > 6 {
                return None;
            }
            count = count * 10 + i64::from(d);
            continue;
        }
        let unit: i64 = match c {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            'w' => 604_800_000,
            _ => return None,
        };
        if digits == 0 {
            return None;
        }
        parts += 1;
        // Four parts of at most 999,999 weeks stay far inside i64.
        total += count * unit;
        (count, digits) = (0, 0);
    }
    ((1..=4).contains(&parts) && digits == 0).then_some(total)
}

/// The start of the day containing `now_ms` in time zone `tz` (`defaults.timezone`; UTC
/// when `None` or unknown), in ms since the epoch: "today" for `strata status`.
pub fn day_start_ms(now_ms: i64, tz: Option<&str>) -> i64 {
    let zone = tz
        .and_then(|t| jiff::tz::TimeZone::get(t).ok())
        .unwrap_or(jiff::tz::TimeZone::UTC);
    jiff::Timestamp::from_millisecond(now_ms)
        .ok()
        .and_then(|t| t.to_zoned(zone.clone()).date().to_zoned(zone).ok())
        .map_or(now_ms, |z| z.timestamp().as_millisecond())
}

/// How `strata usage` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UsageBy {
    /// Per agent.
    #[default]
    Agent,
    /// Per provider and model (`provider/model`).
    Model,
    /// Per sender.
    Sender,
    /// Per day (UTC, `YYYY-MM-DD`).
    Day,
    /// Per turn.
    Turn,
    /// Per session.
    Session,
}

impl UsageBy {
    /// From `agent|model|sender|day|turn`.
    pub fn parse(s: &str) -> Result<UsageBy, UsageInputError> {
        match s {
            "agent" => Ok(UsageBy::Agent),
            "model" => Ok(UsageBy::Model),
            "sender" => Ok(UsageBy::Sender),
            "day" => Ok(UsageBy::Day),
            "turn" => Ok(UsageBy::Turn),
            "session" => Ok(UsageBy::Session),
            other => Err(UsageInputError::Grouping(other.to_owned())),
        }
    }
}

/// What to sum.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageQuery {
    /// The grouping.
    pub by: UsageBy,
    /// Calls from this time on (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Only this turn's calls.
    pub turn_id: Option<String>,
}

/// One group's sums.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    /// The group (`main`, `openai/gpt-4o`, `2026-12-04`…).
    pub key: String,
    /// Model calls.
    pub calls: u64,
    /// Prompt tokens (cached included).
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from the cache.
    pub cached_input_tokens: u64,
    /// Prompt tokens written to the cache.
    pub cache_write_tokens: u64,
    /// The cost of the calls whose cost is known.
    pub cost_usd: f64,
    /// Calls whose cost is unknown (no price for their model): `cost_usd` leaves them out.
    pub unpriced_calls: u64,
    /// Where the prompt tokens went (summed over the calls).
    #[serde(default)]
    pub input_parts: InputParts,
}

/// Where model calls are kept.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Stores calls.
    async fn record_calls(&self, calls: &[ModelCall]) -> Result<(), StoreError>;
    /// Sums per group, largest cost first (then most tokens).
    async fn usage(&self, q: &UsageQuery) -> Result<Vec<UsageRow>, StoreError>;
}

/// Prices and stores each model call.
pub struct UsageMeter {
    store: Arc<dyn UsageStore>,
    pricing: Pricing,
    writer: Option<tokio::sync::mpsc::Sender<Write>>,
    /// Cuts the writer's gathering short (a flush).
    hurry: Option<Arc<tokio::sync::Notify>>,
}

/// What the background writer is handed.
enum Write {
    Call(Box<ModelCall>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Calls written in one store write at most: a long write holds the store's single writer,
/// and the turns' own writes wait behind it.
const BATCH: usize = 64;

/// How long the background writer gathers calls before it writes them (unless someone
/// flushes): a store write per call cost more than the rest of a turn's accounting in
/// `cargo xtask bench agent`, and a long gathering makes writes that hold the store's
/// writer long.
const GATHER: std::time::Duration = std::time::Duration::from_millis(10);

impl UsageMeter {
    /// Over `store` with `pricing`; each call is stored before [`Self::record`] returns.
    pub fn new(store: Arc<dyn UsageStore>, pricing: Pricing) -> UsageMeter {
        UsageMeter {
            store,
            pricing,
            writer: None,
            hurry: None,
        }
    }

    /// Stores calls from a task of its own instead (needs a tokio runtime): a model call no
    /// longer waits for its row, and calls that arrive while a batch is written go in the
    /// next one (`serve` does this; `cargo xtask bench agent` measured a store write per
    /// call as most of the accounting's cost). [`Self::flush`] waits for what was handed
    /// over.
    pub fn in_background(mut self) -> UsageMeter {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Write>(8192);
        let store = self.store.clone();
        let hurry = Arc::new(tokio::sync::Notify::new());
        let woken = hurry.clone();
        tokio::spawn(async move {
            let mut batch: Vec<ModelCall> = Vec::new();
            let mut waiting = Vec::new();
            let take = |w: Write, batch: &mut Vec<ModelCall>, waiting: &mut Vec<_>| match w {
                Write::Call(c) => batch.push(*c),
                Write::Flush(done) => waiting.push(done),
            };
            // The first call of a batch wakes the writer; the others are picked up when the
            // gathering time is over, without waking it once each (a wake-up per call — a
            // thread switch — was most of what the accounting cost).
            while let Some(first) = rx.recv().await {
                take(first, &mut batch, &mut waiting);
                tokio::select! {
                    _ = tokio::time::sleep(GATHER) => {}
                    _ = woken.notified() => {}
                }
                while let Ok(w) = rx.try_recv() {
                    take(w, &mut batch, &mut waiting);
                }
                for chunk in batch.chunks(BATCH) {
                    if let Err(e) = store.record_calls(chunk).await {
                        tracing::warn!(calls = chunk.len(), error = %e, "model calls' usage not stored");
                    }
                }
                batch.clear();
                for done in waiting.drain(..) {
                    let _ = done.send(());
                }
            }
        });
        self.writer = Some(tx);
        self.hurry = Some(hurry);
        self
    }

    /// Waits until every call recorded so far is in the store.
    pub async fn flush(&self) {
        if let Some(tx) = &self.writer {
            let (done, stored) = tokio::sync::oneshot::channel();
            if tx.send(Write::Flush(done)).await.is_ok() {
                if let Some(h) = &self.hurry {
                    h.notify_one();
                }
                let _ = stored.await;
            }
        }
    }

    /// The prices.
    pub fn pricing(&self) -> &Pricing {
        &self.pricing
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn UsageStore> {
        &self.store
    }

    /// Prices and stores one call; a store error is logged, never the turn's failure.
    /// Returns its cost.
    pub async fn record(&self, mut call: ModelCall) -> Option<f64> {
        call.cost_usd = self.pricing.cost(&call.provider, &call.model, &call.usage);
        strata_engine::meters::spend(
            &call.agent,
            &call.model,
            call.usage.input_tokens,
            call.usage.cached_input_tokens,
            call.usage.output_tokens,
            call.cost_usd,
        );
        let cost = call.cost_usd;
        let call = match &self.writer {
            Some(tx) => match tx.send(Write::Call(Box::new(call))).await {
                Ok(()) => return cost,
                // The writer is gone (the runtime is shutting down): write it here.
                Err(tokio::sync::mpsc::error::SendError(Write::Call(c))) => *c,
                Err(_) => return cost,
            },
            None => call,
        };
        if let Err(e) = self.store.record_calls(std::slice::from_ref(&call)).await {
            tracing::warn!(agent = %call.agent, error = %e, "model call's usage not stored");
        }
        cost
    }
}

/// Sums `calls` per `by` the way the stores do (for the in-memory store and tests).
pub fn sum(calls: &[ModelCall], q: &UsageQuery) -> Vec<UsageRow> {
    let mut groups: BTreeMap<String, UsageRow> = BTreeMap::new();
    for c in calls {
        if q.since_ms.is_some_and(|s| c.ts_ms < s)
            || q.turn_id.as_ref().is_some_and(|t| *t != c.turn_id)
        {
            continue;
        }
        let key = group_key(c, q.by);
        let row = groups.entry(key.clone()).or_insert_with(|| UsageRow {
            key,
            ..UsageRow::default()
        });
        row.calls += 1;
        row.input_tokens += c.usage.input_tokens;
        row.output_tokens += c.usage.output_tokens;
        row.cached_input_tokens += c.usage.cached_input_tokens;
        row.cache_write_tokens += c.usage.cache_write_tokens;
        row.input_parts.add(&c.input_parts);
        match c.cost_usd {
            Some(x) => row.cost_usd += x,
            None => row.unpriced_calls += 1,
        }
    }
    let mut rows: Vec<UsageRow> = groups.into_values().collect();
    sort_rows(&mut rows);
    rows
}

/// Largest cost first, then most tokens, then by key.
pub fn sort_rows(rows: &mut [UsageRow]) {
    rows.sort_by(|a, b| {
        b.cost_usd
            .total_cmp(&a.cost_usd)
            .then((b.input_tokens + b.output_tokens).cmp(&(a.input_tokens + a.output_tokens)))
            .then(a.key.cmp(&b.key))
    });
}

/// A call's group under `by`.
pub fn group_key(c: &ModelCall, by: UsageBy) -> String {
    match by {
        UsageBy::Agent => c.agent.clone(),
        UsageBy::Model => format!("{}/{}", c.provider, c.model),
        UsageBy::Sender => c.sender.clone(),
        UsageBy::Day => jiff::Timestamp::from_millisecond(c.ts_ms)
            .map(|t| t.strftime("%Y-%m-%d").to_string())
            .unwrap_or_default(),
        UsageBy::Turn => c.turn_id.clone(),
        UsageBy::Session => c.session.clone(),
    }
}

/// Model calls kept in memory (the default store's stand-in in tests).
#[derive(Default)]
pub struct InMemoryUsage {
    calls: std::sync::Mutex<Vec<ModelCall>>,
}

impl InMemoryUsage {
    /// Every call stored, oldest first.
    pub fn calls(&self) -> Vec<ModelCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait]
impl UsageStore for InMemoryUsage {
    async fn record_calls(&self, calls: &[ModelCall]) -> Result<(), StoreError> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(calls);
        Ok(())
    }

    async fn usage(&self, q: &UsageQuery) -> Result<Vec<UsageRow>, StoreError> {
        Ok(sum(&self.calls(), q))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(input: u64, output: u64, cached: u64, written: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: cached,
            cache_write_tokens: written,
            cost_usd: None,
        }
    }

    #[test]
    fn since_takes_exactly_the_documented_forms() {
        let now = 10_000_000_000;
        assert_eq!(parse_since("7d", now), Ok(now - 7 * 86_400_000));
        assert_eq!(parse_since("1h30m", now), Ok(now - 5_400_000));
        assert_eq!(parse_since("2w", now), Ok(now - 2 * 604_800_000));
        assert_eq!(parse_since("1970-01-02", now), Ok(86_400_000));
        assert_eq!(parse_since("1970-01-01T00:00:01Z", now), Ok(1_000));
        for bad in [
            "",
            "d",
            "7",
            "7x",
            "1234567d",
            "1s1s1s1s1s",
            "7 days",
            "-7d",
            "2026-13-01",
        ] {
            assert!(parse_since(bad, now).is_err(), "{bad:?}");
        }
        // The pattern the API documents matches the spans accepted, not the others.
        let re = regex::Regex::new(SINCE_SPAN_PATTERN).expect("pattern");
        for span in ["7d", "1h30m", "999999w", "1s2m3h4d"] {
            assert!(re.is_match(span) && span_ms(span).is_some(), "{span}");
        }
        for bad in ["", "7", "1234567d", "1s1s1s1s1s", "7 d"] {
            assert!(!re.is_match(bad) && span_ms(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn dated_models_take_their_family_price_and_the_longest_match_wins() {
        let p = Pricing::from_config(&Config::default());
        let mini = p.price("openai", "gpt-4o-mini-2024-07-18").expect("priced");
        assert_eq!(mini.input_per_mtok, 0.15);
        let big = p.price("openai", "gpt-4o-2024-08-06").expect("priced");
        assert_eq!(big.input_per_mtok, 2.50);
        assert!(
            p.price("openai", "gpt-4oxyz").is_none(),
            "no dash, no match"
        );
        assert!(p.price("openai", "llama3").is_none());
        // Vertex serves Gemini's models at Gemini's prices; Claude Code Anthropic's.
        assert!(p.price("vertex", "gemini-2.5-pro").is_some());
        assert!(p.price("claude-code", "claude-sonnet-4-20250514").is_some());
    }

    #[test]
    fn cost_splits_cached_and_written_prompt_tokens_and_never_invents_one() {
        let p = Pricing::from_config(&Config::default());
        // claude-sonnet-4: 3 in, 15 out, 0.30 cached, 3.75 written (per million).
        let c = p
            .cost(
                "anthropic",
                "claude-sonnet-4-20250514",
                &u(1_000_000, 100_000, 500_000, 200_000),
            )
            .expect("priced");
        let want = 0.3 * 3.0 + 0.5 * 0.30 + 0.2 * 3.75 + 0.1 * 15.0;
        assert!((c - want).abs() < 1e-9, "{c} vs {want}");
        assert_eq!(p.cost("openai", "local-llama", &u(10, 10, 0, 0)), None);
        // The vendor's own figure wins.
        let mut reported = u(10, 10, 0, 0);
        reported.cost_usd = Some(0.0421);
        assert_eq!(p.cost("claude-code", "whatever", &reported), Some(0.0421));
    }

    #[test]
    fn config_prices_a_model_the_defaults_do_not_know_and_overrides_one_they_do() {
        let mut config = Config::default();
        let price = |i: f64| PriceConfig {
            input_per_mtok: i,
            output_per_mtok: 1.0,
            cached_input_per_mtok: None,
            cache_write_per_mtok: None,
        };
        config
            .pricing
            .entry("openai".into())
            .or_default()
            .insert("local-llama".into(), price(0.0));
        config
            .pricing
            .entry("openai".into())
            .or_default()
            .insert("gpt-4o".into(), price(9.0));
        let p = Pricing::from_config(&config);
        assert_eq!(
            p.cost("openai", "local-llama", &u(1_000_000, 0, 0, 0)),
            Some(0.0)
        );
        assert_eq!(
            p.cost("openai", "gpt-4o", &u(1_000_000, 0, 0, 0)),
            Some(9.0)
        );
    }

    #[test]
    fn apportioned_parts_add_up_to_the_vendors_figure_and_follow_the_bytes() {
        let bytes = InputParts::from_array([300, 0, 100, 500, 100]);
        let p = InputParts::apportion(1001, bytes);
        assert_eq!(p.as_array().iter().sum::<u64>(), 1001);
        assert_eq!(p.as_array(), [300, 0, 100, 501, 100]);
        assert_eq!(
            InputParts::apportion(7, InputParts::default()),
            InputParts::default()
        );
        let thirds = InputParts::apportion(10, InputParts::from_array([1, 1, 1, 0, 0]));
        assert_eq!(thirds.as_array(), [4, 3, 3, 0, 0]);
    }

    #[test]
    fn usage_adds_and_a_cost_stays_known_only_while_every_part_is() {
        let mut total = Usage::default();
        let mut a = u(1, 2, 0, 0);
        a.cost_usd = Some(0.5);
        total.add(&a);
        total.add(&a);
        assert_eq!(total.cost_usd, Some(1.0));
        total.add(&u(1, 1, 0, 0));
        assert_eq!(total.cost_usd, None);
        assert_eq!((total.input_tokens, total.output_tokens), (3, 5));
    }
}
