//! Splitting replies to Discord's message limit on line boundaries, keeping code fences
//! balanced across parts.

/// Splits `text` into parts of at most `max` characters: at line ends where possible, inside a
/// line only when it alone is too long. A part that ends inside a ``` fence closes it and the
/// next part reopens it (with the same language tag).
pub fn split_message(text: &str, max: usize) -> Vec<String> {
    let max = max.max(16);
    if text.chars().count() <= max {
        return vec![text.to_owned()];
    }
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut fence: Option<String> = None; // the opening line of the fence we are inside
    // Room kept for a closing fence.
    let close = "\n```";
    for line in text.split_inclusive('\n') {
        let mut line = line.to_owned();
        loop {
            let budget = max - close.len();
            let cur_len = cur.chars().count();
            let line_len = line.chars().count();
            if cur_len + line_len <= budget {
                cur.push_str(&line);
                break;
            }
            if cur_len > 0
                && line_len
                    <= budget.saturating_sub(fence.as_ref().map_or(0, |f| f.chars().count() + 1))
            {
                flush(&mut parts, &mut cur, fence.as_deref());
                continue;
            }
            // The line alone is too long: cut it.
            let room = budget.saturating_sub(cur_len).max(1);
            let head: String = line.chars().take(room).collect();
            let tail: String = line.chars().skip(room).collect();
            cur.push_str(&head);
            flush(&mut parts, &mut cur, fence.as_deref());
            line = tail;
            if line.is_empty() {
                break;
            }
        }
        let t = line_trim(&line);
        if t.starts_with("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(t.to_owned()),
            };
        }
    }
    if !cur.is_empty() {
        parts.push(cur);
    }
    parts
}

fn line_trim(l: &str) -> &str {
    l.trim_end_matches(['\n', '\r']).trim_start()
}

/// Ends the current part (closing an open fence) and starts the next (reopening it).
fn flush(parts: &mut Vec<String>, cur: &mut String, fence: Option<&str>) {
    let mut done = std::mem::take(cur);
    if let Some(f) = fence {
        if !done.ends_with('\n') {
            done.push('\n');
        }
        done.push_str("```");
        cur.push_str(f);
        cur.push('\n');
    }
    parts.push(done);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_part() {
        assert_eq!(split_message("hello", 2000), ["hello"]);
    }

    #[test]
    fn splits_on_lines_and_never_exceeds_the_limit() {
        let text: String = (0..300).map(|i| format!("line number {i}\n")).collect();
        let parts = split_message(&text, 200);
        assert!(parts.len() > 1);
        assert!(parts.iter().all(|p| p.chars().count() <= 200), "{parts:?}");
        assert_eq!(
            parts.concat(),
            text,
            "nothing lost, nothing added outside fences"
        );
        assert!(parts.iter().all(|p| p.ends_with('\n')), "cut at line ends");
    }

    #[test]
    fn fences_are_closed_and_reopened() {
        let code: String = (0..60).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Here:\n```rust\n{code}```\nDone.\n");
        let parts = split_message(&text, 300);
        assert!(parts.len() > 1);
        for p in &parts {
            assert!(p.chars().count() <= 300, "{p}");
            assert_eq!(p.matches("```").count() % 2, 0, "balanced fences in {p:?}");
        }
        assert!(parts[1].starts_with("```rust\n"), "{:?}", parts[1]);
        let joined: String = parts.concat();
        for i in 0..60 {
            assert!(joined.contains(&format!("let x{i} = {i};")));
        }
    }

    #[test]
    fn a_single_huge_line_is_cut() {
        let text = "é".repeat(5000);
        let parts = split_message(&text, 2000);
        assert!(parts.iter().all(|p| p.chars().count() <= 2000));
        assert_eq!(parts.concat(), text);
    }
}
