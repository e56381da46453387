//! `goal_*`: goal workstreams (`docs/GOALS.md`) — long-running goals that agents and people
//! pursue together, over the goal service `serve` and the CLI attach to the `Env`.
//!
//! Who acts: the agent running the call (`agent:<id>`), else the caller (`person:<id>`,
//! `operator`, `token:<name>`). Creating a goal needs a tier in `goals.create_tiers` (the
//! caller's or the running agent's); changing one needs to take part in it (or to be an
//! owner); decisions that spend money or change the team wait for a person's approval.

use serde::Serialize;
use serde_json::{Value, json};
use strata_engine::access::Tier;
use strata_engine::config::{Access, AgentTier};
use strata_engine::connector::ChannelRef;
use strata_engine::{Principal, ToolContext, ToolError, tool};
use strata_runtime::EnvExt;
use strata_runtime::goal::{CallKey, Goals};
use strata_runtime::goal::{
    Change, Choice, Goal, GoalError, GoalEvent, GoalState, ProposalKind, TaskStatus,
};

fn service(ctx: &ToolContext) -> Result<std::sync::Arc<Goals>, ToolError> {
    ctx.env
        .goals()
        .ok_or_else(|| ToolError::failed("goals are not kept in this process"))
}

/// Who acts: the running agent, else the caller.
pub fn actor(ctx: &ToolContext) -> String {
    match &ctx.agent_id {
        Some(a) => format!("agent:{a}"),
        None => ctx.principal.to_string(),
    }
}

fn tier_name(t: &Tier) -> &'static str {
    match t {
        Tier::Person(Access::Owner) => "owner",
        Tier::Person(Access::Admin) => "admin",
        Tier::Person(Access::Staff) => "staff",
        Tier::Person(Access::Viewer) => "viewer",
        Tier::Agent(AgentTier::Privileged) => "privileged",
        Tier::Agent(AgentTier::Coordinator) => "coordinator",
        Tier::Agent(AgentTier::Assistant) => "assistant",
        Tier::Unknown => "unknown",
    }
}

fn is_owner(ctx: &ToolContext) -> bool {
    matches!(ctx.policy.tier(&ctx.principal), Tier::Person(Access::Owner))
}

fn fail(e: GoalError) -> ToolError {
    ToolError::failed(e)
}

/// Refuses a change to `goal` by someone who neither takes part nor owns the deployment.
fn require_part(ctx: &ToolContext, goal: &Goal) -> Result<(), ToolError> {
    let who = actor(ctx);
    if goal.has(&who) || goal.owner == who || is_owner(ctx) {
        return Ok(());
    }
    Err(ToolError::failed(format!(
        "{who} does not take part in goal `{}` (goal_join first)",
        goal.id
    )))
}

/// A participant as given: `agent:<id>` of a configured agent, or a person's principal.
fn participant(ctx: &ToolContext, who: &str) -> Result<String, ToolError> {
    let who = who.trim();
    if let Some(a) = who.strip_prefix("agent:") {
        if !ctx.env.config.agents.contains_key(a) {
            return Err(ToolError::invalid(
                "participants",
                format!("no agent `{a}` in this deployment"),
            ));
        }
        return Ok(who.to_owned());
    }
    if who == "operator"
        || ["person:", "token:"]
            .iter()
            .any(|p| who.strip_prefix(p).is_some_and(|rest| !rest.is_empty()))
    {
        return Ok(who.to_owned());
    }
    Err(ToolError::invalid(
        "participants",
        format!("`{who}` is neither `agent:<id>` nor a person (`person:<id>`, `operator`)"),
    ))
}

/// What a change returns: the goal as it is now and the event the change left.
#[derive(Debug, Serialize)]
pub struct Changed {
    /// The goal.
    pub goal: Goal,
    /// The event in its log.
    pub event: GoalEvent,
}

fn changed((goal, event): (Goal, GoalEvent)) -> Changed {
    Changed { goal, event }
}

