//! Approval requests as `strata approvals list` prints them, from the local data dir
//! (`cmd/security.rs`) or from a running server (`--remote`, `remote.rs`): one output for both.

use serde_json::json;
use strata_runtime::approval::ApprovalRecord;

use crate::Exit;

fn when(secs: i64) -> String {
    std::time::UNIX_EPOCH
        .checked_add(std::time::Duration::from_secs(secs.max(0) as u64))
        .map(|t| humantime::format_rfc3339_seconds(t).to_string())
        .unwrap_or_default()
}

/// Prints approval requests, as JSON or one line each (with who decided, and why).
pub(crate) fn print_list(rows: &[ApprovalRecord], json: bool) -> Exit {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "approvals": rows })).unwrap_or_default()
        );
        return Exit::Ok;
    }
    if rows.is_empty() {
        println!("no approval requests");
        return Exit::Ok;
    }
    for r in rows {
        println!(
            "{}  {:<8} {}  {}",
            r.id,
            r.status.as_str(),
            when(r.created_at),
            r.description
        );
        if let Some(a) = &r.approver {
            println!(
                "    decided by {a}{}",
                r.reason
                    .as_deref()
                    .map(|x| format!(": {x}"))
                    .unwrap_or_default()
            );
        }
    }
    Exit::Ok
}
