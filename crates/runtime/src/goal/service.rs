//! The goal service (`docs/GOALS.md`): what the `goal_*` tools, the CLI, the API and the
//! scheduler's `goal_nudge` job call. A change is read, applied ([`Goal::apply`]) and saved
//! over the version read, again from a fresh read when another change came first. Decisions
//! that spend money or change the team wait for a person through a [`Gate`] (the approval
//! hub). Goal channels and their turn budgets are kept here too, for the connectors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;

use crate::goal::{Change, Goal, GoalError, GoalEvent, GoalState, GoalStore, ProposalStatus};
use strata_engine::config::{GoalsConfig, InvalidSetting};

/// Asks a person to approve a decision (the approval hub implements it).
#[async_trait]
pub trait Gate: Send + Sync {
    /// Waits for a person's approval of `description`; `Err` says who refused or that nobody
    /// answered in time.
    async fn approve(
        &self,
        request_id: &str,
        agent_id: Option<&str>,
        principal: &str,
        args: serde_json::Value,
        description: &str,
    ) -> Result<String, String>;
}

/// A channel of a goal, as the connectors see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalChannel {
    /// The goal.
    pub goal: String,
    /// The agents taking part (routed to the channel).
    pub agents: Vec<String>,
    /// Agent turns allowed without a human message.
    pub turn_budget: u32,
}

/// What the scheduler should say, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nudge {
    /// The goal.
    pub goal: String,
    /// `standup`, `task_due`, `window_closing`, `blocked_too_long`.
    pub what: String,
    /// The task or proposal.
    pub item: Option<u32>,
    /// The message for the goal's agents.
    pub text: String,
}

/// The clock goals are kept by: Unix ms (tests set their own).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Goals over a store.
pub struct Goals {
    store: Arc<dyn GoalStore>,
    config: GoalsConfig,
    objection_secs: u64,
    standup_ms: i64,
    blocked_ms: i64,
    clock: Clock,
    gate: OnceLock<Arc<dyn Gate>>,
    /// Turn budgets used per goal channel (`connector:channel` → agent turns since a human).
    spent: Mutex<HashMap<String, u32>>,
    /// Goal channels (`connector:channel` → goal), as last read.
    channels: Mutex<HashMap<String, GoalChannel>>,
    /// One lock per goal: this instance's changes to a goal go one at a time, so only other
    /// instances' changes make a save fail and try again.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// How often a change is tried again when another instance's change came first.
const TRIES: u32 = 16;

/// A short random pause before trying again (1–20 ms, longer each time).
async fn back_off(attempt: u32) {
    let jitter = u64::try_from(uuid::Uuid::new_v4().as_u128() % 20).unwrap_or(0) + 1;
    tokio::time::sleep(std::time::Duration::from_millis(
        jitter * u64::from(attempt.min(5)),
    ))
    .await;
}

impl Goals {
    /// Goals in `store`, by `config` (checked: its durations must read).
    pub fn new(store: Arc<dyn GoalStore>, config: &GoalsConfig) -> Result<Goals, InvalidSetting> {
        config.check()?;
        let (objection, standup, blocked, _) = config.durations()?;
        let ms = |s: u64| i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX);
        Ok(Goals {
            store,
            config: config.clone(),
            objection_secs: objection,
            standup_ms: ms(standup),
            blocked_ms: ms(blocked),
            clock: Arc::new(strata_engine::clock::now_ms),
            gate: OnceLock::new(),
            spent: Mutex::default(),
            channels: Mutex::default(),
            locks: Mutex::default(),
        })
    }

    /// The same, kept by `clock` (tests).
    pub fn with_clock(mut self, clock: Clock) -> Goals {
        self.clock = clock;
        self
    }

    /// Attaches the gate decisions that spend money or change the team wait on (once).
    pub fn attach_gate(&self, gate: Arc<dyn Gate>) {
        let _ = self.gate.set(gate);
    }

    /// Now, by this service's clock.
    pub fn now(&self) -> i64 {
        (self.clock)()
    }

