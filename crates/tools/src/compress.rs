//! `compress_context` and `decompress_context`: rule-based compression of a knowledge file or
//! skill prompt (`strata_engine::compress`), the original kept beside it.

use std::path::PathBuf;

use serde_json::{Value, json};
use strata_engine::compress::{Level, compress};
use strata_engine::{ToolContext, ToolError, tool};

use crate::extend::write_file;

fn original_of(path: &std::path::Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".original");
    PathBuf::from(p)
}

/// Compresses a Markdown file for the model's context without a model: `lite` tidies
/// whitespace, `standard` also drops filler words and wordy phrases; `report` only says what
/// `standard` would save. Front matter, code, URLs, HTML comments, headings and tables stay
/// byte for byte; the original is kept beside it as `<file>.original` (`decompress_context`
/// puts it back).
#[tool(capabilities = [file_write], side_effects = local, timeout_secs = 30)]
async fn compress_context(
    ctx: &ToolContext,
    /// The file (inside the tool roots).
    path: String,
    /// `lite`, `standard` (default) or `report`.
    level: Option<String>,
) -> Result<Value, ToolError> {
    let (level, write) = match level.as_deref().unwrap_or("standard") {
        "lite" => (Level::Lite, true),
        "standard" => (Level::Standard, true),
        "report" => (Level::Standard, false),
        other => {
            return Err(ToolError::invalid(
                "level",
                format!("`{other}` is not lite, standard or report"),
            ));
        }
    };
    let file = ctx
        .resolve_path(&path)
        .map_err(|e| ToolError::invalid("path", e.to_string()))?;
    let shown = path.clone();
    tokio::task::spawn_blocking(move || {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| ToolError::failed(format!("cannot read {shown}: {e}")))?;
        let (out, report) = compress(&text, level);
        let saved = report.before.saturating_sub(report.after);
        let mut result = json!({
            "path": shown,
            "before": report.before,
            "after": report.after,
            "saved_bytes": saved,
            "protected_spans": report.protected_spans,
        });
        if !write {
            result["written"] = json!(false);
            return Ok(result);
        }
        let original = original_of(&file);
        if original.exists() {
            return Err(ToolError::failed(format!(
                "{shown} is compressed already ({shown}.original holds the original); \
                 decompress_context first"
            )));
        }
        write_file(&original, text.as_bytes(), false).map_err(ToolError::failed)?;
        write_file(&file, out.as_bytes(), true).map_err(ToolError::failed)?;
        result["written"] = json!(true);
        result["original"] = json!(format!("{shown}.original"));
        Ok(result)
    })
    .await
    .map_err(|e| ToolError::failed(format!("compression stopped: {e}")))?
}

/// Puts back the original of a file `compress_context` compressed (from `<file>.original`).
#[tool(capabilities = [file_write], side_effects = local, timeout_secs = 30)]
async fn decompress_context(
    ctx: &ToolContext,
    /// The compressed file.
    path: String,
) -> Result<Value, ToolError> {
    let file = ctx
        .resolve_path(&path)
        .map_err(|e| ToolError::invalid("path", e.to_string()))?;
    let shown = path.clone();
    tokio::task::spawn_blocking(move || {
        let original = original_of(&file);
        let text = std::fs::read(&original).map_err(|e| {
            ToolError::failed(format!(
                "{shown} has no original beside it ({shown}.original): {e}"
            ))
        })?;
        write_file(&file, &text, true).map_err(ToolError::failed)?;
        std::fs::remove_file(&original)
            .map_err(|e| ToolError::failed(format!("cannot remove {shown}.original: {e}")))?;
        Ok(json!({"path": shown, "restored_bytes": text.len()}))
    })
    .await
    .map_err(|e| ToolError::failed(format!("decompression stopped: {e}")))?
}
