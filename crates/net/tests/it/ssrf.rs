//! The network guard against a table of SSRF tricks (no traffic leaves the machine: names
//! resolve through a fixed test resolver) and real loopback servers that redirect.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use strata_net::NetPolicy as NetworkConfig;
use strata_net::{FetchRequest, NetError, NetGuard, Resolver};

/// A resolver with a fixed table; unknown names fail like NXDOMAIN.
struct Table(HashMap<&'static str, Vec<IpAddr>>);

impl Resolver for Table {
    fn lookup(
        &self,
        host: &str,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send + '_>> {
        // Like DNS, a trailing dot names the same host.
        let r = self
            .0
            .get(host.trim_end_matches('.'))
            .cloned()
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, format!("no such host {host}"))
            });
        Box::pin(async move { r })
    }
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().filter_map(|s| s.parse().ok()).collect()
}

fn table() -> Arc<Table> {
    Arc::new(Table(HashMap::from([
        ("public.example", ips(&["93.184.216.34"])),
        (
            "public6.example",
            ips(&["2606:2800:220:1:248:1893:25c8:1946"]),
        ),
        ("internal.example", ips(&["10.0.0.1"])),
        ("rebind.example", ips(&["93.184.216.34", "127.0.0.1"])),
        ("meta.example", ips(&["169.254.169.254"])),
        ("cgnat.example", ips(&["100.100.100.200"])),
        ("v6private.example", ips(&["fd00:ec2::254"])),
        ("mapped.example", ips(&["::ffff:192.168.1.1"])),
        ("nat64.example", ips(&["64:ff9b::a00:1"])),
        ("loop6.example", ips(&["::1"])),
        ("intranet.corp.example", ips(&["10.20.30.40"])),
        ("lab.example", ips(&["172.16.5.5"])),
    ])))
}

fn guard(allow: &[&str]) -> NetGuard {
    let cfg = NetworkConfig {
        allow: allow.iter().map(|s| (*s).to_owned()).collect(),
        timeout_secs: 10,
        ..Default::default()
    };
    NetGuard::with_resolver(&cfg, table()).expect("guard")
}

const BLOCKED: &[&str] = &[
    // Loopback in every spelling.
    "http://127.0.0.1/",
    "http://127.1/",
    "http://127.0.1/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0x7f.0x0.0x0.0x1/",
    "http://0177.0.0.1/",
    "http://017700000001/",
    "http://127.255.255.254:8080/x",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::127.0.0.1]/",
    // Unspecified.
    "http://0.0.0.0/",
    "http://0/",
    "http://[::]/",
    // Private, CGNAT, link-local and cloud metadata.
    "http://10.0.0.1/",
    "http://10.255.255.255/",
    "http://172.16.0.1/",
    "http://172.31.255.255/",
    "http://192.168.0.1/",
    "http://192.168.1.1:8443/admin",
    "http://100.64.0.1/",
    "http://100.100.100.200/latest/meta-data/",
    "http://169.254.169.254/latest/meta-data/iam/",
    "http://169.254.170.2/v2/credentials",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:10.0.0.1]/",
    // Multicast, broadcast, reserved, documentation, benchmarking.
    "http://224.0.0.1/",
    "http://239.255.255.250/",
    "http://[ff02::1]/",
    "http://255.255.255.255/",
    "http://240.0.0.1/",
    "http://192.0.2.1/",
    "http://198.51.100.7/",
    "http://203.0.113.9/",
    "http://[2001:db8::1]/",
    "http://198.18.0.1/",
    "http://192.0.0.8/",
    // 6to4, Teredo, NAT64 wrapping an internal address.
    "http://[2002:7f00:1::]/",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
    "http://[64:ff9b::7f00:1]/",
    // Names: localhost aliases, metadata names, internal suffixes, single labels.
    "http://localhost/",
    "http://LOCALHOST:8080/",
    "http://localhost./",
    "http://app.localhost/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata/",
    "http://printer.local/",
    "http://intranet/",
    // Names that resolve to internal addresses (rebinding included).
    "http://internal.example/",
    "http://rebind.example/",
    "http://meta.example/",
    "http://cgnat.example/",
    "http://v6private.example/",
    "http://mapped.example/",
    "http://nat64.example/",
    "http://loop6.example/",
    // Userinfo tricks.
    "http://example.com@127.0.0.1/",
    "http://public.example@169.254.169.254/",
    "http://user:pass@public.example/",
    // Not http(s).
    "file:///etc/passwd",
    "gopher://127.0.0.1:70/",
    "ftp://public.example/",
    "dict://127.0.0.1:11211/",
    "javascript:alert(1)",
    "not a url",
    // Unresolvable.
    "http://nxdomain.example/",
];

const ALLOWED: &[&str] = &[
    "http://public.example/",
    "https://public.example:8443/path?q=1",
    "http://PUBLIC.example./",
    "http://public6.example/",
    "http://93.184.216.34/",
    "http://[2606:4700:4700::1111]/",
    "http://8.8.8.8/",
    "http://[::ffff:8.8.8.8]/",
];

