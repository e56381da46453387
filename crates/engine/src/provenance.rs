//! Provenance of values: which of a tool call's argument values could only have come from
//! untrusted content. The pure half of taint by data flow ([`crate::taint::Taint::trace`]).
//!
//! A call's arguments are cut into *atoms*: the whole value of an argument that names
//! something (a recipient, a URL, a path, an amount, a query), and the salient tokens inside
//! any string (URLs and host names, e-mail addresses, tokens with digits such as IBANs, ids,
//! phone numbers and dates). Free text an agent writes (`body`, `text`, `content`, …) is
//! judged by its salient tokens only: a message *about* a page is fine, a link or an account
//! number lifted from it is not. An atom is steered when it occurs in the turn's untrusted
//! content and nowhere in its trusted content (the person's message, the configuration, what
//! trusted tools returned). Matching is on normalized text (case, whitespace, invisible
//! characters) at token boundaries.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// Arguments whose value is free text an agent writes: only their salient tokens count.
const PROSE: &[&str] = &[
    "body",
    "text",
    "content",
    "message",
    "subject",
    "summary",
    "note",
    "notes",
    "description",
    "title",
    "comment",
    "reply",
    "caption",
];

/// Integer arguments that count or page (`limit: 20`): small values are not provenance.
const COUNTS: &[&str] = &[
    "limit", "n", "count", "max", "top", "page", "offset", "size", "days", "hours", "minutes",
    "seconds", "k", "num", "lines", "depth", "retries",
];

/// Arguments that name where a call goes or what it asks for out there: a read that sends
/// these out is steered when they come from untrusted content (see [`addresses_out`]).
const OUTWARD: &[&str] = &[
    "url",
    "uri",
    "link",
    "href",
    "endpoint",
    "address",
    "host",
    "domain",
    "query",
    "q",
    "search",
    "to",
    "recipient",
    "email",
];

/// Whether `atom` of `argument` is what a call that sends its arguments out would carry
/// *somewhere an attacker chose* or *as their words*: a URL, host or e-mail address, or the
/// value of an argument that names a destination or a query. A channel or file picked from
/// a listing is not (reads keep working on what earlier reads found).
pub fn addresses_out(argument: &str, atom: &str) -> bool {
    let key = argument
        .rsplit(['.', '['])
        .next()
        .unwrap_or(argument)
        .trim_end_matches(']')
        .to_ascii_lowercase();
    OUTWARD.contains(&key.as_str())
        || atom.contains('@')
        || URL.is_match(atom) && atom.contains('.')
}

/// A whole value longer than this (normalized) is judged by its salient tokens only.
const WHOLE_MAX: usize = 256;

/// Lower case, one space for any run of white space, invisible characters dropped.
pub fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.chars() {
        if matches!(
            c,
            '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}'
        ) {
            continue;
        }
        if c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// The strings and numbers of `v` (object keys included), one per line, normalized: what a
/// corpus keeps of a tool's result.
pub fn text_of(v: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(&normalize(s));
                out.push('\n');
            }
            Value::Number(n) => {
                out.push_str(&n.to_string());
                out.push('\n');
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => {
                for (k, x) in o {
                    out.push_str(&normalize(k));
                    out.push('\n');
                    walk(x, out);
                }
            }
            Value::Bool(_) | Value::Null => {}
        }
    }
    let mut out = String::new();
    walk(v, &mut out);
    out
}

/// [`text_of`] cut in two: the text of each value under a key named in `fields` (at any
/// depth, whole: its keys and everything below), one entry a value, and the text of the rest —
/// the trusted and the untrusted part of a tool's structured result whose `fields` the system
/// behind it vouches for ([`crate::spec::ToolSpec::trusted_fields`]).
pub fn split_fields(v: &Value, fields: &[String]) -> (Vec<String>, String) {
    fn walk(v: &Value, fields: &[String], trusted: &mut Vec<String>, rest: &mut String) {
        match v {
            Value::Array(a) => a.iter().for_each(|x| walk(x, fields, trusted, rest)),
            Value::Object(o) => {
                for (k, x) in o {
                    if fields.iter().any(|f| f == k) {
                        trusted.push(text_of(x));
                    } else {
                        rest.push_str(&normalize(k));
                        rest.push('\n');
                        walk(x, fields, trusted, rest);
                    }
                }
            }
            other => rest.push_str(&text_of(other)),
        }
    }
    let (mut trusted, mut rest) = (Vec::new(), String::new());
    walk(v, fields, &mut trusted, &mut rest);
    (trusted, rest)
}

/// A pattern of this file: constant, covered by its tests, so building it cannot fail.
fn pattern(p: &str) -> Regex {
    #[allow(clippy::expect_used)]
    Regex::new(p).expect("built-in provenance pattern")
}

