//! Applying: the plan written in named steps through the journal, which undoes them all on
//! a failure or Ctrl-C.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::ask::{DEFAULT_DESCRIPTION, default_model};
use super::{Plan, current_user};
use crate::journal::{Journal, snapshot};
use crate::{remote, render, units};

pub(super) fn yaml_text(header: &str, v: &Value) -> anyhow::Result<String> {
    Ok(format!(
        "{}{}",
        render::yaml_header(header),
        yaml_serde::to_string(&render::ordered(v))?
    ))
}

/// Writes a YAML or JSON config file, merging into an existing one.
pub(super) fn write_config(
    j: &mut Journal,
    path: &Path,
    header: &str,
    new: Value,
) -> anyhow::Result<()> {
    let json = path.extension().is_some_and(|e| e == "json");
    let merged = match std::fs::read_to_string(path) {
        Ok(old) => {
            let parsed: anyhow::Result<Value> = if json {
                serde_json::from_str(&old).map_err(anyhow::Error::from)
            } else {
                yaml_serde::from_str::<Value>(&old).map_err(anyhow::Error::from)
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

pub(super) fn main_config(p: &Plan) -> Value {
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
        if p.key_ref {
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

pub(super) fn agents_config(p: &Plan) -> Value {
    let a = &p.a;
    let mut agent = json!({
        "name": a.agent.name.clone().unwrap_or_else(|| "Main".into()),
        "description": a.agent.description.as_deref().unwrap_or(DEFAULT_DESCRIPTION),
        "tools": p.agent_tools,
    });
    if let (Some(m), Some(pr)) = (
        &a.agent.model,
        a.provider.as_ref().filter(|p| p.kind != "none"),
    ) {
        let mut llm = json!({"provider": pr.kind, "model": m});
        if p.key_ref {
            llm["api_key"] = json!(format!("vault:{}-api-key", pr.kind));
        }
        if let Some(b) = &pr.base_url {
            llm["base_url"] = json!(b);
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

pub(super) fn check_interrupt(stop: &AtomicBool) -> anyhow::Result<()> {
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted (Ctrl-C)");
    }
    Ok(())
}

pub(super) fn step_done(step: &str, stop: &AtomicBool) -> anyhow::Result<()> {
    if std::env::var("STRATA_SETUP_FAIL_AFTER").ok().as_deref() == Some(step) {
        bail!("failure injected after step `{step}` (STRATA_SETUP_FAIL_AFTER)");
    }
    // Tests deliver a real SIGINT here, as a Ctrl-C between two steps would.
    if std::env::var("STRATA_SETUP_SIGINT_AFTER").ok().as_deref() == Some(step) {
        signal_hook::low_level::raise(signal_hook::consts::SIGINT)?;
    }
    check_interrupt(stop)
}

pub(super) fn apply(
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
    let cargo = render::overlay_cargo_toml(
        &p.name,
        &p.modules,
        &p.a.engine,
        root,
        p.a.discord.is_some(),
    );
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
    j.write(
        &o.join("build.rs"),
        render::overlay_build_rs().as_bytes(),
        0o644,
    )?;
    if let Some(target) = &p.target_dir {
        j.write(
            &o.join(".cargo/config.toml"),
            render::overlay_cargo_config(target).as_bytes(),
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
        // The privileged ops instance may use Claude Code's own tools (a shell, editing) —
        // still never on the data directory, the vault or key files.
        if let Some(pr) = p.a.provider.as_ref().filter(|p| p.kind == "claude-code") {
            let mut llm = json!({"provider": "claude-code", "builtins": "all"});
            if let Some(m) = p.a.agent.model.as_deref().or(pr.model.as_deref()) {
                llm["model"] = json!(m);
            }
            ops_agent["llm"] = llm;
        }
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
            binary: p.a.units.binary.clone().unwrap_or_else(|| {
                p.target_dir
                    .clone()
                    .unwrap_or_else(|| o.join("target"))
                    .join(format!("release/strata-{}", p.name))
            }),
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
    let upstream = remote::Engine::of_workspace(root);
    if let Some(up) = upstream {
        let origin = std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["remote", "get-url", "origin"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        match remote::neutralise_engine(root, &up, maintainer || p.a.maintainer)? {
            remote::Outcome::Neutralised(msg) => {
                j.report.push(format!("git: {msg}"));
                j.report.push(
                    "git: `cargo xtask install-hook` adds a pre-commit hook that refuses commits \
                     on main and any that fail check-core"
                        .to_owned(),
                );
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