/// Posts `text` to the goal's channel, when it has one (a failure is logged, not returned:
/// the change itself is saved). Under the call's idempotency key: a call run again after a
/// crash posts nothing new where the connector dedupes (Discord's nonce), and nothing at all
/// where it does not (the first post may have gone out).
async fn tell(ctx: &ToolContext, goal: &Goal, text: &str) {
    let Some(ch) = goal.channel.as_deref().and_then(ChannelRef::parse) else {
        return;
    };
    let hub = ctx.env.connectors();
    if ctx.is_resumed_call() && !hub.dedupes_sends(&ch) {
        return;
    }
    if let Err(e) = hub.send_keyed(&ch, text, None, ctx.idempotency_key()).await {
        tracing::warn!(goal = %goal.id, error = %e, "goal channel message not posted");
    }
}

/// A change to `goal` by someone taking part, announced in the goal's channel with what
/// `say` makes of the result (nothing when it gives `None`).
async fn part_change(
    ctx: &ToolContext,
    goal: &str,
    change: Change,
    say: impl Fn(&Goal, &GoalEvent) -> Option<String>,
) -> Result<Changed, ToolError> {
    let goals = service(ctx)?;
    require_part(ctx, &goals.get(goal).await.map_err(fail)?)?;
    let done = goals
        .change_keyed(goal, &actor(ctx), change, CallKey::of(ctx))
        .await
        .map_err(fail)?;
    if let Some(text) = say(&done.0, &done.1) {
        tell(ctx, &done.0, &text).await;
    }
    Ok(changed(done))
}

