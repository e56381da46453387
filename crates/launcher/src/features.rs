//! The launcher's optional parts (cargo features) against what a config asks of them: a
//! config that needs a part this binary was built without is refused at start — `serve`
//! stops and `doctor` fails — naming the keys, the feature and how to get it.

use strata_engine::config::{LoadedConfig, MemoryBackendKind, StorageBackend};

/// One line per configured part this binary lacks; empty when it has everything asked.
pub fn missing(c: &LoadedConfig) -> Vec<String> {
    let cfg = &c.config;
    let postgres: Vec<&str> = [
        (cfg.storage.backend == StorageBackend::Postgres).then_some("`storage.backend: postgres`"),
        (cfg.memory.backend == MemoryBackendKind::Postgres).then_some("`memory.backend: postgres`"),
    ]
    .into_iter()
    .flatten()
    .collect();
    [
        refusal(
            listed(
                "connectors.discord.accounts",
                cfg.connectors.discord.accounts.keys(),
            ),
            "discord",
            cfg!(feature = "discord"),
        ),
        refusal(
            listed("mcp.servers", cfg.mcp.servers.keys()),
            "mcp-client",
            cfg!(feature = "mcp-client"),
        ),
        refusal(
            (!postgres.is_empty()).then(|| postgres.join(" and ")),
            "postgres",
            cfg!(feature = "postgres"),
        ),
        refusal(
            cfg.cluster.enabled.then(|| "`cluster.enabled`".to_owned()),
            "cluster",
            cfg!(feature = "cluster"),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// "`key` lists a, b" for the names under `key`, sorted; `None` when there are none.
fn listed<'a>(key: &str, names: impl Iterator<Item = &'a String>) -> Option<String> {
    let mut names: Vec<&str> = names.map(String::as_str).collect();
    names.sort_unstable();
    (!names.is_empty()).then(|| format!("`{key}` lists {}", names.join(", ")))
}

/// The refusal of `asked` (what the config asks for, said as a subject) when the binary was
/// built without `feature`.
fn refusal(asked: Option<String>, feature: &str, built_with: bool) -> Option<String> {
    let asked = asked.filter(|_| !built_with)?;
    Some(format!(
        "{asked}: this binary was built without the launcher's `{feature}` feature; rebuild \
         with it (`cargo build --features {feature}` for an overlay that forwards it, as the \
         example does; else add \"{feature}\" to the features of the overlay's strata-launcher \
         dependency) or take it out of the config"
    ))
}

#[cfg(test)]
mod tests {
    use super::{listed, refusal};

    #[test]
    fn parts_configured_without_their_feature_are_refused_by_name() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let (main, none) = (names(&["main"]), names(&[]));
        assert_eq!(refusal(listed("k", main.iter()), "discord", true), None);
        assert_eq!(refusal(listed("k", none.iter()), "discord", false), None);
        let two = names(&["support", "main"]);
        let why = refusal(listed("mcp.servers", two.iter()), "mcp-client", false).expect("refused");
        assert!(
            why.starts_with("`mcp.servers` lists main, support: "),
            "{why}"
        );
        assert!(why.contains("`mcp-client` feature"), "{why}");
        assert!(why.contains("cargo build --features mcp-client"), "{why}");
    }
}
