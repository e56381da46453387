//! # strata-vault
//!
//! The encrypted vault in an overlay's `config/`: `secrets.enc` is one Fernet token over a
//! JSON object of string → string; the key is urlsafe-base64(PBKDF2-HMAC-SHA256(passphrase,
//! salt, iterations, 32 bytes)) with the salt in `secrets.salt` (32 random bytes) and the
//! iteration count in `secrets.kdf` (`{"iterations": N}`; 600,000 for new vaults, 100,000 when
//! the file is missing). Python's `cryptography` (`PBKDF2HMAC` + `Fernet`) reads and writes the
//! same files. Writes are atomic (temp file, fsync, rename) and 0600, and every change is
//! made under an exclusive lock on `secrets.lock` after re-reading the file, so two writers
//! never lose each other's keys.
//!
//! Legacy vaults without `secrets.salt` (written by the older Python tooling) used one
//! constant salt for every vault, the ASCII bytes [`LEGACY_SALT`]: such a vault opens with it
//! unless `STRATA_VAULT_LEGACY_SALT` gives another (text, or `hex:…` / `base64:…`), and
//! `strata vault doctor` recommends `strata vault rekey`, which writes a random salt. (A salt
//! is not a secret: it only makes one passphrase's key differ between vaults — which a
//! constant salt does not, hence the rekey.)

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use strata_engine::secret::Secret;
use zeroize::Zeroizing;

/// Iterations for new vaults.
pub const NEW_ITERATIONS: u32 = 600_000;
/// Iterations of a vault without `secrets.kdf`.
pub const LEGACY_ITERATIONS: u32 = 100_000;

/// Why a vault did not open or save.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// The passphrase does not decrypt the vault (or the file was altered).
    #[error("wrong passphrase for {0} (or the file was altered); nothing was unlocked")]
    WrongPassphrase(PathBuf),
    /// A file is missing or unreadable.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A file has the wrong shape.
    #[error("{0}")]
    Format(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VaultError + '_ {
    move |source| VaultError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The Fernet key for `passphrase`.
pub fn derive_key(passphrase: &str, salt: &[u8], iterations: u32) -> Zeroizing<String> {
    let mut raw = Zeroizing::new([0u8; 32]);
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(passphrase.as_bytes(), salt, iterations, raw.as_mut());
    Zeroizing::new(base64::engine::general_purpose::URL_SAFE.encode(raw.as_ref()))
}

/// An open vault.
pub struct FileVault {
    dir: PathBuf,
    values: BTreeMap<String, Secret>,
    key: Zeroizing<String>,
    legacy_salt: bool,
}

/// The variable holding a legacy vault's constant salt.
pub const LEGACY_SALT_VAR: &str = "STRATA_VAULT_LEGACY_SALT";

/// The constant salt of vaults written by the older Python tooling without `secrets.salt`.
pub const LEGACY_SALT: &[u8] = b"kagents-vault-salt";

/// The legacy constant salt: [`LEGACY_SALT_VAR`] (plain text, `hex:…` or `base64:…`) when
/// set, else [`LEGACY_SALT`]; and whether it came from the variable.
fn legacy_salt() -> Result<(Vec<u8>, bool), VaultError> {
    let Some(raw) = std::env::var_os(LEGACY_SALT_VAR) else {
        return Ok((LEGACY_SALT.to_vec(), false));
    };
    let raw = raw.to_string_lossy().into_owned();
    let bad = |what: &str| VaultError::Format(format!("{LEGACY_SALT_VAR}: not valid {what}"));
    if let Some(h) = raw.strip_prefix("hex:") {
        if h.len() % 2 != 0 {
            return Err(bad("hex"));
        }
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(h.get(i..i + 2).unwrap_or("zz"), 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| bad("hex"))
    } else if let Some(b) = raw.strip_prefix("base64:") {
        base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(b.trim()))
            .map_err(|_| bad("base64"))
    } else {
        Ok(raw.into_bytes())
    }
    .map(|salt| (salt, true))
}

/// An exclusive lock on `secrets.lock`, released when dropped (the descriptor closes).
struct WriteLock(#[allow(dead_code)] std::fs::File);

fn write_lock(dir: &Path) -> Result<WriteLock, VaultError> {
    let path = dir.join("secrets.lock");
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).truncate(false).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let f = opts.open(&path).map_err(io(&path))?;
    #[cfg(unix)]
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| io(&path)(e.into()))?;
    Ok(WriteLock(f))
}

impl std::fmt::Debug for FileVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileVault")
            .field("dir", &self.dir)
            .field("keys", &self.values.len())
            .finish_non_exhaustive()
    }
}

impl FileVault {
    /// Whether `dir` (an overlay's `config/`) holds a vault.
    pub fn exists(dir: &Path) -> bool {
        dir.join("secrets.enc").is_file()
    }

