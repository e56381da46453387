//! The integrity baseline: SHA-256 of the files that decide what this deployment does — the
//! running binary, the overlay's `config/` (team roster included), its systemd units (as
//! rendered under `systemd/` and, where installed, under `/etc/systemd/system/`), each
//! agent's identity and standing instructions (`agents/<id>/*.md`) and the skill files
//! (a command skill is a shell command). `integrity_check` compares them with the baseline
//! in `<data_dir>/integrity.json`; `strata integrity accept` takes a new one.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use strata_engine::config::LoadedConfig;

/// The file the baseline is kept in, under `data_dir`.
pub const BASELINE_FILE: &str = "integrity.json";

/// Hashes of the watched files at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// When it was taken (RFC 3339, UTC).
    pub taken_at: String,
    /// Absolute path → SHA-256 (lower-case hex).
    pub files: BTreeMap<String, String>,
}

/// What differs between a baseline and now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Drift {
    /// Same path, other content.
    pub changed: Vec<String>,
    /// Not in the baseline.
    pub added: Vec<String>,
    /// In the baseline, gone now.
    pub removed: Vec<String>,
}

impl Drift {
    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.added.is_empty() && self.removed.is_empty()
    }

    /// One sentence naming every difference.
    pub fn describe(&self) -> String {
        let part =
            |what: &str, v: &[String]| (!v.is_empty()).then(|| format!("{what}: {}", v.join(", ")));
        [
            part("changed", &self.changed),
            part("added", &self.added),
            part("removed", &self.removed),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
    }
}

/// Where a deployment's watched files are, read from its configuration once.
#[derive(Debug, Clone)]
pub struct Watch {
    /// The overlay.
    pub overlay_dir: PathBuf,
    /// Where the baseline is kept.
    pub data_dir: PathBuf,
    /// The configured agents.
    pub agents: Vec<String>,
    /// Every skill directory (modules', the overlay's, the agents').
    pub skill_dirs: Vec<PathBuf>,
}

impl Watch {
    /// For `cfg`.
    pub fn new(cfg: &LoadedConfig) -> Watch {
        Watch {
            overlay_dir: cfg.overlay_dir.clone(),
            data_dir: cfg.data_dir.clone(),
            agents: cfg.config.agents.keys().cloned().collect(),
            skill_dirs: strata_runtime::skills::dirs_for(cfg)
                .into_iter()
                .map(|d| d.path)
                .collect(),
        }
    }
}

/// The files watched, sorted and without duplicates.
pub fn watched(w: &Watch) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        files.push(exe);
    }
    let overlay = &w.overlay_dir;
    files.extend(regular_files(&overlay.join("config"), |_| true));
    let units = regular_files(&overlay.join("systemd"), |n| n.ends_with(".service"));
    for u in &units {
        if let Some(name) = u.file_name() {
            let installed = Path::new("/etc/systemd/system").join(name);
            if installed.is_file() {
                files.push(installed);
            }
        }
    }
    files.extend(units);
    for id in &w.agents {
        files.extend(regular_files(&overlay.join("agents").join(id), |n| {
            n.ends_with(".md")
        }));
    }
    for d in &w.skill_dirs {
        files.extend(regular_files(d, |n| {
            n.ends_with(".yaml") || n.ends_with(".yml")
        }));
    }
    files.sort();
    files.dedup();
    files
}

/// The regular files directly in `dir` whose names pass `keep` (none when it is missing).
fn regular_files(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| e.file_name().to_str().is_some_and(&keep))
        .map(|e| e.path())
        .collect()
}

/// SHA-256 of a file, streamed.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The watched files' hashes now. A file that cannot be read is an error naming it (a
/// check that skipped it would pass over exactly what it should see).
pub fn take(w: &Watch) -> Result<Baseline, String> {
    let mut files = BTreeMap::new();
    for p in watched(w) {
        let hash = sha256_file(&p).map_err(|e| format!("{} cannot be read: {e}", p.display()))?;
        files.insert(p.display().to_string(), hash);
    }
    Ok(Baseline {
        taken_at: strata_runtime::schedule::Timestamp::now().to_string(),
        files,
    })
}

/// The baseline stored under `data_dir`, if one has been taken.
pub fn load(data_dir: &Path) -> Result<Option<Baseline>, String> {
    let path = data_dir.join(BASELINE_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{} is not a baseline: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{} cannot be read: {e}", path.display())),
    }
}

/// Stores `b` as the baseline (written beside and renamed, so a reader never sees half).
pub fn store(data_dir: &Path, b: &Baseline) -> Result<(), String> {
    let path = data_dir.join(BASELINE_FILE);
    let tmp = data_dir.join(format!("{BASELINE_FILE}.tmp"));
    let body = serde_json::to_vec_pretty(b).map_err(|e| e.to_string())?;
    strata_engine::paths::create_private_dir_all(data_dir)
        .and_then(|()| std::fs::write(&tmp, body))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("{} cannot be written: {e}", path.display()))
}

/// What differs from `then` in `now`.
pub fn compare(then: &Baseline, now: &Baseline) -> Drift {
    let mut d = Drift::default();
    for (path, hash) in &now.files {
        match then.files.get(path) {
            None => d.added.push(path.clone()),
            Some(h) if h != hash => d.changed.push(path.clone()),
            Some(_) => {}
        }
    }
    d.removed = then
        .files
        .keys()
        .filter(|p| !now.files.contains_key(*p))
        .cloned()
        .collect();
    d
}

/// What a check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Checked {
    /// There was no baseline: this one was taken (trust on first use).
    Taken(usize),
    /// Everything as in the baseline.
    Same(usize),
    /// Differences since the baseline taken at the given time.
    Drifted(Drift, String),
}

/// Compares the watched files with the baseline, taking one when there is none.
pub fn check(w: &Watch) -> Result<Checked, String> {
    let now = take(w)?;
    match load(&w.data_dir)? {
        None => {
            store(&w.data_dir, &now)?;
            Ok(Checked::Taken(now.files.len()))
        }
        Some(then) => {
            let drift = compare(&then, &now);
            Ok(if drift.is_empty() {
                Checked::Same(now.files.len())
            } else {
                Checked::Drifted(drift, then.taken_at)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(files: &[(&str, &str)]) -> Baseline {
        Baseline {
            taken_at: "t".into(),
            files: files
                .iter()
                .map(|(p, h)| ((*p).to_owned(), (*h).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn compare_names_changed_added_and_removed() {
        let then = b(&[("/a", "1"), ("/b", "2"), ("/c", "3")]);
        let now = b(&[("/a", "1"), ("/b", "9"), ("/d", "4")]);
        let d = compare(&then, &now);
        assert_eq!(d.changed, ["/b"]);
        assert_eq!(d.added, ["/d"]);
        assert_eq!(d.removed, ["/c"]);
        assert_eq!(d.describe(), "changed: /b; added: /d; removed: /c");
        assert!(compare(&now, &now).is_empty());
    }

    #[test]
    fn sha256_of_a_file_is_the_known_digest() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("x");
        std::fs::write(&p, "abc").expect("write");
        assert_eq!(
            sha256_file(&p).expect("hash"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
