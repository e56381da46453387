//! Agents that extend themselves, with a person deciding: `create_skill` writes a skill file,
//! `install_mcp` adds an MCP server to `config/mcp.yaml` and starts it. Both wait for a
//! person's approval (`hitl`), are for owners only, never overwrite without `replace: true`,
//! and write atomically keeping the file's permissions.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use strata_engine::access::Tier;
use strata_engine::config::{Access, McpConfig, McpServerConfig, McpTransport};
use strata_engine::{ToolContext, ToolError, tool};
use strata_runtime::skills::{Param, SkillDef};

/// Owners only: a person, a token or the operator with the owner tier (in a turn, the person
/// talking to the agent).
fn require_owner(ctx: &ToolContext, what: &str) -> Result<(), ToolError> {
    match ctx.policy.tier(&ctx.principal) {
        Tier::Person(Access::Owner) => Ok(()),
        t => Err(ToolError::failed(format!(
            "denied: {what} is for owners ({} is {t})",
            ctx.principal
        ))),
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename: readers see the old file
/// or the new one. A replaced file keeps its permissions; an existing file is refused unless
/// `replace`; a symlink is never written through.
pub(crate) fn write_file(path: &Path, bytes: &[u8], replace: bool) -> Result<bool, String> {
    let shown = path.display();
    let current = match std::fs::symlink_metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    if let Some(m) = &current {
        if !m.is_file() {
            return Err(format!("{shown} is not a regular file; refused"));
        }
        if !replace {
            return Err(format!(
                "{shown} exists; pass `replace: true` to overwrite it"
            ));
        }
    }
    let dir = path
        .parent()
        .ok_or_else(|| format!("{shown} has no directory"))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        if let Some(m) = &current {
            f.set_permissions(m.permissions())?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {shown}: {e}")
    })?;
    Ok(current.is_some())
}

/// Writes a skill — a `prompt` template an agent runs, or a `command` run in the sandbox —
/// into the overlay's `skills/` (or `agents/<agent>/skills/`), where the running server picks
/// it up. `params`: `{name: {type, description, required, choices, default}}`, used in the
/// template as `{name}`. Waits for a person's approval; owners only.
#[tool(capabilities = [file_write], side_effects = local, hitl, timeout_secs = 30)]
#[allow(clippy::too_many_arguments)]
async fn create_skill(
    ctx: &ToolContext,
    /// a-z, 0-9, `-` and `_`.
    name: String,
    /// What it does (shown to agents and people).
    description: String,
    /// A prompt template (one of `prompt` or `command`).
    prompt: Option<String>,
    /// A shell command template, run sandboxed (one of `prompt` or `command`).
    command: Option<String>,
    /// Parameters: `{name: {type, description, required, choices, default}}`.
    params: Option<Map<String, Value>>,
    /// Prompt skills: the tools the agent may use while running it.
    tools: Option<Vec<String>>,
    /// Prompt skills: most model rounds.
    max_rounds: Option<u32>,
    /// Write it among this agent's own skills instead of the overlay's.
    agent: Option<String>,
    /// Overwrite a skill file of the same name.
    replace: Option<bool>,
) -> Result<Value, ToolError> {
    require_owner(ctx, "`create_skill`")?;
    let mut parameters = Vec::new();
    for (k, v) in params.unwrap_or_default() {
        let p: Param = serde_json::from_value(v)
            .map_err(|e| ToolError::invalid("params", format!("parameter `{k}`: {e}")))?;
        parameters.push((k, p));
    }
    let def = SkillDef {
        name: name.clone(),
        description,
        parameters,
        prompt,
        command,
        tools,
        max_rounds,
        llm: None,
        timeout_secs: None,
        gated: None,
        network: None,
    };
    let dir = match &agent {
        Some(a) => {
            if !ctx.env.config.agents.contains_key(a) {
                return Err(ToolError::invalid("agent", format!("no agent `{a}`")));
            }
            ctx.env.overlay_dir.join("agents").join(a).join("skills")
        }
        None => ctx.env.overlay_dir.join("skills"),
    };
    let path = dir.join(format!("{name}.yaml"));
    let text = yaml_serde::to_string(&def)
        .map_err(|e| ToolError::failed(format!("cannot write the skill: {e}")))?;
    // Checked as the loader will read it: a file that would not load is never written.
    strata_runtime::skills::parse_str(&text, &path)
        .map_err(|e| ToolError::invalid(".", e.to_string()))?;
    let replaced =
        write_file(&path, text.as_bytes(), replace.unwrap_or(false)).map_err(ToolError::failed)?;
    let shown = path
        .strip_prefix(&ctx.env.overlay_dir)
        .unwrap_or(&path)
        .display()
        .to_string();
    let skill = match &agent {
        Some(a) => format!("{a}:{name}"),
        None => name.clone(),
    };
    Ok(json!({
        "skill": skill,
        "path": shown,
        "replaced": replaced,
        "kind": if def.command.is_some() { "command" } else { "prompt" },
        "note": "a running server loads it within seconds (skills are watched)",
    }))
}

/// Key prefixes of well-known credentials, refused as literal values.
const KEY_PREFIXES: &[&str] = &["sk-", "ghp_", "github_pat_", "xox", "glpat-", "AKIA"];

/// Secrets only as `vault:` references: a value under a secret-sounding name, or one that
/// looks like a known credential, must be `vault:<key>`.
fn check_secrets(field: &str, map: &BTreeMap<String, String>) -> Result<(), ToolError> {
    for (k, v) in map {
        if v.starts_with("vault:") {
            continue;
        }
        let keyish = KEY_PREFIXES.iter().any(|p| v.starts_with(p));
        if strata_engine::secret::is_secret_key(k) || keyish {
            return Err(ToolError::invalid(
                field,
                format!(
                    "`{k}` holds a secret: give it as a vault reference (`vault:<key>`, stored \
                     with `strata vault set <key>`), never the value"
                ),
            ));
        }
    }
    Ok(())
}

fn mcp_file(ctx: &ToolContext) -> PathBuf {
    ctx.env.overlay_dir.join("config").join("mcp.yaml")
}

/// `text` (the current `config/mcp.yaml`, possibly empty) with server `name` added or
/// replaced. A new server is inserted as lines under `servers:` so the file's comments and
/// layout stay; a replaced one (or a file in another layout) is written out whole.
fn with_server(text: &str, name: &str, server: &McpServerConfig) -> Result<String, String> {
    let block = yaml_serde::to_string(&BTreeMap::from([(name.to_owned(), server)]))
        .map_err(|e| e.to_string())?;
    let current: McpConfig = if text.trim().is_empty() {
        McpConfig::default()
    } else {
        yaml_serde::from_str(text).map_err(|e| format!("config/mcp.yaml does not parse: {e}"))?
    };
    let mut wanted = current.clone();
    wanted.servers.insert(name.to_owned(), server.clone());
    // In place: after a top-level `servers:` line, indented like its first entry.
    if !current.servers.contains_key(name) {
        let lines: Vec<&str> = text
            .lines()
            .map(|l| {
                // An empty flow mapping becomes the block the server goes into.
                if l.trim_end() == "servers: {}" {
                    "servers:"
                } else {
                    l
                }
            })
            .collect();
        if let Some(at) = lines.iter().position(|l| l.trim_end() == "servers:") {
            let indent = lines[at + 1..]
                .iter()
                .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .map(|l| l.len() - l.trim_start().len())
                .filter(|n| *n > 0)
                .unwrap_or(2);
            let pad = " ".repeat(indent);
            let mut out: Vec<String> = lines[..=at].iter().map(|l| (*l).to_owned()).collect();
            out.extend(block.lines().map(|l| format!("{pad}{l}")));
            out.extend(lines[at + 1..].iter().map(|l| (*l).to_owned()));
            let mut edited = out.join("\n");
            edited.push('\n');
            if yaml_serde::from_str::<McpConfig>(&edited).ok().as_ref() == Some(&wanted) {
                return Ok(edited);
            }
        }
    }
    let mut whole =
        String::from("# External MCP servers (docs/TOOLS.md); written by install_mcp.\n");
    whole.push_str(&yaml_serde::to_string(&wanted).map_err(|e| e.to_string())?);
    Ok(whole)
}

/// Adds an external MCP server to `config/mcp.yaml` and, in a running server, starts it and
/// registers its tools (`<name>__<tool>`). `transport`: `stdio` (`command`, `args`) or `http`
/// (`url`, `headers`). Secrets only as `vault:<key>` references. Waits for a person's
/// approval; owners only.
#[tool(capabilities = [file_write, subprocess, network], side_effects = external, hitl, timeout_secs = 90)]
#[allow(clippy::too_many_arguments)]
async fn install_mcp(
    ctx: &ToolContext,
    /// a-z, 0-9, `-` and `_` (its tools are named `<name>__<tool>`).
    name: String,
    /// `stdio` or `http`.
    transport: String,
    /// stdio: the program.
    command: Option<String>,
    /// http: the endpoint.
    url: Option<String>,
    /// stdio: its arguments.
    args: Option<Vec<String>>,
    /// stdio: its environment (secrets as `vault:<key>`).
    env: Option<BTreeMap<String, String>>,
    /// http: headers (secrets as `vault:<key>`).
    headers: Option<BTreeMap<String, String>>,
    /// Overwrite a server of the same name.
    replace: Option<bool>,
) -> Result<Value, ToolError> {
    require_owner(ctx, "`install_mcp`")?;
    if let Some(why) = ctx.env.mcp().and_then(|h| h.unavailable()) {
        return Err(ToolError::failed(why));
    }
    let valid = !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !name.contains("__");
    if !valid {
        return Err(ToolError::invalid(
            "name",
            "a-z, 0-9, `-` and `_` (no `__`), at most 40",
        ));
    }
    let transport = match transport.as_str() {
        "stdio" => McpTransport::Stdio,
        "http" => McpTransport::Http,
        other => {
            return Err(ToolError::invalid(
                "transport",
                format!("`{other}` is not stdio or http"),
            ));
        }
    };
    let env = env.unwrap_or_default();
    let headers = headers.unwrap_or_default();
    check_secrets("env", &env)?;
    check_secrets("headers", &headers)?;
    // A reference the vault cannot answer would only fail at start: say so now.
    for (field, map) in [("env", &env), ("headers", &headers)] {
        for (k, v) in map {
            strata_engine::secret::resolve_ref(
                v,
                ctx.env.vault.as_deref(),
                &format!("{field}.{k}"),
            )
            .map_err(|e| {
                ToolError::invalid(
                    field,
                    format!("{e}; store it first with `strata vault set`"),
                )
            })?;
        }
    }
    match transport {
        McpTransport::Stdio if command.as_deref().is_none_or(str::is_empty) => {
            return Err(ToolError::invalid("command", "stdio needs `command`"));
        }
        McpTransport::Http => {
            let u = url
                .as_deref()
                .ok_or_else(|| ToolError::invalid("url", "http needs `url`"))?;
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(ToolError::invalid("url", "http:// or https://"));
            }
        }
        McpTransport::Stdio => {}
    }
    let server = McpServerConfig {
        transport,
        command: command.filter(|_| transport == McpTransport::Stdio),
        args: args.unwrap_or_default(),
        env,
        url: url.filter(|_| transport == McpTransport::Http),
        headers,
        // What a model installs is untrusted until an operator says otherwise in the file.
        trust: Default::default(),
        trust_reads: false,
        tools: Default::default(),
    };
    let path = mcp_file(ctx);
    let replace = replace.unwrap_or(false);
    let (p, srv, n) = (path.clone(), server.clone(), name.clone());
    let replaced = tokio::task::spawn_blocking(move || -> Result<bool, String> {
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("{}: {e}", p.display())),
        };
        let exists = !text.trim().is_empty()
            && yaml_serde::from_str::<McpConfig>(&text)
                .map_err(|e| format!("config/mcp.yaml does not parse: {e}"))?
                .servers
                .contains_key(&n);
        if exists && !replace {
            return Err(format!(
                "MCP server `{n}` is in config/mcp.yaml; pass `replace: true` to overwrite it"
            ));
        }
        let new = with_server(&text, &n, &srv)?;
        write_file(&p, new.as_bytes(), true)?;
        Ok(exists)
    })
    .await
    .map_err(|e| ToolError::failed(format!("install_mcp stopped: {e}")))?
    .map_err(ToolError::failed)?;
    let started = match ctx.env.mcp() {
        Some(host) if !replaced => match host.add_server(&name, server).await {
            Ok(tools) => json!({"started": true, "tools": tools}),
            Err(e) => json!({"started": false, "why": e}),
        },
        Some(_) => {
            json!({"started": false, "why": "replaced: the new settings apply when serve restarts"})
        }
        None => {
            json!({"started": false, "why": "no server runs in this process: `serve` starts it at its next start"})
        }
    };
    let mut out = json!({"server": name, "path": "config/mcp.yaml", "replaced": replaced});
    if let (Some(o), Value::Object(s)) = (out.as_object_mut(), started) {
        o.extend(s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(cmd: &str) -> McpServerConfig {
        McpServerConfig {
            transport: McpTransport::Stdio,
            command: Some(cmd.into()),
            args: vec!["--flag".into()],
            env: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
            trust: Default::default(),
            trust_reads: false,
            tools: BTreeMap::new(),
        }
    }

    #[test]
    fn a_new_server_is_added_in_place_keeping_comments() {
        let text = "# our servers\nservers:\n    # the file system one\n    files:\n        transport: stdio\n        command: mcp-files\n";
        let out = with_server(text, "peer", &stdio("peer-mcp")).expect("edit");
        assert!(out.starts_with("# our servers\nservers:\n"), "{out}");
        assert!(out.contains("# the file system one"), "{out}");
        let cfg: McpConfig = yaml_serde::from_str(&out).expect("parses");
        assert_eq!(cfg.servers.len(), 2);
        assert_eq!(cfg.servers["peer"], stdio("peer-mcp"));
        // `servers: {}` becomes a block, comments kept.
        let out = with_server("# mine\nservers: {}\n", "peer", &stdio("x")).expect("edit");
        assert!(out.starts_with("# mine\nservers:\n  peer:\n"), "{out}");
        // Empty file: written whole.
        let out = with_server("", "peer", &stdio("x")).expect("new");
        let cfg: McpConfig = yaml_serde::from_str(&out).expect("parses");
        assert_eq!(cfg.servers["peer"], stdio("x"));
    }

    #[test]
    fn secrets_must_be_vault_references() {
        let ok = BTreeMap::from([
            ("API_KEY".to_owned(), "vault:files-key".to_owned()),
            ("LOG_LEVEL".to_owned(), "debug".to_owned()),
        ]);
        assert!(check_secrets("env", &ok).is_ok());
        for (k, v) in [
            ("API_KEY", "abc123"),
            ("OTHER", "sk-live-0123456789"),
            ("Authorization", "Bearer x"),
        ] {
            let bad = BTreeMap::from([(k.to_owned(), v.to_owned())]);
            assert!(check_secrets("env", &bad).is_err(), "{k}={v}");
        }
    }

    #[test]
    fn files_are_replaced_only_when_asked_and_keep_their_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("skills/x.yaml");
        assert_eq!(write_file(&p, b"one", false), Ok(false));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        assert!(write_file(&p, b"two", false).is_err());
        assert_eq!(std::fs::read(&p).expect("read"), b"one");
        assert_eq!(write_file(&p, b"two", true), Ok(true));
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        let link = dir.path().join("skills/link.yaml");
        std::os::unix::fs::symlink(&p, &link).expect("symlink");
        assert!(write_file(&link, b"three", true).is_err());
    }
}
