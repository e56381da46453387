//! Compression over a corpus of real Markdown (this repository's documentation): every
//! protected span of each file — fenced blocks, headings, table rows, inline code, URLs, HTML
//! comments — is in the output byte for byte and in order, and the output is never longer.

use strata_engine::compress::{Level, compress};

/// The spans a file's compression must keep, found independently of the compressor.
fn protected_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            let fence = &t[..3];
            let mut block = vec![line.to_owned()];
            for l in lines.by_ref() {
                block.push(l.to_owned());
                if l.trim_start().starts_with(fence) {
                    break;
                }
            }
            spans.push(block.join("\n"));
            continue;
        }
        if t.starts_with('#') || t.starts_with('|') {
            spans.push(line.to_owned());
            continue;
        }
        // Inline code and URLs of prose lines.
        let mut rest = line;
        while let Some(at) = rest.find(['`', 'h']) {
            let r = &rest[at..];
            if r.starts_with('`') {
                let ticks = r.chars().take_while(|c| *c == '`').count();
                match r[ticks..].find(&r[..ticks]) {
                    Some(end) => {
                        spans.push(r[..ticks + end + ticks].to_owned());
                        rest = &r[ticks + end + ticks..];
                    }
                    None => rest = &r[ticks..],
                }
            } else if r.starts_with("http://") || r.starts_with("https://") {
                let end = r
                    .find(|c: char| c.is_whitespace() || c == ')' || c == '>' || c == '"')
                    .unwrap_or(r.len());
                spans.push(r[..end].to_owned());
                rest = &r[end..];
            } else {
                rest = &r[1..];
            }
        }
    }
    spans
}

#[test]
fn protected_spans_survive_byte_for_byte_across_the_docs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.push(root.join("README.md"));
    assert!(files.len() >= 10, "a corpus of Markdown files");
    let (mut before, mut after) = (0, 0);
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        for level in [Level::Lite, Level::Standard] {
            let (out, report) = compress(&text, level);
            assert!(out.len() <= text.len(), "{}: grew", f.display());
            let mut at = 0;
            for span in protected_spans(&text) {
                match out[at..].find(&span) {
                    Some(i) => at += i + span.len(),
                    None => panic!("{} ({level:?}): lost or moved {span:?}", f.display()),
                }
            }
            if level == Level::Standard {
                before += report.before;
                after += report.after;
            }
        }
    }
    assert!(
        after < before,
        "standard saves something on prose: {before} → {after}"
    );
}
