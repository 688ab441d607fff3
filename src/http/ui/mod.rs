//! The web dashboard under `/ui/`: server-rendered HTML and SVG, no script, every asset in the
//! binary. A page shows what the API would show the same token: sign-in opens a session for an API
//! token, and every page acts with that token's role (a team lead sees their own team only).

mod charts;
mod format;
mod pages;

use axum::Router;
use axum::extract::{Form, FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::{Duration, Utc};
use maud::{DOCTYPE, Markup, html};
use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::AppState;
use super::error::ApiError;
use crate::auth::{Principal, Role};
use crate::db;
use crate::domain::team::TeamId;
use crate::domain::time::Month;

const COOKIE: &str = "slicemeter_session";
/// How long a dashboard session lasts, whatever happens in the browser.
const SESSION_HOURS: i64 = 8;
const CSS: &str = include_str!("app.css");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(home))
        .route("/ui/signin", get(signin_page).post(signin))
        .route("/ui/signout", post(signout))
        .route("/ui/assets/app.css", get(css))
        .route("/ui/fleet", get(pages::fleet))
        .route("/ui/team/{team}", get(pages::team))
        .route("/ui/invoices/run", post(pages::run_invoices))
        .route(
            "/ui/invoices/issue",
            get(pages::confirm_issue_period).post(pages::issue_period),
        )
        .route(
            "/ui/invoices/{id}/issue",
            get(pages::confirm_issue_invoice).post(pages::issue_invoice),
        )
        .route("/ui/invoices/{id}", get(pages::invoice_csv))
        .route("/ui/exports/focus", get(pages::focus_export))
        .route("/ui/exports/erp", get(pages::erp_export))
        .layer(axum::middleware::map_response(security_headers))
}

/// Pages load nothing but themselves and their stylesheet; no script runs at all.
async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not no-referrer: with it browsers send `Origin: null` on form posts, which same_origin refuses.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        CSS,
    )
}

/// A page's failure, shown as a page.
pub enum UiError {
    /// No session: go and sign in.
    SignIn,
    Forbidden(String),
    NotFound,
    /// A form the server would not carry out, and why (the server's own words).
    Refused(String),
    Api(ApiError),
}

impl From<ApiError> for UiError {
    fn from(e: ApiError) -> Self {
        UiError::Api(e)
    }
}

impl From<sqlx::Error> for UiError {
    fn from(e: sqlx::Error) -> Self {
        UiError::Api(e.into())
    }
}

impl From<crate::billing::Error> for UiError {
    fn from(e: crate::billing::Error) -> Self {
        UiError::Api(e.into())
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let (status, heading, text) = match self {
            UiError::SignIn => return Redirect::to("/ui/signin").into_response(),
            UiError::Forbidden(why) => (StatusCode::FORBIDDEN, "Not for this sign-in", why),
            UiError::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                "There is nothing here for this sign-in.".to_owned(),
            ),
            UiError::Refused(why) => (StatusCode::CONFLICT, "Not done", why),
            UiError::Api(e) => {
                let response = e.into_response();
                let status = response.status();
                let text = if status.is_server_error() {
                    "Something went wrong; the server log has the details.".to_owned()
                } else {
                    format!("The request could not be done ({status}).")
                };
                (status, "Something is in the way", text)
            }
        };
        (
            status,
            page(heading, None, html! { h1 { (heading) } p class="error" { (text) } p { a href="/ui/" { "Back to the dashboard" } } }),
        )
            .into_response()
    }
}

/// The signed-in caller of a dashboard page.
pub struct Viewer(pub Principal);

fn session_secret(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
}

fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, UiError> {
        let secret = session_secret(&parts.headers).ok_or(UiError::SignIn)?;
        let token = db::ui::session(&state.pool, &hash(&secret), Utc::now())
            .await?
            .ok_or(UiError::SignIn)?;
        let token_id = token.token_id;
        let principal = match token.role.parse::<Role>().map_err(|_| UiError::SignIn)? {
            Role::Admin => Principal::Admin { token_id },
            Role::Finance => Principal::Finance { token_id },
            Role::TeamLead => Principal::TeamLead {
                token_id,
                team: TeamId::parse(token.team_id.as_deref().unwrap_or_default())
                    .map_err(|_| UiError::SignIn)?,
            },
            Role::Collector => Principal::Collector {
                token_id,
                node: token.node.unwrap_or_default(),
            },
        };
        Ok(Viewer(principal))
    }
}

/// Refuses form posts from other origins (with SameSite=Strict cookies, a second lock on the door).
pub fn same_origin(headers: &HeaderMap) -> Result<(), UiError> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (
        headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()),
        host,
    ) {
        (Some(origin), Some(host)) if origin.split_once("://").map(|(_, h)| h) != Some(host) => {
            Err(UiError::Forbidden(
                "This form was sent from another site.".into(),
            ))
        }
        _ => Ok(()),
    }
}

