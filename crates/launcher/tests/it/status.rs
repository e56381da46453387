//! `strata status` against a running `serve`: agents, a pending approval (a budget asking to
//! be extended), today's spend, the budget's figures and the warning its alert logged; and,
//! with `serve` gone, what the store alone says (exit 1).

use crate::common;

use serde_json::json;
use strata_test_support::{FakeServer, openai};

const TOKEN: &str = "op-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_agents_approvals_spend_budgets_and_errors() {
    let llm = FakeServer::start().await.expect("fake llm");
    // 11 prompt and 3 completion tokens a call.
    llm.script([openai::text("One."), openai::text("Two.")]);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(d, "agents/main/AGENTS.md", "# Main\n");
    // Free input, $2 a completion token, at most 5 of them: each call reserves $10 and
    // costs $6, so the second does not fit in $12 and an approver is asked.
    common::write(
        d,
        "config/config.yaml",
        &(common::fake_llm(&llm.url, "literal-test-key", "fake-model")
            + &format!(
                "    max_tokens: 5\n\
                 server:\n  tokens:\n    - {{name: op, token: {TOKEN}, tier: owner}}\n\
                 pricing:\n  openai:\n    fake-model: {{input_per_mtok: 0, output_per_mtok: 2000000}}\n"
            )),
    );
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    budget: {daily_usd: 12, action: ask}\n",
    );
    let served = common::serve(d);
    let chat = |text: &'static str| {
        let url = format!("{}/chat", served.base);
        async move {
            common::api(
                "POST",
                &url,
                TOKEN,
                Some(json!({"message": text, "agent": "main"})),
            )
            .await
        }
    };
    let (st, v) = chat("first").await;
    assert_eq!(st, 200, "{v}");
    // The second turn waits for an approver.
    let second = tokio::spawn(chat("second"));
    let pending = common::pending(&served.base, TOKEN).await;
    assert_eq!(pending[0]["tool"], "budget", "{pending:?}");

    let status = |token: &str, extra: &[&str]| {
        common::strata(d)
            .args(["status", "--remote", &served.base, "--token", token])
            .args(extra)
            .output()
            .expect("status")
    };
    let out = status(TOKEN, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    eprintln!("{text}");
    for want in [
        "instances  this one (not a cluster member)",
        "agents     main (openai) ok",
        "approvals  1 pending",
        "budget for main",
        "spend      today (UTC): main $6.0000 (1 calls, 14 tokens)",
        "budget     agent:main daily_usd: $6.0000 of $12.00 (50%)",
        "warn",
    ] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.contains("warn") && l.contains("daily budget of agent `main`")),
        "the budget's alert is among the last warnings:\n{text}"
    );
    let out = status(TOKEN, &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["approvals"]["pending"], 1, "{v}");
    assert_eq!(v["agents"][0]["id"], "main", "{v}");
    assert_eq!(v["spend_today"]["rows"][0]["calls"], 1, "{v}");

    // A wrong token is a failure that says so.
    let out = status("wrong-token-0000000", &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("no status from") && text.contains("unauthorized"),
        "{text}"
    );

    second.abort();
    drop(served);
    // No server: what the store says, and exit 1.
    let out = common::strata(d).args(["status"]).output().expect("status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for want in [
        "serve      no status from http://127.0.0.1:",
        "approvals  1 pending",
        "spend      today (UTC): main $6.0000 (1 calls, 14 tokens)",
    ] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
}
