//! The vault against Python's `cryptography` (the format existing vaults were written in),
//! both ways, plus wrong passphrases, atomic 0600 writes and secrets kept out of `Debug`.

use std::path::Path;
use std::process::Command;

use strata_engine::secret::Vault;
use strata_vault::{FileVault, VaultError};

/// Whether python3 has `cryptography` (CI installs it; elsewhere the test says so).
fn python_crypto() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import cryptography.fernet"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have Python's cryptography: pip install cryptography"
        );
        eprintln!("SKIPPED: python3 -m pip install cryptography to run the interop tests");
    }
    ok
}

const PY: &str = r#"
import base64, json, os, sys
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
mode, d, pw = sys.argv[1], sys.argv[2], sys.argv[3].encode()
def key(salt, n):
    return base64.urlsafe_b64encode(PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=salt, iterations=n).derive(pw))
if mode == "write":
    salt = os.urandom(32)
    open(os.path.join(d, "secrets.salt"), "wb").write(salt)
    open(os.path.join(d, "secrets.kdf"), "w").write(json.dumps({"iterations": 1000}))
    tok = Fernet(key(salt, 1000)).encrypt(json.dumps({"openai-key": "sk-from-python", "note": "ünïcode"}).encode())
    open(os.path.join(d, "secrets.enc"), "wb").write(tok)
else:
    salt = open(os.path.join(d, "secrets.salt"), "rb").read()
    n = json.load(open(os.path.join(d, "secrets.kdf")))["iterations"]
    print(json.dumps(json.loads(Fernet(key(salt, n)).decrypt(open(os.path.join(d, "secrets.enc"), "rb").read()))))
"#;

fn py(mode: &str, dir: &Path, pw: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", PY, mode])
        .arg(dir)
        .arg(pw)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_vault_written_by_python_opens_here_and_the_reverse() {
    if !python_crypto() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    py("write", d.path(), "correct horse");
    let v = FileVault::open(d.path(), "correct horse").expect("opens");
    assert_eq!(
        v.get("openai-key")
            .map(|s| s.expose().to_owned())
            .as_deref(),
        Some("sk-from-python")
    );
    assert_eq!(
        v.get("note").map(|s| s.expose().to_owned()).as_deref(),
        Some("ünïcode")
    );
    assert_eq!(v.keys(), ["note", "openai-key"]);

    let d2 = tempfile::tempdir().expect("tmp");
    let mut v =
        FileVault::create_with_iterations(d2.path(), "battery staple", 1000).expect("create");
    v.set("discord-main", "token-from-rust").expect("set");
    let back: serde_json::Value =
        serde_json::from_str(py("read", d2.path(), "battery staple").trim()).expect("json");
    assert_eq!(back, serde_json::json!({"discord-main": "token-from-rust"}));
}

#[test]
fn a_wrong_passphrase_unlocks_nothing_and_files_stay_private() {
    let d = tempfile::tempdir().expect("tmp");
    let mut v = FileVault::create_with_iterations(d.path(), "right", 1000).expect("create");
    v.set("k", "super-secret-value").expect("set");
    assert!(!format!("{v:?}").contains("super-secret-value"));
    match FileVault::open(d.path(), "wrong") {
        Err(VaultError::WrongPassphrase(p)) => assert!(p.ends_with("secrets.enc")),
        other => panic!("{other:?}"),
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for f in ["secrets.enc", "secrets.salt", "secrets.kdf"] {
            let mode = std::fs::metadata(d.path().join(f))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
    }
    // Removing and reopening; no temp files left behind.
    assert!(v.remove("k").expect("rm"));
    let v = FileVault::open(d.path(), "right").expect("reopen");
    assert!(v.keys().is_empty());
    let names: Vec<String> = std::fs::read_dir(d.path())
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains("tmp")), "{names:?}");
    // A second create refuses to overwrite; a missing kdf means 100,000 rounds; no salt is
    // the unsupported legacy format.
    assert!(FileVault::create_with_iterations(d.path(), "x", 1000).is_err());
    std::fs::remove_file(d.path().join("secrets.salt")).expect("rm salt");
    let e = FileVault::open(d.path(), "right").expect_err("legacy");
    assert!(e.to_string().contains("legacy"), "{e}");
}
