//! Rights that go wrong while Strata runs: the data directory's mode loosened, files under
//! the overlay owned by another user than the service's, configuration or knowledge files
//! that became unreadable. Each finding carries the command that fixes it. The
//! `permission_check` job reports them (once per `security.permission_watch.cooldown`);
//! `strata doctor` runs the same sweep.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One problem with rights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What it is about (for the cooldown): `data_dir_mode`, `owner:<uid>`, `unreadable:<path>`.
    pub key: String,
    /// For people.
    pub message: String,
    /// The exact command that fixes it.
    pub fix: String,
}

/// Directories under the overlay the sweep does not enter (build output, VCS, the data
/// directory's own check is separate).
const SKIP: &[&str] = &["target", ".git", "node_modules"];

/// At most this many entries are looked at per sweep.
const MAX_ENTRIES: usize = 50_000;

/// Sweeps `overlay` and `data_dir` as the service's user (this process's effective user).
pub fn sweep(overlay: &Path, data_dir: &Path) -> Vec<Finding> {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let mut out = Vec::new();
    if let Ok(m) = std::fs::metadata(data_dir)
        && m.mode() & 0o077 != 0
    {
        out.push(Finding {
            key: "data_dir_mode".into(),
            message: format!(
                "data dir {} is open to other users (mode {:o}): it holds the sessions, the \
                 audit log and the API token",
                data_dir.display(),
                m.mode() & 0o777
            ),
            fix: format!("chmod 700 {}", quote(data_dir)),
        });
    }
    // Files owned by someone else: grouped by owner.
    let mut foreign: std::collections::BTreeMap<u32, Vec<PathBuf>> = Default::default();
    let mut unreadable = Vec::new();
    let mut seen = 0usize;
    let mut stack = vec![overlay.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            unreadable.push(dir);
            continue;
        };
        for e in rd.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                break;
            }
            let path = e.path();
            if path == data_dir {
                continue;
            }
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if m.uid() != uid {
                foreign.entry(m.uid()).or_default().push(path.clone());
            }
            if m.is_dir() {
                let name = e.file_name();
                if !SKIP.iter().any(|s| name == *s) {
                    stack.push(path);
                }
            } else if m.is_file()
                && watched_file(overlay, &path)
                && std::fs::File::open(&path).is_err()
            {
                unreadable.push(path);
            }
        }
    }
    for (owner, paths) in foreign {
        let shown: Vec<String> = paths
            .iter()
            .take(3)
            .map(|p| p.strip_prefix(overlay).unwrap_or(p).display().to_string())
            .collect();
        out.push(Finding {
            key: format!("owner:{owner}"),
            message: format!(
                "{} entries under the overlay belong to uid {owner}, not the service's uid {uid} \
                 (e.g. {}): the service may be unable to change or even read them",
                paths.len(),
                shown.join(", ")
            ),
            fix: format!("chown -R {uid}:{gid} {}", quote(overlay)),
        });
    }
    for p in unreadable {
        out.push(Finding {
            key: format!("unreadable:{}", p.display()),
            message: format!("{} cannot be read by the service", p.display()),
            fix: format!("chown {uid}:{gid} {0} && chmod u+rX {0}", quote(&p)),
        });
    }
    out
}

/// Configuration, identity and knowledge files: the ones a running agent must read.
fn watched_file(overlay: &Path, p: &Path) -> bool {
    let Ok(rel) = p.strip_prefix(overlay) else {
        return false;
    };
    let first = rel.components().next().map(|c| c.as_os_str().to_owned());
    matches!(
        first.as_deref().and_then(|f| f.to_str()),
        Some("config" | "knowledgebase" | "agents" | "skills")
    )
}

/// A path for a shell command line (single-quoted when it needs to be).
fn quote(p: &Path) -> String {
    let s = p.display().to_string();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c))
    {
        s
    } else {
        strata_runtime::skills::shell_quote(&s)
    }
}
