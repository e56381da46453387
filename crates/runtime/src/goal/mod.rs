//! Goal workstreams as data (`docs/GOALS.md`): a goal, its participants, tasks and proposals,
//! the rules every change follows ([`Goal::apply`]), the event each change leaves, and the
//! [`GoalStore`] seam (SQLite in `strata-store`, PostgreSQL in `strata-postgres`).
//!
//! A goal is kept as one document with a version; a change is applied to the document in
//! memory, and the new document is saved together with the change's events only if the
//! version is still the one read (compare and swap) — so two instances changing one goal at
//! once never lose a change, and the event log is exactly the changes that were saved.

mod service;

pub use service::{CallKey, Clock, Gate, GoalChannel, Goals, Nudge};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use strata_engine::session::StoreError;

/// Where a goal is in its life. The main line is `proposed → brainstorm → strategy →
/// executing → done`; `paused` and `blocked_on_user` are side states left by `resume` (back
/// to where the goal was); `abandoned` is the other exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalState {
    /// Suggested; nobody works on it yet.
    Proposed,
    /// Collecting ideas.
    Brainstorm,
    /// Choosing how.
    Strategy,
    /// Being done: the scheduler nudges it.
    Executing,
    /// Finished.
    Done,
    /// Put aside (by `goal_set`); `goal_resume` goes back.
    Paused,
    /// Waiting for a person's answer (by `goal_block`); `goal_resume` goes back.
    BlockedOnUser,
    /// Given up.
    Abandoned,
}

impl GoalState {
    /// Every state, in the order of the documentation.
    pub const ALL: [GoalState; 8] = [
        GoalState::Proposed,
        GoalState::Brainstorm,
        GoalState::Strategy,
        GoalState::Executing,
        GoalState::Done,
        GoalState::Paused,
        GoalState::BlockedOnUser,
        GoalState::Abandoned,
    ];

    /// The name used in config, tools and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            GoalState::Proposed => "proposed",
            GoalState::Brainstorm => "brainstorm",
            GoalState::Strategy => "strategy",
            GoalState::Executing => "executing",
            GoalState::Done => "done",
            GoalState::Paused => "paused",
            GoalState::BlockedOnUser => "blocked_on_user",
            GoalState::Abandoned => "abandoned",
        }
    }

    /// The state named `s`.
    pub fn parse(s: &str) -> Option<GoalState> {
        GoalState::ALL.into_iter().find(|g| g.as_str() == s)
    }

    /// The states `goal_set` may move to from here: one step along the main line, one step
    /// back to rethink, `paused`, `abandoned`. A paused or blocked goal leaves by `goal_resume`
    /// (or is abandoned); `done` and `abandoned` are final.
    pub fn next(self) -> &'static [GoalState] {
        use GoalState::*;
        match self {
            Proposed => &[Brainstorm, Abandoned],
            Brainstorm => &[Strategy, Paused, Abandoned],
            Strategy => &[Executing, Brainstorm, Paused, Abandoned],
            Executing => &[Done, Strategy, Paused, Abandoned],
            Paused | BlockedOnUser => &[Abandoned],
            Done | Abandoned => &[],
        }
    }

    /// Whether nothing more happens to the goal.
    pub fn is_final(self) -> bool {
        matches!(self, GoalState::Done | GoalState::Abandoned)
    }
}

impl std::fmt::Display for GoalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Someone taking part: an agent (`agent:<id>`) or a person (their principal, e.g.
/// `discord:1234` or `operator`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Participant {
    /// `agent:<id>` or a person's principal.
    pub id: String,
    /// When they joined (Unix ms).
    pub joined_ms: i64,
}

impl Participant {
    /// The agent's id when this participant is an agent.
    pub fn agent(&self) -> Option<&str> {
        self.id.strip_prefix("agent:")
    }
}

/// How far a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Not started.
    Open,
    /// Someone works on it.
    Doing,
    /// Finished.
    Done,
    /// Not going to happen.
    Dropped,
}

impl TaskStatus {
    /// The status named `s`.
    pub fn parse(s: &str) -> Option<TaskStatus> {
        match s {
            "open" => Some(TaskStatus::Open),
            "doing" => Some(TaskStatus::Doing),
            "done" => Some(TaskStatus::Done),
            "dropped" => Some(TaskStatus::Dropped),
            _ => None,
        }
    }
}

