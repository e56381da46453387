//! A real turn (agent manager, agent loop against a fake OpenAI server, a tool through the
//! Invoker) under the export layer: a small OTLP/HTTP receiver on 127.0.0.1 decodes what the
//! exporter sends and finds the turn's span with the model calls and the tool call inside it.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::json;
use strata_engine::agent::Message;
use strata_engine::audit::NoAudit;
use strata_engine::config::{Config, LlmConfig};
use strata_engine::session::InMemoryStore;
use strata_engine::turns::TurnRequest;
use strata_engine::{Env, Principal, ToolFilter, ToolOutput, ToolSpec};
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::manager::AgentManager;
use strata_runtime::{Invoker, Registry};
use strata_test_support::{FakeServer, openai};
use tracing_subscriber::layer::SubscriberExt as _;

type Received = Arc<Mutex<Vec<(String, String, Bytes)>>>;

/// An OTLP/HTTP receiver on its own thread and runtime (the exporter's blocking client must
/// not wait on the runtime the test holds): path, content type and body of every request.
fn receiver() -> (String, Received) {
    let seen: Received = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let s = seen.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let app = axum::Router::new().fallback(
                move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: Bytes| {
                    let s = s.clone();
                    async move {
                        let ct = headers
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        s.lock().unwrap_or_else(|p| p.into_inner()).push((
                            uri.path().to_owned(),
                            ct,
                            body,
                        ));
                        // An empty ExportTraceServiceResponse.
                        ([("content-type", "application/x-protobuf")], Bytes::new())
                    }
                },
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(format!("http://{}", listener.local_addr().expect("addr")))
                .expect("send");
            let _ = axum::serve(listener, app).await;
        });
    });
    (rx.recv().expect("address"), seen)
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| match &v.value {
            Some(AnyValue::StringValue(s)) => Some(s.clone()),
            Some(AnyValue::IntValue(i)) => Some(i.to_string()),
            _ => None,
        })
}

#[tokio::test]
async fn a_turn_s_spans_reach_the_collector_with_the_calls_inside_the_turn() {
    let (endpoint, seen) = receiver();
    let (layer, export) = strata_otel::layer(&endpoint, "strata-test").expect("layer");
    let subscriber = tracing_subscriber::registry().with(layer);
    // This thread's spans (the test runtime is single-threaded) go to the export.
    let _guard = tracing::subscriber::set_default(subscriber);

    let llm = FakeServer::start().await.expect("fake llm");
    llm.script([
        openai::tool_calls(&[("c1", "echo_for_trace", json!({"word": "hi"}))]),
        openai::text("Said hi."),
    ]);
    let d = std::env::temp_dir();
    let env = Arc::new(Env::new(Config::default(), d.clone(), d));
    let registry = Arc::new(Registry::empty());
    registry
        .register(
            ToolSpec::new(
                "echo_for_trace",
                "Returns its arguments.",
                json!({"type": "object"}),
            ),
            |_ctx, args| async move { Ok(ToolOutput(args)) },
        )
        .expect("register");
    let invoker = Arc::new(Invoker::new(registry, env.clone(), Arc::new(NoAudit)));
    let mut cfg = LlmConfig::new("openai");
    cfg.base_url = Some(llm.url.clone());
    cfg.api_key = Some("test-key".into());
    cfg.model = Some("fake-model".into());
    let provider = strata_llm::build(
        &cfg,
        None,
        "defaults.llm",
        &strata_llm::AgentContext::bare("main"),
    )
    .expect("provider");
    let agent = LlmAgent::new("main", "Be brief.", provider, "fake-model", invoker)
        .with_tools(ToolFilter::All);
    let manager = AgentManager::new(
        vec![Arc::new(agent)],
        Arc::new(InMemoryStore::default()),
        env,
    );
    let reply = manager
        .turn(TurnRequest {
            agent_id: "main".into(),
            session_id: "s-otel".into(),
            stream: None,
            scopes: Vec::new(),
            channel_kind: None,
            channel_id: "c".into(),
            sender: Principal::Operator,
            message: Message::text("say hi"),
            depth: 0,
            taint: None,
            turn_id: Some("turn-otel-1".into()),
        })
        .await
        .expect("turn");
    assert_eq!(reply.text, "Said hi.");
    export.shutdown().expect("flushed");

    let received = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(!received.is_empty(), "nothing reached the collector");
    let mut spans: Vec<Span> = Vec::new();
    let mut services = Vec::new();
    for (path, ct, body) in &received {
        assert_eq!(path, "/v1/traces");
        assert_eq!(ct, "application/x-protobuf");
        let req = ExportTraceServiceRequest::decode(body.as_ref()).expect("OTLP protobuf");
        for rs in req.resource_spans {
            if let Some(r) = &rs.resource {
                services.extend(
                    r.attributes
                        .iter()
                        .filter(|a| a.key == "service.name")
                        .filter_map(|a| match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                            Some(AnyValue::StringValue(s)) => Some(s.clone()),
                            _ => None,
                        }),
                );
            }
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    assert!(
        services.iter().all(|s| s == "strata-test") && !services.is_empty(),
        "{services:?}"
    );
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let turns = named("turn");
    assert_eq!(
        turns.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let turn = turns[0];
    assert_eq!(attr(turn, "turn_id").as_deref(), Some("turn-otel-1"));
    assert_eq!(attr(turn, "agent").as_deref(), Some("main"));
    assert_eq!(attr(turn, "session").as_deref(), Some("s-otel"));
    let models = named("model_call");
    assert_eq!(models.len(), 2, "two model calls");
    let tools = named("tool");
    assert_eq!(tools.len(), 1);
    assert_eq!(attr(tools[0], "tool").as_deref(), Some("echo_for_trace"));
    // Parent and child: every call is the turn's child, in the turn's trace.
    for child in models.iter().chain(tools.iter()) {
        assert_eq!(child.trace_id, turn.trace_id, "{}", child.name);
        assert_eq!(
            child.parent_span_id, turn.span_id,
            "{} under the turn",
            child.name
        );
        assert!(child.start_time_unix_nano >= turn.start_time_unix_nano);
        assert!(child.end_time_unix_nano <= turn.end_time_unix_nano);
    }
    assert_eq!(attr(models[0], "provider").as_deref(), Some("openai"));
}

#[test]
fn an_endpoint_that_is_not_a_url_is_refused_naming_the_key() {
    let e = strata_otel::layer::<tracing_subscriber::Registry>("collector:4318", "s")
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("telemetry.otlp_endpoint"), "{e}");
}
