//! Turns as the rest of the engine sees them: the [`AgentDirectory`] tools reach agents
//! through, a [`TurnRequest`], the [`TurnRegistry`] of turns in progress (for calls that
//! arrive from outside the process) and the [`ActivityBoard`] of what they are doing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;

use async_trait::async_trait;

use crate::message::{AgentError, Message, Reply};
use crate::principal::Principal;
use crate::taint::Taint;

/// The running agents, as tools see them (`ask_agent`, `send_to_agent`, `list_capabilities`).
#[async_trait]
pub trait AgentDirectory: Send + Sync {
    /// Agent ids, sorted.
    fn agent_ids(&self) -> Vec<String>;
    /// Runs a turn (layer 1 applies).
    async fn run_turn(&self, req: TurnRequest) -> Result<Reply, AgentError>;
    /// Runs a turn nobody waits on (`send_to_agent`): where the work is shared — through
    /// the cluster's queue when there is one, whatever the turn's depth, so it outlives the
    /// instance that sent it. Elsewhere as [`Self::run_turn`].
    async fn deliver(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        self.run_turn(req).await
    }
    /// `agent`'s sessions, most recently active first (where the store can list them):
    /// `send_to_agent` looks among them for the channel the agent last talked in.
    async fn recent_sessions(&self, agent_id: &str) -> Vec<String> {
        let _ = agent_id;
        Vec::new()
    }
    /// Forgets a session's conversation (`/reset`).
    async fn reset(&self, agent_id: &str, session_id: &str) -> Result<(), AgentError> {
        let _ = (agent_id, session_id);
        Err(AgentError::Other(
            "resetting sessions is not supported here".into(),
        ))
    }
}

/// What a running turn shows the people waiting on it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnEvent {
    /// Text as the model writes it (every round's, in order).
    Token {
        /// The new text.
        text: String,
    },
    /// A tool call is starting.
    ToolStart {
        /// The model's id for the call.
        id: String,
        /// The tool.
        tool: String,
    },
    /// A tool call ended.
    ToolEnd {
        /// The model's id for the call.
        id: String,
        /// The tool.
        tool: String,
        /// `ok`, `error`, `denied`, …
        status: String,
        /// How long it ran.
        elapsed_ms: f64,
    },
}

/// Where a turn's [`TurnEvent`]s go. Called from the turn's task: keep it quick (send into a
/// channel).
#[derive(Clone)]
pub struct TurnSink(Arc<dyn Fn(TurnEvent) + Send + Sync>);

impl TurnSink {
    /// A sink calling `f` for each event.
    pub fn new(f: impl Fn(TurnEvent) + Send + Sync + 'static) -> Self {
        TurnSink(Arc::new(f))
    }

    /// A sink sending into `tx` (events are dropped once the receiver is gone).
    pub fn channel(tx: tokio::sync::mpsc::UnboundedSender<TurnEvent>) -> Self {
        TurnSink::new(move |e| {
            let _ = tx.send(e);
        })
    }

    /// Passes `event` on.
    pub fn send(&self, event: TurnEvent) {
        (self.0)(event)
    }
}

impl std::fmt::Debug for TurnSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TurnSink")
    }
}

/// A turn to run.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// Agent id.
    pub agent_id: String,
    /// Session id (usually the channel id).
    pub session_id: String,
    /// Channel id.
    pub channel_id: String,
    /// What kind of channel it is, in words the model reads (`Discord direct message`,
    /// `Discord server channel #ops`); `None`: told from the channel id (`cli`, `http`, …).
    pub channel_kind: Option<String>,
    /// Where the turn's progress goes while it runs (tokens, tool calls), for a surface
    /// that shows the answer as it is written. `None`: only the reply counts. A turn the
    /// cluster's queue runs elsewhere does not stream.
    pub stream: Option<TurnSink>,
    /// Narrowings of the caller beyond the agent's own (an API token's tool scope): every
    /// tool call the turn makes carries them, so the Invoker refuses what they leave out.
    pub scopes: Vec<crate::scope::Scope>,
    /// Who sent it.
    pub sender: Principal,
    /// The message.
    pub message: Message,
    /// Inter-agent depth.
    pub depth: u32,
    /// The taint of the turn that asked for this one (`ask_agent`, `send_to_agent`): the new
    /// turn shares it. `None` for a message from a connector.
    pub taint: Option<Taint>,
    /// A stable id for this unit of work (a connector's message id, an HTTP caller's
    /// `request_id`): a turn whose id is already stored is not run again. `None`: a fresh
    /// one each time.
    pub turn_id: Option<String>,
}

