//! Rule-based compression of Markdown for the model's context (no model involved): prose
//! loses filler and extra whitespace; front matter, code fences, inline code, URLs, link
//! targets, HTML comments, headings and tables are kept byte for byte.
//!
//! `lite` only tidies whitespace (trailing spaces, runs of spaces, runs of blank lines);
//! `standard` also drops filler words and shortens wordy phrases.

use serde::{Deserialize, Serialize};

/// How hard to compress.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Whitespace only.
    Lite,
    /// Whitespace, filler words and wordy phrases.
    #[default]
    Standard,
}

/// Phrases replaced in prose (`standard`), longest first; matched as whole words, the first
/// letter's case kept.
const PHRASES: &[(&str, &str)] = &[
    ("it is important to note that ", ""),
    ("it should be noted that ", ""),
    ("please note that ", ""),
    ("at this point in time", "now"),
    ("due to the fact that", "because"),
    ("in the event that", "if"),
    ("for the purpose of", "for"),
    ("in order to", "to"),
    ("a large number of", "many"),
    ("with regard to", "about"),
    ("is able to", "can"),
    ("are able to", "can"),
    ("as well as", "and"),
    ("prior to", "before"),
];

/// Words dropped from prose (`standard`), with the space after them.
const FILLER: &[&str] = &[
    "basically",
    "actually",
    "really",
    "very",
    "simply",
    "just",
    "quite",
    "literally",
    "essentially",
];

/// What compression did to a text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Bytes before.
    pub before: usize,
    /// Bytes after.
    pub after: usize,
    /// Spans kept byte for byte (front matter, fences, code, URLs, comments, headings…).
    pub protected_spans: usize,
}

/// `text` compressed at `level`, and what it saved.
pub fn compress(text: &str, level: Level) -> (String, Report) {
    let mut out = String::with_capacity(text.len());
    let mut protected = 0usize;
    let mut blank_run = 0usize;
    let mut lines = text.split_inclusive('\n').peekable();
    // Front matter: a first line of `---` up to the next `---`.
    if text.starts_with("---\n") || text.starts_with("---\r\n") {
        let mut fm = String::new();
        let mut closed = false;
        for (i, l) in lines.by_ref().enumerate() {
            fm.push_str(l);
            if i > 0 && l.trim_end() == "---" {
                closed = true;
                break;
            }
        }
        out.push_str(&fm);
        protected += usize::from(closed);
    }
    let mut fence: Option<String> = None;
    let mut in_comment = false;
    for line in lines {
        let body = line.trim_end_matches(['\n', '\r']);
        let eol = &line[body.len()..];
        if let Some(f) = &fence {
            out.push_str(line);
            if body.trim_start().starts_with(f.as_str()) {
                fence = None;
            }
            continue;
        }
        if in_comment {
            out.push_str(line);
            if body.contains("-->") {
                in_comment = false;
            }
            continue;
        }
        let trimmed = body.trim_start();
        if let Some(f) = ["```", "~~~"].iter().find(|f| trimmed.starts_with(**f)) {
            let width = trimmed
                .chars()
                .take_while(|c| *c == f.chars().next().unwrap_or('`'))
                .count();
            fence = Some(trimmed[..width].to_owned());
            protected += 1;
            out.push_str(line);
            blank_run = 0;
            continue;
        }
        if trimmed.starts_with("<!--") && !trimmed.contains("-->") {
            in_comment = true;
            protected += 1;
            out.push_str(line);
            continue;
        }
        // Headings, tables and indented code are kept as they are.
        if trimmed.starts_with('#')
            || trimmed.starts_with('|')
            || body.starts_with("    ")
            || body.starts_with('\t')
        {
            protected += 1;
            out.push_str(line);
            blank_run = 0;
            continue;
        }
        if body.trim().is_empty() {
            blank_run += 1;
            if blank_run == 1 {
                out.push_str(eol);
            }
            continue;
        }
        blank_run = 0;
        let (prose, n) = compress_line(body, level);
        protected += n;
        out.push_str(&prose);
        out.push_str(eol);
    }
    let report = Report {
        before: text.len(),
        after: out.len(),
        protected_spans: protected,
    };
    (out, report)
}