    /// Creates an empty vault in `dir` (600,000 iterations, a new random salt).
    pub fn create(dir: &Path, passphrase: &str) -> Result<Self, VaultError> {
        Self::create_with_iterations(dir, passphrase, NEW_ITERATIONS)
    }

    /// [`FileVault::create`] with another iteration count (tests; never lower it for real
    /// vaults).
    pub fn create_with_iterations(
        dir: &Path,
        passphrase: &str,
        iterations: u32,
    ) -> Result<Self, VaultError> {
        if Self::exists(dir) {
            return Err(VaultError::Format(format!(
                "{} already holds a vault",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let mut salt = [0u8; 32];
        getrandom::fill(&mut salt)
            .map_err(|e| VaultError::Format(format!("no randomness for the salt: {e}")))?;
        write_atomic(&dir.join("secrets.salt"), &salt)?;
        write_atomic(
            &dir.join("secrets.kdf"),
            serde_json::json!({"iterations": iterations})
                .to_string()
                .as_bytes(),
        )?;
        let v = FileVault {
            dir: dir.to_path_buf(),
            values: BTreeMap::new(),
            key: derive_key(passphrase, &salt, iterations),
            legacy_salt: false,
        };
        let _lock = write_lock(dir)?;
        v.save()?;
        Ok(v)
    }

    /// Opens the vault in `dir` (a legacy vault's salt from [`LEGACY_SALT_VAR`]).
    pub fn open(dir: &Path, passphrase: &str) -> Result<Self, VaultError> {
        Self::open_with_legacy_salt(dir, passphrase, None)
    }

    /// [`FileVault::open`] with the legacy constant salt given here rather than by
    /// [`LEGACY_SALT_VAR`] (used only when `secrets.salt` is missing).
    pub fn open_with_legacy_salt(
        dir: &Path,
        passphrase: &str,
        legacy: Option<&[u8]>,
    ) -> Result<Self, VaultError> {
        let salt_path = dir.join("secrets.salt");
        // (salt, a legacy vault's, whose salt it is: for the message when it does not open)
        let (salt, legacy_salt, whose) = match std::fs::read(&salt_path) {
            Ok(s) => (s, false, ""),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match legacy {
                Some(l) => (l.to_vec(), true, "the legacy salt given"),
                None => match self::legacy_salt()? {
                    (s, true) => (s, true, "the salt in STRATA_VAULT_LEGACY_SALT"),
                    (s, false) => (s, true, "the legacy constant salt `kagents-vault-salt`"),
                },
            },
            Err(e) => return Err(io(&salt_path)(e)),
        };
        let kdf_path = dir.join("secrets.kdf");
        let iterations = match std::fs::read_to_string(&kdf_path) {
            Ok(t) => serde_json::from_str::<serde_json::Value>(&t)
                .ok()
                .and_then(|v| v["iterations"].as_u64())
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    VaultError::Format(format!(
                        "{}: expected {{\"iterations\": N}}",
                        kdf_path.display()
                    ))
                })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => LEGACY_ITERATIONS,
            Err(e) => return Err(io(&kdf_path)(e)),
        };
        let key = derive_key(passphrase, &salt, iterations);
        let values = read_values(dir, &key).map_err(|e| match e {
            VaultError::WrongPassphrase(p) if legacy_salt => VaultError::Format(format!(
                "{} does not open: wrong passphrase, or — as it has no secrets.salt, a legacy \
                 vault — it was written with another salt than {whose} (set \
                 {LEGACY_SALT_VAR} to it: text, hex:… or base64:…); nothing was unlocked",
                p.display()
            )),
            other => other,
        })?;
        Ok(FileVault {
            dir: dir.to_path_buf(),
            values,
            key,
            legacy_salt,
        })
    }

    /// Whether this vault was opened with the legacy constant salt.
    pub fn is_legacy(&self) -> bool {
        self.legacy_salt
    }

    /// Re-reads the file under the write lock, so a change made by another writer since this
    /// vault was opened is kept.
    fn refresh(&mut self) -> Result<(), VaultError> {
        self.values = read_values(&self.dir, &self.key).map_err(|e| match e {
            VaultError::WrongPassphrase(p) => VaultError::Format(format!(
                "{} changed since it was opened and no longer opens with this passphrase \
                 (re-keyed by another process?); nothing was written",
                p.display()
            )),
            other => other,
        })?;
        Ok(())
    }

    /// Sets `key` and saves (under the write lock, over the file's current contents).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), VaultError> {
        let _lock = write_lock(&self.dir)?;
        self.refresh()?;
        self.values.insert(key.to_owned(), Secret::new(value));
        self.save()
    }

    /// Removes `key` and saves; whether it was there.
    pub fn remove(&mut self, key: &str) -> Result<bool, VaultError> {
        let _lock = write_lock(&self.dir)?;
        self.refresh()?;
        let had = self.values.remove(key).is_some();
        if had {
            self.save()?;
        }
        Ok(had)
    }

    /// Re-encrypts with a new random salt and [`NEW_ITERATIONS`] (upgrading older vaults),
    /// under `new_passphrase` when given, else the current one (`passphrase`).
    pub fn rekey(
        &mut self,
        passphrase: &str,
        new_passphrase: Option<&str>,
    ) -> Result<(), VaultError> {
        let _lock = write_lock(&self.dir)?;
        self.refresh()?;
        let mut salt = [0u8; 32];
        getrandom::fill(&mut salt)
            .map_err(|e| VaultError::Format(format!("no randomness for the salt: {e}")))?;
        let key = derive_key(new_passphrase.unwrap_or(passphrase), &salt, NEW_ITERATIONS);
        // The token first under the new key into a temp name, then salt and kdf, then the
        // token in place: a crash leaves either the old trio or a readable new one... except
        // between the renames, which `doctor` detects as a wrong passphrase.
        let old_key = std::mem::replace(&mut self.key, key);
        if let Err(e) = self.save_with_files(&salt) {
            self.key = old_key;
            return Err(e);
        }
        self.legacy_salt = false;
        Ok(())
    }

    fn save_with_files(&self, salt: &[u8]) -> Result<(), VaultError> {
        write_atomic(&self.dir.join("secrets.salt"), salt)?;
        write_atomic(
            &self.dir.join("secrets.kdf"),
            serde_json::json!({"iterations": NEW_ITERATIONS})
                .to_string()
                .as_bytes(),
        )?;
        self.save()
    }

    /// Findings for `strata vault doctor`: (ok, message) pairs.
    pub fn doctor(&self) -> Vec<(bool, String)> {
        let mut out = Vec::new();
        if self.legacy_salt {
            out.push((
                false,
                "legacy constant salt (no secrets.salt): `strata vault rekey` gives it a random one"
                    .to_owned(),
            ));
        }
        #[cfg(unix)]
        for f in ["secrets.enc", "secrets.salt", "secrets.kdf"] {
            use std::os::unix::fs::PermissionsExt;
            match std::fs::metadata(self.dir.join(f)) {
                Ok(m) if m.permissions().mode() & 0o077 == 0 => {
                    out.push((true, format!("{f} is private (0600)")))
                }
                Ok(m) => out.push((
                    false,
                    format!(
                        "{f} is readable by others ({:o}): chmod 600",
                        m.permissions().mode() & 0o777
                    ),
                )),
                Err(_) => out.push((false, format!("{f} is missing (rekey writes it)"))),
            }
        }
        let iterations = std::fs::read_to_string(self.dir.join("secrets.kdf"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["iterations"].as_u64())
            .unwrap_or(u64::from(LEGACY_ITERATIONS));
        out.push(if iterations >= u64::from(NEW_ITERATIONS) {
            (true, format!("{iterations} PBKDF2 iterations"))
        } else {
            (false, format!("only {iterations} PBKDF2 iterations: `strata vault rekey` upgrades to {NEW_ITERATIONS}"))
        });
        let mut spellings: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for k in self.values.keys() {
            spellings
                .entry(k.to_lowercase().replace(['_', '.', ' '], "-"))
                .or_default()
                .push(k);
        }
        for (_, ks) in spellings.iter().filter(|(_, v)| v.len() > 1) {
            out.push((
                false,
                format!("the same key spelled several ways: {}", ks.join(", ")),
            ));
        }
        for (k, v) in &self.values {
            if v.expose() != v.expose().trim() {
                out.push((false, format!("`{k}` has leading or trailing whitespace")));
            }
        }
        out
    }

    fn save(&self) -> Result<(), VaultError> {
        let map: BTreeMap<&str, &str> = self
            .values
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        let plain = Zeroizing::new(
            serde_json::to_vec(&map).map_err(|e| VaultError::Format(e.to_string()))?,
        );
        let f = fernet::Fernet::new(&self.key)
            .ok_or_else(|| VaultError::Format("derived key is not a Fernet key".into()))?;
        write_atomic(&self.dir.join("secrets.enc"), f.encrypt(&plain).as_bytes())
    }
}

impl strata_engine::secret::Vault for FileVault {
    fn get(&self, key: &str) -> Option<Secret> {
        self.values.get(key).cloned()
    }

    fn keys(&self) -> Vec<String> {
        self.values.keys().cloned().collect()
    }
}

/// The decrypted map in `dir`'s `secrets.enc` under `key`.
fn read_values(dir: &Path, key: &str) -> Result<BTreeMap<String, Secret>, VaultError> {
    let enc = dir.join("secrets.enc");
    let token = std::fs::read_to_string(&enc).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            VaultError::Format(format!(
                "{} is not a Fernet token (not text): the file is corrupted",
                enc.display()
            ))
        } else {
            io(&enc)(e)
        }
    })?;
    let f = fernet::Fernet::new(key)
        .ok_or_else(|| VaultError::Format("derived key is not a Fernet key".into()))?;
    let plain = Zeroizing::new(
        f.decrypt(token.trim())
            .map_err(|_| VaultError::WrongPassphrase(enc.clone()))?,
    );
    let map: BTreeMap<String, String> = serde_json::from_slice(&plain).map_err(|e| {
        VaultError::Format(format!(
            "{} decrypts but is not a JSON object of strings: {e}",
            enc.display()
        ))
    })?;
    Ok(map.into_iter().map(|(k, v)| (k, Secret::new(v))).collect())
}

