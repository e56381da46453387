//! The cluster through real `strata serve` processes (release build) sharing PostgreSQL and
//! NATS JetStream on this machine: turns per second through 1, 2 and 3 members against a
//! provider that takes 50 ms per call (beside the ideal, and one instance without the
//! queue), the latency the queue adds to a turn, and how long a turn whose member is killed
//! takes to be answered by another (median of 5 kills), and how long a Discord account is
//! without a gateway when the member holding its lease is killed or stopped (a fake Discord
//! on 127.0.0.1 counts the sessions).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Report, Row, median, quantile};

const TOKEN: &str = "bench-token-0123456789abcdef";
const LATENCY: Duration = Duration::from_millis(50);
/// A message containing this takes a second at the provider (the failover runs).
const SLOW: &str = "slow";

/// An OpenAI-compatible provider on 127.0.0.1: every answer after `LATENCY` (a second for a
/// message saying `slow`), one thread per connection, closed after each answer.
fn provider() -> Result<String, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn);
                let mut len = 0usize;
                let mut line = String::new();
                loop {
                    line.clear();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let l = line.trim_end();
                    if l.is_empty() {
                        break;
                    }
                    if let Some(v) = l
                        .to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                    {
                        len = v.parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; len];
                if r.read_exact(&mut body).is_err() {
                    return;
                }
                let slow = String::from_utf8_lossy(&body).contains(SLOW);
                std::thread::sleep(if slow {
                    Duration::from_secs(1)
                } else {
                    LATENCY
                });
                let answer = json!({
                    "id": "chatcmpl-bench", "object": "chat.completion", "model": "bench",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
                })
                .to_string();
                let mut conn = r.into_inner();
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            });
        }
    });
    Ok(format!("http://{addr}"))
}

