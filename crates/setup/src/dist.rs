//! `cargo xtask dist`: a deployment's release artefacts in `target/dist/`.
//!
//! - the binary, built with the `production` profile (stripped, LTO, one codegen unit);
//! - `<bin>.sha256` in `sha256sum`'s format (`sha256sum -c` checks it);
//! - `<bin>.cdx.json`, a CycloneDX 1.5 SBOM of every crate compiled into the binary (what
//!   `cargo tree` resolves for the package on Linux, normal dependencies only, with versions,
//!   licences and `pkg:cargo` purls) — the dependency list read back by [`read_sbom`];
//! - the systemd units ([`crate::units`]) for the binary installed as
//!   `/usr/local/bin/<bin>` and the overlay in `/srv/strata/<name>`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sha2::Digest as _;

/// What to build and where to put it.
#[derive(Debug, Clone)]
pub struct DistSpec {
    /// The engine checkout (the workspace holding the package).
    pub root: PathBuf,
    /// The package whose binary ships (`strata-example`, an overlay's).
    pub package: String,
    /// Its binary (the package name for an overlay; `strata` for the launcher).
    pub bin: String,
    /// The cargo profile (`production`).
    pub profile: String,
    /// Where the artefacts go (`target/dist`).
    pub out: PathBuf,
}

/// One crate of the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// Crate name.
    pub name: String,
    /// Version.
    pub version: String,
    /// SPDX licence expression, when the crate declares one.
    pub license: Option<String>,
}

fn cargo(root: &Path) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root);
    c
}

fn output(mut c: Command) -> anyhow::Result<String> {
    let o = c.output().with_context(|| format!("running {c:?}"))?;
    if !o.status.success() {
        bail!(
            "{c:?} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The crates `cargo tree` resolves for `package` on Linux (normal dependencies, the
/// package's own features), with the licences `cargo metadata` knows.
pub fn components(root: &Path, package: &str) -> anyhow::Result<Vec<Component>> {
    let mut tree = cargo(root);
    tree.args([
        "tree",
        "--locked",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--no-dedupe",
        "--format",
        "{p}",
        "--target",
        "x86_64-unknown-linux-gnu",
        "-p",
        package,
    ]);
    let mut found: BTreeMap<(String, String), ()> = BTreeMap::new();
    for line in output(tree)?.lines() {
        // `name v1.2.3`, `name v1.2.3 (/path)`, `name v1.2.3 (proc-macro)`, ` (*)`.
        let mut parts = line.split_whitespace();
        let (Some(name), Some(version)) = (parts.next(), parts.next()) else {
            continue;
        };
        if let Some(v) = version.strip_prefix('v') {
            found.insert((name.to_owned(), v.to_owned()), ());
        }
    }
    let mut meta = cargo(root);
    meta.args(["metadata", "--locked", "--format-version", "1"]);
    let meta: Value = serde_json::from_str(&output(meta)?).context("cargo metadata's JSON")?;
    let licences: BTreeMap<(String, String), Option<String>> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                (
                    p["name"].as_str().unwrap_or_default().to_owned(),
                    p["version"].as_str().unwrap_or_default().to_owned(),
                ),
                p["license"].as_str().map(str::to_owned),
            )
        })
        .collect();
    Ok(found
        .into_keys()
        .map(|(name, version)| Component {
            license: licences
                .get(&(name.clone(), version.clone()))
                .cloned()
                .flatten(),
            name,
            version,
        })
        .collect())
}

/// The CycloneDX 1.5 document for `bin` (`version`) made of `components`.
pub fn sbom(bin: &str, version: &str, components: &[Component]) -> Value {
    let comp = |c: &Component| {
        let mut v = json!({
            "type": "library",
            "bom-ref": format!("pkg:cargo/{}@{}", c.name, c.version),
            "name": c.name,
            "version": c.version,
            "purl": format!("pkg:cargo/{}@{}", c.name, c.version),
        });
        if let Some(l) = &c.license {
            v["licenses"] = json!([{"expression": l}]);
        }
        v
    };
    json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "component": {"type": "application", "name": bin, "version": version},
            "tools": {"components": [{"type": "application", "name": "cargo xtask dist"}]}
        },
        "components": components.iter().map(comp).collect::<Vec<_>>(),
    })
}

