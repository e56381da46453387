//! Control-API tokens: lookup in constant time, scopes, principals.

use sha2::{Digest, Sha256};
use strata_engine::config::Access;
use strata_engine::{Invocation, Principal, Scope, ToolFilter};
use subtle::ConstantTimeEq;

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

/// Who a request comes from (inserted into request extensions by the auth middleware).
#[derive(Debug, Clone)]
pub struct Caller {
    /// Principal for the audit log and access control.
    pub principal: Principal,
    /// Tool scope (`None` = all).
    pub tools: Option<Vec<String>>,
    /// Tier.
    pub tier: Access,
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

    /// The local operator (stdio MCP, CLI): everything.
    pub fn operator() -> Self {
        Caller {
            principal: Principal::Operator,
            tools: None,
            tier: Access::Owner,
        }
    }

    /// The token's tool scope, carried on every call it makes so the Invoker refuses (and
    /// audits) a call outside it. `None` for an unscoped token.
    pub fn scope(&self) -> Option<Scope> {
        let filter = ToolFilter::from_list(self.tools.clone());
        if filter == ToolFilter::All {
            return None;
        }
        Some(match &self.principal {
            // A CLI agent's own token carries that agent's tool list: layer 3.
            Principal::Agent { id } => Scope::agent(id.clone(), filter),
            p => Scope::token(p.to_string(), filter),
        })
    }

    /// A test for which tools the scope lets be listed (the Invoker decides calls); the
    /// scope is built once for the whole listing.
    pub fn lister(&self) -> impl Fn(&str) -> bool + use<> {
        let scope = self.scope();
        move |tool| scope.as_ref().is_none_or(|s| s.filter.allows(tool))
    }

    /// A call of `tool` by this caller, inside its scope.
    pub fn invocation(&self, tool: String, args: serde_json::Value) -> Invocation {
        let mut call = Invocation::new(tool, args, self.principal.clone());
        call.scopes.extend(self.scope());
        call
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
