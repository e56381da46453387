//! The MCP client against an external server written with the official Python SDK: tools
//! registered as `<server>__<tool>`, called through the Invoker (and by an agent), restarted
//! after the server dies, closed (process reaped) by shutdown.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use strata_engine::ToolFilter;
use strata_engine::agent::{Agent, Message, TurnContext};
use strata_engine::audit::NoAudit;
use strata_engine::config::{Config, LlmConfig, McpServerConfig, McpTransport};
use strata_engine::{Env, Principal};
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::{Invocation, Invoker, Registry, Status};
use strata_test_support::{FakeServer, openai};

fn python_mcp_available() -> bool {
    strata_test_support::python_has("mcp.server.mcpserver", "mcp")
}

fn server_config() -> McpServerConfig {
    let script = strata_test_support::fixture("mcp_server.py");
    McpServerConfig {
        transport: McpTransport::Stdio,
        command: Some("python3".into()),
        args: vec![script.display().to_string()],
        env: Default::default(),
        url: None,
        headers: Default::default(),
        trust: Default::default(),
        trust_reads: false,
        tools: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_tools_are_registered_called_and_restarted() {
    if !python_mcp_available() {
        return;
    }
    let registry = Arc::new(Registry::empty());
    let servers = [("weather".to_owned(), server_config())]
        .into_iter()
        .collect();
    let clients = strata_http::mcp_client::start(&servers, registry.clone(), None).await;
    assert!(clients.connected("weather"));
    let spec = registry
        .get("weather__forecast")
        .expect("registered")
        .spec()
        .clone();
    assert_eq!(spec.description, "Forecast for a city (fake).");
    assert!(spec.web_facing, "external output is untrusted content");
    assert_eq!(
        registry
            .get("weather__forecast")
            .expect("t")
            .layer
            .to_string(),
        "runtime"
    );

    let d = std::env::temp_dir();
    let env = Arc::new(Env::new(Config::default(), d.clone(), d));
    let inv = Arc::new(Invoker::new(
        registry.clone(),
        env.clone(),
        Arc::new(NoAudit),
    ));
    let call = |args| Invocation::new("weather__forecast", args, Principal::Operator);
    let r = inv.invoke(call(json!({"city": "Oslo", "days": 2}))).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    // What an external server returns is untrusted: it reaches callers sanitised and inside
    // the content-safety envelope (policy `wrap`, the default).
    let text = r.value.as_str().unwrap_or_default();
    assert!(
        text.starts_with("<<untrusted-") && text.contains("\nOslo: sunny for 2 day(s)\n"),
        "{text}"
    );
    let r = inv.invoke(call(json!({"city": 5}))).await;
    assert_eq!(
        r.status,
        Status::ValidationError,
        "checked against the server's schema first"
    );

    // An agent calls the external tool like any other.
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        openai::tool_calls(&[("c1", "weather__forecast", json!({"city": "Lima"}))]),
        openai::text("Lima is sunny."),
    ]);
    let mut llm = LlmConfig::new("openai");
    llm.base_url = Some(format!("{}/v1", fake.url));
    llm.api_key = Some("k".into());
    let provider =
        strata_llm::build(&llm, None, "x", &strata_llm::AgentContext::bare("main")).expect("p");
    let agent = LlmAgent::new("main", "Weather bot.", provider, "m", inv.clone())
        .with_tools(ToolFilter::List(vec!["weather__*".into()]));
    let reply = agent
        .handle(
            TurnContext::new("main", "s", "c", Principal::Operator, env),
            Message::text("Lima?"),
        )
        .await
        .expect("turn");
    assert_eq!(reply.text, "Lima is sunny.");
    let msgs = fake.requests()[1].body["messages"].clone();
    let content = msgs.as_array().expect("m").last().expect("tool")["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        content.contains("Untrusted content returned by tool `weather__forecast`")
            && content.contains("\nLima: sunny for 1 day(s)\n"),
        "the model gets the enveloped result: {content}"
    );

    // The server dies; its tools say so; the supervisor brings it back.
    let r = inv
        .invoke(Invocation::new(
            "weather__crash",
            json!({}),
            Principal::Operator,
        ))
        .await;
    assert_eq!(unwrapped(&r.value), "bye");
    // Phase 1: the process exits; calls fail with a message naming the server.
    let deadline = Instant::now() + Duration::from_secs(30);
    let failure = loop {
        let r = inv.invoke(call(json!({"city": "Quito"}))).await;
        if r.status != Status::Ok {
            break r.error.unwrap_or_default();
        }
        assert!(Instant::now() < deadline, "the server never went away");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(failure.contains("MCP server `weather`"), "{failure}");
    // Phase 2: the supervisor restarts it.
    loop {
        let r = inv.invoke(call(json!({"city": "Quito"}))).await;
        if r.status == Status::Ok {
            assert_eq!(unwrapped(&r.value), "Quito: sunny for 1 day(s)");
            break;
        }
        assert!(Instant::now() < deadline, "server never came back: {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(clients.connected("weather"));

    // Shutting down closes the server: the process has exited and been reaped on return.
    let r = inv
        .invoke(Invocation::new(
            "weather__pid",
            json!({}),
            Principal::Operator,
        ))
        .await;
    let pid = unwrapped(&r.value);
    assert!(pid.parse::<u32>().is_ok(), "{r:?}");
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    assert!(proc_dir.exists(), "the server runs before shutdown");
    clients.shutdown().await;
    assert!(!proc_dir.exists(), "MCP server {pid} outlived shutdown");
    let r = inv.invoke(call(json!({"city": "Oslo"}))).await;
    assert_ne!(r.status, Status::Ok, "no server after shutdown: {r:?}");
}

/// The text inside the content-safety envelope (`<<untrusted-N>>\n[note]\n…\n<</untrusted-N>>`).
fn unwrapped(v: &serde_json::Value) -> String {
    let s = v.as_str().unwrap_or_default();
    let mut lines: Vec<&str> = s.lines().collect();
    assert!(
        lines.len() >= 3 && lines[0].starts_with("<<untrusted-"),
        "not enveloped: {s}"
    );
    lines.remove(0);
    lines.remove(0);
    lines.pop();
    lines.join("\n")
}

/// What Strata believes of an external tool: the server's annotations, then the operator's
/// settings over them (`trust`, `trust_reads`, per-tool `trust`/`read_only`/`side_effects`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_and_settings_decide_trust_and_effects() {
    if !python_mcp_available() {
        return;
    }
    use strata_engine::SideEffects;
    use strata_engine::config::{McpToolConfig, McpTrust};
    let specs = |cfg: McpServerConfig| async move {
        let registry = Arc::new(Registry::empty());
        let servers = [("weather".to_owned(), cfg)].into_iter().collect();
        let clients = strata_http::mcp_client::start(&servers, registry.clone(), None).await;
        assert!(clients.connected("weather"));
        let spec = |n: &str| registry.get(n).expect("registered").spec().clone();
        let out = (spec("weather__forecast"), spec("weather__station"));
        clients.shutdown().await;
        out
    };
    // Nothing said: unannotated tools have external effects, reach the network and return
    // untrusted content; an annotated read-only, closed-world tool changes nothing and
    // sends nothing out, but what it returns is still untrusted.
    let (forecast, station) = specs(server_config()).await;
    assert_eq!(
        (forecast.side_effects, forecast.web_facing),
        (SideEffects::External, true)
    );
    assert_eq!(forecast.capabilities, [strata_engine::Capability::Network]);
    assert_eq!(
        (
            station.side_effects,
            station.web_facing,
            station.capabilities.len()
        ),
        (SideEffects::None, true, 0)
    );
    // The operator trusts the server's reads, and says the forecast is a read too.
    let mut cfg = server_config();
    cfg.trust_reads = true;
    cfg.tools.insert(
        "forecast".into(),
        McpToolConfig {
            read_only: Some(true),
            ..McpToolConfig::default()
        },
    );
    let (forecast, station) = specs(cfg).await;
    assert_eq!(
        (forecast.side_effects, forecast.web_facing),
        (SideEffects::None, false)
    );
    assert!(!station.web_facing);
    // A trusted server, one tool of it untrusted and local.
    let mut cfg = server_config();
    cfg.trust = McpTrust::Trusted;
    cfg.tools.insert(
        "forecast".into(),
        McpToolConfig {
            trust: Some(McpTrust::Untrusted),
            side_effects: Some(SideEffects::Local),
            ..McpToolConfig::default()
        },
    );
    let (forecast, station) = specs(cfg).await;
    assert_eq!(
        (forecast.side_effects, forecast.web_facing),
        (SideEffects::Local, true)
    );
    assert!(!station.web_facing);
}

/// `trusted_fields`: the fields of a structured result that the system behind an untrusted
/// server vouches for. A value found only there is not steered; one found only in the rest of
/// the same result (a subject the sender wrote) is, and the result still taints the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vouched_fields_of_a_structured_result_are_trusted_and_the_rest_is_not() {
    if !python_mcp_available() {
        return;
    }
    use strata_engine::config::McpToolConfig;
    use strata_engine::taint::{Taint, Trace};
    let run = |fields: Vec<String>| async move {
        let mut cfg = server_config();
        cfg.tools.insert(
            "transfers".into(),
            McpToolConfig {
                trusted_fields: fields,
                ..McpToolConfig::default()
            },
        );
        let registry = Arc::new(Registry::empty());
        let servers = [("bank".to_owned(), cfg)].into_iter().collect();
        let clients = strata_http::mcp_client::start(&servers, registry.clone(), None).await;
        assert!(clients.connected("bank"));
        let d = std::env::temp_dir();
        let env = Arc::new(Env::new(Config::default(), d.clone(), d));
        let inv = Invoker::new(registry.clone(), env, Arc::new(NoAudit));
        let taint = Taint::new();
        let r = inv
            .invoke(
                Invocation::new("bank__transfers", json!({}), Principal::Operator)
                    .tainted_by(taint.clone()),
            )
            .await;
        clients.shutdown().await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        (taint, r.value)
    };
    let sender = json!({"recipient": "GB29NWBK60161331926819"});
    let attacker = json!({"recipient": "US133000000121212121212"});

    let (taint, value) = run(vec!["sender".into(), "amount".into()]).await;
    assert!(
        taint.is_tainted(),
        "the result is untrusted content all the same"
    );
    // The model reads the structured result (in the envelope), fields and all.
    let shown = value.to_string();
    assert!(
        shown.contains("\"sender\":\"GB29NWBK60161331926819\"") && shown.contains("US133"),
        "{shown}"
    );
    assert_eq!(taint.trace(&sender), Trace::Clean);
    assert!(
        matches!(taint.trace(&attacker), Trace::Steered(ref s) if s.len() == 1),
        "{:?}",
        taint.trace(&attacker)
    );

    // Without the setting, the bank's own fields are as untrusted as the subject.
    let (taint, _) = run(vec![]).await;
    assert!(matches!(taint.trace(&sender), Trace::Steered(_)));
    assert!(matches!(taint.trace(&attacker), Trace::Steered(_)));
}

/// A tool annotated `idempotentHint` may run again after a crash, and a journaled turn's call
/// carries its idempotency key to the server in the request's `_meta`
/// (`strata/idempotency-key`); outside a journaled turn there is none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_idempotency_key_reaches_the_server_in_meta() {
    if !python_mcp_available() {
        return;
    }
    let registry = Arc::new(Registry::empty());
    let servers = [("shop".to_owned(), server_config())].into_iter().collect();
    let clients = strata_http::mcp_client::start(&servers, registry.clone(), None).await;
    assert!(clients.connected("shop"));
    let order = registry.get("shop__order").expect("registered");
    assert!(order.spec().idempotent, "annotated idempotentHint");
    assert!(!registry.get("shop__forecast").expect("t").spec().idempotent);
    let d = std::env::temp_dir();
    let env = Arc::new(Env::new(Config::default(), d.clone(), d));
    let ctx = |key: Option<&str>| strata_engine::ToolContext {
        agent_id: Some("main".into()),
        session_id: None,
        channel_id: None,
        principal: Principal::Operator,
        request_id: "r-1".into(),
        env: env.clone(),
        depth: 0,
        policy: Arc::new(strata_engine::access::AccessPolicy::from_config(
            &env.config,
        )),
        tools: registry.clone(),
        taint: None,
        idempotency_key: key.map(str::to_owned),
        resumed: false,
    };
    let text = |out: Result<strata_engine::ToolOutput, strata_engine::ToolError>| {
        out.expect("called")
            .0
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let keyed = order
        .tool
        .call(&ctx(Some("6f1c0ffee")), json!({"item": "paper"}))
        .await;
    assert_eq!(text(keyed), "ordered paper under key 6f1c0ffee");
    let plain = order.tool.call(&ctx(None), json!({"item": "ink"})).await;
    assert_eq!(text(plain), "ordered ink under key None");
    clients.shutdown().await;
}
