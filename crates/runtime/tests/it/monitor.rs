//! The behaviour monitor through the Invoker: a rule alerts once per agent and session; its
//! repeats are in the audit log (`alert_repeat`), not at the alert sinks.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use strata_engine::audit::{Alert, AlertSink};
use strata_engine::config::Config;
use strata_engine::{Env, Principal, SideEffects, ToolOutput, ToolSpec};
use strata_runtime::{Invocation, Invoker, Registry, Status};
use strata_store::JsonlAudit;

#[derive(Default)]
struct Sink(Mutex<Vec<Alert>>);

impl AlertSink for Sink {
    fn alert(&self, a: &Alert) {
        self.0.lock().map(|mut v| v.push(a.clone())).unwrap_or(());
    }
}

fn invoker(dir: &std::path::Path) -> (Invoker, Arc<Sink>, Arc<JsonlAudit>) {
    let mut c = Config::default();
    c.security.access_control.enabled = false;
    c.tools.timeout_secs = 5;
    let env = Arc::new(Env::new(c, dir.to_path_buf(), dir.join("data")));
    let reg = Arc::new(Registry::empty());
    let mut fetch = ToolSpec::new("fetch_page", "test", json!({"type": "object"}));
    fetch.web_facing = true;
    reg.register(fetch, |_, _| async {
        Ok(ToolOutput(json!("Sunny in Oslo.")))
    })
    .expect("register");
    let mut send = ToolSpec::new("send_mail", "test", json!({"type": "object"}));
    send.side_effects = SideEffects::External;
    reg.register(send, |_, _| async { Ok(ToolOutput(json!("sent"))) })
        .expect("register");
    let audit = Arc::new(JsonlAudit::open(&dir.join("audit.jsonl")).expect("audit"));
    let sink = Arc::new(Sink::default());
    let inv = Invoker::new(reg, env, audit.clone()).with_alert_sink(sink.clone());
    (inv, sink, audit)
}

fn call(tool: &str, session: &str) -> Invocation {
    let mut c = Invocation::new(tool, json!({}), Principal::Operator);
    c.agent_id = Some("scout".into());
    c.session_id = Some(session.into());
    c
}

#[tokio::test]
async fn a_pattern_alerts_once_per_session_and_its_repeats_are_logged() {
    let dir = tempfile::tempdir().expect("tmp");
    let (inv, sink, audit) = invoker(dir.path());
    let behaviour = |sink: &Sink| -> Vec<(String, String)> {
        sink.0
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a.kind == "behaviour")
            .map(|a| (a.rule, a.tool.unwrap_or_default()))
            .collect()
    };
    // Web content, then five sensitive calls in one session: each trips
    // `sensitive_after_web`, one alert is raised.
    assert_eq!(
        inv.invoke(call("fetch_page", "s1")).await.status,
        Status::Ok
    );
    for _ in 0..5 {
        assert_eq!(inv.invoke(call("send_mail", "s1")).await.status, Status::Ok);
    }
    let once = vec![("sensitive_after_web".to_owned(), "send_mail".to_owned())];
    assert_eq!(behaviour(&sink), once);
    // The same pattern in another session of the agent: alerted again, once.
    for _ in 0..3 {
        assert_eq!(inv.invoke(call("send_mail", "s2")).await.status, Status::Ok);
    }
    assert_eq!(behaviour(&sink), [once.clone(), once].concat());

    // The audit log has the two alerts and every repeat, counted.
    audit.close();
    let events: Vec<Value> = std::fs::read_to_string(audit.path())
        .expect("audit file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .filter(|v: &Value| v["rule"] == "sensitive_after_web")
        .collect();
    let seen: Vec<(&str, u64)> = events
        .iter()
        .map(|v| {
            (
                v["event"].as_str().unwrap_or_default(),
                v["repeat"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("alert", 0),
            ("alert_repeat", 1),
            ("alert_repeat", 2),
            ("alert_repeat", 3),
            ("alert_repeat", 4),
            ("alert", 0),
            ("alert_repeat", 1),
            ("alert_repeat", 2),
        ]
    );
    assert!(
        events.iter().all(|v| v["agent_id"] == "scout"
            && v["tool"] == "send_mail"
            && v["request_id"].is_string()),
        "{events:?}"
    );
}
