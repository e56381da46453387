//! # strata-http
//!
//! The doors of a running Strata: the token-protected control API (`/api/*`), `POST /chat`
//! and `POST /execute`, and the MCP endpoint (`/mcp`, streamable HTTP). Every tool call goes
//! through the engine's Invoker with the caller's principal; this crate only maps results
//! onto HTTP. `docs/API.md` documents the routes; `GET /api/openapi.json` describes them.

// The OpenAPI document is one `json!` literal deeper than the default limit allows.
#![recursion_limit = "256"]

pub mod auth;
mod body;
mod goals;
pub mod mcp;
#[cfg(feature = "mcp-client")]
pub mod mcp_client;
mod openapi;
mod pages;
mod status;
pub mod ui;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::{Value, json};
use strata_engine::Invoker;
use strata_engine::manager::AgentManager;
use strata_engine::turns::TurnRequest;

pub use auth::{Caller, Token};
pub use openapi::{ROUTES, openapi};
pub use pages::Described;

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
    /// The audit log (for `/api/events`).
    pub audit_path: PathBuf,
    /// Roots for `/api/artifacts`.
    pub artifact_roots: Vec<PathBuf>,
    /// The overlay directory.
    pub overlay_dir: PathBuf,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The state store (session count in `/api/status`, its health in `/api/health`).
    pub sessions: Option<Arc<dyn strata_engine::store::StateStore>>,
    /// When the server started.
    pub started: Instant,
    /// The cluster this instance is a member of (`GET /api/cluster`).
    pub cluster: Option<Arc<dyn strata_engine::turns::ClusterView>>,
    /// The scheduler (`/api/schedules`); `None`: no schedules here.
    pub schedules: Option<Arc<strata_engine::scheduler::Scheduler>>,
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

/// A failure in the envelope every route uses: `{"ok": false, "code", "error"}`.
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// `Retry-After` (seconds), for a 429.
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    /// With `Retry-After: secs`.
    fn retry_after(mut self, secs: Option<u64>) -> Self {
        self.retry_after = secs;
        self
    }
    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            Json(json!({"ok": false, "code": self.code, "error": self.message})),
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        r
    }
}

fn ok(value: Value) -> Response {
    Json(json!({"ok": true, "value": value})).into_response()
}

/// Builds the router: every route of [`ROUTES`], the MCP endpoint, auth, `no-store`.
pub fn router(state: Arc<HttpState>) -> Router {
    let mcp = mcp::streamable_service(state.invoker.clone());
    Router::new()
        .route("/health", get(health))
        .route("/api/health", get(api_health))
        .route("/api/tools", get(tools))
        .route("/api/invoke", post(invoke))
        .route("/api/events", get(events))
        .route("/api/approvals", get(approvals_list))
        .route("/api/approvals/{id}/{decision}", post(approvals_decide))
        .route("/api/artifacts", get(artifacts_list))
        .route("/api/artifacts/{*path}", get(artifact_read))
        .route("/api/state", get(api_state))
        .route("/api/status", get(status::api_status))
        .route("/api/cluster", get(api_cluster))
        .route("/api/schedules", get(schedules_list))
        .route("/api/goals", get(goals::list))
        .route("/api/goals/{id}", get(goals::show))
        .route("/api/goals/{id}/events", get(goals::events))
        .route("/api/usage", get(usage))
        .route("/api/schedules/{name}/{action}", post(schedules_act))
        .route("/api/openapi.json", get(openapi_doc))
        .route("/metrics", get(metrics))
        .route("/chat", post(chat))
        .route("/execute", post(execute))
        .route("/api/session", get(api_session))
        .route("/api/events/stream", get(events_stream))
        .route("/api/audit/verify", get(audit_verify))
        .route("/api/sessions", get(pages::sessions_list))
        .route("/api/sessions/{agent}/{session}", get(pages::session_show))
        .route(
            "/api/sessions/{agent}/{session}/{action}",
            post(pages::session_reset),
        )
        .route("/api/agents", get(pages::agents))
        .route("/api/config", get(pages::config))
        .route("/", get(ui::root))
        .route("/ui", get(ui::root))
        .route("/ui/", get(ui::index))
        .route("/ui/login", get(ui::login_page).post(ui::login))
        .route("/ui/logout", post(ui::logout))
        .route("/ui/assets/{file}", get(ui::asset))
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
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .layer(middleware::map_response(no_store))
        .with_state(state)
}

