//! Human approval (HITL) of gated tool calls.
//!
//! The [`crate::Invoker`] hands a gated call to [`Approvals::request`], which persists an
//! [`ApprovalRecord`] through an [`ApprovalStore`] (SQLite in `strata-store`, so a restart
//! loses nothing), shows it on every [`ApprovalChannel`] (the HTTP API and the CLI read the
//! store; Discord posts it), and waits. A decision arrives through [`Approvals::decide`] in
//! this process (HTTP API, Discord) — or straight in the database from another process
//! (`strata approvals approve` without `--remote`), which the waiter notices by polling.
//! No decision within `security.hitl.timeout` → `timeout`, which refuses the call unless
//! `security.hitl.fail_mode: open`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;

use strata_engine::access::AccessPolicy;
use strata_engine::config::FailMode;
use strata_engine::principal::Principal;
use strata_engine::session::StoreError;

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a human.
    Pending,
    /// A human approved.
    Approved,
    /// A human denied.
    Denied,
    /// Nobody decided in time.
    Timeout,
}

impl ApprovalStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Timeout => "timeout",
        }
    }

    /// From the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ApprovalStatus::Pending,
            "approved" => ApprovalStatus::Approved,
            "denied" => ApprovalStatus::Denied,
            "timeout" => ApprovalStatus::Timeout,
            _ => return None,
        })
    }
}

/// One approval request. The JSON shape is what `GET /api/approvals` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// Request id (also the invocation's request id).
    pub id: String,
    /// Agent on whose behalf, if any.
    pub agent_id: Option<String>,
    /// Tool.
    pub tool: String,
    /// Who called (`person:alice`, `token:ci`…).
    pub principal: String,
    /// Arguments, secrets redacted.
    pub args: Value,
    /// One sentence for the approver.
    pub description: String,
    /// Status.
    pub status: ApprovalStatus,
    /// Who decided.
    pub approver: Option<String>,
    /// Why (free text from the approver, or `timeout`).
    pub reason: Option<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub decided_at: Option<i64>,
}

/// Persistence of approval requests.
#[async_trait]
pub trait ApprovalStore: Send + Sync {
    /// Stores a new request.
    async fn insert(&self, r: &ApprovalRecord) -> Result<(), StoreError>;
    /// One request.
    async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError>;
    /// Requests, newest first, optionally only those with `status`.
    async fn list(
        &self,
        status: Option<ApprovalStatus>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError>;
    /// Sets the outcome of a *pending* request; `Ok(false)` when it was no longer pending.
    async fn decide(
        &self,
        id: &str,
        status: ApprovalStatus,
        approver: Option<&str>,
        reason: Option<&str>,
        at: i64,
    ) -> Result<bool, StoreError>;
    /// Marks pending requests created at or before `created_before` as `timeout`; returns how
    /// many.
    async fn expire(&self, created_before: i64, at: i64) -> Result<usize, StoreError>;
}

/// Somewhere approval requests are shown to humans (a Discord channel…). The HTTP API and
/// the CLI need none: they read the store.
#[async_trait]
pub trait ApprovalChannel: Send + Sync {
    /// Short name for logs.
    fn name(&self) -> &str;
    /// A new request to show.
    async fn post(&self, request: &ApprovalRecord);
    /// The request was decided (or timed out): called once, by the process that posted it
    /// and waited for it, wherever the decision was taken.
    async fn outcome(&self, _request: &ApprovalRecord) {}
}

/// An in-memory store (tests, embedders without a database).
#[derive(Default)]
pub struct MemoryApprovalStore {
    rows: Mutex<Vec<ApprovalRecord>>,
}

#[async_trait]
impl ApprovalStore for MemoryApprovalStore {
    async fn insert(&self, r: &ApprovalRecord) -> Result<(), StoreError> {
        self.rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(r.clone());
        Ok(())
    }
    async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        Ok(rows.iter().find(|r| r.id == id).cloned())
    }
    async fn list(
        &self,
        status: Option<ApprovalStatus>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        Ok(rows
            .iter()
            .rev()
            .filter(|r| status.is_none_or(|s| r.status == s))
            .take(limit)
            .cloned()
            .collect())
    }
    async fn decide(
        &self,
        id: &str,
        status: ApprovalStatus,
        approver: Option<&str>,
        reason: Option<&str>,
        at: i64,
    ) -> Result<bool, StoreError> {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        match rows
            .iter_mut()
            .find(|r| r.id == id && r.status == ApprovalStatus::Pending)
        {
            Some(r) => {
                r.status = status;
                r.approver = approver.map(str::to_owned);
                r.reason = reason.map(str::to_owned);
                r.decided_at = Some(at);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    async fn expire(&self, created_before: i64, at: i64) -> Result<usize, StoreError> {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = 0;
        for r in rows.iter_mut() {
            if r.status == ApprovalStatus::Pending && r.created_at <= created_before {
                r.status = ApprovalStatus::Timeout;
                r.reason = Some("timeout".into());
                r.decided_at = Some(at);
                n += 1;
            }
        }
        Ok(n)
    }
}

/// What came of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// Run the tool.
    Approved {
        /// Who approved.
        by: String,
    },
    /// Do not.
    Denied {
        /// Who denied.
        by: String,
        /// Their reason, if any.
        reason: Option<String>,
    },
    /// Nobody decided within the timeout.
    TimedOut,
    /// The store failed.
    Failed(String),
}

/// Why a decision was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// No request with that id.
    #[error("no approval request `{0}`")]
    NotFound(String),
    /// Already decided.
    #[error("approval request `{id}` is already {status}")]
    NotPending {
        /// Id.
        id: String,
        /// Its status.
        status: &'static str,
    },
    /// The principal may not decide.
    #[error(
        "{0} is not an approver (see `security.hitl.approvers`; when empty, only owners decide)"
    )]
    NotApprover(String),
    /// The store failed.
    #[error("approval store: {0}")]
    Store(#[from] StoreError),
}

