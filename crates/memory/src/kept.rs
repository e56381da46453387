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
        idempotency_key: None,
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

/// What a near-duplicate merge keeps of the stored row (`old_content`, its tags as JSON) and
/// the new memory `m`: the longer text, and the union of the tags (stored first) as JSON.
pub fn merged(old_content: String, old_tags: &str, m: &NewMemory) -> (String, String) {
    let mut all: Vec<String> = serde_json::from_str(old_tags).unwrap_or_default();
    for t in &m.tags {
        if !all.contains(t) {
            all.push(t.clone());
        }
    }
    let keep = if m.content.len() > old_content.len() {
        m.content.clone()
    } else {
        old_content
    };
    (
        keep,
        serde_json::to_string(&all).unwrap_or_else(|_| "[]".into()),
    )
}

/// What a backend keeps in rows: its storage and queries, no policy. The functions of
/// [`policy`] are the rules over it — who may write where, deduplication, the vector index,
/// what a turn's context holds — written once for SQLite and PostgreSQL.
#[async_trait]
pub trait Rows: Recall {
    /// `memory.*`.
    fn memory_config(&self) -> &MemoryConfig;
    /// The whole config (the team, for private scopes).
    fn team(&self) -> &Config;
    /// The backend's clock, in seconds.
    fn now(&self) -> i64;
    /// The in-process vector index.
    fn vectors(&self) -> &std::sync::Mutex<crate::rank::VecIndex>;
    /// The normalised embedding of `text`, when an embedder is configured and answers.
    async fn embed(&self, text: &str) -> Option<Vec<f32>>;
    /// The pinned memories `viewer` sees, newest first (at most 20).
    async fn pinned(&self, viewer: &Viewer) -> Result<Vec<Memory>, MemoryError>;
    /// Brings the vector index up to date before it is asked (PostgreSQL: other instances'
    /// writes); nothing by default.
    async fn sync_vectors(&self) -> Result<(), MemoryError> {
        Ok(())
    }
    /// The id of row `mid`, if it is still there.
    async fn id_of(&self, mid: i64) -> Result<Option<String>, MemoryError>;
    /// What the store with idempotency key `key` did: the memory's id, and whether it was
    /// inserted (else merged into a near-duplicate). Insert and merge keep `m`'s key on
    /// their log line in the same transaction.
    async fn stored_by_key(&self, key: &str) -> Result<Option<(String, bool)>, MemoryError>;
    /// Folds `m` into row `mid` (id `id`): the longer text, the union of the tags, pinned
    /// and confidence raised, unarchived, logged as a merge.
    async fn merge(&self, mid: i64, id: &str, m: &NewMemory, now: i64) -> Result<(), MemoryError>;
    /// Inserts `m` as `id` with its vector, logged; its row number.
    async fn insert(
        &self,
        id: &str,
        m: &NewMemory,
        vector: Option<&[f32]>,
        now: i64,
    ) -> Result<i64, MemoryError>;
    /// The memory with `id`, whoever may see it.
    async fn by_id(&self, id: &str) -> Result<Option<Memory>, MemoryError>;
    /// Deletes `id` without a trace but the log's line; the row number it had.
    async fn delete(
        &self,
        id: &str,
        reason: &str,
        by: &str,
        now: i64,
    ) -> Result<Option<i64>, MemoryError>;
    /// What `viewer` sees, not archived, updated since `since`, in `scope`: newest first, at
    /// most `limit` (1 to 10,000).
    async fn list(
        &self,
        viewer: &Viewer,
        since: Option<i64>,
        scope: Option<&MemoryScope>,
        limit: usize,
    ) -> Result<Vec<Memory>, MemoryError>;
}

