//! `read_file` and `list_files`, confined to `tools.roots`.

use std::path::{Path, PathBuf};

use serde::Serialize;
use strata_engine::{ToolContext, ToolError, tool};

const DEFAULT_READ: u64 = 64 * 1024;
const MAX_READ: u64 = 1024 * 1024;
const DEFAULT_LIST: u32 = 200;
const MAX_LIST: u32 = 5000;
const MAX_DEPTH: usize = 16;

/// What `read_file` returns.
#[derive(Debug, Serialize)]
pub struct ReadFileOutput {
    /// The path as given.
    pub path: String,
    /// File size in bytes.
    pub size: u64,
    /// Whether `content` stops before the end of the file.
    pub truncated: bool,
    /// The text (UTF-8; invalid sequences replaced), or base64 when `encoding` says so.
    pub content: String,
    /// With `binary: true` only: `utf-8` for text, `base64` for anything else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<&'static str>,
}

/// Reads a text file inside the allowed roots (`tools.roots`: by default the overlay's
/// `agents/`, `tmp/` and `knowledgebase/`). Paths are relative to the overlay directory, e.g.
/// `agents/main/AGENTS.md`. Binary files are refused. Long files are cut at `max_bytes` and
/// say so with `truncated: true`.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 30)]
async fn read_file(
    ctx: &ToolContext,
    /// File path, relative to the overlay directory (or absolute inside a root).
    path: String,
    /// Most bytes to return (default 65536, at most 1048576).
    max_bytes: Option<u64>,
    /// Return binary files too, as base64 (`encoding` then says which); default false.
    binary: Option<bool>,
) -> Result<ReadFileOutput, ToolError> {
    let limit = max_bytes.unwrap_or(DEFAULT_READ);
    if limit == 0 || limit > MAX_READ {
        return Err(ToolError::invalid(
            "max_bytes",
            format!("must be between 1 and {MAX_READ}"),
        ));
    }
    // Opened beneath its root, so a symlink swapped in after the check is never followed.
    let (file, _) = ctx.open_path(&path)?;
    let file = tokio::fs::File::from_std(file);
    let meta = file
        .metadata()
        .await
        .map_err(|e| ToolError::failed(format!("cannot read `{path}`: {e}")))?;
    if meta.is_dir() {
        return Err(ToolError::failed(format!(
            "`{path}` is a directory; use list_files to see what it holds"
        )));
    }
    let size = meta.len();
    let mut bytes = read_prefix(file, limit)
        .await
        .map_err(|e| ToolError::failed(format!("cannot read `{path}`: {e}")))?;
    if binary == Some(true) {
        let truncated = size > bytes.len() as u64;
        // A text cut inside a UTF-8 sequence is still text: drop the partial character.
        let cut = std::str::from_utf8(&bytes)
            .err()
            .filter(|e| e.error_len().is_none());
        if truncated && let Some(e) = cut {
            bytes.truncate(e.valid_up_to());
        }
        return Ok(match String::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => ReadFileOutput {
                path,
                size,
                truncated,
                content: text,
                encoding: Some("utf-8"),
            },
            Ok(text) => base64_output(path, size, truncated, text.as_bytes()),
            Err(e) => base64_output(path, size, truncated, e.as_bytes()),
        });
    }
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return Err(ToolError::failed(format!(
            "`{path}` looks binary ({size} bytes); read_file returns text only"
        )));
    }
    let truncated = size > bytes.len() as u64;
    if truncated {
        // Do not cut a UTF-8 sequence in half.
        while !bytes.is_empty()
            && std::str::from_utf8(&bytes).is_err_and(|e| e.error_len().is_none())
        {
            bytes.pop();
        }
    }
    Ok(ReadFileOutput {
        path,
        size,
        truncated,
        content: String::from_utf8_lossy(&bytes).into_owned(),
        encoding: None,
    })
}

fn base64_output(path: String, size: u64, truncated: bool, bytes: &[u8]) -> ReadFileOutput {
    use base64::Engine;
    ReadFileOutput {
        path,
        size,
        truncated,
        content: base64::engine::general_purpose::STANDARD.encode(bytes),
        encoding: Some("base64"),
    }
}

async fn read_prefix(file: tokio::fs::File, limit: u64) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    file.take(limit).read_to_end(&mut buf).await?;
    Ok(buf)
}

/// One entry of `list_files`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct FileEntry {
    /// Path relative to the overlay directory: pass it to `read_file` as is.
    pub path: String,
    /// `file`, `dir` or `symlink` (symlinks are listed, not followed).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Size in bytes (files only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// What `list_files` returns.
