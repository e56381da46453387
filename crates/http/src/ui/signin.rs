//! The dashboard's sign-ins: a cookie a browser presents instead of the token, and the
//! one-time sign-in link `serve` prints.
//!
//! A sign-in lives in this process's memory only: the cookie holds a random id whose SHA-256
//! is the key here, so restarting `serve` (with a new per-boot token or not) signs everyone
//! out, and logging out removes it. Each sign-in has its own CSRF token, which every
//! state-changing request made with the cookie must carry in `X-Strata-CSRF`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::caller::Caller;

/// The cookie's name.
pub const COOKIE: &str = "strata_session";

/// The header a state-changing request made with the cookie carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-strata-csrf";

/// More sign-ins than this at once: the oldest is dropped (only token holders sign in, so this
/// bounds memory, it does not ration anyone).
const MAX_LIVE: usize = 10_000;

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct SignedIn {
    /// Who it is: the token's principal, scope and tier.
    pub caller: Caller,
    /// The CSRF token its state-changing requests must carry.
    pub csrf: String,
    /// The signed-in token's name (shown on the page).
    pub token_name: String,
    expires: Instant,
    created: Instant,
}

/// Every live sign-in of this process, and the one-time sign-in link's secret.
pub struct SignIns {
    lifetime: Duration,
    live: Mutex<HashMap<[u8; 32], SignedIn>>,
    once: Mutex<Option<([u8; 32], Caller, String)>>,
}

impl Default for SignIns {
    fn default() -> Self {
        SignIns::new(Duration::from_secs(12 * 3600))
    }
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The operating system gave no random bytes: no secret can be made.
#[derive(Debug, thiserror::Error)]
#[error("no randomness: {0}")]
pub struct NoRandomness(#[from] getrandom::Error);

/// 32 random bytes, URL-safe base64.
pub fn random_secret() -> Result<String, NoRandomness> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

impl SignIns {
    /// Sign-ins that last `lifetime`.
    pub fn new(lifetime: Duration) -> Self {
        SignIns {
            lifetime: lifetime.max(Duration::from_secs(60)),
            live: Mutex::new(HashMap::new()),
            once: Mutex::new(None),
        }
    }

    /// How long a sign-in lasts.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// Signs `caller` in: the cookie's value (the caller's secret from now on).
    pub fn sign_in(&self, caller: Caller, token_name: &str) -> Result<String, NoRandomness> {
        let id = random_secret()?;
        let csrf = random_secret()?;
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, s| s.expires > now);
        if live.len() >= MAX_LIVE
            && let Some(oldest) = live.iter().min_by_key(|(_, s)| s.created).map(|(k, _)| *k)
        {
            live.remove(&oldest);
        }
        live.insert(
            digest(&id),
            SignedIn {
                caller,
                csrf,
                token_name: token_name.to_owned(),
                expires: now + self.lifetime,
                created: now,
            },
        );
        Ok(id)
    }

    /// The sign-in a cookie value belongs to, if it is live.
    pub fn find(&self, cookie: &str) -> Option<SignedIn> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.get(&digest(cookie))
            .filter(|s| s.expires > Instant::now())
            .cloned()
    }

    /// Ends a sign-in (logout).
    pub fn sign_out(&self, cookie: &str) {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&digest(cookie));
    }

    /// A new one-time sign-in secret for `caller` (the previous one stops working).
    pub fn one_time(&self, caller: Caller, token_name: &str) -> Result<String, NoRandomness> {
        let secret = random_secret()?;
        *self.once.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((digest(&secret), caller, token_name.to_owned()));
        Ok(secret)
    }

    /// Takes the one-time secret: who it signs in, once; `None` for any other value and for
    /// the same value a second time.
    pub fn redeem(&self, presented: &str) -> Option<(Caller, String)> {
        use subtle::ConstantTimeEq;
        let mut once = self.once.lock().unwrap_or_else(|p| p.into_inner());
        let matches = once
            .as_ref()
            .is_some_and(|(d, _, _)| bool::from(d.ct_eq(&digest(presented))));
        if !matches {
            return None;
        }
        once.take().map(|(_, caller, name)| (caller, name))
    }
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// Whether a request comes from a page of this server: `Sec-Fetch-Site`, where the browser
/// sends it, says `same-origin` (or `none`: typed or bookmarked), and `Origin`, where sent,
/// names the host the request is addressed to. A request carrying neither (not a browser)
/// passes: the cookie alone never authorises a state change, its CSRF token does.
pub fn same_origin(headers: &axum::http::HeaderMap) -> bool {
    use axum::http::header;
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or_default();
        if !matches!(site, "same-origin" | "none") {
            return false;
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let origin = origin.to_str().unwrap_or_default();
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    authority.is_some_and(|a| a.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    #[test]
    fn a_one_time_secret_signs_in_once() {
        let s = SignIns::default();
        let secret = s.one_time(Caller::operator(), "operator").expect("secret");
        assert!(s.redeem("wrong").is_none());
        assert!(s.redeem(&secret).is_some());
        assert!(s.redeem(&secret).is_none(), "used up");
    }

    #[test]
    fn a_sign_in_is_found_until_signed_out() {
        let s = SignIns::default();
        let id = s.sign_in(Caller::operator(), "operator").expect("id");
        let found = s.find(&id).expect("live");
        assert_eq!(found.token_name, "operator");
        assert_ne!(found.csrf, id);
        assert!(s.find("not-it").is_none());
        s.sign_out(&id);
        assert!(s.find(&id).is_none());
    }

    #[test]
    fn origins() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("127.0.0.1:8770"));
        assert!(
            same_origin(&h),
            "no Origin: not a browser's cross-site request"
        );
        h.insert("origin", HeaderValue::from_static("http://127.0.0.1:8770"));
        assert!(same_origin(&h));
        h.insert("origin", HeaderValue::from_static("http://evil.example"));
        assert!(!same_origin(&h));
        h.insert("origin", HeaderValue::from_static("null"));
        assert!(!same_origin(&h));
        h.insert("origin", HeaderValue::from_static("http://127.0.0.1:8770"));
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&h));
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            "cookie",
            HeaderValue::from_static("a=1; strata_session=abc ; b=2"),
        );
        assert_eq!(cookie(&h, COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
