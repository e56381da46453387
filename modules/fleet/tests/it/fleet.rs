//! The fleet tools against a fake Directus on 127.0.0.1 that records every request (method,
//! path, query, bearer, body) and answers in Directus' shapes, errors included.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use strata_engine::audit::NoAudit;
use strata_engine::config::Config;
use strata_engine::secret::{Secret, Vault};
use strata_engine::{Env, Principal};
use strata_runtime::{Invocation, Invoker, Registry, Status};

use strata_test_support::directus::TOKEN;

use strata_test_support::directus::{Log, Seen, fake};

struct OneKey(String);
impl Vault for OneKey {
    fn get(&self, key: &str) -> Option<Secret> {
        (key == "mind-token").then(|| Secret::new(self.0.clone()))
    }
    fn keys(&self) -> Vec<String> {
        vec!["mind-token".into()]
    }
}

fn invoker(fleet: Value, token: &str, dir: &std::path::Path) -> Invoker {
    assert_eq!(strata_mod_fleet::link(), "fleet");
    let mut c = Config::default();
    c.modules.insert("fleet".into(), fleet);
    c.security.network.allow = vec!["127.0.0.1/32".into()];
    // The operator is an owner; let owners skip approval here (gating is asserted below).
    c.security.hitl.owner_bypass = true;
    // Agents calling the Mind tools need the `secrets` capability.
    c.security
        .access_control
        .default_capabilities
        .push(strata_engine::Capability::Secrets);
    let env =
        Env::new(c, dir.to_path_buf(), dir.join("data")).with_vault(Arc::new(OneKey(token.into())));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    Invoker::new(reg, Arc::new(env), Arc::new(NoAudit))
}

async fn call(inv: &Invoker, tool: &str, args: Value) -> strata_runtime::InvocationResult {
    let mut i = Invocation::new(tool, args, Principal::Operator);
    i.agent_id = None;
    inv.invoke(i).await
}

fn last(log: &Log) -> Seen {
    log.lock()
        .expect("lock")
        .last()
        .cloned()
        .expect("a request")
}

