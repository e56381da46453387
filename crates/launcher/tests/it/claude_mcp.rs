//! A Claude Code agent under `strata serve`: its CLI gets `--mcp-config` pointing at our own
//! MCP endpoint with a per-boot token scoped to the agent's tools.

use crate::common;

use std::path::PathBuf;

use serde_json::Value;

/// A minimal HTTP/1.1 client over std (the test needs no HTTP crate or curl).
fn http(method: &str, url: &str, auth: &str, body: Option<&str>) -> Value {
    use std::io::{Read, Write};
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .expect("url");
    let mut s = std::net::TcpStream::connect(host).expect("connect");
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {resp}"))
}

fn fake_claude() -> PathBuf {
    strata_test_support::fixture("fake-claude")
}

#[test]
fn claude_code_agents_reach_our_tools_through_our_mcp_endpoint() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("config")).expect("mkdir");
    let wrapper = d.join("claude");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexport FAKE_CLAUDE_LOG='{}'\nexec '{}' \"$@\"\n",
            d.join("claude.log").display(),
            fake_claude().display()
        ),
    )
    .expect("wrapper");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    std::fs::write(
        d.join("config/agents.yaml"),
        format!(
            "agents:\n  main:\n    tools: [read_file]\n    llm: {{provider: claude-code, command: '{}', timeout_secs: 30}}\n",
            wrapper.display()
        ),
    )
    .expect("agents");
    let served = common::serve(d);
    let (api, mcp) = (format!("{}/api", served.base), served.mcp.clone());
    let token = std::fs::read_to_string(d.join("data/api-token")).expect("token");

    let bearer = format!("Bearer {}", token.trim());
    let reply = http(
        "POST",
        &api.replace("/api", "/chat"),
        &bearer,
        Some(r#"{"message":"hello"}"#),
    );
    assert_eq!(reply["response"], "echo: hello", "{reply}");

    let log = std::fs::read_to_string(d.join("claude.log")).expect("log");
    let args = log.lines().find(|l| l.starts_with("ARGS:")).expect("args");
    let cfg_path = args
        .split("--mcp-config ")
        .nth(1)
        .expect("--mcp-config passed")
        .split_whitespace()
        .next()
        .expect("path");
    // Each run gets its own copy carrying the turn header; it is gone once the run ended.
    assert!(cfg_path.contains(".turn-"), "{cfg_path}");
    assert!(
        !std::path::Path::new(cfg_path).exists(),
        "per-turn config left behind"
    );
    // The CLI's own tools: none, and a settings file that keeps it off the data directory.
    assert!(args.contains("--tools  --allowedTools"), "{args}");
    let settings = d.join("data/claude-code/main.settings.json");
    assert!(
        args.contains(&format!("--settings {}", settings.display())),
        "{args}"
    );
    let rules = std::fs::read_to_string(&settings).expect("settings file");
    let data = std::path::absolute(d.join("data")).expect("abs");
    assert!(
        rules.contains(&format!("\"Read(/{}/**)\"", data.display())),
        "{rules}"
    );
    let base = d.join("data/mcp/main.json");
    let cfg_path = base.to_str().expect("utf8");
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(cfg_path).expect("config file"))
        .expect("json");
    let server = &cfg["mcpServers"]["strata"];
    assert_eq!(server["url"], Value::String(mcp.clone()));
    let auth = server["headers"]["Authorization"]
        .as_str()
        .expect("auth header")
        .to_owned();
    assert_ne!(auth, bearer, "the agent has its own token");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(cfg_path)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // That token sees exactly the agent's tools, and calls are audited as the agent.
    let tools = http("GET", &format!("{api}/tools"), &auth, None);
    let names: Vec<&str> = tools["value"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("n"))
        .collect();
    assert_eq!(names, ["read_file"]);
    let refused = http(
        "POST",
        &format!("{api}/invoke"),
        &auth,
        Some(r#"{"tool":"list_files"}"#),
    );
    assert_eq!(refused["code"], "forbidden");

    drop(served);
}

#[test]
fn claude_code_agents_ask_each_other_through_mcp_and_the_depth_limit_holds() {
    if !common::python_mcp_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("config")).expect("mkdir");
    let cli = strata_test_support::fixture("fake-claude-mcp.py");
    let mut agents = String::from("agents:\n");
    for id in ["alpha", "beta"] {
        agents.push_str(&format!(
            "  {id}:\n    tools: [ask_agent]\n    llm: {{provider: claude-code, command: '{}', timeout_secs: 60}}\n",
            cli.display()
        ));
    }
    std::fs::write(d.join("config/agents.yaml"), agents).expect("agents");
    std::fs::write(
        d.join("config/team.json"),
        r#"{"people": [], "agents": [{"id": "alpha", "agent_tier": "coordinator"}, {"id": "beta", "agent_tier": "coordinator"}]}"#,
    )
    .expect("team");
    // Turns started by an agent are judged as that agent's: let ask_agent run unattended.
    std::fs::write(
        d.join("config/config.yaml"),
        "security:\n  access_control:\n    safe_tools: [ask_agent]\n",
    )
    .expect("config");
    let served = common::serve(d);
    let chat = format!("{}/chat", served.base);
    let token = std::fs::read_to_string(d.join("data/api-token")).expect("token");
    let bearer = format!("Bearer {}", token.trim());

    // One hop: alpha's CLI calls ask_agent over MCP; beta's CLI answers.
    let reply = http(
        "POST",
        &chat,
        &bearer,
        Some(r#"{"agent":"alpha","message":"ASK beta ping"}"#),
    );
    let text = reply["response"].as_str().unwrap_or_default();
    assert!(
        text.contains(r#""agent":"beta""#) && text.contains("echo: ping"),
        "{reply}"
    );

    // alpha → beta → alpha → beta: the third hop is refused, although every hop crossed a
    // process boundary (the depth travels with the turn header).
    let reply = http(
        "POST",
        &chat,
        &bearer,
        Some(r#"{"agent":"alpha","message":"ASK beta ASK alpha ASK beta hello"}"#),
    );
    let text = reply["response"].as_str().unwrap_or_default();
    assert!(text.contains("depth limit reached (3)"), "{reply}");
    assert!(
        !text.contains("echo: hello"),
        "the fourth turn never ran: {reply}"
    );

    // An agent cannot ask itself, even from its CLI.
    let reply = http(
        "POST",
        &chat,
        &bearer,
        Some(r#"{"agent":"alpha","message":"ASK alpha hi"}"#),
    );
    let text = reply["response"].as_str().unwrap_or_default();
    assert!(text.contains("cannot message itself"), "{reply}");

    // The per-turn configs are gone once the turns end.
    let left: Vec<String> = std::fs::read_dir(d.join("data/mcp"))
        .expect("mcp dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".turn-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    drop(served);
}
