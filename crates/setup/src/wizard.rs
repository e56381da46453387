//! `cargo xtask setup`: collect answers (from a file, or by asking), check what can be
//! checked, then write the overlay in steps recorded in a [`Journal`], rolling everything
//! back on a failure or Ctrl-C.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use crate::answers::{Answers, Discord, Ops, Provider, SecretText, secret_value};
use crate::journal::{Journal, snapshot};
use crate::prompt::Prompter;
use crate::{remote, render, units, validate};

/// How the wizard runs.
pub struct Options {
    /// The answers file, if any (then nothing is asked).
    pub answers: Option<PathBuf>,
    /// `--maintainer`: leave the engine clone's `origin` alone.
    pub maintainer: bool,
    /// The engine checkout running the wizard.
    pub engine_root: PathBuf,
}

/// The steps, in order; `STRATA_SETUP_FAIL_AFTER=<step>` fails the run after one (tests of
/// the rollback).
pub const STEPS: &[&str] = &["dirs", "crate", "vault", "config", "ops", "units", "remote"];

/// Everything resolved, ready to write.
struct Plan {
    a: Answers,
    overlay: PathBuf,
    name: String,
    modules: Vec<String>,
    update: bool,
    port: u16,
    passphrase: Option<Zeroizing<String>>,
    key_file: Option<PathBuf>,
    secrets: Vec<(String, Zeroizing<String>)>,
    agent_id: String,
    notes: Vec<String>,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
}

fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The module crates available in the engine checkout (`modules/*/Cargo.toml`).
pub fn available_modules(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root.join("modules"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join("Cargo.toml").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Toolchain and optional tools: lines to show; an error when cargo itself is missing.
pub fn prerequisites() -> anyhow::Result<Vec<String>> {
    let version = |cmd: &str| {
        std::process::Command::new(cmd)
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned()
            })
    };
    let mut lines = Vec::new();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    match version(&cargo) {
        Some(v) => lines.push(format!("ok   {v}")),
        None => bail!("cargo is not on PATH: install the Rust toolchain (rustup.rs) first"),
    }
    for (cmd, why) in [
        ("git", "keeps the overlay under version control"),
        ("claude", "optional: the Claude Code CLI provider"),
        (
            "systemd-analyze",
            "optional: checks the rendered service units",
        ),
    ] {
        match version(cmd) {
            Some(v) => lines.push(format!("ok   {cmd}: {v}")),
            None => lines.push(format!("info {cmd} not found ({why})")),
        }
    }
    Ok(lines)
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

fn current_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "strata".into())
}

/// Whether `dir` holds an overlay made earlier (a crate with `config/`).
fn is_overlay(dir: &Path) -> bool {
    dir.join("Cargo.toml").is_file() && dir.join("config").is_dir()
}

