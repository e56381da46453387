//! The Invoker of a process, with its rate log, approvals, alerts and goals, and the
//! terminal's approval channel.

use std::sync::Arc;
use strata_runtime::EnvExt;

use strata_engine::Env;
use strata_engine::audit::AuditSink;
use strata_runtime::approval::{ApprovalChannel, ApprovalRecord, Approvals};
use strata_runtime::store::StateStore;
use strata_runtime::{Invoker, Registry};

/// The Invoker of a process with every stage wired: rate-limit counters and approval
/// requests in the state store (shared with other processes on the same data dir or
/// database).
pub fn invoker(
    env: Arc<Env>,
    registry: Arc<Registry>,
    audit: Arc<dyn AuditSink>,
    store: Arc<dyn StateStore>,
) -> (Arc<Invoker>, Arc<Approvals>) {
    let mut inv = Invoker::new(registry, env.clone(), audit).with_rate_log(store.clone());
    if let Some(ch) = env.config.security.alert_channel.clone() {
        inv = inv.with_alert_sink(Arc::new(strata_runtime::hub::ChannelAlerts::new(
            env.connectors().clone(),
            ch,
        )));
    }
    let approvals = Arc::new(Approvals::new(store.clone(), inv.policy().clone()));
    // Goal workstreams over the same store; their gated decisions wait on these approvals.
    // (A bad `goals.*` is refused at start by the schedules' check, which names the key.)
    match strata_runtime::goal::Goals::new(store, &env.config.goals) {
        Ok(goals) => {
            goals.attach_gate(approvals.clone());
            env.attach_goals(Arc::new(goals));
        }
        Err(e) => tracing::error!("goals are off: {e}"),
    }
    (Arc::new(inv.with_approvals(approvals.clone())), approvals)
}

/// Tells the terminal about approval requests (CLI runs: `strata invoke`, `chat`, `repl`).
pub struct StderrApprovals;

#[strata_engine::async_trait]
impl ApprovalChannel for StderrApprovals {
    fn name(&self) -> &str {
        "terminal"
    }

    async fn post(&self, r: &ApprovalRecord) {
        eprintln!(
            "approval needed: {}
  approve: strata approvals approve {id}
  deny:    strata approvals deny {id}",
            r.description,
            id = r.id
        );
    }

    async fn outcome(&self, r: &ApprovalRecord) {
        eprintln!(
            "approval {}: {}{}",
            r.id,
            r.status.as_str(),
            r.approver
                .as_deref()
                .map(|a| format!(" by {a}"))
                .unwrap_or_default()
        );
    }
}