/// The page frame: language, title, stylesheet, navigation for the viewer's role.
pub fn page(title: &str, viewer: Option<&Principal>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · slicemeter" }
                link rel="stylesheet" href="/ui/assets/app.css";
            }
            body {
                header class="top" {
                    a class="brand" href="/ui/" { "slicemeter" }
                    @if let Some(v) = viewer {
                        nav aria-label="Main" {
                            @match v {
                                Principal::TeamLead { team, .. } => {
                                    a href=(format!("/ui/team/{team}")) { "My team" }
                                }
                                _ => {
                                    a href="/ui/fleet" { "Fleet" }
                                }
                            }
                            a href="/docs/" { "API" }
                        }
                        form method="post" action="/ui/signout" {
                            button class="secondary" type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

async fn home(viewer: Result<Viewer, UiError>) -> Response {
    match viewer {
        Ok(Viewer(Principal::TeamLead { team, .. })) => {
            Redirect::to(&format!("/ui/team/{team}")).into_response()
        }
        Ok(Viewer(Principal::Collector { .. })) => UiError::Forbidden(
            "Collector tokens send data; sign in with a finance, admin or team lead token.".into(),
        )
        .into_response(),
        Ok(_) => Redirect::to("/ui/fleet").into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
pub struct SigninQuery {
    failed: Option<String>,
}

/// Why a sign-in failed, by the code in `?failed=`: the page says only messages of its own, never
/// text from the link (which anyone can write).
fn signin_failure(code: &str) -> &'static str {
    match code {
        "collector" => {
            "Collector tokens send data; sign in with a finance, admin or team lead token."
        }
        _ => "That token is not valid (or was revoked, or has expired).",
    }
}

async fn signin_page(Query(q): Query<SigninQuery>) -> Markup {
    page(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(code) = q.failed.as_deref() {
                p class="error" role="alert" { (signin_failure(code)) }
            }
            form method="post" action="/ui/signin" {
                p {
                    label for="token" { "API token" }
                    input id="token" name="token" type="password" autocomplete="off" required
                        size="72" aria-describedby="token-help";
                }
                p id="token-help" {
                    "A token from " code { "slicemeter token create --role finance|team_lead|admin" }
                    " (" code { "demo" } " prints an admin token). The session lasts "
                    (SESSION_HOURS) " hours; only a hash of it is kept on the server."
                }
                button type="submit" { "Sign in" }
            }
        },
    )
}

#[derive(Deserialize)]
struct SigninForm {
    token: String,
}

fn failed(code: &'static str) -> Response {
    Redirect::to(&format!("/ui/signin?failed={code}")).into_response()
}

async fn signin(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<SigninForm>,
) -> Result<Response, UiError> {
    same_origin(&headers)?;
    let principal =
        match db::tokens::authenticate(&state.pool, form.token.trim(), Utc::now()).await? {
            Ok(p) => p,
            Err(_) => return Ok(failed("invalid")),
        };
    if principal.role() == Role::Collector {
        return Ok(failed("collector"));
    }
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let secret: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let expires = Utc::now() + Duration::hours(SESSION_HOURS);
    db::ui::create_session(&state.pool, &hash(&secret), principal.token_id(), expires).await?;
    tracing::info!(token = principal.token_id(), role = %principal.role(), "A dashboard session was opened.");
    let secure = headers
        .get("x-forwarded-proto")
        .is_some_and(|p| p.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = format!(
        "{COOKIE}={secret}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{}",
        SESSION_HOURS * 3600,
        if secure { "; Secure" } else { "" }
    );
    let mut response = Redirect::to("/ui/").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("a valid cookie"),
    );
    Ok(response)
}

async fn signout(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, UiError> {
    same_origin(&headers)?;
    if let Some(secret) = session_secret(&headers) {
        db::ui::delete_session(&state.pool, &hash(&secret)).await?;
    }
    let mut response = Redirect::to("/ui/signin").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "slicemeter_session=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    Ok(response)
}

#[derive(Deserialize)]
pub struct MonthQuery {
    pub month: Option<String>,
    pub sort: Option<String>,
    pub dir: Option<String>,
    /// What a form just did (`drafted`, `issued`, `issued_all`): the page says it in its own words.
    pub done: Option<String>,
    /// The invoice a form acted on.
    pub invoice: Option<i64>,
}

impl MonthQuery {
    /// The month asked for, this month by default.
    pub fn month(&self) -> Result<Month, UiError> {
        match self.month.as_deref().filter(|m| !m.is_empty()) {
            None => Ok(Month::of(Utc::now())),
            Some(m) => m
                .parse()
                .map_err(|e: String| UiError::Api(ApiError::bad_request(e))),
        }
    }
}
