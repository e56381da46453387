//! The overlay's vault and the `vault:` references the configuration uses.

use std::sync::Arc;

use strata_engine::config::LoadedConfig;

/// Set by commands whose standard input is free (`serve`): the vault's passphrase may then
/// come from one line of stdin or a terminal prompt when the environment names none.
pub static PASSPHRASE_FROM_STDIN: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The overlay's vault (`config/secrets.enc`), opened with the passphrase from the
/// environment (`STRATA_VAULT_KEY_FILE`, `~/.config/strata/vault-key`,
/// `STRATA_VAULT_PASSPHRASE`), or asked for when stdin is a terminal. No vault: `None`. A vault without a passphrase: `None` and a
/// warning (its `vault:` references then fail, naming the key). A wrong passphrase: an error.
pub fn open_vault(config_dir: &std::path::Path) -> anyhow::Result<Option<strata_vault::FileVault>> {
    open_vault_from(config_dir, false)
}

/// The overlay's vault, opened the way this process may (stdin for `serve`).
pub(super) fn process_vault(
    cfg: &LoadedConfig,
) -> anyhow::Result<Option<Arc<strata_vault::FileVault>>> {
    let config_dir = cfg.overlay_dir.join("config");
    let stdin_ok = PASSPHRASE_FROM_STDIN.load(std::sync::atomic::Ordering::Relaxed);
    Ok(open_vault_from(&config_dir, stdin_ok)?.map(Arc::new))
}

/// Logs every `vault:` reference the vault cannot answer, with the config path that wants it
/// (`serve` at start; what needs a secret at start also fails there, naming both again). Only
/// the references the configuration uses ([`vault_refs_in_use`]).
pub fn warn_missing_vault_refs(
    cfg: &LoadedConfig,
    vault: Option<&dyn strata_engine::secret::Vault>,
) {
    for (path, key) in missing_vault_refs(cfg, vault) {
        tracing::warn!(
            config = %path,
            key = %key,
            "`{path}` refers to vault key `{key}`, which {}: whatever uses it fails until `strata vault set {key} --from-stdin`",
            if vault.is_some() { "the vault does not hold" } else { "cannot be read (no vault open)" }
        );
    }
}

/// The `vault:` references the configuration uses ([`vault_refs_in_use`]) that the vault
/// cannot answer, as (config path, key).
pub fn missing_vault_refs(
    cfg: &LoadedConfig,
    vault: Option<&dyn strata_engine::secret::Vault>,
) -> Vec<(String, String)> {
    vault_refs_in_use(cfg)
        .into_iter()
        .filter(|r| vault.is_none_or(|v| v.get(&r.key).is_none()))
        .map(|r| (r.path, r.key))
        .collect()
}

/// A `vault:` reference in the merged configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultRef {
    /// Its dotted config path (`modules.fleet.mind_token`).
    pub path: String,
    /// The vault key it names (`mind-token`).
    pub key: String,
    /// The layer that set it, as `strata config show --origin` names it (`core`,
    /// `module:fleet`, `overlay:config/config.yaml`, `env:STRATA_…`, `flag:--set …`).
    pub layer: String,
}

/// Whether `layer` is a default rather than the team's own setting: the core's or a module's
/// `default.yaml`.
fn is_default_layer(layer: &str) -> bool {
    layer == "core" || layer.starts_with("module:")
}

