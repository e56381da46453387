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

/// Neutralises `origin` in `repo` when it points at `upstream` and the user is no maintainer.
pub fn neutralise(repo: &Path, upstream: &str, maintainer: bool) -> anyhow::Result<Outcome> {
    let Some(origin) = git(repo, &["remote", "get-url", "origin"])? else {
        if git(repo, &["config", "--get", "strata.neutralised"])?.is_some() {
            return Ok(Outcome::AlreadyDone);
        }
        return Ok(Outcome::NoOrigin);
    };
    if normalise(&origin) != normalise(upstream) {
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
