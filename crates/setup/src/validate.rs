//! Cheap checks that a key or token works before it is stored, through the same clients
//! `serve` uses: the provider built from an `llm` block answers [`LlmProvider::check`] (listing
//! models, or the CLI's version), and Discord answers `GET /users/@me` for the bot token.

use strata_engine::config::{DiscordConfig, LlmConfig};

/// Runs `f` to completion; while it waits on the network, a person at a terminal sees
/// `checking <what>…` on stderr (cleared after, the result is printed with the plan). Nothing
/// on a pipe or a file; a plain line on a dumb terminal, which cannot clear one.
fn block_on<T>(what: &str, f: impl std::future::Future<Output = T>) -> anyhow::Result<T> {
    use std::io::{IsTerminal as _, Write as _};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let shown = std::io::stderr().is_terminal();
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    if shown {
        let mut err = std::io::stderr().lock();
        let end = if dumb { "\n" } else { "" };
        let _ = write!(err, "checking {what}…{end}");
        let _ = err.flush();
    }
    let out = rt.block_on(f);
    if shown && !dumb {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
    Ok(out)
}

/// Checks a provider: `Ok(what was seen)` or `Err(why)`. `api_key` is `env:VAR` or the key.
/// Without a key but with a base URL (a local OpenAI-compatible server) the model is also
/// asked for one token: listing models says the server answers, the call says the model
/// named exists there (it costs nothing on one's own server; a vendor's key is not spent).
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
    let what = format!("the {kind} key with the provider");
    block_on(&what, async {
        let p =
            strata_llm::build(&llm, None, "provider", &ctx).map_err(|e| anyhow::anyhow!("{e}"))?;
        let seen = p.check().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        match (api_key, base_url, model) {
            (None, Some(_), Some(model)) => {
                let req = strata_engine::llm::CompletionRequest {
                    model: model.to_owned(),
                    system: None,
                    messages: vec![strata_engine::llm::ChatMessage::text(
                        strata_engine::llm::Role::User,
                        "Reply with OK.",
                    )],
                    tools: std::sync::Arc::from(Vec::new()),
                    max_tokens: Some(16),
                    temperature: None,
                    provider_state: None,
                    turn: None,
                };
                p.complete(&req)
                    .await
                    .map_err(|e| anyhow::anyhow!("model `{model}`: {e}"))?;
                Ok(format!("{seen}; model `{model}` answered"))
            }
            _ => Ok(seen),
        }
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
    block_on("the Discord token with Discord", async {
        let account = strata_discord::DiscordAccount::new("setup", token, &cfg);
        account
            .check()
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.detail))
    })?
}
