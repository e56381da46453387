//! The audit log: one JSON line per invocation, written off the async threads.
//!
//! [`JsonlAudit`] hands each serialised record to a dedicated writer thread over a bounded
//! channel (back-pressure instead of loss), which appends it to the file and flushes whenever
//! the queue is empty. Dropping the sink drains the queue and joins the thread, so a short
//! CLI run (`strata invoke`) never loses its record.

use std::fs::OpenOptions;
use std::io::Write;
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

    /// Records another event (an alert, an approval decision): a JSON object with an
    /// `event` field. The default discards it.
    fn event(&self, _event: &Value) {}
}

/// A security alert: content safety, the behaviour monitor, rate-limit trips, approvals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// `content_safety`, `behaviour`, `rate_limit` or `approval`.
    pub kind: &'static str,
    /// The rule or outcome (`instruction_override`, `sensitive_after_web`, `minute`…).
    pub rule: String,
    /// One line for people.
    pub message: String,
    /// Agent, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Tool, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The invocation's request id, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Content-safety score, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
}

impl Alert {
    /// The audit-log form: `{"ts", "event": "alert", ...}`.
    pub fn to_event(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(o) = &mut v {
            o.insert("event".into(), Value::String("alert".into()));
            o.insert("ts".into(), Value::String(now_rfc3339()));
        }
        v
    }
}

/// Where alerts go besides the audit log (a Discord channel, a pager…).
pub trait AlertSink: Send + Sync {
    /// Delivers one alert. Must not block for long: queue and send elsewhere.
    fn alert(&self, alert: &Alert);
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

/// Size-based rotation of the audit log (`security.audit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rotation {
    /// Rotate when the file reaches this size (0 = never).
    pub max_bytes: u64,
    /// Rotated files kept (`.1` newest … `.N`); 0 = all.
    pub keep_files: u32,
}

impl From<&crate::config::AuditConfig> for Rotation {
    fn from(c: &crate::config::AuditConfig) -> Self {
        Rotation {
            max_bytes: c.max_bytes,
            keep_files: c.keep_files,
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    let mut opts = OpenOptions::new();
    opts.create(true).append(true).read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)
}

impl JsonlAudit {
    /// Opens (or creates) the log at `path`, never rotating.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        Self::open_rotating(path, Rotation::default())
    }

    /// Opens (or creates) the log at `path`, rotating by size. The hash chain continues
    /// across files: the first record of a new file links to the last of the previous one.
    pub fn open_rotating(path: &Path, rotation: Rotation) -> Result<Self, AuditError> {
        let err = |source| AuditError {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        let mut file = open_append(path).map_err(err)?;
        let (tx, rx) = sync_channel::<Vec<u8>>(8192);
        let shown = path.display().to_string();
        let own = path.to_path_buf();
        let writer = std::thread::Builder::new()
            .name("strata-audit".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                    }
                    if let Err(e) = append_rotating(&mut file, &own, rotation, &batch) {
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
        self.send(line);
    }

    fn event(&self, event: &Value) {
        let mut line = match serde_json::to_vec(&redact(event)) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "audit event not serialisable");
                return;
            }
        };
        line.push(b'\n');
        self.send(line);
    }
}

