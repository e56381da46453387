//! Confining file access to allowed roots.
//!
//! Every file tool goes through [`resolve_within`]: the path is resolved (symlinks followed,
//! `..` applied by the file system, not by string games) and must land inside one of the roots,
//! themselves resolved. For a path that does not exist yet (a file about to be written), the
//! nearest existing ancestor is resolved and the remaining components must be plain names.

use std::path::{Component, Path, PathBuf};

/// A path that may not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The resolved path lies outside every allowed root.
    #[error("path `{path}` resolves to `{resolved}`, outside the allowed roots ({roots}); refused")]
    OutsideRoots {
        /// As given.
        path: String,
        /// After resolving symlinks and `..`.
        resolved: String,
        /// The allowed roots, comma-separated.
        roots: String,
    },
    /// No allowed root exists on disk.
    #[error("no allowed root exists (configured: {0}); create one or fix `tools.roots`")]
    NoRoots(String),
    /// The path is a secret (vault, keys, tokens) or lies in a protected directory (the data
    /// dir: databases, audit log, tokens), even though it sits under a root.
    #[error("path `{path}` is protected ({why}); refused")]
    Protected {
        /// As given.
        path: String,
        /// Which rule refused it.
        why: String,
    },
    /// The path could not be resolved (does not exist, permission, loop…).
    #[error("cannot resolve `{path}`: {reason}")]
    Unresolvable {
        /// As given.
        path: String,
        /// The OS error.
        reason: String,
    },
}