static URL: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?:[a-z][a-z0-9+.-]*://)?((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,})(?::\d+)?(?:/[^\s\x22'<>()\[\]{}]*)?",
    )
});
static EMAIL: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"[a-z0-9._%+-]+@(?:[a-z0-9-]+\.)+[a-z]{2,}"));
/// A calendar date or clock time, whole (`2024-05-20`, `20.05.2024`, `2024-05-20t10:00`,
/// `10:30`): in free text, not provenance.
static DATE_TIME: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"^(?:\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[./]\d{1,2}[./]\d{2,4})(?:[t ]?\d{1,2}:\d{2}(?::\d{2})?)?$|^\d{1,2}:\d{2}(?::\d{2})?$",
    )
});
static DIGITS: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"[a-z0-9][a-z0-9_+./:-]*[0-9][a-z0-9_+./:-]*|[0-9]"));

/// The salient tokens of normalized text: URLs (without their scheme) and their hosts,
/// e-mail addresses, and tokens with at least three digits or four characters and a digit.
fn salient(text: &str, out: &mut Vec<String>) {
    for m in URL.captures_iter(text) {
        let whole = m.get(0).map_or("", |x| x.as_str());
        let bare = whole
            .split_once("://")
            .map_or(whole, |(_, rest)| rest)
            .trim_end_matches(['.', ',', ';', ':', '!', '?', '/']);
        out.push(bare.to_owned());
        if let Some(host) = m.get(1) {
            out.push(host.as_str().trim_start_matches("www.").to_owned());
        }
    }
    for m in EMAIL.find_iter(text) {
        out.push(m.as_str().to_owned());
    }
    for m in DIGITS.find_iter(text) {
        let t = m.as_str().trim_end_matches(['.', ',', ';', ':', '/', '-']);
        let digits = t.chars().filter(char::is_ascii_digit).count();
        if digits >= 3 || (digits >= 1 && t.chars().count() >= 4) {
            out.push(t.to_owned());
        }
    }
}

/// The atoms of a call's arguments, each with the argument it is in (`to`, `items[2].iban`).
pub fn atoms(args: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, path: &str, key: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::String(s) => {
                let n = normalize(s);
                if n.is_empty() {
                    return;
                }
                let mut found = Vec::new();
                let prose = PROSE.contains(&key);
                if !prose
                    && n.chars().count() <= WHOLE_MAX
                    && (n.chars().count() >= 3 || n.chars().all(|c| c.is_ascii_digit()))
                {
                    found.push(n.clone());
                    // A URL's whole value is also judged without its scheme.
                    if let Some((_, rest)) = n.split_once("://") {
                        found.push(rest.trim_end_matches('/').to_owned());
                    }
                }
                salient(&n, &mut found);
                if prose {
                    // A date or a time in free text says when, not where or to whom: a
                    // message may repeat one it read (a deadline from the minutes).
                    found.retain(|a| !DATE_TIME.is_match(a));
                }
                found.sort();
                found.dedup();
                out.extend(found.into_iter().map(|a| (path.to_owned(), a)));
            }
            Value::Number(num) => {
                let Some(f) = num.as_f64() else { return };
                let integral = f.fract() == 0.0;
                if integral && f.abs() < 10.0 {
                    return;
                }
                if integral && f.abs() < 1000.0 && COUNTS.contains(&key) {
                    return;
                }
                let mut forms = vec![num.to_string()];
                if integral {
                    // 30000 is written 30,000 or 30000.00 as often as not.
                    let i = f as i64;
                    forms.push(format!("{i}"));
                    forms.push(format!("{i}.00"));
                    forms.push(thousands(i));
                } else {
                    forms.push(format!("{f:.2}"));
                }
                forms.sort();
                forms.dedup();
                out.extend(forms.into_iter().map(|a| (path.to_owned(), a)));
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, &format!("{path}[{i}]"), key, out);
                }
            }
            Value::Object(o) => {
                for (k, x) in o {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(x, &p, &k.to_ascii_lowercase(), out);
                }
            }
            Value::Bool(_) | Value::Null => {}
        }
    }
    let mut out = Vec::new();
    walk(args, "", "", &mut out);
    out
}

