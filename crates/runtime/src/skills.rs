//! Skills: named, parameterised tasks in YAML — a prompt template run by an agent, or a
//! command run with no model.
//!
//! ```yaml
//! name: disk-report
//! description: Reports disk usage of the data directory.
//! parameters:
//!   path: {type: string, description: Directory to measure, required: true}
//!   unit: {type: string, choices: [k, m, g]}
//! command: du -s{unit} {path}         # or: prompt: "Summarise {path}…"
//! tools: [list_files]                 # prompt skills: restrict the agent's tools
//! max_rounds: 4
//! ```
//!
//! Discovery, later wins: core → modules → overlay `skills/` → `agents/<id>/skills/` (those
//! are named `<id>:<name>`). A file that fails to parse keeps its previous version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use strata_engine::config::LlmConfig;

/// A parameter's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    /// Text (default).
    #[default]
    String,
    /// Whole number.
    Integer,
    /// Any number.
    Number,
    /// `true`/`false`.
    Boolean,
}

/// One parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// Type.
    #[serde(default, rename = "type")]
    pub kind: ParamType,
    /// What it is.
    #[serde(default)]
    pub description: String,
    /// Must be given.
    #[serde(default)]
    pub required: bool,
    /// Allowed values.
    #[serde(default)]
    pub choices: Vec<String>,
    /// Value when not given.
    #[serde(default)]
    pub default: Option<String>,
}

/// A skill as written in its file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillDef {
    /// Name (`[a-z0-9_-]`).
    pub name: String,
    /// What it does.
    pub description: String,
    /// Parameters in order.
    #[serde(default, with = "ordered")]
    pub parameters: Vec<(String, Param)>,
    /// Prompt template with `{param}` placeholders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Command template (run with `sh -c`, values shell-quoted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Tools the agent may use while running it (intersected with the agent's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Round limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<u32>,
    /// Provider pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmConfig>,
    /// Command timeout in seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Command skills: every call waits for a human's approval (default `true`; `false` lets
    /// access control alone decide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gated: Option<bool>,
    /// Command skills: the command may reach the network (default `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
}

mod ordered {
    //! Parameters as a YAML mapping, keeping the file's order.
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Param;

    pub fn serialize<S: Serializer>(v: &[(String, Param)], s: S) -> Result<S::Ok, S::Error> {
        let m: yaml_serde::Mapping = v
            .iter()
            .map(|(k, p)| {
                (
                    yaml_serde::Value::String(k.clone()),
                    yaml_serde::to_value(p).unwrap_or(yaml_serde::Value::Null),
                )
            })
            .collect();
        m.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, Param)>, D::Error> {
        let m = yaml_serde::Mapping::deserialize(d)?;
        m.into_iter()
            .map(|(k, v)| {
                let name = k
                    .as_str()
                    .ok_or_else(|| serde::de::Error::custom("parameter names must be strings"))?
                    .to_owned();
                let p: Param = yaml_serde::from_value(v)
                    .map_err(|e| serde::de::Error::custom(format!("parameter `{name}`: {e}")))?;
                Ok((name, p))
            })
            .collect()
    }
}

/// Why a skill's parameters were refused; each names the parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// A value for a parameter the skill does not declare.
    #[error("skill `{skill}` has no parameter `{name}` (parameters: {known})")]
    Unknown {
        /// The skill.
        skill: String,
        /// The parameter given.
        name: String,
        /// The parameters it has, comma-separated, or `none`.
        known: String,
    },
    /// A required parameter with no value and no default.
    #[error("skill `{skill}` needs parameter `{name}`")]
    Missing {
        /// The skill.
        skill: String,
        /// The parameter.
        name: String,
    },
    /// A value with a NUL byte.
    #[error("parameter `{name}` contains a NUL byte, which no command or prompt can carry")]
    Nul {
        /// The parameter.
        name: String,
    },
    /// A value outside the parameter's choices.
    #[error("parameter `{name}` must be one of {choices}, got `{given}`")]
    NotAChoice {
        /// The parameter.
        name: String,
        /// Its choices, comma-separated.
        choices: String,
        /// The value given.
        given: String,
    },
    /// A value that is not of the parameter's type.
    #[error("parameter `{name}` must be {kind}, got `{given}`")]
    WrongType {
        /// The parameter.
        name: String,
        /// Its type: `integer`, `number`, `boolean`.
        kind: String,
        /// The value given.
        given: String,
    },
    /// A tool call's arguments that are not a JSON object.
    #[error("the arguments must be a JSON object")]
    NotAnObject,
    /// An argument that is an array, an object or null.
    #[error("parameter `{name}` must be a string, number or boolean")]
    NotAScalar {
        /// The parameter.
        name: String,
    },
}

