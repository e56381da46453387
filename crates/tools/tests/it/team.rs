//! The team tools over a real `config/team.json`, through the Invoker with a real approvals
//! hub: every write waits for a human; tier changes need an owner.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use strata_engine::audit::NoAudit;
use strata_engine::config::{Config, TeamConfig};
use strata_engine::{Env, Principal};
use strata_runtime::approval::{ApprovalStatus, Approvals, MemoryApprovalStore};
use strata_runtime::{Invocation, Invoker, Registry, Status};

const TEAM: &str = r#"{
  "people": [
    {"id": "olivia", "name": "Owner Example", "access": "owner", "contacts": {"discord": "1"}},
    {"id": "adam", "name": "Admin Example", "access": "admin", "contacts": {}}
  ],
  "agents": [{"id": "main", "agent_tier": "coordinator"}],
  "admin_users": []
}"#;

pub(crate) struct World {
    pub(crate) invoker: Arc<Invoker>,
    approvals: Arc<Approvals>,
    pub(crate) dir: tempfile::TempDir,
}

pub(crate) fn world() -> World {
    let _ = strata_tools::link();
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("config")).expect("config");
    std::fs::write(dir.path().join("config/team.json"), TEAM).expect("team");
    let c = Config {
        team: serde_json::from_str(TEAM).expect("team parses"),
        ..Config::default()
    };
    let env = Arc::new(Env::new(
        c,
        dir.path().to_path_buf(),
        dir.path().join("data"),
    ));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let inv = Invoker::new(reg, env, Arc::new(NoAudit));
    let approvals = Arc::new(
        Approvals::new(
            Arc::new(MemoryApprovalStore::default()),
            inv.policy().clone(),
        )
        .with_timeout(Duration::from_secs(30)),
    );
    World {
        invoker: Arc::new(inv.with_approvals(approvals.clone())),
        approvals,
        dir,
    }
}

impl World {
    fn team(&self) -> TeamConfig {
        let text = std::fs::read_to_string(self.dir.path().join("config/team.json")).expect("read");
        serde_json::from_str(&text).expect("valid team file")
    }

    /// Calls `tool` as `who`; when it asks for approval, the owner decides `approve`.
    pub(crate) async fn call(
        &self,
        who: &str,
        tool: &str,
        args: Value,
        approve: bool,
    ) -> strata_runtime::InvocationResult {
        let inv = self.invoker.clone();
        let call = Invocation::new(tool, args, Principal::Person { id: who.into() });
        let task = tokio::spawn(async move { inv.invoke(call).await });
        for _ in 0..300 {
            if task.is_finished() {
                break;
            }
            let pending = self
                .approvals
                .store()
                .list(Some(ApprovalStatus::Pending), 10)
                .await
                .expect("list");
            if let Some(r) = pending.first() {
                self.approvals
                    .decide(
                        &r.id,
                        approve,
                        &Principal::Person {
                            id: "olivia".into(),
                        },
                        None,
                    )
                    .await
                    .expect("decide");
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        task.await.expect("join")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_get_read_the_file_without_approval() {
    let w = world();
    let r = w.call("adam", "team_list", json!({}), false).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["people"][0]["id"], "olivia");
    assert_eq!(r.value["agents"][0]["agent_tier"], "coordinator");
    let r = w
        .call("adam", "team_get", json!({"id": "main"}), false)
        .await;
    assert_eq!(r.value["kind"], "agent");
    let r = w
        .call("adam", "team_get", json!({"id": "ghost"}), false)
        .await;
    assert_eq!(r.status, Status::ValidationError);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_wait_for_approval_and_a_denial_changes_nothing() {
    let w = world();
    let before = w.team();
    let add = json!({"kind": "person", "id": "sam", "name": "Staff Example", "access": "staff", "contacts": {"discord": "42"}});
    let r = w.call("adam", "team_add", add.clone(), false).await;
    assert_eq!(r.status, Status::ApprovalDenied, "{r:?}");
    assert_eq!(w.team(), before);

    let r = w.call("adam", "team_add", add, true).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let team = w.team();
    let sam = team.people.iter().find(|p| p.id == "sam").expect("added");
    assert_eq!(sam.contacts["discord"], "42");
    assert!(
        r.value["note"]
            .as_str()
            .unwrap_or_default()
            .contains("next start")
    );

    // Duplicates and bad input are refused (after approval, before any write).
    let r = w
        .call(
            "adam",
            "team_add",
            json!({"kind": "agent", "id": "main", "agent_tier": "assistant"}),
            true,
        )
        .await;
    assert_eq!(r.status, Status::ValidationError, "{r:?}");
    let r = w
        .call(
            "adam",
            "team_add",
            json!({"kind": "person", "id": "../x", "name": "X", "access": "staff"}),
            true,
        )
        .await;
    assert_eq!(r.status, Status::ValidationError, "{r:?}");
    let r = w
        .call(
            "adam",
            "team_add",
            json!({"kind": "person", "id": "y", "access": "staff"}),
            true,
        )
        .await;
    assert_eq!(r.status, Status::ValidationError, "{r:?}");
    assert_eq!(w.team().people.len(), 3);

    // Name and contacts change; removal works; the file stays valid throughout.
    let r = w
        .call(
            "adam",
            "team_update",
            json!({"id": "sam", "name": "Sam Example", "contacts": {"discord": "43"}}),
            true,
        )
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["before"]["name"], "Staff Example");
    assert_eq!(r.value["after"]["contacts"]["discord"], "43");
    let r = w
        .call("adam", "team_remove", json!({"id": "sam"}), true)
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(w.team(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tier_changes_need_an_owner() {
    let w = world();
    let before = w.team();
    for (tool, args) in [
        ("team_update", json!({"id": "adam", "access": "owner"})),
        (
            "team_update",
            json!({"id": "main", "agent_tier": "privileged"}),
        ),
        (
            "team_add",
            json!({"kind": "person", "id": "eve", "name": "E", "access": "admin"}),
        ),
        (
            "team_add",
            json!({"kind": "agent", "id": "bot2", "agent_tier": "coordinator"}),
        ),
        ("team_remove", json!({"id": "olivia"})),
    ] {
        // Approved by a human, still refused: the caller is an admin, not an owner.
        let r = w.call("adam", tool, args, true).await;
        assert_eq!(r.status, Status::Error, "{tool}: {r:?}");
        assert!(
            r.error.unwrap_or_default().contains("only an owner"),
            "{tool}"
        );
    }
    assert_eq!(w.team(), before, "nothing was written");

    // The owner may (with approval), and an admin may add an assistant agent.
    let r = w
        .call(
            "olivia",
            "team_update",
            json!({"id": "main", "agent_tier": "privileged"}),
            true,
        )
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["after"]["agent_tier"], "privileged");
    let r = w
        .call(
            "adam",
            "team_add",
            json!({"kind": "agent", "id": "helper", "agent_tier": "assistant"}),
            true,
        )
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    // The last owner stays.
    let r = w
        .call("olivia", "team_remove", json!({"id": "olivia"}), true)
        .await;
    assert!(r.error.unwrap_or_default().contains("last owner"));
    let team = w.team();
    assert_eq!(team.agents.len(), 2);
    assert_eq!(team.people.len(), 2);
}
