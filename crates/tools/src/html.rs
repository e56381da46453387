//! Bytes from the web → readable text: charset decoding and a small, tolerant HTML-to-text
//! converter (headings kept as `#` lines, links as `[text](url)`, scripts, styles and
//! navigation dropped).

/// The charset named in a `Content-Type` header or a `<meta>` tag in the first 2 KiB.
fn charset(content_type: Option<&str>, body: &[u8]) -> Option<String> {
    let from_header = content_type.and_then(|ct| {
        ct.split(';')
            .filter_map(|p| p.trim().split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("charset"))
            .map(|(_, v)| v.trim().trim_matches('"').to_owned())
    });
    if from_header.is_some() {
        return from_header;
    }
    let head = String::from_utf8_lossy(&body[..body.len().min(2048)]).to_ascii_lowercase();
    let i = head.find("charset=")?;
    let rest = &head[i + "charset=".len()..];
    let rest = rest.trim_start_matches(['"', '\'']);
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_owned())
}

/// Decodes `body` by its declared charset (BOM first, UTF-8 when none is declared).
pub fn decode(content_type: Option<&str>, body: &[u8]) -> String {
    let enc = charset(content_type, body)
        .and_then(|c| encoding_rs::Encoding::for_label(c.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    let (text, _, _) = enc.decode(body);
    text.into_owned()
}

/// Whether the response looks like HTML.
pub fn is_html(content_type: Option<&str>, text: &str) -> bool {
    match content_type {
        Some(ct) => ct.to_ascii_lowercase().contains("html"),
        None => {
            let t = text
                .trim_start()
                .get(..64)
                .unwrap_or(text)
                .to_ascii_lowercase();
            t.starts_with("<!doctype html") || t.starts_with("<html")
        }
    }
}

fn entity(name: &str) -> Option<String> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code).map(String::from);
    }
    Some(
        match name {
            "amp" => "&",
            "lt" => "<",
            "gt" => ">",
            "quot" => "\"",
            "apos" => "'",
            "nbsp" => " ",
            "mdash" => "—",
            "ndash" => "–",
            "hellip" => "…",
            "copy" => "©",
            "reg" => "®",
            "laquo" => "«",
            "raquo" => "»",
            "rsquo" => "’",
            "lsquo" => "‘",
            "ldquo" => "“",
            "rdquo" => "”",
            _ => return None,
        }
        .to_owned(),
    )
}

/// Replaces character references.
pub fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.find(';').filter(|&j| j <= 10) {
            Some(j) => match entity(&after[..j]) {
                Some(e) => {
                    out.push_str(&e);
                    rest = &after[j + 1..];
                }
                None => {
                    out.push('&');
                    rest = after;
                }
            },
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The value of attribute `name` in a tag's source (`a href="…" class=x`).
fn attr(tag: &str, name: &str) -> Option<String> {
    let lower = tag.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        let before_ok = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let rest = tag[at + name.len()..].trim_start();
        if !before_ok || !rest.starts_with('=') {
            continue;
        }
        let rest = rest[1..].trim_start();
        let v = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => rest[1..].split(q).next().unwrap_or(""),
            _ => rest
                .split(|c: char| c.is_whitespace() || c == '>')
                .next()
                .unwrap_or(""),
        };
        return Some(unescape(v));
    }
    None
}

const SKIP: &[&str] = &[
    "script", "style", "noscript", "nav", "svg", "template", "iframe", "head", "button", "select",
    "canvas",
];
const BLOCK: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "aside",
    "ul",
    "ol",
    "table",
    "tr",
    "blockquote",
    "pre",
    "figure",
    "form",
    "dl",
    "dt",
    "dd",
    "hr",
];

