//! `strata tools`, `inspect`, `invoke`.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use strata_engine::Principal;
use strata_runtime::{Invocation, Registry, Status};

use super::context::*;
use crate::Exit;

/// Runs `f` with the MCP servers of `config/mcp.yaml` started (their tools in the registry,
/// as in `serve`), and stops them after; with none configured, just `f`.
fn with_mcp_servers(l: &Context, f: impl FnOnce() -> Exit) -> Exit {
    if l.config.config.mcp.servers.is_empty() {
        return f();
    }
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let servers = rt.block_on(crate::wiring::McpServers::start_alone(
        &l.config,
        l.registry.clone(),
    ));
    let exit = f();
    rt.block_on(servers.stop());
    exit
}

pub(crate) fn tools(l: &Context, json: bool) -> Exit {
    with_mcp_servers(l, || list(l, json))
}

fn list(l: &Context, json: bool) -> Exit {
    let list = l.registry.list();
    if json {
        let tools: Vec<_> = list.iter().map(|t| t.listing()).collect();
        return out(&serde_json::to_string_pretty(&json!({ "tools": tools })).unwrap_or_default());
    }
    let width = list.iter().map(|t| t.spec().name.len()).max().unwrap_or(4);
    let lwidth = list
        .iter()
        .map(|t| t.layer.to_string().len())
        .max()
        .unwrap_or(5);
    let mut text = String::new();
    for t in &list {
        let first = summary(&t.spec().description);
        text.push_str(&format!(
            "{:width$}  {:lwidth$}  {first}\n",
            t.spec().name,
            t.layer.to_string()
        ));
    }
    for s in l.registry.shadowed() {
        text.push_str(&format!(
            "\n`{}`: {} shadows {}",
            s.name, s.winner, s.hidden
        ));
    }
    out(text.trim_end())
}

/// The first sentence of a description, for one-line listings.
pub(crate) fn summary(description: &str) -> &str {
    let para = description.split("\n\n").next().unwrap_or("");
    match para.find(". ") {
        Some(i) => &para[..=i],
        None => para,
    }
}

pub(crate) fn inspect(l: &Context, name: &str, json: bool) -> Exit {
    with_mcp_servers(l, || describe(l, name, json))
}

fn describe(l: &Context, name: &str, json: bool) -> Exit {
    let Some(t) = l.registry.get(name) else {
        let names: Vec<String> = l
            .registry
            .list()
            .iter()
            .map(|t| t.spec().name.clone())
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let hint = strata_engine::config::suggest(name, &refs)
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_default();
        eprintln!("error: unknown tool `{name}`{hint} (see `strata tools`)");
        return Exit::Usage;
    };
    if json {
        return out(&serde_json::to_string_pretty(&t.listing()).unwrap_or_default());
    }
    let s = t.spec();
    let caps: Vec<String> = s
        .capabilities
        .iter()
        .map(|c| {
            serde_json::to_value(c)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        })
        .collect();
    let text = format!(
        "{}  ({} from {})\n\n{}\n\ncapabilities: {}\nside effects: {}\nhitl: {}\nweb-facing: {}\ntimeout: {}\n\ninput schema:\n{}",
        s.name,
        t.layer,
        t.origin,
        s.description,
        if caps.is_empty() {
            "none".to_owned()
        } else {
            caps.join(", ")
        },
        serde_json::to_value(s.side_effects)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        s.hitl,
        s.web_facing,
        s.timeout.map_or_else(
            || "default (tools.timeout_secs)".to_owned(),
            |d| format!("{}s", d.as_secs())
        ),
        serde_json::to_string_pretty(&s.input_schema).unwrap_or_default()
    );
    out(&text)
}

pub(crate) fn invoke(
    l: Context,
    tool: &str,
    raw_args: &str,
    request_id: Option<String>,
    json: bool,
) -> Exit {
    let args = match parse_args_json(raw_args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let cli = match CliInvoker::open(&l, &rt) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let mut call = Invocation::new(tool, args, Principal::Operator);
    call.request_id = request_id;
    let result = rt.block_on(async {
        let servers =
            crate::wiring::McpServers::start(&l.config, l.registry.clone(), cli.invoker.env())
                .await;
        let result = cli.invoker.invoke(call).await;
        servers.stop().await;
        result
    });
    cli.finish(&rt);
    let code = if result.ok() { Exit::Ok } else { Exit::Failure };
    if json {
        let printed = out(&serde_json::to_string_pretty(&result).unwrap_or_default());
        return if printed == Exit::Ok { code } else { printed };
    }
    if result.ok() {
        let text = match &result.value {
            Value::String(s) => s.clone(),
            v => serde_json::to_string_pretty(v).unwrap_or_default(),
        };
        out(&text)
    } else {
        eprintln!(
            "error: {} ({}): {}",
            result.status.as_str(),
            result.tool,
            result.error.as_deref().unwrap_or("no message")
        );
        if result.status == Status::UnknownTool {
            eprintln!("hint: `strata tools` lists the tools of this binary");
        }
        code
    }
}

pub(crate) fn layer_summary(reg: &Registry) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in reg.list() {
        *counts.entry(t.layer.to_string()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
