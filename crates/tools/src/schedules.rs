//! `schedule_create`, `schedule_list`, `schedule_cancel`: reminders and recurring prompts
//! people ask an agent for in conversation. Kept in the store `serve` uses (the scheduler
//! reads them at its next tick), owned by the person who asked and run as them, never more;
//! a viewer (or a stranger) may not make one, and each person may keep at most
//! [`MAX_PER_SENDER`].

use serde::Serialize;
use serde_json::Value;
use strata_engine::access::Tier;
use strata_engine::config::Access;
use strata_engine::connector::ChannelRef;
use strata_engine::{ToolContext, ToolError, tool};
use strata_runtime::EnvExt;
use strata_runtime::schedule::{MAX_PER_SENDER, ScheduleDef, Timestamp, When};

fn store(
    ctx: &ToolContext,
) -> Result<std::sync::Arc<dyn strata_runtime::schedule::ScheduleStore>, ToolError> {
    ctx.env
        .schedules()
        .ok_or_else(|| ToolError::failed("schedules are not kept in this process"))
}

fn is_owner(ctx: &ToolContext) -> bool {
    matches!(ctx.policy.tier(&ctx.principal), Tier::Person(Access::Owner))
}

/// What `schedule_create` made.
#[derive(Debug, Serialize)]
pub struct Created {
    /// Its name.
    pub name: String,
    /// When it runs, in words.
    pub when: String,
    /// Its first run (RFC 3339).
    pub next_run: Option<String>,
    /// Where the answer goes.
    pub deliver_to: Option<String>,
}

/// Schedules a reminder or a recurring task for the person you are talking with: at each
/// time you (this agent) are asked `prompt` as them, and your answer is posted to
/// `deliver_to` (default: this conversation's channel). Use it when someone asks "remind me
/// on Monday at 9" or "every morning, summarise …".
#[tool(capabilities = [messaging], side_effects = local, timeout_secs = 10, idempotent)]
async fn schedule_create(
    ctx: &ToolContext,
    /// A short unique name (letters, digits, `-`, `_`), e.g. `standup-reminder`.
    name: String,
    /// When: a cron expression (`0 9 * * MON`), `every 2h`, a local time
    /// (`2026-12-07T09:00`) or `in 2h`.
    when: String,
    /// What you will be asked at that time, e.g. "Remind Sam that the standup starts".
    prompt: String,
    /// Where the answer goes (`discord:<account>:<channel id>`); default: this channel.
    deliver_to: Option<String>,
) -> Result<Created, ToolError> {
    match ctx.policy.tier(&ctx.principal) {
        Tier::Person(Access::Viewer) | Tier::Unknown => {
            return Err(ToolError::failed(format!(
                "{} may not create schedules (viewers and unknown senders may not)",
                ctx.principal
            )));
        }
        _ => {}
    }
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ToolError::invalid(
            "name",
            "1 to 64 letters, digits, `-` and `_`",
        ));
    }
    let config = &ctx.env.config;
    let taken_by_config = config.schedules.contains_key(&name)
        || strata_runtime::schedule::JOBS.contains(&name.as_str())
        || name.starts_with("heartbeat-");
    if taken_by_config {
        return Err(ToolError::invalid(
            "name",
            format!("`{name}` is a configured schedule's name; pick another"),
        ));
    }
    let Some(agent) = ctx.agent_id.clone() else {
        return Err(ToolError::failed(
            "a schedule is made by an agent in a conversation (no agent is running this call)",
        ));
    };
    if prompt.trim().is_empty() {
        return Err(ToolError::invalid("prompt", "say what to do at that time"));
    }
    let deliver_to = match deliver_to {
        Some(d) => match ChannelRef::parse(&d) {
            Some(_) => Some(d),
            None => {
                return Err(ToolError::invalid(
                    "deliver_to",
                    format!("`{d}` is not a channel (`discord:<account>:<channel id>`)"),
                ));
            }
        },
        None => ctx
            .channel_id
            .clone()
            .filter(|c| ChannelRef::parse(c).is_some()),
    };
    let timezone = config
        .defaults
        .timezone
        .clone()
        .unwrap_or_else(|| "UTC".into());
    let tz = strata_runtime::schedule::zone(&timezone).map_err(ToolError::failed)?;
    let now = Timestamp::now();
    let parsed =
        When::parse(&when, &tz, now).map_err(|e| ToolError::invalid("when", e.to_string()))?;
    let next = parsed.next_after(now);
    if next.is_none() {
        return Err(ToolError::invalid(
            "when",
            format!("`{when}` is in the past"),
        ));
    }
    // A one-off time is kept as the instant it names ("in 2h" means from now, not later).
    let kept_when = match &parsed {
        When::Once(at) => at.to_string(),
        _ => when.clone(),
    };
    let store = store(ctx)?;
    let defs = store
        .defs()
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?;
    // This very call, run again after a crash (its idempotency key is kept with what it
    // made): it made the schedule already, and makes nothing now.
    if let Some(key) = ctx.idempotency_key()
        && let Some(made) = defs
            .iter()
            .find(|d| d.name == name && d.idempotency_key.as_deref() == Some(key))
    {
        // As it was made ("in 2h" counts from the first run of the call, not from now).
        let first = made
            .schedule()
            .map_err(|e| ToolError::failed(e.to_string()))?;
        let made_at = Timestamp::from_second(made.created_at)
            .map_err(|e| ToolError::failed(e.to_string()))?;
        let next = first.when.next_after(made_at);
        let has_state = store
            .states()
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?
            .iter()
            .any(|st| st.name == name);
        // Killed between the two writes: the first run is still due.
        if !has_state {
            save_first_run(&*store, &name, next).await?;
        }
        return Ok(Created {
            name,
            when: first.when.describe(),
            next_run: next.map(|t| t.to_string()),
            deliver_to: made.deliver_to.clone(),
        });
    }
    let mine = defs.iter().filter(|d| d.owner == ctx.principal).count();
    if mine >= MAX_PER_SENDER {
        return Err(ToolError::failed(format!(
            "{} already has {mine} schedules (at most {MAX_PER_SENDER}); cancel one first",
            ctx.principal
        )));
    }
    let def = ScheduleDef {
        name: name.clone(),
        owner: ctx.principal.clone(),
        agent,
        when: kept_when,
        timezone,
        prompt,
        deliver_to: deliver_to.clone(),
        created_at: now.as_second(),
        idempotency_key: ctx.idempotency_key().map(str::to_owned),
    };
    if !store
        .add_def(&def)
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?
    {
        return Err(ToolError::invalid(
            "name",
            format!("a schedule `{name}` exists; pick another name or cancel it"),
        ));
    }
    save_first_run(&*store, &name, next).await?;
    Ok(Created {
        name,
        when: parsed.describe(),
        next_run: next.map(|t| t.to_string()),
        deliver_to,
    })
}