/// Asks for every answer the file did not give.
fn fill(a: &mut Answers, p: &mut dyn Prompter, root: &Path) -> anyhow::Result<()> {
    if a.overlay_dir.is_none() {
        let d = p.text(
            "Where should the deployment's overlay crate go?",
            Some("../strata-deployment"),
        )?;
        a.overlay_dir = Some(PathBuf::from(d));
    }
    let dir = a.overlay_dir.clone().unwrap_or_default();
    if is_overlay(&dir) && a.update.is_none() {
        a.update = Some(p.confirm(
            &format!("{} already holds an overlay. Update it in place (nothing is overwritten without a backup in the journal)?", dir.display()),
            true,
        )?);
    }
    if a.name.is_none() {
        let guess = dir
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase().replace(['_', ' '], "-"))
            .map(|n| n.trim_start_matches("strata-").to_owned())
            .unwrap_or_else(|| "deployment".into());
        a.name = Some(p.text("Deployment name (letters, digits, -)", Some(&guess))?);
    }
    if a.modules.is_none() {
        let layer = p.select(
            "Layers",
            &[
                "two-layer: core + this overlay",
                "three-layer: core + module crates from modules/ + this overlay",
            ],
        )?;
        a.modules = Some(if layer == 1 {
            let avail = available_modules(root);
            let names: Vec<&str> = avail.iter().map(String::as_str).collect();
            p.multi_select("Modules to link", &names)?
                .into_iter()
                .filter_map(|i| avail.get(i).cloned())
                .collect()
        } else {
            Vec::new()
        });
    }
    if a.vault.passphrase.is_none() {
        let pass = p.secret("Vault passphrase (protects every secret; empty = no vault)")?;
        if !pass.is_empty() {
            let again = p.secret("The passphrase again")?;
            if *again != *pass {
                bail!("the two passphrases differ; nothing was written");
            }
            a.vault.passphrase = Some(SecretText::from(pass.as_str()));
            a.vault.write_key_file = p.confirm(
                "Write it to a key file (0600) so the service can start unattended?",
                true,
            )?;
        }
    }
    if a.provider.is_none() {
        let kinds = ["openai", "anthropic", "gemini", "claude-code", "none"];
        let k = p.select("LLM provider", &kinds)?;
        let kind = kinds.get(k).copied().unwrap_or("none").to_owned();
        let mut prov = Provider::default();
        prov.kind.clone_from(&kind);
        if kind != "none" {
            let model = p.text("Model", default_model(&kind))?;
            prov.model = (!model.is_empty()).then_some(model);
            if kind != "claude-code" {
                let key = p.secret(&format!("{kind} API key (empty = skip)"))?;
                prov.api_key = (!key.is_empty()).then(|| SecretText::from(key.as_str()));
                if kind == "openai" {
                    let base = p.text("Base URL (empty = api.openai.com)", Some(""))?;
                    prov.base_url = (!base.is_empty()).then_some(base);
                }
            }
            prov.validate = p.confirm("Check it now with one cheap call?", true)?;
        }
        a.provider = Some(prov);
    }
    if a.discord.is_none() && p.confirm("Connect a Discord bot?", false)? {
        let token = p.secret("Bot token")?;
        let guild = p.text("Guild (server) id", None)?;
        a.discord = Some(Discord {
            token: (!token.is_empty()).then(|| SecretText::from(token.as_str())),
            guild: (!guild.is_empty()).then_some(guild),
            api_proxy: None,
            plain_http: false,
            validate: p.confirm("Check the token now?", true)?,
        });
        if a.owner.discord_id.is_none() {
            let id = p.text("Your Discord user id (the owner)", None)?;
            a.owner.discord_id = (!id.is_empty()).then_some(id);
        }
    }
    if a.owner.name.is_none() {
        a.owner.name = Some(p.text("Owner's name (team.json)", Some("Owner"))?);
    }
    if a.agent.id.is_none() {
        a.agent.id = Some(p.text("First agent's id", Some("main"))?);
    }
    if a.agent.name.is_none() {
        a.agent.name = Some(p.text("Its display name", Some("Main"))?);
    }
    if a.agent.description.is_none() {
        a.agent.description = Some(p.text("What it is for", Some(DEFAULT_DESCRIPTION))?);
    }
    if a.agent.tier.is_none() {
        let tiers = ["coordinator", "privileged", "assistant"];
        let t = p.select("Its tier", &tiers)?;
        a.agent.tier = Some(tiers.get(t).copied().unwrap_or("coordinator").to_owned());
    }
    if a.discord.is_some() && a.agent.channels.is_empty() {
        let ch = p.text(
            "Discord channel ids it answers in (comma-separated; empty = every channel)",
            Some(""),
        )?;
        a.agent.channels = comma_list(&ch);
    }
    if a.discord.is_some() && a.approvals.channel.is_none() {
        let ch = p.text("Channel id for approval requests (empty = none)", Some(""))?;
        a.approvals.channel = (!ch.is_empty()).then_some(ch);
    }
    if a.approvals.approvers.is_empty() {
        let ap = p.text(
            "Approvers (person ids, comma-separated; empty = owners)",
            Some(""),
        )?;
        a.approvals.approvers = comma_list(&ap);
    }
    let pm = p.text(
        "Rate limit: calls per minute per person and tool",
        Some(&a.rate_limits.per_minute.to_string()),
    )?;
    a.rate_limits.per_minute = pm.trim().parse().context("a whole number, please")?;
    let ph = p.text(
        "Rate limit: calls per hour",
        Some(&a.rate_limits.per_hour.to_string()),
    )?;
    a.rate_limits.per_hour = ph.trim().parse().context("a whole number, please")?;
    if a.ops.is_none()
        && p.confirm(
            "Add a second, unsandboxed \"ops\" instance (--profile ops)?",
            false,
        )?
    {
        let t = if a.discord.is_some() {
            let t = p.secret("Its own Discord bot token (empty = none)")?;
            (!t.is_empty()).then(|| SecretText::from(t.as_str()))
        } else {
            None
        };
        a.ops = Some(Ops {
            discord_token: t,
            port: None,
        });
    }
    a.units.enabled = p.confirm("Render systemd units into systemd/?", a.units.enabled)?;
    Ok(())
}

