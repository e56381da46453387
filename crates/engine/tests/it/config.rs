//! Layered configuration: precedence of every file layer, profiles, flags, origins and errors.
//! (Environment variables are tested through the real binary in `strata-launcher`, so no test
//! here mutates the process environment.)

use std::path::Path;

use serde::Deserialize;
use strata_engine::config::{
    LoadOptions, LoadedConfig, ModuleConfigSource, validate_module_section,
};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct TestModConfig {
    greeting: String,
    #[serde(default)]
    volume: u8,
}

fn module(name: &str, yaml: &'static str) -> ModuleConfigSource {
    ModuleConfigSource {
        name: name.into(),
        default_yaml: yaml,
        validate: Some(validate_module_section::<TestModConfig>),
        config_dir: None,
        skills_dir: None,
    }
}

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

fn opts(dir: &Path) -> LoadOptions {
    LoadOptions {
        overlay_dir: dir.to_path_buf(),
        profile: None,
        modules: vec![
            module("first", "greeting: from-first\nvolume: 1\n"),
            module("second", "greeting: from-second\n"),
        ],
        use_env: false,
        data_dir: None,
        overrides: vec![],
    }
}

fn origin<'a>(origins: &'a [(String, serde_json::Value, String)], key: &str) -> &'a str {
    origins
        .iter()
        .find(|(k, _, _)| k == key)
        .map(|(_, _, o)| o.as_str())
        .unwrap_or_else(|| panic!("no origin for {key}"))
}

#[test]
fn defaults_apply_with_an_empty_overlay() {
    let dir = tempfile::tempdir().expect("tmp");
    let loaded = LoadedConfig::load(&opts(dir.path())).expect("load");
    assert_eq!(loaded.config.server.port, 8770);
    assert_eq!(loaded.config.server.bind, "127.0.0.1");
    assert_eq!(
        loaded.data_dir,
        std::path::absolute(dir.path()).expect("abs").join("data")
    );
    let first: TestModConfig = loaded.config.module("first").expect("first");
    assert_eq!((first.greeting.as_str(), first.volume), ("from-first", 1));
    let o = loaded.origins();
    assert_eq!(origin(&o, "server.port"), "core");
    assert_eq!(origin(&o, "modules.first.greeting"), "module:first");
}

#[test]
fn every_file_layer_and_flag_overrides_the_one_before() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    write(
        d,
        "config/config.yaml",
        "# overlay\nserver:\n  port: 9001\nmodules:\n  first:\n    greeting: from-overlay\nagents:\n  main:\n    description: from-config\n    name: Main\n",
    );
    write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    description: from-agents\n    tools: [read_file]\n",
    );
    write(
        d,
        "config/team.json",
        r#"{"people": [{"id": "owner", "name": "Owner Person", "access": "owner", "contacts": {"discord": "000000000000000000"}}], "agents": [{"id": "main", "agent_tier": "coordinator"}]}"#,
    );
    write(
        d,
        "config/mcp.yaml",
        "servers:\n  files:\n    transport: stdio\n    command: mcp-files\n",
    );
    write(
        d,
        "config/config.ops.yaml",
        "server:\n  port: 9002\n  bind: 127.0.0.2\n",
    );
    write(
        d,
        "config/agents.ops.yaml",
        "agents:\n  main:\n    description: from-ops-profile\n",
    );

    let base = LoadedConfig::load(&opts(d)).expect("load");
    let c = &base.config;
    assert_eq!(c.server.port, 9001);
    assert_eq!(c.agents["main"].description.as_deref(), Some("from-agents"));
    assert_eq!(
        c.agents["main"].name.as_deref(),
        Some("Main"),
        "maps merge key by key"
    );
    assert_eq!(c.team.people[0].id, "owner");
    assert_eq!(c.mcp.servers["files"].command.as_deref(), Some("mcp-files"));
    let first: TestModConfig = c.module("first").expect("first");
    assert_eq!((first.greeting.as_str(), first.volume), ("from-overlay", 1));
    let o = base.origins();
    assert_eq!(origin(&o, "server.port"), "overlay:config/config.yaml");
    assert_eq!(
        origin(&o, "agents.main.description"),
        "overlay:config/agents.yaml"
    );
    assert_eq!(origin(&o, "team.people"), "overlay:config/team.json");
    assert_eq!(origin(&o, "modules.first.volume"), "module:first");

    let mut with_profile = opts(d);
    with_profile.profile = Some("ops".into());
    let p = LoadedConfig::load(&with_profile).expect("profile");
    assert_eq!(p.config.server.port, 9002);
    assert_eq!(p.config.server.bind, "127.0.0.2");
    assert_eq!(
        p.config.agents["main"].description.as_deref(),
        Some("from-ops-profile")
    );
    assert_eq!(
        origin(&p.origins(), "server.port"),
        "profile:config/config.ops.yaml"
    );

    let mut flags = with_profile.clone();
    flags.overrides = vec![
        "server.port=9003".into(),
        "modules.second.greeting=from flag".into(),
    ];
    flags.data_dir = Some("elsewhere".into());
    let f = LoadedConfig::load(&flags).expect("flags");
    assert_eq!(f.config.server.port, 9003);
    assert_eq!(f.config.server.bind, "127.0.0.2");
    let second: TestModConfig = f.config.module("second").expect("second");
    assert_eq!(second.greeting, "from flag");
    assert_eq!(
        f.data_dir,
        std::path::absolute(d).expect("abs").join("elsewhere")
    );
    let o = f.origins();
    assert_eq!(origin(&o, "server.port"), "flag:--set server.port");
    assert_eq!(origin(&o, "data_dir"), "flag:--data-dir");
}

