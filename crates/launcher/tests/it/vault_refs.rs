//! Which `vault:` references the configuration uses (`wiring::vault_refs_in_use`, behind the
//! warning at `serve`'s start, `doctor` and the `vault_check` job): a module default's in a
//! section the team left alone is not one (issue #41: the untouched example overlay warned on
//! every start that the vault lacked `mind-token`, though nothing set `mind_url`). The core
//! `strata` binary links no module, so the example overlay is loaded here with the real
//! `ops` and `fleet` defaults, as the example deployment's binary loads them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_engine::config::{LoadOptions, LoadedConfig, ModuleConfigSource};
use strata_launcher::wiring;

use crate::common;

const OPS_DEFAULT: &str = include_str!("../../../../modules/ops/config/default.yaml");
const FLEET_DEFAULT: &str = include_str!("../../../../modules/fleet/config/default.yaml");
const MIND_TOKEN: (&str, &str) = ("modules.fleet.mind_token", "mind-token");

/// The example deployment's overlay, as it is in the repository.
fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../overlay-example")
}

/// `overlay` with the `ops` and `fleet` modules' defaults, no environment, `--set overrides`.
fn load(overlay: &Path, data: &Path, overrides: &[&str]) -> LoadedConfig {
    let module = |name: &str, default_yaml: &'static str| ModuleConfigSource {
        name: name.into(),
        default_yaml,
        validate: None,
        config_dir: None,
        skills_dir: None,
    };
    LoadedConfig::load(&LoadOptions {
        overlay_dir: overlay.to_path_buf(),
        profile: None,
        modules: vec![module("ops", OPS_DEFAULT), module("fleet", FLEET_DEFAULT)],
        use_env: false,
        data_dir: Some(data.to_path_buf()),
        overrides: overrides.iter().map(|s| (*s).to_owned()).collect(),
    })
    .expect("the config loads")
}

fn in_use(cfg: &LoadedConfig) -> Vec<(String, String)> {
    wiring::vault_refs_in_use(cfg)
        .into_iter()
        .map(|r| (r.path, r.key))
        .collect()
}

fn mind_token() -> (String, String) {
    (MIND_TOKEN.0.to_owned(), MIND_TOKEN.1.to_owned())
}

/// The untouched example overlay restates the fleet defaults (`mind_url: null`,
/// `timeout_secs: 20`, `agent_command: []`): the module's `vault:mind-token` is in the merged
/// config but not in use — not warned about at start, not in `vault_check`'s list. Once
/// `mind_url` is set (a flag, or the overlay's file) it is, with or without a vault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_default_vault_key_counts_only_once_its_section_is_configured() {
    let data = tempfile::tempdir().expect("tmp");
    let cfg = load(&example(), data.path(), &[]);
    // The reference is there, set by the module's default.yaml…
    let tree = serde_json::to_value(&cfg.config).expect("json");
    assert!(
        strata_engine::secret::vault_refs(&tree).contains(&mind_token()),
        "{tree}"
    );
    // …but nothing uses it.
    assert!(!in_use(&cfg).contains(&mind_token()), "{:?}", in_use(&cfg));
    assert!(
        !wiring::missing_vault_refs(&cfg, None).contains(&mind_token()),
        "{:?}",
        wiring::missing_vault_refs(&cfg, None)
    );
    // What the `vault_check` job looks up is the same list.
    let wired = wiring::build(&cfg, Arc::new(strata_runtime::Registry::empty()), None)
        .await
        .expect("wired");
    assert!(
        !wired.vault_refs.iter().any(|r| r.path == MIND_TOKEN.0),
        "{:?}",
        wired.vault_refs
    );
    wired.finish().await;

    // `--set modules.fleet.mind_url=…`: the Mind client is in use, and so is its token.
    let set = load(
        &example(),
        data.path(),
        &["modules.fleet.mind_url=http://127.0.0.1:9"],
    );
    assert!(
        wiring::missing_vault_refs(&set, None).contains(&mind_token()),
        "{:?}",
        wiring::missing_vault_refs(&set, None)
    );
    let r = wiring::vault_refs_in_use(&set)
        .into_iter()
        .find(|r| r.path == MIND_TOKEN.0)
        .expect("mind_token in use");
    assert_eq!(r.layer, "module:fleet");
    let wired = wiring::build(&set, Arc::new(strata_runtime::Registry::empty()), None)
        .await
        .expect("wired");
    assert!(
        wired.vault_refs.iter().any(|r| r.path == MIND_TOKEN.0),
        "{:?}",
        wired.vault_refs
    );
    wired.finish().await;

    // A vault that holds the key answers it.
    let ov = tempfile::tempdir().expect("tmp");
    let d = ov.path();
    common::write(
        d,
        "config/config.yaml",
        "modules:\n  fleet:\n    mind_url: http://127.0.0.1:9\n",
    );
    let cfg = load(d, data.path(), &[]);
    assert!(
        wiring::missing_vault_refs(&cfg, None).contains(&mind_token()),
        "{:?}",
        wiring::missing_vault_refs(&cfg, None)
    );
    let mut vault = strata_vault::FileVault::create_with_iterations(
        &d.join("config"),
        "test vault passphrase",
        1000,
    )
    .expect("vault");
    vault.set("mind-token", "t0ken").expect("set");
    assert!(
        wiring::missing_vault_refs(&cfg, Some(&vault)).is_empty(),
        "{:?}",
        wiring::missing_vault_refs(&cfg, Some(&vault))
    );
}

