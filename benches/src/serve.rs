//! The real `strata serve` (release build) on loopback: cold start to the first 200 from
//! `/health`, idle RSS, RSS growth over 10,000 `/api/invoke` calls, and `/api/invoke`
//! throughput and latency with 32 concurrent keep-alive clients.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Report, Row, median, quantile};

pub(crate) fn bin() -> Result<PathBuf, String> {
    let p = std::env::var_os("STRATA_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/release/strata"));
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found; run `cargo xtask bench serve`",
            p.display()
        ))
    }
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

struct Server {
    child: Child,
    port: u16,
    token: String,
    started_to_ready: Duration,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking GET /health; true on 200.
pub(crate) fn health(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if n >= 12 && &buf[9..12] == b"200")
}

/// `strata --overlay OVERLAY serve` on a free port, once it answers `/health`: the child,
/// its port and how long it took.
pub(crate) fn spawn(overlay: &std::path::Path) -> Result<(Child, u16, Duration), String> {
    let port = free_port()?;
    let t0 = Instant::now();
    let child = Command::new(bin()?)
        .arg("--overlay")
        .arg(overlay)
        .args(["serve", "--set", &format!("server.port={port}")])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        // `STRATA_BENCH_SERVE_LOG=<file>`: the servers' logs, appended (to see why one failed).
        .stderr(match std::env::var_os("STRATA_BENCH_SERVE_LOG") {
            Some(f) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(f)
                .map_or(Stdio::null(), Stdio::from),
            None => Stdio::null(),
        })
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = t0 + Duration::from_secs(30);
    while !health(port) {
        if Instant::now() > deadline {
            return Err("serve did not answer /health within 30 s".into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok((child, port, t0.elapsed()))
}

fn start(overlay: &std::path::Path) -> Result<Server, String> {
    let (child, port, started_to_ready) = spawn(overlay)?;
    let token = std::fs::read_to_string(overlay.join("data/api-token"))
        .map_err(|e| e.to_string())?
        .trim()
        .to_owned();
    Ok(Server {
        child,
        port,
        token,
        started_to_ready,
    })
}

pub(crate) fn rss_kib(pid: u32) -> f64 {
    status_kib(pid, "VmRSS:")
}

/// A `kB` figure of `/proc/<pid>/status` (`VmRSS:`, `RssAnon:`, `RssFile:`).
fn status_kib(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

/// `total` invokes of `call` over `clients` keep-alive connections; (calls/s, sorted
/// latencies µs).
async fn load(
    port: u16,
    token: &str,
    clients: usize,
    total: usize,
    call: &serde_json::Value,
) -> Result<(f64, Vec<f64>), String> {
    let url = Arc::new(format!("http://127.0.0.1:{port}/api/invoke"));
    let body = Arc::new(call.to_string());
    let per = total / clients;
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(1)
            .build()
            .map_err(|e| e.to_string())?;
        let (url, body, token) = (url.clone(), body.clone(), token.to_owned());
        set.spawn(async move {
            let mut lat = Vec::with_capacity(per);
            for _ in 0..per {
                let t = Instant::now();
                let r = client
                    .post(url.as_str())
                    .header("x-strata-token", &token)
                    .header("content-type", "application/json")
                    .body(body.as_str().to_owned())
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if !r.status().is_success() {
                    return Err(format!("status {}", r.status()));
                }
                let _ = r.bytes().await.map_err(|e| e.to_string())?;
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            Ok::<_, String>(lat)
        });
    }
    let mut all = Vec::with_capacity(total);
    while let Some(r) = set.join_next().await {
        all.extend(r.map_err(|e| e.to_string())??);
    }
    let rate = all.len() as f64 / t0.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    Ok((rate, all))
}

pub fn run(quick: bool) -> Result<Report, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let overlay = dir.path();
    std::fs::create_dir_all(overlay.join("knowledgebase")).map_err(|e| e.to_string())?;
    std::fs::write(overlay.join("knowledgebase/tiny.txt"), "x").map_err(|e| e.to_string())?;
    let runs = if quick { 3 } else { 7 };

    // Cold start, several times.
    let mut starts = Vec::new();
    for _ in 0..runs {
        let s = start(overlay)?;
        starts.push(s.started_to_ready.as_secs_f64() * 1e3);
    }
    let cold_ms = median(&mut starts);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let server = start(overlay)?;
    let pid = server.child.id();
    std::thread::sleep(Duration::from_secs(if quick { 2 } else { 10 }));
    let idle_kib = rss_kib(pid);
    let (anon_kib, file_kib) = (status_kib(pid, "RssAnon:"), status_kib(pid, "RssFile:"));
    let trivial = serde_json::json!({"tool": "current_time"});
    let file = serde_json::json!({"tool": "read_file", "args": {"path": "knowledgebase/tiny.txt"}});
    rt.block_on(load(server.port, &server.token, 32, 10_000, &trivial))?;
    let after_kib = rss_kib(pid);
    let mut rows = Vec::new();
    for (label, call) in [
        ("/api/invoke current_time, 32 clients", &trivial),
        ("/api/invoke read_file, 32 clients", &file),
    ] {
        let (mut rates, mut p50s, mut p99s) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let n = if quick { 10_000 } else { 40_000 };
            let (rate, lat) = rt.block_on(load(server.port, &server.token, 32, n, call))?;
            rates.push(rate);
            p50s.push(quantile(&lat, 0.5));
            p99s.push(quantile(&lat, 0.99));
        }
        rows.push(Row {
            name: label.into(),
            throughput_per_s: median(&mut rates),
            p50_us: median(&mut p50s),
            p99_us: median(&mut p99s),
            ..Row::default()
        });
    }
    let mut extra = std::collections::BTreeMap::new();
    extra.insert("cold_start_ms_median".into(), cold_ms);
    extra.insert("idle_rss_mib".into(), idle_kib / 1024.0);
    extra.insert("idle_rss_anon_mib".into(), anon_kib / 1024.0);
    extra.insert("idle_rss_file_mib".into(), file_kib / 1024.0);
    let bytes = std::fs::metadata(bin()?).map_err(|e| e.to_string())?.len();
    extra.insert("binary_mib".into(), bytes as f64 / (1024.0 * 1024.0));
    extra.insert(
        "rss_growth_after_10k_invokes_mib".into(),
        (after_kib - idle_kib) / 1024.0,
    );
    rows[0].extra = extra;
    Ok(Report {
        bench: "serve",
        runs,
        calls_per_run: if quick { 10_000 } else { 40_000 },
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        rows,
    })
}
