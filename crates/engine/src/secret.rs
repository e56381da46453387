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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("sk-live-abc");
        assert_eq!(format!("{s:?}"), "Secret(********)");
        assert_eq!(s.expose(), "sk-live-abc");
    }
}
