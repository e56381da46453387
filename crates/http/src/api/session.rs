//! `GET /api/session`: who is calling (not a conversation: those are `sessions.rs`).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use serde_json::json;

use super::ok;
use crate::{Caller, HttpState, ui};

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new().route("/api/session", get(api_session))
}

/// `GET /api/session`: who the caller is — principal, tier, tool scope — and, for a
/// dashboard sign-in, the CSRF token its changes must carry.
async fn api_session(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    signed: Option<Extension<ui::SignedIn>>,
) -> Response {
    let signed = signed.map(|Extension(s)| s);
    ok(json!({
        "principal": caller.principal.to_string(),
        "tier": caller.tier,
        "tools": caller.tools,
        "can_approve": st.invoker.policy().may_approve(&caller.principal),
        "token_name": signed.as_ref().map(|s| s.token_name.clone()),
        "csrf": signed.map(|s| s.csrf),
    }))
}