/// A new schedule's state: due at `next`, never run.
async fn save_first_run(
    store: &dyn strata_runtime::schedule::ScheduleStore,
    name: &str,
    next: Option<Timestamp>,
) -> Result<(), ToolError> {
    store
        .save_state(&strata_runtime::schedule::ScheduleState {
            name: name.to_owned(),
            next_run: next.map(|t| t.as_second()),
            ..Default::default()
        })
        .await
        .map_err(|e| ToolError::failed(e.to_string()))
}

/// The schedules the person you are talking with made (an owner sees everyone's): name,
/// when, what, where, next run.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 10)]
async fn schedule_list(ctx: &ToolContext) -> Result<Value, ToolError> {
    let store = store(ctx)?;
    let defs = store
        .defs()
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?;
    let states = store
        .states()
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?;
    let everyone = is_owner(ctx);
    let mine: Vec<_> = defs
        .iter()
        .filter(|d| everyone || d.owner == ctx.principal)
        .filter_map(|d| d.schedule().ok())
        .collect();
    let mut rows = strata_runtime::schedule::overview(&mine, &states);
    for (row, d) in rows.iter_mut().zip(
        defs.iter()
            .filter(|d| everyone || d.owner == ctx.principal)
            .filter(|d| d.schedule().is_ok()),
    ) {
        row["prompt"] = Value::String(d.prompt.clone());
        row["owner"] = Value::String(d.owner.to_string());
    }
    Ok(Value::Array(rows))
}

/// Cancels a schedule the person you are talking with made (an owner may cancel anyone's).
#[tool(capabilities = [messaging], side_effects = local, timeout_secs = 10)]
async fn schedule_cancel(
    ctx: &ToolContext,
    /// The schedule's name.
    name: String,
) -> Result<Value, ToolError> {
    let store = store(ctx)?;
    let defs = store
        .defs()
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?;
    let Some(d) = defs.iter().find(|d| d.name == name) else {
        return Err(ToolError::invalid(
            "name",
            format!("no schedule `{name}` made in conversation"),
        ));
    };
    if d.owner != ctx.principal && !is_owner(ctx) {
        return Err(ToolError::failed(format!(
            "`{name}` belongs to {}; only they or an owner may cancel it",
            d.owner
        )));
    }
    store
        .remove_def(&name)
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?;
    Ok(serde_json::json!({"cancelled": name}))
}