#[tokio::test]
async fn the_url_table() {
    assert!(BLOCKED.len() + ALLOWED.len() >= 60);
    let g = guard(&[]);
    let mut wrong = Vec::new();
    for url in BLOCKED {
        if let Ok(addrs) = g.check(url).await {
            wrong.push(format!("allowed {url} → {addrs:?}"));
        }
    }
    for url in ALLOWED {
        if let Err(e) = g.check(url).await {
            wrong.push(format!("refused {url}: {e}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test]
async fn refusals_say_why() {
    let g = guard(&[]);
    let e = g.check("http://meta.example/").await.expect_err("blocked");
    assert!(
        e.to_string().contains("169.254.169.254 is link-local"),
        "{e}"
    );
    let e = g
        .check("http://rebind.example/")
        .await
        .expect_err("blocked");
    assert!(e.to_string().contains("127.0.0.1 is loopback"), "{e}");
    let e = g
        .check("http://[::ffff:10.0.0.1]/")
        .await
        .expect_err("blocked");
    assert!(e.to_string().contains("private"), "{e}");
    assert!(matches!(
        g.check("file:///etc/passwd").await,
        Err(NetError::Invalid { .. })
    ));
}

#[tokio::test]
async fn the_allow_list_opens_named_hosts_and_cidrs_only() {
    let g = guard(&["intranet.corp.example", "172.16.0.0/12"]);
    assert!(g.check("http://intranet.corp.example/").await.is_ok());
    assert!(g.check("http://lab.example/").await.is_ok());
    assert!(g.check("http://172.20.0.1/").await.is_ok());
    // Everything else stays closed.
    assert!(g.check("http://internal.example/").await.is_err());
    assert!(g.check("http://10.20.30.40/").await.is_err());
    assert!(g.check("http://localhost/").await.is_err());
}

/// Starts an axum app on 127.0.0.1; returns its port.
async fn start(app: axum::Router) -> u16 {
    strata_test_support::serve(app).await.port()
}

fn redirect(to: String) -> impl IntoResponse {
    (StatusCode::FOUND, [(header::LOCATION, to)], "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_servers_redirects_and_credentials() {
    // B echoes the credentials it received.
    let b = start(axum::Router::new().route(
        "/echo",
        get(|h: HeaderMap| async move {
            format!(
                "auth={} key={}",
                h.get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none"),
                h.get("x-api-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
            )
        }),
    ))
    .await;
    // A redirects: to a blocked address, to B under another name, around in a loop.
    let a = start(
        axum::Router::new()
            .route("/ok", get(|| async { "hello from A" }))
            .route(
                "/to-metadata",
                get(|| async { redirect("http://169.254.169.254/latest/meta-data/".into()) }),
            )
            .route(
                "/to-internal-name",
                get(|| async { redirect("http://internal.example/".into()) }),
            )
            .route(
                "/to-b",
                get(move || async move { redirect(format!("http://b.test:{b}/echo")) }),
            )
            .route(
                "/same-host",
                get(|| async { redirect("/echo-here".into()) }),
            )
            .route(
                "/echo-here",
                get(|h: HeaderMap| async move {
                    format!(
                        "auth={}",
                        h.get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("none")
                    )
                }),
            )
            .route("/loop", get(|| async { redirect("/loop".into()) }))
            .route("/big", get(|| async { "x".repeat(10_000) })),
    )
    .await;

    // By default the loopback server is out of reach.
    let g = guard(&[]);
    let r = g
        .fetch(FetchRequest::get(format!("http://127.0.0.1:{a}/ok")))
        .await;
    assert!(matches!(r, Err(NetError::Blocked { .. })), "{r:?}");

    // With a test allow-list naming it (and B under the name `b.test`), it answers.
    let mut resolver = table().0.clone();
    resolver.insert("b.test", ips(&["127.0.0.1"]));
    let cfg = NetworkConfig {
        allow: vec!["127.0.0.1/32".into(), "b.test".into()],
        max_redirects: 3,
        max_response_bytes: 1000,
        timeout_secs: 10,
    };
    let g = NetGuard::with_resolver(&cfg, Arc::new(Table(resolver))).expect("guard");
    let r = g
        .fetch(FetchRequest::get(format!("http://127.0.0.1:{a}/ok")))
        .await
        .expect("fetch");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello from A"[..]));

    // Redirects to blocked destinations are refused at the hop, before any connection.
    for path in ["to-metadata", "to-internal-name"] {
        let r = g
            .fetch(FetchRequest::get(format!("http://127.0.0.1:{a}/{path}")))
            .await;
        assert!(matches!(r, Err(NetError::Blocked { .. })), "{path}: {r:?}");
    }

    // Credentials do not follow a redirect to another host, but do on the same host.
    let mut req = FetchRequest::get(format!("http://127.0.0.1:{a}/to-b"));
    req.headers = vec![
        ("Authorization".into(), "Bearer s3cr3t".into()),
        ("X-Api-Key".into(), "k".into()),
    ];
    let r = g.fetch(req.clone()).await.expect("fetch");
    assert_eq!(String::from_utf8_lossy(&r.body), "auth=none key=none");
    assert_eq!(r.redirects, 1);
    req.url = format!("http://127.0.0.1:{a}/same-host");
    let r = g.fetch(req).await.expect("fetch");
    assert_eq!(String::from_utf8_lossy(&r.body), "auth=Bearer s3cr3t");

    // Redirect loops stop at the limit; bodies are capped.
    let r = g
        .fetch(FetchRequest::get(format!("http://127.0.0.1:{a}/loop")))
        .await;
    assert_eq!(r.err(), Some(NetError::TooManyRedirects(3)));
    let r = g
        .fetch(FetchRequest::get(format!("http://127.0.0.1:{a}/big")))
        .await
        .expect("fetch");
    assert_eq!((r.body.len(), r.truncated), (1000, true));
}
