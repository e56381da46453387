//! The web dashboard (`/ui/`): a page and a script compiled into the binary that call the
//! JSON API with a sign-in cookie, so the dashboard does nothing the API cannot.
//!
//! The pages hold no data when served: `app.js` fetches it from `/api/*` and builds the DOM
//! with text nodes only (never HTML from a string), so a tool result, memory or message
//! containing markup shows as text. The page's Content-Security-Policy allows scripts and
//! styles from this server only — no inline script, no other origin — as a second wall.

pub mod signin;

use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::caller::Caller;
use crate::{ApiError, HttpState, auth};
pub use signin::{COOKIE, CSRF_HEADER, SignIns, SignedIn};

const INDEX: &str = include_str!("../../assets/index.html");
const LOGIN: &str = include_str!("../../assets/login.html");
const APP_JS: &str = include_str!("../../assets/app.js");
const APP_CSS: &str = include_str!("../../assets/app.css");
const ICON: &str = include_str!("../../assets/icon.svg");

/// The dashboard pages' policy: this server's script, style and API only; nothing inline,
/// nothing framed, forms posted here only.
pub const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

/// Whether `path` belongs to the dashboard (served without a token: the pages carry no data,
/// and each checks the cookie itself).
pub fn is_ui(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

fn enabled(st: &HttpState) -> bool {
    st.invoker.env().config.server.dashboard.enabled
}

fn off() -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "the dashboard is off on this server (server.dashboard.enabled: false)",
    )
    .into_response()
}

fn page(body: impl Into<axum::body::Body>, status: StatusCode) -> Response {
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(PAGE_CSP),
            ),
            // Not `no-referrer` (the API's): under it a browser sends `Origin: null` with the
            // page's own posts, and the origin check could not tell them from another site's.
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("same-origin"),
            ),
        ],
        body.into(),
    )
        .into_response()
}

fn see_other(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// The dashboard's pages: `/` and `/ui` (to the dashboard), `/ui/`, `/ui/login`,
/// `/ui/logout`, `/ui/assets/{file}`.
pub(crate) fn routes() -> axum::Router<Arc<HttpState>> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/", get(root))
        .route("/ui", get(root))
        .route("/ui/", get(index))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/assets/{file}", get(asset))
}

/// The browser's live sign-in, if any.
pub fn signed_in(st: &HttpState, headers: &HeaderMap) -> Option<SignedIn> {
    signin::cookie(headers, COOKIE).and_then(|c| st.ui.find(c))
}

/// `GET /` and `GET /ui`: to the dashboard.
pub async fn root(State(st): State<Arc<HttpState>>) -> Response {
    if !enabled(&st) {
        return off();
    }
    see_other("/ui/")
}

/// `GET /ui/`: the dashboard's page for a signed-in browser, else to the sign-in page.
pub async fn index(State(st): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    if !enabled(&st) {
        return off();
    }
    if signed_in(&st, &headers).is_none() {
        return see_other("/ui/login");
    }
    page(INDEX, StatusCode::OK)
}

/// `GET /ui/assets/{file}`: the script, style sheet and icon.
pub async fn asset(
    State(st): State<Arc<HttpState>>,
    axum::extract::Path(file): axum::extract::Path<String>,
) -> Response {
    if !enabled(&st) {
        return off();
    }
    let (body, kind) = match file.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "app.css" => (APP_CSS, "text/css; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => {
            return ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such asset")
                .into_response();
        }
    };
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(kind))],
        body,
    )
        .into_response()
}

#[derive(serde::Deserialize)]
pub struct Once {
    once: Option<String>,
}

