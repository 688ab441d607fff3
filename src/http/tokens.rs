//! `POST/GET /v1/tokens`, `DELETE /v1/tokens/{id}` (admin): team lead, finance and collector tokens
//! made, listed and revoked over the API, as `slicemeter token` does with a database URL. A token's
//! secret is in the creation's answer only; the list never has it. Admin tokens stay with the CLI,
//! so a stolen admin token cannot mint more of its kind. Every change is audited.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use super::teams::ApiJson;
use crate::auth::store::{self as tokens, TokenError, TokenRow};
use crate::domain::access::{Actor, Principal, Role};
use crate::domain::batch::is_node_name;
use crate::domain::fields::FieldError;
use crate::domain::team::TeamId;
use crate::domain::text;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_token, list_tokens))
        .routes(routes!(revoke_token))
}

/// The longest label a token takes.
const MAX_LABEL_CHARS: usize = 200;

/// A token to make.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCreate {
    /// `team_lead`, `finance` or `collector` (admin tokens are made with the CLI).
    pub role: Role,
    /// The team of a `team_lead` token (and only of one).
    #[schema(example = "nlp")]
    pub team: Option<String>,
    /// The node of a `collector` token (and only of one).
    #[schema(example = "gpu-node-07", pattern = r"^[A-Za-z0-9._-]{1,253}$")]
    pub node: Option<String>,
    /// A note on what it is for.
    #[schema(example = "nlp's dashboard", min_length = 1, max_length = 200)]
    pub label: Option<String>,
    /// When it stops working; never, if left out. Must be in the future.
    pub expires_at: Option<DateTime<Utc>>,
}

/// A token as listed: what it may do, never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenInfo {
    /// The number after `smt_` in the token.
    pub id: i64,
    pub role: String,
    #[schema(value_type = Option<String>)]
    pub team: Option<TeamId>,
    pub node: Option<String>,
    pub label: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked; `null` while it works.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<TokenRow> for TokenInfo {
    fn from(r: TokenRow) -> Self {
        TokenInfo {
            id: r.id,
            role: r.role,
            team: r.team_id,
            node: r.node,
            label: r.label,
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
        }
    }
}

/// A token just made, with its secret: shown once, stored nowhere (only its hash is kept).
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenCreated {
    /// The bearer token: `smt_<id>_<secret>`. Keep it; it cannot be shown again.
    pub token: String,
    #[serde(flatten)]
    pub info: TokenInfo,
}

/// Makes a team lead, finance or collector token; its secret is in this answer only. Audited
/// (`token.create`, without the secret).
#[utoipa::path(post, path = "/v1/tokens", tag = "operations",
    request_body = TokenCreate,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "the token, shown once", body = TokenCreated),
        (status = 400, description = "each bad field named: an admin role, a team or node missing or not the role's, an unknown team, a bad node name or label, an expiry in the past", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin", body = ErrorBody)))]
async fn create_token(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<TokenCreate>,
) -> Result<(StatusCode, Json<TokenCreated>), ApiError> {
    require(&principal, &[Role::Admin])?;
    let created = create(&state, &principal, &body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Makes the token `body` asks for, each bad field named; the API and the dashboard's token page
/// both make tokens through this. The caller is an admin.
pub(crate) async fn create(
    state: &AppState,
    principal: &Principal,
    body: &TokenCreate,
) -> Result<TokenCreated, ApiError> {
    let mut fields = Vec::new();
    if body.role == Role::Admin {
        fields.push(FieldError::new(
            "role",
            "admin tokens are made with the CLI (`slicemeter token create --role admin`); this takes team_lead, finance or collector",
        ));
    }
    let team = match (&body.team, body.role) {
        (Some(t), Role::TeamLead) => match TeamId::parse(t) {
            Ok(t) => Some(t),
            Err(e) => {
                fields.push(FieldError::new("team", e.to_string()));
                None
            }
        },
        (None, Role::TeamLead) => {
            fields.push(FieldError::new("team", "a team_lead token needs its team"));
            None
        }
        (Some(_), role) => {
            fields.push(FieldError::new(
                "team",
                format!("only a team_lead token has a team; this one is {role}"),
            ));
            None
        }
        (None, _) => None,
    };
    match (&body.node, body.role) {
        (Some(n), Role::Collector) if !is_node_name(n) => fields.push(FieldError::new(
            "node",
            "a node name has 1 to 253 letters, digits, '.', '-' or '_'",
        )),
        (None, Role::Collector) => {
            fields.push(FieldError::new("node", "a collector token needs its node"))
        }
        (Some(_), role) if role != Role::Collector => fields.push(FieldError::new(
            "node",
            format!("only a collector token has a node; this one is {role}"),
        )),
        _ => {}
    }
    if let Some(label) = &body.label
        && let Err(e) = text::check(label, MAX_LABEL_CHARS)
    {
        fields.push(FieldError::new("label", format!("the label {e}")));
    }
    let now = Utc::now();
    if body.expires_at.is_some_and(|e| e <= now) {
        fields.push(FieldError::new(
            "expires_at",
            "the expiry must be in the future",
        ));
    }
    if !fields.is_empty() {
        return Err(ApiError::invalid_fields("the token is invalid", fields));
    }
    let (id, token) = tokens::create(
        &state.pool,
        body.role,
        team.as_ref(),
        body.node.as_deref(),
        body.label.as_deref(),
        body.expires_at,
        &Actor::of(principal),
    )
    .await
    .map_err(|e| match e {
        TokenError::UnknownTeam(_) => ApiError::invalid_fields(
            "the token is invalid",
            vec![FieldError::new("team", e.to_string())],
        ),
        TokenError::Db(e) => e.into(),
        other => ApiError::bad_request(other.to_string()),
    })?;
    tracing::info!(token = id, role = %body.role, by = principal.token_id(), "A token was created over the API.");
    let info = tokens::list(&state.pool, Some(id))
        .await?
        .pop()
        .map(TokenInfo::from)
        .ok_or_else(|| ApiError::not_found(format!("token {id} was made but is gone")))?;
    Ok(TokenCreated { token, info })
}

/// Every token, revoked ones too, oldest first: what each may do, never a secret.
#[utoipa::path(get, path = "/v1/tokens", tag = "operations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the tokens, by id", body = Vec<TokenInfo>),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin", body = ErrorBody)))]
async fn list_tokens(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Vec<TokenInfo>>, ApiError> {
    require(&principal, &[Role::Admin])?;
    let rows = tokens::list(&state.pool, None).await?;
    Ok(Json(rows.into_iter().map(TokenInfo::from).collect()))
}

/// Revokes a token: from now on it gets 401, and the dashboard sessions opened with it end.
/// Audited (`token.revoke`).
#[utoipa::path(delete, path = "/v1/tokens/{id}", tag = "operations",
    params(("id" = String, Path, description = "the number after `smt_` in the token")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "revoked"),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin", body = ErrorBody),
        (status = 404, description = "no such token, or it is revoked already", body = ErrorBody)))]
async fn revoke_token(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    require(&principal, &[Role::Admin])?;
    let Ok(id) = id.parse::<i64>() else {
        return Err(ApiError::not_found(format!("there is no token {id:?}")));
    };
    if tokens::revoke(&state.pool, id, &Actor::of(&principal)).await? {
        tracing::info!(
            token = id,
            by = principal.token_id(),
            "A token was revoked over the API."
        );
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "there is no token {id} that works: none was made, or it is revoked already"
        )))
    }
}
