//! Planning: answers checked and turned into a [`Plan`] — names, `env:` secrets read, the
//! provider key and Discord token tried with one cheap call each — before anything is written.

use std::path::Path;

use anyhow::{Context as _, bail};
use zeroize::Zeroizing;

use super::ask::default_model;
use super::{Plan, available_modules, home, is_overlay, normalize, valid_id, valid_name};
use crate::answers::{Answers, ToolChoice, secret_value};
use crate::validate;

/// Turns answers into a plan: names checked, secrets read, credentials validated.
pub(super) fn resolve(mut a: Answers, root: &Path, interactive: bool) -> anyhow::Result<Plan> {
    let mut notes = Vec::new();
    let Some(dir) = a.overlay_dir.clone() else {
        bail!("`overlay_dir` is missing: where should the overlay go?");
    };
    let overlay = normalize(&if dir.is_absolute() {
        dir
    } else {
        std::env::current_dir()?.join(dir)
    });
    let name = a.name.clone().unwrap_or_else(|| {
        overlay
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase())
            .unwrap_or_default()
    });
    if !valid_name(&name) {
        bail!("deployment name `{name}`: use lower-case letters, digits and `-`");
    }
    let update = if overlay.exists() && std::fs::read_dir(&overlay)?.next().is_some() {
        if !is_overlay(&overlay) {
            bail!(
                "{} exists, is not empty and is not a Strata overlay: choose another directory",
                overlay.display()
            );
        }
        if a.update == Some(false) {
            bail!(
                "{} already holds an overlay and `update` is false: nothing was changed",
                overlay.display()
            );
        }
        true
    } else {
        false
    };
    let avail = available_modules(root);
    let modules = a.modules.clone().unwrap_or_default();
    for m in &modules {
        if !avail.contains(m) && a.engine.path.is_none() && a.engine.git.is_none() {
            bail!(
                "no module `{m}` in {}; available: {}",
                root.join("modules").display(),
                avail.join(", ")
            );
        }
    }
    let port = a.port.unwrap_or(8770);
    let agent_id = a.agent.id.clone().unwrap_or_else(|| "main".into());
    if !valid_id(&agent_id) {
        bail!("agent id `{agent_id}`: use letters, digits, `-` and `_`");
    }
    let tier = a.agent.tier.clone().unwrap_or_else(|| "coordinator".into());
    if !["privileged", "coordinator", "assistant"].contains(&tier.as_str()) {
        bail!("agent tier `{tier}`: privileged, coordinator or assistant");
    }
    // Secrets: every `env:` named in the answers must be set before anything is checked.
    for (field, v) in [
        (
            "provider.api_key",
            a.provider.as_ref().and_then(|p| p.api_key.as_ref()),
        ),
        (
            "discord.token",
            a.discord.as_ref().and_then(|d| d.token.as_ref()),
        ),
        (
            "ops.discord_token",
            a.ops.as_ref().and_then(|o| o.discord_token.as_ref()),
        ),
        ("vault.passphrase", a.vault.passphrase.as_ref()),
    ] {
        if let Some(v) = v {
            secret_value(field, v.as_str())?;
        }
    }
    // Then read, checked, stored in the vault later, referenced as vault:<key> in config.
    let mut secrets = Vec::new();
    let mut literal = false;
    let mut key_ref = false;
    if let Some(p) = a.provider.as_ref().filter(|p| p.kind != "none") {
        if !["openai", "anthropic", "gemini", "claude-code"].contains(&p.kind.as_str()) {
            bail!(
                "provider `{}`: openai, anthropic, gemini, claude-code or none",
                p.kind
            );
        }
        let key = match &p.api_key {
            Some(k) => {
                literal |= !k.as_str().starts_with("env:") && !interactive;
                Some(secret_value("provider.api_key", k.as_str())?)
            }
            None => None,
        };
        // A server of one's own (a base URL) may need no key; a vendor's API always does.
        let keyless = key.is_none() && p.base_url.is_some();
        let checkable = key.is_some() || keyless || p.kind == "claude-code";
        if p.validate && checkable {
            let model = p.model.as_deref().or(default_model(&p.kind));
            let k = key.as_deref().map(String::as_str);
            match validate::provider(&p.kind, model, k, p.base_url.as_deref()) {
                Ok(seen) => notes.push(format!("ok   provider: {seen}")),
                Err(e) => {
                    bail!("provider check failed: {e} (set `provider.validate: false` to skip it)")
                }
            }
        } else if p.validate {
            notes.push(format!(
                "info provider not checked: no {} key to check (nothing was sent)",
                p.kind
            ));
        }
        key_ref = p.kind != "claude-code" && !keyless;
        if let Some(k) = key {
            secrets.push((format!("{}-api-key", p.kind), k));
        } else if keyless {
            notes.push(format!(
                "info no {} key: {} is used without one (add `api_key: vault:{}-api-key` to \
                 defaults.llm if it wants one)",
                p.kind,
                p.base_url.as_deref().unwrap_or_default(),
                p.kind
            ));
        } else if p.kind != "claude-code" {
            notes.push(format!(
                "info no {} key given: `strata vault set {}-api-key --from-stdin` later",
                p.kind, p.kind
            ));
        }
    }
    if let Some(d) = &a.discord {
        match &d.token {
            Some(t) => {
                literal |= !t.as_str().starts_with("env:") && !interactive;
                let token = secret_value("discord.token", t.as_str())?;
                if d.validate {
                    match validate::discord(&token, d.api_proxy.as_deref(), d.plain_http) {
                        Ok(seen) => notes.push(format!("ok   Discord: {seen}")),
                        Err(e) => bail!(
                            "Discord check failed: {e} (set `discord.validate: false` to skip it)"
                        ),
                    }
                }
                secrets.push(("discord-main".into(), token));
            }
            None => notes.push(
                "info no Discord token given: `strata vault set discord-main --from-stdin` later"
                    .into(),
            ),
        }
    }
    if let Some(t) = a.ops.as_ref().and_then(|o| o.discord_token.clone()) {
        literal |= !t.as_str().starts_with("env:") && !interactive;
        let token = secret_value("ops.discord_token", t.as_str())?;
        if let Some(d) = a.discord.as_ref().filter(|d| d.validate) {
            match validate::discord(&token, d.api_proxy.as_deref(), d.plain_http) {
                Ok(seen) => notes.push(format!("ok   Discord (ops): {seen}")),
                Err(e) => bail!("Discord check of the ops token failed: {e}"),
            }
        }
        secrets.push(("discord-ops".into(), token));
    }
    if literal {
        notes.push("warn the answers file holds secrets in clear: they are in the vault now; delete the file (or use env:VAR in it)".into());
    }
    let passphrase = match &a.vault.passphrase {
        Some(p) => Some(secret_value("vault.passphrase", p.as_str())?),
        None => None,
    };
    if passphrase.as_ref().is_some_and(|p| p.len() < 8) {
        bail!("the vault passphrase is shorter than 8 characters");
    }
    if passphrase.is_none() && !secrets.is_empty() {
        bail!(
            "secrets were given but no `vault.passphrase`: they are only ever stored in the vault"
        );
    }
    let key_file = if passphrase.is_some() && a.vault.write_key_file {
        Some(match &a.vault.key_file {
            Some(k) if k.is_relative() => normalize(&std::env::current_dir()?.join(k)),
            Some(k) => normalize(k),
            None => {
                let dir = home()
                    .context("HOME is not set: give vault.key_file")?
                    .join(".config/strata");
                // The default key file unless it holds another passphrase (another
                // deployment's): then one of this deployment's own beside it.
                let shared = dir.join("vault-key");
                let same = std::fs::read_to_string(&shared).is_ok_and(|t| {
                    let t = Zeroizing::new(t);
                    passphrase
                        .as_ref()
                        .is_some_and(|p| t.trim_end_matches(['\n', '\r']) == p.as_str())
                });
                if shared.exists() && !same {
                    dir.join(format!("{name}.vault-key"))
                } else {
                    shared
                }
            }
        })
    } else {
        None
    };
    for ap in &a.approvals.approvers {
        if Some(ap) != a.owner.id.as_ref() && ap != "owner" {
            notes.push(format!("info approver `{ap}` is not in team.json yet: add them (team_add or edit config/team.json)"));
        }
    }
    let agent_tools = match &a.agent.tools {
        Some(ToolChoice::Word(w)) if w == "all" => serde_json::json!("all"),
        Some(ToolChoice::Word(w)) => {
            bail!("agent.tools `{w}`: a list of tool names (`prefix*` allowed) or `all`")
        }
        Some(ToolChoice::List(l)) => serde_json::json!(l),
        None => serde_json::json!(fitted_tools(&name, &modules, a.discord.is_some(), root)),
    };
    a.name = Some(name.clone());
    let target_dir = crate::render::shared_target(&a.engine, root);
    Ok(Plan {
        a,
        overlay,
        name,
        modules,
        update,
        port,
        passphrase,
        key_file,
        secrets,
        agent_id,
        key_ref,
        agent_tools,
        target_dir,
        notes,
    })
}