/// Unix seconds now.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The approval hub of a process.
pub struct Approvals {
    store: Arc<dyn ApprovalStore>,
    policy: Arc<AccessPolicy>,
    channels: Mutex<Vec<Arc<dyn ApprovalChannel>>>,
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    timeout: Duration,
    fail_mode: FailMode,
    poll: Duration,
}

impl Approvals {
    /// A hub over `store`; timeout and fail mode from `security.hitl` in `policy`.
    pub fn new(store: Arc<dyn ApprovalStore>, policy: Arc<AccessPolicy>) -> Self {
        let hitl = policy.hitl();
        Approvals {
            timeout: Duration::from_secs(hitl.timeout.max(1)),
            fail_mode: hitl.fail_mode,
            store,
            policy,
            channels: Mutex::new(Vec::new()),
            waiters: Mutex::new(HashMap::new()),
            poll: Duration::from_millis(500),
        }
    }

    /// Overrides the timeout (tests).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds a channel requests are posted to.
    pub fn add_channel(&self, channel: Arc<dyn ApprovalChannel>) {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(channel);
    }

    /// The configured fail mode.
    pub fn fail_mode(&self) -> FailMode {
        self.fail_mode
    }

    /// The timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ApprovalStore> {
        &self.store
    }

    fn channels(&self) -> Vec<Arc<dyn ApprovalChannel>> {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Persists `record` (status pending), posts it, and waits for the outcome.
    pub async fn request(&self, mut record: ApprovalRecord) -> ApprovalOutcome {
        record.status = ApprovalStatus::Pending;
        let notify = Arc::new(Notify::new());
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(record.id.clone(), notify.clone());
        let outcome = self.wait(&record, &notify).await;
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&record.id);
        outcome
    }

    async fn wait(&self, record: &ApprovalRecord, notify: &Notify) -> ApprovalOutcome {
        if let Err(e) = self.store.insert(record).await {
            return ApprovalOutcome::Failed(e.to_string());
        }
        tracing::info!(id = %record.id, tool = %record.tool, "approval requested: {}", record.description);
        for c in self.channels() {
            c.post(record).await;
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            match self.store.get(&record.id).await {
                Ok(Some(r)) if r.status != ApprovalStatus::Pending => {
                    // Told where the request was posted, by the instance that posted it,
                    // wherever it was decided (here, another process, another member).
                    for c in self.channels() {
                        c.outcome(&r).await;
                    }
                    return outcome_of(&r);
                }
                Ok(Some(_)) => {}
                Ok(None) => return ApprovalOutcome::Failed("the request vanished".into()),
                Err(e) => return ApprovalOutcome::Failed(e.to_string()),
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return match self
                    .store
                    .decide(
                        &record.id,
                        ApprovalStatus::Timeout,
                        None,
                        Some("timeout"),
                        now_secs(),
                    )
                    .await
                {
                    Ok(true) => {
                        if let Ok(Some(r)) = self.store.get(&record.id).await {
                            for c in self.channels() {
                                c.outcome(&r).await;
                            }
                        }
                        ApprovalOutcome::TimedOut
                    }
                    // Decided at the last moment: take that decision.
                    Ok(false) => match self.store.get(&record.id).await {
                        Ok(Some(r)) => {
                            for c in self.channels() {
                                c.outcome(&r).await;
                            }
                            outcome_of(&r)
                        }
                        _ => ApprovalOutcome::TimedOut,
                    },
                    Err(e) => ApprovalOutcome::Failed(e.to_string()),
                };
            }
            let nap = self.poll.min(deadline - now);
            let _ = tokio::time::timeout(nap, notify.notified()).await;
        }
    }

    /// Decides request `id` as `principal`. Only approvers may; only pending requests can be.
    pub async fn decide(
        &self,
        id: &str,
        approve: bool,
        principal: &Principal,
        reason: Option<&str>,
    ) -> Result<ApprovalRecord, DecideError> {
        if !self.policy.may_approve(principal) {
            return Err(DecideError::NotApprover(principal.to_string()));
        }
        decide_in(self.store.as_ref(), id, approve, principal, reason).await?;
        if let Some(n) = self
            .waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            n.notify_one();
        }
        let r = self
            .store
            .get(id)
            .await
            .map_err(DecideError::Store)?
            .ok_or_else(|| DecideError::NotFound(id.to_owned()))?;
        Ok(r)
    }

    /// Pending requests older than the timeout become `timeout` (run at start: their callers
    /// are gone). Returns how many.
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        let now = now_secs();
        self.store
            .expire(now - self.timeout.as_secs() as i64, now)
            .await
    }

    /// The policy (who may approve).
    pub fn policy(&self) -> &Arc<AccessPolicy> {
        &self.policy
    }
}

