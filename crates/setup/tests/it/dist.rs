//! `cargo xtask dist`'s packaging, on a stand-in binary (building the dist profile takes
//! minutes; `cargo xtask dist` itself is run by hand and its figures are in the issue notes):
//! the checksum file verifies with `sha256sum -c`, the SBOM reads back with the crates and
//! versions `Cargo.lock` pins, and the units start the installed binary.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::path::Path;

use strata_setup::dist::{DistSpec, package, read_sbom};

/// The version `Cargo.lock` pins for `name` (the first one listed).
fn locked(name: &str) -> String {
    let lock =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock"))
            .expect("Cargo.lock");
    let at = lock
        .find(&format!("name = \"{name}\"\nversion = \""))
        .expect("in the lock file");
    let rest = &lock[at..];
    let v = rest.split('"').nth(3).expect("version");
    v.to_owned()
}

#[test]
fn dist_writes_a_checksum_an_sbom_and_units_that_read_back() {
    let out = tempfile::tempdir().expect("tmp");
    let stand_in = std::env::current_exe().expect("this test binary");
    let spec = DistSpec {
        root: Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        package: "strata-example".into(),
        bin: "strata-example".into(),
        profile: "production".into(),
        out: out.path().to_path_buf(),
    };
    let lines = package(&spec, &stand_in).expect("package");
    let len = |p: &Path| std::fs::metadata(p).expect("metadata").len();
    assert_eq!(
        len(&out.path().join("strata-example")),
        len(&stand_in),
        "copied whole"
    );
    assert!(lines.iter().any(|l| l.contains("CycloneDX")), "{lines:?}");

    // The checksum is sha256sum's own format.
    let check = std::process::Command::new("sha256sum")
        .args(["-c", "strata-example.sha256"])
        .current_dir(out.path())
        .output()
        .expect("sha256sum");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    // The dependency list: what the binary is made of, at the locked versions.
    let comps = read_sbom(&out.path().join("strata-example.cdx.json")).expect("sbom");
    for name in [
        "tokio",
        "rusqlite",
        "strata-engine",
        "strata-mod-ops",
        "fernet",
    ] {
        let c = comps
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{name} in the SBOM"));
        assert_eq!(c.version, locked(name), "{name}");
    }
    let fernet = comps.iter().find(|c| c.name == "fernet").expect("fernet");
    assert_eq!(fernet.license.as_deref(), Some("MPL-2.0"));
    // Linux only, normal dependencies only: no Windows crates, no test fakes.
    assert!(!comps.iter().any(|c| c.name.starts_with("windows-sys")));
    assert!(!comps.iter().any(|c| c.name == "strata-test-support"));

    let unit = std::fs::read_to_string(out.path().join("strata-example.service")).expect("unit");
    assert!(
        unit.contains(
            "ExecStart=/usr/local/bin/strata-example --overlay /srv/strata/example serve"
        ),
        "{unit}"
    );
    assert!(out.path().join("strata-example-ops.service").is_file());
}

/// A build output that is also the artefact is refused, not truncated by copying it onto
/// itself (what a cargo profile named `dist`, built into target/dist/, did).
#[test]
fn dist_refuses_to_copy_a_binary_onto_itself() {
    let dir = tempfile::tempdir().expect("tmp");
    let bin = dir.path().join("strata-example");
    std::fs::write(&bin, b"not empty").expect("write");
    let spec = DistSpec {
        root: Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        package: "strata-example".into(),
        bin: "strata-example".into(),
        profile: "production".into(),
        out: dir.path().to_path_buf(),
    };
    let e = package(&spec, &bin).expect_err("refused");
    assert!(
        e.to_string()
            .contains("both the build output and the artefact"),
        "{e}"
    );
    assert_eq!(std::fs::read(&bin).expect("read"), b"not empty");
}
