//! `llm.context_window` through the binary: `strata chat` against a fake OpenAI-compatible
//! server that, like a small local model, refuses what does not fit in 4,096 tokens.

use crate::common;

use std::path::Path;

use serde_json::Value;

const WINDOW: usize = 4096;

fn overlay(url: &str, window: Option<usize>, agents: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let mut config = common::fake_llm(url, "none", "small-model");
    if let Some(w) = window {
        config.push_str(&format!("    context_window: {w}\n"));
    }
    common::write(d, "config/config.yaml", &config);
    common::write(d, "config/agents.yaml", agents);
    dir
}

async fn chat(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = common::strata(dir);
    cmd.arg("chat").args(args);
    let o = tokio::process::Command::from(cmd)
        .output()
        .await
        .expect("run strata chat");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn user_messages(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_fitted_into_a_small_models_context_window() {
    let (url, seen) = strata_test_support::context_limited_llm(WINDOW).await;
    let all = "agents:\n  main:\n    tools: all\n";

    // Without a window, every tool's schema goes and the server refuses the first message —
    // what a new user met with a 4,096-token llama.cpp server.
    let ov = overlay(&url, None, all);
    let (code, _, err) = chat(ov.path(), &["hello"]).await;
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("maximum context length"), "{err}");
    assert!(
        err.contains("set `llm.context_window`"),
        "says what to do: {err}"
    );

    // With it, the request is fitted: fewer tools, those the message is about among them.
    let ov = overlay(&url, Some(WINDOW), all);
    let (code, out, err) = chat(
        ov.path(),
        &["please read the file notes.md and list the files beside it"],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("fits: "), "{out}");
    let sent = seen
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .expect("a request");
    let tools = common::tool_names(&sent);
    assert!(
        tools.len() < common::core_tools().len() && !tools.is_empty(),
        "{tools:?}"
    );
    for t in ["read_file", "list_files"] {
        assert!(tools.iter().any(|n| n == t), "{t} in {tools:?}");
    }
    // Compact on the wire: Rust's numeric formats are not sent.
    assert!(!sent["tools"].to_string().contains("\"uint"), "{sent}");

    // A long conversation: older turns are left out, this one always goes, each turn fits.
    let long = |i: usize| format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(80));
    for i in 0..5 {
        let (code, out, err) = chat(ov.path(), &[&long(i)]).await;
        assert_eq!(code, Some(0), "turn {i}: {err}");
        assert!(out.starts_with("fits: "), "turn {i}: {out}");
    }
    let last = seen
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .expect("a request");
    let users = user_messages(&last);
    assert_eq!(users.last(), Some(&long(4)), "this turn's message went");
    assert!(
        !users.contains(&long(0)),
        "the oldest turn was left out: {} user messages",
        users.len()
    );

    // What cannot fit whatever is left out stops with what to change, and nothing is sent.
    let named: Vec<String> = common::core_tools()
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect();
    let ov = overlay(
        &url,
        Some(WINDOW),
        &format!("agents:\n  main:\n    tools: [{}]\n", named.join(", ")),
    );
    let before = seen.lock().expect("lock").len();
    let (code, _, err) = chat(ov.path(), &["hello"]).await;
    assert_ne!(code, Some(0));
    for part in [
        "context window is 4096",
        "agents.main.tools",
        "llm.context_window",
        "bigger context",
    ] {
        assert!(err.contains(part), "{part} in {err}");
    }
    assert_eq!(seen.lock().expect("lock").len(), before, "nothing was sent");
}
