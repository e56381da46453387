//! Fits the injection model to `corpus/train.jsonl` and writes `src/model_weights.rs`
//! (`strata_safety::train`). Run it through `cargo xtask train-safety`.

use std::path::Path;

fn read(path: &Path) -> Result<Vec<(String, bool)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).map_err(|e| e.to_string())?;
            let t = v["text"]
                .as_str()
                .ok_or("a sample without text")?
                .to_owned();
            Ok((t, v["label"] == "injection"))
        })
        .collect()
}

fn main() -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = read(&root.join("corpus/train.jsonl"))?;
    let fitted = strata_safety::train::fit(&corpus);
    eprintln!(
        "{} samples, {} features, train accuracy {:.3}",
        fitted.samples,
        fitted.weights.len(),
        fitted.accuracy
    );
    let dest = root.join("src/model_weights.rs");
    std::fs::write(&dest, strata_safety::train::render(&fitted))
        .map_err(|e| format!("{}: {e}", dest.display()))?;
    eprintln!("wrote {}", dest.display());
    Ok(())
}