fn join_roots(roots: &[PathBuf]) -> String {
    roots
        .iter()
        .map(|r| r.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resolves `path` and requires it inside one of `roots`.
///
/// A relative `path` is taken from `base` (for tools: the overlay directory, so
/// `agents/main/AGENTS.md` means what it says). The returned path is absolute and free of
/// symlinks (for an existing path) so callers may open it directly.
pub fn resolve_within(path: &Path, base: &Path, roots: &[PathBuf]) -> Result<PathBuf, PathError> {
    let resolved_roots: Vec<PathBuf> = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .collect();
    if resolved_roots.is_empty() {
        return Err(PathError::NoRoots(join_roots(roots)));
    }
    let candidate = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let resolved = resolve_lenient(&candidate).map_err(|e| PathError::Unresolvable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    if resolved_roots.iter().any(|r| resolved.starts_with(r)) {
        Ok(resolved)
    } else {
        Err(PathError::OutsideRoots {
            path: path.display().to_string(),
            resolved: resolved.display().to_string(),
            roots: join_roots(roots),
        })
    }
}

/// Creates `dir` and any missing parent as private directories (0700 on Unix): what the data
/// directory and everything under it are made with, whichever part of Strata writes first.
/// Directories that exist keep their mode (`strata doctor` reports a loose one).
pub fn create_private_dir_all(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Files that are never read or listed by tools or surfaces, wherever they sit: the vault
/// (`secrets.enc`, `secrets.salt`, `secrets.kdf`), key files, `.env` files and API tokens.
pub fn is_secret_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    name.starts_with("secrets.")
        || name == ".env"
        || name.starts_with(".env.")
        || name == "api-token"
        || name.ends_with(".pem")
        || name.ends_with(".key")
        || name.contains("vault-key")
}

/// [`resolve_within`], then refuses secret files ([`is_secret_file`]) and anything inside
/// `protected` directories (for tools: the data dir). Every file tool goes through this.
pub fn resolve_guarded(
    path: &Path,
    base: &Path,
    roots: &[PathBuf],
    protected: &[PathBuf],
) -> Result<PathBuf, PathError> {
    let resolved = resolve_within(path, base, roots)?;
    if is_secret_file(&resolved) {
        return Err(PathError::Protected {
            path: path.display().to_string(),
            why: "secret file".into(),
        });
    }
    for dir in protected {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        if resolved.starts_with(&dir) {
            return Err(PathError::Protected {
                path: path.display().to_string(),
                why: format!("inside the data directory {}", dir.display()),
            });
        }
    }
    Ok(resolved)
}

/// Opens `path` for reading under the rules of [`resolve_guarded`], with no window between
/// the check and the open: the checked path is opened again *beneath* a handle on its root,
/// refusing any symlink or `..` met on the way (`openat2` with `RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS`, or component by component with `O_NOFOLLOW` on kernels without it).
/// The checked path has no symlinks left in it, so one found now was swapped in after the
/// check — by a process that can write inside a root — and the open fails instead of
/// following it out. Returns the open file and the checked path.
pub fn open_guarded(
    path: &Path,
    base: &Path,
    roots: &[PathBuf],
    protected: &[PathBuf],
) -> Result<(std::fs::File, PathBuf), PathError> {
    use rustix::fs::{Mode, OFlags};
    let resolved = resolve_guarded(path, base, roots, protected)?;
    let unresolvable = |reason: String| PathError::Unresolvable {
        path: path.display().to_string(),
        reason,
    };
    let root = holding_root(path, &resolved, roots, false)?;
    let rel = resolved
        .strip_prefix(&root)
        .map_err(|e| unresolvable(e.to_string()))?;
    let dir = rustix::fs::open(
        &root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| unresolvable(format!("cannot open its root {}: {e}", root.display())))?;
    let fd = open_beneath(&dir, rel, OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY).map_err(
        |e| match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::XDEV | rustix::io::Errno::NOTDIR => {
                unresolvable(format!(
                    "it changed while being opened (a symlink or `..` appeared under {}); refused",
                    root.display()
                ))
            }
            e => unresolvable(e.to_string()),
        },
    )?;
    Ok((std::fs::File::from(fd), resolved))
}

/// The deepest root holding the checked path `resolved` (roots may nest); with `strictly`,
/// a root that is the path itself does not count (a file needs a parent inside the root).
fn holding_root(
    path: &Path,
    resolved: &Path,
    roots: &[PathBuf],
    strictly: bool,
) -> Result<PathBuf, PathError> {
    roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .filter(|r| resolved.starts_with(r) && !(strictly && resolved == r.as_path()))
        .max_by_key(|r| r.components().count())
        .ok_or_else(|| PathError::OutsideRoots {
            path: path.display().to_string(),
            resolved: resolved.display().to_string(),
            roots: join_roots(roots),
        })
}

/// For writing `path` under the rules of [`resolve_guarded`]: a handle on its parent
/// directory, reached (and created where missing) beneath the root without following any
/// symlink, and the file's name in it. Writers create, replace and rename relative to the
/// handle (`openat`, `renameat`), so a directory swapped for a symlink after the check cannot
/// send the write outside. Returns (parent handle, file name, checked path).
pub fn open_parent_guarded(
    path: &Path,
    base: &Path,
    roots: &[PathBuf],
    protected: &[PathBuf],
) -> Result<(std::os::fd::OwnedFd, std::ffi::OsString, PathBuf), PathError> {
    use rustix::fs::{Mode, OFlags};
    let resolved = resolve_guarded(path, base, roots, protected)?;
    let unresolvable = |reason: String| PathError::Unresolvable {
        path: path.display().to_string(),
        reason,
    };
    let root = holding_root(path, &resolved, roots, true)?;
    let rel = resolved
        .strip_prefix(&root)
        .map_err(|e| unresolvable(e.to_string()))?;
    let name = rel
        .file_name()
        .map(std::ffi::OsStr::to_os_string)
        .ok_or_else(|| unresolvable("it names no file".into()))?;
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(&root, dir_flags, Mode::empty())
        .map_err(|e| unresolvable(format!("cannot open its root {}: {e}", root.display())))?;
    for comp in rel.parent().into_iter().flat_map(Path::components) {
        let Component::Normal(part) = comp else {
            return Err(unresolvable("it has a `..` or a root in it".into()));
        };
        match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(unresolvable(e.to_string())),
        }
        dir = rustix::fs::openat(&dir, part, dir_flags, Mode::empty()).map_err(|e| match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => unresolvable(format!(
                "it changed while being opened (a symlink appeared under {}); refused",
                root.display()
            )),
            e => unresolvable(e.to_string()),
        })?;
    }
    Ok((dir, name, resolved))
}