#[derive(Debug, Serialize)]
pub struct ListFilesOutput {
    /// Entries, sorted by path.
    pub entries: Vec<FileEntry>,
    /// Whether more entries matched than `limit`.
    pub truncated: bool,
}

/// Lists files under a directory inside the allowed roots, recursively, sorted by path.
/// Without `path` it lists every root. `glob` filters by path relative to the listed
/// directory (`*.md`, `**/notes/*.txt`); directories are listed only without a glob.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 30)]
async fn list_files(
    ctx: &ToolContext,
    /// Directory, relative to the overlay directory (e.g. `knowledgebase`). Default: all roots.
    path: Option<String>,
    /// Glob on the path relative to the listed directory, e.g. `**/*.md`.
    glob: Option<String>,
    /// Most entries to return (default 200, at most 5000).
    limit: Option<u32>,
) -> Result<ListFilesOutput, ToolError> {
    let overlay = ctx.env.overlay_dir.clone();
    let roots = ctx.tool_roots();
    let protected = vec![ctx.env.data_dir.clone()];
    tokio::task::spawn_blocking(move || {
        list(
            &overlay,
            &roots,
            &protected,
            path.as_deref(),
            glob.as_deref(),
            limit,
        )
    })
    .await
    .map_err(|e| ToolError::failed(format!("listing failed: {e}")))?
}

/// The listing behind `list_files`, for other surfaces (the control API's artifacts): entries
/// under `path` (relative to `overlay`, default: every root) inside `roots`, recursively,
/// symlinks listed but not followed, sorted, at most `limit` (default 200, at most 5000).
/// Secret files and anything inside `protected` directories are left out.
pub fn list(
    overlay: &Path,
    roots: &[PathBuf],
    protected: &[PathBuf],
    path: Option<&str>,
    glob: Option<&str>,
    limit: Option<u32>,
) -> Result<ListFilesOutput, ToolError> {
    let limit = limit.unwrap_or(DEFAULT_LIST);
    if limit == 0 || limit > MAX_LIST {
        return Err(ToolError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIST}"),
        ));
    }
    let matcher = match glob {
        Some(g) => Some(
            globset::GlobBuilder::new(g)
                .literal_separator(true)
                .build()
                .map_err(|e| ToolError::invalid("glob", e.to_string()))?
                .compile_matcher(),
        ),
        None => None,
    };
    let resolved_roots: Vec<PathBuf> = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .collect();
    let starts: Vec<PathBuf> = match path {
        Some(p) => vec![strata_engine::paths::resolve_within(
            Path::new(p),
            overlay,
            roots,
        )?],
        None => resolved_roots.clone(),
    };
    let overlay = std::fs::canonicalize(overlay).unwrap_or_else(|_| overlay.to_path_buf());
    let mut out = Vec::new();
    for start in &starts {
        if !start.is_dir() {
            return Err(ToolError::failed(format!(
                "`{}` is not a directory",
                display_rel(start, &overlay)
            )));
        }
        walk(
            start,
            start,
            &overlay,
            &resolved_roots,
            matcher.as_ref(),
            0,
            &mut out,
        )?;
    }
    let protected: Vec<PathBuf> = protected
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    out.retain(|e| {
        let full = overlay.join(&e.path);
        !strata_engine::paths::is_secret_file(&full)
            && !protected.iter().any(|p| full.starts_with(p))
    });
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup_by(|a, b| a.path == b.path);
    let truncated = out.len() > limit as usize;
    out.truncate(limit as usize);
    Ok(ListFilesOutput {
        entries: out,
        truncated,
    })
}

fn display_rel(p: &Path, overlay: &Path) -> String {
    p.strip_prefix(overlay).unwrap_or(p).display().to_string()
}

fn walk(
    start: &Path,
    dir: &Path,
    overlay: &Path,
    roots: &[PathBuf],
    matcher: Option<&globset::GlobMatcher>,
    depth: usize,
    out: &mut Vec<FileEntry>,
) -> Result<(), ToolError> {
    if depth > MAX_DEPTH || out.len() > MAX_LIST as usize {
        return Ok(());
    }
    let rd = std::fs::read_dir(dir).map_err(|e| {
        ToolError::failed(format!("cannot list `{}`: {e}", display_rel(dir, overlay)))
    })?;
    for entry in rd.flatten() {
        let p = entry.path();
        let Ok(ft) = entry.file_type() else { continue };
        // Never report what lies outside the roots (a root nested in a symlinked dir, say).
        if !roots.iter().any(|r| p.starts_with(r)) {
            continue;
        }
        let rel_to_start = p.strip_prefix(start).unwrap_or(&p);
        let kind = if ft.is_symlink() {
            "symlink"
        } else if ft.is_dir() {
            "dir"
        } else {
            "file"
        };
        let keep = match matcher {
            Some(m) => kind != "dir" && m.is_match(rel_to_start),
            None => true,
        };
        if keep {
            out.push(FileEntry {
                path: display_rel(&p, overlay),
                kind,
                size: (kind == "file").then(|| entry.metadata().map(|m| m.len()).unwrap_or(0)),
            });
        }
        if ft.is_dir() {
            walk(start, &p, overlay, roots, matcher, depth + 1, out)?;
        }
    }
    Ok(())
}

