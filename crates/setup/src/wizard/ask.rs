//! Asking: the questions the interactive wizard puts, in order, through a [`Prompter`].

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use super::{available_modules, comma_list, home, is_overlay};
use crate::answers::{Answers, Discord, Ops, Provider, SecretText};
use crate::prompt::Prompter;

/// Asks for every answer the file did not give.
pub(super) fn fill(a: &mut Answers, p: &mut dyn Prompter, root: &Path) -> anyhow::Result<()> {
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
            if a.vault.write_key_file && a.vault.key_file.is_none() {
                let path = p.text(
                    "Key file path (empty = ~/.config/strata/vault-key, or <name>.vault-key \
                     beside it when that one holds another passphrase)",
                    Some(""),
                )?;
                let path = path.trim();
                if !path.is_empty() {
                    a.vault.key_file = Some(match (path.strip_prefix("~/"), home()) {
                        (Some(rest), Some(h)) => h.join(rest),
                        _ => PathBuf::from(path),
                    });
                }
            }
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
pub(super) const DEFAULT_DESCRIPTION: &str = "The team's general assistant.";

pub(super) fn default_model(kind: &str) -> Option<&'static str> {
    match kind {
        "openai" => Some("gpt-4o-mini"),
        "anthropic" => Some("claude-sonnet-4-5"),
        "gemini" => Some("gemini-2.5-flash"),
        _ => None,
    }
}