/// Opens `rel` (no `..`, no symlinks, never leaving `dir`) relative to `dir`.
fn open_beneath(
    dir: &rustix::fd::OwnedFd,
    rel: &Path,
    flags: rustix::fs::OFlags,
) -> Result<rustix::fd::OwnedFd, rustix::io::Errno> {
    use rustix::fs::{Mode, ResolveFlags};
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(dir, rel, flags, Mode::empty(), resolve) {
        Err(rustix::io::Errno::NOSYS) => open_walk(dir, rel, flags),
        r => r,
    }
}

/// [`open_beneath`] before Linux 5.6: one component at a time, never following a symlink.
fn open_walk(
    dir: &rustix::fd::OwnedFd,
    rel: &Path,
    flags: rustix::fs::OFlags,
) -> Result<rustix::fd::OwnedFd, rustix::io::Errno> {
    use rustix::fs::{Mode, OFlags};
    let mut current: Option<rustix::fd::OwnedFd> = None;
    let comps: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Ok(n)),
            Component::CurDir => None,
            _ => Some(Err(rustix::io::Errno::XDEV)),
        })
        .collect::<Result<_, _>>()?;
    let last = comps.len().saturating_sub(1);
    for (i, name) in comps.iter().enumerate() {
        let at = current.as_ref().unwrap_or(dir);
        let f = if i == last {
            flags | OFlags::NOFOLLOW
        } else {
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
        };
        current = Some(rustix::fs::openat(at, *name, f, Mode::empty())?);
    }
    match current {
        Some(fd) => Ok(fd),
        None => rustix::fs::openat(dir, ".", flags, Mode::empty()),
    }
}

