//! The corpus gate: on the test split (sources the model was not trained on), recall must be
//! at least 95 % and false alarms at most 2 %, at the alert threshold the engine uses (4.0).
//! Prints precision and recall per category (`cargo test -p strata-safety -- --nocapture`).

use std::collections::BTreeMap;

use serde_json::Value;

const THRESHOLD: f32 = 4.0;

struct Sample {
    text: String,
    injection: bool,
    category: String,
    source: String,
}

fn load(split: &str) -> Vec<Sample> {
    let path = format!("{}/corpus/{split}.jsonl", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("corpus file");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            Sample {
                text: v["text"].as_str().expect("text").to_owned(),
                injection: v["label"] == "injection",
                category: v["category"].as_str().unwrap_or("").to_owned(),
                source: v["source"].as_str().unwrap_or("").to_owned(),
            }
        })
        .collect()
}

#[derive(Default)]
struct Counts {
    tp: usize,
    fn_: usize,
    fp: usize,
    tn: usize,
}

fn evaluate(split: &str) -> (Counts, BTreeMap<String, Counts>, Vec<String>) {
    let mut all = Counts::default();
    let mut per: BTreeMap<String, Counts> = BTreeMap::new();
    let mut misses = Vec::new();
    for s in load(split) {
        let a = strata_safety::analyse(&s.text);
        let flagged = a.score >= THRESHOLD;
        let c = per.entry(format!(
            "{} {}",
            if s.injection { "injection" } else { "benign" },
            s.category
        ));
        let c = c.or_default();
        match (s.injection, flagged) {
            (true, true) => {
                all.tp += 1;
                c.tp += 1;
            }
            (true, false) => {
                all.fn_ += 1;
                c.fn_ += 1;
                misses.push(format!("MISS {} [{}] {:?}", a.score, s.source, s.text));
            }
            (false, true) => {
                all.fp += 1;
                c.fp += 1;
                let rules: Vec<&str> = a.rules.iter().map(|r| r.rule).collect();
                misses.push(format!(
                    "FALSE {} [{}] {rules:?} {:?}",
                    a.score, s.source, s.text
                ));
            }
            (false, false) => {
                all.tn += 1;
                c.tn += 1;
            }
        }
    }
    (all, per, misses)
}

fn report(split: &str) -> (f64, f64) {
    let (all, per, misses) = evaluate(split);
    let recall = all.tp as f64 / (all.tp + all.fn_).max(1) as f64;
    let fpr = all.fp as f64 / (all.fp + all.tn).max(1) as f64;
    let precision = all.tp as f64 / (all.tp + all.fp).max(1) as f64;
    println!(
        "{split}: {} injections, {} benign — recall {:.1} %, precision {:.1} %, false alarms {:.1} %",
        all.tp + all.fn_,
        all.fp + all.tn,
        recall * 100.0,
        precision * 100.0,
        fpr * 100.0
    );
    for (cat, c) in &per {
        if cat.starts_with("injection") {
            println!(
                "  {cat:32} recall {:5.1} % ({}/{})",
                100.0 * c.tp as f64 / (c.tp + c.fn_).max(1) as f64,
                c.tp,
                c.tp + c.fn_
            );
        } else {
            println!(
                "  {cat:32} false alarms {:5.1} % ({}/{})",
                100.0 * c.fp as f64 / (c.fp + c.tn).max(1) as f64,
                c.fp,
                c.fp + c.tn
            );
        }
    }
    for m in misses {
        println!("  {m}");
    }
    (recall, fpr)
}

#[test]
fn the_test_split_is_caught_with_few_false_alarms() {
    let (recall, fpr) = report("test");
    assert!(
        recall >= 0.95,
        "test-split recall {:.1} % < 95 %",
        recall * 100.0
    );
    assert!(
        fpr <= 0.02,
        "test-split false alarms {:.1} % > 2 %",
        fpr * 100.0
    );
}

#[test]
fn the_training_split_is_learnt() {
    let (recall, fpr) = report("train");
    assert!(
        recall >= 0.97 && fpr <= 0.01,
        "recall {recall}, false alarms {fpr}"
    );
}

#[test]
fn the_corpus_is_big_enough_and_split_by_source() {
    let train = load("train");
    let test = load("test");
    let inj = train.iter().chain(&test).filter(|s| s.injection).count();
    let ben = train.len() + test.len() - inj;
    assert!(inj >= 600 && ben >= 600, "{inj} injections, {ben} benign");
    let sources: std::collections::BTreeSet<&str> =
        train.iter().map(|s| s.source.as_str()).collect();
    for s in &test {
        assert!(
            !sources.contains(s.source.as_str()),
            "source {} in both splits",
            s.source
        );
    }
}

#[test]
fn the_committed_weights_are_what_the_corpus_gives() {
    let corpus: Vec<(String, bool)> = load("train")
        .into_iter()
        .map(|s| (s.text, s.injection))
        .collect();
    let fitted = strata_safety::train::fit(&corpus);
    let (bias, weights) = strata_safety::model::committed();
    let stale =
        "model_weights.rs is not what corpus/train.jsonl gives: run `cargo xtask train-safety`";
    assert!(
        (fitted.bias - f64::from(bias)).abs() < 1e-3,
        "{stale}: bias"
    );
    assert_eq!(fitted.weights.len(), weights.len(), "{stale}: features");
    for ((name, w), (cname, cw)) in fitted.weights.iter().zip(&weights) {
        assert_eq!(name, cname, "{stale}: feature order");
        assert!(
            (w - f64::from(*cw)).abs() < 1e-3,
            "{stale}: {name} {w} vs {cw}"
        );
    }
}