/// The components an SBOM written by [`sbom`] lists.
pub fn read_sbom(path: &Path) -> anyhow::Result<Vec<Component>> {
    let v: Value = serde_json::from_slice(
        &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("{} is not JSON", path.display()))?;
    if v["bomFormat"] != "CycloneDX" {
        bail!("{} is not a CycloneDX document", path.display());
    }
    Ok(v["components"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| Component {
            name: c["name"].as_str().unwrap_or_default().to_owned(),
            version: c["version"].as_str().unwrap_or_default().to_owned(),
            license: c["licenses"][0]["expression"].as_str().map(str::to_owned),
        })
        .collect())
}

/// The hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>())
}

/// Writes the artefacts for an already built `binary` into `spec.out`; the lines to print.
pub fn package(spec: &DistSpec, binary: &Path) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(&spec.out)
        .with_context(|| format!("creating {}", spec.out.display()))?;
    let bin_out = spec.out.join(&spec.bin);
    // Copying a file onto itself truncates it (a profile built into the output directory).
    if let (Ok(a), Ok(b)) = (binary.canonicalize(), bin_out.canonicalize())
        && a == b
    {
        bail!(
            "{} is both the build output and the artefact: build with a profile whose \
             directory is not {}",
            binary.display(),
            spec.out.display()
        );
    }
    std::fs::copy(binary, &bin_out)
        .with_context(|| format!("copying {} to {}", binary.display(), bin_out.display()))?;
    let sum = sha256_file(&bin_out)?;
    let sum_file = spec.out.join(format!("{}.sha256", spec.bin));
    std::fs::write(&sum_file, format!("{sum}  {}\n", spec.bin))?;
    let comps = components(&spec.root, &spec.package)?;
    let version = comps
        .iter()
        .find(|c| c.name == spec.package)
        .map_or_else(|| "0.0.0".to_owned(), |c| c.version.clone());
    let sbom_file = spec.out.join(format!("{}.cdx.json", spec.bin));
    std::fs::write(
        &sbom_file,
        serde_json::to_vec_pretty(&sbom(&spec.bin, &version, &comps))?,
    )?;
    let name = spec
        .bin
        .strip_prefix("strata-")
        .unwrap_or(&spec.bin)
        .to_owned();
    let units = crate::units::render(&crate::units::UnitSpec {
        overlay: PathBuf::from(format!("/srv/strata/{name}")),
        binary: PathBuf::from(format!("/usr/local/bin/{}", spec.bin)),
        user: "strata".into(),
        group: "strata".into(),
        key_file: Some(PathBuf::from(format!("/etc/strata/{name}.vault-key"))),
        ops: true,
        name,
    });
    let mut lines = vec![
        format!(
            "{} ({:.1} MiB)",
            bin_out.display(),
            std::fs::metadata(&bin_out)?.len() as f64 / 1048576.0
        ),
        format!("{} (sha256sum -c)", sum_file.display()),
        format!(
            "{} ({} crates, CycloneDX 1.5)",
            sbom_file.display(),
            comps.len()
        ),
    ];
    for (file, text) in units {
        let p = spec.out.join(&file);
        std::fs::write(&p, text)?;
        lines.push(format!("{} (systemd)", p.display()));
    }
    Ok(lines)
}

/// Builds the binary with `spec.profile`, then [`package`]s it.
pub fn build(spec: &DistSpec) -> anyhow::Result<Vec<String>> {
    let mut b = cargo(&spec.root);
    b.args([
        "build",
        "--locked",
        "--profile",
        &spec.profile,
        "-p",
        &spec.package,
        "--bin",
        &spec.bin,
    ]);
    let status = b.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --profile {} failed", spec.profile);
    }
    let dir = if spec.profile == "dev" {
        "debug"
    } else {
        &spec.profile
    };
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| spec.root.join("target"));
    package(spec, &target.join(dir).join(&spec.bin))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sbom_reads_back_as_written() {
        let comps = vec![
            Component {
                name: "tokio".into(),
                version: "1.48.0".into(),
                license: Some("MIT".into()),
            },
            Component {
                name: "odd".into(),
                version: "0.1.0".into(),
                license: None,
            },
        ];
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("x.cdx.json");
        std::fs::write(&p, sbom("x", "1.0.0", &comps).to_string()).expect("write");
        assert_eq!(read_sbom(&p).expect("read"), comps);
        std::fs::write(&p, "{}").expect("write");
        assert!(read_sbom(&p).is_err(), "not CycloneDX");
    }
}
