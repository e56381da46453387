//! Loading: figment layers labelled by source, errors naming the file, key and nearest valid
//! key, `config show --origin`, and module sections checked against their own types.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Json, Serialized};
use figment::value::{Dict, Map, Value as FValue};
use figment::{Figment, Metadata, Profile, Provider};
use serde_json::Value;

use super::*;

/// Checks a module's section (`modules.<name>`, the `&str`) of the merged figment.
pub type ModuleValidator = fn(&Figment, &str) -> Result<(), Box<figment::Error>>;

/// A module's contribution to config loading.
#[derive(Clone)]
pub struct ModuleConfigSource {
    /// Module name.
    pub name: String,
    /// Its embedded `config/default.yaml`.
    pub default_yaml: &'static str,
    /// Checks `modules.<name>` against the module's config type.
    pub validate: Option<ModuleValidator>,
    /// The module's `config/` directory at build time (for [`LoadedConfig::resolve_config_file`]).
    pub config_dir: Option<PathBuf>,
    /// The module's `skills/` directory at build time.
    pub skills_dir: Option<PathBuf>,
}

/// What to load.
#[derive(Clone, Default)]
pub struct LoadOptions {
    /// The overlay directory.
    pub overlay_dir: PathBuf,
    /// Profile (`--profile`).
    pub profile: Option<String>,
    /// Modules in precedence order (earlier loses).
    pub modules: Vec<ModuleConfigSource>,
    /// Read `STRATA_*` environment variables.
    pub use_env: bool,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--set key=value` pairs, applied last in order.
    pub overrides: Vec<String>,
}

/// A value of a section that its `check` refused (`goals.nudge_interval`, an agent's budget):
/// the key, and the message for people (which names the key too).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidSetting {
    /// The key, dotted (`goals.nudge_interval`, `agents.main.budget`).
    pub key: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl InvalidSetting {
    /// `key` is wrong, as `message` says.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        InvalidSetting {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// A problem with the configuration: says which file or variable, which key, and what to do.
/// The variants let callers tell the kinds apart; `Display` is the message for people.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The overlay directory cannot be used.
    #[error("overlay directory `{}`: {reason}", dir.display())]
    Overlay {
        /// As given.
        dir: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// A command-line flag (`--set`, `--profile`) is malformed.
    #[error("{0}")]
    Flag(String),
    /// `modules.<name>` names a module this binary does not link.
    #[error(
        "unknown module `modules.{name}` (set by {origin}){}; modules linked into this binary: {}",
        suggestion.as_ref().map(|s| format!("; did you mean `modules.{s}`?")).unwrap_or_default(),
        if known.is_empty() { "none".to_owned() } else { known.join(", ") }
    )]
    UnknownModule {
        /// The module named.
        name: String,
        /// Which layer set it.
        origin: String,
        /// The nearest linked module, if any is close.
        suggestion: Option<String>,
        /// The modules linked in.
        known: Vec<String>,
    },
    /// Values that do not fit the config's types: one problem per line.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Problem>),
}

/// One value that does not fit: where it came from, which key, what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The file, environment variable or flag that set it.
    pub source: String,
    /// The dotted key.
    pub key: String,
    /// What is wrong.
    pub kind: ProblemKind,
}

/// What is wrong with a value.
#[derive(Debug, Clone, PartialEq)]
pub enum ProblemKind {
    /// The key does not exist; the nearest valid key, and the valid keys at that level.
    UnknownKey {
        /// A likely intended key (full dotted path).
        suggestion: Option<String>,
        /// The keys valid beside it.
        valid: Vec<String>,
    },
    /// The value is not one of the allowed words.
    NotAllowed {
        /// The value given.
        value: String,
        /// A likely intended word.
        suggestion: Option<String>,
        /// The words allowed.
        allowed: Vec<String>,
    },
    /// Anything else the types refuse (wrong type, missing field…), as figment words it.
    Other(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hint = |s: &Option<String>| {
            s.as_ref()
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_default()
        };
        match &self.kind {
            ProblemKind::UnknownKey { suggestion, valid } => write!(
                f,
                "{}: unknown key `{}`{} (valid keys here: {})",
                self.source,
                self.key,
                hint(suggestion),
                valid.join(", ")
            ),
            ProblemKind::NotAllowed {
                value,
                suggestion,
                allowed,
            } => write!(
                f,
                "{}: `{}` = `{value}` is not allowed{} (allowed: {})",
                self.source,
                self.key,
                hint(suggestion),
                allowed.join(", ")
            ),
            ProblemKind::Other(m) if self.key.is_empty() => write!(f, "{}: {m}", self.source),
            ProblemKind::Other(m) => write!(f, "{}: `{}`: {m}", self.source, self.key),
        }
    }
}

/// The loaded configuration plus where each value came from.
pub struct LoadedConfig {
    /// The merged, typed configuration.
    pub config: Config,
    /// The overlay directory (absolute).
    pub overlay_dir: PathBuf,
    /// The data directory (absolute).
    pub data_dir: PathBuf,
    /// The selected profile.
    pub profile: Option<String>,
    figment: Figment,
    module_dirs: Vec<PathBuf>,
    /// Modules in precedence order, with their directories.
    pub modules: Vec<ModuleConfigSource>,
}

/// A provider wrapper that labels values with our layer names and can nest a file's content
/// under a key.
struct Labeled<P> {
    inner: P,
    label: String,
    file: Option<PathBuf>,
    nest: Vec<String>,
}

impl<P: Provider> Provider for Labeled<P> {
    fn metadata(&self) -> Metadata {
        let m = Metadata::named(self.label.clone());
        match &self.file {
            Some(f) => m.source(figment::Source::File(f.clone())),
            None => m,
        }
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut data = self.inner.data()?;
        for dict in data.values_mut() {
            for key in self.nest.iter().rev() {
                let inner = std::mem::take(dict);
                dict.insert(key.clone(), FValue::from(inner));
            }
        }
        Ok(data)
    }
}

/// Whether a YAML text holds anything but comments and blank lines.
fn has_content(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && t != "---"
    })
}

fn file_layer(fig: Figment, overlay: &Path, rel: &str, label: &str, nest: &[&str]) -> Figment {
    let path = overlay.join(rel);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return fig,
        Err(e) => {
            let err = figment::Error::from(format!("cannot read {}: {e}", path.display()));
            return fig.merge(Labeled {
                inner: Failing(err),
                label: format!("{label}:{rel}"),
                file: Some(path),
                nest: vec![],
            });
        }
    };
    if !has_content(&text) {
        return fig;
    }
    let nest = nest.iter().map(|s| (*s).to_owned()).collect();
    let label = format!("{label}:{rel}");
    if rel.ends_with(".json") {
        fig.merge(Labeled {
            inner: Json::string(&text),
            label,
            file: Some(path),
            nest,
        })
    } else {
        fig.merge(Labeled {
            inner: Yaml::string(&text),
            label,
            file: Some(path),
            nest,
        })
    }
}

/// YAML for figment, read by `yaml_serde` (figment's own `yaml` feature would bring the
/// archived `serde_yaml`): the same parse, so the same values and error messages.
struct Yaml;

impl Format for Yaml {
    type Error = yaml_serde::Error;
    const NAME: &'static str = "YAML";

    fn from_str<T: serde::de::DeserializeOwned>(string: &str) -> Result<T, Self::Error> {
        yaml_serde::from_str(string)
    }
}

/// A provider that only fails (an unreadable file must not be silently skipped).
struct Failing(figment::Error);

impl Provider for Failing {
    fn metadata(&self) -> Metadata {
        Metadata::named("unreadable")
    }
    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Err(self.0.clone())
    }
}

/// Is a `STRATA_*` variable (prefix stripped) configuration? Keys with `__` are; single words
/// are only when they name a top-level key (`STRATA_DATA_DIR`). Everything else
/// (`STRATA_OVERLAY`, `STRATA_PROFILE`, `STRATA_VAULT_*`, `STRATA_AGENT_*`) belongs to other
/// parts of the launcher.
pub fn is_config_env(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("__") || TOP_LEVEL_KEYS.contains(&k.as_str())
}

impl LoadedConfig {
    /// Loads and checks every layer.
    pub fn load(opts: &LoadOptions) -> Result<LoadedConfig, ConfigError> {
        let overlay_dir =
            std::path::absolute(&opts.overlay_dir).map_err(|e| ConfigError::Overlay {
                dir: opts.overlay_dir.clone(),
                reason: e.to_string(),
            })?;
        if !overlay_dir.is_dir() {
            return Err(ConfigError::Overlay {
                dir: overlay_dir,
                reason: "does not exist; pass --overlay DIR or set STRATA_OVERLAY".into(),
            });
        }
        let mut fig = Figment::new().merge(Labeled {
            inner: Serialized::defaults(Config::default()),
            label: "core".into(),
            file: None,
            nest: vec![],
        });
        for m in &opts.modules {
            if has_content(m.default_yaml) {
                fig = fig.merge(Labeled {
                    inner: Yaml::string(m.default_yaml),
                    label: format!("module:{}", m.name),
                    file: m.config_dir.as_ref().map(|d| d.join("default.yaml")),
                    nest: vec!["modules".into(), m.name.clone()],
                });
            }
        }
        let o = &overlay_dir;
        fig = file_layer(fig, o, "config/config.yaml", "overlay", &[]);
        fig = file_layer(fig, o, "config/agents.yaml", "overlay", &[]);
        fig = file_layer(fig, o, "config/team.json", "overlay", &["team"]);
        fig = file_layer(fig, o, "config/mcp.yaml", "overlay", &["mcp"]);
        if let Some(p) = &opts.profile {
            if p.is_empty()
                || !p
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(ConfigError::Flag(format!(
                    "profile `{p}`: use letters, digits, `-` and `_` only"
                )));
            }
            fig = file_layer(fig, o, &format!("config/config.{p}.yaml"), "profile", &[]);
            fig = file_layer(fig, o, &format!("config/agents.{p}.yaml"), "profile", &[]);
        }
        if opts.use_env {
            fig = fig.merge(
                Env::prefixed("STRATA_")
                    .filter(|k| is_config_env(k.as_str()))
                    .split("__"),
            );
        }
        if let Some(d) = &opts.data_dir {
            fig = fig.merge(Labeled {
                inner: Serialized::default("data_dir", d),
                label: "flag:--data-dir".into(),
                file: None,
                nest: vec![],
            });
        }
        for ov in &opts.overrides {
            let Some((key, raw)) = ov.split_once('=') else {
                return Err(ConfigError::Flag(format!(
                    "--set `{ov}`: expected KEY=VALUE, e.g. --set server.port=9000"
                )));
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(ConfigError::Flag(format!("--set `{ov}`: the key is empty")));
            }
            let value: FValue = raw.parse().unwrap_or_else(|_| FValue::from(raw.to_owned()));
            fig = fig.merge(Labeled {
                inner: Serialized::default(key, value),
                label: format!("flag:--set {key}"),
                file: None,
                nest: vec![],
            });
        }

        let mut config: Config = fig.extract().map_err(|e| describe(&fig, e))?;
        for m in &opts.modules {
            if let Some(validate) = m.validate {
                validate(&fig, &format!("modules.{}", m.name)).map_err(|e| describe(&fig, *e))?;
            }
        }
        let known: Vec<&str> = opts.modules.iter().map(|m| m.name.as_str()).collect();
        if let Some(unknown) = config.modules.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(ConfigError::UnknownModule {
                name: unknown.clone(),
                origin: origin_label(&fig, &format!("modules.{unknown}")),
                suggestion: suggest(unknown, &known).map(str::to_owned),
                known: known.iter().map(|s| (*s).to_owned()).collect(),
            });
        }
        // What a layer turned off is gone before anything sees it.
        config.agents.retain(|_, a| a.enabled);
        config.connectors.discord.accounts.retain(|_, a| a.enabled);
        let data_dir = match &config.data_dir {
            Some(d) if d.is_absolute() => d.clone(),
            Some(d) => overlay_dir.join(d),
            None => overlay_dir.join("data"),
        };
        Ok(LoadedConfig {
            config,
            overlay_dir,
            data_dir,
            profile: opts.profile.clone(),
            figment: fig,
            module_dirs: opts
                .modules
                .iter()
                .filter_map(|m| m.config_dir.clone())
                .collect(),
            modules: opts.modules.clone(),
        })
    }

    /// Finds a config file by name: overlay `config/`, then modules (last declared first),
    /// then the engine's own `config/`.
    pub fn resolve_config_file(&self, name: &str) -> Option<PathBuf> {
        let core = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/config"));
        std::iter::once(self.overlay_dir.join("config"))
            .chain(self.module_dirs.iter().rev().cloned())
            .chain(std::iter::once(core))
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    }

    /// The merged configuration as JSON with secrets masked (`vault:` references stay visible:
    /// they name a key, not a secret).
    pub fn masked(&self) -> Value {
        let mut v = serde_json::to_value(&self.config).unwrap_or(Value::Null);
        mask(&mut v);
        as_written(&mut v);
        v
    }

    /// Every leaf value (arrays count as leaves) with its dotted key and the layer that set it.
    pub fn origins(&self) -> Vec<(String, Value, String)> {
        let mut out = Vec::new();
        flatten("", &self.masked(), &mut out);
        out.into_iter()
            .map(|(k, v)| {
                let origin = origin_label(&self.figment, &k);
                (k, v, origin)
            })
            .collect()
    }
}

/// Numbers as they were written: an `f32` setting (`temperature: 0.2`) widens to
/// `0.20000000298023224` on its way into JSON; such a number is put back to the shortest
/// decimal that reads as the same `f32`.
fn as_written(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(x) = n.as_f64() {
                let narrow = x as f32;
                if f64::from(narrow) == x
                    && let Ok(short) = narrow.to_string().parse::<f64>()
                    && let Some(m) = serde_json::Number::from_f64(short)
                {
                    *n = m;
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(as_written),
        Value::Object(o) => o.values_mut().for_each(as_written),
        _ => {}
    }
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => out.push((prefix.to_owned(), other.clone())),
    }
}

/// The variable that sets a dotted key: `server.port` → `STRATA_SERVER__PORT`.
fn env_var_name(key: &str) -> String {
    format!("STRATA_{}", key.replace('.', "__").to_ascii_uppercase())
}

/// Which layer set `key`: our labels, or the environment variable's name.
fn origin_label(fig: &Figment, key: &str) -> String {
    match fig.find_metadata(key) {
        Some(md) if md.name.contains("environment") => format!("env:{}", env_var_name(key)),
        Some(md) => md.name.to_string(),
        // A key with no value of its own (an empty map) came from the defaults.
        None => "core".into(),
    }
}

fn mask(v: &mut Value) {
    if let Value::Object(m) = v {
        for (k, val) in m.iter_mut() {
            match val {
                Value::String(s) if crate::secret::is_secret_key(k) && !s.starts_with("vault:") => {
                    *s = "********".into();
                }
                // A NATS URL may list several servers, each with its password.
                Value::String(s) if k == "url" || k.ends_with("_url") => {
                    *s = s
                        .split(',')
                        .map(super::mask_url_password)
                        .collect::<Vec<_>>()
                        .join(",")
                }
                other => mask(other),
            }
        }
    } else if let Value::Array(items) = v {
        items.iter_mut().for_each(mask);
    }
}

/// The closest candidate to `word`, if any is close enough to be a plausible typo.
pub fn suggest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(word, c), *c))
        .filter(|(score, _)| *score >= 0.75)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// Turns figment's errors into one message naming the file (or variable), the key and a fix.
fn describe(fig: &Figment, err: figment::Error) -> ConfigError {
    let mut lines = Vec::new();
    for e in err {
        let key = e.path.join(".");
        let source = match &e.metadata {
            Some(md) if md.name.contains("environment") => {
                format!("environment variable {}", env_var_name(&key))
            }
            Some(md) => match &md.source {
                Some(figment::Source::File(p)) => p.display().to_string(),
                _ => md.name.to_string(),
            },
            None => "configuration".into(),
        };
        let line = match &e.kind {
            figment::error::Kind::UnknownField(field, expected) => {
                // figment's path already ends with the unknown key; hints name its siblings.
                let full = if e.path.last() == Some(field) || key.is_empty() {
                    if key.is_empty() {
                        field.clone()
                    } else {
                        key.clone()
                    }
                } else {
                    format!("{key}.{field}")
                };
                let parent = full
                    .rsplit_once('.')
                    .map(|(p, _)| p.to_owned())
                    .unwrap_or_default();
                // The metadata of an unknown key's error is its parent's; ask for the key's own.
                let origin = match fig.find_metadata(&full) {
                    Some(md) => match &md.source {
                        Some(figment::Source::File(p)) => p.display().to_string(),
                        _ if md.name.contains("environment") => {
                            format!("environment variable {}", env_var_name(&full))
                        }
                        _ => md.name.to_string(),
                    },
                    None => source.clone(),
                };
                Problem {
                    source: origin,
                    key: full,
                    kind: ProblemKind::UnknownKey {
                        suggestion: suggest(field, expected).map(|s| {
                            if parent.is_empty() {
                                s.to_owned()
                            } else {
                                format!("{parent}.{s}")
                            }
                        }),
                        valid: expected.iter().map(|s| (*s).to_owned()).collect(),
                    },
                }
            }
            figment::error::Kind::UnknownVariant(v, expected) => Problem {
                source,
                key,
                kind: ProblemKind::NotAllowed {
                    value: v.clone(),
                    suggestion: suggest(v, expected).map(str::to_owned),
                    allowed: expected.iter().map(|s| (*s).to_owned()).collect(),
                },
            },
            kind => Problem {
                source,
                key,
                kind: ProblemKind::Other(kind.to_string()),
            },
        };
        lines.push(line);
    }
    ConfigError::Invalid(lines)
}

/// Used by `declare_module!`: checks `modules.<name>` against the module's config type.
pub fn validate_module_section<T: serde::de::DeserializeOwned>(
    fig: &Figment,
    key: &str,
) -> Result<(), Box<figment::Error>> {
    match fig.find_value(key) {
        Ok(_) => {}
        Err(e) if e.missing() => return Ok(()),
        Err(e) => return Err(Box::new(e)),
    }
    // `focus` + our own prefix: `extract_inner` appends the key to paths instead of
    // prepending it, which would garble the key in messages.
    let prefix: Vec<String> = key.split('.').map(str::to_owned).collect();
    fig.focus(key).extract::<T>().map(|_| ()).map_err(|err| {
        let fixed: Vec<figment::Error> = err
            .into_iter()
            .map(|mut e| {
                let mut path = prefix.clone();
                path.append(&mut e.path);
                e.path = path;
                e
            })
            .collect();
        let mut it = fixed.into_iter().rev();
        let last = it
            .next()
            .unwrap_or_else(|| figment::Error::from("invalid module section"));
        Box::new(it.fold(last, |acc, e| e.chain(acc)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_keys_match_the_config_struct() {
        let v = serde_json::to_value(Config::default()).expect("ser");
        let mut keys: Vec<&str> = v
            .as_object()
            .expect("obj")
            .keys()
            .map(String::as_str)
            .collect();
        let mut listed = TOP_LEVEL_KEYS.to_vec();
        keys.sort_unstable();
        listed.sort_unstable();
        assert_eq!(keys, listed);
    }

    #[test]
    fn env_filter_takes_nested_keys_and_top_level_names_only() {
        assert!(is_config_env("SERVER__PORT"));
        assert!(is_config_env("DATA_DIR"));
        assert!(
            is_config_env("servr__port"),
            "typos still reach the unknown-key check"
        );
        assert!(!is_config_env("OVERLAY"));
        assert!(!is_config_env("PROFILE"));
        assert!(!is_config_env("VAULT_PASSPHRASE"));
        assert!(!is_config_env("AGENT_MAIN_MODEL"));
    }

    #[test]
    fn suggestions_need_to_be_close() {
        assert_eq!(suggest("prot", &["bind", "port"]), Some("port"));
        assert_eq!(suggest("tool", &["tools", "team"]), Some("tools"));
        assert_eq!(suggest("zzzzqqq", &["tools", "team"]), None);
    }
}