    /// `goals.*` as configured.
    pub fn config(&self) -> &GoalsConfig {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn GoalStore> {
        &self.store
    }

    /// Whether a caller of `tier` (`owner`, `coordinator`, …) may create goals.
    pub fn may_create(&self, tier: &str) -> bool {
        self.config.create_tiers.iter().any(|t| t == tier)
    }

    /// A new goal created by `actor` with `participants` besides them.
    pub async fn create(
        &self,
        actor: &str,
        title: &str,
        description: &str,
        participants: &[String],
    ) -> Result<Goal, GoalError> {
        self.create_keyed(actor, title, description, participants, None)
            .await
    }

    /// [`Self::create`] under a tool call's idempotency key: the key is kept in the
    /// `created` event's detail (`idempotency_key`); with `key.resumed` (the call is run again
    /// after a crash) the goal an earlier run created under it is returned instead of a
    /// second one.
    pub async fn create_keyed(
        &self,
        actor: &str,
        title: &str,
        description: &str,
        participants: &[String],
        key: Option<CallKey<'_>>,
    ) -> Result<Goal, GoalError> {
        if let Some(k) = key.filter(|k| k.resumed) {
            for goal in self.list().await? {
                let first = self.store.goal_events(&goal.id, 0, 1).await?;
                if first.first().is_some_and(|e| k.marks(e)) {
                    return Ok(goal);
                }
            }
        }
        for _ in 0..TRIES {
            let (goal, mut ev) = Goal::create(
                title,
                description,
                actor,
                participants,
                self.config.turn_budget,
                self.objection_secs,
                self.now(),
            )?;
            if let Some(k) = key {
                k.mark(&mut ev);
            }
            if self.store.insert_goal(&goal, &ev).await? {
                return Ok(goal);
            }
        }
        Err(GoalError::Busy(TRIES))
    }

    /// One goal.
    pub async fn get(&self, id: &str) -> Result<Goal, GoalError> {
        self.store
            .goal(id)
            .await?
            .ok_or_else(|| GoalError::NotFound(id.to_owned()))
    }

    /// Every goal, newest first.
    pub async fn list(&self) -> Result<Vec<Goal>, GoalError> {
        Ok(self.store.goals().await?)
    }

    /// A goal's events after `after`, at most `limit`.
    pub async fn events(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<GoalEvent>, GoalError> {
        self.get(id).await?;
        Ok(self.store.goal_events(id, after, limit).await?)
    }

    /// Applies `change` to goal `id` as `actor` and saves it with its event.
    pub async fn change(
        &self,
        id: &str,
        actor: &str,
        change: Change,
    ) -> Result<(Goal, GoalEvent), GoalError> {
        self.change_keyed(id, actor, change, None).await
    }

    /// [`Self::change`] under a tool call's idempotency key: the key is kept in the event's
    /// detail (`idempotency_key`), in the same save as the change; with `key.resumed` (the
    /// call is run again after a crash) a change an earlier run saved under it is not made
    /// again — the goal as it is and that event are returned.
    pub async fn change_keyed(
        &self,
        id: &str,
        actor: &str,
        change: Change,
        key: Option<CallKey<'_>>,
    ) -> Result<(Goal, GoalEvent), GoalError> {
        let lock = self
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_owned())
            .or_default()
            .clone();
        let _one_at_a_time = lock.lock().await;
        if let Some(done) = self.made_under(id, key).await? {
            return Ok(done);
        }
        for attempt in 0..TRIES {
            if attempt > 0 {
                back_off(attempt).await;
            }
            let mut goal = self.get(id).await?;
            let mut ev = goal.apply(actor, change.clone(), self.now())?;
            if let Some(k) = key {
                k.mark(&mut ev);
            }
            goal.version += 1;
            if self
                .store
                .save_goal(&goal, std::slice::from_ref(&ev))
                .await?
            {
                self.remember(&goal);
                return Ok((goal, ev));
            }
        }
        Err(GoalError::Busy(TRIES))
    }

    /// For a call run again after a crash (`key.resumed`): the goal as it is and the event
    /// the first run saved under the key, when it got that far.
    async fn made_under(
        &self,
        id: &str,
        key: Option<CallKey<'_>>,
    ) -> Result<Option<(Goal, GoalEvent)>, GoalError> {
        let Some(k) = key.filter(|k| k.resumed) else {
            return Ok(None);
        };
        let events = self.store.goal_events(id, 0, usize::MAX).await?;
        match events.into_iter().rev().find(|e| k.marks(e)) {
            Some(ev) => Ok(Some((self.get(id).await?, ev))),
            None => Ok(None),
        }
    }

    /// Decides proposal `proposal` of goal `id`: one that spends money or changes the team
    /// first waits for a person's approval through the gate (refused without one).
    pub async fn decide(
        &self,
        id: &str,
        proposal: u32,
        actor: &str,
        request_id: &str,
        agent_id: Option<&str>,
    ) -> Result<(Goal, GoalEvent), GoalError> {
        self.decide_keyed(id, proposal, actor, request_id, agent_id, None)
            .await
    }

    /// [`Self::decide`] under a tool call's idempotency key: run again after a crash, a
    /// decision the first run saved is returned — nobody is asked to approve it again.
    pub async fn decide_keyed(
        &self,
        id: &str,
        proposal: u32,
        actor: &str,
        request_id: &str,
        agent_id: Option<&str>,
        key: Option<CallKey<'_>>,
    ) -> Result<(Goal, GoalEvent), GoalError> {
        if let Some(done) = self.made_under(id, key).await? {
            return Ok(done);
        }
        let goal = self.get(id).await?;
        let p = goal
            .proposals
            .iter()
            .find(|p| p.id == proposal)
            .ok_or_else(|| GoalError::Invalid(format!("goal has no proposal #{proposal}")))?;
        if p.status == ProposalStatus::Open && p.kind.gated() {
            // The rules first, so nobody is asked about a decision that cannot be taken.
            let mut trial = goal.clone();
            trial.apply(actor, Change::Decide { proposal }, self.now())?;
            let gate = self.gate.get().ok_or_else(|| {
                GoalError::Invalid(
                    "this decision spends money or changes the team and waits for a person's \
                     approval, but no approval hub is attached here"
                        .into(),
                )
            })?;
            let kind = match p.kind {
                crate::goal::ProposalKind::Spend => "spends money",
                _ => "changes the team",
            };
            let description = format!(
                "Decide proposal #{proposal} of goal \"{}\" ({kind}): {}",
                goal.title, p.title
            );
            gate.approve(
                request_id,
                agent_id,
                actor,
                serde_json::json!({"goal": id, "proposal": proposal, "title": p.title}),
                &description,
            )
            .await
            .map_err(GoalError::Invalid)?;
        }
        self.change_keyed(id, actor, Change::Decide { proposal }, key)
            .await
    }

    fn remember(&self, goal: &Goal) {
        let Some(ch) = &goal.channel else { return };
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if goal.state.is_final() {
            map.remove(ch);
        } else {
            map.insert(
                ch.clone(),
                GoalChannel {
                    goal: goal.id.clone(),
                    agents: goal.agents().map(str::to_owned).collect(),
                    turn_budget: goal.turn_budget,
                },
            );
        }
    }

    /// Reads every goal's channel from the store (at start, and when another instance may
    /// have made one).
    pub async fn refresh_channels(&self) -> Result<(), GoalError> {
        let goals = self.list().await?;
        let mut map = HashMap::new();
        for g in goals.iter().filter(|g| !g.state.is_final()) {
            if let Some(ch) = &g.channel {
                map.insert(
                    ch.clone(),
                    GoalChannel {
                        goal: g.id.clone(),
                        agents: g.agents().map(str::to_owned).collect(),
                        turn_budget: g.turn_budget,
                    },
                );
            }
        }
        *self.channels.lock().unwrap_or_else(|p| p.into_inner()) = map;
        Ok(())
    }

    /// The goal channel `channel` (`connector:channel id`) is, if it is one.
    pub fn channel(&self, channel: &str) -> Option<GoalChannel> {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(channel)
            .cloned()
    }

    /// Counts an agent's turn in goal channel `channel`: `false` when its turn budget is
    /// spent (the turn must not run); a channel that is no goal's always has room.
    pub fn take_turn(&self, channel: &str) -> bool {
        let Some(ch) = self.channel(channel) else {
            return true;
        };
        let mut spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        let used = spent.entry(channel.to_owned()).or_insert(0);
        if *used >= ch.turn_budget {
            return false;
        }
        *used += 1;
        true
    }

    /// A human wrote in `channel`: its turn budget starts again.
    pub fn human_spoke(&self, channel: &str) {
        self.spent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(channel);
    }

    /// What the scheduler should say now about `goals`: a stand-up for an executing goal
    /// every `goals.standup_every`, a task past its due time (once per due time), a
    /// proposal whose window closes within the hour (once), a goal blocked on a person longer
    /// than `goals.blocked_after` (again after as long).
    pub fn nudges(&self, goals: &[Goal], now: i64) -> Vec<Nudge> {
        let mut out = Vec::new();
        for g in goals.iter().filter(|g| !g.state.is_final()) {
            let nudge = |what: &str, item: Option<u32>, text: String| Nudge {
                goal: g.id.clone(),
                what: what.to_owned(),
                item,
                text,
            };
            if g.state == GoalState::Executing
                && now.saturating_sub(g.standup_ms.unwrap_or(g.created_ms)) >= self.standup_ms
            {
                let open: Vec<String> = g
                    .tasks
                    .iter()
                    .filter(|t| {
                        matches!(
                            t.status,
                            crate::goal::TaskStatus::Open | crate::goal::TaskStatus::Doing
                        )
                    })
                    .map(|t| format!("#{} {}", t.id, t.title))
                    .collect();
                out.push(nudge(
                    "standup",
                    None,
                    format!(
                        "[GOAL STAND-UP] Goal \"{}\" is executing. Say what moved since the \
                         last stand-up, what is next and what blocks you. Open tasks: {}.",
                        g.title,
                        if open.is_empty() {
                            "none".to_owned()
                        } else {
                            open.join("; ")
                        }
                    ),
                ));
            }
            for t in &g.tasks {
                if let Some(due) = t.due_ms
                    && due <= now
                    && matches!(
                        t.status,
                        crate::goal::TaskStatus::Open | crate::goal::TaskStatus::Doing
                    )
                    && t.nudged_ms.is_none()
                {
                    out.push(nudge(
                        "task_due",
                        Some(t.id),
                        format!(
                            "[GOAL TASK DUE] Task #{} \"{}\" of goal \"{}\" was due {} ({}).",
                            t.id,
                            t.title,
                            g.title,
                            t.due.as_deref().unwrap_or("?"),
                            t.assignee.as_deref().unwrap_or("nobody assigned")
                        ),
                    ));
                }
            }
            for p in &g.proposals {
                if p.status == ProposalStatus::Open
                    && !p.nudged
                    && p.closes_ms.saturating_sub(now) <= 3_600_000
                {
                    out.push(nudge(
                        "window_closing",
                        Some(p.id),
                        format!(
                            "[GOAL PROPOSAL] The objection window of proposal #{} \"{}\" of \
                             goal \"{}\" {}: vote or object now, then goal_decide.",
                            p.id,
                            p.title,
                            g.title,
                            if p.closes_ms <= now {
                                "has closed"
                            } else {
                                "closes within the hour"
                            }
                        ),
                    ));
                }
            }
            if let Some(b) = &g.blocked
                && now.saturating_sub(b.reminded_ms.unwrap_or(b.since_ms)) >= self.blocked_ms
            {
                out.push(nudge(
                    "blocked_too_long",
                    None,
                    format!(
                        "[GOAL BLOCKED] Goal \"{}\" has waited for {} since {} on: {}",
                        g.title,
                        b.person,
                        strata_engine::clock::rfc3339(
                            std::time::UNIX_EPOCH
                                + std::time::Duration::from_millis(
                                    u64::try_from(b.since_ms).unwrap_or(0)
                                )
                        ),
                        b.question
                    ),
                ));
            }
        }
        out
    }
}

impl std::fmt::Debug for Goals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Goals").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goal::{Change, Choice, ProposalKind};
    use strata_engine::session::StoreError;

