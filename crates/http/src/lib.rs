//! # strata-http
//!
//! The doors of a running Strata: the token-protected control API (`/api/*`), `POST /chat`
//! and `POST /execute`, and the MCP endpoint (`/mcp`, streamable HTTP). Every tool call goes
//! through the engine's Invoker with the caller's principal; this crate only maps results
//! onto HTTP. `docs/API.md` documents the routes; `GET /api/openapi.json` describes them.
//!
//! Each resource's routes are in `api/<resource>.rs`, the dashboard's pages in `ui/`; this
//! file holds the state they share, assembles the router from their `routes()` and runs the
//! middleware (host check, authentication, `no-store`).

// The OpenAPI document is one `json!` literal deeper than the default limit allows.
#![recursion_limit = "256"]

mod api;
pub mod auth;
mod body;
pub mod caller;
pub mod mcp;
#[cfg(feature = "mcp-client")]
pub mod mcp_client;
pub mod ui;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use strata_runtime::Invoker;
use strata_runtime::manager::AgentManager;

pub use api::ApiError;
pub use api::openapi::{ROUTES, openapi};
use api::read_body;
pub use auth::Token;
pub use caller::Caller;

/// Everything the handlers share.
pub struct HttpState {
    /// Runs tool calls.
    pub invoker: Arc<Invoker>,
    /// Runs agent turns (`None`: no agent could start).
    pub manager: Option<Arc<AgentManager>>,
    /// Agent for `/chat` without `agent`.
    pub default_agent: Option<String>,
    /// Agents that could not start, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Control tokens.
    pub tokens: Vec<Token>,
    /// `X-API-Key` for `/execute`.
    pub execute_key: Option<String>,
    /// Body limit.
    pub max_body_bytes: usize,
    /// Body read timeout.
    pub read_timeout: Duration,
    /// The audit log read back (`GET /api/events` outside a cluster).
    pub audit: Arc<dyn strata_engine::audit::AuditLog>,
    /// The audit log's file (`/api/events/stream` follows it, `/api/audit/verify` checks its
    /// chain).
    pub audit_path: PathBuf,
    /// Roots for `/api/artifacts`.
    pub artifact_roots: Vec<PathBuf>,
    /// The overlay directory.
    pub overlay_dir: PathBuf,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The state store (session count in `/api/status`, its health in `/api/health`).
    pub sessions: Option<Arc<dyn strata_runtime::store::StateStore>>,
    /// When the server started.
    pub started: Instant,
    /// The cluster this instance is a member of (`GET /api/cluster`).
    pub cluster: Option<Arc<dyn strata_runtime::turns::ClusterView>>,
    /// The scheduler (`/api/schedules`); `None`: no schedules here.
    pub schedules: Option<Arc<strata_runtime::schedule::Scheduler>>,
    /// Renders the installed metrics recorder in the Prometheus text format (`GET /metrics`);
    /// `None`: metrics are off.
    pub metrics: Option<MetricsRender>,
    /// The last warnings and errors logged (`GET /api/status`); `None`: not kept.
    pub errors: Option<RecentErrors>,
    /// The dashboard's sign-ins (cookies) and its one-time sign-in link.
    pub ui: ui::SignIns,
    /// What the launcher knows of the config and skills (`/api/config`, `/api/agents`).
    pub described: Described,
}

/// The last warnings and errors the process logged, oldest first (`{ts, level, target,
/// message}`).
pub type RecentErrors = Arc<dyn Fn() -> Vec<Value> + Send + Sync>;

/// Renders the metrics recorder's current values as Prometheus text.
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

/// What the launcher knows of the configuration that the HTTP state does not: each value's
/// layer, secrets masked (`GET /api/config`), and the skills (`GET /api/agents`).
#[derive(Default)]
pub struct Described {
    /// Every leaf value's dotted key, value (masked) and the layer that set it.
    pub origins: Vec<(String, Value, String)>,
    /// The merged configuration, masked.
    pub masked: Value,
    /// The skills, reloaded as their files change.
    pub skills: Option<Arc<strata_runtime::skills::SkillSet>>,
}

/// Builds the router: every route of [`ROUTES`], the MCP endpoint, auth, `no-store`.
pub fn router(state: Arc<HttpState>) -> Router {
    let mcp = mcp::streamable_service(state.invoker.clone());
    Router::new()
        .merge(api::health::routes())
        .merge(api::tools::routes())
        .merge(api::events::routes())
        .merge(api::approvals::routes())
        .merge(api::artifacts::routes())
        .merge(api::status::routes())
        .merge(api::cluster::routes())
        .merge(api::schedules::routes())
        .merge(api::goals::routes())
        .merge(api::turns::routes())
        .merge(api::usage::routes())
        .merge(api::openapi::routes())
        .merge(api::metrics::routes())
        .merge(api::chat::routes())
        .merge(api::session::routes())
        .merge(api::sessions::routes())
        .merge(api::agents::routes())
        .merge(api::config::routes())
        .merge(ui::routes())
        .nest_service("/mcp", mcp)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .layer(middleware::map_response(no_store))
        .with_state(state)
}

