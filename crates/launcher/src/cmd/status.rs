//! `strata status`: one screen on the running server (`GET /api/status`), or — when it cannot
//! be reached — what the store alone says.

use serde_json::Value;
use strata_runtime::approval::ApprovalStatus;
use strata_runtime::usage::{UsageBy, UsageQuery, UsageRow, day_start_ms};

use super::context::*;
use crate::Exit;
use crate::cli::RemoteArgs;

pub(crate) fn run(l: &Context, remote: &RemoteArgs, json: bool) -> Exit {
    let c = &l.config;
    let url = remote.remote.clone().unwrap_or_else(|| local_url(c));
    let token = match &remote.token {
        Some(t) => Ok(t.clone()),
        None => local_token(c),
    };
    let answer = token.and_then(|t| crate::remote::get(&url, &t, "/api/status"));
    match answer {
        Ok(v) if json => out(&serde_json::to_string_pretty(&v).unwrap_or_default()),
        Ok(v) => out(&screen(&url, &v)),
        Err(e) => {
            println!("serve      no status from {url}: {e}");
            if remote.remote.is_none() {
                match offline(c) {
                    Ok(lines) => println!("{lines}"),
                    Err(e) => println!("store      cannot be read: {e}"),
                }
            }
            Exit::Failure
        }
    }
}

/// Where a local `serve` listens (an unspecified bind address is reached on loopback).
fn local_url(c: &strata_engine::config::LoadedConfig) -> String {
    let s = &c.config.server;
    let host = match s.bind.as_str() {
        "0.0.0.0" | "" => "127.0.0.1".to_owned(),
        "::" => "[::1]".to_owned(),
        b if b.contains(':') => format!("[{b}]"),
        b => b.to_owned(),
    };
    format!("http://{host}:{}", s.port)
}

/// The first configured control token, else the per-boot one `serve` wrote.
fn local_token(c: &strata_engine::config::LoadedConfig) -> Result<String, String> {
    if let Some(t) = c.config.server.tokens.first() {
        let env = crate::wiring::env_without_memory(c).map_err(|e| e.to_string())?;
        return env
            .secret(&t.token, "server.tokens[0].token")
            .map(|s| s.expose().to_owned())
            .map_err(|e| e.to_string());
    }
    let path = c.data_dir.join("api-token");
    std::fs::read_to_string(&path)
        .map(|t| t.trim().to_owned())
        .map_err(|e| {
            format!(
                "no token: none in `server.tokens` and {} cannot be read ({e}; is serve running?)",
                path.display()
            )
        })
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// `3h 12m`, `4m 10s`, `12s`.
fn ago(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86400, secs % 86400 / 3600),
    }
}

fn money(usd: f64) -> String {
    format!("${usd:.4}")
}

fn spend_line(r: &UsageRow) -> String {
    let cost = super::usage::cost(r);
    format!(
        "{} {cost} ({} calls, {} tokens)",
        r.key,
        r.calls,
        r.input_tokens + r.output_tokens
    )
}

/// `items` on one line, or `empty` when there are none.
fn joined(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        empty.to_owned()
    } else {
        items.join(" · ")
    }
}

/// Today's spend per agent on one line, or `empty`.
fn spend_lines(rows: &[UsageRow], empty: &str) -> String {
    joined(&rows.iter().map(spend_line).collect::<Vec<_>>(), empty)
}