/// The first agent's description when none is given.
const DEFAULT_DESCRIPTION: &str = "The team's general assistant.";

fn default_model(kind: &str) -> Option<&'static str> {
    match kind {
        "openai" => Some("gpt-4o-mini"),
        "anthropic" => Some("claude-sonnet-4-5"),
        "gemini" => Some("gemini-2.5-flash"),
        _ => None,
    }
}

/// Turns answers into a plan: names checked, secrets read, credentials validated.
fn resolve(mut a: Answers, root: &Path, interactive: bool) -> anyhow::Result<Plan> {
    let mut notes = Vec::new();
    let Some(dir) = a.overlay_dir.clone() else {
        bail!("`overlay_dir` is missing: where should the overlay go?");
    };
    let overlay = if dir.is_absolute() {
        dir
    } else {
        std::env::current_dir()?.join(dir)
    };
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
        if p.validate && (key.is_some() || p.kind == "claude-code") {
            let model = p.model.as_deref().or(default_model(&p.kind));
            let k = key.as_deref().map(String::as_str);
            match validate::provider(&p.kind, model, k, p.base_url.as_deref()) {
                Ok(seen) => notes.push(format!("ok   provider: {seen}")),
                Err(e) => {
                    bail!("provider check failed: {e} (set `provider.validate: false` to skip it)")
                }
            }
        }
        if let Some(k) = key {
            secrets.push((format!("{}-api-key", p.kind), k));
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
            Some(k) => k.clone(),
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
    a.name = Some(name.clone());
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
        notes,
    })
}

fn yaml_text(header: &str, v: &Value) -> anyhow::Result<String> {
    Ok(format!(
        "{}{}",
        render::yaml_header(header),
        serde_yaml::to_string(&render::ordered(v))?
    ))
}

/// Writes a YAML or JSON config file, merging into an existing one.
fn write_config(j: &mut Journal, path: &Path, header: &str, new: Value) -> anyhow::Result<()> {
    let json = path.extension().is_some_and(|e| e == "json");
    let merged = match std::fs::read_to_string(path) {
        Ok(old) => {
            let parsed: anyhow::Result<Value> = if json {
                serde_json::from_str(&old).map_err(anyhow::Error::from)
            } else {
                serde_yaml::from_str::<Value>(&old).map_err(anyhow::Error::from)
            };
            let mut v = parsed.with_context(|| {
                format!(
                    "{} is not valid; fix it or move it away, then re-run",
                    path.display()
                )
            })?;
            if v.is_null() {
                v = json!({});
            }
            let before = v.clone();
            render::merge(&mut v, new);
            if v == before {
                j.unchanged(path);
                return Ok(());
            }
            v
        }
        Err(_) => new,
    };
    let text = if json {
        format!(
            "{}\n",
            serde_json::to_string_pretty(&render::ordered(&merged))?
        )
    } else {
        yaml_text(header, &merged)?
    };
    j.write(path, text.as_bytes(), 0o644)
}

fn main_config(p: &Plan) -> Value {
    let a = &p.a;
    let mut c = json!({
        "server": {"bind": "127.0.0.1", "port": p.port},
        "tools": {"roots": ["agents", "tmp", "knowledgebase"]},
        "security": {
            "rate_limits": {"mode": "enforce", "defaults": {"per_minute": a.rate_limits.per_minute, "per_hour": a.rate_limits.per_hour}},
            "hitl": {"approvers": a.approvals.approvers},
        },
    });
    if let Some(ch) = &a.approvals.channel {
        c["security"]["hitl"]["channel"] = json!(ch);
        c["security"]["alert_channel"] = json!(ch);
    }
    if let Some(pr) = a.provider.as_ref().filter(|p| p.kind != "none") {
        let mut llm = json!({"provider": pr.kind});
        if let Some(m) = pr.model.as_deref().or(default_model(&pr.kind)) {
            llm["model"] = json!(m);
        }
        if pr.kind != "claude-code" {
            llm["api_key"] = json!(format!("vault:{}-api-key", pr.kind));
        }
        if let Some(b) = &pr.base_url {
            llm["base_url"] = json!(b);
        }
        c["defaults"] = json!({"llm": llm});
    }
    if let Some(d) = &a.discord {
        let mut discord = json!({"accounts": {"main": {"token": "vault:discord-main"}}});
        if let Some(proxy) = &d.api_proxy {
            discord["api_proxy"] = json!(proxy);
            discord["plain_http"] = json!(d.plain_http);
        }
        c["connectors"] = json!({ "discord": discord });
    }
    c
}