/// Makes the goal's channel on `goals.connector` under `goals.category`, posts the charter
/// and records the channel; `Err` says why there is none (the goal stands either way).
async fn open_channel(ctx: &ToolContext, goals: &Goals, goal: &Goal) -> Result<Goal, String> {
    let cfg = goals.config();
    let (Some(connector), Some(category)) = (&cfg.connector, &cfg.category) else {
        return Err("no goals.connector configured: the goal has no channel".into());
    };
    let c = ctx.env.connectors().get(connector).ok_or_else(|| {
        format!("goals.connector `{connector}` is not running: the goal has no channel")
    })?;
    let name: String = goal.id.chars().take(100).collect();
    let id = c
        .create_channel(&name, category, &goal.title)
        .await
        .map_err(|e| e.to_string())?;
    let channel = format!("{connector}:{id}");
    let (goal, _) = goals
        .change(
            &goal.id,
            &actor(ctx),
            Change::SetChannel {
                channel: channel.clone(),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let who: Vec<&str> = goal.participants.iter().map(|p| p.id.as_str()).collect();
    let charter = format!(
        "**Goal: {}**\n{}\n\nOwner: {}\nParticipants: {}\nState: {} · turn budget {} agent \
         turns between human messages · proposals stay open {} for objections\n\
         (goal_status {} shows it all)",
        goal.title,
        if goal.description.is_empty() {
            "(no description yet)"
        } else {
            &goal.description
        },
        goal.owner,
        who.join(", "),
        goal.state,
        goal.turn_budget,
        cfg.objection_window,
        goal.id
    );
    tell(ctx, &goal, &charter).await;
    Ok(goal)
}

/// What `goal_create` made.
#[derive(Debug, Serialize)]
pub struct Created {
    /// The goal.
    pub goal: Goal,
    /// Why it has no channel, when it has none.
    pub channel_error: Option<String>,
}

/// Creates a long-running goal (a workstream) with agents and people taking part: it starts
/// `proposed`, gets its own channel where one is configured (its charter posted there, its
/// participants' agents answering there), and keeps a log of every change. For work that
/// takes days and several participants ("prepare the Q3 board pack"). Coordinator and
/// privileged agents and owners may create goals (`goals.create_tiers`).
#[tool(capabilities = [messaging], side_effects = external, idempotent, timeout_secs = 60)]
async fn goal_create(
    ctx: &ToolContext,
    /// What the goal is, in a line.
    title: String,
    /// What done looks like.
    description: Option<String>,
    /// Who takes part besides you: `agent:<id>` or people (`person:<id>`).
    participants: Option<Vec<String>>,
) -> Result<Created, ToolError> {
    let goals = service(ctx)?;
    let mut tiers = vec![tier_name(&ctx.policy.tier(&ctx.principal))];
    if let Some(a) = &ctx.agent_id {
        tiers.push(tier_name(
            &ctx.policy.tier(&Principal::Agent { id: a.clone() }),
        ));
    }
    if !tiers.iter().any(|t| goals.may_create(t)) {
        return Err(ToolError::failed(format!(
            "denied: creating goals is for {} (goals.create_tiers); {} is {}",
            goals.config().create_tiers.join(", "),
            actor(ctx),
            tiers.join(" / ")
        )));
    }
    let mut others = Vec::new();
    for p in participants.unwrap_or_default() {
        others.push(participant(ctx, &p)?);
    }
    let goal = goals
        .create_keyed(
            &actor(ctx),
            &title,
            description.as_deref().unwrap_or(""),
            &others,
            CallKey::of(ctx),
        )
        .await
        .map_err(fail)?;
    // Run again after a crash, the goal the first run made is back: its channel too, when
    // the first run got as far as recording it.
    if goal.channel.is_some() {
        return Ok(Created {
            goal,
            channel_error: None,
        });
    }
    match open_channel(ctx, &goals, &goal).await {
        Ok(goal) => Ok(Created {
            goal,
            channel_error: None,
        }),
        Err(why) => Ok(Created {
            goal,
            channel_error: Some(why),
        }),
    }
}

/// Takes part in a goal: you, or `who` (`agent:<id>` or `person:<id>`) when you take part
/// already. A goal's agents answer in its channel.
#[tool(capabilities = [messaging], side_effects = local, idempotent, timeout_secs = 30)]
async fn goal_join(
    ctx: &ToolContext,
    /// The goal's id.
    goal: String,
    /// Who joins; default you.
    who: Option<String>,
) -> Result<Changed, ToolError> {
    let goals = service(ctx)?;
    let me = actor(ctx);
    let who = match who {
        Some(w) => participant(ctx, &w)?,
        None => me.clone(),
    };
    if who != me {
        require_part(ctx, &goals.get(&goal).await.map_err(fail)?)?;
    }
    let done = goals
        .change_keyed(
            &goal,
            &me,
            Change::Join { who: who.clone() },
            CallKey::of(ctx),
        )
        .await
        .map_err(fail)?;
    tell(ctx, &done.0, &format!("➕ {who} joined the goal.")).await;
    Ok(changed(done))
}

/// Moves a goal along its life: proposed → brainstorm → strategy → executing → done, one
/// step back to rethink, `paused`, or `abandoned` — with the reason. Anything else is refused
/// with the states it may go to.
#[tool(capabilities = [messaging], side_effects = local, idempotent, timeout_secs = 30)]
async fn goal_set(
    ctx: &ToolContext,
    /// The goal's id.
    goal: String,
    /// `brainstorm`, `strategy`, `executing`, `done`, `paused` or `abandoned`.
    state: String,
    /// Why.
    reason: String,
) -> Result<Changed, ToolError> {
    let to = GoalState::parse(&state).ok_or_else(|| {
        ToolError::invalid(
            "state",
            format!(
                "`{state}` is not a state (brainstorm, strategy, executing, done, paused, \
                 abandoned)"
            ),
        )
    })?;
    part_change(
        ctx,
        &goal,
        Change::SetState {
            to,
            reason: reason.clone(),
        },
        |_, _| Some(format!("🔀 Now {to}: {reason}")),
    )
    .await
}

/// A goal's tasks: `add` (title, assignee, due), `update` (task and any of title, assignee,
/// due, status), `assign` (task, assignee), `complete` (task). Due dates are `YYYY-MM-DD`
/// or RFC 3339; the scheduler says when one is past.
#[tool(capabilities = [messaging], side_effects = local, idempotent, timeout_secs = 30)]
#[allow(clippy::too_many_arguments)]
async fn goal_task(
    ctx: &ToolContext,
    /// The goal's id.
    goal: String,
    /// `add`, `update`, `assign` or `complete`.
    action: String,
    /// The task's number (not for `add`).
    task: Option<u32>,
    /// What is to be done.
    title: Option<String>,
    /// Who does it (a participant: `agent:<id>` or `person:<id>`).
    assignee: Option<String>,
    /// When it is due.
    due: Option<String>,
    /// `open`, `doing`, `done` or `dropped` (for `update`).
    status: Option<String>,
) -> Result<Changed, ToolError> {
    let need_task = || ToolError::invalid("task", format!("`{action}` needs the task's number"));
    let change = match action.as_str() {
        "add" => Change::AddTask {
            title: title.ok_or_else(|| ToolError::invalid("title", "a new task needs one"))?,
            assignee,
            due,
        },
        "update" => Change::UpdateTask {
            id: task.ok_or_else(need_task)?,
            title,
            assignee,
            due,
            status: status
                .map(|s| {
                    TaskStatus::parse(&s).ok_or_else(|| {
                        ToolError::invalid(
                            "status",
                            format!("`{s}` is not open, doing, done or dropped"),
                        )
                    })
                })
                .transpose()?,
        },
        "assign" => Change::UpdateTask {
            id: task.ok_or_else(need_task)?,
            title: None,
            assignee: Some(
                assignee.ok_or_else(|| ToolError::invalid("assignee", "assign to whom?"))?,
            ),
            due: None,
            status: None,
        },
        "complete" => Change::UpdateTask {
            id: task.ok_or_else(need_task)?,
            title: None,
            assignee: None,
            due: None,
            status: Some(TaskStatus::Done),
        },
        other => {
            return Err(ToolError::invalid(
                "action",
                format!("`{other}` is not add, update, assign or complete"),
            ));
        }
    };
    part_change(ctx, &goal, change, |_, _| None).await
}

/// Proposes a decision to a goal's participants: it stays open for objections for
/// `goals.objection_window` (default 24 h), then `goal_decide` settles it — earlier when
/// every participant voted yes. `kind`: `plan` (default), `spend` (spends money) or `team`
/// (changes the team); those two wait for a person's approval when decided.
#[tool(capabilities = [messaging], side_effects = local, idempotent, timeout_secs = 30)]
async fn goal_propose(
    ctx: &ToolContext,
    /// The goal's id.
    goal: String,
    /// What is proposed.
    title: String,
    /// The details and the reasons.
    detail: Option<String>,
    /// `plan`, `spend` or `team`.
    kind: Option<String>,
) -> Result<Changed, ToolError> {
    let kind = match kind.as_deref().unwrap_or("plan") {
        "plan" => ProposalKind::Plan,
        "spend" => ProposalKind::Spend,
        "team" => ProposalKind::Team,
        other => {
            return Err(ToolError::invalid(
                "kind",
                format!("`{other}` is not plan, spend or team"),
            ));
        }
    };
    part_change(
        ctx,
        &goal,
        Change::Propose {
            title: title.clone(),
            detail: detail.unwrap_or_default(),
            kind,
        },
        |_, ev| {
            Some(format!(
                "🗳️ Proposal #{}: {title} — vote with goal_vote (yes, no, or object with a reason).",
                ev.detail["proposal"]
            ))
        },
    )
    .await
}

/// Votes on a goal's proposal: `yes`, `no`, or `object` (with a reason: an objection blocks
/// the proposal while it stands; vote again to withdraw it). Participants only; a later vote
/// replaces your earlier one.
#[tool(capabilities = [messaging], side_effects = local, idempotent, timeout_secs = 30)]
async fn goal_vote(
    ctx: &ToolContext,
    /// The goal's id.
    goal: String,
    /// The proposal's number.
    proposal: u32,
    /// `yes`, `no` or `object`.
    choice: String,
    /// Why (required to object).
    reason: Option<String>,
) -> Result<Changed, ToolError> {
    let goals = service(ctx)?;
    let choice = Choice::parse(&choice).ok_or_else(|| {
        ToolError::invalid("choice", format!("`{choice}` is not yes, no or object"))
    })?;
    goals
        .change_keyed(
            &goal,
            &actor(ctx),
            Change::Vote {
                proposal,
                choice,
                reason,
            },
            CallKey::of(ctx),
        )
        .await
        .map(changed)
        .map_err(fail)
}

/// Decides a goal's proposal once its objection window has closed (or every participant
/// voted yes): accepted unless an objection stands or more voted no than yes. Decisions that
/// spend money or change the team first wait for a person's approval.
#[tool(capabilities = [messaging], side_effects = local, idempotent, timeout_secs = 3600)]
async fn goal_decide(
    ctx: &ToolContext,
    /// The goal's id.
    goal: String,
    /// The proposal's number.
    proposal: u32,
) -> Result<Changed, ToolError> {
    let goals = service(ctx)?;
    require_part(ctx, &goals.get(&goal).await.map_err(fail)?)?;
    let done = goals
        .decide_keyed(
            &goal,
            proposal,
            &actor(ctx),
            &ctx.request_id,
            ctx.agent_id.as_deref(),
            CallKey::of(ctx),
        )
        .await
        .map_err(fail)?;
    tell(
        ctx,
        &done.0,
        &format!(
            "⚖️ Proposal #{proposal}: {} — {}",
            done.1.detail["status"].as_str().unwrap_or("decided"),
            done.1.reason.as_deref().unwrap_or("")
        ),
    )
    .await;
    Ok(changed(done))
}

/// Asks a person something the goal cannot go on without: the goal becomes
/// `blocked_on_user` (the scheduler reminds them when it waits long) until `goal_resume`.
#[tool(capabilities = [messaging], side_effects = local, idempotent, timeout_secs = 30)]
async fn goal_block(
    ctx: &ToolContext,
    /// The goal's id.
    goal: String,
    /// Who is asked (`person:<id>`, `operator`).
    person: String,
    /// The question.
    question: String,
) -> Result<Changed, ToolError> {
    part_change(
        ctx,
        &goal,
        Change::Block {
            person: person.clone(),
            question: question.clone(),
        },
        |_, _| Some(format!("⏸️ Waiting for {person}: {question}")),
    )
    .await
}

/// Takes a paused or blocked goal back to where it was, with the reason (for a blocked one:
/// the answer).
#[tool(capabilities = [messaging], side_effects = local, idempotent, timeout_secs = 30)]
async fn goal_resume(
    ctx: &ToolContext,
    /// The goal's id.
    goal: String,
    /// Why (the answer that unblocks it).
    reason: String,
) -> Result<Changed, ToolError> {
    part_change(
        ctx,
        &goal,
        Change::Resume {
            reason: reason.clone(),
        },
        |g, _| Some(format!("▶️ Resumed ({}): {reason}", g.state)),
    )
    .await
}

/// A goal with its tasks, proposals, votes and newest events (`events`, default 20), or
/// every goal in a line each when no `goal` is given.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 30)]
async fn goal_status(
    ctx: &ToolContext,
    /// The goal's id; none: the list.
    goal: Option<String>,
    /// How many of its newest events to show (0..200, default 20).
    events: Option<u32>,
) -> Result<Value, ToolError> {
    let goals = service(ctx)?;
    let Some(id) = goal else {
        let all = goals.list().await.map_err(fail)?;
        return Ok(json!({"goals": all.iter().map(Goal::summary).collect::<Vec<_>>()}));
    };
    let g = goals.get(&id).await.map_err(fail)?;
    let n = u64::from(events.unwrap_or(20).min(200));
    let log = goals
        .events(&id, g.events.saturating_sub(n), 200)
        .await
        .map_err(fail)?;
    Ok(json!({"goal": g, "events": log}))
}
