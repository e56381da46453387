//! The JSONL audit log — storage like the other stores: one JSON line per record, written off
//! the async threads, each line chained to the one before by a SHA-256 hash, rotated by size,
//! verified end to end.
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

use serde_json::Value;
use strata_engine::audit::{AuditLog, AuditRecord, AuditSink, redact};

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

impl From<&strata_engine::config::AuditConfig> for Rotation {
    fn from(c: &strata_engine::config::AuditConfig) -> Self {
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
            strata_engine::paths::create_private_dir_all(parent).map_err(err)?;
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

impl AuditLog for JsonlAudit {
    /// The file's last `n` records ([`tail`]): what the writer has written so far.
    fn tail(&self, n: usize) -> std::io::Result<Vec<Value>> {
        tail(&self.path, n)
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

/// Reads the lines appended to a log file since the last read: whole lines only (a partial
/// last line waits for the next read), from the start again when the file shrank (rotated).
pub struct Follower {
    path: std::path::PathBuf,
    pos: u64,
}

impl Follower {
    /// Follows `path` from its current end.
    pub fn from_end(path: &Path) -> Self {
        Follower {
            path: path.to_path_buf(),
            pos: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        }
    }

    /// The whole lines appended since the last read, at most about `max_bytes` of them (the
    /// rest on the next read). A missing file reads as nothing.
    pub fn read_new(&mut self, max_bytes: u64) -> std::io::Result<String> {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        if len < self.pos {
            self.pos = 0;
        }
        if len == self.pos {
            return Ok(String::new());
        }
        f.seek(SeekFrom::Start(self.pos))?;
        let mut buf = Vec::new();
        Read::by_ref(&mut f)
            .take((len - self.pos).min(max_bytes.max(1)))
            .read_to_end(&mut buf)?;
        let complete = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        buf.truncate(complete);
        self.pos += complete as u64;
        Ok(String::from_utf8_lossy(&buf).into_owned())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use strata_engine::clock::now_rfc3339;

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
            taint: None,
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