fn agents_config(p: &Plan) -> Value {
    let a = &p.a;
    let mut agent = json!({
        "name": a.agent.name.clone().unwrap_or_else(|| "Main".into()),
        "description": a.agent.description.as_deref().unwrap_or(DEFAULT_DESCRIPTION),
        "tools": "all",
    });
    if let (Some(m), Some(pr)) = (
        &a.agent.model,
        a.provider.as_ref().filter(|p| p.kind != "none"),
    ) {
        let mut llm = json!({"provider": pr.kind, "model": m});
        if pr.kind != "claude-code" {
            llm["api_key"] = json!(format!("vault:{}-api-key", pr.kind));
        }
        agent["llm"] = llm;
    }
    if let Some(d) = &a.discord {
        let mut r = json!({"account": "main", "channels": a.agent.channels});
        if let Some(g) = &d.guild {
            r["guilds"] = json!([g]);
        }
        agent["routing"] = json!({"discord": r});
    }
    json!({"agents": {p.agent_id.clone(): agent}})
}

fn check_interrupt(stop: &AtomicBool) -> anyhow::Result<()> {
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted (Ctrl-C)");
    }
    Ok(())
}

fn step_done(step: &str, stop: &AtomicBool) -> anyhow::Result<()> {
    if std::env::var("STRATA_SETUP_FAIL_AFTER").ok().as_deref() == Some(step) {
        bail!("failure injected after step `{step}` (STRATA_SETUP_FAIL_AFTER)");
    }
    // Tests deliver a real SIGINT here, as a Ctrl-C between two steps would.
    if std::env::var("STRATA_SETUP_SIGINT_AFTER").ok().as_deref() == Some(step) {
        signal_hook::low_level::raise(signal_hook::consts::SIGINT)?;
    }
    check_interrupt(stop)
}