/// A loaded skill with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// Full name (`<agent>:<name>` for agent skills).
    pub name: String,
    /// The definition.
    pub def: SkillDef,
    /// The file.
    pub path: PathBuf,
    /// `core`, `module:<m>`, `overlay`, `agent:<id>`.
    pub origin: String,
}

/// The tool a command skill runs as: `skill__<name>`, with `:` (agent skills) written `__`
/// and anything else outside `[A-Za-z0-9_-]` as `_`. Names over 64 characters (what every
/// provider accepts) keep their first 55 and end in `-` and 8 hex digits of a hash of the
/// whole name, so they stay distinct.
pub fn tool_name(skill: &str) -> String {
    let mut name = String::from("skill__");
    for c in skill.chars() {
        match c {
            ':' => name.push_str("__"),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => name.push(c),
            _ => name.push('_'),
        }
    }
    if name.len() <= 64 {
        return name;
    }
    // FNV-1a: stable across builds and platforms (std's hasher is not).
    let hash = skill.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{}-{:08x}", &name[..55], hash as u32)
}

/// What a skill does.
pub enum SkillAction<'a> {
    /// Ask the agent this.
    Prompt(String),
    /// Run this shell command.
    Command(String),
    /// Neither or both set (reported at load).
    Invalid(&'a str),
}

impl Skill {
    /// How a listing shows the skill (`strata skill list --json`, `GET /api/agents`): name,
    /// description, kind (`command` or `prompt`), origin and the tool that runs it.
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "description": self.def.description,
            "kind": if self.def.command.is_some() { "command" } else { "prompt" },
            "origin": self.origin,
            "tool": tool_name(&self.name),
        })
    }

    /// Checks `given` against the parameters; returns every parameter's value (defaults
    /// filled in). Errors name the parameter.
    pub fn bind(
        &self,
        given: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, ParamError> {
        for k in given.keys() {
            if !self.def.parameters.iter().any(|(n, _)| n == k) {
                let known: Vec<&str> = self
                    .def
                    .parameters
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect();
                return Err(ParamError::Unknown {
                    skill: self.name.clone(),
                    name: k.clone(),
                    known: if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    },
                });
            }
        }
        let mut out = BTreeMap::new();
        for (name, p) in &self.def.parameters {
            let v = match given.get(name).or(p.default.as_ref()) {
                Some(v) => v.clone(),
                None if p.required => {
                    return Err(ParamError::Missing {
                        skill: self.name.clone(),
                        name: name.clone(),
                    });
                }
                None => String::new(),
            };
            if v.contains('\0') {
                return Err(ParamError::Nul { name: name.clone() });
            }
            if !v.is_empty() {
                if !p.choices.is_empty() && !p.choices.contains(&v) {
                    return Err(ParamError::NotAChoice {
                        name: name.clone(),
                        choices: p.choices.join(", "),
                        given: v,
                    });
                }
                let ok = match p.kind {
                    ParamType::String => true,
                    ParamType::Integer => v.parse::<i64>().is_ok(),
                    ParamType::Number => v.parse::<f64>().is_ok(),
                    ParamType::Boolean => matches!(v.as_str(), "true" | "false"),
                };
                if !ok {
                    return Err(ParamError::WrongType {
                        name: name.clone(),
                        kind: format!("{:?}", p.kind).to_lowercase(),
                        given: v,
                    });
                }
            }
            out.insert(name.clone(), v);
        }
        Ok(out)
    }

    /// Whether this is a command skill (run as the tool [`tool_name`]).
    pub fn is_command(&self) -> bool {
        self.def.command.is_some()
    }

    /// The JSON Schema of the skill's parameters, as its tool takes them: strings (with
    /// `enum` for choices), integers, numbers, booleans; required ones listed.
    pub fn input_schema(&self) -> serde_json::Value {
        use serde_json::json;
        let mut props = serde_json::Map::new();
        let mut required = Vec::new();
        for (name, p) in &self.def.parameters {
            let mut s = match p.kind {
                ParamType::String => json!({"type": "string"}),
                ParamType::Integer => json!({"type": "integer"}),
                ParamType::Number => json!({"type": "number"}),
                ParamType::Boolean => json!({"type": "boolean"}),
            };
            if !p.description.is_empty() {
                s["description"] = json!(p.description);
            }
            if !p.choices.is_empty() && p.kind == ParamType::String {
                s["enum"] = json!(p.choices);
            }
            props.insert(name.clone(), s);
            if p.required && p.default.is_none() {
                required.push(name.clone());
            }
        }
        json!({"type": "object", "properties": props, "required": required,
               "additionalProperties": false})
    }

    /// Tool arguments from `key=value` text (the CLI's `--param`, a slash command's options):
    /// integers, numbers and booleans become JSON of their type when they parse, and stay
    /// text otherwise (the tool's schema then names the parameter that is wrong).
    pub fn args_from_strings(&self, given: &BTreeMap<String, String>) -> serde_json::Value {
        let obj = given
            .iter()
            .map(|(k, v)| {
                let kind = self
                    .def
                    .parameters
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, p)| p.kind);
                let typed = match kind {
                    Some(ParamType::Integer) => v.parse::<i64>().ok().map(serde_json::Value::from),
                    Some(ParamType::Number) => v
                        .parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map(serde_json::Value::Number),
                    Some(ParamType::Boolean) => v.parse::<bool>().ok().map(serde_json::Value::Bool),
                    _ => None,
                };
                (
                    k.clone(),
                    typed.unwrap_or_else(|| serde_json::Value::String(v.clone())),
                )
            })
            .collect();
        serde_json::Value::Object(obj)
    }

    /// The values a tool call's arguments give, as text for [`Self::bind`].
    pub fn strings_from_args(
        &self,
        args: &serde_json::Value,
    ) -> Result<BTreeMap<String, String>, ParamError> {
        let Some(obj) = args.as_object() else {
            return Err(ParamError::NotAnObject);
        };
        obj.iter()
            .map(|(k, v)| {
                let text = match v {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Number(n) => n.to_string(),
                    serde_json::Value::Bool(b) => b.to_string(),
                    _ => {
                        return Err(ParamError::NotAScalar { name: k.clone() });
                    }
                };
                Ok((k.clone(), text))
            })
            .collect()
    }

    /// The prompt or command with values substituted (shell-quoted for commands).
    pub fn render(&self, values: &BTreeMap<String, String>) -> SkillAction<'_> {
        match (&self.def.prompt, &self.def.command) {
            (Some(p), None) => SkillAction::Prompt(substitute(p, values, |v| v.to_owned())),
            (None, Some(c)) => SkillAction::Command(substitute(c, values, shell_quote)),
            _ => SkillAction::Invalid("a skill needs exactly one of `prompt` or `command`"),
        }
    }
}