/// A piece of work of a goal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// 1, 2, … within the goal.
    pub id: u32,
    /// What is to be done.
    pub title: String,
    /// Who does it (a participant's id), if anyone yet.
    pub assignee: Option<String>,
    /// How far it is.
    pub status: TaskStatus,
    /// When it is due: a date (`YYYY-MM-DD`, end of that day UTC) or an RFC 3339 time.
    pub due: Option<String>,
    /// The due time as Unix ms (what the scheduler compares).
    pub due_ms: Option<i64>,
    /// When a nudge about it being due was last sent (Unix ms).
    #[serde(default)]
    pub nudged_ms: Option<i64>,
}

/// What deciding a proposal does beyond the goal: the ones that spend money or change the
/// team wait for a person's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalKind {
    /// A decision inside the goal.
    Plan,
    /// Spends money.
    Spend,
    /// Changes the team (who takes part, who is hired or let go).
    Team,
}

impl ProposalKind {
    /// Whether deciding it waits for a person's approval.
    pub fn gated(self) -> bool {
        !matches!(self, ProposalKind::Plan)
    }
}

/// A vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    /// For.
    Yes,
    /// Against.
    No,
    /// Against, and it blocks the proposal while it stands.
    Object,
}

impl Choice {
    /// The choice named `s`.
    pub fn parse(s: &str) -> Option<Choice> {
        match s {
            "yes" => Some(Choice::Yes),
            "no" => Some(Choice::No),
            "object" => Some(Choice::Object),
            _ => None,
        }
    }
}

/// One participant's vote (a later vote replaces their earlier one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vote {
    /// The participant.
    pub voter: String,
    /// For, against, or an objection.
    pub choice: Choice,
    /// Why.
    pub reason: Option<String>,
    /// When (Unix ms).
    pub at_ms: i64,
}

/// Where a proposal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalStatus {
    /// Open for votes.
    Open,
    /// Decided for.
    Accepted,
    /// Decided against (by votes or an objection).
    Rejected,
}

/// Something the participants decide together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// 1, 2, … within the goal.
    pub id: u32,
    /// What is proposed.
    pub title: String,
    /// The details.
    pub detail: String,
    /// Plan, spend or team.
    pub kind: ProposalKind,
    /// Who proposed it.
    pub by: String,
    /// When (Unix ms).
    pub created_ms: i64,
    /// When the objection window closes (Unix ms): it may be decided from then on, or
    /// earlier when every participant voted yes.
    pub closes_ms: i64,
    /// Votes, one per participant.
    pub votes: Vec<Vote>,
    /// Open, accepted, rejected.
    pub status: ProposalStatus,
    /// Why it was decided so.
    pub outcome: Option<String>,
    /// Whether the scheduler has said its window is closing.
    #[serde(default)]
    pub nudged: bool,
}

/// The person a blocked goal waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocked {
    /// Who is asked.
    pub person: String,
    /// What.
    pub question: String,
    /// Since when (Unix ms).
    pub since_ms: i64,
    /// When the scheduler last reminded (Unix ms).
    #[serde(default)]
    pub reminded_ms: Option<i64>,
}

/// A goal, with everything that belongs to it. Saved as one document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goal {
    /// A slug of the title and a short suffix (`q3-board-pack-3f9a`).
    pub id: String,
    /// What the goal is.
    pub title: String,
    /// What done looks like.
    pub description: String,
    /// Who created it.
    pub owner: String,
    /// Where it is.
    pub state: GoalState,
    /// Where `goal_resume` returns to from `paused` or `blocked_on_user`.
    pub resume_to: Option<GoalState>,
    /// Agents and people taking part.
    pub participants: Vec<Participant>,
    /// The goal's channel (`<connector>:<channel id>`), once made.
    pub channel: Option<String>,
    /// Agent turns the channel allows without a human message.
    pub turn_budget: u32,
    /// How long a proposal stays open for objections (seconds).
    pub objection_secs: u64,
    /// The person a blocked goal waits for.
    pub blocked: Option<Blocked>,
    /// The work.
    pub tasks: Vec<Task>,
    /// The decisions.
    pub proposals: Vec<Proposal>,
    /// When it was created (Unix ms).
    pub created_ms: i64,
    /// When it last changed (Unix ms).
    pub updated_ms: i64,
    /// When the last stand-up was asked for (Unix ms).
    #[serde(default)]
    pub standup_ms: Option<i64>,
    /// Saved changes so far; the store saves only over the version it read.
    pub version: u64,
    /// Events in its log so far (the next event's `seq` is this plus one).
    pub events: u64,
}