/// Where top-level turns go when several instances share the work (the cluster's queue):
/// [`AgentManager::turn`](crate::manager::AgentManager::turn) hands them over and waits for
/// the reply, wherever the turn ran. Turns asked for by other turns (`depth > 0`) run where
/// their caller runs.
#[async_trait]
pub trait TurnQueue: Send + Sync {
    /// Runs `req` on some instance (exactly once per `turn_id`) and returns its reply.
    async fn submit(&self, req: TurnRequest) -> Result<Reply, AgentError>;
}

/// The cluster as an operator sees it (`GET /api/cluster`): its members and its queue.
#[async_trait]
pub trait ClusterView: Send + Sync {
    /// The status document (`docs/CLUSTER.md` describes its fields).
    async fn status(&self) -> Result<serde_json::Value, String>;

    /// The newest `limit` audit records of every member, oldest first, each with its
    /// `instance` (`GET /api/events` in a cluster). `None`: this view keeps none.
    async fn events(&self, limit: usize) -> Option<Result<Vec<serde_json::Value>, String>> {
        let _ = limit;
        None
    }
}

/// A turn in progress, as tool calls that arrive from outside the process (a CLI agent's
/// MCP callbacks) find it: whose turn it is, for whom, and how deep in an inter-agent chain.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnInfo {
    /// The agent running the turn.
    pub agent_id: String,
    /// Its session.
    pub session_id: String,
    /// Its channel.
    pub channel_id: String,
    /// Who the turn is for (access control judges the tool calls by them).
    pub sender: Principal,
    /// Inter-agent depth.
    pub depth: u32,
    /// The turn's taint: calls that come back from outside share it.
    pub taint: Taint,
    /// The caller's narrowings (`TurnRequest::scopes`): calls that come back carry them.
    pub scopes: Vec<crate::scope::Scope>,
}

/// Turns in progress by an unguessable id (`Env::turns`). A CLI provider hands the id
/// to its tool callbacks (`X-Strata-Turn`), so a call made by the CLI runs as a call of this
/// turn; the id is only valid while the turn runs.
#[derive(Debug, Default)]
pub struct TurnRegistry {
    live: StdMutex<HashMap<String, TurnInfo>>,
}

/// Removes its turn from the registry when dropped.
#[derive(Debug)]
pub struct TurnTicket {
    id: String,
    registry: Arc<TurnRegistry>,
}

impl TurnTicket {
    /// The turn's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for TurnTicket {
    fn drop(&mut self) {
        let mut m = self.registry.live.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(&self.id);
    }
}

impl TurnRegistry {
    /// Registers a running turn until the ticket is dropped.
    pub fn begin(self: &Arc<Self>, info: TurnInfo) -> TurnTicket {
        let id = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let mut m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(id.clone(), info);
        TurnTicket {
            id,
            registry: self.clone(),
        }
    }

    /// The running turn with this id.
    pub fn get(&self, id: &str) -> Option<TurnInfo> {
        let m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        m.get(id).cloned()
    }

    /// Turns running now.
    pub fn len(&self) -> usize {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// No turn is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The tools each running turn is using right now, by (agent, session): what a connector's
/// progress message names.
#[derive(Debug, Default)]
pub struct ActivityBoard {
    now: StdMutex<HashMap<(String, String), String>>,
}

impl ActivityBoard {
    /// Records (or with `None` clears) what `agent` is doing in `session`.
    pub fn set(&self, agent: &str, session: &str, tools: Option<String>) {
        let mut m = self.now.lock().unwrap_or_else(|p| p.into_inner());
        let key = (agent.to_owned(), session.to_owned());
        match tools {
            Some(t) => {
                m.insert(key, t);
            }
            None => {
                m.remove(&key);
            }
        }
    }

    /// The tools `agent` is using in `session`, if any.
    pub fn get(&self, agent: &str, session: &str) -> Option<String> {
        let m = self.now.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&(agent.to_owned(), session.to_owned())).cloned()
    }
}
