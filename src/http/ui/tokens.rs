//! The dashboard's token page (admin): make a team lead, finance or collector token (its secret
//! shown once, on the page that made it), list every token without a secret, revoke one. It makes
//! tokens through the API's own checks (`http::tokens::create`), audited the same way.

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, NaiveDate, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{UiError, Viewer, page, same_origin};
use crate::auth::service::{self as tokens, TokenRow};
use crate::domain::access::{Actor, Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::team::TeamId;
use crate::domain::time::start_of;
use crate::http::state::AppState;
use crate::http::tokens::{TokenCreate, TokenCreated, create};
use crate::teams;

/// The form, as the browser sends it: empty fields are left out.
#[derive(Debug, Default, Deserialize)]
pub struct TokenForm {
    role: String,
    #[serde(default)]
    team: String,
    #[serde(default)]
    node: String,
    #[serde(default)]
    label: String,
    /// `YYYY-MM-DD`: the token works until that day's start (UTC).
    #[serde(default)]
    expires: String,
}

fn require_admin(viewer: &Principal) -> Result<(), UiError> {
    if matches!(viewer, Principal::Admin { .. }) {
        Ok(())
    } else {
        Err(UiError::Forbidden("Only admins manage tokens.".into()))
    }
}

pub async fn tokens_page(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
) -> Result<Response, UiError> {
    require_admin(&viewer)?;
    render(&state, &viewer, None, &[], &TokenForm::default()).await
}

pub async fn create_token(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    headers: HeaderMap,
    Form(form): Form<TokenForm>,
) -> Result<Response, UiError> {
    same_origin(&headers)?;
    require_admin(&viewer)?;
    let some = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_owned());
    let mut errors = Vec::new();
    let role = match form.role.as_str() {
        "team_lead" => Some(Role::TeamLead),
        "finance" => Some(Role::Finance),
        "collector" => Some(Role::Collector),
        other => {
            errors.push(FieldError::new(
                "role",
                format!("{other:?} is none of team_lead, finance, collector"),
            ));
            None
        }
    };
    let expires_at = match some(&form.expires) {
        None => None,
        Some(d) => match d.parse::<NaiveDate>() {
            Ok(d) => Some(start_of(d)),
            Err(_) => {
                errors.push(FieldError::new("expires", format!("{d:?} is not a date")));
                None
            }
        },
    };
    let (Some(role), true) = (role, errors.is_empty()) else {
        return render(&state, &viewer, None, &errors, &form).await;
    };
    let body = TokenCreate {
        role,
        // The API's checks say it when a team or node is not the role's.
        team: some(&form.team),
        node: some(&form.node),
        label: some(&form.label),
        expires_at,
    };
    match create(&state, &viewer, &body).await {
        Ok(created) => {
            tracing::info!(token = created.info.id, role = %role, by = viewer.token_id(), "A token was created on the dashboard.");
            render(&state, &viewer, Some(&created), &[], &TokenForm::default()).await
        }
        Err(e) if !e.fields.is_empty() => render(&state, &viewer, None, &e.fields, &form).await,
        Err(e) => Err(UiError::Api(e)),
    }
}

pub async fn revoke_token(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Result<Response, UiError> {
    same_origin(&headers)?;
    require_admin(&viewer)?;
    if !tokens::revoke(&state.pool, id, &Actor::of(&viewer)).await? {
        return Err(UiError::Refused(format!(
            "Token {id} does not work already: it was revoked, or never made."
        )));
    }
    tracing::info!(
        token = id,
        by = viewer.token_id(),
        "A token was revoked on the dashboard."
    );
    Ok(Redirect::to("/ui/tokens").into_response())
}

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn state_of(t: &TokenRow, now: DateTime<Utc>) -> String {
    match (t.revoked_at, t.expires_at) {
        (Some(r), _) => format!("revoked {}", when(r)),
        (None, Some(e)) if e <= now => format!("expired {}", when(e)),
        _ => "active".into(),
    }
}

async fn render(
    state: &AppState,
    viewer: &Principal,
    created: Option<&TokenCreated>,
    errors: &[FieldError],
    form: &TokenForm,
) -> Result<Response, UiError> {
    let all = tokens::list(&state.pool, None).await?;
    let team_names: Vec<TeamId> = teams::list(&state.pool, None)
        .await?
        .into_iter()
        .map(|t| t.team_id)
        .filter(|t| !t.is_unattributed())
        .collect();
    let now = Utc::now();
    let body: Markup = html! {
        h1 { "Tokens" }
        @if let Some(c) = created {
            section class="card" data-field="created" {
                h2 { "Token " (c.info.id) " (" (c.info.role) ") is made" }
                p { "Copy it now: it is shown this once, and only its hash is kept." }
                p { code data-field="new-token" { (c.token) } }
            }
        }
        @if !errors.is_empty() {
            ul class="error" data-field="errors" {
                @for e in errors { li { strong { (e.field) } ": " (e.message) } }
            }
        }
        section class="card" {
            h2 { "Make a token" }
            form method="post" action="/ui/tokens" class="stack" {
                label for="role" { "Role" }
                select id="role" name="role" {
                    @for (value, text) in [("team_lead", "team lead (one team's pages and API)"), ("finance", "finance (reads all, bills)"), ("collector", "collector (ingests for one node)")] {
                        option value=(value) selected[form.role == value] { (text) }
                    }
                }
                label for="team" { "Team (a team lead's)" }
                select id="team" name="team" {
                    option value="" { "—" }
                    @for t in &team_names { option value=(t) selected[form.team == t.as_str()] { (t) } }
                }
                label for="node" { "Node (a collector's)" }
                input id="node" name="node" value=(form.node) maxlength="253";
                label for="label" { "Label" }
                input id="label" name="label" value=(form.label) maxlength="200";
                label for="expires" { "Expires (UTC day; empty: never)" }
                input id="expires" name="expires" type="date" value=(form.expires);
                button type="submit" { "Make token" }
            }
            p { "Admin tokens are made with the CLI only (" code { "slicemeter token create --role admin" } ")." }
        }
        div class="scroll" {
            table data-table="tokens" {
                caption { "Every token, oldest first (never a secret)" }
                thead { tr {
                    th scope="col" class="num" { "Id" } th scope="col" { "Role" } th scope="col" { "Team" }
                    th scope="col" { "Node" } th scope="col" { "Label" } th scope="col" { "Made" }
                    th scope="col" { "Expires" } th scope="col" { "State" } th scope="col" { "" }
                } }
                tbody {
                    @for t in &all {
                        tr data-token=(t.id) {
                            td class="num" { (t.id) }
                            td { (t.role) }
                            td { (t.team_id.as_ref().map_or("", TeamId::as_str)) }
                            td { (t.node.as_deref().unwrap_or("")) }
                            td { (t.label.as_deref().unwrap_or("")) }
                            td { (when(t.created_at)) }
                            td { (t.expires_at.map(when).unwrap_or_default()) }
                            td data-field="state" { (state_of(t, now)) }
                            td {
                                @if t.revoked_at.is_none() {
                                    form method="post" action=(format!("/ui/tokens/{}/revoke", t.id)) class="inline" {
                                        button class="secondary" type="submit" aria-label=(format!("Revoke token {}", t.id)) { "Revoke" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    let mut response = page("Tokens", Some(viewer), body).into_response();
    // The page that shows a secret is kept by no cache.
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
