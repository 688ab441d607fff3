//! `GET /v1/teams`, `PUT /v1/teams/{team}`: who pays, with cost centers and namespaces.

use axum::Json;
use axum::extract::{FromRequest, Path, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::require;
use super::error::{ApiError, ErrorBody};
use crate::auth::{Principal, Role};
use crate::db::audit::Actor;
use crate::db::teams::{self, TeamError, TeamRow, TeamUpdate};
use crate::domain::team::{TeamId, UNATTRIBUTED};
use crate::ingest::FieldError;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_teams))
        .routes(routes!(put_team))
}

/// `Json` whose rejections use the API's error envelope.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

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

#[derive(Debug, Deserialize, ToSchema)]
pub struct TeamPut {
    /// Defaults to the team id.
    #[schema(min_length = 1, max_length = 200)]
    pub display_name: Option<String>,
    #[schema(example = "CC-4100")]
    pub cost_center: Option<String>,
    #[schema(example = "6420")]
    pub gl_account: Option<String>,
    /// Replaces the team's namespace list; each namespace once.
    #[serde(default)]
    #[schema(schema_with = namespaces_schema)]
    pub namespaces: Vec<String>,
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
    let rows = teams::list(&state.pool, principal.team_scope()).await?;
    Ok(Json(rows.into_iter().map(Team::from).collect()))
}

/// Creates or replaces a team: name, cost center, GL account and namespaces. Consumers of namespaces
/// it gains or loses (without a `team` label) are re-attributed at once.
#[utoipa::path(put, path = "/v1/teams/{team}", tag = "teams",
    params(("team" = String, Path, description = "team id: lowercase letters, digits, '-' or '_'", pattern = r"^[a-z0-9][a-z0-9_-]{0,62}$")),
    request_body = TeamPut,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the team as stored", body = TeamPutResult),
        (status = 400, description = "invalid fields, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody),
        (status = 409, description = "a namespace belongs to another team", body = ErrorBody)))]
async fn put_team(
    State(state): State<AppState>,
    principal: Principal,
    Path(team): Path<String>,
    ApiJson(body): ApiJson<TeamPut>,
) -> Result<Json<TeamPutResult>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let mut errors = Vec::new();
    let team = match TeamId::parse(&team) {
        Ok(t) if t.as_str() == UNATTRIBUTED && !body.namespaces.is_empty() => {
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
    let display_name = body.display_name.clone().unwrap_or_default();
    if body.display_name.is_some() && !(1..=200).contains(&display_name.chars().count()) {
        errors.push(FieldError::new("display_name", "1 to 200 characters"));
    }
    for (i, n) in body.namespaces.iter().enumerate() {
        if !(1..=253).contains(&n.chars().count()) {
            errors.push(FieldError::new(
                format!("namespaces[{i}]"),
                "1 to 253 characters",
            ));
        }
        if body.namespaces[..i].contains(n) {
            errors.push(FieldError::new(
                format!("namespaces[{i}]"),
                format!("{n:?} is listed twice"),
            ));
        }
    }
    let (Some(team), true) = (team, errors.is_empty()) else {
        return Err(ApiError::invalid_fields("the team is invalid", errors));
    };
    let display_name = body
        .display_name
        .as_deref()
        .unwrap_or(team.as_str())
        .to_owned();
    let (row, reattributed) = teams::put(
        &state.pool,
        TeamUpdate {
            team: &team,
            display_name: &display_name,
            cost_center: body.cost_center.as_deref(),
            gl_account: body.gl_account.as_deref(),
            namespaces: &body.namespaces,
        },
        &Actor::of(&principal),
    )
    .await
    .map_err(|e| match e {
        TeamError::NamespaceTaken { .. } => ApiError::Conflict {
            code: "namespace_taken",
            message: e.to_string(),
            fields: vec![],
        },
        TeamError::Db(e) => e.into(),
    })?;
    tracing::info!(team = %team, by = principal.token_id(), reattributed, "A team was updated.");
    Ok(Json(TeamPutResult {
        team: row.into(),
        reattributed_consumers: reattributed,
    }))
}
