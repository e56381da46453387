//! `strata config show`.

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
