//! The launcher's random tokens: the control API's per-boot token and the per-boot tokens of
//! CLI agents that reach our tools over MCP.

/// A token of 32 random bytes, URL-safe base64 behind the prefix `st_`. The prefix keeps it
/// from starting with `-` (one random token in 64 did, and `--token -…` is read as a flag by
/// every CLI parser, ours included) and makes a leaked one recognisable.
pub fn generate_token() -> anyhow::Result<String> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for a token: {e}"))?;
    Ok(format!(
        "st_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_tokens_can_follow_a_flag() {
        for _ in 0..2000 {
            let t = super::generate_token().expect("token");
            assert!(t.starts_with("st_") && t.len() == 46, "{t}");
            assert!(
                t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            );
        }
    }
}
