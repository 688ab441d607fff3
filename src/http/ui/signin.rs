//! Signing in and out of the dashboard: a session opened for an API token, kept by a cookie whose
//! secret only the browser has (the server keeps its hash), and the home page that sends each role
//! where it belongs.

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{Duration, Utc};
use maud::{Markup, html};
use rand::RngCore;
use serde::Deserialize;

use super::layout::{
    COOKIE, SESSION_HOURS, UiError, Viewer, hash, page, same_origin, session_secret,
};
use crate::auth::service as tokens;
use crate::domain::access::Principal;
use crate::http::state::AppState;

pub async fn home(viewer: Result<Viewer, UiError>) -> Response {
    match viewer {
        Ok(Viewer(Principal::TeamLead { team, .. })) => {
            Redirect::to(&format!("/ui/team/{team}")).into_response()
        }
        Ok(Viewer(p)) if p.role().sends_data() => UiError::Forbidden(
            "Collector and importer tokens send data; sign in with a finance, admin or team lead token."
                .into(),
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
            "Collector and importer tokens send data; sign in with a finance, admin or team lead token."
        }
        _ => "That token is not valid (or was revoked, or has expired).",
    }
}

pub async fn signin_page(Query(q): Query<SigninQuery>) -> Markup {
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
pub struct SigninForm {
    token: String,
}

fn failed(code: &'static str) -> Response {
    Redirect::to(&format!("/ui/signin?failed={code}")).into_response()
}

pub async fn signin(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<SigninForm>,
) -> Result<Response, UiError> {
    same_origin(&headers)?;
    let principal = match tokens::authenticate(&state.pool, form.token.trim(), Utc::now()).await? {
        Ok(p) => p,
        Err(_) => return Ok(failed("invalid")),
    };
    if principal.role().sends_data() {
        return Ok(failed("collector"));
    }
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let secret: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let expires = Utc::now() + Duration::hours(SESSION_HOURS);
    tokens::create_session(&state.pool, &hash(&secret), principal.token_id(), expires).await?;
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

pub async fn signout(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    same_origin(&headers)?;
    if let Some(secret) = session_secret(&headers) {
        tokens::delete_session(&state.pool, &hash(&secret)).await?;
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
