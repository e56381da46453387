//! Who a request comes from: [`Caller`], the principal, tool scope and tier every surface
//! (the control API, `/chat`, the MCP server, a dashboard sign-in) acts as. A control token
//! makes one (`Caller::of`, in `auth.rs`); the stdio MCP server and the CLI act as the
//! operator.

use strata_engine::config::Access;
use strata_engine::{Principal, Scope, ToolFilter};
use strata_runtime::Invocation;

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
