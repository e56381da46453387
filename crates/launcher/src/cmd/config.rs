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
        let width = rows
            .iter()
            .map(|(k, v, _)| k.len() + v.to_string().len())
            .max()
            .unwrap_or(10);
        let text: Vec<String> = rows
            .iter()
            .map(|(k, v, o)| {
                let kv = format!("{k} = {v}");
                format!("{kv:width$}   # {o}", width = width + 3)
            })
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
