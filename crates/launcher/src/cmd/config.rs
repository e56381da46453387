//! `strata config show | schema`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::context::*;
use crate::Exit;

pub(crate) fn config_show(l: &Context, origin: bool, json: bool) -> Exit {
    if origin {
        let rows = l.config.origins();
        if json {
            let v: BTreeMap<String, Value> = rows
                .into_iter()
                .map(|(k, v, o)| (k, json!({"value": v, "origin": o})))
                .collect();
            return out(&serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        let text: Vec<String> = rows
            .iter()
            .map(|(k, v, o)| origin_line(k, v, o, COLUMNS))
            .collect();
        return out(&text.join("\n"));
    }
    let masked = l.config.masked();
    if json {
        return out(&serde_json::to_string_pretty(&masked).unwrap_or_default());
    }
    out(yaml_serde::to_string(&masked)
        .unwrap_or_default()
        .trim_end())
}

/// The width `config show --origin` keeps to.
const COLUMNS: usize = 100;

/// One `key = value   # origin` line in `columns` characters: values are aligned at a
/// column that leaves room for the origin, and a value too long for the line is cut with `…`
/// (`--json` has it whole).
fn origin_line(key: &str, value: &Value, origin: &str, columns: usize) -> String {
    const ALIGN: usize = 56;
    let tail = format!("   # {origin}");
    let room = columns.saturating_sub(tail.chars().count()).max(20);
    let mut kv = format!("{key} = {value}");
    if kv.chars().count() > room {
        kv = kv.chars().take(room.saturating_sub(1)).collect::<String>() + "…";
    }
    let pad = ALIGN.min(room).saturating_sub(kv.chars().count());
    format!("{kv}{}{tail}", " ".repeat(pad))
}

/// The JSON Schema (draft 2020-12) of a config file, from the types `serve` reads it into:
/// unknown keys are refused there as here (`additionalProperties: false`).
pub(crate) fn config_schema(file: crate::cli::SchemaFile) -> Exit {
    use crate::cli::SchemaFile;
    use strata_engine::config::{Config, McpConfig, TeamConfig};
    let (mut schema, title) = match file {
        SchemaFile::Config => (
            schemars::schema_for!(Config),
            "Strata configuration (config/config.yaml, config/agents.yaml)",
        ),
        SchemaFile::Team => (
            schemars::schema_for!(TeamConfig),
            "Strata team (config/team.json)",
        ),
        SchemaFile::Mcp => (
            schemars::schema_for!(McpConfig),
            "Strata MCP servers (config/mcp.yaml)",
        ),
    };
    schema.insert("title".into(), json!(title));
    out(&serde_json::to_string_pretty(&schema).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_lines_fit_the_width_and_keep_short_ones_whole() {
        let short = origin_line("server.port", &json!(8770), "core", 100);
        assert_eq!(
            short,
            format!("server.port = 8770{}   # core", " ".repeat(56 - 18))
        );
        let long = origin_line(
            "agents.main.instruction",
            &json!("word ".repeat(60)),
            "overlay:config/agents.yaml",
            100,
        );
        assert_eq!(long.chars().count(), 100, "{long}");
        assert!(long.contains("…   # overlay:config/agents.yaml"), "{long}");
    }
}