/// Temp file beside `path`, fsync, rename; 0600.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), VaultError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{:x}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("vault"),
        std::process::id(),
        getrandom::u64().unwrap_or(0)
    ));
    let result = (|| -> std::io::Result<()> {
        let mut opts = std::fs::OpenOptions::new();
        opts.create(true).write(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path)(e)
    })
}

/// The passphrase from the environment, in this order: the key file named by
/// `STRATA_VAULT_KEY_FILE` or `~/.config/strata/vault-key` (permissions tightened to 0600
/// with a warning when looser), then `STRATA_VAULT_PASSPHRASE`. `None` when none is set.
pub fn passphrase_from_env() -> Result<Option<Zeroizing<String>>, VaultError> {
    let file = std::env::var_os("STRATA_VAULT_KEY_FILE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".config/strata/vault-key"))
                .filter(|p| p.is_file())
        });
    if let Some(p) = file {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(&p).map_err(io(&p))?;
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(file = %p.display(), "vault key file was readable by others; permissions set to 0600");
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
                    .map_err(io(&p))?;
            }
        }
        let text = Zeroizing::new(std::fs::read_to_string(&p).map_err(io(&p))?);
        return Ok(Some(Zeroizing::new(
            text.trim_end_matches(['\n', '\r']).to_owned(),
        )));
    }
    Ok(std::env::var("STRATA_VAULT_PASSPHRASE")
        .ok()
        .map(Zeroizing::new))
}

