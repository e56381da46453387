//! The audit log: one JSON line per invocation, written off the async threads.
//!
//! [`JsonlAudit`] hands each serialised record to a dedicated writer thread over a bounded
//! channel (back-pressure instead of loss), which appends it to the file and flushes whenever
//! the queue is empty. Dropping the sink drains the queue and joins the thread, so a short
//! CLI run (`strata invoke`) never loses its record.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use serde::Serialize;
use serde_json::Value;

/// One audit record. Field names are a contract: operators' scripts read them.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// RFC 3339 UTC timestamp with milliseconds.
    pub ts: String,
    /// Request id of the invocation.
    pub request_id: String,
    /// Tool name as requested.
    pub tool: String,
    /// The tool's layer, when it resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<String>,
    /// Who called (`operator`, `agent:main`, `token:ci`…).
    pub principal: String,
    /// Agent on whose behalf, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Session, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Outcome status (`ok`, `error`, …).
    pub status: String,
    /// Wall time spent in the pipeline.
    pub elapsed_ms: f64,
    /// The arguments with secrets redacted.
    pub args: Value,
    /// The error message, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where audit records go.
pub trait AuditSink: Send + Sync {
    /// Records one invocation. Must not fail the call: sinks log their own problems.
    fn record(&self, record: &AuditRecord);
}

/// Failure opening the audit log.
#[derive(Debug, thiserror::Error)]
#[error("cannot open audit log `{path}`: {source}")]
pub struct AuditError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// Appends JSON lines to a file (created 0600, parents created).
pub struct JsonlAudit {
    tx: Mutex<Option<SyncSender<Vec<u8>>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
}

impl JsonlAudit {
    /// Opens (or creates) the log at `path`.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        let err = |source| AuditError {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        let mut opts = OpenOptions::new();
        opts.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let file = opts.open(path).map_err(err)?;
        let (tx, rx) = sync_channel::<Vec<u8>>(8192);
        let shown = path.display().to_string();
        let writer = std::thread::Builder::new()
            .name("strata-audit".into())
            .spawn(move || {
                let mut out = BufWriter::with_capacity(64 * 1024, file);
                while let Ok(line) = rx.recv() {
                    let mut res = out.write_all(&line);
                    // Batch whatever else is already queued, then flush once.
                    while res.is_ok() {
                        match rx.try_recv() {
                            Ok(more) => res = out.write_all(&more),
                            Err(_) => break,
                        }
                    }
                    if let Err(e) = res.and_then(|()| out.flush()) {
                        tracing::error!(path = %shown, error = %e, "audit log write failed");
                    }
                }
            })
            .map_err(err)?;
        Ok(JsonlAudit {
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            path: path.to_path_buf(),
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits until every record handed over so far is written and flushed, then stops the
    /// writer. Later records are dropped with an error log; call this only at shutdown.
    pub fn close(&self) {
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(h) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
    }
}

impl AuditSink for JsonlAudit {
    fn record(&self, record: &AuditRecord) {
        let mut line = match serde_json::to_vec(record) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "audit record not serialisable");
                return;
            }
        };
        line.push(b'\n');
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match tx {
            Some(tx) => {
                if tx.send(line).is_err() {
                    tracing::error!(path = %self.path.display(), "audit writer stopped; record lost");
                }
            }
            None => tracing::error!(path = %self.path.display(), "audit log closed; record lost"),
        }
    }
}

impl Drop for JsonlAudit {
    fn drop(&mut self) {
        self.close();
    }
}