/// Records a decision straight in `store` (the CLI without a running server uses this; the
/// waiting process notices on its next poll). The caller checks who may decide.
pub async fn decide_in(
    store: &dyn ApprovalStore,
    id: &str,
    approve: bool,
    principal: &Principal,
    reason: Option<&str>,
) -> Result<(), DecideError> {
    let status = if approve {
        ApprovalStatus::Approved
    } else {
        ApprovalStatus::Denied
    };
    let who = principal.to_string();
    match store
        .decide(id, status, Some(&who), reason, now_secs())
        .await
        .map_err(DecideError::Store)?
    {
        true => Ok(()),
        false => match store.get(id).await.map_err(DecideError::Store)? {
            None => Err(DecideError::NotFound(id.to_owned())),
            Some(r) => Err(DecideError::NotPending {
                id: id.to_owned(),
                status: r.status.as_str(),
            }),
        },
    }
}

fn outcome_of(r: &ApprovalRecord) -> ApprovalOutcome {
    let by = r.approver.clone().unwrap_or_else(|| "unknown".into());
    match r.status {
        ApprovalStatus::Approved => ApprovalOutcome::Approved { by },
        ApprovalStatus::Denied => ApprovalOutcome::Denied {
            by,
            reason: r.reason.clone(),
        },
        ApprovalStatus::Timeout => ApprovalOutcome::TimedOut,
        ApprovalStatus::Pending => ApprovalOutcome::Failed("still pending".into()),
    }
}

#[async_trait]
impl crate::goal::Gate for Approvals {
    async fn approve(
        &self,
        request_id: &str,
        agent_id: Option<&str>,
        principal: &str,
        args: Value,
        description: &str,
    ) -> Result<String, String> {
        let record = ApprovalRecord {
            id: format!("goal-{request_id}"),
            agent_id: agent_id.map(str::to_owned),
            tool: "goal_decide".into(),
            principal: principal.to_owned(),
            args,
            description: description.to_owned(),
            status: ApprovalStatus::Pending,
            approver: None,
            reason: None,
            created_at: now_secs(),
            decided_at: None,
        };
        match self.request(record).await {
            ApprovalOutcome::Approved { by } => Ok(by),
            ApprovalOutcome::Denied { by, reason } => Err(format!(
                "{by} refused the decision{}",
                reason.map(|r| format!(": {r}")).unwrap_or_default()
            )),
            ApprovalOutcome::TimedOut => {
                Err("nobody approved the decision in time; it stays open".into())
            }
            other => Err(format!("the decision was not approved: {other:?}")),
        }
    }
}