fn inner(v: &Value) -> Value {
    v.get("untrusted_content")
        .cloned()
        .unwrap_or_else(|| v.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mind_api_sends_bearer_requests_and_refuses_other_hosts() {
    let (url, log) = fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let inv = invoker(json!({"mind_url": url}), TOKEN, dir.path());

    let r = call(
        &inv,
        "mind_api",
        json!({"method": "get", "endpoint": "/items/things?limit=2"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["data"], json!([{"id": 1}, {"id": 2}]));
    let s = last(&log);
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("GET", "/items/things")
    );
    assert_eq!(s.query["limit"], "2");
    assert_eq!(s.auth, format!("Bearer {TOKEN}"));

    let r = call(
        &inv,
        "mind_api",
        json!({"method": "POST", "endpoint": "items/things", "data": {"name": "x"}}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(last(&log).json(), json!({"name": "x"}));
    let r = call(
        &inv,
        "mind_api",
        json!({"method": "DELETE", "endpoint": "/items/things/3"}),
    )
    .await;
    assert_eq!(r.value, json!({"ok": true, "status": 204}));
    // A full URL on the Mind's own origin is fine; another host never gets the token.
    let n = log.lock().expect("lock").len();
    let r = call(
        &inv,
        "mind_api",
        json!({"method": "GET", "endpoint": format!("{url}/items/things")}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    for evil in [
        "https://evil.example.com/items/x",
        "http://127.0.0.2:1/items/x",
        "//evil.example.com/x",
        "/items/../../admin",
    ] {
        let r = call(&inv, "mind_api", json!({"method": "GET", "endpoint": evil})).await;
        assert_eq!(r.status, Status::ValidationError, "{evil}: {r:?}");
    }
    assert_eq!(
        log.lock().expect("lock").len(),
        n + 1,
        "refused calls sent nothing"
    );
    let r = call(&inv, "mind_api", json!({"method": "PUT", "endpoint": "/x"})).await;
    assert_eq!(r.status, Status::ValidationError);
    let r = call(
        &inv,
        "mind_api",
        json!({"method": "GET", "endpoint": "/x", "data": {}}),
    )
    .await;
    assert_eq!(r.status, Status::ValidationError);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_401_404_500_are_explained() {
    let (url, _log) = fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let wrong = invoker(json!({"mind_url": url}), "wrong-token", dir.path());
    let r = call(
        &wrong,
        "mind_api",
        json!({"method": "GET", "endpoint": "/items/x"}),
    )
    .await;
    assert_eq!(r.status, Status::Error);
    let e = r.error.unwrap_or_default();
    assert!(
        e.contains("401") && e.contains("Invalid user credentials") && e.contains("mind-token"),
        "{e}"
    );
    assert!(
        !e.contains("wrong-token"),
        "the token never appears in errors"
    );

    let inv = invoker(json!({"mind_url": url}), TOKEN, dir.path());
    let r = call(
        &inv,
        "fleet_note",
        json!({"action": "read", "note_id": "404"}),
    )
    .await;
    let e = r.error.unwrap_or_default();
    assert!(e.contains("404") && e.contains("doesn't exist"), "{e}");
    let r = call(
        &inv,
        "mind_api",
        json!({"method": "GET", "endpoint": "/boom"}),
    )
    .await;
    let e = r.error.unwrap_or_default();
    assert!(
        e.contains("500") && e.contains("Database is on fire") && e.contains("try again"),
        "{e}"
    );

    // Not configured / no vault key: clear errors, no request.
    let none = invoker(json!({}), TOKEN, dir.path());
    let r = call(
        &none,
        "fleet_note",
        json!({"action": "search", "body": "x"}),
    )
    .await;
    assert!(
        r.error
            .unwrap_or_default()
            .contains("modules.fleet.mind_url")
    );
    let mut c = Config::default();
    c.modules.insert("fleet".into(), json!({"mind_url": url}));
    let env = Env::new(c.clone(), dir.path().to_path_buf(), dir.path().join("data"));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let gated = Invoker::new(reg.clone(), Arc::new(env), Arc::new(NoAudit));
    // mind_api is gated: without an approver it does not run, not even for the operator.
    let r = call(
        &gated,
        "mind_api",
        json!({"method": "GET", "endpoint": "/x"}),
    )
    .await;
    assert_eq!(r.status, Status::ApprovalDenied, "{r:?}");
    c.security.hitl.owner_bypass = true;
    let env = Env::new(c, dir.path().to_path_buf(), dir.path().join("data"));
    let novault = Invoker::new(reg, Arc::new(env), Arc::new(NoAudit));
    let r = call(
        &novault,
        "mind_api",
        json!({"method": "GET", "endpoint": "/x"}),
    )
    .await;
    let e = r.error.unwrap_or_default();
    assert!(e.contains("mind-token") && e.contains("no vault"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_notes_create_read_update_search() {
    let (url, log) = fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let inv = invoker(json!({"mind_url": url}), TOKEN, dir.path());
    let mut i = Invocation::new(
        "fleet_note",
        json!({"action": "create", "subject": "Disk full", "body": "host-a at 95%", "target_user": "ops",
               "priority": "high", "note_type": "repair_request", "tags": ["disk"]}),
        Principal::Operator,
    );
    i.agent_id = Some("scout".into());
    let r = inv.invoke(i).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["id"], 17);
    let s = last(&log);
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("POST", "/items/fleet_notes")
    );
    assert_eq!(
        s.json(),
        json!({"subject": "Disk full", "body": "host-a at 95%", "target_user": "ops", "from_user": "scout",
               "priority": "high", "note_type": "repair_request", "status": "sent", "tags": ["disk"]})
    );
    // Missing fields are refused before any request.
    let n = log.lock().expect("lock").len();
    let r = call(
        &inv,
        "fleet_note",
        json!({"action": "create", "subject": "x"}),
    )
    .await;
    assert_eq!(r.status, Status::ValidationError);
    let r = call(
        &inv,
        "fleet_note",
        json!({"action": "update", "note_id": "17"}),
    )
    .await;
    assert_eq!(r.status, Status::ValidationError);
    let r = call(
        &inv,
        "fleet_note",
        json!({"action": "create", "subject": "x", "body": "y", "priority": "urgent"}),
    )
    .await;
    assert_eq!(
        r.status,
        Status::ValidationError,
        "enums are checked by the schema"
    );
    assert_eq!(log.lock().expect("lock").len(), n);

    let r = call(
        &inv,
        "fleet_note",
        json!({"action": "read", "note_id": "17"}),
    )
    .await;
    assert_eq!(r.value["subject"], "Disk");
    assert_eq!(last(&log).path, "/items/fleet_notes/17");

    let r = call(
        &inv,
        "fleet_note",
        json!({"action": "read", "target_user": "ops", "status": "sent"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok);
    let s = last(&log);
    let filter: Value = serde_json::from_str(&s.query["filter"]).expect("filter json");
    assert_eq!(
        filter,
        json!({"target_user": {"_eq": "ops"}, "status": {"_eq": "sent"}})
    );
    assert_eq!(s.query["sort"], "-date_created");

    let r = call(
        &inv,
        "fleet_note",
        json!({"action": "update", "note_id": "17", "status": "resolved"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok);
    let s = last(&log);
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("PATCH", "/items/fleet_notes/17")
    );
    assert_eq!(s.json(), json!({"status": "resolved"}));

    let r = call(
        &inv,
        "fleet_note",
        json!({"action": "search", "body": "disk", "note_type": "incident"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok);
    let s = last(&log);
    assert_eq!(s.query["search"], "disk");
    let filter: Value = serde_json::from_str(&s.query["filter"]).expect("filter json");
    assert_eq!(filter, json!({"note_type": {"_eq": "incident"}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_models_actions_map_to_directus_queries() {
    let (url, log) = fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let inv = invoker(json!({"mind_url": url}), TOKEN, dir.path());

    let r = call(
        &inv,
        "ai_models",
        json!({"action": "list", "category": "chat", "limit": 5}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(inner(&r.value), json!([{"id": 1}, {"id": 2}]));
    let s = last(&log);
    assert_eq!(s.query["limit"], "5");
    assert_eq!(s.query["filter"], r#"{"category":{"_eq":"chat"}}"#);

    call(&inv, "ai_models", json!({"action": "categories"})).await;
    let s = last(&log);
    assert_eq!(
        (
            s.query["groupBy[]"].as_str(),
            s.query["aggregate[count]"].as_str()
        ),
        ("category", "*")
    );
    call(&inv, "ai_models", json!({"action": "budget"})).await;
    let s = last(&log);
    assert_eq!(s.query["aggregate[sum]"], "monthly_budget,monthly_spend");
    call(
        &inv,
        "ai_models",
        json!({"action": "search", "query": "vision"}),
    )
    .await;
    assert_eq!(last(&log).query["search"], "vision");

    let r = call(
        &inv,
        "ai_models",
        json!({"action": "update", "model_id": "m1", "data": {"monthly_budget": 40}}),
    )
    .await;
    assert_eq!(r.status, Status::Ok);
    let s = last(&log);
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("PATCH", "/items/ai_models/m1")
    );
    assert_eq!(s.json(), json!({"monthly_budget": 40}));

    let r = call(&inv, "ai_models", json!({"action": "batch_update", "updates": [{"id": "m1", "category": "chat"}, {"id": "m2", "category": "code"}]})).await;
    assert_eq!(r.status, Status::Ok);
    let s = last(&log);
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("PATCH", "/items/ai_models")
    );
    assert_eq!(s.json().as_array().map(Vec::len), Some(2));
    let r = call(
        &inv,
        "ai_models",
        json!({"action": "batch_update", "updates": [{"category": "chat"}]}),
    )
    .await;
    assert_eq!(r.status, Status::ValidationError);

    // fetch_spec follows the model's spec_url through the network guard.
    let r = call(
        &inv,
        "ai_models",
        json!({"action": "fetch_spec", "model_id": "m1"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(
        inner(&r.value)["content"],
        "Model M1: 128k context, tool use."
    );
    assert!(
        r.value.get("content_safety").is_some(),
        "web-facing output is wrapped"
    );
    let r = call(
        &inv,
        "ai_models",
        json!({"action": "fetch_spec", "model_id": "m2"}),
    )
    .await;
    assert!(r.error.unwrap_or_default().contains("no spec_url"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_sends_multipart_with_fields_before_the_file() {
    let (url, log) = fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("tmp")).expect("tmp");
    std::fs::write(dir.path().join("tmp/report.txt"), "quarterly numbers").expect("w");
    std::fs::create_dir_all(dir.path().join("config")).expect("cfg");
    std::fs::write(dir.path().join("config/secrets.enc"), "nope").expect("w");
    let inv = invoker(
        json!({"mind_url": url, "max_upload_mb": 1}),
        TOKEN,
        dir.path(),
    );

    let r = call(
        &inv,
        "upload_file_to_cms",
        json!({"file_path": "tmp/report.txt", "title": "Q3 report", "folder": "f-42"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["id"], "9b1c-file");
    let s = last(&log);
    assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", "/files"));
    assert!(
        s.content_type.starts_with("multipart/form-data; boundary="),
        "{}",
        s.content_type
    );
    let body = String::from_utf8_lossy(&s.body);
    let t = body.find("name=\"title\"").expect("title");
    let f = body.find("name=\"folder\"").expect("folder");
    let file = body
        .find("name=\"file\"; filename=\"report.txt\"")
        .expect("file part");
    assert!(t < file && f < file, "fields precede the file: {body}");
    assert!(
        body.contains("Q3 report") && body.contains("f-42") && body.contains("quarterly numbers")
    );
    assert!(body.contains("Content-Type: text/plain"));

    // The path guard applies; size is capped.
    let n = log.lock().expect("lock").len();
    for bad in ["config/secrets.enc", "../outside.txt", "/etc/passwd"] {
        let r = call(&inv, "upload_file_to_cms", json!({"file_path": bad})).await;
        assert_eq!(r.status, Status::ValidationError, "{bad}: {r:?}");
    }
    std::fs::write(dir.path().join("tmp/big.bin"), vec![0u8; (1 << 20) + 1]).expect("w");
    let r = call(
        &inv,
        "upload_file_to_cms",
        json!({"file_path": "tmp/big.bin"}),
    )
    .await;
    assert!(r.error.unwrap_or_default().contains("max_upload_mb"));
    assert_eq!(log.lock().expect("lock").len(), n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_agent_runs_the_configured_cli_with_a_timeout() {
    let dir = tempfile::tempdir().expect("tmp");
    let (url, _log) = fake().await;
    // The prompt as an argument (never through a shell: quotes and $() stay literal).
    let inv = invoker(
        json!({"mind_url": url, "agent_command": ["/bin/sh", "-c", "printf 'got: %s' \"$1\"", "sh", "{prompt}"]}),
        TOKEN,
        dir.path(),
    );
    let r = call(
        &inv,
        "call_agent",
        json!({"prompt": "summarise $(whoami) 'now'"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["output"], "got: summarise $(whoami) 'now'");

    // Without the placeholder the prompt arrives on stdin.
    let inv = invoker(json!({"agent_command": ["/bin/cat"]}), TOKEN, dir.path());
    let r = call(&inv, "call_agent", json!({"prompt": "via stdin"})).await;
    assert_eq!(r.value["output"], "via stdin");

    // Failure and timeout (the whole group goes: the background sleeper too).
    let inv = invoker(
        json!({"agent_command": ["/bin/sh", "-c", "echo broke >&2; exit 3"]}),
        TOKEN,
        dir.path(),
    );
    let r = call(&inv, "call_agent", json!({"prompt": "x"})).await;
    let e = r.error.unwrap_or_default();
    assert!(e.contains("exited with 3") && e.contains("broke"), "{e}");
    let inv = invoker(
        json!({"agent_command": ["/bin/sh", "-c", "echo working; sleep 976.5 & sleep 976.5"]}),
        TOKEN,
        dir.path(),
    );
    let r = call(&inv, "call_agent", json!({"prompt": "x", "timeout": 1})).await;
    let e = r.error.unwrap_or_default();
    assert!(
        e.contains("did not finish within 5 s") && e.contains("working"),
        "{e}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let survivors = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter(|p| {
                    std::fs::read(p.path().join("cmdline"))
                        .map(|c| String::from_utf8_lossy(&c).contains("976.5"))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(survivors, 0);

    let off = invoker(json!({}), TOKEN, dir.path());
    let r = call(&off, "call_agent", json!({"prompt": "x"})).await;
    assert!(r.error.unwrap_or_default().contains("agent_command"));
}

#[test]
fn gating_and_capabilities_are_declared() {
    let _ = strata_mod_fleet::link();
    let reg = Registry::from_inventory(&[]).expect("registry");
    let spec = |n: &str| reg.get(n).expect(n).spec().clone();
    assert!(spec("mind_api").hitl && spec("call_agent").hitl);
    assert!(
        !spec("fleet_note").hitl && !spec("ai_models").hitl && !spec("upload_file_to_cms").hitl
    );
    assert!(spec("ai_models").web_facing);
}
