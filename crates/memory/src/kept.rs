//! What every memory backend Strata keeps itself (SQLite here, PostgreSQL in
//! `strata-postgres`) does the same way above its storage: who sees what, the context block,
//! the exchange it records, and how a search's mode picks and fuses the rankings. A backend
//! supplies the rankings ([`Recall`]); these functions do the rest.

use async_trait::async_trait;
use strata_engine::Principal;
use strata_engine::config::{Config, MemoryConfig};
use strata_engine::memory::{
    Memory, MemoryError, MemoryQuery, MemoryScope, MemoryTurn, MemoryType, NewMemory, SearchMode,
    Viewer, private_key,
};

use crate::rank::{format_block, rrf};

/// The viewer for a call by `sender` on behalf of `agent`: the agent's groups and fleet
/// reading from `cfg`, the sender's private scope from the team.
pub fn viewer(
    cfg: &MemoryConfig,
    team: &Config,
    agent: Option<&str>,
    sender: &Principal,
) -> Viewer {
    let groups = match agent {
        Some(a) => cfg
            .groups
            .iter()
            .filter(|(_, members)| members.iter().any(|m| m == a))
            .map(|(g, _)| g.clone())
            .collect(),
        None => Vec::new(),
    };
    Viewer {
        agent: agent.map(str::to_owned),
        private_key: private_key(team, sender),
        groups,
        fleet_read: cfg.fleet_read,
        all: false,
    }
}

/// The `[MEMORY]` block: the pinned memories, then the recalled ones not among them; the
/// turn is marked with the tainted ones it takes in.
pub fn context_block(
    cfg: &MemoryConfig,
    turn: &MemoryTurn<'_>,
    pinned: Vec<Memory>,
    recalled: Vec<Memory>,
) -> Option<String> {
    let mut items = pinned;
    for m in recalled {
        if !items.iter().any(|x| x.id == m.id) {
            items.push(m);
        }
    }
    // A memory a tainted turn stored taints the turn it is recalled into.
    turn.recalled(&items);
    format_block(&items, cfg.context_tokens.saturating_mul(4))
}

/// The query the context block recalls with.
pub fn context_query(cfg: &MemoryConfig, message: &str) -> MemoryQuery {
    MemoryQuery {
        text: message.to_owned(),
        limit: cfg.recall_limit,
        ..Default::default()
    }
}

/// The episodic memory an exchange leaves (what a person said stays theirs: their
/// exchanges go to their private scope), or `None` when nothing is kept.
pub fn exchange(
    cfg: &MemoryConfig,
    viewer: &Viewer,
    turn: &MemoryTurn<'_>,
    user: &str,
    reply: &str,
) -> Option<NewMemory> {
    if !cfg.record_exchanges || reply.trim().is_empty() || strata_engine::agent::is_no_reply(reply)
    {
        return None;
    }
    let scope = match &viewer.private_key {
        Some(p) => MemoryScope::Private(p.clone()),
        None => viewer.default_scope(),
    };
    let cut = |s: &str| s.chars().take(1000).collect::<String>();
    let content = format!(
        "{} said: {}\n{} answered: {}",
        turn.sender,
        cut(user),
        turn.agent_id,
        cut(reply)
    );
    let taint = turn.taint_note(&content);
    Some(NewMemory {
        content,
        memory_type: MemoryType::Episodic,
        category: Some("exchange".into()),
        tags: vec![format!("channel:{}", turn.channel_id)],
        scope,
        pinned: false,
        created_by: format!("agent:{}", turn.agent_id),
        confidence: Some(0.6),
        taint,
    })
}

/// The rankings a backend supplies, each as (row id, memory), best first.
#[async_trait]
pub trait Recall: Send + Sync {
    /// Full-text ranking of what `viewer` sees.
    async fn keyword(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        limit: usize,
    ) -> Result<Vec<(i64, Memory)>, MemoryError>;
    /// Vector ranking, `None` when no embedder answers.
    async fn semantic(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        limit: usize,
    ) -> Result<Option<Vec<(i64, Memory)>>, MemoryError>;
    /// Counts a use of the given rows (access statistics; failures only logged).
    async fn touch(&self, rows: Vec<i64>);
}

/// A search in `q.mode`: keyword, semantic (keyword when no embedder answers) or hybrid
/// (reciprocal rank fusion of both, keyword alone without vectors); access counted.
pub async fn search<R: Recall + ?Sized>(
    r: &R,
    viewer: &Viewer,
    q: &MemoryQuery,
) -> Result<Vec<Memory>, MemoryError> {
    let limit = q.limit.clamp(1, 100);
    let mut ranked: Vec<(i64, Memory)> = match q.mode {
        SearchMode::Keyword => r.keyword(viewer, q, limit).await?,
        SearchMode::Semantic => match r.semantic(viewer, q, limit).await? {
            Some(v) => v,
            None => r.keyword(viewer, q, limit).await?,
        },
        SearchMode::Hybrid => {
            let kw = r.keyword(viewer, q, limit * 3).await?;
            match r.semantic(viewer, q, limit * 3).await? {
                None => kw.into_iter().take(limit).collect(),
                Some(sem) => rrf(kw, sem, limit),
            }
        }
    };
    ranked.truncate(limit);
    r.touch(ranked.iter().map(|(m, _)| *m).collect()).await;
    Ok(ranked.into_iter().map(|(_, m)| m).collect())
}
