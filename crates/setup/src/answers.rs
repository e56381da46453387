//! The wizard's answers: what `--answers answers.yaml` holds, and what the interactive run
//! fills in by asking. Every field has the meaning of one wizard step; secrets are given as
//! `env:VAR` (or, discouraged, literally: the wizard then warns to delete the file).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// All answers. Unknown keys are an error (a typo must not silently become a default).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Answers {
    /// Where the overlay goes (created when missing).
    pub overlay_dir: Option<PathBuf>,
    /// The deployment's name: letters, digits and `-` (crate `strata-<name>`, unit
    /// `strata-<name>.service`).
    pub name: Option<String>,
    /// Module crates from `modules/` to link (three-layer); empty = two-layer (core + overlay).
    pub modules: Option<Vec<String>>,
    /// Where the generated crate finds the engine.
    pub engine: Engine,
    /// On an existing overlay: `true` updates it in place, `false` stops. Unset: asked
    /// (interactive) or `true` (answers file).
    pub update: Option<bool>,
    /// The person running this maintains the engine: its `origin` is left alone.
    pub maintainer: bool,
    /// The HTTP port of the main instance (default 8770).
    pub port: Option<u16>,
    /// The vault.
    pub vault: VaultAnswers,
    /// The LLM provider; unset or `kind: none` = skipped (tools still served).
    pub provider: Option<Provider>,
    /// The Discord bot of the main instance; unset = skipped.
    pub discord: Option<Discord>,
    /// The owner, written into `team.json`.
    pub owner: Owner,
    /// The first agent.
    pub agent: Agent,
    /// Approvals: where requests are posted and who decides.
    pub approvals: Approvals,
    /// Rate-limit defaults per (principal, tool).
    pub rate_limits: RateLimits,
    /// A second, unsandboxed "ops" instance (`--profile ops`); unset = none.
    pub ops: Option<Ops>,
    /// systemd units into `systemd/`; unset = rendered with defaults; `enabled: false` = none.
    pub units: Units,
}

/// Where the engine comes from, for the generated `Cargo.toml`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Engine {
    /// A checkout of the engine (default: the one running the wizard).
    pub path: Option<PathBuf>,
    /// A git URL instead (with `rev` or `tag`).
    pub git: Option<String>,
    /// Commit for `git`.
    pub rev: Option<String>,
    /// Tag for `git`.
    pub tag: Option<String>,
    /// A registry version instead.
    pub version: Option<String>,
    /// With an engine checkout (`path`, or the one running the wizard): build into its target
    /// directory (`.cargo/config.toml`), reusing what it compiled. Default true.
    pub share_build: bool,
}

impl Default for Engine {
    fn default() -> Self {
        Engine {
            path: None,
            git: None,
            rev: None,
            tag: None,
            version: None,
            share_build: true,
        }
    }
}

/// `vault.*`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VaultAnswers {
    /// The passphrase: `env:VAR` (or asked). Unset with nothing to store: no vault.
    pub passphrase: Option<SecretText>,
    /// Also write the passphrase to this key file (0600) for the service to read; default
    /// `~/.config/strata/vault-key` when `write_key_file` is set.
    pub key_file: Option<PathBuf>,
    /// Whether to write the key file (default true: a service has no terminal to ask on).
    pub write_key_file: bool,
}

impl Default for VaultAnswers {
    fn default() -> Self {
        VaultAnswers {
            passphrase: None,
            key_file: None,
            write_key_file: true,
        }
    }
}

/// `provider.*`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Provider {
    /// `openai` | `anthropic` | `gemini` | `claude-code` | `none`.
    pub kind: String,
    /// Model name (a default per kind when unset).
    pub model: Option<String>,
    /// API key: `env:VAR` or literal; stored in the vault as `<kind>-api-key`.
    pub api_key: Option<SecretText>,
    /// Base URL (OpenAI-compatible servers, tests).
    pub base_url: Option<String>,
    /// Check the key with one cheap call (listing models).
    pub validate: bool,
}

impl Default for Provider {
    fn default() -> Self {
        Provider {
            kind: "none".into(),
            model: None,
            api_key: None,
            base_url: None,
            validate: true,
        }
    }
}

/// `discord.*`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Discord {
    /// Bot token: `env:VAR` or literal; stored in the vault as `discord-main`.
    pub token: Option<SecretText>,
    /// The guild (server) id the agent answers in.
    pub guild: Option<String>,
    /// A REST proxy `host:port` instead of Discord (written to `connectors.discord.api_proxy`
    /// too); tests point it at a fake.
    pub api_proxy: Option<String>,
    /// Talk plain HTTP to `api_proxy` (tests only).
    pub plain_http: bool,
    /// Check the token with `GET /users/@me`.
    pub validate: bool,
}

