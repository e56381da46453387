//! Keeping the engine clean: a team's clone whose `origin` is the upstream engine repository
//! gets `origin` renamed to `upstream` with pushing disabled, so deployment commits cannot be
//! pushed to the engine by accident. Maintainers (`--maintainer`, or `git config
//! strata.maintainer true` in the clone) are left alone.

use std::path::Path;
use std::process::Command;

use anyhow::Context as _;

/// What [`neutralise`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not a git clone, or no `origin`.
    NoOrigin,
    /// `origin` is not the upstream repository: nothing to do.
    NotUpstream(String),
    /// The user maintains the engine.
    Maintainer,
    /// Renamed and push disabled; the text says how to undo it.
    Neutralised(String),
    /// Already done by an earlier run.
    AlreadyDone,
}

fn git(repo: &Path, args: &[&str]) -> anyhow::Result<Option<String>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .context("running git")?;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

/// `https://host/a/b.git`, `git@host:a/b`, `ssh://git@host/a/b/` → `host/a/b`.
pub fn normalise(url: &str) -> String {
    let mut u = url.trim().trim_end_matches('/').to_owned();
    if let Some(rest) = u.strip_suffix(".git") {
        u = rest.to_owned();
    }
    for scheme in ["https://", "http://", "ssh://", "git://"] {
        if let Some(rest) = u.strip_prefix(scheme) {
            u = rest.to_owned();
        }
    }
    if let Some((user_host, path)) = u.split_once(':')
        && !user_host.contains('/')
        && !path.starts_with("//")
    {
        u = format!("{user_host}/{path}");
    }
    if let Some((_, rest)) = u.split_once('@') {
        u = rest.to_owned();
    }
    u.to_lowercase()
}

/// How the engine is recognised: its repository URLs and the commit its history starts at
/// (`[workspace.metadata.strata]` in the engine's `Cargo.toml`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Engine {
    /// The engine's repository URLs.
    pub upstream: Vec<String>,
    /// The engine's root commit: a checkout whose history starts there is the engine's,
    /// whatever its `origin` says.
    pub root_commit: Option<String>,
}

impl Engine {
    /// `[workspace.metadata.strata]` of the `Cargo.toml` in `root` (falling back on
    /// `workspace.package.repository` for the URL); `None` when it names neither.
    pub fn of_workspace(root: &Path) -> Option<Engine> {
        let text = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
        let mut e = Engine::default();
        let mut table = "";
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                table = line;
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            let strings = || {
                v.trim_matches(|c| c == '[' || c == ']')
                    .split(',')
                    .map(|x| x.trim().trim_matches('"').to_owned())
                    .filter(|x| !x.is_empty())
                    .collect::<Vec<_>>()
            };
            match (table, k) {
                ("[workspace.metadata.strata]", "upstream") => e.upstream = strings(),
                ("[workspace.metadata.strata]", "root_commit") => {
                    e.root_commit = strings().into_iter().next();
                }
                ("[workspace.package]", "repository") if e.upstream.is_empty() => {
                    e.upstream = strings();
                }
                _ => {}
            }
        }
        (!e.upstream.is_empty() || e.root_commit.is_some()).then_some(e)
    }

    /// Whether the checkout at `repo` with this `origin` is the engine's.
    fn owns(&self, repo: &Path, origin: &str) -> anyhow::Result<bool> {
        if self
            .upstream
            .iter()
            .any(|u| normalise(u) == normalise(origin))
        {
            return Ok(true);
        }
        let Some(root) = &self.root_commit else {
            return Ok(false);
        };
        let roots = git(repo, &["rev-list", "--max-parents=0", "HEAD"])?.unwrap_or_default();
        Ok(roots.lines().any(|r| r.trim() == root))
    }
}

/// Neutralises `origin` in `repo` when it points at `upstream` and the user is no maintainer.
pub fn neutralise(repo: &Path, upstream: &str, maintainer: bool) -> anyhow::Result<Outcome> {
    let engine = Engine {
        upstream: vec![upstream.to_owned()],
        root_commit: None,
    };
    neutralise_engine(repo, &engine, maintainer)
}