impl JsonlAudit {
    fn send(&self, line: Vec<u8>) {
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

/// The chain's first `prev_hash`.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `sha256(prev_hash ‖ body)` in hex, where `body` is the record's JSON without the chain
/// fields.
pub fn chain_hash(prev: &str, body: &[u8]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(prev.as_bytes());
    h.update(body);
    hex(&h.finalize())
}

/// The suffix every chained line ends with: `,"prev_hash":"<64 hex>","hash":"<64 hex>"}`.
const SUFFIX_LEN: usize = r#","prev_hash":"","hash":""}"#.len() + 128;

/// Splits a chained line into (body, prev_hash, hash); `None` if it carries no chain fields.
fn split_chained(line: &str) -> Option<(String, &str, &str)> {
    if line.len() < SUFFIX_LEN + 2 || !line.is_char_boundary(line.len() - SUFFIX_LEN) {
        return None;
    }
    let (head, suffix) = line.split_at(line.len() - SUFFIX_LEN);
    let prev = suffix.strip_prefix(r#","prev_hash":""#)?.get(..64)?;
    let hash = suffix
        .get(r#","prev_hash":""#.len() + 64 + r#"","hash":""#.len()..)?
        .get(..64)?;
    if !suffix.ends_with("\"}") {
        return None;
    }
    Some((format!("{head}}}"), prev, hash))
}

/// The hash of the last chained line of `file` (GENESIS for an empty or unchained file).
fn last_hash(file: &std::fs::File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    let mut want = 4096u64;
    loop {
        let start = len.saturating_sub(want);
        let mut buf = vec![0u8; (len - start) as usize];
        file.read_exact_at(&mut buf, start)?;
        let text = String::from_utf8_lossy(&buf);
        let mut lines = text.lines().rev().filter(|l| !l.trim().is_empty());
        match lines.next() {
            None if start == 0 => return Ok(GENESIS.to_owned()),
            Some(l) if start == 0 || text[..text.len() - l.len()].contains('\n') => {
                return Ok(
                    split_chained(l).map_or_else(|| GENESIS.to_owned(), |(_, _, h)| h.to_owned())
                );
            }
            _ => want = want.saturating_mul(4),
        }
        if want > len.saturating_mul(4) + 4096 {
            return Ok(GENESIS.to_owned());
        }
    }
}

/// `audit.jsonl.N`
pub fn rotated_path(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

#[cfg(unix)]
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Shifts `path.k` to `path.k+1` (dropping what exceeds `keep`) and `path` to `path.1`.
fn shift(path: &Path, keep: u32) -> std::io::Result<()> {
    let mut top = 0;
    while rotated_path(path, top + 1).exists() {
        top += 1;
    }
    for k in (1..=top).rev() {
        if keep > 0 && k >= keep {
            std::fs::remove_file(rotated_path(path, k))?;
        } else {
            std::fs::rename(rotated_path(path, k), rotated_path(path, k + 1))?;
        }
    }
    std::fs::rename(path, rotated_path(path, 1))
}

/// Takes the exclusive lock on the file that is `path` now (another process may have
/// rotated it since we opened it) and appends the records (JSON objects without chain
/// fields), each chained to the one before it — also across processes, and across a
/// rotation, which happens between records whenever the file has reached its size limit.
fn append_rotating(
    file: &mut std::fs::File,
    path: &Path,
    rotation: Rotation,
    bodies: &[Vec<u8>],
) -> std::io::Result<()> {
    use rustix::fs::{FlockOperation, flock};
    loop {
        flock(&*file, FlockOperation::LockExclusive)?;
        if same_file(file, path) {
            break;
        }
        let _ = flock(&*file, FlockOperation::Unlock);
        *file = open_append(path)?;
    }
    let result = (|| {
        let mut len = file.metadata()?.len();
        let mut prev = last_hash(file)?;
        if len == 0
            && let Ok(previous) = std::fs::File::open(rotated_path(path, 1))
        {
            prev = last_hash(&previous)?;
        }
        let mut out = Vec::with_capacity(bodies.iter().map(|b| b.len() + SUFFIX_LEN + 1).sum());
        for body in bodies {
            let full = len + out.len() as u64;
            if rotation.max_bytes > 0 && full > 0 && full >= rotation.max_bytes {
                (&*file).write_all(&out)?;
                out.clear();
                shift(path, rotation.keep_files)?;
                let fresh = open_append(path)?;
                flock(&fresh, FlockOperation::LockExclusive)?;
                let _ = flock(&*file, FlockOperation::Unlock);
                *file = fresh;
                len = 0;
                tracing::info!(path = %path.display(), "audit log rotated");
            }
            let body = body.strip_suffix(b"\n").unwrap_or(body);
            let hash = chain_hash(&prev, body);
            let open = body.strip_suffix(b"}").unwrap_or(body);
            out.extend_from_slice(open);
            out.extend_from_slice(format!(r#","prev_hash":"{prev}","hash":"{hash}"}}"#).as_bytes());
            out.push(b'\n');
            prev = hash;
        }
        let mut w = &*file;
        w.write_all(&out)?;
        w.flush()
    })();
    let _ = flock(&*file, FlockOperation::Unlock);
    result
}

/// Where a chain breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenLink {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// Checks the hash chain of an audit file; `Ok(records)` when intact.
pub fn verify(path: &Path) -> std::io::Result<Result<usize, BrokenLink>> {
    let text = std::fs::read_to_string(path)?;
    let mut prev = GENESIS.to_owned();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((body, p, h)) = split_chained(line) else {
            return Ok(Err(BrokenLink {
                line: i + 1,
                reason: "no prev_hash/hash fields".into(),
            }));
        };
        if p != prev {
            return Ok(Err(BrokenLink {
                line: i + 1,
                reason:
                    "prev_hash does not match the line before (a line was removed or reordered)"
                        .into(),
            }));
        }
        if chain_hash(p, body.as_bytes()) != h {
            return Ok(Err(BrokenLink {
                line: i + 1,
                reason: "hash does not match the content (the line was edited)".into(),
            }));
        }
        prev = h.to_owned();
        n += 1;
    }
    Ok(Ok(n))
}

/// The result of checking a rotated log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainReport {
    /// Files checked, oldest first.
    pub files: Vec<PathBuf>,
    /// Records checked.
    pub records: usize,
    /// The oldest file starts in the middle of the chain (older files were deleted by
    /// `security.audit.keep_files`): its first link could not be checked.
    pub starts_mid_chain: bool,
}

/// Checks the chain through `path.N` … `path.1` and `path`; on a break, names the file.
pub fn verify_all(path: &Path) -> std::io::Result<Result<ChainReport, (PathBuf, BrokenLink)>> {
    let mut files = Vec::new();
    let mut n = 1;
    while rotated_path(path, n).exists() {
        files.push(rotated_path(path, n));
        n += 1;
    }
    files.reverse();
    if path.exists() || files.is_empty() {
        files.push(path.to_path_buf());
    }
    let mut prev: Option<String> = None;
    let mut records = 0;
    let mut starts_mid_chain = false;
    for f in &files {
        let text = std::fs::read_to_string(f)?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let broken = |reason: &str| {
                Ok(Err((
                    f.clone(),
                    BrokenLink {
                        line: i + 1,
                        reason: reason.to_owned(),
                    },
                )))
            };
            let Some((body, p, h)) = split_chained(line) else {
                return broken("no prev_hash/hash fields");
            };
            match &prev {
                None if p != GENESIS => starts_mid_chain = true,
                Some(expected) if p != expected => {
                    return broken(
                        "prev_hash does not match the record before (a record was removed or reordered)",
                    );
                }
                _ => {}
            }
            if chain_hash(p, body.as_bytes()) != h {
                return broken("hash does not match the content (the record was edited)");
            }
            prev = Some(h.to_owned());
            records += 1;
        }
    }
    Ok(Ok(ChainReport {
        files,
        records,
        starts_mid_chain,
    }))
}

/// Discards records (benchmarks of the bare pipeline, embedders with their own audit).
pub struct NoAudit;

impl AuditSink for NoAudit {
    fn record(&self, _: &AuditRecord) {}
}

const REDACTED: &str = "[redacted]";

pub use crate::secret::is_secret_key;

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
        Value::String(s) => Value::String(redact_text(s).into_owned()),
        other => other.clone(),
    }
}

fn secret_shapes() -> &'static (regex::RegexSet, Vec<(regex::Regex, &'static str)>) {
    static SHAPES: std::sync::LazyLock<(regex::RegexSet, Vec<(regex::Regex, &'static str)>)> =
        std::sync::LazyLock::new(|| {
            let pats: &[(&str, &str)] = &[
                // PEM private keys (the whole block, or to the end when cut off).
                (
                    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
                    "[redacted private key]",
                ),
                // Authorization header values.
                (
                    r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{16,}",
                    "$1 [redacted]",
                ),
                // JWTs.
                (
                    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
                    "[redacted jwt]",
                ),
                // OpenAI / Anthropic style keys.
                (r"\bsk-[A-Za-z0-9_-]{20,}", "[redacted api key]"),
                // GitHub tokens.
                (
                    r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
                    "[redacted api key]",
                ),
                // AWS access key ids.
                (r"\b(AKIA|ASIA)[0-9A-Z]{16}\b", "[redacted api key]"),
                // Google API keys.
                (r"\bAIza[0-9A-Za-z_-]{35}", "[redacted api key]"),
                // Slack tokens.
                (r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "[redacted api key]"),
                // Stripe keys.
                (
                    r"\b[rsp]k_(live|test)_[A-Za-z0-9]{16,}",
                    "[redacted api key]",
                ),
                // Discord bot tokens.
                (
                    r"\b[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}",
                    "[redacted api key]",
                ),
            ];
            #[allow(clippy::expect_used)]
            let set = regex::RegexSet::new(pats.iter().map(|(p, _)| *p))
                .expect("built-in secret patterns");
            #[allow(clippy::expect_used)]
            let each = pats
                .iter()
                .map(|(p, r)| (regex::Regex::new(p).expect("built-in secret pattern"), *r))
                .collect();
            (set, each)
        });
    &SHAPES
}

/// `text` with values shaped like secrets (API keys of common vendors, JWTs, PEM private
/// keys, bearer/basic credentials) replaced by a marker.
pub fn redact_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() < 16 {
        return std::borrow::Cow::Borrowed(text);
    }
    let (set, each) = secret_shapes();
    let hits = set.matches(text);
    if !hits.matched_any() {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut s = text.to_owned();
    for i in hits.iter() {
        let (re, rep) = &each[i];
        s = re.replace_all(&s, *rep).into_owned();
    }
    std::borrow::Cow::Owned(s)
}

pub use crate::clock::now_rfc3339;

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
    fn redacts_values_shaped_like_secrets() {
        // Test vectors shaped like secrets, none real. check-core: allow
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"; // check-core: allow
        let v = json!({
            "cmd": "curl -H 'Authorization: Bearer abcdefghijklmnop1234' https://x",
            "note": format!("key: {pem} done"),
            "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "list": ["sk-proj-abcdefghijklmnopqrstuv", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAABCDEFGHIJKLMNOP"], // check-core: allow
            "plain": "nothing secret in this sentence at all",
        });
        let r = redact(&v);
        assert_eq!(
            r["cmd"],
            "curl -H 'Authorization: Bearer [redacted]' https://x"
        );
        assert_eq!(r["note"], "key: [redacted private key] done");
        assert_eq!(r["jwt"], "[redacted jwt]");
        assert_eq!(
            r["list"],
            json!([
                "[redacted api key]",
                "[redacted api key]",
                "[redacted api key]"
            ])
        );
        assert_eq!(r["plain"], v["plain"]);
    }

    #[test]
    fn rotation_keeps_the_chain_across_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("audit.jsonl");
        let rot = Rotation {
            max_bytes: 2_000,
            keep_files: 0,
        };
        {
            let a = JsonlAudit::open_rotating(&path, rot).expect("open");
            for i in 0..40 {
                a.record(&rec(i));
            }
        }
        assert!(
            rotated_path(&path, 2).exists(),
            "several rotations happened"
        );
        for f in [rotated_path(&path, 1), path.clone()] {
            assert!(std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0) < 4_000);
        }
        let report = verify_all(&path).expect("read").expect("intact");
        assert_eq!(report.records, 40);
        assert!(!report.starts_mid_chain);
        // A single rotated-in file does not verify alone (its first link points back).
        assert!(verify(&path).expect("read").is_err());
        // An edit in an older file is found there.
        let one = rotated_path(&path, 1);
        let text = std::fs::read_to_string(&one).expect("read");
        std::fs::write(&one, text.replacen("\"tool\":\"t", "\"tool\":\"T", 1)).expect("write");
        let (file, broken) = verify_all(&path).expect("read").expect_err("edit detected");
        assert_eq!((file, broken.line), (one, 1));
    }

    #[test]
    fn rotation_drops_files_beyond_keep_and_still_verifies() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("audit.jsonl");
        let rot = Rotation {
            max_bytes: 1_000,
            keep_files: 2,
        };
        {
            let a = JsonlAudit::open_rotating(&path, rot).expect("open");
            for i in 0..40 {
                a.record(&rec(i));
            }
        }
        assert!(rotated_path(&path, 2).exists());
        assert!(!rotated_path(&path, 3).exists());
        let report = verify_all(&path).expect("read").expect("intact");
        assert!(report.starts_mid_chain);
        assert_eq!(report.files.len(), 3);
        assert!(report.records < 40);
    }

    fn rec(i: usize) -> AuditRecord {
        AuditRecord {
            ts: now_rfc3339(),
            request_id: format!("r{i}"),
            tool: "t".into(),
            layer: None,
            principal: "operator".into(),
            agent_id: None,
            session_id: None,
            status: "ok".into(),
            elapsed_ms: 0.5,
            args: json!({"i": i}),
            error: None,
        }
    }

    #[test]
    fn the_chain_verifies_and_detects_edits_and_deletions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        // Two writers (as `serve` and a CLI `invoke` would be) share one chain.
        let a = JsonlAudit::open(&path).expect("open a");
        let b = JsonlAudit::open(&path).expect("open b");
        for i in 0..50 {
            a.record(&rec(i));
            b.record(&rec(100 + i));
        }
        a.close();
        b.close();
        assert_eq!(verify(&path).expect("read"), Ok(100));
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        let first: Value = serde_json::from_str(lines[0]).expect("json");
        assert_eq!(first["prev_hash"], GENESIS);

        let edited = text.replacen(r#""status":"ok""#, r#""status":"error""#, 1);
        std::fs::write(&path, &edited).expect("write");
        let broken = verify(&path).expect("read").expect_err("edit detected");
        assert_eq!(broken.line, 1);
        assert!(broken.reason.contains("edited"));

        let mut deleted: Vec<&str> = lines.clone();
        deleted.remove(10);
        std::fs::write(&path, deleted.join("\n") + "\n").expect("write");
        let broken = verify(&path).expect("read").expect_err("deletion detected");
        assert_eq!(broken.line, 11);
        assert!(broken.reason.contains("removed"));

        // Reopening continues the chain.
        std::fs::write(&path, text).expect("restore");
        let c = JsonlAudit::open(&path).expect("reopen");
        c.record(&rec(999));
        c.close();
        assert_eq!(verify(&path).expect("read"), Ok(101));
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
            audit.record(&rec(i));
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