/// `impl MemoryBackend for $ty` handing every operation to [`policy`] over the type's
/// [`Rows`]: what makes a backend of rows a memory backend, written once.
#[macro_export]
macro_rules! kept_backend {
    ($ty:ty) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::MemoryBackend for $ty {
            fn viewer(
                &self,
                agent: Option<&str>,
                sender: &$crate::__private::Principal,
            ) -> $crate::__private::Viewer {
                $crate::kept::policy::viewer(self, agent, sender)
            }

            async fn context_block(
                &self,
                turn: &$crate::__private::MemoryTurn<'_>,
                message: &str,
            ) -> Result<Option<String>, $crate::__private::MemoryError> {
                $crate::kept::policy::context_block(self, turn, message).await
            }

            async fn record_exchange(
                &self,
                turn: &$crate::__private::MemoryTurn<'_>,
                user: &str,
                reply: &str,
            ) -> Result<(), $crate::__private::MemoryError> {
                $crate::kept::policy::record_exchange(self, turn, user, reply).await
            }

            async fn search(
                &self,
                viewer: &$crate::__private::Viewer,
                q: &$crate::__private::MemoryQuery,
            ) -> Result<Vec<$crate::__private::Memory>, $crate::__private::MemoryError> {
                $crate::kept::policy::search(self, viewer, q).await
            }

            async fn store(
                &self,
                viewer: &$crate::__private::Viewer,
                m: $crate::__private::NewMemory,
            ) -> Result<$crate::__private::Stored, $crate::__private::MemoryError> {
                $crate::kept::policy::store(self, viewer, m).await
            }

            async fn get(
                &self,
                viewer: &$crate::__private::Viewer,
                id: &str,
            ) -> Result<Option<$crate::__private::Memory>, $crate::__private::MemoryError> {
                $crate::kept::policy::get(self, viewer, id).await
            }

            async fn forget(
                &self,
                viewer: &$crate::__private::Viewer,
                id: &str,
                reason: &str,
                by: &str,
            ) -> Result<bool, $crate::__private::MemoryError> {
                $crate::kept::policy::forget(self, viewer, id, reason, by).await
            }

            async fn list(
                &self,
                viewer: &$crate::__private::Viewer,
                since: Option<i64>,
                scope: Option<&$crate::__private::MemoryScope>,
                limit: usize,
            ) -> Result<Vec<$crate::__private::Memory>, $crate::__private::MemoryError> {
                $crate::kept::Rows::list(self, viewer, since, scope, limit).await
            }
        }
    };
}

/// The rules every backend Strata keeps itself follows, over its [`Rows`]. Each is one
/// [`strata_engine::memory::MemoryBackend`] method.
pub mod policy {
    use strata_engine::Principal;
    use strata_engine::memory::{
        Memory, MemoryError, MemoryQuery, MemoryScope, MemoryTurn, NewMemory, Stored, Viewer,
    };

    use super::Rows;

    /// `MemoryBackend::viewer`.
    pub fn viewer<R: Rows + ?Sized>(r: &R, agent: Option<&str>, sender: &Principal) -> Viewer {
        super::viewer(r.memory_config(), r.team(), agent, sender)
    }

    /// `MemoryBackend::search`.
    pub async fn search<R: Rows + ?Sized>(
        r: &R,
        viewer: &Viewer,
        q: &MemoryQuery,
    ) -> Result<Vec<Memory>, MemoryError> {
        super::search(r, viewer, q).await
    }

    /// `MemoryBackend::context_block`: the pinned memories and those the message recalls.
    pub async fn context_block<R: Rows + ?Sized>(
        r: &R,
        turn: &MemoryTurn<'_>,
        message: &str,
    ) -> Result<Option<String>, MemoryError> {
        let viewer = viewer(r, Some(turn.agent_id), turn.sender);
        let pinned = r.pinned(&viewer).await?;
        let recalled = search(
            r,
            &viewer,
            &super::context_query(r.memory_config(), message),
        )
        .await?;
        Ok(super::context_block(
            r.memory_config(),
            turn,
            pinned,
            recalled,
        ))
    }