impl Default for Discord {
    fn default() -> Self {
        Discord {
            token: None,
            guild: None,
            api_proxy: None,
            plain_http: false,
            validate: true,
        }
    }
}

/// `owner.*`
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Owner {
    /// Person id in `team.json` (default `owner`).
    pub id: Option<String>,
    /// Display name.
    pub name: Option<String>,
    /// Discord user id (a snowflake).
    pub discord_id: Option<String>,
}

/// `agent.*`
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Agent {
    /// Agent id (default `main`).
    pub id: Option<String>,
    /// Display name.
    pub name: Option<String>,
    /// What it is for.
    pub description: Option<String>,
    /// Model (default: the provider's).
    pub model: Option<String>,
    /// `privileged` | `coordinator` | `assistant` (default `coordinator`).
    pub tier: Option<String>,
    /// Discord channel ids it answers in (empty: every channel of the guild it is mentioned
    /// in, plus DMs).
    pub channels: Vec<String>,
    /// Its tools: a list (`name` or `prefix*`), or `all`. Unset: a short list fitted to the
    /// other answers (every tool's schema is sent with each request, and `all` is ~50 of them).
    pub tools: Option<ToolChoice>,
}

/// `agent.tools`: `all`, or a list of names and `prefix*` patterns.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum ToolChoice {
    /// `all` (the only word allowed).
    Word(String),
    /// Names and patterns.
    List(Vec<String>),
}

/// `approvals.*`
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Approvals {
    /// Channel (Discord id) approval requests go to.
    pub channel: Option<String>,
    /// Person ids who may approve (empty: owners).
    pub approvers: Vec<String>,
}

/// `rate_limits.*`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimits {
    /// Calls per minute per (principal, tool).
    pub per_minute: u32,
    /// Calls per hour per (principal, tool).
    pub per_hour: u32,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            per_minute: 60,
            per_hour: 1000,
        }
    }
}

/// `ops.*`
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Ops {
    /// Its own bot token (`env:VAR`); stored as `discord-ops`. Unset: no Discord for ops.
    pub discord_token: Option<SecretText>,
    /// Its HTTP port (default: the main port + 1).
    pub port: Option<u16>,
}

/// `units.*`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Units {
    /// Render units at all.
    pub enabled: bool,
    /// The system user the services run as (default: the user running setup).
    pub user: Option<String>,
    /// The group (default: the user's).
    pub group: Option<String>,
    /// The binary (default `<overlay>/target/release/strata-<name>`).
    pub binary: Option<PathBuf>,
}

impl Default for Units {
    fn default() -> Self {
        Units {
            enabled: true,
            user: None,
            group: None,
            binary: None,
        }
    }
}

/// A secret answer: `env:VAR`, or the secret itself (typed at a prompt, or written in an
/// answers file). Its `Debug` shows only an `env:` reference; the text is wiped on drop.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretText(String);

impl SecretText {
    /// The reference or the secret.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SecretText {
    fn from(s: &str) -> Self {
        SecretText(s.to_owned())
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.starts_with("env:") {
            write!(f, "{:?}", self.0)
        } else {
            f.write_str("\"<secret>\"")
        }
    }
}

impl Drop for SecretText {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        self.0.zeroize();
    }
}

/// Reads `env:VAR` from the environment; anything else is the value itself.
pub fn secret_value(field: &str, v: &str) -> anyhow::Result<zeroize::Zeroizing<String>> {
    match v.strip_prefix("env:") {
        Some(var) => std::env::var(var)
            .map(zeroize::Zeroizing::new)
            .map_err(|_| anyhow::anyhow!("`{field}` names ${var}, which is not set")),
        None => Ok(zeroize::Zeroizing::new(v.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_answers_never_show_in_debug() {
        let a: Answers = yaml_serde::from_str(
            "vault: {passphrase: 'typed words'}\nprovider: {kind: openai, api_key: env:KEY}\ndiscord: {token: literal-token}\n",
        )
        .expect("answers");
        let shown = format!("{a:?}");
        assert!(
            !shown.contains("typed words") && !shown.contains("literal-token"),
            "{shown}"
        );
        assert!(shown.contains("env:KEY"), "{shown}");
        assert_eq!(
            a.vault.passphrase.as_ref().map(SecretText::as_str),
            Some("typed words")
        );
    }
}
