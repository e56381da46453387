//! `vault:` references resolve with the vault in every setting that may hold one, through the
//! real binary and a real vault: control tokens, the `/execute` key, an MCP server's `env` and
//! `headers`, and a prompt skill's provider key. Each of these used to be resolved without
//! the vault (serve refused to start, the MCP server was dropped, the skill failed).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use strata_test_support::{FakeServer, openai};

use crate::common::{self, write};

const BIN: &str = env!("CARGO_BIN_EXE_strata");
const PASS: &str = "test vault passphrase";
const PEER_TOKEN: &str = "peer-token-from-the-vault-0123";
const EXEC_KEY: &str = "execute-key-from-the-vault";
const ENV_SECRET: &str = "env-secret-from-the-vault";

fn vault(overlay: &Path, entries: &[(&str, &str)]) {
    let mut v =
        strata_vault::FileVault::create_with_iterations(&overlay.join("config"), PASS, 1000)
            .expect("vault");
    for (k, val) in entries {
        v.set(k, val).expect("set");
    }
}

/// `strata serve` with the vault's passphrase in its environment; returns the child and its
/// base URL once it announced its address.
fn serve(overlay: &Path) -> (Child, String) {
    let mut child = common::strata(overlay)
        .args(["serve", "--set", "server.port=0"])
        .env("STRATA_VAULT_PASSPHRASE", PASS)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = String::new();
    let mut line = String::new();
    let mut base = None;
    while base.is_none() && Instant::now() < deadline {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.push_str(&line);
        if let Some(i) = line.find("control API on ") {
            let rest = &line[i + "control API on ".len()..];
            let api = rest.split(',').next().unwrap_or_default().trim();
            base = Some(api.trim_end_matches("/api").to_owned());
        }
    }
    std::thread::spawn(move || for _ in err.lines() {});
    let Some(base) = base else {
        let _ = child.kill();
        panic!("serve did not start:\n{seen}");
    };
    (child, base)
}

fn stop(mut child: Child) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

fn get(url: &str, headers: &[(&str, &str)]) -> (u16, serde_json::Value) {
    request("GET", url, headers, None)
}

fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let c = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        let mut r = match method {
            "POST" => c.post(url),
            _ => c.get(url),
        };
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        if let Some(b) = body {
            r = r
                .header("content-type", "application/json")
                .body(b.to_owned());
        }
        let resp = r.send().await.expect("send");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(serde_json::Value::Null))
    })
}

#[test]
fn serve_resolves_tokens_the_execute_key_and_mcp_env_and_headers_from_the_vault() {
    // B: a plain server whose per-boot token A's MCP client must send as a header.
    let b = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(b.path().join("config")).expect("mkdir");
    let (b_child, b_base) = serve(b.path());
    let b_token = std::fs::read_to_string(b.path().join("data/api-token")).expect("B's token");

    // C: the overlay of a stdio MCP server (our own `mcp serve --stdio`), started by A with
    // one variable from A's vault, which it writes down before it serves.
    let c = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(c.path().join("config")).expect("mkdir");
    let seen_env = c.path().join("seen-env");

    let a = tempfile::tempdir().expect("tmp");
    vault(
        a.path(),
        &[
            ("peer-token", PEER_TOKEN),
            ("exec-key", EXEC_KEY),
            ("env-secret", ENV_SECRET),
            ("b-auth", &format!("Bearer {}", b_token.trim())),
        ],
    );
    write(
        a.path(),
        "config/config.yaml",
        "server:\n  tokens:\n    - {name: peer, token: vault:peer-token, tier: owner}\n  execute_api_key: vault:exec-key\n",
    );
    let script = format!(
        "printf '%s' \"$PEER_SECRET\" > '{}'; exec '{BIN}' --overlay '{}' mcp serve --stdio",
        seen_env.display(),
        c.path().display()
    );
    let mcp = serde_json::json!({"servers": {
        "viaenv": {"transport": "stdio", "command": "sh", "args": ["-c", script],
                   "env": {"PEER_SECRET": "vault:env-secret"}},
        "viahttp": {"transport": "http", "url": format!("{b_base}/mcp"),
                    "headers": {"Authorization": "vault:b-auth"}},
    }});
    write(
        a.path(),
        "config/mcp.yaml",
        &serde_json::to_string(&mcp).expect("json is yaml"),
    );
    let (a_child, a_base) = serve(a.path());

    // server.tokens[].token from the vault: the token works, a wrong one does not.
    let (st, tools) = get(
        &format!("{a_base}/api/tools"),
        &[("X-Strata-Token", PEER_TOKEN)],
    );
    assert_eq!(st, 200, "{tools}");
    let (st, _) = get(
        &format!("{a_base}/api/tools"),
        &[("X-Strata-Token", "vault:peer-token")],
    );
    assert_eq!(st, 401, "the reference itself is not the token");
    let names: Vec<&str> = tools["value"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    // mcp.yaml env from the vault: the stdio server got it and its tools are registered.
    assert!(names.contains(&"viaenv__current_time"), "{names:?}");
    assert_eq!(
        std::fs::read_to_string(&seen_env).expect("the server ran"),
        ENV_SECRET
    );
    // mcp.yaml headers from the vault: B accepted A's client, so B's tools are here.
    assert!(names.contains(&"viahttp__current_time"), "{names:?}");

    // server.execute_api_key from the vault: the key is accepted (the body is then checked).
    let url = format!("{a_base}/execute");
    let (st, v) = request("POST", &url, &[("X-API-Key", EXEC_KEY)], Some("{}"));
    assert_eq!((st, v["code"].as_str()), (400, Some("bad_request")), "{v}");
    let (st, _) = request("POST", &url, &[("X-API-Key", "vault:exec-key")], Some("{}"));
    assert_eq!(st, 401);

    stop(a_child);
    stop(b_child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_skill_reaches_its_provider_with_the_key_from_the_vault() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([openai::text("briefed")]);
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    vault(d, &[("llm-key", "sk-from-the-vault")]);
    write(
        d,
        "config/config.yaml",
        &common::fake_llm(&fake.url, "vault:llm-key", "fake"),
    );
    write(d, "config/agents.yaml", "agents:\n  main:\n    tools: []\n");
    write(
        d,
        "skills/brief.yaml",
        "name: brief\ndescription: Briefs.\nprompt: Brief me.\n",
    );
    let o = tokio::process::Command::from(common::strata(d))
        .args(["skill", "run", "brief"])
        .env("STRATA_VAULT_PASSPHRASE", PASS)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "briefed");
    let reqs = fake.requests();
    assert_eq!(
        reqs[0].headers.get("authorization").map(String::as_str),
        Some("Bearer sk-from-the-vault")
    );
}
