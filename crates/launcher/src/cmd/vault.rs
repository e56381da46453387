//! `strata vault …`.

use super::context::*;
use crate::Exit;
use crate::cli::VaultCommand;

pub(crate) fn vault(l: &Context, command: VaultCommand) -> Exit {
    use std::io::{BufRead, IsTerminal};
    use strata_engine::secret::Vault as _;
    use strata_vault::FileVault;
    let dir = l.config.overlay_dir.join("config");
    // The value of `set` comes on stdin, so its passphrase cannot.
    let stdin_free = !matches!(command, VaultCommand::Set { .. });
    let pass = match strata_vault::passphrase(stdin_free) {
        Ok(Some(p)) => p,
        Ok(None) => {
            eprintln!(
                "error: no vault passphrase: set STRATA_VAULT_KEY_FILE (a 0600 file) or STRATA_VAULT_PASSPHRASE{}",
                if stdin_free {
                    ", give it as one line on stdin, or run on a terminal to be asked"
                } else {
                    " (the value comes on stdin)"
                }
            );
            return Exit::Usage;
        }
        Err(e) => return fail(&anyhow::anyhow!(e)),
    };
    if let VaultCommand::Init = command {
        return match FileVault::create(&dir, &pass) {
            Ok(_) => out(&format!("vault created in {}", dir.display())),
            Err(e) => fail(&anyhow::anyhow!(e)),
        };
    }
    let mut v = match FileVault::open(&dir, &pass) {
        Ok(v) => v,
        Err(e) => return fail(&anyhow::anyhow!(e)),
    };
    let result: Result<String, String> = match command {
        VaultCommand::Init => Err("init is handled before the vault opens".into()),
        VaultCommand::Set { key, from_stdin } => {
            let stdin = std::io::stdin();
            if !from_stdin && stdin.is_terminal() {
                Err(
                    "give the value on standard input (`--from-stdin`), never as an argument"
                        .into(),
                )
            } else {
                let mut line = String::new();
                match stdin.lock().read_line(&mut line) {
                    Ok(_) => {
                        let value = line.trim_end_matches(['\n', '\r']).to_owned();
                        if value.is_empty() {
                            Err("empty value".into())
                        } else {
                            v.set(&key, &value)
                                .map(|()| format!("stored `{key}`"))
                                .map_err(|e| e.to_string())
                        }
                    }
                    Err(e) => Err(format!("reading the value: {e}")),
                }
            }
        }
        VaultCommand::Get { key } => v
            .get(&key)
            .map(|s| s.expose().to_owned())
            .ok_or_else(|| format!("no key `{key}` in the vault")),
        VaultCommand::List => Ok(v.keys().join("\n")),
        VaultCommand::Rm { key } => match v.remove(&key) {
            Ok(true) => Ok(format!("removed `{key}`")),
            Ok(false) => Err(format!("no key `{key}` in the vault")),
            Err(e) => Err(e.to_string()),
        },
        VaultCommand::Rekey => {
            let new = std::env::var("STRATA_VAULT_NEW_PASSPHRASE").ok();
            v.rekey(&pass, new.as_deref())
                .map(|()| "vault re-encrypted (new salt, 600000 iterations)".to_owned())
                .map_err(|e| e.to_string())
        }
        VaultCommand::Doctor => {
            let findings = v.doctor();
            let bad = findings.iter().any(|(ok, _)| !ok);
            let text: Vec<String> = findings
                .into_iter()
                .map(|(ok, m)| format!("{} {m}", if ok { "ok  " } else { "warn" }))
                .collect();
            let code = out(&text.join("\n"));
            return if bad { Exit::Failure } else { code };
        }
    };
    match result {
        Ok(text) => out(&text),
        Err(e) => {
            eprintln!("{e}");
            Exit::Failure
        }
    }
}
