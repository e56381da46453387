//! Cheap checks that a key or token works before it is stored, through the same clients
//! `serve` uses: the provider built from an `llm` block answers [`LlmProvider::check`] (listing
//! models, or the CLI's version), and Discord answers `GET /users/@me` for the bot token.

use strata_engine::config::{DiscordConfig, LlmConfig};

fn block_on<T>(f: impl std::future::Future<Output = T>) -> anyhow::Result<T> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f))
}

/// Checks a provider: `Ok(what was seen)` or `Err(why)`. `api_key` is `env:VAR` or the key.
pub fn provider(
    kind: &str,
    model: Option<&str>,
    api_key: Option<&str>,
    base_url: Option<&str>,
) -> anyhow::Result<String> {
    let mut llm = LlmConfig::new(kind);
    llm.model = model.map(str::to_owned);
    llm.api_key = api_key.map(str::to_owned);
    llm.base_url = base_url.map(str::to_owned);
    let ctx = strata_llm::AgentContext::bare("setup");
    // Clients are built inside the runtime (their connection pools need its reactor).
    block_on(async {
        let p =
            strata_llm::build(&llm, None, "provider", &ctx).map_err(|e| anyhow::anyhow!("{e}"))?;
        p.check().await.map_err(|e| anyhow::anyhow!("{e}"))
    })?
}

/// Checks a Discord bot token: the bot's name, or why not. `api_proxy`/`plain_http` as in
/// `connectors.discord` (a proxy, or a fake in tests).
pub fn discord(token: &str, api_proxy: Option<&str>, plain_http: bool) -> anyhow::Result<String> {
    let cfg = DiscordConfig {
        api_proxy: api_proxy.map(str::to_owned),
        plain_http,
        ..DiscordConfig::default()
    };
    block_on(async {
        let account = strata_discord::DiscordAccount::new("setup", token, &cfg);
        account
            .check()
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.detail))
    })?
}