/// A team's setting in the section counts only when it is not the default's own value; a
/// reference the team wrote itself always counts, in a section it set nothing else in too.
#[test]
fn a_team_setting_configures_a_section_and_a_team_reference_always_counts() {
    let data = tempfile::tempdir().expect("tmp");
    let ov = tempfile::tempdir().expect("tmp");
    let d = ov.path();
    // The defaults restated, and `null`: not configured.
    common::write(
        d,
        "config/config.yaml",
        "modules:\n  fleet:\n    mind_url: null\n    timeout_secs: 20\n    agent_command: []\n",
    );
    assert!(!in_use(&load(d, data.path(), &[])).contains(&mind_token()));
    // Another value than the default's: configured (the module's token may be used).
    common::write(
        d,
        "config/config.yaml",
        "modules:\n  fleet:\n    timeout_secs: 5\n",
    );
    assert!(in_use(&load(d, data.path(), &[])).contains(&mind_token()));
    // The team's own references count wherever they are: a section of their own, in a list.
    common::write(
        d,
        "config/config.yaml",
        "tools:\n  web_search:\n    brave_api_key: vault:brave-key\n\
         server:\n  tokens:\n    - {name: boss, token: vault:boss-token, tier: owner}\n",
    );
    let refs = wiring::vault_refs_in_use(&load(d, data.path(), &[]));
    let found: Vec<(&str, &str, &str)> = refs
        .iter()
        .map(|r| (r.path.as_str(), r.key.as_str(), r.layer.as_str()))
        .collect();
    for want in [
        (
            "tools.web_search.brave_api_key",
            "brave-key",
            "overlay:config/config.yaml",
        ),
        (
            "server.tokens.0.token",
            "boss-token",
            "overlay:config/config.yaml",
        ),
    ] {
        assert!(found.contains(&want), "{want:?} not in {found:?}");
    }
    // …and a team-set `vault:` value for a module key counts even with nothing else beside it.
    let set = load(
        d,
        data.path(),
        &["modules.fleet.mind_token=vault:mind-token"],
    );
    let r = wiring::vault_refs_in_use(&set)
        .into_iter()
        .find(|r| r.path == MIND_TOKEN.0)
        .expect("mind_token in use");
    assert_eq!(r.layer, "flag:--set modules.fleet.mind_token");
}
