//! Turns in progress: the [`TurnRegistry`] (for calls that arrive from outside the process),
//! the [`ActivityBoard`] of what they are doing, and the cluster's [`TurnQueue`] and
//! [`ClusterView`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;

use async_trait::async_trait;

use strata_engine::message::{AgentError, Reply};
use strata_engine::principal::Principal;
use strata_engine::taint::Taint;
use strata_engine::turns::TurnRequest;

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
    pub scopes: Vec<strata_engine::scope::Scope>,
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