#[test]
fn module_order_decides_between_modules() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut o = opts(dir.path());
    o.modules = vec![module("a", "greeting: a\n"), module("b", "greeting: b\n")];
    // Modules have their own sections, so order shows in `resolve_config_file` and tools;
    // here we check each keeps its own defaults and the overlay beats both.
    write(
        dir.path(),
        "config/config.yaml",
        "modules:\n  b:\n    greeting: overlay\n",
    );
    let l = LoadedConfig::load(&o).expect("load");
    let a: TestModConfig = l.config.module("a").expect("a");
    let b: TestModConfig = l.config.module("b").expect("b");
    assert_eq!((a.greeting.as_str(), b.greeting.as_str()), ("a", "overlay"));
}

fn load_err(files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tmp");
    for (rel, text) in files {
        write(dir.path(), rel, text);
    }
    match LoadedConfig::load(&opts(dir.path())) {
        Ok(_) => panic!("expected an error for {files:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unknown_keys_are_reported_with_the_nearest_valid_key_and_the_file() {
    let e = load_err(&[("config/config.yaml", "server:\n  prot: 9000\n")]);
    assert!(e.contains("unknown key `server.prot`"), "{e}");
    assert!(e.contains("did you mean `server.port`?"), "{e}");
    assert!(e.contains("config/config.yaml"), "{e}");

    let e = load_err(&[("config/config.yaml", "tool:\n  roots: []\n")]);
    assert!(
        e.contains("unknown key `tool`") && e.contains("did you mean `tools`?"),
        "{e}"
    );

    let e = load_err(&[(
        "config/agents.yaml",
        "agents:\n  main:\n    instructions: hi\n",
    )]);
    assert!(e.contains("did you mean `agents.main.instruction`?"), "{e}");
    assert!(e.contains("config/agents.yaml"), "{e}");

    // Inside a module's own section, checked against the module's type.
    let e = load_err(&[(
        "config/config.yaml",
        "modules:\n  first:\n    greting: hi\n",
    )]);
    assert!(e.contains("did you mean `modules.first.greeting`?"), "{e}");

    // A module that is not linked.
    let e = load_err(&[(
        "config/config.yaml",
        "modules:\n  frist:\n    greeting: hi\n",
    )]);
    assert!(
        e.contains("unknown module `modules.frist`") && e.contains("did you mean `modules.first`?"),
        "{e}"
    );

    // Far from anything: no suggestion, but the valid keys are listed.
    let e = load_err(&[("config/config.yaml", "zzzzqqq: 1\n")]);
    assert!(!e.contains("did you mean"), "{e}");
    assert!(e.contains("valid keys here:"), "{e}");
}

#[test]
fn bad_values_and_bad_files_name_file_and_key() {
    let e = load_err(&[("config/config.yaml", "server:\n  port: not-a-number\n")]);
    assert!(
        e.contains("config/config.yaml") && e.contains("`server.port`"),
        "{e}"
    );

    let e = load_err(&[("config/config.yaml", "server: [unclosed\n")]);
    assert!(e.contains("config/config.yaml"), "{e}");

    let e = load_err(&[(
        "config/team.json",
        r#"{"people": [{"id": "x", "name": "X", "access": "root"}]}"#,
    )]);
    assert!(
        e.contains("config/team.json") && e.contains("`root`"),
        "{e}"
    );
    assert!(e.contains("owner, admin, staff, viewer"), "{e}");
}

#[test]
fn secrets_are_masked_but_vault_references_shown() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "config/config.yaml",
        "defaults:\n  llm:\n    provider: openai\n    api_key: sk-plain-text-key\n",
    );
    write(
        dir.path(),
        "config/agents.yaml",
        "agents:\n  main:\n    llm:\n      provider: anthropic\n      api_key: vault:anthropic-key\n",
    );
    let l = LoadedConfig::load(&opts(dir.path())).expect("load");
    let m = l.masked();
    assert_eq!(m["defaults"]["llm"]["api_key"], "********");
    assert_eq!(m["agents"]["main"]["llm"]["api_key"], "vault:anthropic-key");
    assert!(!format!("{:?}", l.origins()).contains("sk-plain-text-key"));
}

