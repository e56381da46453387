//! Prompt-injection scoring: how likely a text is trying to instruct the agent that reads it.
//!
//! 1. **Normalise** ([`normalize`]): the folded copy the rules read — invisible characters
//!    dropped, NFKC, lower case, look-alike letters inside mixed words mapped to ASCII,
//!    letter-spaced words joined, digits read as letters (`1gn0re`), lines that a YAML
//!    dump or a mailer wrapped joined again and string escapes (`\n`) undone.
//! 2. **Decode** ([`decode`]): base64, hex, URL-encoding, unicode escapes and HTML character
//!    references found in the text are decoded (two levels deep) and scored too.
//! 3. **Rules** ([`rules`]): named patterns in eight attack categories, in thirteen languages
//!    where the attack is words, language-independent where it is structure (chat-template
//!    tokens, role objects, tool-call markup, hidden markup).
//! 4. **Model** ([`model`]): a logistic regression over the rule features, fitted offline
//!    to the committed corpus (`corpus/`); the score is its probability × 10.
//!
//! Everything runs in-process, offline and deterministically. `analyse` of a 10 KB page
//! takes well under the 2 ms budget (`cargo xtask bench safety`).

use std::collections::BTreeSet;

use serde::Serialize;

pub mod decode;
pub mod model;
mod model_weights;
pub mod normalize;
pub mod rules;
pub mod train;

pub use decode::Layer;
pub use normalize::{Removed, fold, sanitize};
pub use rules::{Category, RuleHit};

/// The patterns are constants of this crate; a bad one fails every test at once. Word
/// boundaries are ASCII ones: a Unicode `\b` keeps the regex crate's DFAs off any text with a
/// non-ASCII character in it, which made a 10 KB page ten times slower to read; the patterns
/// that use `\b` are the ASCII-worded ones.
pub(crate) fn re(s: &str) -> regex::Regex {
    let s = s.replace(r"\b", r"(?-u:\b)");
    #[allow(clippy::expect_used)]
    regex::RegexBuilder::new(&s)
        .size_limit(32 << 20)
        .build()
        .expect("built-in safety pattern")
}

/// A decoded layer and the rules that matched in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredLayer {
    /// How it was encoded.
    pub kind: &'static str,
    /// How deep.
    pub depth: u8,
    /// The decoded text (its first 200 characters).
    pub preview: String,
    /// Rules that matched in it.
    pub rules: Vec<&'static str>,
}

/// A category and the rules of it that matched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CategoryHit {
    /// The category.
    pub category: Category,
    /// Its rules that matched (in the text or a layer).
    pub rules: Vec<&'static str>,
}

/// Everything the scorer found in one text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// 0–10 (the model's probability × 10, one decimal).
    pub score: f32,
    /// Rule matches in the text itself and in its layers (a rule once, its best match).
    pub rules: Vec<RuleHit>,
    /// The categories that matched.
    pub categories: Vec<CategoryHit>,
    /// The decoded layers that were scored.
    pub layers: Vec<ScoredLayer>,
    /// Invisible characters in the text.
    pub hidden_characters: usize,
}

/// The features of one text, as the model and the trainer see them.
pub struct Features {
    /// Rule matches (text and layers).
    pub hits: Vec<RuleHit>,
    /// Names of the extra features that hold.
    pub extra: BTreeSet<&'static str>,
    /// The layers with their own matches.
    pub layers: Vec<ScoredLayer>,
    /// Invisible characters in the text.
    pub hidden_characters: usize,
}

/// Computes the features of `text`.
pub fn features(text: &str) -> Features {
    let folded = fold(text);
    let leet = normalize::deleet(&folded);
    let mut hits = rules::matches(text, &folded, &leet);
    let mut extra = BTreeSet::new();
    let mut scored = Vec::new();
    for layer in decode::layers(text) {
        extra.insert("layer_present");
        let lf = fold(&layer.text);
        let ll = normalize::deleet(&lf);
        let lh = rules::matches(&layer.text, &lf, &ll);
        if !lh.is_empty() {
            extra.insert("layer_rule");
        }
        scored.push(ScoredLayer {
            kind: layer.kind,
            depth: layer.depth,
            preview: layer.text.chars().take(200).collect(),
            rules: lh.iter().map(|h| h.rule).collect(),
        });
        for h in lh {
            match hits.iter_mut().find(|x| x.rule == h.rule) {
                Some(x) => x.matches += h.matches,
                None => hits.push(h),
            }
        }
    }
    let hidden = text
        .chars()
        .filter(|c| normalize::invisible_name(*c).is_some())
        .count();
    if hidden > 0 && !hits.is_empty() {
        extra.insert("invisible_with_rule");
    }
    Features {
        hits,
        extra,
        layers: scored,
        hidden_characters: hidden,
    }
}

/// A score at or above which a text is, on every set we hold, an injection: no benign text of
/// the corpus (both splits, hard negatives included), of AgentDojo's tool results or of the
/// independent sets reaches it (the highest reaches 9.6), and 692 of AgentDojo's 762
/// templated attacks do (`tests/it/heldout.rs` keeps both true). The engine's default
/// policy cuts passages that score this high out of tool results.
pub const CERTAIN: f32 = 9.7;

/// Scores `text` and says why.
pub fn analyse(text: &str) -> Analysis {
    let f = features(text);
    let names: BTreeSet<&str> = f.hits.iter().map(|h| h.rule).collect();
    let p = model::sigmoid(model::logit(&names, &f.extra));
    let mut categories: Vec<CategoryHit> = Vec::new();
    for c in Category::ALL {
        let rules: Vec<&'static str> = f
            .hits
            .iter()
            .filter(|h| h.category == c)
            .map(|h| h.rule)
            .collect();
        let rules = if c == Category::Encoded && f.extra.contains("layer_rule") {
            let mut r = rules;
            r.push("decoded_layer");
            r
        } else {
            rules
        };
        if !rules.is_empty() {
            categories.push(CategoryHit { category: c, rules });
        }
    }
    Analysis {
        score: (p * 100.0).round() / 10.0,
        rules: f.hits,
        categories,
        layers: f.layers,
        hidden_characters: f.hidden_characters,
    }
}

/// Scores `text` (0–10) and names the rules that matched (the engine's older interface).
pub fn score(text: &str) -> (f32, Vec<RuleHit>) {
    let a = analyse(text);
    (a.score, a.rules)
}
