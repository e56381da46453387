//! `cargo xtask link-order [--package PKG] [--features F | --no-default-features]`: remakes
//! `<PKG>/link-order.txt`, the functions `serve` runs, which the overlay's build script hands
//! to lld (`--symbol-ordering-file`) so that they sit side by side in the binary.
//!
//! Why: the kernel maps the 64 KiB around every page of code it faults in. Start-up and the
//! first requests run a few thousand functions spread across the whole text, so an idle
//! `serve` kept ~10 of its 12 MiB of machine code resident; laid out together they take
//! ~2.5 MiB.
//!
//! How: the `production` build with the symbols kept (`cargo rustc … -- -C strip=none` changes
//! the final link only, so every symbol has the name it has in the stripped build), run twice
//! under `valgrind --tool=callgrind`: once on a new data directory, once again on it with a
//! few requests to the control API and the MCP server. The functions of the binary that ran,
//! the second run's first, are the file.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{cargo, feature_arg, root, run};

pub(crate) fn link_order(args: &[String]) -> Result<(), String> {
    let mut package = "strata-example".to_owned();
    let mut features = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--package" | "-p" => {
                package = it.next().cloned().ok_or("--package needs a name")?;
            }
            _ if feature_arg(a, &mut it, &mut features)? => {}
            other => return Err(format!("link-order: unknown argument `{other}`")),
        }
    }
    let has_valgrind = Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_valgrind {
        return Err(
            "link-order runs the binary under callgrind: install valgrind \
                    (Debian: `apt-get install valgrind`)"
                .into(),
        );
    }
    let dir = package_dir(&package)?;
    let mut b = cargo();
    b.args([
        "rustc",
        "--quiet",
        "--profile",
        "production",
        "-p",
        &package,
        "--bin",
        &package,
    ])
    .args(&features)
    .args(["--", "-C", "strip=none"]);
    run(b)?;
    let bin = root().join("target/production").join(&package);
    let work = root().join("target/link-order");
    let _ = std::fs::remove_dir_all(&work);
    let overlay = work.join("overlay");
    std::fs::create_dir_all(overlay.join("knowledgebase")).map_err(|e| e.to_string())?;
    std::fs::write(overlay.join("knowledgebase/tiny.txt"), "x").map_err(|e| e.to_string())?;

    // A new data directory (migrations, first token), then a restart that answers requests.
    let first = profile(&bin, &overlay, &work.join("first.out"), |_| Ok(()))?;
    let again = profile(&bin, &overlay, &work.join("again.out"), |port| {
        requests(port, &overlay)
    })?;
    let binary = std::fs::canonicalize(&bin).map_err(|e| e.to_string())?;
    let names = functions_of(&[&again, &first], &binary);
    if names.len() < 100 {
        return Err(format!(
            "callgrind saw only {} functions of {}: not writing link-order.txt",
            names.len(),
            binary.display()
        ));
    }
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-V")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .map_err(|e| format!("rustc -V: {e}"))?;
    let built = if features.is_empty() {
        "default features".to_owned()
    } else {
        features.join(" ")
    };
    let mut text = format!(
        "# The functions `{package} serve` runs from start to its first answers, for lld's\n\
         # --symbol-ordering-file (build.rs). Made by `cargo xtask link-order` from the\n\
         # `production` build ({built}); remake it after a toolchain or dependency change.\n\
         # {rustc}\n"
    );
    for n in &names {
        text.push_str(n);
        text.push('\n');
    }
    let out = dir.join("link-order.txt");
    std::fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!(
        "{} functions written to {}; the next `cargo build --profile production -p {package}` \
         links them first",
        names.len(),
        out.display()
    );
    Ok(())
}