/// Refuses a request addressed to a host `server.allowed_hosts` does not list, before
/// anything else looks at it: a page a browser loaded from another site, whose name now
/// points here (DNS rebinding), reaches nothing.
async fn check_host(State(st): State<Arc<HttpState>>, req: Request, next: Next) -> Response {
    // Owned only when refused: the common case allocates nothing.
    let refused = {
        let host = req
            .headers()
            .get(header::HOST)
            .map(|h| h.to_str().unwrap_or("\u{fffd}"))
            .or(req.uri().authority().map(|a| a.as_str()));
        (!st.invoker.env().config.server.host_allowed(host)).then(|| host.map(str::to_owned))
    };
    let Some(host) = refused else {
        return next.run(req).await;
    };
    ApiError::new(
        StatusCode::FORBIDDEN,
        "host_not_allowed",
        format!(
            "requests for host `{}` are not served here: list the names clients use in \
             `server.allowed_hosts`",
            host.unwrap_or_default()
        ),
    )
    .into_response()
}

/// `/metrics` alone, without a token: for `metrics.bind`, a listener the launcher allows only
/// on a loopback address.
pub fn metrics_router(state: Arc<HttpState>) -> Router {
    Router::new()
        .merge(api::metrics::routes())
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .layer(middleware::map_response(no_store))
        .with_state(state)
}

/// Every answer: never cached, never sniffed as another type, never framed, never a
/// referrer, and — JSON and text are all the API serves — no content a browser would run.
async fn no_store(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::REFERRER_POLICY)
        .or_insert(HeaderValue::from_static("no-referrer"));
    // The dashboard's pages set their own (still strict) policy.
    h.entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(
            "default-src 'none'; frame-ancestors 'none'",
        ));
    resp
}

/// Routes that need no control token (`/execute` has its own key).
fn is_public(path: &str) -> bool {
    matches!(path, "/health" | "/api/health" | "/execute") || ui::is_ui(path)
}

async fn authenticate(State(st): State<Arc<HttpState>>, mut req: Request, next: Next) -> Response {
    if is_public(req.uri().path()) {
        return next.run(req).await;
    }
    let presented = auth::presented(req.headers());
    // The dashboard's cookie stands for its token on `/api/*` (not `/mcp`, `/chat`, …), and a
    // change made with it must carry the sign-in's CSRF token from a page of this server.
    if presented.is_none()
        && req.uri().path().starts_with("/api/")
        && st.invoker.env().config.server.dashboard.enabled
        && let Some(s) = ui::signed_in(&st, req.headers())
    {
        let safe = matches!(
            *req.method(),
            axum::http::Method::GET | axum::http::Method::HEAD
        );
        if !safe && !ui::csrf_ok(&s, req.headers()) {
            return ui::csrf_refused();
        }
        req.extensions_mut().insert(s.caller.clone());
        req.extensions_mut().insert(s);
        return next.run(req).await;
    }
    let route: String = format!("{} {}", req.method(), req.uri().path())
        .chars()
        .take(200)
        .collect();
    // Where a client cannot set a header (a form, a webhook), a POST may carry the token as
    // the JSON body's `token` field — taken out before the handler reads the body. Never
    // for GET: a token in a URL ends up in logs and histories.
    let (presented, mut req) = match presented {
        Some(p) => (Some(p), req),
        None if *req.method() == axum::http::Method::POST
            && (req.uri().path().starts_with("/api/") || req.uri().path() == "/chat") =>
        {
            match token_from_body(&st, req).await {
                Ok(found) => found,
                Err(e) => return e.into_response(),
            }
        }
        None => (None, req),
    };
    let Some(presented) = presented else {
        st.invoker
            .refusal("unauthenticated", "unknown", &route, "missing token");
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing token: send `X-Strata-Token: <token>` or `Authorization: Bearer <token>`",
        )
        .into_response();
    };
    let Some(token) = auth::find(&st.tokens, &presented) else {
        st.invoker
            .refusal("unauthenticated", "unknown", &route, "invalid token");
        return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "invalid token")
            .into_response();
    };
    req.extensions_mut().insert(Caller::of(token));
    next.run(req).await
}

/// A JSON body's `token` field, and the request with its body as it was less that field.
async fn token_from_body(
    st: &HttpState,
    req: Request,
) -> Result<(Option<String>, Request), ApiError> {
    let is_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !is_json {
        return Ok((None, req));
    }
    let (parts, body) = req.into_parts();
    let bytes = read_body(st, Request::from_parts(parts.clone(), body)).await?;
    let mut token = None;
    let bytes = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(mut m)) => match m.remove("token") {
            Some(Value::String(t)) => {
                token = Some(t);
                axum::body::Bytes::from(serde_json::to_vec(&Value::Object(m)).unwrap_or_default())
            }
            _ => bytes,
        },
        _ => bytes,
    };
    let mut parts = parts;
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok((
        token,
        Request::from_parts(parts, axum::body::Body::from(bytes)),
    ))
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no route {} {}; see GET /api/openapi.json",
            req.method(),
            req.uri().path()
        ),
    )
}

/// Serves `router` on `listener` until `shutdown` resolves; in-flight requests finish first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<HttpState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves [`metrics_router`] (only `/metrics`, no token) on `listener` until `shutdown`.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: Arc<HttpState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, metrics_router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
