//! The dashboard on the real `strata serve` (release build) with 10,000 stored sessions and
//! 100,000 audit records: the server's time for each page's API requests (issued together, as
//! the page does), the first load's weight, and idle RSS with the dashboard off, on and
//! unused, and after every page was loaded.

use std::time::{Duration, Instant};

use strata_engine::audit::{AuditRecord, AuditSink};
use strata_engine::llm::{ChatMessage, Role};
use strata_engine::session::{SessionKey, SessionStore};

use crate::{Report, Row, median, quantile};

const SESSIONS: usize = 10_000;
const RECORDS: usize = 100_000;

/// Fills the overlay's data directory as a deployment that has been busy for a while.
fn populate(data: &std::path::Path, rt: &tokio::runtime::Runtime) -> Result<(), String> {
    std::fs::create_dir_all(data).map_err(|e| e.to_string())?;
    let store =
        strata_store::SqliteStore::open(&data.join("strata.db")).map_err(|e| e.to_string())?;
    rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        let store = std::sync::Arc::new(store);
        for i in 0..SESSIONS {
            let store = store.clone();
            set.spawn(async move {
                let key = SessionKey::new(format!("agent-{}", i % 8), format!("channel-{i}"));
                let msgs = [
                    ChatMessage::text(
                        Role::User,
                        format!("question number {i} about the weekly report"),
                    ),
                    ChatMessage::text(
                        Role::Assistant,
                        "Here is what I found in the knowledge base: …",
                    ),
                ];
                store.record_turn(&key, &msgs, None, &[]).await
            });
            if set.len() >= 256
                && let Some(r) = set.join_next().await
            {
                r.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
            }
        }
        while let Some(r) = set.join_next().await {
            r.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        }
        store.flush().await.map_err(|e| e.to_string())
    })?;
    let audit =
        strata_store::JsonlAudit::open(&data.join("audit.jsonl")).map_err(|e| e.to_string())?;
    for i in 0..RECORDS {
        audit.record(&AuditRecord {
            ts: "2026-12-01T12:00:00.000Z".into(),
            request_id: format!("req-{i}"),
            tool: ["read_file", "list_files", "memory_search", "current_time"][i % 4].into(),
            layer: Some("core".into()),
            principal: format!("agent:agent-{}", i % 8),
            agent_id: Some(format!("agent-{}", i % 8)),
            session_id: Some(format!("channel-{}", i % SESSIONS)),
            status: "ok".into(),
            elapsed_ms: 1.5,
            args: serde_json::json!({"path": "knowledgebase/notes.md"}),
            error: None,
            taint: None,
        });
    }
    audit.close();
    Ok(())
}

/// What each page asks the API for when it opens.
const PAGES: &[(&str, &[&str])] = &[
    ("overview", &["/api/status", "/api/tools"]),
    (
        "approvals",
        &[
            "/api/approvals?status=pending&limit=100",
            "/api/approvals?status=all&limit=50",
        ],
    ),
    ("sessions", &["/api/sessions?limit=200&q="]),
    ("sessions search", &["/api/sessions?limit=200&q=channel-99"]),
    ("transcript", &["/api/sessions/agent-3/channel-4323"]),
    ("activity (events)", &["/api/events?limit=200"]),
    ("activity (audit verify)", &["/api/audit/verify"]),
    ("tools", &["/api/tools"]),
    ("agents", &["/api/agents"]),
    ("schedules", &["/api/schedules"]),
    ("usage", &["/api/usage?by=agent&since=7d"]),
    ("config", &["/api/config"]),
];

