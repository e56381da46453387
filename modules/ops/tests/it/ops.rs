//! Ops tools against real sockets on 127.0.0.1.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use strata_engine::audit::NoAudit;
use strata_engine::config::Config;
use strata_engine::{Env, Principal};
use strata_runtime::{Invocation, Invoker, Registry, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A tiny HTTP server answering every request with `status`.
async fn http_server(status: &'static str) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let resp =
                    format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/health")
}

/// A test CA, and an HTTPS server on 127.0.0.1 with a certificate for `127.0.0.1` signed by
/// it, answering every request 200. Returns the URL and the CA's PEM.
async fn https_server() -> (String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use tokio_rustls::rustls;
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("ca");
    let leaf_key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("leaf params")
        .signed_by(&leaf_key, &ca)
        .expect("leaf");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake: nothing to answer.
                let Ok(mut s) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
                let _ = s.shutdown().await;
            });
        }
    });
    (format!("https://{addr}/health"), ca.pem())
}

/// `service_health` of every configured service, as the operator; its results.
async fn check_all(inv: &Invoker) -> Value {
    let r = inv
        .invoke(Invocation::new(
            "service_health",
            json!({}),
            Principal::Operator,
        ))
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    r.value
}

/// The result `service_health` gave for service `name`.
fn health_of(results: &Value, name: &str) -> Value {
    results
        .as_array()
        .expect("array")
        .iter()
        .find(|h| h["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} missing"))
}

fn invoker(services: Value) -> (Invoker, tempfile::TempDir) {
    assert_eq!(strata_mod_ops::link(), "ops");
    let dir = tempfile::tempdir().expect("tmp");
    let mut config = Config::default();
    config.modules.insert(
        "ops".into(),
        json!({"services": services, "timeout_ms": 1000}),
    );
    let env = Arc::new(Env::new(config, dir.path().into(), dir.path().join("data")));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    (Invoker::new(reg, env, Arc::new(NoAudit)), dir)
}

#[tokio::test]
async fn service_health_reports_up_and_down() {
    let ok = http_server("200 OK").await;
    let broken = http_server("500 Internal Server Error").await;
    let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let tcp_addr = tcp.local_addr().expect("addr").to_string();
    // A port that was just free: bind, note, drop.
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        l.local_addr().expect("addr").to_string()
    };
    let (inv, _dir) = invoker(json!([
        {"name": "web", "http": ok},
        {"name": "broken", "http": broken},
        {"name": "db", "tcp": tcp_addr},
        {"name": "gone", "tcp": closed},
        {"name": "tls", "http": ok.replacen("http://", "https://", 1)},
    ]));
    let results = check_all(&inv).await;
    let by_name = |n: &str| health_of(&results, n);
    assert_eq!(by_name("web")["up"], true);
    assert_eq!(by_name("web")["detail"], "HTTP/1.1 200 OK");
    assert_eq!(by_name("broken")["up"], false);
    assert!(
        by_name("broken")["detail"]
            .as_str()
            .expect("d")
            .contains("500")
    );
    assert_eq!(by_name("db")["up"], true);
    assert_eq!(by_name("gone")["up"], false);
    // `https` is checked with TLS: a plain-HTTP port answers the handshake with garbage, and
    // the detail says so (it used to say "not supported").
    assert_eq!(by_name("tls")["up"], false);
    let tls = by_name("tls")["detail"].as_str().expect("d").to_owned();
    assert!(!tls.contains("not supported"), "{tls}");
    assert!(
        tls.to_lowercase().contains("corrupt") || tls.to_lowercase().contains("tls"),
        "{tls}"
    );

    let r = inv
        .invoke(Invocation::new(
            "service_health",
            json!({"names": ["db"]}),
            Principal::Operator,
        ))
        .await;
    assert_eq!(r.value.as_array().expect("array").len(), 1);
    let r = inv
        .invoke(Invocation::new(
            "service_health",
            json!({"names": ["dbb"]}),
            Principal::Operator,
        ))
        .await;
    assert_eq!(r.status, Status::ValidationError);
    assert!(r.error.expect("msg").contains("no service `dbb`"));
}

/// HTTPS through the real client: verified against the service's `ca_file` (relative to the
/// overlay), down with the verifier's reason without it — never trusted blindly.
#[tokio::test]
async fn service_health_checks_https_with_the_services_ca() {
    let (url, ca_pem) = https_server().await;
    let (inv, dir) = invoker(json!([
        {"name": "trusted", "http": url, "ca_file": "certs/internal-ca.pem"},
        {"name": "untrusted", "http": url},
        {"name": "no-pem", "http": url, "ca_file": "certs/empty.pem"},
        {"name": "missing", "http": url, "ca_file": "certs/nowhere.pem"},
    ]));
    std::fs::create_dir_all(dir.path().join("certs")).expect("mkdir");
    std::fs::write(dir.path().join("certs/internal-ca.pem"), ca_pem).expect("write");
    std::fs::write(dir.path().join("certs/empty.pem"), "not a certificate\n").expect("write");
    let results = check_all(&inv).await;
    let by_name = |n: &str| health_of(&results, n);
    let trusted = by_name("trusted");
    assert_eq!(trusted["up"], true, "{trusted}");
    assert_eq!(trusted["detail"], "HTTP/1.1 200 OK");
    let untrusted = by_name("untrusted");
    assert_eq!(untrusted["up"], false, "{untrusted}");
    let why = untrusted["detail"].as_str().expect("d").to_lowercase();
    assert!(why.contains("certificate"), "{why}");
    let no_pem = by_name("no-pem");
    assert_eq!(no_pem["up"], false);
    assert!(
        no_pem["detail"]
            .as_str()
            .expect("d")
            .contains("no PEM certificate"),
        "{no_pem}"
    );
    let missing = by_name("missing");
    assert_eq!(missing["up"], false);
    assert!(
        missing["detail"]
            .as_str()
            .expect("d")
            .contains("cannot read ca_file"),
        "{missing}"
    );
}

#[tokio::test]
async fn system_info_reports_this_host() {
    let (inv, _dir) = invoker(json!([]));
    let r = inv
        .invoke(Invocation::new(
            "system_info",
            json!({}),
            Principal::Operator,
        ))
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let v = r.value;
    assert!(v["cpus"].as_u64().expect("cpus") >= 1);
    assert!(
        v["os"]
            .as_str()
            .expect("os")
            .starts_with(std::env::consts::OS)
    );
    if cfg!(target_os = "linux") {
        assert!(v["memory"]["total"].as_u64().expect("mem") > 0);
        assert!(v["uptime_secs"].is_u64());
        assert!(v["data_disk"]["total"].as_u64().expect("disk") > 0);
    }
}

#[test]
fn tools_carry_the_module_layer() {
    let reg = Registry::from_inventory(&["ops".into()]).expect("registry");
    for name in ["system_info", "service_health"] {
        assert_eq!(reg.get(name).expect(name).layer.to_string(), "module:ops");
    }
}