fn apply(
    p: &Plan,
    root: &Path,
    maintainer: bool,
    j: &mut Journal,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let o = &p.overlay;
    // dirs
    for d in ["config", "agents", "skills", "knowledgebase", "src/tools"] {
        j.mkdir(&o.join(d))?;
    }
    // State and scratch space: this user's only (doctor fails on a data dir others can read).
    for d in ["data", "tmp"] {
        j.mkdir_private(&o.join(d))?;
    }
    step_done("dirs", stop)?;
    // crate
    let cargo = render::overlay_cargo_toml(&p.name, &p.modules, &p.a.engine, root);
    let cargo = match std::fs::read_to_string(o.join("Cargo.toml")) {
        Ok(old) => render::keep_own_dependencies(&cargo, &old),
        Err(_) => cargo,
    };
    j.write(&o.join("Cargo.toml"), cargo.as_bytes(), 0o644)?;
    j.write(
        &o.join("src/main.rs"),
        render::overlay_main_rs(&p.name, &p.modules).as_bytes(),
        0o644,
    )?;
    if !o.join("src/tools/mod.rs").exists() {
        j.write(
            &o.join("src/tools/mod.rs"),
            render::overlay_tools_rs(&p.name).as_bytes(),
            0o644,
        )?;
    }
    j.write(&o.join(".gitignore"), render::gitignore().as_bytes(), 0o644)?;
    // Start from the engine's lock file: the same dependency versions its CI tested (cargo
    // drops what this crate does not use on the first build).
    if !o.join("Cargo.lock").exists()
        && let Ok(lock) = std::fs::read(root.join("Cargo.lock"))
    {
        j.write(&o.join("Cargo.lock"), &lock, 0o644)?;
    }
    step_done("crate", stop)?;
    // vault
    if let Some(pass) = &p.passphrase {
        let cfg = o.join("config");
        let files = ["secrets.enc", "secrets.salt", "secrets.kdf", "secrets.lock"];
        let before: Vec<_> = files
            .iter()
            .map(|f| (cfg.join(f), snapshot(&cfg.join(f))))
            .collect();
        let result = (|| -> anyhow::Result<()> {
            let mut v = if strata_vault::FileVault::exists(&cfg) {
                strata_vault::FileVault::open(&cfg, pass)
                    .context("the overlay's vault does not open with this passphrase")?
            } else {
                let iterations = std::env::var("STRATA_SETUP_VAULT_ITERATIONS")
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(strata_vault::NEW_ITERATIONS);
                strata_vault::FileVault::create_with_iterations(&cfg, pass, iterations)?
            };
            for (k, val) in &p.secrets {
                v.set(k, val)?;
            }
            Ok(())
        })();
        for (path, snap) in before {
            if snapshot(&path) != snap {
                j.record(&path, snap);
            }
        }
        result?;
        j.report.push(format!(
            "vault config/secrets.enc: {} key(s) stored{}",
            p.secrets.len(),
            if p.secrets.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    p.secrets
                        .iter()
                        .map(|(k, _)| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ));
        if let Some(kf) = &p.key_file {
            j.write(kf, format!("{}\n", pass.as_str()).as_bytes(), 0o600)?;
        }
    }
    step_done("vault", stop)?;
    // config
    let cfg = o.join("config");
    write_config(
        j,
        &cfg.join("config.yaml"),
        &format!("The `{}` deployment's configuration.", p.name),
        main_config(p),
    )?;
    write_config(
        j,
        &cfg.join("agents.yaml"),
        "Agents of this deployment, by id; each has agents/<id>/AGENTS.md.",
        agents_config(p),
    )?;
    let tier =
        p.a.agent
            .tier
            .clone()
            .unwrap_or_else(|| "coordinator".into());
    let mut agent_tiers = vec![(p.agent_id.as_str(), tier.as_str())];
    if p.a.ops.is_some() {
        agent_tiers.push(("ops", "privileged"));
    }
    let owner_id = p.a.owner.id.clone().unwrap_or_else(|| "owner".into());
    write_config(
        j,
        &cfg.join("team.json"),
        "",
        render::team_json(
            &owner_id,
            p.a.owner.name.as_deref().unwrap_or("Owner"),
            p.a.owner.discord_id.as_deref(),
            &agent_tiers,
        ),
    )?;
    let md = o.join("agents").join(&p.agent_id).join("AGENTS.md");
    if !md.exists() {
        let body = render::agents_md(
            &p.agent_id,
            p.a.agent.name.as_deref().unwrap_or("Main"),
            p.a.agent
                .description
                .as_deref()
                .unwrap_or(DEFAULT_DESCRIPTION),
            &p.name,
        );
        j.write(&md, body.as_bytes(), 0o644)?;
    }
    for keep in ["skills/.gitkeep", "knowledgebase/.gitkeep", "tmp/.gitkeep"] {
        if !o.join(keep).exists() {
            j.write(&o.join(keep), b"", 0o644)?;
        }
    }
    step_done("config", stop)?;
    // ops
    if let Some(ops) = &p.a.ops {
        let mut c = json!({"server": {"port": ops.port.unwrap_or(p.port + 1)}});
        let mut accounts = serde_json::Map::new();
        if p.a.discord.is_some() {
            accounts.insert("main".into(), json!({"enabled": false}));
        }
        if ops.discord_token.is_some() {
            accounts.insert("ops".into(), json!({"token": "vault:discord-ops"}));
        }
        if !accounts.is_empty() {
            c["connectors"] = json!({"discord": {"accounts": accounts}});
        }
        write_config(
            j,
            &cfg.join("config.ops.yaml"),
            "Profile `ops` (strata serve --profile ops): over config.yaml.",
            c,
        )?;
        let mut ops_agent = json!({
            "name": "Ops",
            "description": "Looks after this host and the deployment's services.",
            "tools": "all",
        });
        if ops.discord_token.is_some() {
            ops_agent["routing"] =
                json!({"discord": {"account": "ops", "channels": [], "mentions": true}});
        }
        write_config(
            j,
            &cfg.join("agents.ops.yaml"),
            "Profile `ops`: the ops agent runs here, the main agent does not.",
            json!({"agents": {p.agent_id.clone(): {"enabled": false}, "ops": ops_agent}}),
        )?;
        let md = o.join("agents/ops/AGENTS.md");
        if !md.exists() {
            let body = render::agents_md(
                "ops",
                "Ops",
                "You look after this host and the deployment's services: check before you change, and say what you changed.",
                &p.name,
            );
            j.write(&md, body.as_bytes(), 0o644)?;
        }
    }
    step_done("ops", stop)?;
    // units
    if p.a.units.enabled {
        let user = p.a.units.user.clone().unwrap_or_else(current_user);
        let spec = units::UnitSpec {
            name: p.name.clone(),
            overlay: o.clone(),
            binary: p
                .a
                .units
                .binary
                .clone()
                .unwrap_or_else(|| o.join(format!("target/release/strata-{}", p.name))),
            group: p.a.units.group.clone().unwrap_or_else(|| user.clone()),
            user,
            key_file: p.key_file.clone(),
            ops: p.a.ops.is_some(),
        };
        for (file, text) in units::render(&spec) {
            j.write(&o.join("systemd").join(file), text.as_bytes(), 0o644)?;
        }
    }
    step_done("units", stop)?;
    // remote
    let upstream = engine_repository(root);
    if let Some(up) = upstream {
        let origin = std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["remote", "get-url", "origin"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        match remote::neutralise(root, &up, maintainer || p.a.maintainer)? {
            remote::Outcome::Neutralised(msg) => {
                j.report.push(format!("git: {msg}"));
                let root = root.to_path_buf();
                let origin = origin.unwrap_or_default();
                j.undo("restore the engine clone's origin", move || {
                    remote::restore(&root, &origin)
                });
            }
            remote::Outcome::Maintainer => j
                .report
                .push("git: maintainer: the engine clone's origin is left alone".into()),
            _ => {}
        }
    }
    step_done("remote", stop)?;
    Ok(())
}

/// `repository` of the engine workspace's `Cargo.toml` (the upstream URL).
pub fn engine_repository(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("repository = "))
        .map(|v| v.trim_matches('"').to_owned())
}

/// Runs the wizard; the summary lines on success. On failure everything written is rolled
/// back and the error says what happened.
pub fn run(opts: &Options, prompter: Option<&mut dyn Prompter>) -> anyhow::Result<Vec<String>> {
    let answers: Answers = match &opts.answers {
        Some(f) => {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            serde_yaml::from_str(&text)
                .with_context(|| format!("{} is not a valid answers file", f.display()))?
        }
        None => Answers::default(),
    };
    run_with(opts, answers, prompter)
}

/// [`run`] with the answers given.
pub fn run_with(
    opts: &Options,
    mut answers: Answers,
    prompter: Option<&mut dyn Prompter>,
) -> anyhow::Result<Vec<String>> {
    let mut lines = prerequisites()?;
    let interactive = prompter.is_some();
    if let Some(p) = prompter {
        // On a terminal the checks come first, before the questions.
        for l in lines.drain(..) {
            eprintln!("{l}");
        }
        fill(&mut answers, p, &opts.engine_root)?;
    }
    let plan = resolve(answers, &opts.engine_root, interactive)?;
    lines.extend(plan.notes.iter().cloned());
    let stop = Arc::new(AtomicBool::new(false));
    let sig = signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
        .context("installing the Ctrl-C handler")?;
    let mut journal = Journal::new(&plan.overlay);
    let result = apply(
        &plan,
        &opts.engine_root,
        opts.maintainer,
        &mut journal,
        &stop,
    );
    signal_hook::low_level::unregister(sig);
    match result {
        Ok(()) => {
            lines.push(format!(
                "{} overlay `{}` at {}",
                if plan.update { "updated" } else { "created" },
                plan.name,
                plan.overlay.display()
            ));
            lines.extend(journal.report.iter().map(|l| format!("  {l}")));
            if let Some(k) = &plan.key_file {
                lines.push(format!(
                    "vault key file: {} (the units set STRATA_VAULT_KEY_FILE to it; by hand: export STRATA_VAULT_KEY_FILE={})",
                    k.display(),
                    k.display()
                ));
            }
            lines.push(format!(
                "next: cd {} && cargo run -- doctor && cargo run -- serve   (docs/DEPLOY.md)",
                plan.overlay.display()
            ));
            Ok(lines)
        }
        Err(e) => {
            let left = journal.rollback();
            if left.is_empty() {
                bail!("{e:#}\nsetup rolled back: nothing it wrote remains");
            }
            bail!(
                "{e:#}\nsetup rolled back, but these could not be undone:\n  {}",
                left.join("\n  ")
            )
        }
    }
}

/// The non-empty, trimmed items of a comma-separated answer.
fn comma_list(answer: &str) -> Vec<String> {
    answer
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Answers in order, each checked against the question it expects (a substring).
    struct Scripted(VecDeque<(&'static str, &'static str)>);

    impl Scripted {
        fn next(&mut self, q: &str) -> &'static str {
            let (want, answer) = self
                .0
                .pop_front()
                .unwrap_or_else(|| panic!("unexpected question: {q}"));
            assert!(q.contains(want), "asked `{q}`, expected `{want}`");
            answer
        }
    }

    impl Prompter for Scripted {
        fn text(&mut self, q: &str, default: Option<&str>) -> anyhow::Result<String> {
            let a = self.next(q);
            Ok(if a.is_empty() {
                default.unwrap_or("").to_owned()
            } else {
                a.to_owned()
            })
        }
        fn confirm(&mut self, q: &str, _default: bool) -> anyhow::Result<bool> {
            Ok(self.next(q) == "y")
        }
        fn select(&mut self, q: &str, options: &[&str]) -> anyhow::Result<usize> {
            let a = self.next(q);
            options
                .iter()
                .position(|o| o.starts_with(a))
                .ok_or_else(|| anyhow::anyhow!("no option {a}"))
        }
        fn multi_select(&mut self, q: &str, options: &[&str]) -> anyhow::Result<Vec<usize>> {
            let a = self.next(q);
            Ok(a.split(',')
                .filter_map(|x| options.iter().position(|o| *o == x))
                .collect())
        }
        fn secret(&mut self, q: &str) -> anyhow::Result<Zeroizing<String>> {
            Ok(Zeroizing::new(self.next(q).to_owned()))
        }
    }

    #[test]
    fn the_interactive_wizard_asks_in_order_and_writes_what_was_typed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("team-bot");
        let dir_s: &'static str = Box::leak(dir.display().to_string().into_boxed_str());
        let key_file = tmp.path().join("key");
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .map(PathBuf::from)
            .expect("root");
        let mut p = Scripted(VecDeque::from([
            ("Where should", dir_s),
            ("Deployment name", ""),
            ("Layers", "three-layer"),
            ("Modules to link", "ops"),
            ("Vault passphrase", "typed passphrase"),
            ("passphrase again", "typed passphrase"),
            ("key file", "y"),
            ("LLM provider", "anthropic"),
            ("Model", ""),
            ("anthropic API key", "typed-anthropic-key"),
            ("Check it now", "n"),
            ("Discord bot", "n"),
            ("Owner's name", "Example Owner"),
            ("First agent's id", "helper"),
            ("display name", "Helper"),
            ("What it is for", ""),
            ("tier", "assistant"),
            ("Approvers", ""),
            ("per minute", "20"),
            ("per hour", ""),
            ("ops", "n"),
            ("systemd units", "n"),
        ]));
        let mut a = Answers::default();
        a.vault.key_file = Some(key_file.clone());
        a.maintainer = true;
        let opts = Options {
            answers: None,
            maintainer: true,
            engine_root: root,
        };
        let lines = run_with(&opts, a, Some(&mut p)).expect("wizard");
        assert!(p.0.is_empty(), "questions not asked: {:?}", p.0);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("created overlay `team-bot`")),
            "{lines:?}"
        );
        let cfg = std::fs::read_to_string(dir.join("config/config.yaml")).expect("config");
        assert!(
            cfg.contains("provider: anthropic") && cfg.contains("model: claude-sonnet-4-5"),
            "{cfg}"
        );
        assert!(
            cfg.contains("per_minute: 20") && cfg.contains("per_hour: 1000"),
            "{cfg}"
        );
        assert!(!cfg.contains("typed-anthropic-key"));
        let v =
            strata_vault::FileVault::open(&dir.join("config"), "typed passphrase").expect("vault");
        use strata_engine::secret::Vault as _;
        assert_eq!(
            v.get("anthropic-api-key")
                .map(|s| s.expose().to_owned())
                .as_deref(),
            Some("typed-anthropic-key")
        );
        assert!(!dir.join("systemd").exists());
        let team = std::fs::read_to_string(dir.join("config/team.json")).expect("team");
        assert!(team.contains("\"agent_tier\": \"assistant\""), "{team}");
    }
}