/// Neutralises `origin` in `repo` when the checkout is the engine's — `origin` is one of its
/// URLs, or the history starts at its root commit (a fork or a mirror) — and the user is no
/// maintainer.
pub fn neutralise_engine(
    repo: &Path,
    engine: &Engine,
    maintainer: bool,
) -> anyhow::Result<Outcome> {
    let Some(origin) = git(repo, &["remote", "get-url", "origin"])? else {
        if git(repo, &["config", "--get", "strata.neutralised"])?.is_some() {
            return Ok(Outcome::AlreadyDone);
        }
        return Ok(Outcome::NoOrigin);
    };
    if !engine.owns(repo, &origin)? {
        return Ok(Outcome::NotUpstream(origin));
    }
    let configured = git(repo, &["config", "--bool", "--get", "strata.maintainer"])?;
    if maintainer || configured.as_deref() == Some("true") {
        return Ok(Outcome::Maintainer);
    }
    git(repo, &["remote", "rename", "origin", "upstream"])?
        .context("git remote rename origin upstream failed")?;
    git(
        repo,
        &["remote", "set-url", "--push", "upstream", "DISABLED"],
    )?
    .context("git remote set-url --push upstream DISABLED failed")?;
    git(repo, &["config", "strata.neutralised", "true"])?;
    Ok(Outcome::Neutralised(format!(
        "`origin` pointed at the engine repository ({origin}); it is now `upstream` with \
         pushing disabled, so this clone's deployment commits cannot reach the engine. Pull \
         engine updates with `git pull upstream main`. To undo: \
         `git remote set-url --push upstream {origin} && git remote rename upstream origin` \
         (engine maintainers: `git config strata.maintainer true` or `--maintainer`)."
    )))
}

/// Reverses [`neutralise`] (rollback of a failed run).
pub fn restore(repo: &Path, origin: &str) -> anyhow::Result<()> {
    git(repo, &["remote", "set-url", "--push", "upstream", origin])?;
    git(repo, &["remote", "rename", "upstream", "origin"])?;
    git(repo, &["config", "--unset", "strata.neutralised"])?;
    Ok(())
}

/// The pre-commit hook [`install_pre_commit`] writes: no commits on `main`, and none that
/// `cargo xtask check-core` fails (where the checkout has the xtask). `--no-verify` skips it.
pub const PRE_COMMIT: &str = r#"#!/bin/sh
# strata: installed by `cargo xtask install-hook` — keeps a team's commits off the engine's
# `main` and deployment details out of the engine (docs/DEPLOY.md). Skip once: --no-verify.
branch=$(git symbolic-ref --short HEAD 2>/dev/null)
if [ "$branch" = "main" ]; then
  echo "pre-commit: no commits on main in this clone; make a branch (git switch -c my-change)" >&2
  exit 1
fi
root=$(git rev-parse --show-toplevel)
if [ -d "$root/xtask" ]; then
  cd "$root" && exec cargo xtask check-core
fi
"#;

/// Installs [`PRE_COMMIT`] as `repo`'s pre-commit hook (0755). A hook of someone else's is
/// left alone and named in the error; ours is replaced. Returns the hook's path.
pub fn install_pre_commit(repo: &Path) -> anyhow::Result<std::path::PathBuf> {
    let dir = git(repo, &["rev-parse", "--git-path", "hooks"])?.context("not a git checkout")?;
    let dir = repo.join(dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let hook = dir.join("pre-commit");
    if let Ok(existing) = std::fs::read_to_string(&hook)
        && !existing.contains("strata: installed by")
    {
        anyhow::bail!(
            "{} exists and is not Strata's: add `cargo xtask check-core` to it yourself",
            hook.display()
        );
    }
    std::fs::write(&hook, PRE_COMMIT).with_context(|| format!("writing {}", hook.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(hook)
}