/// Replaces each `{name}` of a known parameter in one left-to-right pass over the template:
/// a value is inserted once and never scanned again, so a value that itself contains `{b}`
/// stays text (substituting parameter by parameter over already-substituted text let one
/// value splice another's quoted value inside its own quotes). Braces that do not name a
/// parameter are kept as written.
fn substitute(
    t: &str,
    values: &BTreeMap<String, String>,
    quote: impl Fn(&str) -> String,
) -> String {
    let mut out = String::with_capacity(t.len());
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after
            .find('}')
            .and_then(|close| values.get(&after[..close]).map(|v| (close, v)));
        match value {
            Some((close, v)) => {
                out.push_str(&quote(v));
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Single-quotes a value for `sh` so it can never become syntax.
pub fn shell_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', r"'\''"))
}

/// Why a skill file is not a skill. Every message starts with the file's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    /// The file cannot be read.
    #[error("{0}")]
    Unreadable(String),
    /// Not YAML, or not a skill's fields.
    #[error("{0}")]
    Syntax(String),
    /// A skill's fields that break a rule (its name, `prompt` or `command`).
    #[error("{0}")]
    Invalid(String),
}

/// Parses and checks one skill file.
pub fn parse_file(path: &Path) -> Result<SkillDef, SkillError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SkillError::Unreadable(format!("{}: {e}", path.display())))?;
    parse_str(&text, path)
}

/// Parses and checks a skill's YAML text; errors name `path`.
pub fn parse_str(text: &str, path: &Path) -> Result<SkillDef, SkillError> {
    let def: SkillDef = yaml_serde::from_str(text)
        .map_err(|e| SkillError::Syntax(format!("{}: {e}", path.display())))?;
    let valid_name = !def.name.is_empty()
        && def
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid_name {
        return Err(SkillError::Invalid(format!(
            "{}: name `{}` must use a-z, 0-9, `-` and `_`",
            path.display(),
            def.name
        )));
    }
    if def.prompt.is_some() == def.command.is_some() {
        return Err(SkillError::Invalid(format!(
            "{}: a skill needs exactly one of `prompt` or `command`",
            path.display()
        )));
    }
    for (name, _) in &def.parameters {
        let used = def
            .prompt
            .iter()
            .chain(def.command.iter())
            .any(|t| t.contains(&format!("{{{name}}}")));
        if !used {
            tracing::debug!(skill = %def.name, param = %name, "parameter not used in the template");
        }
    }
    Ok(def)
}

