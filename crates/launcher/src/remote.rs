//! `--remote URL --token T`: `tools`, `inspect`, `invoke` and `events` against a running
//! server's control API, with the same output and exit codes as the local commands.

use std::time::Duration;

use serde_json::{Value, json};

use crate::Exit;

struct Remote {
    base: String,
    token: String,
    client: reqwest::Client,
    rt: tokio::runtime::Runtime,
}

impl Remote {
    fn new(url: &str, token: &str) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(300))
            .no_proxy()
            .build()
            .map_err(|e| e.to_string())?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Remote {
            base: url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            client,
            rt,
        })
    }

    /// Calls the API; `Err` carries a readable reason (transport, 401, envelope errors).
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, (u16, String)> {
        let url = format!("{}{path}", self.base);
        self.rt.block_on(async {
            let mut req = match method {
                "POST" => self.client.post(&url),
                _ => self.client.get(&url),
            }
            .header("X-Strata-Token", &self.token);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let resp = req
                .send()
                .await
                .map_err(|e| (0, format!("cannot reach {url}: {e}")))?;
            let status = resp.status().as_u16();
            let v: Value = resp
                .json()
                .await
                .map_err(|e| (status, format!("{url} did not answer JSON: {e}")))?;
            if v["ok"] == true {
                Ok(v["value"].clone())
            } else {
                Err((
                    status,
                    format!(
                        "{} ({status}): {}",
                        v["code"].as_str().unwrap_or("error"),
                        v["error"].as_str().unwrap_or("no message")
                    ),
                ))
            }
        })
    }
}

/// `GET path` on a running server: the envelope's value, or why not.
pub fn get(url: &str, token: &str, path: &str) -> Result<Value, String> {
    let r = Remote::new(url, token)?;
    r.call("GET", path, None).map_err(|(_, m)| m)
}

fn print_json(v: &Value) -> Exit {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    Exit::Ok
}

fn remote_or_fail(url: &str, token: &str) -> Result<Remote, Exit> {
    Remote::new(url, token).map_err(|e| {
        eprintln!("error: {e}");
        Exit::Failure
    })
}

fn fail((_, msg): (u16, String)) -> Exit {
    eprintln!("error: {msg}");
    Exit::Failure
}

/// `tools --remote`.
pub fn tools(url: &str, token: &str, json_out: bool) -> Exit {
    let r = match remote_or_fail(url, token) {
        Ok(r) => r,
        Err(e) => return e,
    };
    match r.call("GET", "/api/tools", None) {
        Ok(v) if json_out => print_json(&v),
        Ok(v) => {
            for t in v["tools"].as_array().into_iter().flatten() {
                let desc = t["description"].as_str().unwrap_or("");
                let first = desc.split(". ").next().unwrap_or(desc);
                println!(
                    "{}  {}  {}",
                    t["name"].as_str().unwrap_or(""),
                    t["layer"].as_str().unwrap_or(""),
                    first
                );
            }
            Exit::Ok
        }
        Err(e) => fail(e),
    }
}

/// `inspect --remote`.
pub fn inspect(url: &str, token: &str, tool: &str) -> Exit {
    let r = match remote_or_fail(url, token) {
        Ok(r) => r,
        Err(e) => return e,
    };
    match r.call("GET", "/api/tools", None) {
        Ok(v) => match v["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["name"] == tool)
        {
            Some(t) => print_json(t),
            None => {
                eprintln!("error: the server has no tool `{tool}` this token may call");
                Exit::Usage
            }
        },
        Err(e) => fail(e),
    }
}

/// `invoke --remote`.
pub fn invoke(
    url: &str,
    token: &str,
    tool: &str,
    args: Value,
    request_id: Option<String>,
    json_out: bool,
) -> Exit {
    let r = match remote_or_fail(url, token) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let mut body = json!({"tool": tool, "args": args});
    if let Some(id) = request_id {
        body["request_id"] = json!(id);
    }
    match r.call("POST", "/api/invoke", Some(body)) {
        Ok(result) => {
            let ok = result["ok"] == true;
            if json_out {
                print_json(&result);
            } else if ok {
                match &result["value"] {
                    Value::String(s) => println!("{s}"),
                    v => println!("{}", serde_json::to_string_pretty(v).unwrap_or_default()),
                }
            } else {
                eprintln!(
                    "error: {} ({tool}): {}",
                    result["status"].as_str().unwrap_or("error"),
                    result["error"].as_str().unwrap_or("no message")
                );
            }
            if ok { Exit::Ok } else { Exit::Failure }
        }
        Err(e) => fail(e),
    }
}

/// `events --remote [--follow]`.
pub fn events(url: &str, token: &str, limit: usize, follow: bool) -> Exit {
    let r = match remote_or_fail(url, token) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let mut seen: Vec<String> = Vec::new();
    loop {
        let v = match r.call(
            "GET",
            &format!(
                "/api/events?limit={}",
                if seen.is_empty() { limit } else { 1000 }
            ),
            None,
        ) {
            Ok(v) => v,
            Err(e) => return fail(e),
        };
        for e in v["events"].as_array().into_iter().flatten() {
            let key = format!("{}|{}|{}", e["ts"], e["request_id"], e["instance"]);
            if !seen.contains(&key) {
                println!("{e}");
                seen.push(key);
            }
        }
        if seen.len() > 5000 {
            seen.drain(..seen.len() - 2000);
        }
        if !follow {
            return Exit::Ok;
        }
        std::thread::sleep(Duration::from_millis(1000));
    }
}

/// `strata approvals list|approve|deny --remote URL --token T`.
pub fn approvals(url: &str, token: &str, command: &crate::cli::ApprovalsCommand) -> Exit {
    use crate::cli::ApprovalsCommand as C;
    let r = match remote_or_fail(url, token) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let (path, body, verb, id) = match command {
        C::List { all, limit, .. } => (
            format!(
                "/api/approvals?status={}&limit={limit}",
                if *all { "all" } else { "pending" }
            ),
            None,
            None,
            String::new(),
        ),
        C::Approve { id, reason, .. } => (
            format!("/api/approvals/{id}/approve"),
            Some(json!({ "reason": reason })),
            Some("approved"),
            id.clone(),
        ),
        C::Deny { id, reason, .. } => (
            format!("/api/approvals/{id}/deny"),
            Some(json!({ "reason": reason })),
            Some("denied"),
            id.clone(),
        ),
    };
    let method = if body.is_some() { "POST" } else { "GET" };
    match r.call(method, &path, body) {
        Ok(v) => match (command, verb) {
            (C::List { json, .. }, _) => {
                let rows: Vec<strata_runtime::approval::ApprovalRecord> =
                    serde_json::from_value(v["approvals"].clone()).unwrap_or_default();
                crate::approvals::print_list(&rows, *json)
            }
            (_, Some(verb)) => {
                println!("{verb} {id}");
                Exit::Ok
            }
            _ => Exit::Ok,
        },
        Err((_, e)) => {
            eprintln!("error: {e}");
            Exit::Failure
        }
    }
}
