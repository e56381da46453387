//! The Discord connector as `serve` starts it, and as `doctor --online` asks it — behind the
//! launcher's `discord` feature (twilight's gateway, REST client and model types). Without the
//! feature a config that lists accounts is refused at start (`features::missing`).

use std::sync::Arc;

use strata_engine::Env;
use strata_engine::config::LoadedConfig;
#[cfg(feature = "discord")]
use strata_runtime::EnvExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::Member;
use crate::wiring::Wired;

/// Everything the accounts need, gathered before the runtime's main task starts them.
pub struct Discord {
    #[cfg(feature = "discord")]
    config: strata_engine::config::Config,
    #[cfg(feature = "discord")]
    env: Arc<Env>,
    #[cfg(feature = "discord")]
    services: strata_discord::Services,
}

impl Discord {
    /// Gathers the connector's services; nothing runs yet. Without the feature there is
    /// nothing to gather (`features::missing` has stopped a config that lists accounts).
    pub fn prepare(
        c: &LoadedConfig,
        wired: &Wired,
        env: &Arc<Env>,
        skills: &Arc<strata_runtime::skills::SkillSet>,
        skill_turns: Arc<dyn strata_runtime::skills::SkillTurns>,
        member: Option<&Member>,
    ) -> Self {
        #[cfg(feature = "discord")]
        return Discord {
            config: c.config.clone(),
            env: env.clone(),
            services: strata_discord::Services {
                directory: wired.manager.clone(),
                hub: env.connectors().clone(),
                approvals: Some(wired.approvals.clone()),
                skills: Some(skills.clone()),
                activity: Some(env.activity().clone()),
                invoker: Some(wired.invoker.clone()),
                skill_turns: Some(skill_turns),
                // In a cluster each account's gateway runs on the member holding its lease.
                lease: member.and_then(Member::discord_lease),
            },
        };
        #[cfg(not(feature = "discord"))]
        {
            let _ = (c, wired, env, skills, skill_turns, member);
            Discord {}
        }
    }

    /// Starts each account's gateway (none unless `connectors.discord.accounts` lists
    /// some); each handle ends after `stop`. Call on the runtime.
    pub fn start(self, stop: watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
        #[cfg(feature = "discord")]
        return strata_discord::start(
            &self.config,
            &self.env.overlay_dir,
            &self.env.data_dir,
            self.env.vault.as_deref(),
            self.services,
            stop,
        );
        #[cfg(not(feature = "discord"))]
        {
            let _ = (self, stop);
            Vec::new()
        }
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