/// The gauges read at scrape time (the approval queue from the store, the live sessions),
/// then the recorder's text.
async fn metrics(State(st): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    use strata_engine::approval::ApprovalStatus;
    let render = st.metrics.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "metrics are off on this server (metrics.enabled: false)",
        )
    })?;
    if let Some(approvals) = st.invoker.approvals() {
        match approvals
            .store()
            .list(Some(ApprovalStatus::Pending), 10_000)
            .await
        {
            Ok(rows) => {
                let now = strata_engine::approval::now_secs();
                let oldest = rows.iter().map(|r| r.created_at).min().unwrap_or(now);
                strata_engine::meters::approvals_pending(rows.len(), (now - oldest).max(0) as u64);
            }
            Err(e) => tracing::warn!(error = %e, "pending approvals not counted for /metrics"),
        }
    }
    if let Some(m) = &st.manager {
        strata_engine::meters::live_sessions(m.live_sessions());
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        render(),
    )
        .into_response())
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

/// Query parameters, parsed as axum's `Query` parses them, but a parameter that is not
/// what the route takes (a word for a number, one given twice) is answered with the error
/// envelope (`400 bad_request`) rather than axum's plain-text rejection.
pub(crate) struct Query<T>(pub(crate) T);

impl<T, S> axum::extract::FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Query(v)),
            Err(e) => Err(ApiError::bad_request(format!(
                "query string: {}",
                e.body_text()
                    .trim_start_matches("Failed to deserialize query string: ")
            ))),
        }
    }
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

async fn health() -> &'static str {
    "ok"
}

/// Whether the server and its store answer. A store that does not answer makes the answer
/// `ok: false` with `store.state: degraded` and why (still 200: the server itself is up).
async fn api_health(State(st): State<Arc<HttpState>>) -> Json<Value> {
    let store = match &st.sessions {
        Some(s) => {
            let health = s.health().await;
            let mut v = serde_json::to_value(&health).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("backend".into(), json!(s.backend()));
            }
            Some((health == strata_engine::store::StoreHealth::Ok, v))
        }
        None => None,
    };
    Json(json!({
        "ok": store.as_ref().is_none_or(|(ok, _)| *ok),
        "service": "strata",
        "version": env!("CARGO_PKG_VERSION"),
        "tool_count": st.invoker.registry().len(),
        "store": store.map(|(_, v)| v),
    }))
}

async fn tools(State(st): State<Arc<HttpState>>, Extension(caller): Extension<Caller>) -> Response {
    let list = st.invoker.registry().list();
    let listed = caller.lister();
    let tools: Vec<Value> = list
        .iter()
        .filter(|t| listed(&t.spec().name))
        .filter(|t| st.invoker.policy().callable_by(&caller.principal, t.spec()))
        .map(|t| serde_json::to_value(t.listing()).unwrap_or(Value::Null))
        .collect();
    ok(json!({ "tools": tools }))
}

/// Reads a body with the size cap (413 without reading further) and the stall timeout (408).
async fn read_body(st: &HttpState, req: Request) -> Result<axum::body::Bytes, ApiError> {
    let too_big = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body over {} bytes", st.max_body_bytes),
        )
    };
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > st.max_body_bytes as u64
    {
        return Err(too_big());
    }
    let body = req.into_body();
    match tokio::time::timeout(
        st.read_timeout,
        axum::body::to_bytes(body, st.max_body_bytes),
    )
    .await
    {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "request body not received within {}s",
                st.read_timeout.as_secs()
            ),
        )),
        Ok(Err(e)) => {
            let text = e.to_string();
            if text.contains("length limit") {
                Err(too_big())
            } else {
                Err(ApiError::bad_request(format!(
                    "cannot read the body: {text}"
                )))
            }
        }
        Ok(Ok(b)) => Ok(b),
    }
}