fn thousands(i: i64) -> String {
    let digits = i.unsigned_abs().to_string();
    let mut out = String::new();
    for (n, c) in digits.chars().enumerate() {
        if n > 0 && (digits.len() - n).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if i < 0 { format!("-{out}") } else { out }
}

/// `atom` occurs in `hay` (both normalized) at token boundaries: not inside a longer word
/// or number.
pub fn occurs(hay: &str, atom: &str) -> bool {
    if atom.is_empty() {
        return false;
    }
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let starts_word = atom.chars().next().is_some_and(word);
    let ends_word = atom.chars().next_back().is_some_and(word);
    hay.match_indices(atom).any(|(i, _)| {
        let before_ok = !starts_word || hay[..i].chars().next_back().is_none_or(|c| !word(c));
        let after_ok = !ends_word
            || hay[i + atom.len()..]
                .chars()
                .next()
                .is_none_or(|c| !word(c));
        before_ok && after_ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_date_in_free_text_is_not_provenance_but_an_account_or_a_date_argument_is() {
        let got = atoms_of(json!({
            "body": "Due 2024-05-20 at 10:30 (or 20.05.2024), pay DE89370400440532013000",
            "date": "2024-05-20",
        }));
        assert!(
            got.contains(&"de89370400440532013000".to_owned()),
            "{got:?}"
        );
        assert!(
            !got.iter().any(|a| a == "10:30" || a == "20.05.2024"),
            "{got:?}"
        );
        // The date argument itself still counts, whole: it says when a transfer goes.
        assert_eq!(
            got.iter().filter(|a| *a == "2024-05-20").count(),
            1,
            "{got:?}"
        );
    }

    #[test]
    fn vouched_fields_are_cut_from_the_rest_at_any_depth() {
        let v = json!({"result": [
            {"sender": "GB29 NWBK 6016", "amount": 10.0, "subject": "pay US133 now",
             "meta": {"sender": "x@bank.test", "note": "see evil.test"}},
        ]});
        let fields = ["sender".to_owned(), "amount".to_owned()];
        let (trusted, rest) = split_fields(&v, &fields);
        let trusted = trusted.join("\n");
        assert!(occurs(&trusted, "gb29 nwbk 6016"), "{trusted}");
        assert!(occurs(&trusted, "10.0") && occurs(&trusted, "x@bank.test"));
        assert!(!occurs(&trusted, "us133") && !occurs(&trusted, "evil.test"));
        assert!(
            occurs(&rest, "us133") && occurs(&rest, "evil.test"),
            "{rest}"
        );
        assert!(!occurs(&rest, "gb29 nwbk 6016") && !occurs(&rest, "x@bank.test"));
        // No field named: all of it is the rest, as `text_of` reads it.
        assert_eq!(split_fields(&v, &[]), (vec![], text_of(&v)));
        assert_eq!(
            split_fields(&json!("plain"), &fields).1,
            text_of(&json!("plain"))
        );
    }

    fn atoms_of(v: Value) -> Vec<String> {
        atoms(&v).into_iter().map(|(_, a)| a).collect()
    }

    #[test]
    fn names_are_whole_values_and_prose_is_its_tokens() {
        let a = atoms_of(
            json!({"recipient": "US133000000121212121212", "amount": 30000,
                                 "subject": "Hi, see www.Evil-Site.com/x now"}),
        );
        assert!(a.contains(&"us133000000121212121212".to_owned()), "{a:?}");
        assert!(a.contains(&"30,000".to_owned()) && a.contains(&"30000".to_owned()));
        assert!(a.contains(&"www.evil-site.com/x".to_owned()), "{a:?}");
        assert!(a.contains(&"evil-site.com".to_owned()), "{a:?}");
        // The subject's own words are not atoms: it is prose.
        assert!(!a.iter().any(|x| x.starts_with("hi,")), "{a:?}");
    }

    #[test]
    fn counts_flags_and_tiny_values_are_not_provenance() {
        assert!(atoms_of(json!({"limit": 20, "all": true, "x": null, "n": 3})).is_empty());
        // An id is, however short, when it is all digits.
        assert_eq!(atoms_of(json!({"file_id": "13"})), ["13"]);
    }

    #[test]
    fn only_addresses_and_queries_steer_a_read() {
        assert!(addresses_out("url", "evil.test/x"));
        assert!(addresses_out("params.q", "anything at all"));
        assert!(addresses_out("channel", "mallory@evil.test"));
        assert!(addresses_out("channel", "www.evil-site.com"));
        assert!(!addresses_out("channel", "general"));
        assert!(!addresses_out("user", "alice"));
    }

    #[test]
    fn occurrence_respects_token_boundaries() {
        let hay = normalize("Pay  IBAN US133000000121212121212 by Friday; file 13.");
        assert!(occurs(&hay, "us133000000121212121212"));
        assert!(occurs(&hay, "13"));
        assert!(!occurs(&hay, "1330"));
        assert!(!occurs(&hay, "ay"));
        assert_eq!(normalize("A\u{200B}b\n\t C"), "ab c");
    }

    #[test]
    fn a_result_is_kept_as_its_leaves() {
        let t = text_of(&json!({"Name": "Bob", "items": [{"iban": "DE89"}, 42]}));
        assert!(t.contains("name\nbob\n") && t.contains("de89") && t.contains("42"));
    }
}
