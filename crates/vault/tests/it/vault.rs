//! The vault against Python's `cryptography` (the format existing vaults were written in),
//! both ways, plus wrong passphrases, atomic 0600 writes and secrets kept out of `Debug`.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use strata_engine::secret::Vault;
use strata_vault::{FileVault, VaultError};

/// Whether python3 has `cryptography` (CI installs it; elsewhere the test says so).
fn python_crypto() -> bool {
    strata_test_support::python_has("cryptography.fernet", "cryptography")
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

/// Runs `script` with `mode dir args…`; its stdout.
fn python(script: &str, mode: &str, dir: &Path, args: &[&str]) -> String {
    let out = Command::new("python3")
        .args(["-c", script, mode])
        .arg(dir)
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn py(mode: &str, dir: &Path, pw: &str) -> String {
    python(PY, mode, dir, &[pw])
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
    // A second create refuses to overwrite; no salt is the legacy format, tried with the
    // legacy constant salt — which is not this vault's: the message says where to give it.
    assert!(FileVault::create_with_iterations(d.path(), "x", 1000).is_err());
    std::fs::remove_file(d.path().join("secrets.salt")).expect("rm salt");
    let e = FileVault::open_with_legacy_salt(d.path(), "right", None).expect_err("legacy");
    if std::env::var_os(strata_vault::LEGACY_SALT_VAR).is_none() {
        assert!(
            e.to_string().contains("kagents-vault-salt")
                && e.to_string().contains("STRATA_VAULT_LEGACY_SALT")
                && e.to_string().contains("nothing was unlocked"),
            "{e}"
        );
    }
}

#[test]
fn a_legacy_vault_with_the_old_tooling_s_constant_salt_opens_without_help() {
    if !python_crypto() {
        return;
    }
    if std::env::var_os(strata_vault::LEGACY_SALT_VAR).is_some() {
        strata_test_support::skipped(
            "opening a legacy vault with the default salt",
            "unset STRATA_VAULT_LEGACY_SALT (it would be used instead)",
        );
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    // Python's cryptography, the constant salt, 100,000 iterations, no secrets.salt/.kdf.
    py_legacy("write", d.path(), "old pass", "kagents-vault-salt");
    let v = FileVault::open(d.path(), "old pass").expect("opens with the default legacy salt");
    assert!(v.is_legacy());
    assert_eq!(
        v.get("old-key").map(|s| s.expose().to_owned()).as_deref(),
        Some("from-a-legacy-vault")
    );
    assert!(
        v.doctor()
            .iter()
            .any(|(ok, m)| !ok && m.contains("legacy") && m.contains("rekey")),
        "{:?}",
        v.doctor()
    );
    assert!(matches!(
        FileVault::open(d.path(), "wrong pass"),
        Err(VaultError::Format(m)) if m.contains("wrong passphrase")
    ));
}

const PY_LEGACY: &str = r#"
import base64, json, os, sys
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
mode, d, pw, salt = sys.argv[1], sys.argv[2], sys.argv[3].encode(), sys.argv[4].encode()
def key(salt, n):
    return base64.urlsafe_b64encode(PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=salt, iterations=n).derive(pw))
if mode == "write":
    tok = Fernet(key(salt, 100000)).encrypt(json.dumps({"old-key": "from-a-legacy-vault"}).encode())
    open(os.path.join(d, "secrets.enc"), "wb").write(tok)
elif mode == "read-legacy":
    print(json.dumps(json.loads(Fernet(key(salt, 100000)).decrypt(open(os.path.join(d, "secrets.enc"), "rb").read()))))
else:
    salt = open(os.path.join(d, "secrets.salt"), "rb").read()
    n = json.load(open(os.path.join(d, "secrets.kdf")))["iterations"]
    print(json.dumps({"iterations": n, "values": json.loads(Fernet(key(salt, n)).decrypt(open(os.path.join(d, "secrets.enc"), "rb").read()))}))
"#;

fn py_legacy(mode: &str, dir: &Path, pw: &str, salt: &str) -> String {
    python(PY_LEGACY, mode, dir, &[pw, salt])
}

#[test]
fn a_legacy_python_vault_opens_keeps_its_format_until_rekey_upgrades_it() {
    if !python_crypto() {
        return;
    }
    const SALT: &str = "a-constant-legacy-salt";
    let d = tempfile::tempdir().expect("tmp");
    // Python's legacy format: no secrets.salt (the constant salt), no secrets.kdf (100,000).
    py_legacy("write", d.path(), "old pass", SALT);
    assert!(FileVault::open_with_legacy_salt(d.path(), "old pass", Some(b"another salt")).is_err());
    let mut v = FileVault::open_with_legacy_salt(d.path(), "old pass", Some(SALT.as_bytes()))
        .expect("legacy opens");
    assert!(v.is_legacy());
    assert!(v.doctor().iter().any(|(ok, m)| !ok && m.contains("legacy")));
    assert_eq!(
        v.get("old-key").map(|s| s.expose().to_owned()).as_deref(),
        Some("from-a-legacy-vault")
    );
    // A change keeps the legacy format, so the old Python tooling still reads it.
    v.set("added", "by-strata").expect("set");
    assert!(!d.path().join("secrets.salt").exists());
    let back: serde_json::Value =
        serde_json::from_str(py_legacy("read-legacy", d.path(), "old pass", SALT).trim())
            .expect("json");
    assert_eq!(
        back,
        serde_json::json!({"old-key": "from-a-legacy-vault", "added": "by-strata"})
    );
    // rekey upgrades: a random salt, 600,000 rounds, a new passphrase; Python agrees.
    v.rekey("old pass", Some("new pass")).expect("rekey");
    assert!(!v.is_legacy());
    let salt = std::fs::read(d.path().join("secrets.salt")).expect("salt");
    assert_eq!(salt.len(), 32);
    let back: serde_json::Value =
        serde_json::from_str(py_legacy("read", d.path(), "new pass", "-").trim()).expect("json");
    assert_eq!(back["iterations"], 600_000);
    assert_eq!(back["values"]["added"], "by-strata");
    let v = FileVault::open(d.path(), "new pass").expect("reopens without the legacy salt");
    assert!(!v.is_legacy());
}

#[test]
fn a_corrupted_vault_is_a_clear_error_and_nothing_is_unlocked() {
    let d = tempfile::tempdir().expect("tmp");
    let mut v = FileVault::create_with_iterations(d.path(), "pw", 1000).expect("create");
    v.set("k", "v").expect("set");
    let enc = d.path().join("secrets.enc");
    let good = std::fs::read(&enc).expect("read");
    // A flipped byte in the middle of the token (its MAC fails), a truncated token, binary
    // garbage, an empty file, and a malformed kdf file: each an error naming the file.
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] = if flipped[mid] == b'A' { b'B' } else { b'A' };
    for (what, bytes) in [
        ("flipped", flipped),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("binary", vec![0xff, 0xfe, 0x00, 0x80]),
        ("empty", Vec::new()),
    ] {
        std::fs::write(&enc, &bytes).expect("write");
        let e = FileVault::open(d.path(), "pw").expect_err(what);
        assert!(e.to_string().contains("secrets.enc"), "{what}: {e}");
        // And a write through a vault opened before the damage refuses rather than
        // overwriting what it cannot read.
        assert!(v.set("k2", "v2").is_err(), "{what}");
    }
    std::fs::write(&enc, &good).expect("restore");
    std::fs::write(d.path().join("secrets.kdf"), "not json").expect("kdf");
    let e = FileVault::open(d.path(), "pw").expect_err("kdf");
    assert!(e.to_string().contains("secrets.kdf"), "{e}");
}

#[test]
fn concurrent_writers_do_not_lose_each_others_keys() {
    let d = tempfile::tempdir().expect("tmp");
    FileVault::create_with_iterations(d.path(), "pw", 1000).expect("create");
    // Eight writers, each with its own handle opened before any write (so each starts from
    // a stale copy), each setting five keys of its own.
    let handles: Vec<FileVault> = (0..8)
        .map(|_| FileVault::open(d.path(), "pw").expect("open"))
        .collect();
    let threads: Vec<_> = handles
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            std::thread::spawn(move || {
                for j in 0..5 {
                    v.set(&format!("w{i}-k{j}"), &format!("{i}:{j}"))
                        .expect("set");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
    let v = FileVault::open(d.path(), "pw").expect("open");
    assert_eq!(v.keys().len(), 40, "{:?}", v.keys());
    assert_eq!(
        v.get("w7-k4").map(|s| s.expose().to_owned()).as_deref(),
        Some("7:4")
    );
}