async fn invoke(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    let body = read_body(&st, req).await?;
    let b: body::InvokeBody = body::parse(&body).map_err(ApiError::bad_request)?;
    let tool = body::required(b.tool, "tool")
        .map_err(ApiError::bad_request)?
        .0;
    let args = Value::Object(b.args.unwrap_or_default().0);
    let mut call = caller.invocation(tool, args);
    call.request_id = b.request_id.map(|t| t.0);
    let result = st.invoker.invoke(call).await;
    // Outside the token's scope: refused and audited by the Invoker, answered 403 here.
    if result.out_of_scope {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            result.error.unwrap_or_default(),
        ));
    }
    Ok(ok(serde_json::to_value(result).unwrap_or(Value::Null)))
}

#[derive(serde::Deserialize)]
struct Limit {
    limit: Option<String>,
}

fn parse_limit(raw: Option<&str>, default: usize, max: usize) -> Result<usize, ApiError> {
    match raw {
        None => Ok(default),
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_request(format!(
                "`limit` must be a whole number from 1 to {max}"
            ))),
        },
    }
}

async fn events(
    State(st): State<Arc<HttpState>>,
    Query(q): Query<Limit>,
) -> Result<Response, ApiError> {
    let n = parse_limit(q.limit.as_deref(), 20, 1000)?;
    // A cluster member answers with every member's records.
    if let Some(c) = &st.cluster
        && let Some(found) = c.events(n).await
    {
        let records =
            found.map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e))?;
        return Ok(ok(json!({ "events": records })));
    }
    let path = st.audit_path.clone();
    let records = tokio::task::spawn_blocking(move || strata_store::audit_log::tail(&path, n))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(ok(json!({ "events": records })))
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

/// `GET /api/events/stream`: the audit records this instance writes from now on, as
/// server-sent events (`event: audit`, one JSON record per event), with a comment every 15 s
/// to keep proxies from closing it.
async fn events_stream(State(st): State<Arc<HttpState>>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use std::collections::VecDeque;
    let follower = strata_store::audit_log::Follower::from_end(&st.audit_path);
    let stream = futures_util::stream::unfold(
        (follower, VecDeque::<String>::new()),
        |(mut f, mut queue)| async move {
            loop {
                if let Some(line) = queue.pop_front() {
                    let ev = Event::default().event("audit").data(line);
                    return Some((Ok::<_, std::convert::Infallible>(ev), (f, queue)));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
                let (back, text) = tokio::task::spawn_blocking(move || {
                    let text = f.read_new(1 << 20);
                    (f, text)
                })
                .await
                .ok()?;
                f = back;
                match text {
                    Ok(t) => queue.extend(
                        t.lines()
                            .filter(|l| !l.trim().is_empty())
                            .map(str::to_owned),
                    ),
                    Err(e) => tracing::warn!(error = %e, "event stream cannot read the audit log"),
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// `GET /api/audit/verify`: the audit log's hash chain checked end to end (as `strata audit
/// verify`): `{intact, records, files, starts_mid_chain}` or `{intact: false, file, line,
/// reason}` at the first broken link.
async fn audit_verify(State(st): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    let path = st.audit_path.clone();
    let report = tokio::task::spawn_blocking(move || strata_store::audit_log::verify_all(&path))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(ok(match report {
        Ok(r) => json!({
            "intact": true,
            "records": r.records,
            "files": r.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
            "starts_mid_chain": r.starts_mid_chain,
        }),
        Err((file, broken)) => json!({
            "intact": false,
            "file": file.display().to_string(),
            "line": broken.line,
            "reason": broken.reason,
        }),
    }))
}

#[derive(serde::Deserialize)]
struct ApprovalQuery {
    status: Option<String>,
    limit: Option<String>,
}

fn approvals_of(st: &HttpState) -> Result<&Arc<strata_engine::approval::Approvals>, ApiError> {
    st.invoker.approvals().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "approvals are not enabled in this process",
        )
    })
}

async fn approvals_list(
    State(st): State<Arc<HttpState>>,
    Query(q): Query<ApprovalQuery>,
) -> Result<Response, ApiError> {
    use strata_engine::approval::ApprovalStatus;
    let limit = parse_limit(q.limit.as_deref(), 50, 1000)?;
    let status = match q.status.as_deref().unwrap_or("pending") {
        "all" => None,
        s => Some(ApprovalStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "`status` must be pending, approved, denied, timeout or all, not `{s}`"
            ))
        })?),
    };
    let rows = approvals_of(&st)?
        .store()
        .list(status, limit)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(ok(json!({ "approvals": rows })))
}

