//! `GET /v1/teams`, `PUT /v1/teams/{team}`: who pays, with cost centers and namespaces.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody, ErrorCode};
use super::state::AppState;
use crate::domain::access::Actor;
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::team::{TeamId, UNATTRIBUTED};
use crate::teams::store::{self as team_store, TeamRow};
use crate::teams::{self, TeamError, TeamUpdate};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_teams))
        .routes(routes!(put_team))
}

/// A JSON object body, with rejections in the API's error envelope. A JSON array is refused even
/// where serde would read it as the struct's fields in order (`[null, null]` is not a team).
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let malformed = |message: String| ApiError::new(ErrorCode::MalformedBody, message);
        let axum::Json(value) = axum::Json::<serde_json::Value>::from_request(req, state).await?;
        if !value.is_object() {
            return Err(malformed("the body must be a JSON object".into()));
        }
        serde_json::from_value(value)
            .map(ApiJson)
            .map_err(|e| malformed(format!("the body is not what this endpoint takes: {e}")))
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Team {
    #[schema(example = "nlp")]
    pub team: String,
    pub display_name: String,
    pub cost_center: Option<String>,
    pub gl_account: Option<String>,
    /// Kubernetes namespaces whose unlabelled pods this team pays for.
    pub namespaces: Vec<String>,
}

impl From<TeamRow> for Team {
    fn from(r: TeamRow) -> Self {
        Team {
            team: r.team_id,
            display_name: r.display_name,
            cost_center: r.cost_center,
            gl_account: r.gl_account,
            namespaces: r.namespaces,
        }
    }
}

/// A change to a team. Only the fields sent change: a field left out keeps its value (a new team
/// starts with its id as display name and nothing else), `null` clears `cost_center` or
/// `gl_account`, and `namespaces` replaces the whole list when sent (`[]` empties it).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamPut {
    /// Left out: unchanged (a new team: the team id).
    #[schema(min_length = 1, max_length = 200)]
    pub display_name: Option<String>,
    /// Left out: unchanged; `null`: cleared.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, example = "CC-4100", min_length = 1, max_length = 200)]
    pub cost_center: Option<Option<String>>,
    /// Left out: unchanged; `null`: cleared.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, example = "6420", min_length = 1, max_length = 200)]
    pub gl_account: Option<Option<String>>,
    /// Replaces the team's namespace list; each namespace once. Left out: unchanged (`null` is not
    /// a list: send `[]` to empty it).
    #[serde(default, deserialize_with = "list")]
    #[schema(schema_with = namespaces_schema)]
    pub namespaces: Option<Vec<String>>,
}

/// A list that was sent (`null` is refused); by `default`, `None` when left out.
fn list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Vec::<String>::deserialize(d).map(Some)
}

/// A field that was sent, `null` or not: `Some(None)` for `null`, and (by `default`) `None` when the
/// field was left out.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// A team's namespaces (or other holder groups): each 1 to 253 characters, each once.
fn namespaces_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::{ArrayBuilder, ObjectBuilder, Type, schema::SchemaType};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::String))
                .min_length(Some(1))
                .max_length(Some(253)),
        )
        .unique_items(true)
        .examples([serde_json::json!(["nlp-training", "nlp-serving"])])
        .build()
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TeamPutResult {
    #[serde(flatten)]
    pub team: Team,
    /// Consumers that changed team because a namespace was added or removed.
    pub reattributed_consumers: u64,
}

/// Lists teams. A team lead sees only their own.
#[utoipa::path(get, path = "/v1/teams", tag = "teams",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "teams, by id", body = Vec<Team>),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token", body = ErrorBody)))]
async fn list_teams(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Vec<Team>>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let rows = team_store::list(&state.pool, principal.team_scope()).await?;
    Ok(Json(rows.into_iter().map(Team::from).collect()))
}

/// Creates or changes a team: name, cost center, GL account and namespaces. Only the fields sent
/// change (a field left out keeps its value; `null` clears `cost_center` or `gl_account`). Consumers
/// of namespaces it gains or loses (without a `team` label) are re-attributed at once.
#[utoipa::path(put, path = "/v1/teams/{team}", tag = "teams",
    params(("team" = String, Path, description = "team id: lowercase letters, digits, '-' or '_'", pattern = r"^[a-z0-9][a-z0-9_-]{0,62}$")),
    request_body = TeamPut,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the team as stored", body = TeamPutResult),
        (status = 400, description = "invalid fields, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody),
        (status = 409, description = "a namespace belongs to another team (named, with its owner)", body = ErrorBody)))]
async fn put_team(
    State(state): State<AppState>,
    principal: Principal,
    Path(team): Path<String>,
    ApiJson(body): ApiJson<TeamPut>,
) -> Result<Json<TeamPutResult>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let mut errors = Vec::new();
    let namespaces = body.namespaces.as_deref().unwrap_or_default();
    let team = match TeamId::parse(&team) {
        Ok(t) if t.as_str() == UNATTRIBUTED && !namespaces.is_empty() => {
            errors.push(FieldError::new(
                "namespaces",
                "unattributed holds what no team claims; it cannot own namespaces",
            ));
            None
        }
        Ok(t) => Some(t),
        Err(e) => {
            errors.push(FieldError::new("team", e.to_string()));
            None
        }
    };
    for (name, value) in [
        ("display_name", body.display_name.as_deref()),
        (
            "cost_center",
            body.cost_center.as_ref().and_then(Option::as_deref),
        ),
        (
            "gl_account",
            body.gl_account.as_ref().and_then(Option::as_deref),
        ),
    ] {
        // Typed by people, and any text goes (a CSV quotes it), but NUL, which no text holds.
        if let Some(v) = value
            && (!(1..=200).contains(&v.chars().count()) || v.contains('\0'))
        {
            errors.push(FieldError::new(name, "1 to 200 characters, no NUL"));
        }
    }
    for (i, n) in namespaces.iter().enumerate() {
        if let Err(e) = crate::domain::text::check(n, 253) {
            errors.push(FieldError::new(
                format!("namespaces[{i}]"),
                format!("1 to 253 printable characters: it {e}"),
            ));
        }
        if namespaces[..i].contains(n) {
            errors.push(FieldError::new(
                format!("namespaces[{i}]"),
                format!("{n:?} is listed twice"),
            ));
        }
    }
    let (Some(team), true) = (team, errors.is_empty()) else {
        return Err(ApiError::invalid_fields("the team is invalid", errors));
    };
    let (row, reattributed) = teams::put(
        &state.pool,
        &team,
        TeamUpdate {
            display_name: body.display_name.as_deref(),
            cost_center: body.cost_center.as_ref().map(Option::as_deref),
            gl_account: body.gl_account.as_ref().map(Option::as_deref),
            namespaces: body.namespaces.as_deref(),
        },
        &Actor::of(&principal),
    )
    .await
    .map_err(|e| match e {
        TeamError::NamespaceTaken { .. } => ApiError::conflict(ErrorCode::NamespaceTaken, &e),
        TeamError::Db(e) => e.into(),
    })?;
    tracing::info!(team = %team, by = principal.token_id(), reattributed, "A team was updated.");
    Ok(Json(TeamPutResult {
        team: row.into(),
        reattributed_consumers: reattributed,
    }))
}
