//! Shared by the launcher's integration tests: the binary with a clean environment, overlay
//! files, a fake provider's config, and a real `strata serve` on an ephemeral port.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `strata --overlay OVERLAY` without any of this process's `STRATA_*` variables (tests never
/// depend on the environment they happen to run in).
pub fn strata(overlay: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    for (k, _) in std::env::vars() {
        if k.starts_with("STRATA_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("--overlay").arg(overlay);
    cmd
}

/// Writes `text` to `dir/rel`, creating the directories on the way.
pub fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

/// A `defaults.llm` block (YAML) pointing at a fake OpenAI-compatible server at `url`.
pub fn fake_llm(url: &str, api_key: &str, model: &str) -> String {
    format!(
        "defaults:\n  llm:\n    provider: openai\n    base_url: {url}/v1\n    api_key: {api_key}\n    model: {model}\n    retry_base_ms: 5\n"
    )
}

/// `connectors.discord` for one account `main` on the fake Discord at `port` (YAML, at the
/// top level).
pub fn fake_discord(port: u16) -> String {
    format!(
        "connectors:\n  discord:\n    api_proxy: 127.0.0.1:{port}\n    plain_http: true\n    \
         gateway_url: ws://127.0.0.1:{port}\n    accounts:\n      main:\n        token: env:PATH\n"
    )
}

/// The keys of a JSON object, sorted (to pin an output contract's field set).
pub fn sorted_keys(v: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v
        .as_object()
        .expect("a JSON object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

/// A running server; stopped with SIGTERM when dropped.
pub struct Served {
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `http://127.0.0.1:PORT/mcp`.
    pub mcp: String,
    /// The last lines the server wrote to stderr, for a failing test to show.
    pub log: LogTail,
}

/// What a server wrote to stderr lately, kept by the thread that drains it.
pub type LogTail = std::sync::Arc<std::sync::Mutex<Tail>>;

/// The last [`LOG_TAIL`] lines, and as many of the warnings and errors among all of them.
#[derive(Default)]
pub struct Tail {
    last: std::collections::VecDeque<String>,
    warnings: std::collections::VecDeque<String>,
}

/// How many lines a [`Tail`] keeps of each.
pub const LOG_TAIL: usize = 300;

fn keep(q: &mut std::collections::VecDeque<String>, line: &str) {
    if q.len() == LOG_TAIL {
        q.pop_front();
    }
    q.push_back(line.to_owned());
}

/// Drains `err` on a thread of its own (so the server never blocks on a full pipe), keeping
/// its last lines.
pub fn drain(err: BufReader<ChildStderr>) -> LogTail {
    let tail = LogTail::default();
    let kept = tail.clone();
    std::thread::spawn(move || {
        for line in err.split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line);
            let mut t = kept.lock().unwrap_or_else(|p| p.into_inner());
            if line.contains(" WARN ") || line.contains(" ERROR ") {
                keep(&mut t.warnings, &line);
            }
            keep(&mut t.last, &line);
        }
    });
    tail
}

/// `tail` as text: the warnings and errors, then the last lines.
pub fn tail_text(tail: &LogTail) -> String {
    let t = tail.lock().unwrap_or_else(|p| p.into_inner());
    let join = |q: &std::collections::VecDeque<String>| {
        q.iter().map(String::as_str).collect::<Vec<_>>().join("\n")
    };
    format!(
        "warnings and errors:\n{}\nlast lines:\n{}",
        join(&t.warnings),
        join(&t.last)
    )
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        // A test failing while the server runs shows what the server said.
        if std::thread::panicking() {
            eprintln!("--- serve at {}:\n{}", self.base, tail_text(&self.log));
        }
    }
}

/// Spawns `strata --overlay OVERLAY serve` on port 0 (info logs, no colour) and returns it with
/// its stderr, unread.
pub fn spawn_serve(overlay: &Path, extra: &[&str]) -> (Child, BufReader<ChildStderr>) {
    spawn_serve_env(overlay, extra, &[])
}

/// [`spawn_serve`] with extra environment variables.
pub fn spawn_serve_env(
    overlay: &Path,
    extra: &[&str],
    vars: &[(&str, &str)],
) -> (Child, BufReader<ChildStderr>) {
    let mut child = strata(overlay)
        .args(["serve", "--set", "server.port=0"])
        .args(extra)
        .envs(vars.iter().copied())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let err = BufReader::new(child.stderr.take().expect("stderr"));
    (child, err)
}

/// The fields of a tool-call result (`strata invoke --json`, the control API), sorted.
pub const INVOKE_RESULT_KEYS: [&str; 7] = [
    "elapsed_ms",
    "error",
    "ok",
    "request_id",
    "status",
    "tool",
    "value",
];

/// Starts `strata --overlay OVERLAY serve` on port 0 and waits for it to announce its address.
pub fn serve(overlay: &Path) -> Served {
    serve_with(overlay, &[])
}

/// [`serve`] with extra arguments (`--set k=v`…).
pub fn serve_with(overlay: &Path, extra: &[&str]) -> Served {
    serve_env(overlay, extra, &[])
}

/// [`serve_with`] with extra environment variables.
pub fn serve_env(overlay: &Path, extra: &[&str], vars: &[(&str, &str)]) -> Served {
    let (child, mut err) = spawn_serve_env(overlay, extra, vars);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut line = String::new();
    let mut found = None;
    let mut said = String::new();
    while Instant::now() < deadline && found.is_none() {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        said.push_str(&line);
        // "control API on http://H:P/api, MCP on http://H:P/mcp address=…"
        if let Some(i) = line.find("control API on ") {
            let rest = &line[i + "control API on ".len()..];
            let api = rest.split(',').next().unwrap_or_default().trim();
            let mcp = rest
                .split("MCP on ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next());
            found = Some((
                api.trim_end_matches("/api").to_owned(),
                mcp.unwrap_or_default().to_owned(),
            ));
        }
    }
    let log = drain(err);
    let Some((base, mcp)) = found else {
        panic!("serve did not announce its address; it said:\n{said}");
    };
    Served {
        child,
        base,
        mcp,
        log,
    }
}

/// Whether the Python client is installed. In CI it must be (`.ci/run` installs it); on a
/// developer machine without it the test says so and passes.
pub fn python_mcp_available() -> bool {
    strata_test_support::python_has("mcp.client.session", "mcp")
}

/// An HTTP client for the control API (no proxy, a generous timeout).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// `method url` with the control token `token` and an optional JSON body: status and body.
pub async fn api(method: &str, url: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let c = client();
    let mut req = match method {
        "POST" => c.post(url),
        _ => c.get(url),
    }
    .header("X-Strata-Token", token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("send");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The pending approval requests of the server at `base`, once at least one has appeared.
pub async fn pending(base: &str, token: &str) -> Vec<Value> {
    for _ in 0..300 {
        let (_, v) = api("GET", &format!("{base}/api/approvals"), token, None).await;
        let rows = v["value"]["approvals"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !rows.is_empty() {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no approval request appeared");
}

/// The audit log of the overlay at `overlay` once `done` holds for its text. A running server
/// appends audit lines from a writer thread, so a line can land just after the reply that
/// reported the call; this waits for it (10 s at most) instead of racing it. It blocks: the
/// server is another process.
pub fn audit_when(overlay: &Path, done: impl Fn(&str) -> bool) -> String {
    let path = overlay.join("data/audit.jsonl");
    let mut text = String::new();
    for _ in 0..200 {
        text = std::fs::read_to_string(&path).unwrap_or_default();
        if done(&text) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the audit log never held what was expected; it has:\n{text}");
}

/// The names of the tools a model request (OpenAI wire format) showed the model.
pub fn tools_shown(req: &strata_test_support::Recorded) -> Vec<String> {
    tool_names(&req.body)
}

/// The tool names in a request body (OpenAI wire format).
pub fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// What the first tool result in a model request (OpenAI wire format) said.
pub fn first_tool_result(req: &strata_test_support::Recorded) -> String {
    req.body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .map(|m| m["content"].to_string())
        .unwrap_or_default()
}

/// An overlay in `d` whose agents talk to the fake LLM at `llm_url` and the fake Discord at
/// `discord_port`: `config.yaml` (plus `extra` YAML), `agents.yaml` and `team.json`.
pub fn discord_overlay(
    d: &Path,
    (llm_url, discord_port): (&str, u16),
    extra: &str,
    agents_yaml: &str,
    team_json: &str,
) {
    write(
        d,
        "config/config.yaml",
        &(fake_llm(llm_url, "literal-test-key", "fake-model")
            + &fake_discord(discord_port)
            + extra),
    );
    write(d, "config/agents.yaml", agents_yaml);
    write(d, "config/team.json", team_json);
}

/// Waits (up to 10 s) until the fake Discord has seen a gateway session.
pub async fn gateway_up(fake: &strata_test_support::discord::Fake) {
    for _ in 0..500 {
        if !fake.identified.lock().expect("lock").is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The core tools of the `strata` binary, sorted: strata-tools', the launcher's `doctor`,
/// and with the default `browser` feature the browser's.
pub fn core_tools() -> Vec<&'static str> {
    let mut core: Vec<&str> = strata_tools::link().to_vec();
    core.push("doctor");
    if cfg!(feature = "browser") {
        core.extend(["browse_url", "browser"]);
    }
    core.sort_unstable();
    core
}

/// A schema of its own, dropped when the test ends.
#[cfg(feature = "postgres")]
pub struct Schema {
    pub url: String,
    pub name: String,
}

#[cfg(feature = "postgres")]
impl Schema {
    pub fn new() -> Option<Schema> {
        Some(Schema {
            url: strata_test_support::postgres_url()?,
            name: strata_test_support::unique_schema(),
        })
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        let (c, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        c.batch_execute(&format!("SET search_path TO {}", self.name))
            .await
            .expect("search path");
        c
    }

    pub async fn count(&self, sql: &str) -> i64 {
        self.client()
            .await
            .query_one(sql, &[])
            .await
            .expect("count")
            .get(0)
    }
}

#[cfg(feature = "postgres")]
impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok((c, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                    tokio::spawn(conn);
                    let _ = c
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                        .await;
                }
            });
        })
        .join();
    }
}
