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

impl World {
    /// Runs `tool` as the owner the way a turn resumed after a crash runs a call that had
    /// started without an outcome: under its idempotency key, `is_resumed_call` true, past
    /// the approval the first run had.
    async fn call_again(&self, tool: &str, args: Value, resumed: bool) -> Result<Value, String> {
        let ctx = strata_engine::ToolContext {
            agent_id: Some("main".into()),
            session_id: None,
            channel_id: None,
            principal: Principal::Person {
                id: "olivia".into(),
            },
            request_id: "req-again".into(),
            env: self.invoker.env().clone(),
            depth: 0,
            policy: self.invoker.policy().clone(),
            tools: self.invoker.registry().clone(),
            taint: None,
            idempotency_key: Some("0123456789abcdef0123456789abcdef".into()),
            resumed,
        };
        let t = self.invoker.registry().get(tool).expect("registered");
        assert!(t.tool.spec().idempotent, "{tool} honours keys");
        t.tool
            .call(&ctx, args)
            .await
            .map(|o| o.0)
            .map_err(|e| e.to_string())
    }

    fn file(&self) -> (String, std::time::SystemTime) {
        let p = self.dir.path().join("config/team.json");
        let text = std::fs::read_to_string(&p).expect("read");
        (
            text,
            std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .expect("mtime"),
        )
    }
}

/// Team changes are states: run again after a crash, a change the first run made is reported
/// as made and the file is not written again; a fresh call that repeats one is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_changes_run_again_after_a_crash_change_nothing_twice() {
    let w = world();
    let casey =
        json!({"kind": "person", "id": "casey", "name": "Casey Example", "access": "staff"});
    let r = w.call("olivia", "team_add", casey.clone(), true).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let first = w.file();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The same add, run again: the member the first run added, no write.
    let again = w
        .call_again("team_add", casey.clone(), true)
        .await
        .expect("ok");
    assert_eq!(again["added"], r.value["added"]);
    assert_eq!(w.file(), first);
    // Not a resumed call: a repeat is an error, as before.
    let fresh = w.call_again("team_add", casey.clone(), false).await;
    assert!(fresh.is_err_and(|e| e.contains("already on the team")));
    // Resumed, but someone else by that id is there: not ours, refused.
    let other =
        json!({"kind": "person", "id": "casey", "name": "Another Casey", "access": "staff"});
    assert!(w.call_again("team_add", other, true).await.is_err());
    // An update that finds its values set writes nothing.
    let upd = json!({"id": "casey", "name": "Casey Q. Example"});
    assert_eq!(
        w.call("olivia", "team_update", upd.clone(), true)
            .await
            .status,
        Status::Ok
    );
    let updated = w.file();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let again = w.call_again("team_update", upd, true).await.expect("ok");
    assert_eq!(again["after"]["name"], "Casey Q. Example");
    assert_eq!(w.file(), updated);
    // A remove that finds nobody: removed by the first run.
    let rm = json!({"id": "casey"});
    assert_eq!(
        w.call("olivia", "team_remove", rm.clone(), true)
            .await
            .status,
        Status::Ok
    );
    let removed = w.file();
    let again = w
        .call_again("team_remove", rm.clone(), true)
        .await
        .expect("ok");
    assert_eq!(again["removed"]["id"], "casey");
    assert_eq!(w.file(), removed);
    assert!(w.call_again("team_remove", rm, false).await.is_err());
    assert!(w.team().people.iter().all(|p| p.id != "casey"));
}