/// The last `n` records of a JSONL audit file, oldest first (reads only the file's end).
/// Lines that are not JSON are skipped. A missing file is an empty log.
pub fn tail(path: &Path, n: usize) -> std::io::Result<Vec<Value>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    let mut chunk = 64 * 1024u64;
    loop {
        let start = len.saturating_sub(chunk);
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        Read::by_ref(&mut f)
            .take(len - start)
            .read_to_end(&mut buf)?;
        let text = String::from_utf8_lossy(&buf);
        let mut lines: Vec<&str> = text.lines().collect();
        if start > 0 && !lines.is_empty() {
            lines.remove(0); // probably cut in half
        }
        if lines.len() >= n || start == 0 {
            let skip = lines.len().saturating_sub(n);
            return Ok(lines[skip..]
                .iter()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect());
        }
        chunk = chunk.saturating_mul(4);
    }
}

/// Discards records (benchmarks of the bare pipeline, embedders with their own audit).
pub struct NoAudit;

impl AuditSink for NoAudit {
    fn record(&self, _: &AuditRecord) {}
}

const REDACTED: &str = "[redacted]";

/// Whether a key name looks like it holds a secret.
pub fn is_secret_key(key: &str) -> bool {
    let flat: String = key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    const NEEDLES: &[&str] = &[
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "apikey",
        "credential",
        "authorization",
        "privatekey",
        "accesskey",
        "cookie",
    ];
    if NEEDLES.iter().any(|n| flat.contains(n)) {
        return true;
    }
    // `key`, `api_key`, `X-Api-Key`, `signingKey`: a word `key` on its own.
    let words = key
        .split(|c: char| !c.is_ascii_alphanumeric())
        .flat_map(split_camel);
    words.into_iter().any(|w| w.eq_ignore_ascii_case("key"))
}

fn split_camel(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        if c.is_ascii_uppercase() && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A copy of `v` with the values of secret-looking keys replaced by `"[redacted]"`.
pub fn redact(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if is_secret_key(k) && !v.is_null() {
                        Value::String(REDACTED.to_owned())
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        other => other.clone(),
    }
}

/// Current time as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redacts_secret_keys_at_any_depth() {
        let v = json!({
            "path": "a.txt",
            "api_key": "sk-1",
            "headers": {"Authorization": "Bearer x", "Accept": "text/plain"},
            "list": [{"password": "p"}, {"monkey": "banana", "keyword": "k"}],
            "signingKey": "s",
            "token": null
        });
        let r = redact(&v);
        assert_eq!(
            r,
            json!({
                "path": "a.txt",
                "api_key": "[redacted]",
                "headers": {"Authorization": "[redacted]", "Accept": "text/plain"},
                "list": [{"password": "[redacted]"}, {"monkey": "banana", "keyword": "k"}],
                "signingKey": "[redacted]",
                "token": null
            })
        );
    }

    #[test]
    fn tail_reads_the_last_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.jsonl");
        assert!(tail(&path, 5).expect("missing is empty").is_empty());
        let mut text = String::new();
        for i in 0..5000 {
            text.push_str(&format!("{{\"i\":{i},\"pad\":\"{}\"}}\n", "x".repeat(50)));
        }
        std::fs::write(&path, text).expect("write");
        let last = tail(&path, 3).expect("tail");
        assert_eq!(
            last.iter()
                .map(|v| v["i"].as_i64().unwrap_or(-1))
                .collect::<Vec<_>>(),
            [4997, 4998, 4999]
        );
        assert_eq!(tail(&path, 4000).expect("tail").len(), 4000);
        assert_eq!(tail(&path, 9000).expect("tail").len(), 5000);
    }

    #[test]
    fn writes_one_line_per_record_and_flushes_on_close() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nested/audit.jsonl");
        let audit = JsonlAudit::open(&path).expect("open");
        for i in 0..100 {
            audit.record(&AuditRecord {
                ts: now_rfc3339(),
                request_id: format!("r{i}"),
                tool: "t".into(),
                layer: None,
                principal: "operator".into(),
                agent_id: None,
                session_id: None,
                status: "ok".into(),
                elapsed_ms: 0.5,
                args: json!({}),
                error: None,
            });
        }
        audit.close();
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect();
        assert_eq!(lines.len(), 100);
        assert_eq!(lines[99]["request_id"], "r99");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