    /// The nudges need no store.
    struct NoStore;

    #[async_trait]
    impl GoalStore for NoStore {
        async fn insert_goal(&self, _: &Goal, _: &GoalEvent) -> Result<bool, StoreError> {
            Err(StoreError::Unsupported("none".into()))
        }
        async fn goal(&self, _: &str) -> Result<Option<Goal>, StoreError> {
            Ok(None)
        }
        async fn goals(&self) -> Result<Vec<Goal>, StoreError> {
            Ok(Vec::new())
        }
        async fn save_goal(&self, _: &Goal, _: &[GoalEvent]) -> Result<bool, StoreError> {
            Err(StoreError::Unsupported("none".into()))
        }
        async fn goal_events(
            &self,
            _: &str,
            _: u64,
            _: usize,
        ) -> Result<Vec<GoalEvent>, StoreError> {
            Ok(Vec::new())
        }
    }

    const H: i64 = 3_600_000;

    fn apply(g: &mut Goal, c: Change, at: i64) {
        g.apply("agent:coord", c, at)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn each_nudge_comes_once_and_the_stand_up_daily() {
        let goals = Goals::new(Arc::new(NoStore), &GoalsConfig::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let (mut g, _) = Goal::create("Ship it", "", "agent:coord", &[], 30, 86_400, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        for to in [
            GoalState::Brainstorm,
            GoalState::Strategy,
            GoalState::Executing,
        ] {
            apply(
                &mut g,
                Change::SetState {
                    to,
                    reason: "on".into(),
                },
                0,
            );
        }
        let due = crate::goal::parse_due("1970-01-01T05:00:00Z").unwrap_or(0);
        apply(
            &mut g,
            Change::AddTask {
                title: "Write notes".into(),
                assignee: None,
                due: Some("1970-01-01T05:00:00Z".into()),
            },
            0,
        );
        apply(
            &mut g,
            Change::Propose {
                title: "Friday".into(),
                detail: String::new(),
                kind: ProposalKind::Plan,
            },
            0,
        );
        let what = |n: &[Nudge]| n.iter().map(|n| n.what.clone()).collect::<Vec<_>>();
        // Early on: nothing is due.
        assert!(goals.nudges(std::slice::from_ref(&g), H).is_empty());
        // The task is past due: said once.
        let at = due + 1;
        let n = goals.nudges(std::slice::from_ref(&g), at);
        assert_eq!(what(&n), ["task_due"]);
        assert!(n[0].text.contains("Write notes"), "{}", n[0].text);
        apply(
            &mut g,
            Change::Nudged {
                what: "task_due".into(),
                item: Some(1),
            },
            at,
        );
        assert!(goals.nudges(std::slice::from_ref(&g), at + H).is_empty());
        // The window closes within the hour; then a day has passed: a stand-up too.
        let n = goals.nudges(std::slice::from_ref(&g), 24 * H - H / 2);
        assert_eq!(what(&n), ["window_closing"]);
        apply(
            &mut g,
            Change::Nudged {
                what: "window_closing".into(),
                item: Some(1),
            },
            23 * H,
        );
        let n = goals.nudges(std::slice::from_ref(&g), 24 * H);
        assert_eq!(what(&n), ["standup"]);
        assert!(n[0].text.contains("#1 Write notes"), "{}", n[0].text);
        apply(
            &mut g,
            Change::Nudged {
                what: "standup".into(),
                item: None,
            },
            24 * H,
        );
        assert!(goals.nudges(std::slice::from_ref(&g), 47 * H).is_empty());
        assert_eq!(
            what(&goals.nudges(std::slice::from_ref(&g), 48 * H)),
            ["standup"]
        );
        // Blocked on a person: no stand-up, a reminder after a day, again after another.
        apply(
            &mut g,
            Change::Block {
                person: "person:fin".into(),
                question: "Revenue?".into(),
            },
            48 * H,
        );
        assert!(goals.nudges(std::slice::from_ref(&g), 60 * H).is_empty());
        assert_eq!(
            what(&goals.nudges(std::slice::from_ref(&g), 72 * H)),
            ["blocked_too_long"]
        );
        apply(
            &mut g,
            Change::Nudged {
                what: "blocked_too_long".into(),
                item: None,
            },
            72 * H,
        );
        assert!(goals.nudges(std::slice::from_ref(&g), 80 * H).is_empty());
        assert_eq!(
            what(&goals.nudges(std::slice::from_ref(&g), 96 * H)),
            ["blocked_too_long"]
        );
        // A final goal is left alone.
        apply(
            &mut g,
            Change::Vote {
                proposal: 1,
                choice: Choice::Yes,
                reason: None,
            },
            96 * H,
        );
        apply(
            &mut g,
            Change::SetState {
                to: GoalState::Abandoned,
                reason: "no".into(),
            },
            96 * H,
        );
        assert!(goals.nudges(std::slice::from_ref(&g), 200 * H).is_empty());
    }

    #[test]
    fn a_goal_channel_has_its_budget_until_a_person_writes() {
        let goals = Goals::new(Arc::new(NoStore), &GoalsConfig::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let (mut g, _) = Goal::create("Ship it", "", "agent:coord", &[], 2, 60, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(goals.take_turn("discord:main:1"), "not a goal channel");
        apply(
            &mut g,
            Change::SetChannel {
                channel: "discord:main:1".into(),
            },
            0,
        );
        goals.remember(&g);
        assert_eq!(
            goals.channel("discord:main:1").map(|c| c.agents),
            Some(vec!["coord".to_owned()])
        );
        assert!(goals.take_turn("discord:main:1"));
        assert!(goals.take_turn("discord:main:1"));
        assert!(
            !goals.take_turn("discord:main:1"),
            "the budget of 2 is spent"
        );
        goals.human_spoke("discord:main:1");
        assert!(goals.take_turn("discord:main:1"));
        // A finished goal's channel is an ordinary channel again.
        apply(
            &mut g,
            Change::SetState {
                to: GoalState::Abandoned,
                reason: "x".into(),
            },
            1,
        );
        goals.remember(&g);
        assert_eq!(goals.channel("discord:main:1"), None);
    }
}

/// A tool call's idempotency key, as goal changes keep it.
#[derive(Debug, Clone, Copy)]
pub struct CallKey<'a> {
    /// The key ([`strata_engine::ToolContext::idempotency_key`]).
    pub key: &'a str,
    /// The call is run again after a crash
    /// ([`strata_engine::ToolContext::is_resumed_call`]): look for what it did first.
    pub resumed: bool,
}

impl CallKey<'_> {
    /// The key of `ctx`'s call, when it has one.
    pub fn of(ctx: &strata_engine::ToolContext) -> Option<CallKey<'_>> {
        ctx.idempotency_key().map(|key| CallKey {
            key,
            resumed: ctx.is_resumed_call(),
        })
    }

    fn mark(&self, ev: &mut GoalEvent) {
        if let Some(o) = ev.detail.as_object_mut() {
            o.insert("idempotency_key".into(), self.key.into());
        }
    }

    fn marks(&self, ev: &GoalEvent) -> bool {
        ev.detail.get("idempotency_key").and_then(|k| k.as_str()) == Some(self.key)
    }
}