async fn approvals_decide(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path((id, decision)): axum::extract::Path<(String, String)>,
    req: Request,
) -> Result<Response, ApiError> {
    use strata_engine::approval::DecideError;
    let approve = match decision.as_str() {
        "approve" => true,
        "deny" => false,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no route POST /api/approvals/{id}/{other}; use `approve` or `deny`"),
            ));
        }
    };
    let body = read_body(&st, req).await?;
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let b: body::DecideBody = body::parse(&body).map_err(ApiError::bad_request)?;
        b.reason.map(|t| t.0)
    };
    let r = approvals_of(&st)?
        .decide(&id, approve, &caller.principal, reason.as_deref())
        .await
        .map_err(|e| {
            let (code, name) = match &e {
                DecideError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
                DecideError::NotPending { .. } => (StatusCode::CONFLICT, "conflict"),
                DecideError::NotApprover(_) => (StatusCode::FORBIDDEN, "forbidden"),
                DecideError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            };
            ApiError::new(code, name, e.to_string())
        })?;
    Ok(ok(serde_json::to_value(r).unwrap_or(Value::Null)))
}

#[derive(serde::Deserialize)]
struct ArtifactQuery {
    under: Option<String>,
    glob: Option<String>,
    limit: Option<String>,
    max_bytes: Option<String>,
}

/// `rel` when it names something under one of `server.artifact_roots` (lexically: no `..`;
/// absolute paths must lie inside a root). The file tools then confine it for real.
fn artifact_path(st: &HttpState, rel: &str) -> Result<String, ApiError> {
    use std::path::{Component, Path};
    let forbidden = || {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("`{rel}` is outside `server.artifact_roots`"),
        )
    };
    let p = Path::new(rel);
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(forbidden());
    }
    let full = st.overlay_dir.join(p);
    if st.artifact_roots.iter().any(|r| full.starts_with(r)) {
        Ok(rel.to_owned())
    } else {
        Err(forbidden())
    }
}

/// Runs a file tool for an artifact route as the caller (scope, access control, rate limits,
/// audit: like any call) and maps a refusal onto HTTP.
async fn artifact_call(
    st: &HttpState,
    caller: &Caller,
    tool: &str,
    args: Value,
) -> Result<Value, ApiError> {
    let r = st
        .invoker
        .invoke(caller.invocation(tool.into(), args))
        .await;
    let message = r.error.clone().unwrap_or_default();
    match r.status {
        strata_engine::Status::Ok => Ok(r.value),
        strata_engine::Status::Denied | strata_engine::Status::ApprovalDenied => {
            Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", message))
        }
        strata_engine::Status::RateLimited => {
            Err(
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message)
                    .retry_after(r.retry_after_secs),
            )
        }
        strata_engine::Status::ValidationError => Err(ApiError::bad_request(message)),
        strata_engine::Status::UnknownTool => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("{message} (artifacts are served by the core file tools)"),
        )),
        strata_engine::Status::Error => {
            Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", message))
        }
    }
}