/// The `vault:` references the configuration uses — what `serve` warns about at start,
/// `doctor` checks and the `vault_check` job alerts on. One the team set (overlay, profile,
/// environment, a flag) always counts. One only a default names (core or a module's
/// `default.yaml`) counts once the team configured the section it sits in: some other key
/// under the same parent has a value from a team layer that is neither null nor the value
/// the defaults give it. So the fleet module's `modules.fleet.mind_token: vault:mind-token`
/// counts when `modules.fleet.mind_url` is set, not while the team's `modules.fleet` only
/// restates the defaults (`mind_url: null`, `timeout_secs: 20`) and nothing uses the token.
pub fn vault_refs_in_use(cfg: &LoadedConfig) -> Vec<VaultRef> {
    let tree = serde_json::to_value(&cfg.config).unwrap_or_default();
    let refs = strata_engine::secret::vault_refs(&tree);
    if refs.is_empty() {
        return Vec::new();
    }
    let origins: std::collections::HashMap<String, String> = cfg
        .origins()
        .into_iter()
        .map(|(k, _, layer)| (k, layer))
        .collect();
    // The origins name leaves, and an array is one leaf: a reference inside one
    // (`server.tokens.0.token`) was set by whoever set the array.
    let layer_of = |path: &str| -> Option<&str> {
        let mut p = path;
        loop {
            if let Some(l) = origins.get(p) {
                return Some(l.as_str());
            }
            p = &p[..p.rfind('.')?];
        }
    };
    let mut leaves = Vec::new();
    leaves_of("", &tree, &mut leaves);
    let defaults = default_tree(cfg);
    refs.into_iter()
        .filter_map(|(path, key)| {
            let layer = layer_of(&path).unwrap_or("core").to_owned();
            let counts = !is_default_layer(&layer)
                || match path.rsplit_once('.') {
                    // A reference at the top level has no section to look at.
                    None => true,
                    Some((parent, _)) => {
                        let prefix = format!("{parent}.");
                        leaves.iter().any(|(k, v)| {
                            *k != path
                                && k.starts_with(&prefix)
                                && !v.is_null()
                                && layer_of(k).is_some_and(|l| !is_default_layer(l))
                                && value_at(&defaults, k) != Some(*v)
                        })
                    }
                };
            counts.then_some(VaultRef { path, key, layer })
        })
        .collect()
}

/// What the defaults alone give: the core's and each module's `default.yaml` (under
/// `modules.<name>`), as JSON.
fn default_tree(cfg: &LoadedConfig) -> serde_json::Value {
    let mut tree =
        serde_json::to_value(strata_engine::config::Config::default()).unwrap_or_default();
    if let Some(modules) = tree.as_object_mut().and_then(|t| {
        t.entry("modules")
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()
    }) {
        for m in &cfg.modules {
            let section: serde_json::Value =
                yaml_serde::from_str(m.default_yaml).unwrap_or(serde_json::Value::Null);
            modules.insert(m.name.clone(), section);
        }
    }
    tree
}

/// The value at a dotted path (objects only, as the origins name leaves).
fn value_at<'a>(tree: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(tree, |v, k| v.get(k))
}

/// Every leaf under `v` with its dotted path, the way `LoadedConfig::origins` lists them (an
/// array or an empty object is one leaf).
fn leaves_of<'a>(
    prefix: &str,
    v: &'a serde_json::Value,
    out: &mut Vec<(String, &'a serde_json::Value)>,
) {
    match v {
        serde_json::Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves_of(&key, v, out);
            }
        }
        other => out.push((prefix.to_owned(), other)),
    }
}

/// [`open_vault`], also reading one line of standard input when `allow_stdin` and it is not a
/// terminal. On a terminal, both ask (no echo) when the environment names no passphrase.
pub fn open_vault_from(
    config_dir: &std::path::Path,
    allow_stdin: bool,
) -> anyhow::Result<Option<strata_vault::FileVault>> {
    if !strata_vault::FileVault::exists(config_dir) {
        return Ok(None);
    }
    // The environment first; then stdin (only where the command leaves it free) or, on a
    // terminal, a prompt.
    let pass = strata_vault::passphrase(allow_stdin)?;
    let Some(pass) = pass else {
        tracing::warn!(
            vault = %config_dir.join("secrets.enc").display(),
            "a vault is here but no passphrase was given: set STRATA_VAULT_KEY_FILE or STRATA_VAULT_PASSPHRASE"
        );
        return Ok(None);
    };
    Ok(Some(strata_vault::FileVault::open(config_dir, &pass)?))
}
