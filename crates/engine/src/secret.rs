//! Secrets in memory, and the vault that hands them out.

use std::fmt;

use zeroize::Zeroize;

/// A secret value: never shown by `Debug` or `Display`, wiped from memory on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that must send it (a header, a child's environment).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(********)")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// Secrets by key: what `vault:<key>` references in config resolve against. The encrypted
/// file vault (`strata-vault`) implements it; tests and embedders may use a map.
///
/// ```
/// use std::collections::HashMap;
/// use strata_engine::secret::{Secret, Vault};
///
/// struct MapVault(HashMap<String, String>);
///
/// impl Vault for MapVault {
///     fn get(&self, key: &str) -> Option<Secret> { self.0.get(key).map(Secret::new) }
///     fn keys(&self) -> Vec<String> { self.0.keys().cloned().collect() }
/// }
/// ```
pub trait Vault: Send + Sync {
    /// The secret stored under `key`, if any.
    fn get(&self, key: &str) -> Option<Secret>;
    /// Every key (never the values).
    fn keys(&self) -> Vec<String>;
}

/// Every `vault:<key>` reference in a configuration tree, as (dotted config path, key), in
/// document order. What start-up and `strata doctor` check against the vault.
pub fn vault_refs(config: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(v: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::String(s) => {
                if let Some(k) = s.strip_prefix("vault:") {
                    out.push((path.join("."), k.to_owned()));
                }
            }
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    path.push(k.clone());
                    walk(v, path, out);
                    path.pop();
                }
            }
            serde_json::Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    path.push(i.to_string());
                    walk(v, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(config, &mut Vec::new(), &mut out);
    out
}

/// Why a secret reference does not resolve. The message names the config key that held the
/// reference and what to do, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// `vault:<key>` with no vault open.
    #[error(
        "`{config_key}` refers to vault key `{key}`, but no vault is open (create one with \
         `strata vault init`, or use `env:VAR` meanwhile)"
    )]
    NoVault {
        /// The config key that held the reference.
        config_key: String,
        /// The vault key it names.
        key: String,
    },
    /// `vault:<key>` the open vault does not hold.
    #[error("`{config_key}` refers to vault key `{key}`, which the vault does not hold")]
    NotInVault {
        /// The config key that held the reference.
        config_key: String,
        /// The vault key it names.
        key: String,
    },
    /// `env:<VAR>` with the variable unset.
    #[error("`{config_key}` refers to environment variable `{var}`, which is not set")]
    EnvUnset {
        /// The config key that held the reference.
        config_key: String,
        /// The variable it names.
        var: String,
    },
}

/// Resolves a config value that may name a secret: `vault:<key>` (from `vault`), `env:<VAR>`
/// (from the environment), anything else is taken literally. Errors name the config key that
/// held the reference and never the secret.
pub fn resolve_ref(
    value: &str,
    vault: Option<&dyn Vault>,
    config_key: &str,
) -> Result<Secret, SecretError> {
    if let Some(key) = value.strip_prefix("vault:") {
        let Some(v) = vault else {
            return Err(SecretError::NoVault {
                config_key: config_key.to_owned(),
                key: key.to_owned(),
            });
        };
        return v.get(key).ok_or_else(|| SecretError::NotInVault {
            config_key: config_key.to_owned(),
            key: key.to_owned(),
        });
    }
    if let Some(var) = value.strip_prefix("env:") {
        return std::env::var(var)
            .map(Secret::new)
            .map_err(|_| SecretError::EnvUnset {
                config_key: config_key.to_owned(),
                var: var.to_owned(),
            });
    }
    Ok(Secret::new(value))
}

/// Whether a key name looks like it holds a secret.
pub fn is_secret_key(key: &str) -> bool {
    let flat: String = key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    const NEEDLES: &[&str] = &[
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "apikey",
        "credential",
        "authorization",
        "privatekey",
        "accesskey",
        "cookie",
    ];
    if NEEDLES.iter().any(|n| flat.contains(n)) {
        return true;
    }
    // `key`, `api_key`, `X-Api-Key`, `signingKey`: a word `key` on its own.
    let words = key
        .split(|c: char| !c.is_ascii_alphanumeric())
        .flat_map(split_camel);
    words.into_iter().any(|w| w.eq_ignore_ascii_case("key"))
}

fn split_camel(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        if c.is_ascii_uppercase() && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OneKey;
    impl Vault for OneKey {
        fn get(&self, key: &str) -> Option<Secret> {
            (key == "k").then(|| Secret::new("v"))
        }
        fn keys(&self) -> Vec<String> {
            vec!["k".into()]
        }
    }

    #[test]
    fn references_resolve_or_name_the_key() {
        assert_eq!(
            resolve_ref("vault:k", Some(&OneKey), "a.b")
                .expect("ok")
                .expose(),
            "v"
        );
        let e = resolve_ref("vault:x", Some(&OneKey), "a.b")
            .expect_err("missing")
            .to_string();
        assert_eq!(
            vault_refs(
                &serde_json::json!({"a": {"b": "vault:k", "c": ["x", "vault:y"]}, "d": "env:Z"})
            ),
            vec![
                ("a.b".to_owned(), "k".to_owned()),
                ("a.c.1".to_owned(), "y".to_owned())
            ]
        );
        assert!(e.contains("`a.b`") && e.contains("`x`"));
        assert!(
            resolve_ref("vault:k", None, "a.b")
                .expect_err("no vault")
                .to_string()
                .contains("no vault")
        );
        assert_eq!(
            resolve_ref("plain", None, "a").expect("lit").expose(),
            "plain"
        );
        let e = resolve_ref("env:STRATA_TEST_SURELY_UNSET_VAR", None, "a")
            .expect_err("unset")
            .to_string();
        assert!(e.contains("not set"));
    }

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("sk-live-abc");
        assert_eq!(format!("{s:?}"), "Secret(********)");
        assert_eq!(s.expose(), "sk-live-abc");
    }
}
