//! Everything a run changes, so a failure or Ctrl-C puts the disk back as it was.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

enum Entry {
    /// A directory this run created (removed on rollback when empty).
    Dir(PathBuf),
    /// A file this run created.
    File(PathBuf),
    /// A file this run replaced: its earlier bytes and mode.
    Replaced(PathBuf, Vec<u8>, u32),
    /// Something outside the file system (git config), undone by this.
    Undo(String, Box<dyn FnOnce() -> anyhow::Result<()>>),
}

/// What a run did, in order.
#[derive(Default)]
pub struct Journal {
    entries: Vec<Entry>,
    /// Lines for the summary: what was created, updated or kept.
    pub report: Vec<String>,
    root: PathBuf,
}

impl Journal {
    /// A journal for changes under `root` (paths in the report are shown relative to it).
    pub fn new(root: &Path) -> Self {
        Journal {
            entries: Vec::new(),
            report: Vec::new(),
            root: root.to_path_buf(),
        }
    }

    fn shown(&self, p: &Path) -> String {
        p.strip_prefix(&self.root)
            .unwrap_or(p)
            .display()
            .to_string()
    }

    /// Creates `dir` (0700 when this run creates it) and its missing parents.
    pub fn mkdir_private(&mut self, dir: &Path) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let existed = dir.exists();
        self.mkdir(dir)?;
        if !existed {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
    }

    /// Creates `dir` and its missing parents, recording each one created.
    pub fn mkdir(&mut self, dir: &Path) -> anyhow::Result<()> {
        let mut missing = Vec::new();
        let mut d = Some(dir);
        while let Some(p) = d {
            if p.as_os_str().is_empty() || p.exists() {
                break;
            }
            missing.push(p.to_path_buf());
            d = p.parent();
        }
        for p in missing.into_iter().rev() {
            std::fs::create_dir(&p).with_context(|| format!("creating {}", p.display()))?;
            self.entries.push(Entry::Dir(p));
        }
        Ok(())
    }

    /// Writes `bytes` to `path` with `mode` (atomically: temp file, fsync, rename). An existing
    /// file with the same bytes is left alone; a different one is recorded for rollback.
    pub fn write(&mut self, path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if let Some(parent) = path.parent() {
            self.mkdir(parent)?;
        }
        let before = match std::fs::read(path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if before.as_deref() == Some(bytes) {
            self.report.push(format!("unchanged {}", self.shown(path)));
            return Ok(());
        }
        let tmp = path.with_file_name(format!(
            ".{}.setup-tmp",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(mode)
                .open(&tmp)
                .with_context(|| format!("writing {}", tmp.display()))?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        let old_mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o644);
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
        match before {
            Some(b) => {
                self.report.push(format!("updated {}", self.shown(path)));
                self.entries
                    .push(Entry::Replaced(path.to_path_buf(), b, old_mode));
            }
            None => {
                self.report.push(format!("created {}", self.shown(path)));
                self.entries.push(Entry::File(path.to_path_buf()));
            }
        }
        Ok(())
    }

    /// Notes that `path` already had what this run would write.
    pub fn unchanged(&mut self, path: &Path) {
        self.report.push(format!("unchanged {}", self.shown(path)));
    }

    /// Records a file something else (the vault) created or changed at `path`, given what was
    /// there before (`None`: nothing).
    pub fn record(&mut self, path: &Path, before: Option<(Vec<u8>, u32)>) {
        match before {
            Some((b, mode)) => self
                .entries
                .push(Entry::Replaced(path.to_path_buf(), b, mode)),
            None => self.entries.push(Entry::File(path.to_path_buf())),
        }
    }

    /// Records an action outside the file system with how to undo it.
    pub fn undo(&mut self, what: &str, f: impl FnOnce() -> anyhow::Result<()> + 'static) {
        self.entries.push(Entry::Undo(what.to_owned(), Box::new(f)));
    }

    /// Puts everything back, newest first; returns what could not be undone.
    pub fn rollback(self) -> Vec<String> {
        use std::os::unix::fs::PermissionsExt;
        let mut failed = Vec::new();
        for e in self.entries.into_iter().rev() {
            let r: anyhow::Result<()> = match e {
                Entry::File(p) => match std::fs::remove_file(&p) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        Err(anyhow::anyhow!("{}: {e}", p.display()))
                    }
                    _ => Ok(()),
                },
                Entry::Dir(p) => {
                    // Only what this run left in it may go: files others wrote stay.
                    std::fs::remove_dir(&p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
                }
                Entry::Replaced(p, bytes, mode) => std::fs::write(&p, &bytes)
                    .and_then(|()| {
                        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
                    })
                    .map_err(|e| anyhow::anyhow!("{}: {e}", p.display())),
                Entry::Undo(what, f) => f().map_err(|e| anyhow::anyhow!("{what}: {e}")),
            };
            if let Err(e) = r {
                failed.push(e.to_string());
            }
        }
        failed
    }

    /// Whether the run changed anything.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The bytes and mode of `path`, if it exists (for [`Journal::record`]).
pub fn snapshot(path: &Path) -> Option<(Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let bytes = std::fs::read(path).ok()?;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    Some((bytes, mode))
}