async fn artifacts_list(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ArtifactQuery>,
) -> Result<Response, ApiError> {
    let limit = parse_limit(q.limit.as_deref(), 200, 5000)?;
    let mut args = json!({ "limit": limit });
    let under = q.under.as_deref().filter(|u| !u.trim().is_empty());
    if let Some(u) = under {
        args["path"] = json!(artifact_path(&st, u)?);
    }
    if let Some(g) = &q.glob {
        args["glob"] = json!(g);
    }
    let mut listed = artifact_call(&st, &caller, "list_files", args).await?;
    // Without `under`, list_files walks every `tools.roots` entry: keep the artifact roots.
    if under.is_none()
        && let Some(entries) = listed.get_mut("entries").and_then(Value::as_array_mut)
    {
        entries.retain(|e| {
            e["path"]
                .as_str()
                .is_some_and(|p| artifact_path(&st, p).is_ok())
        });
    }
    Ok(ok(json!({
        "entries": listed["entries"], "truncated": listed["truncated"],
    })))
}

async fn artifact_read(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path(rel): axum::extract::Path<String>,
    Query(q): Query<ArtifactQuery>,
) -> Result<Response, ApiError> {
    let max = parse_limit(q.max_bytes.as_deref(), 65_536, 1_048_576)?;
    let path = artifact_path(&st, &rel)?;
    let v = artifact_call(
        &st,
        &caller,
        "read_file",
        json!({"path": path, "max_bytes": max, "binary": true}),
    )
    .await?;
    Ok(ok(json!({
        "path": rel, "size": v["size"], "truncated": v["truncated"],
        "encoding": v["encoding"], "content": v["content"],
    })))
}

async fn api_cluster(State(st): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    // Not a member: the same shape, saying so.
    let Some(c) = &st.cluster else {
        return Ok(ok(json!({"enabled": false, "instances": []})));
    };
    c.status()
        .await
        .map(|mut v| {
            v["enabled"] = json!(true);
            ok(v)
        })
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e))
}

fn scheduler_of(st: &HttpState) -> Result<&Arc<strata_engine::scheduler::Scheduler>, ApiError> {
    st.schedules.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "schedules are not run in this process",
        )
    })
}

/// The configured schedules and those made in conversation.
async fn current(
    sch: &strata_engine::scheduler::Scheduler,
) -> Result<Vec<strata_engine::schedule::Schedule>, ApiError> {
    sch.current().await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )
    })
}

#[derive(serde::Deserialize)]
struct UsageParams {
    by: Option<String>,
    since: Option<String>,
    turn: Option<String>,
}

async fn usage(
    State(st): State<Arc<HttpState>>,
    Query(p): Query<UsageParams>,
) -> Result<Response, ApiError> {
    use strata_engine::usage::{UsageBy, UsageQuery, parse_since};
    let by = UsageBy::parse(p.by.as_deref().unwrap_or("agent")).map_err(ApiError::bad_request)?;
    let since_ms = p
        .since
        .as_deref()
        .map(|s| parse_since(s, strata_engine::clock::now_ms()))
        .transpose()
        .map_err(ApiError::bad_request)?;
    let unavailable = |m: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m);
    let meter = st
        .invoker
        .env()
        .usage()
        .ok_or_else(|| unavailable("no usage is kept by this server".into()))?;
    // Calls still on their way to the store count too.
    meter.flush().await;
    let rows = meter
        .store()
        .usage(&UsageQuery {
            by,
            since_ms,
            turn_id: p.turn,
        })
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    Ok(ok(json!({ "by": by, "rows": rows })))
}

async fn schedules_list(State(st): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    let sch = scheduler_of(&st)?;
    let states = sch.store().states().await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )
    })?;
    let all = current(sch).await?;
    Ok(ok(json!({
        "schedules": strata_engine::schedule::overview(&all, &states)
    })))
}