/// One prose line: protected inline spans (code, URLs, link targets, comments) kept, the
/// text between them compressed. Returns the line and how many spans it kept.
fn compress_line(line: &str, level: Level) -> (String, usize) {
    let indent_len = line.len() - line.trim_start().len();
    let (indent, rest) = line.split_at(indent_len);
    let mut out = String::from(indent);
    let mut kept = 0;
    let mut prose = String::new();
    let mut i = 0;
    while i < rest.len() {
        if let Some(end) = protected_at(rest, i) {
            out.push_str(&squeeze(&prose, level));
            prose.clear();
            out.push_str(&rest[i..end]);
            kept += 1;
            i = end;
            continue;
        }
        let ch = rest[i..].chars().next().unwrap_or(' ');
        prose.push(ch);
        i += ch.len_utf8();
    }
    out.push_str(&squeeze(&prose, level));
    (out.trim_end().to_owned(), kept)
}

/// The end of a protected span starting at byte `i` of `s`, if one starts there.
fn protected_at(s: &str, i: usize) -> Option<usize> {
    let rest = &s[i..];
    if rest.starts_with('`') {
        let ticks = rest.chars().take_while(|c| *c == '`').count();
        let fence = &rest[..ticks];
        return rest[ticks..].find(fence).map(|e| i + ticks + e + ticks);
    }
    if rest.starts_with("<!--") {
        return rest.find("-->").map(|e| i + e + 3);
    }
    if rest.starts_with("](") {
        return rest.find(')').map(|e| i + e + 1);
    }
    if rest.starts_with("http://") || rest.starts_with("https://") {
        let end = rest
            .find(|c: char| c.is_whitespace() || c == ')' || c == '>' || c == '"')
            .unwrap_or(rest.len());
        return Some(i + end);
    }
    None
}

/// Prose between protected spans: runs of spaces to one; with `standard`, phrases shortened
/// and filler words dropped (whole words only).
fn squeeze(prose: &str, level: Level) -> String {
    if prose.is_empty() {
        return String::new();
    }
    let mut s = prose.to_owned();
    if level == Level::Standard {
        for (from, to) in PHRASES {
            s = replace_words(&s, from, to);
        }
        for w in FILLER {
            s = replace_words(&s, &format!("{w} "), "");
        }
    }
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.chars() {
        if c == ' ' {
            if !space {
                out.push(c);
            }
            space = true;
        } else {
            out.push(c);
            space = false;
        }
    }
    out
}

/// `s` with `from` (lower case; also matched with its first letter capitalised) replaced by
/// `to` where it stands as whole words.
fn replace_words(s: &str, from: &str, to: &str) -> String {
    let mut out = s.to_owned();
    for (pat, rep) in [
        (from.to_owned(), to.to_owned()),
        (capitalise(from), capitalise(to)),
    ] {
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(&pat) {
            let before_ok = rest[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_alphanumeric());
            let after = &rest[at + pat.len()..];
            let after_ok =
                pat.ends_with(' ') || after.chars().next().is_none_or(|c| !c.is_alphanumeric());
            result.push_str(&rest[..at]);
            if before_ok && after_ok {
                // A dropped sentence opener leaves the next word to start the sentence.
                if rep.is_empty() && pat.starts_with(|c: char| c.is_uppercase()) {
                    let mut chars = after.chars();
                    if let Some(first) = chars.next() {
                        result.extend(first.to_uppercase());
                        rest = chars.as_str();
                        continue;
                    }
                }
                result.push_str(&rep);
            } else {
                result.push_str(&pat);
            }
            rest = after;
        }
        result.push_str(rest);
        out = result;
    }
    out
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_loses_filler_and_protected_spans_stay() {
        let text = "---\ntitle: Very basic   notes\n---\n# Just a heading\n\n\n\nIt is important to note that we basically   need `very  simple` code, \
                    in order to reach https://example.com/just/very?x=1 quickly.\n```sh\njust   run   it\n```\n<!-- really keep -->\nReally good.\n";
        let (out, r) = compress(text, Level::Standard);
        assert_eq!(
            out,
            "---\ntitle: Very basic   notes\n---\n# Just a heading\n\nWe need `very  simple` code, \
             to reach https://example.com/just/very?x=1 quickly.\n```sh\njust   run   it\n```\n<!-- really keep -->\nGood.\n"
        );
        assert!(r.after < r.before);
        // Lite keeps the words.
        let (lite, _) = compress("We  basically   agree.  \n\n\n\nYes.\n", Level::Lite);
        assert_eq!(lite, "We basically agree.\n\nYes.\n");
        // Words are matched whole: `justice` stays.
        let (w, _) = compress("justice is very fair\n", Level::Standard);
        assert_eq!(w, "justice is fair\n");
    }
}