/// The core tools a first agent is given (the example agent's list): the clock, files and
/// notes in its roots, memory, the web, reminders, and what it may call.
const CORE_TOOLS: &[&str] = &[
    "current_time",
    "list_capabilities",
    "list_files",
    "read_file",
    "write_file",
    "search_notes",
    "memory_search",
    "memory_store",
    "read_url",
    "web_search",
    "schedule_*",
];

/// A first agent's tools fitted to the answers: [`CORE_TOOLS`], the overlay's own sample tool,
/// each linked module's tools (read from its source: the functions under `#[tool]`), and the
/// channel tools when a Discord bot answers. Not `all`: every tool's schema goes out with each
/// request, and a small model's context cannot hold fifty.
pub(super) fn fitted_tools(
    name: &str,
    modules: &[String],
    discord: bool,
    root: &Path,
) -> Vec<String> {
    let mut out: Vec<String> = CORE_TOOLS.iter().map(|s| (*s).to_owned()).collect();
    out.push(format!("{}_about", name.replace('-', "_")));
    for m in modules {
        for t in module_tools(&root.join("modules").join(m).join("src")) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    if discord {
        out.extend(["read_channel_history", "search_channel_history"].map(str::to_owned));
    }
    out
}

/// The tool names declared in a module's sources: each `#[tool…]` attribute's
/// `name = "…"`, or else the name of the `fn` that follows it.
fn module_tools(src: &Path) -> Vec<String> {
    let mut files = vec![src.to_path_buf()];
    let mut out = Vec::new();
    while let Some(p) = files.pop() {
        if p.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
                entries.sort();
                entries.reverse();
                files.extend(entries);
            }
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let mut pending: Option<Option<String>> = None;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[tool(") || line == "#[tool]" {
                let named = line
                    .split_once("name = \"")
                    .and_then(|(_, r)| r.split_once('"').map(|(n, _)| n.to_owned()));
                pending = Some(named);
            } else if let Some(named) = pending.take() {
                if let Some(f) = line
                    .split_once("fn ")
                    .map(|(_, r)| r.split(['(', '<']).next().unwrap_or("").trim().to_owned())
                {
                    out.push(named.unwrap_or(f));
                } else if line.starts_with('#') || line.starts_with("//") {
                    pending = Some(named);
                }
            }
        }
    }
    out
}