#[test]
fn comment_only_files_are_empty_layers() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "config/config.yaml",
        "# nothing yet\n\n# server:\n#   port: 1\n",
    );
    let l = LoadedConfig::load(&opts(dir.path())).expect("load");
    assert_eq!(l.config.server.port, 8770);
}

#[test]
fn resolve_config_file_prefers_the_overlay() {
    let dir = tempfile::tempdir().expect("tmp");
    let moddir = tempfile::tempdir().expect("tmp");
    write(moddir.path(), "prompt.md", "module");
    write(moddir.path(), "only-module.md", "module");
    write(dir.path(), "config/prompt.md", "overlay");
    let mut o = opts(dir.path());
    o.modules[0].config_dir = Some(moddir.path().to_path_buf());
    let l = LoadedConfig::load(&o).expect("load");
    let p = l.resolve_config_file("prompt.md").expect("found");
    assert_eq!(std::fs::read_to_string(p).expect("read"), "overlay");
    let p = l.resolve_config_file("only-module.md").expect("found");
    assert_eq!(std::fs::read_to_string(p).expect("read"), "module");
    assert!(l.resolve_config_file("missing.md").is_none());
}

#[test]
fn config_errors_are_typed_for_callers() {
    use strata_engine::config::{ConfigError, ProblemKind};
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "config/config.yaml", "server:\n  prot: 9000\n");
    match LoadedConfig::load(&opts(dir.path())) {
        Err(ConfigError::Invalid(problems)) => {
            assert_eq!(problems.len(), 1);
            assert_eq!(problems[0].key, "server.prot");
            assert!(problems[0].source.ends_with("config/config.yaml"));
            match &problems[0].kind {
                ProblemKind::UnknownKey { suggestion, valid } => {
                    assert_eq!(suggestion.as_deref(), Some("server.port"));
                    assert!(valid.iter().any(|k| k == "port"), "{valid:?}");
                }
                other => panic!("unknown key expected, got {other:?}"),
            }
        }
        other => panic!("Invalid expected, got {:?}", other.err()),
    }
    write(
        dir.path(),
        "config/config.yaml",
        "modules:\n  frist:\n    greeting: hi\n",
    );
    match LoadedConfig::load(&opts(dir.path())) {
        Err(ConfigError::UnknownModule {
            name, suggestion, ..
        }) => {
            assert_eq!(name, "frist");
            assert_eq!(suggestion.as_deref(), Some("first"));
        }
        other => panic!("UnknownModule expected, got {:?}", other.err()),
    }
    let mut o = opts(dir.path());
    o.overlay_dir = dir.path().join("missing");
    assert!(matches!(
        LoadedConfig::load(&o),
        Err(ConfigError::Overlay { .. })
    ));
}

#[test]
fn taint_settings_are_read_and_bad_entries_named() {
    use strata_engine::config::{GatedEffect, TaintSourceRule};
    use strata_engine::spec::Capability;
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "config/config.yaml",
        "security:\n  taint:\n    sources: [web_facing, \"tool:read_*\"]\n    gated_capabilities: [subprocess, external]\n    trusted_senders: admin\n",
    );
    let loaded = LoadedConfig::load(&opts(dir.path())).expect("load");
    let t = &loaded.config.security.taint;
    assert_eq!(
        t.sources,
        vec![
            TaintSourceRule::WebFacing,
            TaintSourceRule::Tool("read_*".into())
        ]
    );
    assert_eq!(
        t.gated_capabilities,
        vec![
            GatedEffect::Capability(Capability::Subprocess),
            GatedEffect::External
        ]
    );
    assert!(!t.tracks_memory() && !t.follows_agents());
    for (bad, says) in [
        ("sources: [websites]", "unknown taint source `websites`"),
        (
            "gated_capabilities: [exec]",
            "unknown gated capability `exec`",
        ),
    ] {
        write(
            dir.path(),
            "config/config.yaml",
            &format!("security:\n  taint:\n    {bad}\n"),
        );
        let Err(e) = LoadedConfig::load(&opts(dir.path())) else {
            panic!("{bad} was accepted");
        };
        assert!(e.to_string().contains(says), "{e}");
    }
}