    /// `MemoryBackend::record_exchange`: the exchange kept as the sender sees it.
    pub async fn record_exchange<R: Rows + ?Sized>(
        r: &R,
        turn: &MemoryTurn<'_>,
        user: &str,
        reply: &str,
    ) -> Result<(), MemoryError> {
        let viewer = viewer(r, Some(turn.agent_id), turn.sender);
        match super::exchange(r.memory_config(), &viewer, turn, user, reply) {
            Some(m) => store(r, &viewer, m).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// `MemoryBackend::store`: refused when empty or in a scope the viewer may not write;
    /// folded into a near-duplicate in the same scope, else inserted with its vector.
    pub async fn store<R: Rows + ?Sized>(
        r: &R,
        viewer: &Viewer,
        m: NewMemory,
    ) -> Result<Stored, MemoryError> {
        if m.content.trim().is_empty() {
            return Err(MemoryError::Invalid("content is empty".into()));
        }
        if !viewer.may_write(&m.scope) {
            return Err(MemoryError::Invalid(format!(
                "scope `{}` is not writable here",
                m.scope
            )));
        }
        // The same call run again (a turn resumed after a crash): what the first run stored.
        if let Some(key) = &m.idempotency_key
            && let Some((id, inserted)) = r.stored_by_key(key).await?
        {
            return Ok(if inserted {
                Stored::Created(id)
            } else {
                Stored::Merged(id)
            });
        }
        let vector = r.embed(&m.content).await;
        let now = r.now();
        if let Some((mid, id)) = duplicate(r, &m.scope, &m.content, vector.as_deref()).await? {
            r.merge(mid, &id, &m, now).await?;
            return Ok(Stored::Merged(id));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let mid = r.insert(&id, &m, vector.as_deref(), now).await?;
        if let Some(v) = vector {
            r.vectors()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(mid, &m.scope.to_string(), &v);
        }
        Ok(Stored::Created(id))
    }

    /// A near-duplicate of `content` in `scope`, as (row, id): by vector when there is one
    /// (the nearest in the scope at `memory.dedup_threshold` or more), else by words (one of
    /// the keyword ranking's first 20 in the scope whose words overlap that much).
    pub async fn duplicate<R: Rows + ?Sized>(
        r: &R,
        scope: &MemoryScope,
        content: &str,
        vector: Option<&[f32]>,
    ) -> Result<Option<(i64, String)>, MemoryError> {
        let threshold = r.memory_config().dedup_threshold;
        if let Some(v) = vector {
            r.sync_vectors().await?;
            let scope_s = scope.to_string();
            let hit = {
                let idx = r.vectors().lock().unwrap_or_else(|p| p.into_inner());
                idx.top(v, 1, |s| s == scope_s)
            };
            if let Some((mid, sim)) = hit.first()
                && *sim >= threshold
            {
                return Ok(r.id_of(*mid).await?.map(|id| (*mid, id)));
            }
            return Ok(None);
        }
        let q = MemoryQuery {
            text: content.to_owned(),
            limit: 5,
            ..Default::default()
        };
        for (mid, m) in r.keyword(&Viewer::operator(), &q, 20).await? {
            if m.scope == *scope && crate::text::word_similarity(&m.content, content) >= threshold {
                return Ok(Some((mid, m.id)));
            }
        }
        Ok(None)
    }

    /// `MemoryBackend::get`: only what the viewer sees.
    pub async fn get<R: Rows + ?Sized>(
        r: &R,
        viewer: &Viewer,
        id: &str,
    ) -> Result<Option<Memory>, MemoryError> {
        Ok(r.by_id(id).await?.filter(|m| viewer.sees(&m.scope)))
    }

    /// `MemoryBackend::forget`: what the viewer sees and may write, gone with its vector.
    pub async fn forget<R: Rows + ?Sized>(
        r: &R,
        viewer: &Viewer,
        id: &str,
        reason: &str,
        by: &str,
    ) -> Result<bool, MemoryError> {
        let Some(m) = get(r, viewer, id).await? else {
            return Ok(false);
        };
        if !viewer.may_write(&m.scope) {
            return Err(MemoryError::Invalid(format!(
                "memory `{id}` is in scope `{}`, not writable here",
                m.scope
            )));
        }
        let mid = r.delete(id, reason, by, r.now()).await?;
        if let Some(mid) = mid {
            r.vectors()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(mid);
        }
        Ok(mid.is_some())
    }
}