async fn schedules_act(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path((name, action)): axum::extract::Path<(String, String)>,
) -> Result<Response, ApiError> {
    let sch = scheduler_of(&st)?;
    if !st.invoker.policy().may_approve(&caller.principal) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "{} may not run or pause schedules (approvers and owners may)",
                caller.principal
            ),
        ));
    }
    let all = current(sch).await?;
    if !all.iter().any(|s| s.name == name) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no schedule `{name}`"),
        ));
    }
    let store = sch.store();
    let done = match action.as_str() {
        "run" => strata_engine::schedule::make_due(
            store.as_ref(),
            &name,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        )
        .await
        .map(|_| "due now"),
        "pause" => store.set_paused(&name, true).await.map(|()| "paused"),
        "resume" => store.set_paused(&name, false).await.map(|()| "resumed"),
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!(
                    "no route POST /api/schedules/{name}/{other}; use `run`, `pause` or `resume`"
                ),
            ));
        }
    }
    .map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )
    })?;
    tracing::info!(schedule = %name, by = %caller.principal, "schedule {done}");
    Ok(ok(json!({"name": name, "state": done})))
}

/// The running agents (`id`, `provider`, `healthy: true`) and those that did not start
/// (`healthy: false`, `reason`).
fn agents_json(st: &HttpState) -> (Vec<Value>, Vec<Value>) {
    let running = st
        .manager
        .as_ref()
        .map(|m| {
            m.agent_ids()
                .iter()
                .map(|id| {
                    let agent = m.agent(id);
                    let provider = agent
                        .as_ref()
                        .and_then(|a| a.provider().map(str::to_owned));
                    // Healthy until a model call says otherwise: its last call's outcome.
                    let health = agent.as_ref().and_then(|a| a.health());
                    let healthy = health.as_ref().is_none_or(|h| h.last_call_ok);
                    json!({"id": id, "provider": provider, "healthy": healthy, "model_calls": health})
                })
                .collect()
        })
        .unwrap_or_default();
    let skipped = st
        .skipped
        .iter()
        .map(|(id, why)| json!({"id": id, "healthy": false, "reason": why}))
        .collect();
    (running, skipped)
}

async fn api_state(State(st): State<Arc<HttpState>>) -> Response {
    let (agents, skipped) = agents_json(&st);
    let sessions = match &st.sessions {
        Some(s) => s.count().await.ok(),
        None => None,
    };
    ok(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_secs": st.started.elapsed().as_secs(),
        "agents": agents,
        "agents_not_started": skipped,
        "live_sessions": st.manager.as_ref().map(|m| m.live_sessions()),
        "sessions": sessions,
        "tools": st.invoker.registry().len(),
        "connectors": connectors_json(&st),
    }))
}

/// The connectors running here with their state: this server's own (`http`, `mcp`, up
/// while it answers) and every connector the hub knows (a Discord account connected,
/// reconnecting, or disabled with the reason).
fn connectors_json(st: &HttpState) -> Vec<Value> {
    let mut out = vec![
        json!({"name": "http", "up": true}),
        json!({"name": "mcp", "up": true}),
    ];
    for c in st.invoker.env().connectors().states() {
        let state = match (&c.disabled, c.up) {
            (Some(_), _) => "disabled",
            (None, Some(true)) => "connected",
            (None, Some(false)) if c.reconnects > 0 => "reconnecting",
            (None, Some(false)) => "disconnected",
            (None, None) => "running",
        };
        let mut v = serde_json::to_value(&c).unwrap_or(Value::Null);
        v["state"] = json!(state);
        out.push(v);
    }
    out
}

async fn openapi_doc() -> Json<Value> {
    Json(openapi())
}