/// What `write_file` returns.
#[derive(Debug, Serialize)]
pub struct WriteFileOutput {
    /// The path as given.
    pub path: String,
    /// Bytes written by this call.
    pub written: u64,
    /// The file's size afterwards.
    pub size: u64,
    /// Whether the file was created by this call.
    pub created: bool,
}

/// Largest content `write_file` accepts in one call.
const MAX_WRITE: usize = 4 * 1024 * 1024;

/// Writes a text file inside the allowed roots (`tools.roots`), creating parent directories.
/// The write is atomic: the new content goes to a temporary file beside the target, is
/// flushed to disk and then renamed over it, so readers see the old file or the new one,
/// never half. With `append: true` the content is added to the end instead (the whole new
/// file is still written atomically).
#[tool(capabilities = [file_write], side_effects = local, timeout_secs = 30)]
async fn write_file(
    ctx: &ToolContext,
    /// File path, relative to the overlay directory (e.g. `tmp/report.md`).
    path: String,
    /// The text to write.
    content: String,
    /// Add to the end of an existing file instead of replacing it (default false).
    append: Option<bool>,
) -> Result<WriteFileOutput, ToolError> {
    if content.len() > MAX_WRITE {
        return Err(ToolError::invalid(
            "content",
            format!(
                "{} bytes is more than the {MAX_WRITE}-byte limit",
                content.len()
            ),
        ));
    }
    // The parent is reached (and made) beneath its root without following symlinks; every
    // step below is relative to its handle, so a directory swapped for a symlink after the
    // check cannot redirect the write.
    let (dir, name, _) = ctx.open_parent(&path)?;
    let append = append.unwrap_or(false);
    tokio::task::spawn_blocking(move || {
        write_atomic(&dir, &name, &path, content.as_bytes(), append)
    })
    .await
    .map_err(|e| ToolError::failed(format!("write failed: {e}")))?
}

fn write_atomic(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::OsStr,
    shown: &str,
    content: &[u8],
    append: bool,
) -> Result<WriteFileOutput, ToolError> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    use std::io::{Read, Write};
    let fail =
        |what: &str, e: std::io::Error| ToolError::failed(format!("cannot {what} `{shown}`: {e}"));
    let errno = |e: rustix::io::Errno| std::io::Error::from_raw_os_error(e.raw_os_error());
    let current = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Some(st),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => return Err(fail("read", errno(e))),
    };
    if let Some(st) = &current {
        match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::Directory => {
                return Err(ToolError::failed(format!("`{shown}` is a directory")));
            }
            rustix::fs::FileType::RegularFile => {}
            _ => {
                return Err(ToolError::failed(format!(
                    "`{shown}` is not a regular file (a symlink or device); refused"
                )));
            }
        }
    }
    let existing = match (&current, append) {
        (Some(_), true) => {
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| fail("read", errno(e)))?;
            let mut b = Vec::new();
            std::fs::File::from(fd)
                .read_to_end(&mut b)
                .map_err(|e| fail("read", e))?;
            b
        }
        _ => Vec::new(),
    };
    let created = current.is_none();
    let mut data = existing;
    data.extend_from_slice(content);
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".{}.tmp", std::process::id()));
    // A new file gets 0666 less the umask, like any; a replaced one keeps its permissions.
    let keep = current.map(|st| Mode::from_raw_mode(st.st_mode & 0o7777));
    let result = (|| -> std::io::Result<()> {
        let fd = rustix::fs::openat(
            dir,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )
        .map_err(errno)?;
        let mut f = std::fs::File::from(fd);
        f.write_all(&data)?;
        if let Some(m) = keep {
            rustix::fs::fchmod(&f, m).map_err(errno)?;
        }
        f.sync_all()?;
        rustix::fs::renameat(dir, &tmp, dir, name).map_err(errno)
    })();
    if let Err(e) = result {
        let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
        return Err(fail("write", e));
    }
    Ok(WriteFileOutput {
        path: shown.to_owned(),
        written: content.len() as u64,
        size: data.len() as u64,
        created,
    })
}
