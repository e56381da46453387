//! `strata doctor`'s deployment checks beyond config and sandbox: the vault holds what the
//! config references, the data directory is private, the service units are installed, and
//! (`--online`) providers and Discord accept their credentials.

use strata_engine::config::{LlmConfig, LoadedConfig};
use strata_engine::secret::{Vault, resolve_ref};

/// Findings by severity.
#[derive(Default)]
pub struct Findings {
    /// `ok` lines.
    pub ok: Vec<String>,
    /// `info` lines.
    pub info: Vec<String>,
    /// `warn` lines.
    pub warn: Vec<String>,
    /// `FAIL` lines (non-zero exit).
    pub fail: Vec<String>,
}

/// Every `vault:` reference answered? A missing key set by the team's own layers (overlay,
/// profile, environment, flags) fails; one that only a core or module default names warns
/// (the feature may simply be unused).
pub fn vault_refs(c: &LoadedConfig, vault: Option<&dyn Vault>, has_vault: bool, f: &mut Findings) {
    // Only the references the config uses: a default's in a section the team left alone
    // is not one.
    let mut held = 0;
    for crate::wiring::VaultRef { path, key, layer } in crate::wiring::vault_refs_in_use(c) {
        if vault.is_some_and(|v| v.get(&key).is_some()) {
            held += 1;
            continue;
        }
        let why = if vault.is_some() {
            "the vault does not hold it".to_owned()
        } else if has_vault {
            "the vault is not open (no passphrase)".to_owned()
        } else {
            "there is no vault (`strata vault init`)".to_owned()
        };
        let line = format!(
            "`{path}` (set by {layer}) refers to vault key `{key}`: {why}; `strata vault set {key} --from-stdin`"
        );
        if layer == "core" || layer.starts_with("module") {
            f.warn.push(line);
        } else {
            f.fail.push(line);
        }
    }
    if held > 0 {
        f.ok.push(format!(
            "vault holds the {held} key(s) the config references"
        ));
    }
}

/// The data directory must not be readable by other users (sessions, memory, audit).
pub fn data_dir_private(c: &LoadedConfig, f: &mut Findings) {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(&c.data_dir) {
        Ok(m) if m.permissions().mode() & 0o007 == 0 => f.ok.push(format!(
            "data dir {} is not readable by others ({:o})",
            c.data_dir.display(),
            m.permissions().mode() & 0o777
        )),
        Ok(m) => f.fail.push(format!(
            "data dir {} is readable by other users ({:o}): chmod 700 {}",
            c.data_dir.display(),
            m.permissions().mode() & 0o777,
            c.data_dir.display()
        )),
        Err(e) => f
            .fail
            .push(format!("data dir {}: {e}", c.data_dir.display())),
    }
}

/// Units rendered into the overlay's `systemd/`: installed, and the same as rendered?
pub fn units(c: &LoadedConfig, f: &mut Findings) {
    let dir = c.overlay_dir.join("systemd");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return;
    };
    let installed_dir = std::env::var_os("STRATA_SYSTEMD_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/etc/systemd/system".into());
    let mut names: Vec<_> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".service"))
        .collect();
    names.sort();
    for n in names {
        let ours = std::fs::read(dir.join(&n)).unwrap_or_default();
        match std::fs::read(installed_dir.join(&n)) {
            Ok(theirs) if theirs == ours => {
                f.ok.push(format!("unit {n} installed in {}", installed_dir.display()))
            }
            Ok(_) => f.warn.push(format!(
                "unit {n} in {} differs from systemd/{n}: copy it again and `systemctl daemon-reload`",
                installed_dir.display()
            )),
            Err(_) => f.info.push(format!(
                "unit {n} not installed: sudo cp systemd/{n} {}/ && sudo systemctl daemon-reload && sudo systemctl enable --now {n}",
                installed_dir.display()
            )),
        }
    }
}

/// Builds the provider as `serve` would and asks it [`LlmProvider::check`].
async fn check_llm(
    name: &str,
    path: &str,
    llm: &LlmConfig,
    vault: Option<&dyn Vault>,
) -> Result<String, String> {
    let ctx = strata_llm::AgentContext::bare(name);
    let provider = strata_llm::build(llm, vault, path, &ctx).map_err(|e| format!("{name}: {e}"))?;
    provider
        .check()
        .await
        .map(|seen| format!("{name}: {seen}"))
        .map_err(|e| format!("{name}: {e}"))
}

/// `--online`: each configured provider and Discord account is asked once.
pub async fn online(c: &LoadedConfig, vault: Option<&dyn Vault>, f: &mut Findings) {
    let mut llms: Vec<(String, String, &LlmConfig)> = Vec::new();
    if let Some(l) = &c.config.defaults.llm {
        llms.push(("defaults.llm".into(), "defaults.llm".into(), l));
    }
    for (id, a) in &c.config.agents {
        if let Some(l) = &a.llm {
            llms.push((format!("agent {id}"), format!("agents.{id}.llm"), l));
        }
    }
    for (name, path, l) in llms {
        match check_llm(&name, &path, l, vault).await {
            Ok(m) => f.ok.push(m),
            Err(e) => f.fail.push(e),
        }
    }
    let d = &c.config.connectors.discord;
    for (name, acct) in &d.accounts {
        let path = format!("connectors.discord.accounts.{name}.token");
        let token = match resolve_ref(&acct.token, vault, &path) {
            Ok(t) => t,
            Err(e) => {
                f.fail.push(format!("Discord account `{name}`: {e}"));
                continue;
            }
        };
        match crate::discord::check(name, token.expose(), d).await {
            Ok(seen) => {
                f.ok.push(format!("Discord account `{name}`: token valid ({seen})"))
            }
            Err(e) => f.fail.push(format!("Discord account `{name}`: {e}")),
        }
    }
}

/// The files an overlay's build script compiles in from `<overlay>/src/tools/`
/// (`strata_build::tools`) that declared no `#[tool]` in this binary — `linked` is each linked
/// tool's (name, source file). `(files seen, the silent ones)`: a file with no `#[tool]` (a
/// helper is fine), or a binary built before the file was added, or from another crate.
pub fn silent_tool_files(
    overlay: &std::path::Path,
    linked: &[(&str, &str)],
) -> (usize, Vec<std::path::PathBuf>) {
    use std::path::{Path, PathBuf};
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let dir = overlay.join("src/tools");
    let found = strata_build::scan(&dir);
    let dir = canon(&dir);
    let sources: Vec<PathBuf> = linked
        .iter()
        .map(|(_, f)| {
            let p = Path::new(f);
            if p.is_absolute() {
                canon(p)
            } else {
                p.to_path_buf()
            }
        })
        .collect();
    let silent = found
        .files
        .iter()
        .filter(|t| {
            // A directory module registers through any file beneath it.
            let root = if t.path.ends_with("mod.rs") {
                dir.join(&t.module)
            } else {
                canon(&t.path)
            };
            let rel = Path::new("src/tools").join(root.strip_prefix(&dir).unwrap_or(&root));
            !sources
                .iter()
                .any(|s| s.starts_with(&root) || (s.is_relative() && s.ends_with(&rel)))
        })
        .map(|t| t.path.clone())
        .collect();
    (found.files.len(), silent)
}