/// A page's title and readable text. Relative links are resolved against `base`.
pub fn to_text(html: &str, base: Option<&url::Url>) -> (Option<String>, String) {
    let mut out = String::new();
    let mut title = None;
    let mut skip: Vec<String> = Vec::new();
    let mut link: Option<(String, usize)> = None;
    let mut pre = 0usize;
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            if skip.is_empty() {
                push_text(&mut out, rest, pre > 0);
            }
            break;
        };
        if skip.is_empty() {
            push_text(&mut out, &rest[..lt], pre > 0);
        }
        rest = &rest[lt..];
        if let Some(r) = rest.strip_prefix("<!--") {
            rest = r.find("-->").map_or("", |i| &r[i + 3..]);
            continue;
        }
        let Some(gt) = rest.find('>') else {
            break;
        };
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if name.is_empty() {
            continue;
        }
        if name == "title" && !closing {
            let end = rest
                .to_ascii_lowercase()
                .find("</title")
                .unwrap_or(rest.len());
            let t = unescape(rest[..end].trim());
            if !t.is_empty() {
                title = Some(t.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            rest = &rest[end..];
            continue;
        }
        if SKIP.contains(&name.as_str()) {
            if closing {
                if let Some(pos) = skip.iter().rposition(|s| *s == name) {
                    skip.truncate(pos);
                }
            } else if !tag.ends_with('/') {
                skip.push(name);
            }
            continue;
        }
        if !skip.is_empty() {
            continue;
        }
        match (name.as_str(), closing) {
            (h, false)
                if h.len() == 2
                    && h.starts_with('h')
                    && h[1..].parse::<u8>().is_ok_and(|n| (1..=6).contains(&n)) =>
            {
                newline(&mut out, 2);
                out.push_str(&"#".repeat(h[1..].parse::<usize>().unwrap_or(1)));
                out.push(' ');
            }
            (h, true) if h.len() == 2 && h.starts_with('h') && h[1..].parse::<u8>().is_ok() => {
                newline(&mut out, 2)
            }
            ("a", false) => {
                link = attr(tag, "href").map(|h| {
                    let abs = base
                        .and_then(|b| b.join(&h).ok())
                        .map(|u| u.to_string())
                        .unwrap_or(h);
                    (abs, out.len())
                });
            }
            ("a", true) => {
                if let Some((href, start)) = link.take() {
                    let text = out[start..].trim().to_owned();
                    let keep = !href.starts_with("javascript:") && !href.starts_with('#');
                    if keep && !text.is_empty() {
                        out.truncate(start);
                        if !out.ends_with([' ', '\n']) && !out.is_empty() {
                            out.push(' ');
                        }
                        out.push_str(&format!("[{text}]({href})"));
                    }
                }
            }
            ("li", false) => {
                newline(&mut out, 1);
                out.push_str("- ");
            }
            ("br", _) => newline(&mut out, 1),
            ("pre", false) => {
                pre += 1;
                newline(&mut out, 2);
            }
            ("pre", true) => {
                pre = pre.saturating_sub(1);
                newline(&mut out, 2);
            }
            ("td" | "th", false) => out.push_str(" | "),
            (b, _) if BLOCK.contains(&b) => newline(&mut out, 2),
            _ => {}
        }
    }
    // At most one blank line in a row; no trailing spaces.
    let mut text = String::new();
    let mut blank = 0;
    for line in out.lines() {
        let l = line.trim_end();
        if l.trim().is_empty() {
            blank += 1;
            if blank > 1 || text.is_empty() {
                continue;
            }
        } else {
            blank = 0;
        }
        text.push_str(l);
        text.push('\n');
    }
    (title, text.trim().to_owned())
}

fn newline(out: &mut String, n: usize) {
    let have = out.chars().rev().take_while(|c| *c == '\n').count();
    for _ in have..n {
        out.push('\n');
    }
}

fn push_text(out: &mut String, raw: &str, pre: bool) {
    let t = unescape(raw);
    if pre {
        out.push_str(&t);
        return;
    }
    let words: Vec<&str> = t.split_whitespace().collect();
    if words.is_empty() {
        if raw.chars().any(char::is_whitespace) && !out.ends_with([' ', '\n']) && !out.is_empty() {
            out.push(' ');
        }
        return;
    }
    if t.starts_with(char::is_whitespace) && !out.ends_with([' ', '\n']) && !out.is_empty() {
        out.push(' ');
    }
    out.push_str(&words.join(" "));
    if t.ends_with(char::is_whitespace) {
        out.push(' ');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_text_from_html() {
        let html = r#"<!doctype html><html><head><title>Release &amp; Notes</title>
            <style>body{color:red}</style><script>var x = "<p>no</p>";</script></head>
            <body><nav><a href="/home">Home</a> | <a href="/about">About</a></nav>
            <h1>Version 2.0</h1><p>It is <b>faster</b>&nbsp;now. See
            <a href="docs/changes.html">the changes</a>.</p>
            <ul><li>One</li><li>Two &#8211; done</li></ul>
            <pre>  keep   spacing</pre><!-- hidden --><footer>Footer text</footer></body></html>"#;
        let base = url::Url::parse("https://example.com/blog/post.html").ok();
        let (title, text) = to_text(html, base.as_ref());
        assert_eq!(title.as_deref(), Some("Release & Notes"));
        assert!(text.starts_with("# Version 2.0"), "{text}");
        assert!(
            text.contains(
                "It is faster now. See [the changes](https://example.com/blog/docs/changes.html)."
            ),
            "{text}"
        );
        assert!(text.contains("- One\n- Two – done"), "{text}");
        assert!(text.contains("  keep   spacing"), "{text}");
        for gone in ["Home", "About", "color:red", "var x", "hidden"] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
    }

    #[test]
    fn charsets() {
        let latin1 =
            b"<html><head><meta charset=\"iso-8859-1\"></head><body>Gr\xfc\xdfe</body></html>";
        assert!(decode(None, latin1).contains("Grüße"));
        assert_eq!(
            decode(Some("text/plain; charset=windows-1252"), b"caf\xe9"),
            "café"
        );
        assert_eq!(decode(Some("text/html"), "naïve".as_bytes()), "naïve");
        assert_eq!(
            unescape("a &lt;b&gt; &#x41;&#66; &bogus; & c"),
            "a <b> AB &bogus; & c"
        );
    }
}
