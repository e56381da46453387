//! `cargo xtask check-core`: core and modules must not carry deployment details. Flags
//! Discord snowflakes that are not obvious placeholders, API-key-shaped strings, e-mail
//! addresses and absolute home paths in the text files under `crates/`, `modules/` and
//! `xtask/`. A line that must keep such a string (a documented test vector) says
//! `check-core: allow`.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// File.
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// What kind of thing.
    pub kind: &'static str,
    /// The match, shortened so a real secret is not printed whole.
    pub excerpt: String,
}

// The patterns below are constants of this file: compiling them cannot fail at run time
// (the unit tests compile every one).
#[allow(clippy::expect_used)]
static SNOWFLAKE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^0-9A-Za-z_.])([0-9]{17,20})(?:$|[^0-9A-Za-z_])").expect("regex")
});
#[allow(clippy::expect_used)]
static KEYS: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    [
        (
            "OpenAI-style key",
            r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{32,}",
        ),
        ("Google API key", r"\bAIza[0-9A-Za-z_\-]{35}\b"),
        ("GitHub token", r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),
        ("Slack token", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
        ("AWS access key", r"\bAKIA[0-9A-Z]{16}\b"),
        (
            "Discord bot token",
            r"\b[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}\b",
        ),
        ("private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    ]
    .into_iter()
    .map(|(k, r)| (k, Regex::new(r).expect("regex")))
    .collect()
});
#[allow(clippy::expect_used)]
static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z0-9._%+\-]+@([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,})\b")
        .expect("regex")
});
#[allow(clippy::expect_used)]
static HOME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:/home|/Users)/([A-Za-z0-9._\-]+)").expect("regex"));

/// Placeholder snowflakes: one digit repeated, or counting up (`1234…`), or zeros with a
/// short tail (`100000000000000001`).
fn placeholder_snowflake(s: &str) -> bool {
    let b = s.as_bytes();
    let same = b.iter().all(|c| *c == b[0]);
    let counting = b
        .windows(2)
        .all(|w| w[1] == if w[0] == b'9' { b'0' } else { w[0] + 1 });
    let zeros = s.chars().filter(|c| *c == '0').count();
    same || counting || zeros + 3 >= s.len()
}

fn placeholder_domain(d: &str) -> bool {
    let d = d.to_lowercase();
    [
        "example.com",
        "example.org",
        "example.net",
        "example.invalid",
    ]
    .iter()
    .any(|p| d == *p || d.ends_with(&format!(".{p}")))
        || [".invalid", ".test", ".example", ".localhost", ".local"]
            .iter()
            .any(|t| d.ends_with(t))
        || d == "localhost"
}

fn placeholder_user(u: &str) -> bool {
    matches!(
        u,
        "user"
            | "you"
            | "me"
            | "example"
            | "strata"
            | "alice"
            | "bob"
            | "runner"
            | "USER"
            | "username"
            | "your-user"
            | "name"
            | "deploy"
            | "ubuntu"
            | "debian"
    ) || u.starts_with('$')
        || u.starts_with('<')
        || u.starts_with('{')
}

fn short(s: &str) -> String {
    if s.len() > 12 {
        format!("{}…", s.chars().take(10).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// Findings in one text.
pub fn check_text(path: &Path, text: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.contains("check-core: allow") {
            continue;
        }
        let mut push = |kind: &'static str, m: &str| {
            out.push(Finding {
                path: path.to_path_buf(),
                line: i + 1,
                kind,
                excerpt: short(m),
            })
        };
        for c in SNOWFLAKE.captures_iter(line) {
            if let Some(m) = c.get(1)
                && !placeholder_snowflake(m.as_str())
            {
                push("Discord snowflake (deployment id)", m.as_str());
            }
        }
        for (kind, re) in KEYS.iter() {
            if let Some(m) = re.find(line) {
                push(kind, m.as_str());
            }
        }
        for c in EMAIL.captures_iter(line) {
            if let (Some(all), Some(domain)) = (c.get(0), c.get(1))
                && !placeholder_domain(domain.as_str())
            {
                push("e-mail address", all.as_str());
            }
        }
        for c in HOME.captures_iter(line) {
            if let (Some(all), Some(user)) = (c.get(0), c.get(1))
                && !placeholder_user(user.as_str())
            {
                push("absolute home path", all.as_str());
            }
        }
    }
    out
}

const TEXT_EXT: &[&str] = &[
    "rs", "toml", "yaml", "yml", "json", "md", "txt", "sh", "py", "service", "html", "js",
];

/// Findings in every text file under `root`'s `crates/`, `modules/` and `xtask/` (skipping
/// `target/` and hidden directories).
pub fn check_tree(root: &Path) -> anyhow::Result<Vec<Finding>> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = ["crates", "modules", "xtask"]
        .iter()
        .map(|d| root.join(d))
        .filter(|p| p.is_dir())
        .collect();
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file()
                && p.extension()
                    .and_then(|x| x.to_str())
                    .is_some_and(|x| TEXT_EXT.contains(&x) || x == "snap")
                && let Ok(text) = std::fs::read_to_string(&p)
            {
                let rel = p.strip_prefix(root).unwrap_or(&p).to_path_buf();
                out.extend(check_text(&rel, &text));
            }
        }
    }
    Ok(out)
}
