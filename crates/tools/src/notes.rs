//! `search_notes`: full-text search over the knowledge-base folders with the ripgrep library
//! crates — `.gitignore` respected, binary files skipped, huge files left out, no index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use serde::Serialize;
use strata_engine::{ToolContext, ToolError, tool};

/// Files larger than this are not searched.
const MAX_FILE: u64 = 8 * 1024 * 1024;
/// Matching lines collected before ranking.
const MAX_CANDIDATES: usize = 2_000;

/// One hit.
#[derive(Debug, Serialize, Clone)]
pub struct NoteHit {
    /// Path relative to the overlay (pass it to `read_file`).
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The matching line.
    pub text: String,
    /// The line before and after, when there are any.
    pub context: Vec<String>,
    #[serde(skip)]
    score: usize,
}

/// What `search_notes` returns.
#[derive(Debug, Serialize)]
pub struct SearchNotesOutput {
    /// Best first: lines matching more of the query's words come first.
    pub results: Vec<NoteHit>,
    /// Files searched.
    pub files_searched: usize,
    /// More lines matched than were returned.
    pub truncated: bool,
}

#[derive(Default)]
struct Collect {
    lines: BTreeMap<u64, (bool, String)>,
}

impl Sink for Collect {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        if let Some(n) = m.line_number() {
            let text = String::from_utf8_lossy(m.bytes()).trim_end().to_owned();
            self.lines.insert(n, (true, text));
        }
        Ok(self.lines.len() < MAX_CANDIDATES)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        if let Some(n) = c.line_number() {
            let text = String::from_utf8_lossy(c.bytes()).trim_end().to_owned();
            self.lines.entry(n).or_insert((false, text));
        }
        Ok(true)
    }
}

fn words(query: &str) -> Vec<String> {
    let mut out: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric() && c != '_' && c != '-' && c != '.')
        .map(|w| w.trim_matches(['.', '-']).to_lowercase())
        .filter(|w| w.chars().count() >= 2)
        .collect();
    out.dedup();
    out.truncate(12);
    out
}

fn cut(s: &str) -> String {
    if s.chars().count() > 300 {
        format!("{}…", s.chars().take(300).collect::<String>())
    } else {
        s.to_owned()
    }
}

fn search(
    overlay: &Path,
    dirs: &[PathBuf],
    protected: &Path,
    terms: &[String],
    max: usize,
) -> Result<SearchNotesOutput, ToolError> {
    let pattern = terms
        .iter()
        .map(|t| regex_syntax_escape(t))
        .collect::<Vec<_>>()
        .join("|");
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(true)
        .build(&pattern)
        .map_err(|e| ToolError::failed(format!("cannot search for that: {e}")))?;
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .before_context(1)
        .after_context(1)
        .binary_detection(BinaryDetection::quit(0))
        .build();
    let mut hits = Vec::new();
    let mut files = 0;
    let mut truncated = false;
    for dir in dirs {
        let walk = ignore::WalkBuilder::new(dir)
            .require_git(false)
            .max_filesize(Some(MAX_FILE))
            .sort_by_file_path(|a, b| a.cmp(b))
            .build();
        for entry in walk.flatten() {
            let path = entry.path();
            if !entry.file_type().is_some_and(|t| t.is_file())
                || strata_engine::paths::is_secret_file(path)
                || path.starts_with(protected)
            {
                continue;
            }
            // Opened beneath its notes folder: a file swapped for a symlink after the walk saw
            // it is skipped, not followed.
            let Ok((file, _)) = strata_engine::paths::open_guarded(
                path,
                overlay,
                dirs,
                std::slice::from_ref(&protected.to_path_buf()),
            ) else {
                continue;
            };
            files += 1;
            let mut sink = Collect::default();
            if searcher.search_file(&matcher, &file, &mut sink).is_err() {
                continue;
            }
            let rel = path
                .strip_prefix(overlay)
                .unwrap_or(path)
                .to_string_lossy()
                .into_owned();
            for (n, (is_match, text)) in &sink.lines {
                if !is_match {
                    continue;
                }
                let lower = text.to_lowercase();
                let score = terms.iter().filter(|t| lower.contains(t.as_str())).count();
                let context = [n.checked_sub(1), Some(n + 1)]
                    .into_iter()
                    .flatten()
                    .filter_map(|k| sink.lines.get(&k).map(|(_, t)| cut(t)))
                    .collect();
                hits.push(NoteHit {
                    path: rel.clone(),
                    line: *n,
                    text: cut(text),
                    context,
                    score,
                });
            }
            if hits.len() >= MAX_CANDIDATES {
                truncated = true;
                break;
            }
        }
    }
    // Stable: equal scores keep path and line order.
    hits.sort_by_key(|h| std::cmp::Reverse(h.score));
    if hits.len() > max {
        truncated = true;
        hits.truncate(max);
    }
    Ok(SearchNotesOutput {
        results: hits,
        files_searched: files,
        truncated,
    })
}

/// Escapes regex metacharacters (the query is words, never a pattern).
fn regex_syntax_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Searches the knowledge-base folders (`tools.notes_dirs`: `knowledgebase/`, `codex/`) for
/// lines containing any of the query's words, case-insensitively. Lines with more of the
/// words come first; each result has its path (for `read_file`), line number and the lines
/// around it. `.gitignore` files are respected, binary and very large files skipped.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 30)]
async fn search_notes(
    ctx: &ToolContext,
    /// Words to look for.
    query: String,
    /// Most results (default 15, at most 100).
    max_results: Option<u32>,
    /// Only this folder (inside the notes folders), e.g. `knowledgebase/ops`.
    dir: Option<String>,
) -> Result<SearchNotesOutput, ToolError> {
    let max = max_results.unwrap_or(15);
    if !(1..=100).contains(&max) {
        return Err(ToolError::invalid(
            "max_results",
            "must be between 1 and 100",
        ));
    }
    let terms = words(&query);
    if terms.is_empty() {
        return Err(ToolError::invalid(
            "query",
            "needs at least one word of two or more characters",
        ));
    }
    let overlay = ctx.env.overlay_dir.clone();
    let canon = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    let notes: Vec<PathBuf> = ctx
        .env
        .config
        .tools
        .notes_dirs
        .iter()
        .map(|d| canon(overlay.join(d)))
        .filter(|d| d.is_dir())
        .collect();
    let dirs = match dir {
        None => notes,
        Some(d) => {
            let resolved = strata_engine::paths::resolve_guarded(
                Path::new(&d),
                &overlay,
                &notes,
                std::slice::from_ref(&ctx.env.data_dir),
            )?;
            vec![resolved]
        }
    };
    if dirs.is_empty() {
        return Err(ToolError::failed(
            "no notes folder exists (`tools.notes_dirs`, default knowledgebase/ and codex/)",
        ));
    }
    let protected = canon(ctx.env.data_dir.clone());
    tokio::task::spawn_blocking(move || search(&overlay, &dirs, &protected, &terms, max as usize))
        .await
        .map_err(|e| ToolError::failed(format!("search failed: {e}")))?
}