/// A directory of skills and its layer.
#[derive(Debug, Clone)]
pub struct SkillDir {
    /// The directory.
    pub path: PathBuf,
    /// `core`, `module:<m>`, `overlay`, `agent:<id>`.
    pub origin: String,
    /// Name prefix (`<id>:` for agent skills).
    pub prefix: String,
}

/// Skill directories in precedence order for an overlay (core and module directories first).
pub fn skill_dirs(base: &[SkillDir], overlay: &Path) -> Vec<SkillDir> {
    let mut dirs = base.to_vec();
    dirs.push(SkillDir {
        path: overlay.join("skills"),
        origin: "overlay".into(),
        prefix: String::new(),
    });
    if let Ok(rd) = std::fs::read_dir(overlay.join("agents")) {
        let mut agents: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        agents.sort();
        for a in agents {
            let id = a
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            dirs.push(SkillDir {
                path: a.join("skills"),
                origin: format!("agent:{id}"),
                prefix: format!("{id}:"),
            });
        }
    }
    dirs
}

/// Skill directories of a loaded configuration in precedence order: modules (declared
/// order), the overlay's `skills/`, then each `agents/<id>/skills/`.
pub fn dirs_for(cfg: &strata_engine::config::LoadedConfig) -> Vec<SkillDir> {
    let base: Vec<SkillDir> = cfg
        .modules
        .iter()
        .filter_map(|m| {
            m.skills_dir.as_ref().map(|p| SkillDir {
                path: p.clone(),
                origin: format!("module:{}", m.name),
                prefix: String::new(),
            })
        })
        .collect();
    skill_dirs(&base, &cfg.overlay_dir)
}

/// The current skills; reloadable. Cheap to share.
#[derive(Default)]
pub struct SkillSet {
    current: RwLock<Arc<BTreeMap<String, Skill>>>,
    dirs: RwLock<Vec<SkillDir>>,
}

impl SkillSet {
    /// Loads skills from `dirs` (in precedence order).
    pub fn load(dirs: Vec<SkillDir>) -> Self {
        let s = SkillSet {
            current: RwLock::new(Arc::new(BTreeMap::new())),
            dirs: RwLock::new(dirs),
        };
        s.reload();
        s
    }

    /// Directories watched.
    pub fn dirs(&self) -> Vec<SkillDir> {
        self.dirs.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Re-reads every directory. A file that fails keeps the version loaded before (if any);
    /// its error is logged and returned.
    pub fn reload(&self) -> Vec<String> {
        let previous = self.snapshot();
        let mut next: BTreeMap<String, Skill> = BTreeMap::new();
        let mut errors = Vec::new();
        for dir in self.dirs() {
            let Ok(rd) = std::fs::read_dir(&dir.path) else {
                continue;
            };
            let mut files: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
                .collect();
            files.sort();
            for f in files {
                match parse_file(&f) {
                    Ok(def) => {
                        let name = format!("{}{}", dir.prefix, def.name);
                        if let Some(old) = next.get(&name) {
                            tracing::info!(skill = %name, winner = %dir.origin, hidden = %old.origin, "skill shadowed");
                        }
                        next.insert(
                            name.clone(),
                            Skill {
                                name,
                                def,
                                path: f,
                                origin: dir.origin.clone(),
                            },
                        );
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "skill not loaded; keeping the previous version");
                        if let Some(old) = previous.values().find(|s| s.path == f) {
                            next.insert(old.name.clone(), old.clone());
                        }
                        errors.push(e.to_string());
                    }
                }
            }
        }
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        errors
    }

    /// The skills now.
    pub fn snapshot(&self) -> Arc<BTreeMap<String, Skill>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One skill.
    pub fn get(&self, name: &str) -> Option<Skill> {
        self.snapshot().get(name).cloned()
    }
}

/// Runs a prompt skill as the skill says — its `tools` inside the agent's own, its
/// `max_rounds` and `llm` — where a surface (a Discord slash command) cannot build agents
/// itself; the launcher implements it as `strata skill run` does. The turn is a one-off: it
/// is answered, not stored in a session. Layer 1 applies.
#[async_trait::async_trait]
pub trait SkillTurns: Send + Sync {
    /// `req`'s message is the rendered prompt; `req.agent_id` the agent it runs as.
    async fn run_prompt_skill(
        &self,
        skill: &SkillDef,
        req: strata_engine::turns::TurnRequest,
    ) -> Result<strata_engine::message::Reply, strata_engine::message::AgentError>;
}
