//! The launcher's optional parts (cargo features) against what a config asks of them: a
//! config that needs a part this binary was built without is refused at start — `serve`
//! stops and `doctor` fails — naming the keys, the feature and how to get it.

use strata_engine::config::LoadedConfig;

/// One line per configured part this binary lacks; empty when it has everything asked.
pub fn missing(c: &LoadedConfig) -> Vec<String> {
    let cfg = &c.config;
    [
        refusal(
            "connectors.discord.accounts",
            cfg.connectors.discord.accounts.keys(),
            "discord",
            cfg!(feature = "discord"),
        ),
        refusal(
            "mcp.servers",
            cfg.mcp.servers.keys(),
            "mcp-client",
            cfg!(feature = "mcp-client"),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn refusal<'a>(
    key: &str,
    names: impl Iterator<Item = &'a String>,
    feature: &str,
    built_with: bool,
) -> Option<String> {
    let mut names: Vec<&str> = names.map(String::as_str).collect();
    if built_with || names.is_empty() {
        return None;
    }
    names.sort_unstable();
    Some(format!(
        "`{key}` lists {} but this binary was built without the launcher's `{feature}` \
         feature; rebuild with it (on by default: drop `default-features = false` from the \
         overlay's strata-launcher dependency, or add \"{feature}\" to its features) or remove \
         them",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::refusal;

    #[test]
    fn parts_configured_without_their_feature_are_refused_by_name() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let (main, none) = (names(&["main"]), names(&[]));
        assert_eq!(refusal("k", main.iter(), "discord", true), None);
        assert_eq!(refusal("k", none.iter(), "discord", false), None);
        let two = names(&["support", "main"]);
        let why = refusal("mcp.servers", two.iter(), "mcp-client", false).expect("refused");
        assert!(
            why.starts_with("`mcp.servers` lists main, support"),
            "{why}"
        );
        assert!(why.contains("`mcp-client` feature"), "{why}");
    }
}
