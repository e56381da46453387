//! Shared by the launcher's integration tests: a real `strata serve` on an ephemeral port.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server; stopped with SIGTERM when dropped.
pub struct Served {
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `http://127.0.0.1:PORT/mcp`.
    pub mcp: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Starts `bin --overlay overlay serve` on port 0 and waits for it to announce its address.
pub fn serve(bin: &str, overlay: &Path) -> Served {
    serve_with(bin, overlay, &[])
}

/// [`serve`] with extra arguments (`--set k=v`…).
pub fn serve_with(bin: &str, overlay: &Path, extra: &[&str]) -> Served {
    let mut child = Command::new(bin)
        .arg("--overlay")
        .arg(overlay)
        .args(["serve", "--set", "server.port=0"])
        .args(extra)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut line = String::new();
    let mut found = None;
    while Instant::now() < deadline && found.is_none() {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
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
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in err.lines() {});
    let (base, mcp) = found.expect("serve announced its address");
    Served { child, base, mcp }
}

/// Whether the Python client is installed. In CI it must be (`.ci/run` installs it); on a
/// developer machine without it the test says so and passes.
pub fn python_mcp_available() -> bool {
    strata_test_support::python_has("mcp.client.session", "mcp")
}
