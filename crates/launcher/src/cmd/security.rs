//! `strata approvals list|approve|deny` and `strata safety scan`.

use std::io::Read;
use std::sync::Arc;

use serde_json::{Value, json};
use strata_engine::Principal;
use strata_engine::safety::{ContentSafety, Scan};
use strata_runtime::approval::{ApprovalStatus, ApprovalStore, decide_in};

use crate::Exit;
use crate::cli::ApprovalsCommand;
use crate::cmd::context::{Context, open_store};

fn rt() -> Result<tokio::runtime::Runtime, Exit> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: {e}");
            Exit::Failure
        })
}

/// Runs an approvals command on the local data dir (the running server's waiters notice the
/// decision within half a second) or, with `--remote`, through the control API.
pub fn approvals(loaded: Option<&Context>, command: ApprovalsCommand) -> Exit {
    let remote = match &command {
        ApprovalsCommand::List { remote, .. }
        | ApprovalsCommand::Approve { remote, .. }
        | ApprovalsCommand::Deny { remote, .. } => remote.clone(),
    };
    if let (Some(url), Some(token)) = (&remote.remote, &remote.token) {
        return crate::remote::approvals(url, token, &command);
    }
    let Some(l) = loaded else {
        eprintln!("error: no overlay loaded");
        return Exit::Failure;
    };
    let rt = match rt() {
        Ok(r) => r,
        Err(e) => return e,
    };
    let opened = rt.block_on(async {
        let (env, _) = crate::wiring::env(&l.config).await?;
        open_store(l, &env).await
    });
    let store = match opened {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Exit::Failure;
        }
    };
    let store: Arc<dyn ApprovalStore> = store;
    match command {
        ApprovalsCommand::List {
            all, limit, json, ..
        } => {
            if !(1..=1000).contains(&limit) {
                eprintln!("error: --limit must be from 1 to 1000");
                return Exit::Usage;
            }
            let status = (!all).then_some(ApprovalStatus::Pending);
            match rt.block_on(store.list(status, limit)) {
                Ok(rows) => crate::approvals::print_list(&rows, json),
                Err(e) => {
                    eprintln!("error: {e}");
                    Exit::Failure
                }
            }
        }
        ApprovalsCommand::Approve { id, reason, .. } => {
            decide_local(&rt, store.as_ref(), &id, true, reason)
        }
        ApprovalsCommand::Deny { id, reason, .. } => {
            decide_local(&rt, store.as_ref(), &id, false, reason)
        }
    }
}

fn decide_local(
    rt: &tokio::runtime::Runtime,
    store: &dyn ApprovalStore,
    id: &str,
    approve: bool,
    reason: Option<String>,
) -> Exit {
    // The local operator owns the data dir (and could edit the database); deciding as the
    // operator is no new power. Remote decisions are checked against `security.hitl.approvers`.
    match rt.block_on(decide_in(
        store,
        id,
        approve,
        &Principal::Operator,
        reason.as_deref(),
    )) {
        Ok(()) => {
            println!("{} {id}", if approve { "approved" } else { "denied" });
            Exit::Ok
        }
        Err(e) => {
            eprintln!("error: {e}");
            Exit::Failure
        }
    }
}

/// One line of the human-readable scan report per finding.
fn report(scan: &Scan, policy: &str) -> String {
    let mut s = String::new();
    if scan.removed.is_empty() {
        s.push_str("sanitiser: nothing to remove\n");
    } else {
        s.push_str("sanitiser removes:\n");
        for r in &scan.removed {
            s.push_str(&format!("  {:>5} × {}\n", r.count, r.what));
        }
    }
    s.push_str(&format!("score: {}/10\n", scan.score));
    if scan.categories.is_empty() {
        s.push_str("categories: none\n");
    } else {
        s.push_str("categories:\n");
        for c in &scan.categories {
            s.push_str(&format!(
                "  {:<18} {}\n",
                c.category.as_str(),
                c.rules.join(", ")
            ));
        }
    }
    if scan.rules.is_empty() {
        s.push_str("rules: none matched\n");
    } else {
        s.push_str("rules:\n");
        for r in &scan.rules {
            s.push_str(&format!(
                "  {:<22} {:<17} matches {:<3} {}\n",
                r.rule,
                r.category.as_str(),
                r.matches,
                if r.sample.is_empty() {
                    String::new()
                } else {
                    format!("“{}”", r.sample)
                }
            ));
        }
    }
    if !scan.layers.is_empty() {
        s.push_str("decoded layers scored:\n");
        for l in &scan.layers {
            s.push_str(&format!(
                "  {} (depth {}): {} — {}\n",
                l.kind,
                l.depth,
                if l.rules.is_empty() {
                    "no rules".to_owned()
                } else {
                    l.rules.join(", ")
                },
                l.preview
                    .chars()
                    .take(100)
                    .collect::<String>()
                    .replace('\n', " ")
            ));
        }
    }
    s.push_str(&format!(
        "verdict: {} (policy {policy}){}",
        serde_json::to_value(scan.verdict)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        if scan.alert { ", alert" } else { "" }
    ));
    s
}

fn scan_json(scan: &Scan) -> Value {
    json!({
        "score": scan.score,
        "alert": scan.alert,
        "verdict": scan.verdict,
        "rules": scan.rules,
        "categories": scan.categories,
        "layers": scan.layers,
        "removed": scan.removed,
    })
}

/// `strata safety scan FILE|- [--json|--jsonl]`.
pub fn safety_scan(loaded: &Context, input: &str, json: bool, jsonl: bool) -> Exit {
    let cfg = loaded.config.config.security.content_safety.clone();
    let policy = serde_json::to_value(cfg.policy)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let safety = ContentSafety::new(cfg);
    let mut text = String::new();
    let read = if input == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read(input).map(|b| text = String::from_utf8_lossy(&b).into_owned())
    };
    if let Err(e) = read {
        eprintln!("error: cannot read {input}: {e}");
        return Exit::Failure;
    }
    if !jsonl {
        let scan = safety.scan(&text);
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(&scan_json(&scan)).unwrap_or_default()
            );
        } else {
            println!("{}", report(&scan, &policy));
        }
        return Exit::Ok;
    }
    let mut bad = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let t = match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(o)) => match o.get("text") {
                Some(Value::String(t)) => t.clone(),
                _ => {
                    eprintln!("error: line {}: no string field `text`", i + 1);
                    bad += 1;
                    continue;
                }
            },
            Ok(_) => {
                eprintln!("error: line {}: not a JSON object", i + 1);
                bad += 1;
                continue;
            }
            Err(e) => {
                eprintln!("error: line {}: {e}", i + 1);
                bad += 1;
                continue;
            }
        };
        let mut v = scan_json(&safety.scan(&t));
        v["line"] = json!(i + 1);
        println!("{v}");
    }
    if bad > 0 { Exit::Usage } else { Exit::Ok }
}
