//! The Discord connector as `serve` starts it, and as `doctor --online` asks it — behind the
//! launcher's `discord` feature (twilight's gateway, REST client and model types). Without the
//! feature a config that lists accounts is refused at start, naming the feature.

use std::sync::Arc;

use strata_engine::Env;
use strata_engine::config::LoadedConfig;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::Member;
use crate::wiring::Wired;

/// Why a config with Discord accounts cannot run in this binary; `None` when it can.
pub fn refusal(c: &LoadedConfig) -> Option<String> {
    let accounts = c.config.connectors.discord.accounts.keys();
    refusal_for(accounts.map(String::as_str), cfg!(feature = "discord"))
}

fn refusal_for<'a>(accounts: impl Iterator<Item = &'a str>, built_with: bool) -> Option<String> {
    let mut names: Vec<&str> = accounts.collect();
    if built_with || names.is_empty() {
        return None;
    }
    names.sort_unstable();
    Some(format!(
        "`connectors.discord.accounts` lists {} but this binary was built without the \
         launcher's `discord` feature; rebuild with it (it is on by default: remove \
         `default-features = false` from the overlay's strata-launcher dependency, or add \
         \"discord\" to its features) or remove the accounts",
        names.join(", ")
    ))
}

/// Everything the accounts need, gathered before the runtime's main task starts them.
pub struct Discord {
    #[cfg(feature = "discord")]
    inner: Option<(
        strata_engine::config::Config,
        Arc<Env>,
        strata_discord::Services,
    )>,
}

impl Discord {
    /// Gathers the connector's services; nothing runs yet.
    #[cfg(feature = "discord")]
    pub fn prepare(
        c: &LoadedConfig,
        wired: &Wired,
        env: &Arc<Env>,
        skills: &Arc<strata_engine::skills::SkillSet>,
        skill_turns: Arc<dyn strata_engine::skills::SkillTurns>,
        member: Option<&Member>,
    ) -> Self {
        let services = strata_discord::Services {
            directory: wired.manager.clone(),
            hub: env.connectors().clone(),
            approvals: Some(wired.approvals.clone()),
            skills: Some(skills.clone()),
            activity: Some(env.activity().clone()),
            invoker: Some(wired.invoker.clone()),
            skill_turns: Some(skill_turns),
            // In a cluster each account's gateway runs on the member holding its lease.
            lease: member.and_then(Member::discord_lease),
        };
        Discord {
            inner: Some((c.config.clone(), env.clone(), services)),
        }
    }

    /// Without the feature there is nothing to gather ([`refusal`] has stopped a config
    /// that lists accounts).
    #[cfg(not(feature = "discord"))]
    pub fn prepare(
        _: &LoadedConfig,
        _: &Wired,
        _: &Arc<Env>,
        _: &Arc<strata_engine::skills::SkillSet>,
        _: Arc<dyn strata_engine::skills::SkillTurns>,
        _: Option<&Member>,
    ) -> Self {
        Discord {}
    }

    /// Starts each account's gateway (none unless `connectors.discord.accounts` lists
    /// some); each handle ends after `stop`. Call on the runtime.
    pub fn start(self, stop: watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
        #[cfg(feature = "discord")]
        if let Some((c, env, services)) = self.inner {
            return strata_discord::start(
                &c,
                &env.overlay_dir,
                &env.data_dir,
                env.vault.as_deref(),
                services,
                stop,
            );
        }
        let _ = (self, stop);
        Vec::new()
    }
}

/// `doctor --online`: asks Discord whether `token` is valid; `Ok` names what it saw.
#[cfg(feature = "discord")]
pub async fn check(
    name: &str,
    token: &str,
    d: &strata_engine::config::DiscordConfig,
) -> Result<String, String> {
    strata_discord::DiscordAccount::new(name, token, d)
        .check()
        .await
        .map_err(|e| e.detail)
}

/// Without the feature an account cannot be asked.
#[cfg(not(feature = "discord"))]
pub async fn check(
    _: &str,
    _: &str,
    _: &strata_engine::config::DiscordConfig,
) -> Result<String, String> {
    Err("cannot be checked: this binary was built without the launcher's `discord` feature".into())
}

#[cfg(test)]
mod tests {
    use super::refusal_for;

    #[test]
    fn accounts_without_the_feature_are_refused_by_name() {
        assert_eq!(refusal_for(["main"].into_iter(), true), None);
        assert_eq!(refusal_for(std::iter::empty(), false), None);
        let why = refusal_for(["support", "main"].into_iter(), false).expect("refused");
        assert!(why.contains("lists main, support"), "{why}");
        assert!(why.contains("`discord` feature"), "{why}");
    }
}