async fn chat(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    let body = read_body(&st, req).await?;
    let b: body::ChatBody = body::parse(&body).map_err(ApiError::bad_request)?;
    let message = body::required(b.message, "message")
        .map_err(ApiError::bad_request)?
        .0;
    // Nothing to say is not sent to a model.
    if message.trim().is_empty() {
        return Err(ApiError::bad_request("field `message` must not be blank"));
    }
    let Some(manager) = st.manager.clone() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            no_agent_running(&st),
        ));
    };
    let agent = b
        .agent
        .map(|t| t.0)
        .or_else(|| st.default_agent.clone())
        .ok_or_else(|| ApiError::bad_request("field `agent` is required (no default agent)"))?;
    if manager.agent(&agent).is_none() {
        let why = st
            .skipped
            .iter()
            .find(|(id, _)| *id == agent)
            .map(|(_, why)| format!(": it did not start: {why}"))
            .unwrap_or_default();
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no running agent `{agent}`{why}"),
        ));
    }
    let session_id = b
        .session_id
        .map(|t| t.0)
        .unwrap_or_else(|| format!("http-{}", uuid::Uuid::new_v4()));
    let mut req = TurnRequest {
        agent_id: agent,
        session_id: session_id.clone(),
        stream: None,
        // The token's tool scope holds for the turn's calls as for its own.
        scopes: caller.scope().into_iter().collect(),
        channel_kind: None,
        channel_id: "http".into(),
        sender: caller.principal.clone(),
        message: strata_engine::agent::Message::text(message),
        depth: 0,
        taint: None,
        turn_id: b.request_id.map(|t| t.0),
    };
    if b.stream == Some(true) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        req.stream = Some(strata_engine::turns::TurnSink::channel(tx.clone()));
        return Ok(chat_stream(manager, req, session_id, rx));
    }
    let reply = manager.turn(req).await.map_err(chat_error)?;
    Ok(Json(chat_answer(reply, &session_id)).into_response())
}

/// Why `/chat` has no agent to run: each agent that did not start, with the reason `GET
/// /api/status` gives for it (`HttpState::skipped`); with no agent configured at all, how to
/// add one and its provider.
fn no_agent_running(st: &HttpState) -> String {
    if st.skipped.is_empty() {
        return "no agent is running: none is configured; add one under `agents:` in \
                config/agents.yaml and configure an LLM provider (`defaults.llm`, see README, \
                \"Providers\")"
            .into();
    }
    let why: Vec<String> = st
        .skipped
        .iter()
        .map(|(id, why)| format!("agent `{id}` did not start: {why}"))
        .collect();
    format!("no agent is running: {}", why.join("; "))
}

/// How a failed `/chat` turn is answered.
fn chat_error(e: strata_engine::agent::AgentError) -> ApiError {
    match e {
        strata_engine::agent::AgentError::Denied(m) => {
            ApiError::new(StatusCode::FORBIDDEN, "denied", m)
        }
        strata_engine::agent::AgentError::Budget(m) => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "budget_reached", m)
        }
        e => ApiError::new(StatusCode::BAD_GATEWAY, "agent_failed", e.to_string()),
    }
}

/// `/chat`'s answer: `{response, session_id}` (empty when the agent chose not to answer).
fn chat_answer(reply: strata_engine::agent::Reply, session_id: &str) -> Value {
    let response = if reply.silent {
        String::new()
    } else {
        reply.text
    };
    json!({"response": response, "session_id": session_id})
}

