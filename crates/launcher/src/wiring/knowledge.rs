//! The knowledge index an agent is built with: what it can look up in the knowledge bases.

use std::path::Path;

/// What the agent can look up, within `budget` bytes (about four per token): for the team's
/// `knowledgebase/` and the agent's own `agents/<id>/knowledgebase/`, the first lines of
/// `_index.md`, or where there is none, each Markdown or text file's title (its first
/// heading, else its name). Read when the agent is built.
pub fn knowledge_index(overlay: &Path, id: &str, budget: usize) -> String {
    if budget == 0 {
        return String::new();
    }
    let mut lines = Vec::new();
    for (dir, label) in [
        ("knowledgebase".to_owned(), "the team's"),
        (format!("agents/{id}/knowledgebase"), "your own"),
    ] {
        let root = overlay.join(&dir);
        let entries = match std::fs::read_to_string(root.join("_index.md")) {
            Ok(text) => text
                .lines()
                .map(str::trim_end)
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>(),
            Err(_) => titles(&root, &dir),
        };
        if !entries.is_empty() {
            lines.push(format!("{dir}/ ({label}):"));
            lines.extend(entries);
        }
    }
    let mut out = String::new();
    for l in lines {
        if out.len() + l.len() + 1 > budget {
            out.push_str("… (more in the files)\n");
            break;
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// `- <path> — <title>` for each `.md`/`.txt` file under `root` (two levels, sorted).
fn titles(root: &Path, shown_as: &str) -> Vec<String> {
    let mut files = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), 0)];
    while let Some((d, depth)) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() && depth < 1 {
                dirs.push((p, depth + 1));
            } else if ft.is_file() && p.extension().is_some_and(|x| x == "md" || x == "txt") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            let head = std::fs::read_to_string(&p)
                .ok()
                .and_then(|t| {
                    t.lines()
                        .take(20)
                        .find_map(|l| l.strip_prefix("# ").map(|h| h.trim().to_owned()))
                })
                .unwrap_or_default();
            if head.is_empty() {
                format!("- {shown_as}/{rel}")
            } else {
                format!("- {shown_as}/{rel} — {head}")
            }
        })
        .collect()
}