/// A member (or a lone instance) of the deployment.
struct Member {
    child: Child,
    base: String,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn overlay(
    llm: &str,
    pg: &str,
    nats: &str,
    name: &str,
    cluster: bool,
    extra: &str,
) -> Result<tempfile::TempDir, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let d = dir.path();
    std::fs::create_dir_all(d.join("config")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(d.join("agents/main")).map_err(|e| e.to_string())?;
    let config = format!(
        "defaults:\n  llm:\n    provider: openai\n    base_url: {llm}/v1\n    api_key: bench\n    model: bench\n\
         server:\n  tokens:\n    - {{name: bench, token: {TOKEN}, tier: owner}}\n\
         storage:\n  backend: postgres\n  postgres:\n    url: {pg}\n    schema: {name}\n\
         cluster:\n  enabled: {cluster}\n  nats_url: {nats}\n  stream: {name}\n  ack_wait_secs: 2\n{extra}"
    );
    std::fs::write(d.join("config/config.yaml"), config).map_err(|e| e.to_string())?;
    std::fs::write(d.join("config/agents.yaml"), "agents:\n  main: {}\n")
        .map_err(|e| e.to_string())?;
    Ok(dir)
}

fn start(ov: &Path) -> Result<Member, String> {
    let (child, port, _) = crate::serve::spawn(ov)?;
    Ok(Member {
        child,
        base: format!("http://127.0.0.1:{port}"),
    })
}

async fn chat(
    c: &reqwest::Client,
    base: &str,
    session: &str,
    text: &str,
    id: &str,
) -> Result<(), String> {
    let r = c
        .post(format!("{base}/chat"))
        .header("X-Strata-Token", TOKEN)
        .json(&json!({"message": text, "agent": "main", "session_id": session, "request_id": id}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!(
            "{}: {}",
            r.status(),
            r.text().await.unwrap_or_default()
        ));
    }
    let v: Value = r.json().await.map_err(|e| e.to_string())?;
    if v["response"] != "done" {
        return Err(format!("unexpected answer {v}"));
    }
    Ok(())
}

/// `sessions` sessions each sending `per` turns back to back, spread over `bases`: turns/s.
async fn load(bases: &[String], sessions: usize, per: usize, tag: &str) -> Result<f64, String> {
    let c = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for s in 0..sessions {
        let (c, bases, tag) = (c.clone(), bases.to_vec(), tag.to_owned());
        set.spawn(async move {
            for k in 0..per {
                let base = &bases[(s + k) % bases.len()];
                chat(
                    &c,
                    base,
                    &format!("{tag}-s{s}"),
                    "go",
                    &format!("{tag}-s{s}-{k}"),
                )
                .await?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    Ok((sessions * per) as f64 / t0.elapsed().as_secs_f64())
}

/// One turn at a time: latencies in microseconds.
async fn sequential(base: &str, turns: usize, tag: &str) -> Result<Vec<f64>, String> {
    let c = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let mut lat = Vec::with_capacity(turns);
    for k in 0..turns {
        let t = Instant::now();
        chat(
            &c,
            base,
            &format!("{tag}-seq"),
            "go",
            &format!("{tag}-seq-{k}"),
        )
        .await?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    lat.sort_by(f64::total_cmp);
    Ok(lat)
}

async fn drop_stream(nats: &str, name: &str) {
    if let Ok(nc) = async_nats::connect(nats.trim_start_matches("nats://")).await {
        let _ = async_nats::jetstream::new(nc).delete_stream(name).await;
    }
}

fn nats_url() -> Option<String> {
    let url =
        std::env::var("STRATA_BENCH_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let addr = url.trim_start_matches("nats://").to_owned();
    let ok = crate::pg::answers(&addr);
    if !ok {
        eprintln!("no NATS at {addr}: the cluster bench needs one (set STRATA_BENCH_NATS_URL)");
    }
    ok.then_some(url)
}

pub fn run(quick: bool) -> Result<Report, String> {
    let (Some(pg), Some(nats)) = (crate::pg::url(), nats_url()) else {
        return Err("the cluster bench needs PostgreSQL and NATS on this machine".into());
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let llm = provider()?;
    let (sessions, per) = if quick { (50, 4) } else { (100, 10) };
    let ideal = sessions as f64 / LATENCY.as_secs_f64();
    let mut rows = Vec::new();
    let mut one = None;
    // A lone instance without the queue, then 1, 2 and 3 members.
    for (label, members, cluster) in [
        ("1 instance, no cluster", 1, false),
        ("1 member", 1, true),
        ("2 members", 2, true),
        ("3 members", 3, true),
    ] {
        let schema = crate::pg::Schema::new(&pg, "cluster");
        let ovs = (0..members)
            .map(|_| overlay(&llm, &pg, &nats, &schema.name, cluster, ""))
            .collect::<Result<Vec<_>, _>>()?;
        let ms = ovs
            .iter()
            .map(|o| start(o.path()))
            .collect::<Result<Vec<_>, _>>()?;
        let bases: Vec<String> = ms.iter().map(|m| m.base.clone()).collect();
        rt.block_on(load(&bases, 10, 2, "warm"))?;
        let mut lat = rt.block_on(sequential(&bases[0], if quick { 50 } else { 200 }, "lat"))?;
        let tp = rt.block_on(load(&bases, sessions, per, "load"))?;
        drop(ms);
        rt.block_on(schema.drop_now());
        rt.block_on(drop_stream(&nats, &schema.name));
        let mut extra = std::collections::BTreeMap::new();
        extra.insert("ideal_turns_per_s".into(), ideal);
        extra.insert("ratio_to_ideal".into(), tp / ideal);
        if cluster {
            if let Some(base) = one {
                extra.insert("ratio_to_one_member".into(), tp / base);
            } else {
                one = Some(tp);
            }
        }
        rows.push(Row {
            name: format!("{label}, {sessions} sessions × 50 ms"),
            throughput_per_s: tp,
            p50_us: quantile(&lat, 0.5),
            p99_us: quantile(&lat, 0.99),
            extra,
        });
        lat.clear();
    }
    // The queue's cost: one member against the lone instance, one turn at a time.
    if let [lone, member, ..] = rows.as_slice() {
        let (p50, p99) = (member.p50_us - lone.p50_us, member.p99_us - lone.p99_us);
        rows[1].extra.insert("queue_added_p50_us".into(), p50);
        rows[1].extra.insert("queue_added_p99_us".into(), p99);
    }
    // Failover: a slow turn whose member is killed -9 while it runs (the member whose own
    // row in /api/cluster shows it in flight). The client asks the other member again with
    // the same request id when its connection breaks, as a client behind a load balancer
    // would; the figure is the time from the kill to the answer.
    let schema = crate::pg::Schema::new(&pg, "failover");
    let ovs = (0..2)
        .map(|_| overlay(&llm, &pg, &nats, &schema.name, true, ""))
        .collect::<Result<Vec<_>, _>>()?;
    let mut members = vec![start(ovs[0].path())?, start(ovs[1].path())?];
    let mut overlay_of = [0, 1];
    let mut times = Vec::new();
    for attempt in 0..5 {
        let c = reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(|e| e.to_string())?;
        let (first, then) = (members[0].base.clone(), members[1].base.clone());
        let id = format!("failover-{attempt}");
        let cc = c.clone();
        let t = rt.spawn(async move {
            let text = format!("{SLOW} please");
            if chat(&cc, &first, &id, &text, &id).await.is_err() {
                chat(&cc, &then, &id, &text, &id).await?;
            }
            Ok::<_, String>(Instant::now())
        });
        std::thread::sleep(Duration::from_millis(300));
        let mut runner = None;
        for (i, m) in members.iter().enumerate() {
            let v: Value = rt
                .block_on(async {
                    c.get(format!("{}/api/cluster", m.base))
                        .header("X-Strata-Token", TOKEN)
                        .send()
                        .await?
                        .json()
                        .await
                })
                .map_err(|e| e.to_string())?;
            let me = v["value"]["instance"].clone();
            let busy = v["value"]["instances"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|r| r["id"] == me && r["in_flight"].as_i64().unwrap_or(0) > 0)
            });
            if busy {
                runner = Some(i);
            }
        }
        let Some(r) = runner else {
            return Err("no member reported the slow turn in flight".into());
        };
        let killed = Instant::now();
        let _ = members[r].child.kill();
        let _ = members[r].child.wait();
        let answered = rt.block_on(t).map_err(|e| e.to_string())??;
        times.push(answered.saturating_duration_since(killed).as_secs_f64() * 1e6);
        members[r] = start(ovs[overlay_of[r]].path())?;
        // The client asks the first member first: the restarted one is there half the time.
        members.swap(0, 1);
        overlay_of.swap(0, 1);
    }
    drop(members);
    rt.block_on(schema.drop_now());
    rt.block_on(drop_stream(&nats, &schema.name));
    if !times.is_empty() {
        let mut extra = std::collections::BTreeMap::new();
        extra.insert("kills_measured".into(), times.len() as f64);
        extra.insert("ack_wait_secs".into(), 2.0);
        rows.push(Row {
            name: "turn failover after kill -9 (median)".into(),
            throughput_per_s: 0.0,
            p50_us: median(&mut times),
            p99_us: 0.0,
            extra,
        });
    }
    rows.extend(lease_failover(&rt, &llm, &pg, &nats)?);
    Ok(Report {
        bench: "cluster",
        runs: 1,
        calls_per_run: sessions * per,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        rows,
    })
}

/// `cluster.lease_secs` in the connector failover.
const LEASE_SECS: u64 = 5;

/// The member holding the Discord account's lease, by `/api/cluster`.
async fn lease_holder(c: &reqwest::Client, members: &[Member]) -> Result<usize, String> {
    let v: Value = c
        .get(format!("{}/api/cluster", members[0].base))
        .header("X-Strata-Token", TOKEN)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let address = v["value"]["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| {
            m["leases"]
                .as_array()
                .is_some_and(|l| l.iter().any(|n| n == "discord:main"))
        })
        .and_then(|m| m["address"].as_str().map(str::to_owned))
        .ok_or("no member holds the Discord account")?;
    members
        .iter()
        .position(|m| m.base == address)
        .ok_or_else(|| format!("{address} is not a member"))
}

/// Two members, one Discord account: the time from the holder's end to the other member's
/// gateway IDENTIFY at the fake Discord — after kill -9 (the lease runs out first; median
/// of 5) and after SIGTERM (the holder releases it; median of 3).
fn lease_failover(
    rt: &tokio::runtime::Runtime,
    llm: &str,
    pg: &str,
    nats: &str,
) -> Result<Vec<Row>, String> {
    let fake = rt.block_on(strata_test_support::discord::fake());
    let identified = || fake.identified.lock().map(|v| v.len()).unwrap_or(0);
    let discord = format!(
        "  lease_secs: {LEASE_SECS}\nconnectors:\n  discord:\n    api_proxy: 127.0.0.1:{0}\n    \
         plain_http: true\n    gateway_url: ws://127.0.0.1:{0}\n    accounts:\n      main:\n        \
         token: env:PATH\n",
        fake.port
    );
    let schema = crate::pg::Schema::new(pg, "lease");
    let ovs = (0..2)
        .map(|_| overlay(llm, pg, nats, &schema.name, true, &discord))
        .collect::<Result<Vec<_>, _>>()?;
    let mut members = vec![start(ovs[0].path())?, start(ovs[1].path())?];
    let c = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let wait_for = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while identified() < n {
            if Instant::now() > deadline {
                return Err(format!("no gateway session {n} within 60 s"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Instant::now())
    };
    wait_for(1)?;
    let (mut killed, mut stopped) = (Vec::new(), Vec::new());
    for attempt in 0..8 {
        // Both members up and past their first lease check.
        std::thread::sleep(Duration::from_secs(1));
        let h = rt.block_on(lease_holder(&c, &members))?;
        let before = identified();
        let mut holder = members.remove(h);
        let ended = Instant::now();
        if attempt < 5 {
            let _ = holder.child.kill();
        } else {
            let _ = Command::new("kill")
                .args(["-TERM", &holder.child.id().to_string()])
                .status();
        }
        let took = wait_for(before + 1)?.saturating_duration_since(ended);
        let _ = holder.child.wait();
        if attempt < 5 {
            &mut killed
        } else {
            &mut stopped
        }
        .push(took.as_secs_f64() * 1e6);
        members.insert(h, start(ovs[h].path())?);
    }
    drop(members);
    rt.block_on(schema.drop_now());
    rt.block_on(drop_stream(nats, &schema.name));
    let most = fake
        .most_connected
        .load(std::sync::atomic::Ordering::SeqCst) as f64;
    let row = |name: &str, times: &mut Vec<f64>| {
        let mut extra = std::collections::BTreeMap::new();
        extra.insert("lease_secs".into(), LEASE_SECS as f64);
        extra.insert("measured".into(), times.len() as f64);
        extra.insert("most_gateway_sessions_at_once".into(), most);
        Row {
            name: name.into(),
            throughput_per_s: 0.0,
            p50_us: median(times),
            p99_us: 0.0,
            extra,
        }
    };
    Ok(vec![
        row("Discord lease failover after kill -9 (median)", &mut killed),
        row(
            "Discord lease handover after SIGTERM (median)",
            &mut stopped,
        ),
    ])
}
