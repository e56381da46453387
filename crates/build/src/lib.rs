//! # strata-build
//!
//! What an overlay's `build.rs` calls so that a tool saved in its own file under `src/tools/`
//! is compiled in without anyone writing `mod count_words;`:
//!
//! ```text
//! // build.rs
//! fn main() {
//!     strata_build::tools();
//! }
//! ```
//!
//! and, once, at the top of `src/tools/mod.rs`:
//!
//! ```ignore
//! include!(concat!(env!("OUT_DIR"), "/strata_tools.rs"));
//! ```
//!
//! [`tools`] writes one `#[path = "…"] pub mod <stem>;` for every `<stem>.rs` file and every
//! `<dir>/mod.rs` directory in `src/tools/` (but `mod.rs` itself, and modules `mod.rs` already
//! declares with its own `mod` line), and asks cargo to run it again when the directory
//! changes. The `#[tool]` functions in those files register themselves with the engine's
//! compile-time registry as any other; `strata doctor` names a file that registered none.

// The contract: every public item says what it is for (ARCHITECTURE.md, "API boundaries").
#![deny(missing_docs)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The file [`tools`] writes into `OUT_DIR`.
pub const GENERATED: &str = "strata_tools.rs";

/// A module found in the tools directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFile {
    /// The module's name (the file's stem, or the directory's name).
    pub module: String,
    /// The file rustc reads: `<stem>.rs`, or `<dir>/mod.rs`.
    pub path: PathBuf,
}

/// Why a file in the tools directory cannot be a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The file or directory.
    pub path: PathBuf,
    /// What to do about it.
    pub why: String,
}

/// What [`scan`] found: the modules to declare and the files it cannot use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Modules to declare, in name order.
    pub files: Vec<ToolFile>,
    /// Files whose names are not Rust identifiers (they are not compiled in).
    pub refused: Vec<Refused>,
}

/// Whether `s` can name a module: a Rust identifier that is not a keyword.
fn identifier(s: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
        "extern", "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod",
        "move", "mut", "pub", "ref", "return", "self", "static", "struct", "super", "trait",
        "true", "try", "type", "unsafe", "use", "where", "while", "yield", "abstract", "become",
        "box", "do", "final", "macro", "override", "priv", "typeof", "unsized", "virtual",
    ];
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first == '_' || first.is_ascii_alphabetic())
        && s != "_"
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !KEYWORDS.contains(&s)
}

/// The modules `mod.rs` declares itself (`mod x;` or `pub mod x;` lines), so a file a team
/// already wired by hand is not declared twice.
fn declared_in(mod_rs: &str) -> Vec<String> {
    mod_rs
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            let name = l.strip_prefix("mod ")?.trim().strip_suffix(';')?.trim();
            identifier(name).then(|| name.to_owned())
        })
        .collect()
}

/// The modules of the tools directory `dir` (usually `<crate>/src/tools`). A missing directory
/// has none.
pub fn scan(dir: &Path) -> Scan {
    let mut out = Scan::default();
    let own = std::fs::read_to_string(dir.join("mod.rs")).unwrap_or_default();
    let declared = declared_in(&own);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        // Hidden files, editor back-ups and lock files are not code.
        if name.starts_with('.') || name.starts_with('#') || name.ends_with('~') {
            continue;
        }
        let (module, file) = if path.is_dir() {
            let m = path.join("mod.rs");
            if !m.is_file() {
                continue;
            }
            (name.clone(), m)
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if stem == "mod" {
                continue;
            }
            (stem.to_owned(), path.clone())
        } else {
            continue;
        };
        if !identifier(&module) {
            let suggestion: String = module
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            out.refused.push(Refused {
                path,
                why: format!(
                    "`{module}` is not a Rust identifier, so it cannot be a module: rename it \
                     (for example `{suggestion}`)"
                ),
            });
            continue;
        }
        if declared.contains(&module) {
            continue;
        }
        out.files.push(ToolFile { module, path: file });
    }
    out.files.sort_by(|a, b| a.module.cmp(&b.module));
    out.refused.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The Rust source declaring `files` as modules, each at its absolute path.
pub fn render(files: &[ToolFile]) -> String {
    let mut s = String::from(
        "// Generated by strata_build::tools() from the files in src/tools/: do not edit.\n",
    );
    for f in files {
        // `{:?}` of a str is a valid Rust string literal, escapes included.
        let _ = writeln!(
            s,
            "#[path = {:?}]\npub mod {};",
            f.path.to_string_lossy(),
            f.module
        );
    }
    s
}

/// The build-script step: declares every file in `<CARGO_MANIFEST_DIR>/src/tools/` as a
/// module in `<OUT_DIR>/strata_tools.rs` (see the crate docs), and has cargo run the build
/// script again when a file there is added, removed or changed. A file whose name cannot be a
/// module fails the build, naming it.
pub fn tools() {
    tools_in("src/tools");
}

/// [`tools`] for another directory, relative to the crate.
pub fn tools_in(rel: &str) {
    let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let (Some(manifest), Some(out)) = (var("CARGO_MANIFEST_DIR"), var("OUT_DIR")) else {
        println!("cargo::error=strata_build::tools() runs in a build script (no OUT_DIR here)");
        return;
    };
    let dir = manifest.join(rel);
    println!("cargo::rerun-if-changed={}", dir.display());
    let found = scan(&dir);
    for r in &found.refused {
        println!("cargo::error={}: {}", r.path.display(), r.why);
    }
    if let Err(e) = std::fs::write(out.join(GENERATED), render(&found.files)) {
        println!(
            "cargo::error=writing {}: {e}",
            out.join(GENERATED).display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("dir");
        }
        std::fs::write(p, text).expect("write");
    }

    #[test]
    fn every_file_and_module_directory_becomes_a_module_but_those_declared_by_hand() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        write(d, "mod.rs", "//! tools\npub mod by_hand;\nmod also;\n");
        write(d, "count_words.rs", "");
        write(d, "by_hand.rs", "");
        write(d, "also.rs", "");
        write(d, "weather/mod.rs", "");
        write(d, "weather/api.rs", "");
        write(d, "notes/readme.md", "");
        write(d, ".#count_words.rs", "");
        write(d, "count_words.rs~", "");
        write(d, "README.md", "");
        let s = scan(d);
        let names: Vec<&str> = s.files.iter().map(|f| f.module.as_str()).collect();
        assert_eq!(names, ["count_words", "weather"]);
        assert_eq!(s.files[1].path, d.join("weather/mod.rs"));
        assert!(s.refused.is_empty(), "{:?}", s.refused);
        let text = render(&s.files);
        assert!(
            text.contains(&format!(
                "#[path = {:?}]\npub mod count_words;",
                d.join("count_words.rs").to_string_lossy()
            )),
            "{text}"
        );
    }

    #[test]
    fn a_name_that_cannot_be_a_module_is_refused_with_a_suggestion() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        write(d, "count-words.rs", "");
        write(d, "type.rs", "");
        write(d, "2fa.rs", "");
        let s = scan(d);
        assert!(s.files.is_empty(), "{:?}", s.files);
        assert_eq!(s.refused.len(), 3);
        assert!(
            s.refused
                .iter()
                .any(|r| r.path.ends_with("count-words.rs") && r.why.contains("`count_words`")),
            "{:?}",
            s.refused
        );
    }

    #[test]
    fn a_missing_directory_has_no_modules() {
        let tmp = tempfile::tempdir().expect("tmp");
        assert_eq!(scan(&tmp.path().join("nope")), Scan::default());
    }
}