/// A sign-in's cookie: the browser sends it to this server's pages and API only, never to
/// a script, never with a request another site starts; `Secure` when the request came
/// through TLS (a proxy's `X-Forwarded-Proto: https`).
fn cookie_header(headers: &HeaderMap, value: &str, max_age: u64) -> HeaderValue {
    let tls = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let text = format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{}",
        if tls { "; Secure" } else { "" }
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn signed_in_response(st: &HttpState, headers: &HeaderMap, caller: Caller, name: &str) -> Response {
    match st.ui.sign_in(caller, name) {
        Ok(id) => {
            let mut r = see_other("/ui/");
            let c = cookie_header(headers, &id, st.ui.lifetime().as_secs());
            r.headers_mut().insert(header::SET_COOKIE, c);
            r
        }
        Err(e) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            .into_response(),
    }
}

/// `GET /ui/login`: the sign-in form; with `?once=<secret>` (the link `serve` prints) signs
/// in and sends the browser on to `/ui/` — an address without the secret.
pub async fn login_page(
    State(st): State<Arc<HttpState>>,
    headers: HeaderMap,
    Query(q): Query<Once>,
) -> Response {
    if !enabled(&st) {
        return off();
    }
    match q.once {
        None => page(LOGIN, StatusCode::OK),
        Some(secret) => match st.ui.redeem(&secret) {
            Some((caller, name)) => signed_in_response(&st, &headers, caller, &name),
            None => page(
                login_with(
                    "That sign-in link has been used or is not this server's. Paste a token instead.",
                ),
                StatusCode::UNAUTHORIZED,
            ),
        },
    }
}

/// The sign-in page with a problem named (fixed sentences only: nothing from the request).
fn login_with(problem: &str) -> String {
    LOGIN.replace(
        "<p id=\"problem\" class=\"problem\" hidden></p>",
        &format!("<p id=\"problem\" class=\"problem\" role=\"alert\">{problem}</p>"),
    )
}

/// `POST /ui/login` (form field `token`): signs in with a control token. A post another site
/// started is refused, so no page elsewhere can sign a browser in as someone else.
pub async fn login(State(st): State<Arc<HttpState>>, req: Request) -> Response {
    if !enabled(&st) {
        return off();
    }
    let headers = req.headers().clone();
    if !signin::same_origin(&headers) {
        return csrf_refused();
    }
    let body = match crate::api::read_body(&st, req).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let token = url::form_urlencoded::parse(&body)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    match auth::find(&st.tokens, &token) {
        Some(t) => signed_in_response(&st, &headers, Caller::of(t), &t.name.clone()),
        None => page(
            login_with("That token is not valid here."),
            StatusCode::UNAUTHORIZED,
        ),
    }
}

/// `POST /ui/logout`: ends the sign-in (the CSRF token is checked like any change).
pub async fn logout(State(st): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    if !enabled(&st) {
        return off();
    }
    let Some(cookie) = signin::cookie(&headers, COOKIE) else {
        return see_other("/ui/login");
    };
    if let Some(s) = st.ui.find(cookie) {
        if !csrf_ok(&s, &headers) {
            return csrf_refused();
        }
        st.ui.sign_out(cookie);
    }
    let mut r = see_other("/ui/login");
    let c = cookie_header(&headers, "", 0);
    r.headers_mut().insert(header::SET_COOKIE, c);
    r
}

/// Whether a state-changing request made with the cookie is the dashboard's own: its CSRF
/// token and, where the browser says, the same origin.
pub fn csrf_ok(s: &SignedIn, headers: &HeaderMap) -> bool {
    let presented = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    signin::same_origin(headers) && !presented.is_empty() && auth::same_secret(presented, &s.csrf)
}

/// The answer to a change the dashboard did not make.
pub fn csrf_refused() -> Response {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "csrf_failed",
        "a change made with the dashboard's cookie must come from the dashboard: same origin, \
         with its X-Strata-CSRF token",
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pages' first wall against markup in data: the script never turns a string into
    /// HTML or code, and the pages hold no inline script, style or handler the policy would
    /// have to allow.
    #[test]
    fn no_string_becomes_html_or_code() {
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "setTimeout('",
            "srcdoc",
            "DOMParser",
            "createContextualFragment",
        ] {
            assert!(!APP_JS.contains(sink), "app.js uses {sink}");
        }
        for (name, page) in [("index.html", INDEX), ("login.html", LOGIN)] {
            let lower = page.to_ascii_lowercase();
            assert!(!lower.contains(" style="), "{name}: inline style");
            assert!(
                !lower.contains(" onclick") && !lower.contains(" onload"),
                "{name}: handler"
            );
            for tag in lower.match_indices("<script").map(|(i, _)| &lower[i..]) {
                assert!(tag.starts_with("<script src="), "{name}: inline script");
            }
        }
        assert!(!PAGE_CSP.contains("unsafe"), "{PAGE_CSP}");
    }

    /// The first load's weight (the bound is 300 KB with every asset).
    #[test]
    fn the_first_load_is_small() {
        let total = INDEX.len() + APP_JS.len() + APP_CSS.len() + ICON.len();
        assert!(total < 300_000, "{total} bytes");
    }
}