/// Canonicalises the longest existing prefix of `p` and appends the rest, refusing `..` in the
/// non-existing rest (it cannot be resolved safely before the directories exist).
fn resolve_lenient(p: &Path) -> std::io::Result<PathBuf> {
    match std::fs::canonicalize(p) {
        Ok(r) => return Ok(r),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no existing ancestor",
                ));
            }
        }
    }
    // `file_name()` is None for a trailing `..`, so `rest` holds only plain names; but a `..`
    // in the middle of the missing part is still in `existing`'s components if it exists —
    // canonicalize handles that. Reject anything that is not a normal component anyway.
    let mut out = std::fs::canonicalize(&existing)?;
    for name in rest.iter().rev() {
        let comp = Path::new(name);
        if !matches!(comp.components().next(), Some(Component::Normal(_))) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "`..` in a path that does not exist yet",
            ));
        }
        out.push(name);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_for_old_kernels_refuses_symlinks_and_parent_steps() {
        use rustix::fs::{Mode, OFlags};
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("d")).expect("mkdir");
        std::fs::write(root.join("d/f"), "inside").expect("w");
        std::fs::write(tmp.path().join("f"), "outside").expect("w");
        std::os::unix::fs::symlink(tmp.path(), root.join("link")).expect("ln");
        std::os::unix::fs::symlink(tmp.path().join("f"), root.join("d/flink")).expect("ln");
        let dir =
            rustix::fs::open(&root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).expect("root");
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let read = |rel: &str| {
            open_walk(&dir, Path::new(rel), flags).map(|fd| {
                let mut s = String::new();
                let mut f = std::fs::File::from(fd);
                std::io::Read::read_to_string(&mut f, &mut s).expect("read");
                s
            })
        };
        assert_eq!(read("d/f").expect("plain"), "inside");
        assert!(read("link/f").is_err(), "a symlinked directory");
        assert!(read("d/flink").is_err(), "a symlinked file");
        assert!(read("d/../../f").is_err(), "a parent step");
    }

    #[test]
    fn inside_outside_and_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::write(root.join("sub/a.txt"), "a").expect("write");
        std::fs::write(dir.path().join("secret.txt"), "s").expect("write");
        let roots = vec![root.clone()];

        let base = dir.path();
        let ok = resolve_within(Path::new("root/sub/a.txt"), base, &roots).expect("inside");
        assert!(ok.ends_with("root/sub/a.txt"));
        // Not existing yet, but inside: fine (for writers).
        let new = resolve_within(Path::new("root/sub/new/b.txt"), base, &roots).expect("new");
        assert!(new.ends_with("root/sub/new/b.txt"));

        for bad in [
            "secret.txt",
            "root/../secret.txt",
            "root/sub/../../secret.txt",
            ".",
        ] {
            let err = resolve_within(Path::new(bad), base, &roots).expect_err(bad);
            assert!(
                matches!(err, PathError::OutsideRoots { .. }),
                "{bad}: {err}"
            );
        }
        let abs = dir.path().join("secret.txt");
        assert!(matches!(
            resolve_within(&abs, base, &roots),
            Err(PathError::OutsideRoots { .. })
        ));
        // `..` through a directory that does not exist is refused rather than guessed.
        assert!(resolve_within(Path::new("root/nope/../../secret.txt"), base, &roots).is_err());
    }

    #[test]
    fn secrets_and_the_data_dir_are_refused_inside_roots() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("config")).expect("mkdir");
        std::fs::create_dir_all(root.join("data")).expect("mkdir");
        std::fs::write(root.join("config/secrets.enc"), "x").expect("w");
        std::fs::write(root.join("data/strata.db"), "x").expect("w");
        std::fs::write(root.join("notes.md"), "x").expect("w");
        let roots = vec![root.clone()];
        let protected = vec![root.join("data")];
        let guard = |p: &str| resolve_guarded(Path::new(p), &root, &roots, &protected);
        assert!(guard("notes.md").is_ok());
        for bad in [
            "config/secrets.enc",
            "data/strata.db",
            "data",
            "data/new-file",
        ] {
            assert!(
                matches!(guard(bad), Err(PathError::Protected { .. })),
                "{bad}"
            );
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(root.join("data/strata.db"), root.join("innocent.txt"))
                .expect("ln");
            assert!(matches!(
                guard("innocent.txt"),
                Err(PathError::Protected { .. })
            ));
            // A symlink loop is an error, not a hang.
            std::os::unix::fs::symlink(root.join("loop-a"), root.join("loop-b")).expect("ln");
            std::os::unix::fs::symlink(root.join("loop-b"), root.join("loop-a")).expect("ln");
            assert!(guard("loop-a").is_err());
        }
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_names_are_paths_like_any_other() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).expect("mkdir");
        let name = OsStr::from_bytes(b"caf\xe9-\xff.txt");
        std::fs::write(root.join(name), "x").expect("write a non-UTF-8 name");
        let roots = vec![root.clone()];
        let inside = Path::new("root").join(name);
        let ok = resolve_guarded(&inside, dir.path(), &roots, &[]).expect("inside");
        assert_eq!(ok.file_name(), Some(name));
        // Escapes stay escapes, and the error message renders the bytes lossily.
        let out = Path::new("root").join(name).join("../../..").join(name);
        let err = resolve_guarded(&out, dir.path(), &roots, &[]).expect_err("outside");
        assert!(err.to_string().contains('\u{fffd}'), "{err}");
        // A symlink with a non-UTF-8 name pointing outside is refused.
        let link = root.join(OsStr::from_bytes(b"l\xfenk"));
        std::os::unix::fs::symlink(dir.path(), &link).expect("ln");
        let via = Path::new("root").join(OsStr::from_bytes(b"l\xfenk"));
        assert!(resolve_guarded(&via, dir.path(), &roots, &[]).is_err());
    }

    #[test]
    fn no_root_exists() {
        let err = resolve_within(
            Path::new("a"),
            Path::new("/"),
            &[PathBuf::from("/definitely/not/here")],
        )
        .expect_err("no roots");
        assert!(matches!(err, PathError::NoRoots(_)));
    }
}