/// `/chat` with `"stream": true`: the turn runs in its own task (it finishes and is stored
/// if the client goes away) and its events are sent as they come — `token` `{text}`,
/// `tool_start` `{id, tool}`, `tool_end` `{id, tool, status, elapsed_ms}` — then `final`
/// with the body a plain `/chat` answers, or `error` with the error envelope's `{code,
/// message, status}`.
fn chat_stream(
    manager: Arc<strata_engine::runtime::AgentManager>,
    req: TurnRequest,
    session_id: String,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<strata_engine::turns::TurnEvent>,
) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let turn = tokio::spawn(async move { manager.turn(req).await });
    let (out, events) = tokio::sync::mpsc::unbounded_channel::<Event>();
    tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            let name = match &ev {
                strata_engine::turns::TurnEvent::Token { .. } => "token",
                strata_engine::turns::TurnEvent::ToolStart { .. } => "tool_start",
                strata_engine::turns::TurnEvent::ToolEnd { .. } => "tool_end",
            };
            let mut data = serde_json::to_value(&ev).unwrap_or(Value::Null);
            if let Some(o) = data.as_object_mut() {
                o.remove("type");
            }
            if out
                .send(Event::default().event(name).data(data.to_string()))
                .is_err()
            {
                // The client went away; the turn still finishes and is stored.
                break;
            }
        }
        let last = match turn.await {
            Ok(Ok(reply)) => Event::default()
                .event("final")
                .data(chat_answer(reply, &session_id).to_string()),
            Ok(Err(e)) => {
                let e = chat_error(e);
                Event::default().event("error").data(
                    json!({"code": e.code, "message": e.message, "status": e.status.as_u16()})
                        .to_string(),
                )
            }
            Err(e) => Event::default().event("error").data(
                json!({"code": "internal", "message": format!("the turn's task failed: {e}"), "status": 500})
                    .to_string(),
            ),
        };
        let _ = out.send(last);
    });
    let stream = futures_util::stream::unfold(events, |mut rx| async move {
        rx.recv()
            .await
            .map(|e| (Ok::<_, std::convert::Infallible>(e), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

async fn execute(State(st): State<Arc<HttpState>>, req: Request) -> Result<Response, ApiError> {
    let Some(expected) = st.execute_key.as_deref() else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "`server.execute_api_key` is not configured",
        ));
    };
    let given = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !auth::same_secret(&given, expected) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or invalid X-API-Key",
        ));
    }
    let body = read_body(&st, req).await?;
    let b: body::ExecuteBody = body::parse(&body).map_err(ApiError::bad_request)?;
    // The whole payload is stored as sent (it carries fields of the sender's own).
    let mut obj = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let task_id = body::required(b.task_id, "task_id")
        .map_err(ApiError::bad_request)?
        .0;
    if task_id.is_empty()
        || task_id.len() > 128
        || !task_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ApiError::bad_request(
            "field `task_id` may use letters, digits, `-` and `_` (at most 128)",
        ));
    }
    let agent = body::required(b.assigned_agent, "assigned_agent")
        .map_err(ApiError::bad_request)?
        .0;
    obj.insert(
        "received_at".into(),
        json!(strata_engine::clock::now_rfc3339()),
    );
    let dir = st.data_dir.join("tasks");
    let path = dir.join(format!("task_{task_id}_payload.json"));
    let text = serde_json::to_vec_pretty(&obj).unwrap_or_default();
    let write = async {
        let private = dir.clone();
        tokio::task::spawn_blocking(move || strata_engine::paths::create_private_dir_all(&private))
            .await
            .map_err(std::io::Error::other)??;
        let tmp = dir.join(format!(".task_{task_id}.tmp"));
        tokio::fs::write(&tmp, &text).await?;
        tokio::fs::rename(&tmp, &path).await
    };
    write.await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("cannot store the task: {e}"),
        )
    })?;
    if let Some(manager) = st.manager.clone() {
        let prompt = format!(
            "New task {task_id}: {}\n\n{}\n\nInput data:\n{}",
            b.title.as_ref().map_or("", |t| t.0.as_str()),
            b.description.as_ref().map_or("", |t| t.0.as_str()),
            obj.get("input_data").cloned().unwrap_or(Value::Null)
        );
        let session = format!("task-{task_id}");
        tokio::spawn(async move {
            let r = manager
                .turn(TurnRequest {
                    agent_id: agent.clone(),
                    stream: None,
                    scopes: Vec::new(),
                    channel_kind: None,
                    channel_id: format!("execute:{session}"),
                    session_id: session,
                    sender: strata_engine::Principal::Token {
                        name: "execute".into(),
                        tier: strata_engine::config::Access::Admin,
                    },
                    message: strata_engine::agent::Message::text(prompt),
                    depth: 0,
                    taint: None,
                    turn_id: None,
                })
                .await;
            if let Err(e) = r {
                tracing::warn!(agent = %agent, error = %e, "queued task failed");
            }
        });
    } else {
        tracing::warn!(task = %task_id, "task stored but no agent is running to take it");
    }
    Ok(
        Json(json!({"message": format!("Task {task_id} received"), "status": "ok"}))
            .into_response(),
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
