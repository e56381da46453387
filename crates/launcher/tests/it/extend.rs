//! `create_skill` and `install_mcp` through a running server: gated, owners only, picked up
//! while it runs, never overwriting without `replace`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common;

const OWNER: &str = "owner-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";

/// Invokes `tool` with `args` as the owner and approves the request it waits on.
async fn approved(base: &str, tool: &'static str, args: Value) -> Value {
    let url = format!("{base}/api/invoke");
    let call = tokio::spawn(async move {
        common::api(
            "POST",
            &url,
            OWNER,
            Some(json!({"tool": tool, "args": args})),
        )
        .await
    });
    let rows = common::pending(base, OWNER).await;
    let id = rows[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(rows[0]["tool"], tool, "{rows:?}");
    let (st, v) = common::api(
        "POST",
        &format!("{base}/api/approvals/{id}/approve"),
        OWNER,
        Some(json!({"reason": "test"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (_, v) = call.await.expect("call");
    v["value"].clone()
}

async fn tool_names(base: &str) -> Vec<String> {
    let (_, v) = common::api("GET", &format!("{base}/api/tools"), OWNER, None).await;
    v["value"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_add_skills_and_mcp_servers_with_an_owners_approval() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "server:\n  tokens:\n    - {{name: boss, token: {OWNER}, tier: owner}}\n    - {{name: helper, token: {ADMIN}, tier: admin}}\n"
        ),
    );
    common::write(
        d,
        "config/mcp.yaml",
        "# Servers of this deployment.\nservers: {}\n",
    );
    std::fs::set_permissions(
        d.join("config/mcp.yaml"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .expect("chmod");
    // The peer MCP server: another overlay's strata over stdio.
    let peer = tempfile::tempdir().expect("tmp");
    common::write(peer.path(), "config/config.yaml", "log:\n  level: warn\n");
    let served = common::serve(d);
    let base = served.base.clone();

    // A command skill: written where the watcher finds it, then a tool of the server.
    let r = approved(
        &base,
        "create_skill",
        json!({
            "name": "greet", "description": "Says hello.",
            "command": "echo hello {who}",
            "params": {"who": {"type": "string", "description": "Whom", "required": true}}
        }),
    )
    .await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["value"]["path"], "skills/greet.yaml", "{r}");
    let written = std::fs::read_to_string(d.join("skills/greet.yaml")).expect("skill file");
    assert!(written.contains("echo hello {who}"), "{written}");
    let mut seen = false;
    for _ in 0..100 {
        if tool_names(&base).await.iter().any(|n| n == "skill__greet") {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "the running server did not pick up the new skill");
    // The same name again without `replace`: refused, the file as it was.
    let again = approved(
        &base,
        "create_skill",
        json!({"name": "greet", "description": "Other.", "prompt": "Say hi."}),
    )
    .await;
    assert_eq!(again["ok"], false, "{again}");
    assert!(
        again["error"]
            .as_str()
            .is_some_and(|e| e.contains("replace")),
        "{again}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("skills/greet.yaml")).expect("file"),
        written
    );
    // A skill that would not load is never written.
    let bad = approved(
        &base,
        "create_skill",
        json!({"name": "both", "description": "x", "prompt": "a", "command": "b"}),
    )
    .await;
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(!d.join("skills/both.yaml").exists());

    // An admin is refused (before any approval is asked).
    let (_, refused) = common::api(
        "POST",
        &format!("{base}/api/invoke"),
        ADMIN,
        Some(json!({"tool": "install_mcp", "args": {"name": "x", "transport": "stdio", "command": "true"}})),
    )
    .await;
    assert_eq!(refused["value"]["status"], "denied", "{refused}");
    assert!(
        refused["value"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("only owners")),
        "{refused}"
    );
    // A literal secret is refused.
    let secret = approved(
        &base,
        "install_mcp",
        json!({"name": "leaky", "transport": "stdio", "command": "true",
               "env": {"API_TOKEN": "plain-value"}}),
    )
    .await;
    assert_eq!(secret["ok"], false, "{secret}");
    assert!(
        secret["error"]
            .as_str()
            .is_some_and(|e| e.contains("vault:")),
        "{secret}"
    );
    // A vault reference the vault cannot answer is refused before anything is written.
    let missing = approved(
        &base,
        "install_mcp",
        json!({"name": "later", "transport": "stdio", "command": "true",
               "env": {"API_TOKEN": "vault:later-token"}}),
    )
    .await;
    assert_eq!(missing["ok"], false, "{missing}");
    assert!(
        missing["error"]
            .as_str()
            .is_some_and(|e| e.contains("later-token")),
        "{missing}"
    );
    assert!(
        !std::fs::read_to_string(d.join("config/mcp.yaml"))
            .expect("file")
            .contains("later")
    );

    // An MCP server added and started: its tools are callable at once.
    let r = approved(
        &base,
        "install_mcp",
        json!({
            "name": "peer", "transport": "stdio",
            "command": env!("CARGO_BIN_EXE_strata"),
            "args": ["--overlay", peer.path().display().to_string(), "mcp", "serve", "--stdio"],
            "env": {"PEER_MODE": "test"}
        }),
    )
    .await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["value"]["started"], true, "{r}");
    let tools: Vec<String> = r["value"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    assert!(tools.iter().any(|t| t == "peer__current_time"), "{tools:?}");
    let (_, now) = common::api(
        "POST",
        &format!("{base}/api/invoke"),
        OWNER,
        Some(json!({"tool": "peer__current_time"})),
    )
    .await;
    assert_eq!(now["value"]["ok"], true, "{now}");
    let file = std::fs::read_to_string(d.join("config/mcp.yaml")).expect("mcp.yaml");
    assert!(file.contains("peer"), "{file}");
    assert!(
        file.starts_with("# Servers of this deployment.\nservers:\n  peer:"),
        "{file}"
    );
    let mode = std::fs::metadata(d.join("config/mcp.yaml"))
        .expect("meta")
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o640,
        "the file keeps its permissions"
    );
    drop(served);
}