/// One entry of a goal's append-only log: who changed what, when and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalEvent {
    /// The goal.
    pub goal: String,
    /// 1, 2, … within the goal.
    pub seq: u64,
    /// When (Unix ms).
    pub at_ms: i64,
    /// Who.
    pub actor: String,
    /// What kind of change (`created`, `joined`, `state`, `task`, `proposed`, `voted`,
    /// `decided`, `blocked`, `resumed`, `channel`, `nudged`).
    pub kind: String,
    /// The change's details.
    pub detail: Value,
    /// Why, when a reason was given.
    pub reason: Option<String>,
}

/// A change to a goal, as a tool or the scheduler asks for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Someone takes part (an agent `agent:<id>` or a person's principal).
    Join {
        /// Who.
        who: String,
    },
    /// A move along the life cycle.
    SetState {
        /// Where to.
        to: GoalState,
        /// Why (required).
        reason: String,
    },
    /// A new task.
    AddTask {
        /// What.
        title: String,
        /// Who does it.
        assignee: Option<String>,
        /// When it is due (`YYYY-MM-DD` or RFC 3339).
        due: Option<String>,
    },
    /// A task changes: any of its title, assignee, due date, status.
    UpdateTask {
        /// Which.
        id: u32,
        /// New title.
        title: Option<String>,
        /// New assignee.
        assignee: Option<String>,
        /// New due date.
        due: Option<String>,
        /// New status.
        status: Option<TaskStatus>,
    },
    /// A proposal for the participants to vote on.
    Propose {
        /// What.
        title: String,
        /// Details.
        detail: String,
        /// Plan, spend or team.
        kind: ProposalKind,
    },
    /// A participant's vote.
    Vote {
        /// Which proposal.
        proposal: u32,
        /// For, against, objection.
        choice: Choice,
        /// Why.
        reason: Option<String>,
    },
    /// The proposal is decided (after its window, or when every participant voted yes).
    Decide {
        /// Which proposal.
        proposal: u32,
    },
    /// The goal waits for a person.
    Block {
        /// Who is asked.
        person: String,
        /// What.
        question: String,
    },
    /// Back from `paused` or `blocked_on_user`.
    Resume {
        /// Why (the answer, for a blocked goal).
        reason: String,
    },
    /// The goal's channel was made.
    SetChannel {
        /// `<connector>:<channel id>`.
        channel: String,
    },
    /// The scheduler nudged the goal (what it said is in the event).
    Nudged {
        /// `standup`, `task_due`, `window_closing`, `blocked_too_long`.
        what: String,
        /// The task or proposal it is about.
        item: Option<u32>,
    },
}

/// Why a change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoalError {
    /// No goal with that id.
    #[error("no goal `{0}` (goal_status lists them)")]
    NotFound(String),
    /// The life cycle does not allow it.
    #[error("a goal cannot go from {from} to {to}: from {from} it can go to {allowed}")]
    Transition {
        /// Where it is.
        from: GoalState,
        /// Where it was asked to go.
        to: GoalState,
        /// Where it may go, comma separated (or a sentence when nowhere).
        allowed: String,
    },
    /// Something in the request is wrong; the message names it.
    #[error("{0}")]
    Invalid(String),
    /// Another change was saved in between, every time it was tried.
    #[error("the goal changed under this change {0} times in a row; try again")]
    Busy(u32),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(msg: impl Into<String>) -> GoalError {
    GoalError::Invalid(msg.into())
}

/// A goal's id: a slug of its title (letters, digits, `-`; at most 32) and 4 hex digits.
pub fn new_id(title: &str) -> String {
    let mut slug = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
        if slug.len() >= 32 {
            break;
        }
    }
    let slug = slug.trim_end_matches('-');
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..4];
    if slug.is_empty() {
        format!("goal-{suffix}")
    } else {
        format!("{slug}-{suffix}")
    }
}

/// Reads a due date: `YYYY-MM-DD` (the end of that day, UTC) or an RFC 3339 time, as Unix ms.
pub fn parse_due(s: &str) -> Result<i64, GoalError> {
    let bad = || {
        invalid(format!(
            "due `{s}` is not a date (YYYY-MM-DD) or an RFC 3339 time"
        ))
    };
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(t.as_millisecond());
    }
    let d: jiff::civil::Date = s.parse().map_err(|_| bad())?;
    let end = d
        .at(23, 59, 59, 0)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .map_err(|_| bad())?;
    Ok(end.timestamp().as_millisecond())
}

