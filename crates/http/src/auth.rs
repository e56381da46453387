//! Control-API tokens: lookup in constant time, the principal and tool scope each carries, and
//! the [`Caller`] a token makes (the caller itself is `caller.rs`).

use sha2::{Digest, Sha256};
use strata_engine::Principal;
use strata_engine::config::Access;
use subtle::ConstantTimeEq;

use crate::caller::Caller;

/// A resolved token.
#[derive(Debug, Clone)]
pub struct Token {
    /// Principal name.
    pub name: String,
    /// Who calls with it.
    pub principal: Principal,
    digest: [u8; 32],
    /// Tools it may see and call (`None` = all).
    pub tools: Option<Vec<String>>,
    /// Its tier.
    pub tier: Access,
}

impl Token {
    /// A token entry from its secret value.
    pub fn new(name: &str, secret: &str, tools: Option<Vec<String>>, tier: Access) -> Self {
        Token {
            name: name.to_owned(),
            principal: Principal::Token {
                name: name.to_owned(),
                tier,
            },
            digest: Sha256::digest(secret.as_bytes()).into(),
            tools,
            tier,
        }
    }

    /// A per-boot token a CLI agent (Claude Code) uses to reach our tools: its calls are the
    /// agent's own (`Principal::Agent`), so access control treats them as an agent's calls.
    pub fn for_agent(agent_id: &str, secret: &str, tools: Option<Vec<String>>) -> Self {
        let mut t = Token::new(&format!("agent:{agent_id}"), secret, tools, Access::Staff);
        t.principal = Principal::Agent {
            id: agent_id.to_owned(),
        };
        t
    }
}

impl Caller {
    /// The caller a token makes.
    pub fn of(token: &Token) -> Self {
        Caller {
            principal: token.principal.clone(),
            tools: token.tools.clone(),
            tier: token.tier,
        }
    }
}

/// Finds the token matching `presented`, comparing digests in constant time against every
/// entry (no early exit that would time which one matched).
pub fn find<'a>(tokens: &'a [Token], presented: &str) -> Option<&'a Token> {
    let d: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    let mut found = None;
    for t in tokens {
        if bool::from(t.digest.ct_eq(&d)) && found.is_none() {
            found = Some(t);
        }
    }
    found
}

/// The token a request presents: `X-Strata-Token`, or `Authorization: Bearer`.
pub fn presented(headers: &axum::http::HeaderMap) -> Option<String> {
    if let Some(v) = headers.get("x-strata-token").and_then(|v| v.to_str().ok()) {
        return Some(v.trim().to_owned());
    }
    let auth = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, rest) = auth.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim().to_owned())
}

/// Compares two secrets in constant time (for `X-API-Key`).
pub fn same_secret(a: &str, b: &str) -> bool {
    let da: [u8; 32] = Sha256::digest(a.as_bytes()).into();
    let db: [u8; 32] = Sha256::digest(b.as_bytes()).into();
    bool::from(da.ct_eq(&db))
}
