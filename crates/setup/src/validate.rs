//! Cheap checks that a key or token works before it is stored: one request that lists
//! models (providers) or names the bot (Discord). Nothing is sent but the credential.

use std::time::Duration;

fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?)
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> anyhow::Result<T> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f))
}

/// Checks a provider key: `Ok(what was seen)` or `Err(why)`.
pub fn provider(kind: &str, key: &str, base_url: Option<&str>) -> anyhow::Result<String> {
    block_on(provider_async(kind, key, base_url))?
}

async fn provider_async(kind: &str, key: &str, base_url: Option<&str>) -> anyhow::Result<String> {
    if kind == "claude-code" {
        let out = std::process::Command::new("claude")
            .arg("--version")
            .output();
        return match out {
            Ok(o) if o.status.success() => Ok(format!(
                "claude CLI {}",
                String::from_utf8_lossy(&o.stdout).trim()
            )),
            _ => {
                anyhow::bail!("the `claude` CLI is not on PATH (install Claude Code, then log in)")
            }
        };
    }
    let c = client()?;
    let req = match kind {
        "openai" => c
            .get(format!(
                "{}/models",
                base_url
                    .unwrap_or("https://api.openai.com/v1")
                    .trim_end_matches('/')
            ))
            .bearer_auth(key),
        "anthropic" => c
            .get(format!(
                "{}/v1/models",
                base_url
                    .unwrap_or("https://api.anthropic.com")
                    .trim_end_matches('/')
            ))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01"),
        "gemini" => c
            .get(format!(
                "{}/v1beta/models",
                base_url
                    .unwrap_or("https://generativelanguage.googleapis.com")
                    .trim_end_matches('/')
            ))
            .header("x-goog-api-key", key),
        other => anyhow::bail!("no check for provider `{other}`"),
    };
    let resp = req
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach {kind}: {e}"))?;
    match resp.status().as_u16() {
        200..=299 => Ok(format!("{kind} key accepted")),
        401 | 403 => anyhow::bail!("{kind} rejected the key ({})", resp.status()),
        s => anyhow::bail!("{kind} answered {s}; the key was not confirmed"),
    }
}

/// Checks a Discord bot token with `GET /users/@me`: the bot's name, or why not.
pub fn discord(token: &str, api_base: Option<&str>) -> anyhow::Result<String> {
    block_on(discord_async(token, api_base))?
}

async fn discord_async(token: &str, api_base: Option<&str>) -> anyhow::Result<String> {
    let base = api_base
        .unwrap_or("https://discord.com/api/v10")
        .trim_end_matches('/');
    let c = client()?;
    let req = c
        .get(format!("{base}/users/@me"))
        .header("Authorization", format!("Bot {token}"));
    let resp = req
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach Discord: {e}"))?;
    let status = resp.status();
    if status.as_u16() == 401 {
        anyhow::bail!(
            "Discord rejected the bot token (401): copy it again from the developer portal"
        );
    }
    if !status.is_success() {
        anyhow::bail!("Discord answered {status}; the token was not confirmed");
    }
    let v: serde_json::Value = resp.json().await.unwrap_or_default();
    Ok(format!(
        "bot `{}` ({})",
        v["username"].as_str().unwrap_or("?"),
        v["id"].as_str().unwrap_or("?")
    ))
}