fn text(field: &str, value: &str, max: usize) -> Result<String, GoalError> {
    let v = value.trim();
    if v.is_empty() {
        return Err(invalid(format!("{field} is empty")));
    }
    if v.chars().count() > max {
        return Err(invalid(format!("{field} is longer than {max} characters")));
    }
    Ok(v.to_owned())
}

/// The most participants, tasks and proposals one goal holds.
pub const MAX_ITEMS: usize = 500;

impl Goal {
    /// A new goal in `proposed`, its owner its first participant, and the `created` event.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        title: &str,
        description: &str,
        owner: &str,
        participants: &[String],
        turn_budget: u32,
        objection_secs: u64,
        now_ms: i64,
    ) -> Result<(Goal, GoalEvent), GoalError> {
        let title = text("title", title, 200)?;
        let description = description.trim().to_owned();
        if description.chars().count() > 10_000 {
            return Err(invalid("description is longer than 10000 characters"));
        }
        let mut goal = Goal {
            id: new_id(&title),
            title,
            description,
            owner: owner.to_owned(),
            state: GoalState::Proposed,
            resume_to: None,
            participants: Vec::new(),
            channel: None,
            turn_budget: turn_budget.max(1),
            objection_secs,
            blocked: None,
            tasks: Vec::new(),
            proposals: Vec::new(),
            created_ms: now_ms,
            updated_ms: now_ms,
            standup_ms: None,
            version: 0,
            events: 0,
        };
        for who in std::iter::once(owner).chain(participants.iter().map(String::as_str)) {
            let who = text("participant", who, 200)?;
            if !goal.participants.iter().any(|p| p.id == who) {
                goal.participants.push(Participant {
                    id: who,
                    joined_ms: now_ms,
                });
            }
        }
        let ev = goal.event(
            owner,
            "created",
            json!({
                "title": goal.title,
                "description": goal.description,
                "participants": goal.participants.iter().map(|p| &p.id).collect::<Vec<_>>(),
                "turn_budget": goal.turn_budget,
            }),
            None,
            now_ms,
        );
        Ok((goal, ev))
    }

    fn event(
        &mut self,
        actor: &str,
        kind: &str,
        detail: Value,
        reason: Option<String>,
        now_ms: i64,
    ) -> GoalEvent {
        self.events += 1;
        self.updated_ms = now_ms;
        GoalEvent {
            goal: self.id.clone(),
            seq: self.events,
            at_ms: now_ms,
            actor: actor.to_owned(),
            kind: kind.to_owned(),
            detail,
            reason,
        }
    }

    /// The goal in a line: id, title, state, owner, participants, channel, how many tasks
    /// and proposals are open, when it last changed (`goal_status`, `strata goal list`,
    /// `GET /api/goals`).
    pub fn summary(&self) -> Value {
        json!({
            "id": self.id,
            "title": self.title,
            "state": self.state,
            "owner": self.owner,
            "participants": self.participants.iter().map(|p| &p.id).collect::<Vec<_>>(),
            "channel": self.channel,
            "open_tasks": self.tasks.iter().filter(|t| matches!(t.status, TaskStatus::Open | TaskStatus::Doing)).count(),
            "open_proposals": self.proposals.iter().filter(|p| p.status == ProposalStatus::Open).count(),
            "updated_ms": self.updated_ms,
        })
    }

    /// Whether `who` takes part.
    pub fn has(&self, who: &str) -> bool {
        self.participants.iter().any(|p| p.id == who)
    }

    /// The agents taking part.
    pub fn agents(&self) -> impl Iterator<Item = &str> {
        self.participants.iter().filter_map(Participant::agent)
    }

    fn proposal(&mut self, id: u32) -> Result<&mut Proposal, GoalError> {
        self.proposals
            .iter_mut()
            .find(|p| p.id == id)
            .ok_or_else(|| invalid(format!("goal has no proposal #{id}")))
    }

    fn open(&self) -> Result<(), GoalError> {
        if self.state.is_final() {
            return Err(invalid(format!(
                "the goal is {}: nothing more changes",
                self.state
            )));
        }
        Ok(())
    }

    /// Applies `change` by `actor` at `now_ms`, returning the event it leaves. On an error
    /// the goal is unchanged.
    pub fn apply(
        &mut self,
        actor: &str,
        change: Change,
        now_ms: i64,
    ) -> Result<GoalEvent, GoalError> {
        let mut next = self.clone();
        let ev = next.apply_inner(actor, change, now_ms)?;
        *self = next;
        Ok(ev)
    }

    fn apply_inner(
        &mut self,
        actor: &str,
        change: Change,
        now_ms: i64,
    ) -> Result<GoalEvent, GoalError> {
        match change {
            Change::Join { who } => {
                self.open()?;
                let who = text("participant", &who, 200)?;
                if self.has(&who) {
                    return Err(invalid(format!("{who} already takes part")));
                }
                if self.participants.len() >= MAX_ITEMS {
                    return Err(invalid("the goal has as many participants as it can hold"));
                }
                self.participants.push(Participant {
                    id: who.clone(),
                    joined_ms: now_ms,
                });
                Ok(self.event(actor, "joined", json!({"who": who}), None, now_ms))
            }
            Change::SetState { to, reason } => {
                let reason = text("reason", &reason, 2000)?;
                let from = self.state;
                if from == to || !from.next().contains(&to) {
                    let allowed = from.next();
                    let allowed = if allowed.is_empty() {
                        format!("nowhere ({from} is final)")
                    } else if matches!(from, GoalState::Paused | GoalState::BlockedOnUser) {
                        format!(
                            "{} (or goal_resume back to {})",
                            join(allowed),
                            self.resume_to.unwrap_or(GoalState::Brainstorm)
                        )
                    } else {
                        join(allowed)
                    };
                    return Err(GoalError::Transition { from, to, allowed });
                }
                if to == GoalState::Paused {
                    self.resume_to = Some(from);
                } else {
                    self.resume_to = None;
                    self.blocked = None;
                }
                self.state = to;
                Ok(self.event(
                    actor,
                    "state",
                    json!({"from": from, "to": to}),
                    Some(reason),
                    now_ms,
                ))
            }
            Change::AddTask {
                title,
                assignee,
                due,
            } => {
                self.open()?;
                let title = text("title", &title, 500)?;
                if let Some(a) = &assignee
                    && !self.has(a)
                {
                    return Err(invalid(format!(
                        "{a} does not take part in the goal (goal_join first)"
                    )));
                }
                let due_ms = due.as_deref().map(parse_due).transpose()?;
                if self.tasks.len() >= MAX_ITEMS {
                    return Err(invalid("the goal has as many tasks as it can hold"));
                }
                let id = self.tasks.iter().map(|t| t.id).max().unwrap_or(0) + 1;
                self.tasks.push(Task {
                    id,
                    title: title.clone(),
                    assignee: assignee.clone(),
                    status: TaskStatus::Open,
                    due: due.clone(),
                    due_ms,
                    nudged_ms: None,
                });
                Ok(self.event(
                    actor,
                    "task",
                    json!({"task": id, "added": {"title": title, "assignee": assignee, "due": due}}),
                    None,
                    now_ms,
                ))
            }
            Change::UpdateTask {
                id,
                title,
                assignee,
                due,
                status,
            } => {
                self.open()?;
                if let Some(a) = &assignee
                    && !self.has(a)
                {
                    return Err(invalid(format!(
                        "{a} does not take part in the goal (goal_join first)"
                    )));
                }
                let title = title.map(|t| text("title", &t, 500)).transpose()?;
                let due_ms = due.as_deref().map(parse_due).transpose()?;
                let task = self
                    .tasks
                    .iter_mut()
                    .find(|t| t.id == id)
                    .ok_or_else(|| invalid(format!("goal has no task #{id}")))?;
                let mut changed = serde_json::Map::new();
                if let Some(t) = title {
                    changed.insert("title".into(), json!(t));
                    task.title = t;
                }
                if let Some(a) = assignee {
                    changed.insert("assignee".into(), json!(a));
                    task.assignee = Some(a);
                }
                if let Some(d) = due {
                    changed.insert("due".into(), json!(d));
                    task.due = Some(d);
                    task.due_ms = due_ms;
                    task.nudged_ms = None;
                }
                if let Some(s) = status {
                    changed.insert("status".into(), json!(s));
                    task.status = s;
                }
                if changed.is_empty() {
                    return Err(invalid(
                        "nothing to change: give title, assignee, due or status",
                    ));
                }
                Ok(self.event(
                    actor,
                    "task",
                    json!({"task": id, "changed": changed}),
                    None,
                    now_ms,
                ))
            }
            Change::Propose {
                title,
                detail,
                kind,
            } => {
                self.open()?;
                let title = text("title", &title, 500)?;
                let detail = detail.trim().to_owned();
                if self.proposals.len() >= MAX_ITEMS {
                    return Err(invalid("the goal has as many proposals as it can hold"));
                }
                let id = self.proposals.iter().map(|p| p.id).max().unwrap_or(0) + 1;
                let window =
                    i64::try_from(self.objection_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
                let closes_ms = now_ms.saturating_add(window);
                self.proposals.push(Proposal {
                    id,
                    title: title.clone(),
                    detail,
                    kind,
                    by: actor.to_owned(),
                    created_ms: now_ms,
                    closes_ms,
                    votes: Vec::new(),
                    status: ProposalStatus::Open,
                    outcome: None,
                    nudged: false,
                });
                Ok(self.event(
                    actor,
                    "proposed",
                    json!({"proposal": id, "title": title, "kind": kind, "closes_ms": closes_ms}),
                    None,
                    now_ms,
                ))
            }
            Change::Vote {
                proposal,
                choice,
                reason,
            } => {
                self.open()?;
                if !self.has(actor) {
                    return Err(invalid(format!(
                        "{actor} does not take part in the goal: only participants vote \
                         (goal_join first)"
                    )));
                }
                if choice == Choice::Object && reason.as_deref().is_none_or(|r| r.trim().is_empty())
                {
                    return Err(invalid("an objection needs a reason"));
                }
                let p = self.proposal(proposal)?;
                if p.status != ProposalStatus::Open {
                    return Err(invalid(format!("proposal #{proposal} is already decided")));
                }
                p.votes.retain(|v| v.voter != actor);
                p.votes.push(Vote {
                    voter: actor.to_owned(),
                    choice,
                    reason: reason.clone(),
                    at_ms: now_ms,
                });
                Ok(self.event(
                    actor,
                    "voted",
                    json!({"proposal": proposal, "choice": choice}),
                    reason,
                    now_ms,
                ))
            }
            Change::Decide { proposal } => {
                self.open()?;
                let voters: Vec<String> = self.participants.iter().map(|p| p.id.clone()).collect();
                let p = self.proposal(proposal)?;
                if p.status != ProposalStatus::Open {
                    return Err(invalid(format!("proposal #{proposal} is already decided")));
                }
                let yes = |v: &&Vote| v.choice == Choice::Yes;
                let unanimous = voters
                    .iter()
                    .all(|who| p.votes.iter().filter(yes).any(|v| &v.voter == who));
                if now_ms < p.closes_ms && !unanimous {
                    let ayes = p.votes.iter().filter(yes).count();
                    return Err(invalid(format!(
                        "proposal #{proposal}'s objection window is open until {} and {ayes} \
                         of {} participants voted yes: decide it after the window or when \
                         every participant has voted yes",
                        strata_engine::clock::rfc3339(
                            std::time::UNIX_EPOCH
                                + std::time::Duration::from_millis(
                                    u64::try_from(p.closes_ms).unwrap_or(0)
                                )
                        ),
                        voters.len()
                    )));
                }
                let objections: Vec<&Vote> = p
                    .votes
                    .iter()
                    .filter(|v| v.choice == Choice::Object)
                    .collect();
                let ayes = p.votes.iter().filter(yes).count();
                let noes = p.votes.len() - ayes;
                let (status, outcome) = if let Some(o) = objections.first() {
                    (
                        ProposalStatus::Rejected,
                        format!(
                            "blocked by {}'s objection: {}",
                            o.voter,
                            o.reason.clone().unwrap_or_default()
                        ),
                    )
                } else if unanimous {
                    (
                        ProposalStatus::Accepted,
                        "every participant voted yes".into(),
                    )
                } else if ayes > noes {
                    (
                        ProposalStatus::Accepted,
                        format!("{ayes} yes, {noes} no, no objection in the window"),
                    )
                } else if ayes == 0 && noes == 0 {
                    (
                        ProposalStatus::Accepted,
                        "no objection in the window (no votes)".into(),
                    )
                } else {
                    (ProposalStatus::Rejected, format!("{ayes} yes, {noes} no"))
                };
                p.status = status;
                p.outcome = Some(outcome.clone());
                let kind = p.kind;
                Ok(self.event(
                    actor,
                    "decided",
                    json!({"proposal": proposal, "status": status, "kind": kind}),
                    Some(outcome),
                    now_ms,
                ))
            }
            Change::Block { person, question } => {
                self.open()?;
                let person = text("person", &person, 200)?;
                let question = text("question", &question, 2000)?;
                if matches!(self.state, GoalState::Paused | GoalState::BlockedOnUser) {
                    return Err(invalid(format!(
                        "the goal is {}: goal_resume it first",
                        self.state
                    )));
                }
                self.resume_to = Some(self.state);
                self.state = GoalState::BlockedOnUser;
                self.blocked = Some(Blocked {
                    person: person.clone(),
                    question: question.clone(),
                    since_ms: now_ms,
                    reminded_ms: None,
                });
                Ok(self.event(
                    actor,
                    "blocked",
                    json!({"person": person, "question": question}),
                    None,
                    now_ms,
                ))
            }
            Change::Resume { reason } => {
                let reason = text("reason", &reason, 2000)?;
                if !matches!(self.state, GoalState::Paused | GoalState::BlockedOnUser) {
                    return Err(invalid(format!(
                        "the goal is {}: only a paused or blocked_on_user goal resumes",
                        self.state
                    )));
                }
                let from = self.state;
                let to = self.resume_to.take().unwrap_or(GoalState::Brainstorm);
                self.state = to;
                self.blocked = None;
                Ok(self.event(
                    actor,
                    "resumed",
                    json!({"from": from, "to": to}),
                    Some(reason),
                    now_ms,
                ))
            }
            Change::SetChannel { channel } => {
                self.channel = Some(channel.clone());
                Ok(self.event(actor, "channel", json!({"channel": channel}), None, now_ms))
            }
            Change::Nudged { what, item } => {
                match (what.as_str(), item) {
                    ("standup", _) => self.standup_ms = Some(now_ms),
                    ("task_due", Some(id)) => {
                        if let Some(t) = self.tasks.iter_mut().find(|t| t.id == id) {
                            t.nudged_ms = Some(now_ms);
                        }
                    }
                    ("window_closing", Some(id)) => {
                        if let Some(p) = self.proposals.iter_mut().find(|p| p.id == id) {
                            p.nudged = true;
                        }
                    }
                    ("blocked_too_long", _) => {
                        if let Some(b) = self.blocked.as_mut() {
                            b.reminded_ms = Some(now_ms);
                        }
                    }
                    _ => return Err(invalid(format!("unknown nudge `{what}`"))),
                }
                Ok(self.event(
                    actor,
                    "nudged",
                    json!({"what": what, "item": item}),
                    None,
                    now_ms,
                ))
            }
        }
    }
}