async fn page(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    paths: &[&str],
) -> Result<f64, String> {
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for p in paths {
        let req = client
            .get(format!("{base}{p}"))
            .header("x-strata-token", token);
        set.spawn(async move {
            let r = req.send().await.map_err(|e| e.to_string())?;
            if !r.status().is_success() {
                return Err(format!("status {}", r.status()));
            }
            r.bytes().await.map(|_| ()).map_err(|e| e.to_string())
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6)
}

fn rss_mib(pid: u32) -> f64 {
    crate::serve::rss_kib(pid) / 1024.0
}

fn write_config(overlay: &std::path::Path, dashboard: bool) -> Result<(), String> {
    std::fs::create_dir_all(overlay.join("config")).map_err(|e| e.to_string())?;
    std::fs::write(
        overlay.join("config/config.yaml"),
        format!("server:\n  dashboard:\n    enabled: {dashboard}\n"),
    )
    .map_err(|e| e.to_string())
}

pub fn run(quick: bool) -> Result<Report, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let overlay = dir.path();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    populate(&overlay.join("data"), &rt)?;
    let samples = if quick { 30 } else { 200 };
    let settle = Duration::from_secs(if quick { 2 } else { 8 });

    // Idle RSS with the dashboard off, then on (nothing loaded yet).
    write_config(overlay, false)?;
    let (mut off, _, _) = crate::serve::spawn(overlay)?;
    std::thread::sleep(settle);
    let rss_off = rss_mib(off.id());
    let _ = off.kill();
    let _ = off.wait();
    write_config(overlay, true)?;
    let (mut on, port, _) = crate::serve::spawn(overlay)?;
    std::thread::sleep(settle);
    let rss_on = rss_mib(on.id());
    let token = std::fs::read_to_string(overlay.join("data/api-token"))
        .map_err(|e| e.to_string())?
        .trim()
        .to_owned();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())?;

    let result = rt.block_on(async {
        // The first load: the page and every asset it names.
        let mut weight = 0usize;
        let login = client
            .post(format!("{base}/ui/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let cookie = login
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .ok_or("no sign-in cookie")?
            .to_owned();
        for p in [
            "/ui/",
            "/ui/assets/app.js",
            "/ui/assets/app.css",
            "/ui/assets/icon.svg",
        ] {
            let r = client
                .get(format!("{base}{p}"))
                .header("cookie", &cookie)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !r.status().is_success() {
                return Err(format!("{p}: status {}", r.status()));
            }
            weight += r.bytes().await.map_err(|e| e.to_string())?.len();
        }
        let mut rows = Vec::new();
        for (name, paths) in PAGES {
            // One warm-up: the first read of a table comes from disk.
            page(&client, &base, &token, paths).await?;
            let n = if name.contains("verify") {
                samples.min(20)
            } else {
                samples
            };
            let mut lat = Vec::with_capacity(n);
            for _ in 0..n {
                lat.push(page(&client, &base, &token, paths).await?);
            }
            lat.sort_by(f64::total_cmp);
            let total: f64 = lat.iter().sum();
            rows.push(Row {
                name: format!("page {name}"),
                throughput_per_s: lat.len() as f64 / (total / 1e6),
                p50_us: quantile(&lat, 0.5),
                p99_us: quantile(&lat, 0.99),
                ..Row::default()
            });
        }
        Ok::<_, String>((weight, rows))
    });
    let (weight, mut rows) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = on.kill();
            let _ = on.wait();
            return Err(e);
        }
    };
    std::thread::sleep(Duration::from_secs(1));
    let rss_used = rss_mib(on.id());
    let _ = on.kill();
    let _ = on.wait();
    let mut extra = std::collections::BTreeMap::new();
    extra.insert("first_load_kib".into(), weight as f64 / 1024.0);
    extra.insert("idle_rss_mib_dashboard_off".into(), rss_off);
    extra.insert("idle_rss_mib_dashboard_on".into(), rss_on);
    extra.insert("rss_mib_after_every_page".into(), rss_used);
    let mut worst = rows.iter().map(|r| r.p99_us).collect::<Vec<_>>();
    extra.insert("median_page_p99_us".into(), median(&mut worst));
    if let Some(r) = rows.first_mut() {
        r.extra = extra;
    }
    Ok(Report {
        bench: "dashboard",
        runs: 1,
        calls_per_run: samples,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        rows,
    })
}