/// The passphrase from every source in the documented order: the environment
/// ([`passphrase_from_env`]), then one line on standard input when it is not a terminal
/// (`allow_stdin`: commands whose stdin carries something else pass `false`), then an
/// interactive prompt on the terminal (no echo). `None` when no source gave one.
pub fn passphrase(allow_stdin: bool) -> Result<Option<Zeroizing<String>>, VaultError> {
    use std::io::{BufRead, IsTerminal};
    if let Some(p) = passphrase_from_env()? {
        return Ok(Some(p));
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        if !allow_stdin {
            return Ok(None);
        }
        let mut line = Zeroizing::new(String::new());
        stdin
            .lock()
            .read_line(&mut line)
            .map_err(io(Path::new("<stdin>")))?;
        let p = line.trim_end_matches(['\n', '\r']);
        return Ok((!p.is_empty()).then(|| Zeroizing::new(p.to_owned())));
    }
    prompt("vault passphrase: ").map(Some)
}

/// Asks on the controlling terminal with echo off, restoring the terminal afterwards.
#[cfg(unix)]
fn prompt(question: &str) -> Result<Zeroizing<String>, VaultError> {
    use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
    use std::io::{BufRead, BufReader};
    let tty_path = Path::new("/dev/tty");
    let mut tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(tty_path)
        .map_err(io(tty_path))?;
    let saved = tcgetattr(&tty).map_err(|e| io(tty_path)(e.into()))?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    quiet.local_modes.insert(LocalModes::ECHONL);
    tty.write_all(question.as_bytes()).map_err(io(tty_path))?;
    tcsetattr(&tty, OptionalActions::Flush, &quiet).map_err(|e| io(tty_path)(e.into()))?;
    let mut line = Zeroizing::new(String::new());
    let read = BufReader::new(&tty).read_line(&mut line);
    let _ = tcsetattr(&tty, OptionalActions::Now, &saved);
    read.map_err(io(tty_path))?;
    Ok(Zeroizing::new(
        line.trim_end_matches(['\n', '\r']).to_owned(),
    ))
}

#[cfg(not(unix))]
fn prompt(_question: &str) -> Result<Zeroizing<String>, VaultError> {
    Err(VaultError::Format(
        "no terminal prompt on this platform: set STRATA_VAULT_PASSPHRASE".into(),
    ))
}