/// The package's directory, from `cargo pkgid` (`path+file:///…/dir#name@version`).
fn package_dir(package: &str) -> Result<PathBuf, String> {
    let out = cargo()
        .args(["pkgid", "-p", package])
        .output()
        .map_err(|e| e.to_string())?;
    let id = String::from_utf8_lossy(&out.stdout);
    id.trim()
        .strip_prefix("path+file://")
        .and_then(|s| s.split('#').next())
        .map(PathBuf::from)
        .filter(|p| p.join("Cargo.toml").is_file())
        .ok_or_else(|| format!("`cargo pkgid -p {package}` gave `{}`", id.trim()))
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Runs `serve` under callgrind until it answers `/health`, then `work(port)`, then stops it
/// with SIGTERM (callgrind writes its file as the process exits); the file's text.
fn profile(
    bin: &Path,
    overlay: &Path,
    out: &Path,
    work: impl FnOnce(u16) -> Result<(), String>,
) -> Result<String, String> {
    let port = free_port()?;
    let child = Command::new("valgrind")
        .args(["--tool=callgrind", "--demangle=no", "--separate-recs=1"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(bin)
        .arg("--overlay")
        .arg(overlay)
        .args(["serve", "--set", &format!("server.port={port}")])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("valgrind: {e}"))?;
    let mut guard = Stop(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    while http(port, "GET", "/health", &[], "").map(|r| r.0) != Ok(200) {
        if Instant::now() > deadline {
            return Err("serve under callgrind did not answer /health within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    work(port)?;
    guard.stop()?;
    std::fs::read_to_string(out).map_err(|e| format!("{}: {e}", out.display()))
}

/// Stops the child on every path: SIGTERM (so callgrind writes its file), then waits.
struct Stop(Child);

impl Stop {
    fn stop(&mut self) -> Result<(), String> {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.0.try_wait().map_err(|e| e.to_string())?.is_none() {
            if Instant::now() > deadline {
                let _ = self.0.kill();
                return Err("serve under callgrind did not stop within 60 s of SIGTERM".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// What a served deployment answers first: the tool list, calls, the MCP handshake.
fn requests(port: u16, overlay: &Path) -> Result<(), String> {
    let token = std::fs::read_to_string(overlay.join("data/api-token"))
        .map_err(|e| format!("data/api-token: {e}"))?;
    let auth = [
        ("x-strata-token", token.trim()),
        ("content-type", "application/json"),
    ];
    let calls = [
        ("GET", "/api/tools", ""),
        ("POST", "/api/invoke", r#"{"tool":"current_time"}"#),
        (
            "POST",
            "/api/invoke",
            r#"{"tool":"read_file","args":{"path":"knowledgebase/tiny.txt"}}"#,
        ),
        ("GET", "/api/events", ""),
    ];
    for _ in 0..3 {
        for (method, path, body) in calls {
            let (status, _, text) = http(port, method, path, &auth, body)?;
            if status != 200 {
                return Err(format!("{method} {path}: {status} {text}"));
            }
        }
    }
    let mcp = [
        ("x-strata-token", token.trim()),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"link-order","version":"1"}}}"#;
    let (status, head, text) = http(port, "POST", "/mcp", &mcp, init)?;
    if status != 200 {
        return Err(format!("MCP initialize: {status} {text}"));
    }
    let session = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    let mut with_session = mcp.to_vec();
    with_session.push(("mcp-session-id", &session));
    for body in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"current_time","arguments":{}}}"#,
    ] {
        let (status, _, text) = http(port, "POST", "/mcp", &with_session, body)?;
        if !(200..300).contains(&status) {
            return Err(format!("MCP {body}: {status} {text}"));
        }
    }
    Ok(())
}

/// One HTTP/1.1 request on its own connection: status, head, body.
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, String, String), String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n\
         content-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{method} {path}: not an HTTP answer: {head}"))?;
    Ok((status, head.to_owned(), rest.to_owned()))
}

/// The functions of `binary` the callgrind files have costs for, in the files' order, once
/// each.
///
/// The format (valgrind's `callgrind-format`) names an object with `ob=` and a function with
/// `fn=`; with name compression the first mention is `(id) name` and later ones `(id)`.
/// Callers' and callees' lines (`cfn=`, `cob=`) are skipped: every function that ran has its
/// own `fn=` block (their lines still name functions for later `(id)`s). Recursion levels (`name'2`) are one function, and functions without a
/// symbol (`0x…`) cannot be ordered.
pub(crate) fn functions_of(files: &[&str], binary: &Path) -> Vec<String> {
    use std::collections::{HashMap, HashSet};
    fn resolve(v: &str, table: &mut HashMap<String, String>) -> String {
        let v = v.trim();
        match v.strip_prefix('(').and_then(|r| r.split_once(')')) {
            Some((id, rest)) => {
                let rest = rest.trim();
                if rest.is_empty() {
                    table.get(id).cloned().unwrap_or_default()
                } else {
                    table.insert(id.to_owned(), rest.to_owned());
                    rest.to_owned()
                }
            }
            None => v.to_owned(),
        }
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for callgrind in files {
        // Per file, `ob=` and `cob=` share one table of names, `fn=` and `cfn=` another.
        let (mut objects, mut fns) = (HashMap::new(), HashMap::new());
        let mut current_ob = String::new();
        for line in callgrind.lines() {
            if let Some(v) = line.strip_prefix("ob=") {
                current_ob = resolve(v, &mut objects);
            } else if let Some(v) = line.strip_prefix("cob=") {
                resolve(v, &mut objects);
            } else if let Some(v) = line.strip_prefix("cfn=") {
                resolve(v, &mut fns);
            } else if let Some(v) = line.strip_prefix("fn=") {
                let name = resolve(v, &mut fns);
                let name = match name.rsplit_once('\'') {
                    Some((base, level)) if level.chars().all(|c| c.is_ascii_digit()) => base,
                    _ => name.as_str(),
                };
                if Path::new(&current_ob) == binary
                    && !name.is_empty()
                    && !name.starts_with("0x")
                    && seen.insert(name.to_owned())
                {
                    out.push(name.to_owned());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::functions_of;
    use std::path::Path;

    #[test]
    fn the_binarys_functions_are_read_once_each_through_name_compression() {
        let file = "\
version: 1
cmd: /bin/app serve
events: Ir
ob=(1) /bin/app
fl=(1) ???
fn=(1) _ZN3app4main17h0123456789abcdefE
0 10
cob=(2) /lib/libc.so.6
cfi=(2) ???
cfn=(2) memcpy
calls=1 0
0 5
cob=(1)
cfn=(3) _ZN3app6helper17h1111111111111111E'2
calls=1 0
0 3
ob=(2)
fn=(2)
0 5
ob=(1)
fn=(3)
0 3
fn=(4) 0x0000000000401000
0 1
fn=(1)
0 1
fn=(5) sqlite3_open_v2
0 2
";
        assert_eq!(
            functions_of(&[file], Path::new("/bin/app")),
            [
                "_ZN3app4main17h0123456789abcdefE",
                "_ZN3app6helper17h1111111111111111E",
                "sqlite3_open_v2",
            ]
        );
        assert!(functions_of(&[file], Path::new("/bin/other")).is_empty());
        // A second file (ids of its own): only the functions the first did not have.
        let second =
            "ob=(1) /bin/app\nfn=(1) sqlite3_step\n0 1\nfn=(2) sqlite3_open_v2\n0 1\nfn=(1)\n0 1\n";
        assert_eq!(
            functions_of(&[file, second], Path::new("/bin/app"))[3..],
            ["sqlite3_step"]
        );
    }
}