fn join(states: &[GoalState]) -> String {
    states
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where goals live. Both backends keep the goal as a JSON document with its version, and
/// the events in a table of their own.
#[async_trait]
pub trait GoalStore: Send + Sync {
    /// Stores a new goal and its first event; `false` when the id is taken.
    async fn insert_goal(&self, goal: &Goal, event: &GoalEvent) -> Result<bool, StoreError>;
    /// One goal.
    async fn goal(&self, id: &str) -> Result<Option<Goal>, StoreError>;
    /// Every goal, newest first.
    async fn goals(&self) -> Result<Vec<Goal>, StoreError>;
    /// Saves `goal` (whose `version` is one more than the stored one) with `events`, in one
    /// transaction, only if the stored version is still `goal.version - 1`; `false` when
    /// another change came first (nothing is written then).
    async fn save_goal(&self, goal: &Goal, events: &[GoalEvent]) -> Result<bool, StoreError>;
    /// The goal's events with `seq` greater than `after`, oldest first, at most `limit`.
    async fn goal_events(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<GoalEvent>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goal() -> Goal {
        Goal::create(
            "Prepare the Q3 board pack!",
            "Slides and numbers",
            "operator",
            &["agent:cfo".into(), "agent:pm".into()],
            30,
            86_400,
            1_000,
        )
        .map(|(g, _)| g)
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn ids_are_slugs_with_a_suffix() {
        let g = goal();
        assert!(g.id.starts_with("prepare-the-q3-board-pack-"), "{}", g.id);
        assert_eq!(g.id.len(), "prepare-the-q3-board-pack-".len() + 4);
        assert!(new_id("!!!").starts_with("goal-"));
        assert_eq!(g.participants.len(), 3);
    }

    #[test]
    fn illegal_transitions_name_the_allowed_ones_and_change_nothing() {
        let mut g = goal();
        let before = g.clone();
        let e = g
            .apply(
                "operator",
                Change::SetState {
                    to: GoalState::Done,
                    reason: "skip".into(),
                },
                2_000,
            )
            .err();
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some(
                "a goal cannot go from proposed to done: from proposed it can go to brainstorm, abandoned"
            )
        );
        assert_eq!(g, before);
        for to in [
            GoalState::Brainstorm,
            GoalState::Strategy,
            GoalState::Executing,
            GoalState::Paused,
        ] {
            let ev = g.apply(
                "operator",
                Change::SetState {
                    to,
                    reason: "next".into(),
                },
                3_000,
            );
            assert!(ev.is_ok(), "{to}: {ev:?}");
        }
        let e = g
            .apply(
                "operator",
                Change::SetState {
                    to: GoalState::Done,
                    reason: "x".into(),
                },
                4_000,
            )
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("goal_resume back to executing"), "{e}");
        let ev = g.apply(
            "operator",
            Change::Resume {
                reason: "back".into(),
            },
            5_000,
        );
        assert_eq!(
            ev.map(|e| e.detail["to"].clone()).ok(),
            Some(json!("executing"))
        );
        assert_eq!(g.events, 6);
    }

    #[test]
    fn a_proposal_waits_for_its_window_or_unanimity_and_an_objection_blocks_it() {
        let mut g = goal();
        let propose = |g: &mut Goal, t: &str| {
            g.apply(
                "agent:pm",
                Change::Propose {
                    title: t.into(),
                    detail: String::new(),
                    kind: ProposalKind::Plan,
                },
                10_000,
            )
            .map(|e| e.detail["proposal"].as_u64().unwrap_or(0) as u32)
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let vote = |g: &mut Goal, who: &str, p: u32, c: Choice, why: Option<&str>| {
            g.apply(
                who,
                Change::Vote {
                    proposal: p,
                    choice: c,
                    reason: why.map(str::to_owned),
                },
                11_000,
            )
        };
        let a = propose(&mut g, "Use the new template");
        assert!(vote(&mut g, "agent:cfo", a, Choice::Yes, None).is_ok());
        let early = g.apply("agent:pm", Change::Decide { proposal: a }, 12_000);
        assert!(
            early
                .as_ref()
                .is_err_and(|e| e.to_string().contains("1 of 3 participants voted yes")),
            "{early:?}"
        );
        let decided = g.apply(
            "agent:pm",
            Change::Decide { proposal: a },
            10_000 + 86_400_000,
        );
        assert!(decided.is_ok(), "{decided:?}");
        assert_eq!(g.proposals[0].status, ProposalStatus::Accepted);

        let b = propose(&mut g, "Drop the appendix");
        assert!(
            vote(&mut g, "agent:cfo", b, Choice::Object, None).is_err(),
            "an objection needs a reason"
        );
        assert!(
            vote(&mut g, "someone-else", b, Choice::Yes, None).is_err(),
            "only participants vote"
        );
        assert!(
            vote(
                &mut g,
                "agent:cfo",
                b,
                Choice::Object,
                Some("the board asked for it")
            )
            .is_ok()
        );
        assert!(vote(&mut g, "agent:pm", b, Choice::Yes, None).is_ok());
        let r = g.apply(
            "operator",
            Change::Decide { proposal: b },
            10_000 + 86_400_000,
        );
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(g.proposals[1].status, ProposalStatus::Rejected);
        assert_eq!(
            g.proposals[1].outcome.as_deref(),
            Some("blocked by agent:cfo's objection: the board asked for it")
        );

        let c = propose(&mut g, "Send on Friday");
        for who in ["operator", "agent:cfo", "agent:pm"] {
            assert!(vote(&mut g, who, c, Choice::Yes, None).is_ok());
        }
        assert!(
            g.apply("agent:pm", Change::Decide { proposal: c }, 12_000)
                .is_ok(),
            "unanimity decides before the window"
        );
        assert!(
            g.apply("agent:pm", Change::Decide { proposal: c }, 12_000)
                .is_err(),
            "decided once"
        );
    }

    #[test]
    fn tasks_need_participants_and_real_dates() {
        let mut g = goal();
        let bad = g.apply(
            "operator",
            Change::AddTask {
                title: "Numbers".into(),
                assignee: Some("agent:stranger".into()),
                due: None,
            },
            2_000,
        );
        assert!(bad.is_err());
        let bad = g.apply(
            "operator",
            Change::AddTask {
                title: "Numbers".into(),
                assignee: None,
                due: Some("next friday".into()),
            },
            2_000,
        );
        assert!(bad.is_err_and(|e| e.to_string().contains("not a date")));
        let ok = g.apply(
            "operator",
            Change::AddTask {
                title: "Numbers".into(),
                assignee: Some("agent:cfo".into()),
                due: Some("2026-12-24".into()),
            },
            2_000,
        );
        assert!(ok.is_ok(), "{ok:?}");
        assert_eq!(g.tasks[0].due_ms, parse_due("2026-12-24T23:59:59Z").ok());
        assert_eq!(g.events, 2);
    }
}