/// The screen for a `/api/status` document.
fn screen(url: &str, v: &Value) -> String {
    let mut lines = Vec::new();
    let store = &v["store"];
    lines.push(format!(
        "serve      strata {} at {url}, up {}; store {} ({})",
        s(v, "version"),
        ago(v["uptime_secs"].as_i64().unwrap_or(0)),
        s(store, "backend"),
        match s(store, "state") {
            "ok" => "ok".to_owned(),
            "" => "unknown".to_owned(),
            other => format!("{other}: {}", s(store, "reason")),
        }
    ));
    let cluster = &v["cluster"];
    if cluster.is_null() {
        lines.push("instances  this one (not a cluster member)".into());
    } else if let Some(e) = cluster["error"].as_str() {
        lines.push(format!("instances  unknown: {e}"));
    } else {
        let me = s(cluster, "instance");
        let list: Vec<String> = cluster["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| {
                let id = s(i, "id");
                let alive = if i["alive"] == true { "alive" } else { "GONE" };
                let here = if id == me { ", this one" } else { "" };
                format!("{id} ({alive}{here})")
            })
            .collect();
        lines.push(format!(
            "instances  {} — queue depth {}",
            list.join(" · "),
            cluster["stream_depth"]
                .as_u64()
                .map_or("unknown".into(), |d| d.to_string())
        ));
    }
    let agents: Vec<String> = v["agents"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            if a["healthy"] == true {
                format!("{} ({}) ok", s(a, "id"), s(a, "provider"))
            } else {
                format!("{}: NOT STARTED — {}", s(a, "id"), s(a, "reason"))
            }
        })
        .collect();
    lines.push(format!("agents     {}", joined(&agents, "none running")));
    let now_ms = strata_engine::clock::now_ms();
    let connectors: Vec<String> = v["connectors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let since = c["since_ms"]
                .as_i64()
                .map(|t| format!(" for {}", ago((now_ms - t) / 1000)))
                .unwrap_or_default();
            let reconnects = match c["reconnects"].as_u64() {
                Some(0) | None => String::new(),
                Some(n) => format!(", {n} reconnects"),
            };
            let state = match c["up"].as_bool() {
                Some(true) => "up",
                Some(false) => "DOWN",
                None => "registered",
            };
            format!("{} {state}{since}{reconnects}", s(c, "name"))
        })
        .collect();
    lines.push(format!(
        "connectors {}",
        joined(&connectors, "none besides the HTTP API and MCP")
    ));
    let ap = &v["approvals"];
    match ap["pending"].as_u64() {
        Some(0) => lines.push("approvals  none pending".into()),
        Some(n) => {
            lines.push(format!(
                "approvals  {n} pending, the oldest for {} (`strata approvals list`)",
                ago(ap["oldest_age_secs"].as_i64().unwrap_or(0))
            ));
            for r in ap["requests"].as_array().into_iter().flatten() {
                lines.push(format!(
                    "           {} {} for {}: {}",
                    s(r, "id"),
                    s(r, "tool"),
                    r["agent_id"].as_str().unwrap_or(s(r, "principal")),
                    s(r, "description")
                ));
            }
        }
        None => lines.push(format!(
            "approvals  {}",
            ap["error"].as_str().unwrap_or("no approval hub")
        )),
    }
    let spend = &v["spend_today"];
    let rows: Vec<UsageRow> = serde_json::from_value(spend["rows"].clone()).unwrap_or_default();
    lines.push(format!(
        "spend      today ({}): {}",
        spend["timezone"].as_str().unwrap_or("UTC"),
        spend_lines(
            &rows,
            spend["error"].as_str().unwrap_or("no model calls yet")
        )
    ));
    for b in v["budgets"].as_array().into_iter().flatten() {
        let (amount, used) = (
            b["amount"].as_f64().unwrap_or(0.0),
            b["used"].as_f64().unwrap_or(0.0),
        );
        let limit = s(b, "limit");
        let (used_s, amount_s) = if limit.ends_with("tokens") {
            (format!("{used:.0}"), format!("{amount:.0} tokens"))
        } else {
            (money(used), format!("${amount:.2}"))
        };
        let pct = if amount > 0.0 {
            (used / amount * 100.0).round()
        } else {
            100.0
        };
        lines.push(format!(
            "budget     {} {limit}: {used_s} of {amount_s} ({pct}%)",
            s(b, "budget")
        ));
    }
    let errors = v["errors"].as_array().cloned().unwrap_or_default();
    if errors.is_empty() {
        lines.push("errors     none logged since start".into());
    } else {
        lines.push(format!(
            "errors     the last {} warnings and errors:",
            errors.len().min(10)
        ));
        for e in errors.iter().rev().take(10).rev() {
            lines.push(format!(
                "           {} {:5} {}: {}",
                s(e, "ts"),
                s(e, "level"),
                s(e, "target"),
                s(e, "message")
            ));
        }
    }
    lines.join("\n")
}

/// What the store says without the server: pending approvals and today's spend.
fn offline(c: &strata_engine::config::LoadedConfig) -> anyhow::Result<String> {
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let (env, _) = crate::wiring::env(c).await?;
        let (store, _) = crate::storage::open_store(c, env.vault.as_deref()).await?;
        let mut lines = vec![format!("store      {} (read directly)", store.backend())];
        let pending = store.list(Some(ApprovalStatus::Pending), 1000).await?;
        lines.push(format!("approvals  {} pending", pending.len()));
        let tz = c.config.defaults.timezone.as_deref();
        let rows = store
            .usage(&UsageQuery {
                by: UsageBy::Agent,
                since_ms: Some(day_start_ms(strata_engine::clock::now_ms(), tz)),
                turn_id: None,
            })
            .await?;
        lines.push(format!(
            "spend      today ({}): {}",
            tz.unwrap_or("UTC"),
            spend_lines(&rows, "no model calls yet")
        ));
        anyhow::Ok(lines.join("\n"))
    })
}
