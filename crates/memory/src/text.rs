//! Text helpers: the FTS5 query builder, word sets for keyword dedup, vector maths.

use std::collections::BTreeSet;

const STOP_WORDS: &[&str] = &[
    "a", "about", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but",
    "by", "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her",
    "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "no",
    "not", "of", "on", "or", "our", "please", "she", "so", "some", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "to", "us", "was", "we", "were", "what",
    "when", "where", "which", "who", "why", "will", "with", "would", "you", "your", "tell", "know",
    "remember",
];

/// The meaningful words of `text`: runs of letters and digits, lower case, stop words and
/// one-character words dropped, first occurrence order, at most `max`.
pub fn terms(text: &str, max: usize) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for w in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let w = w.to_lowercase();
        if w.chars().count() < 2 || STOP_WORDS.contains(&w.as_str()) {
            continue;
        }
        if seen.insert(w.clone()) {
            out.push(w);
            if out.len() >= max {
                break;
            }
        }
    }
    out
}

/// An FTS5 query for `text`: its meaningful terms, each a quoted string (so nothing the user
/// typed can become FTS syntax: `NEAR`, `*`, `^`, parentheses, column filters), joined by
/// `OR`. `None` when the text has no meaningful term.
pub fn fts_query(text: &str) -> Option<String> {
    fts_query_terms(&terms(text, 16))
}

/// [`fts_query`] over terms already extracted by [`terms`].
pub fn fts_query_terms(t: &[String]) -> Option<String> {
    if t.is_empty() {
        return None;
    }
    Some(
        t.iter()
            // Terms are letters and digits only; doubling quotes is belt and braces.
            .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" OR "),
    )
}

/// Word-set similarity (Jaccard) of two texts' terms, 0–1.
pub fn word_similarity(a: &str, b: &str) -> f32 {
    let a: BTreeSet<String> = terms(a, 256).into_iter().collect();
    let b: BTreeSet<String> = terms(b, 256).into_iter().collect();
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = a.intersection(&b).count() as f32;
    let union = a.union(&b).count() as f32;
    if union == 0.0 { 0.0 } else { inter / union }
}

/// Scales `v` to unit length (cosine then is a dot product); zero vectors stay zero.
pub fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// Dot product, written so the compiler vectorises it (eight independent lanes).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Little-endian f32 blob.
pub fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// From a little-endian f32 blob.
pub fn from_blob(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_input_never_becomes_fts_syntax() {
        for (input, want) in [
            (
                "What is Alice's favourite colour?",
                Some(r#""alice" OR "favourite" OR "colour""#),
            ),
            (
                r#"say "hello" NEAR(world, 3)"#,
                Some(r#""say" OR "hello" OR "near" OR "world""#),
            ),
            ("foo* OR bar^ AND (baz)", Some(r#""foo" OR "bar" OR "baz""#)),
            (
                "'; DROP TABLE memories; --",
                Some(r#""drop" OR "table" OR "memories""#),
            ),
            (
                "content:secret col:x",
                Some(r#""content" OR "secret" OR "col""#),
            ),
            ("🔥🚀 ✨", None),
            ("the a of", None),
            ("", None),
        ] {
            assert_eq!(fts_query(input).as_deref(), want, "{input}");
        }
        // Non-ASCII words stay words.
        assert_eq!(
            fts_query("Größe Straße").as_deref(),
            Some(r#""größe" OR "straße""#)
        );
    }

    #[test]
    fn vectors_round_trip_and_dot() {
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6);
        assert_eq!(from_blob(&to_blob(&v)), v);
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let want: f32 = a.iter().map(|x| x * x).sum();
        assert_eq!(dot(&a, &a), want);
        assert!(word_similarity("the server is in Oslo", "The server is in Oslo!") > 0.99);
        assert!(word_similarity("cats", "dogs") < 0.01);
    }
}
