//! `strata-setup`: what `cargo xtask setup | new-overlay | new-module | check-core` runs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use strata_setup::{answers::Answers, check_core, prompt, render, wizard};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Strata onboarding: setup wizard, scaffolding, check-core"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The setup wizard: a new deployment overlay (or an update of one).
    Setup {
        /// Take every answer from this YAML file; nothing is asked (docs/DEPLOY.md).
        #[arg(long)]
        answers: Option<PathBuf>,
        /// You maintain the engine: leave this clone's `origin` alone.
        #[arg(long)]
        maintainer: bool,
    },
    /// An empty overlay crate in DIR (no vault, no provider, no units).
    NewOverlay {
        /// Where.
        dir: PathBuf,
        /// Deployment name (default: the directory's name).
        #[arg(long)]
        name: Option<String>,
        /// Modules to link, comma-separated.
        #[arg(long, value_delimiter = ',')]
        modules: Vec<String>,
    },
    /// A module crate `strata-mod-NAME` in modules/NAME (added to the workspace).
    NewModule {
        /// Module name (letters, digits, -).
        name: String,
        /// Parent directory instead of the engine's modules/ (a standalone crate).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Installs the pre-commit hook that refuses commits on `main` and commits that fail
    /// check-core, in this checkout (or `--root`).
    InstallHook {
        /// The checkout (default: this one).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Release artefacts in target/dist/: the binary (production profile), its sha256, a CycloneDX
    /// SBOM of the crates in it, and its systemd units.
    Dist {
        /// The package whose binary ships.
        #[arg(long, default_value = "strata-example")]
        package: String,
        /// Its binary (default: the package's name; `strata` for strata-launcher).
        #[arg(long)]
        bin: Option<String>,
        /// The cargo profile.
        #[arg(long, default_value = "production")]
        profile: String,
        /// Package an already built binary instead of building it.
        #[arg(long)]
        prebuilt: Option<PathBuf>,
    },
    /// Fails when core or modules contain deployment details.
    CheckCore {
        /// The engine checkout (default: this one).
        #[arg(long)]
        root: Option<PathBuf>,
    },
}

fn engine_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(2).map(PathBuf::from).unwrap_or(here)
}

fn new_module(name: &str, dir: Option<PathBuf>) -> anyhow::Result<Vec<String>> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        anyhow::bail!("module name `{name}`: lower-case letters, digits and `-`");
    }
    let root = engine_root();
    let in_workspace = dir.is_none();
    let parent = dir.unwrap_or_else(|| root.join("modules"));
    let target = parent.join(name);
    if target.exists() {
        anyhow::bail!("{} already exists", target.display());
    }
    let mut j = strata_setup::journal::Journal::new(&target);
    let result = (|| -> anyhow::Result<()> {
        for (rel, text) in render::module_files(name, in_workspace, &root) {
            j.write(&target.join(rel), text.as_bytes(), 0o644)?;
        }
        if in_workspace {
            let manifest = root.join("Cargo.toml");
            let text = std::fs::read_to_string(&manifest)?;
            let member = format!("    \"modules/{name}\",\n");
            let anchor = text
                .rfind("    \"modules/")
                .and_then(|i| text[i..].find('\n').map(|n| i + n + 1))
                .context("no modules/ entry in the workspace members to add after")?;
            let mut new = text.clone();
            new.insert_str(anchor, &member);
            j.write(&manifest, new.as_bytes(), 0o644)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        j.rollback();
        return Err(e);
    }
    let mut lines = j.report.clone();
    lines.push(format!(
        "module `{name}` scaffolded in {}: link it from an overlay with `.module(strata_mod_{}::link())` and a `strata-mod-{name}` dependency",
        target.display(),
        name.replace('-', "_")
    ));
    Ok(lines)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = engine_root();
    let result = match cli.command {
        Command::Setup {
            answers,
            maintainer,
        } => {
            let interactive = answers.is_none();
            let opts = wizard::Options {
                answers,
                maintainer,
                engine_root: root,
            };
            if interactive {
                let mut t = prompt::Terminal;
                wizard::run(&opts, Some(&mut t))
            } else {
                wizard::run(&opts, None)
            }
        }
        Command::NewOverlay { dir, name, modules } => {
            let mut a = Answers {
                overlay_dir: Some(dir),
                name,
                modules: Some(modules),
                ..Answers::default()
            };
            a.units.enabled = false;
            a.update = Some(false);
            let opts = wizard::Options {
                answers: None,
                maintainer: true,
                engine_root: root,
            };
            wizard::run_with(&opts, a, None)
        }
        Command::NewModule { name, dir } => new_module(&name, dir),
        Command::Dist {
            package,
            bin,
            profile,
            prebuilt,
        } => {
            let bin = bin.unwrap_or_else(|| match package.as_str() {
                "strata-launcher" => "strata".to_owned(),
                p => p.to_owned(),
            });
            let spec = strata_setup::dist::DistSpec {
                out: std::env::var_os("CARGO_TARGET_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| root.join("target"))
                    .join("dist"),
                root,
                package,
                bin,
                profile,
            };
            match prebuilt {
                Some(b) => strata_setup::dist::package(&spec, &b),
                None => strata_setup::dist::build(&spec),
            }
        }
        Command::InstallHook { root: r } => {
            let r = r.unwrap_or(root);
            strata_setup::remote::install_pre_commit(&r).map(|hook| {
                vec![format!(
                    "pre-commit hook installed at {}: no commits on main, none that fail check-core",
                    hook.display()
                )]
            })
        }
        Command::CheckCore { root: r } => {
            let r = r.unwrap_or(root);
            match check_core::check_tree(&r) {
                Ok(found) if found.is_empty() => {
                    Ok(vec![format!("check-core: {} is clean", r.display())])
                }
                Ok(found) => {
                    for f in &found {
                        eprintln!("{}:{}: {}: {}", f.path.display(), f.line, f.kind, f.excerpt);
                    }
                    Err(anyhow::anyhow!(
                        "check-core: {} finding(s): deployment details belong in an overlay (or mark a test vector `check-core: allow`)",
                        found.len()
                    ))
                }
                Err(e) => Err(e),
            }
        }
    };
    match result {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            if e.downcast_ref::<prompt::Cancelled>().is_some() {
                eprintln!("setup cancelled: nothing was written");
                return ExitCode::from(130);
            }
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
