//! `GET /v1/teams`, `GET /v1/teams/{team}`, `PUT /v1/teams/{team}`: who pays, with cost centers,
//! and the namespaces each team owns over time.

use axum::Json;
use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{require, team_in_scope};
use super::error::{ApiError, ErrorBody, ErrorCode};
use super::state::AppState;
use crate::domain::access::Actor;
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::ownership;
use crate::domain::team::{TeamId, UNATTRIBUTED};
use crate::teams::store::{self as team_store, TeamRow, VersionRow};
use crate::teams::{self, TeamError, TeamUpdate};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_teams))
        .routes(routes!(get_team, put_team))
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
    #[schema(value_type = String, example = "nlp")]
    pub team: TeamId,
    pub display_name: String,
    pub cost_center: Option<String>,
    pub gl_account: Option<String>,
    /// Kubernetes namespaces whose unlabelled pods this team pays for now.
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

/// A team with the owners over time of every namespace it has owned.
#[derive(Debug, Serialize, ToSchema)]
pub struct TeamWithHistory {
    #[serde(flatten)]
    pub team: Team,
    /// Each namespace the team owns or has owned, by name, with its owners from the first version
    /// on (a team lead sees the spans their own team owned it only).
    pub ownership: Vec<NamespaceOwners>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NamespaceOwners {
    #[schema(example = "ns-move")]
    pub namespace: String,
    /// Its owners in order: each from its instant until the next's.
    pub owners: Vec<OwnerSpan>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OwnerSpan {
    /// The team; `null`: no team, its unlabelled consumers are `unattributed`.
    #[schema(value_type = Option<String>, example = "alpha")]
    pub team: Option<TeamId>,
    /// From this instant (2000-01-01T00:00:00Z: from the beginning of data).
    pub effective_from: DateTime<Utc>,
    /// Until this one; `null`: it owns it still.
    pub effective_until: Option<DateTime<Utc>>,
    /// Why it was dated as it is, when it was dated in the past.
    pub reason: Option<String>,
    /// When it was recorded.
    pub recorded_at: DateTime<Utc>,
}

/// The versions' spans by namespace; a lead's view keeps only their team's spans.
fn ownership_of(rows: Vec<VersionRow>, only: Option<&TeamId>) -> Vec<NamespaceOwners> {
    let mut out: Vec<NamespaceOwners> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let until = rows
            .get(i + 1)
            .filter(|n| n.namespace == r.namespace)
            .map(|n| n.effective_from);
        if only.is_some_and(|t| r.team_id.as_ref() != Some(t)) {
            continue;
        }
        if out.last().is_none_or(|n| n.namespace != r.namespace) {
            out.push(NamespaceOwners {
                namespace: r.namespace.clone(),
                owners: Vec::new(),
            });
        }
        if let Some(n) = out.last_mut() {
            n.owners.push(OwnerSpan {
                team: r.team_id.clone(),
                effective_from: r.effective_from,
                effective_until: until,
                reason: r.reason.clone(),
                recorded_at: r.recorded_at,
            });
        }
    }
    out
}

/// A change to a team. Only the fields sent change: a field left out keeps its value (a new team
/// starts with its id as display name and nothing else), `null` clears `cost_center` or
/// `gl_account`, and `namespaces` replaces the whole list when sent (`[]` empties it), from
/// `effective_from` on.
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
    /// When the new `namespaces` list takes effect: the namespaces gained belong to the team, and
    /// those left out to no team, from this instant until each one's next change. Left out: the
    /// request's time, so nothing before it changes. An instant in the past re-attributes the
    /// usage since then (it needs a `reason`), and is refused with 409 when that reaches a month
    /// whose invoices are issued. Only with `namespaces`.
    #[schema(example = "2026-09-11T00:00:00Z")]
    pub effective_from: Option<DateTime<Utc>>,
    /// Why: kept with the change and in the audit log; required with an `effective_from` in the
    /// past.
    #[schema(
        min_length = 1,
        max_length = 1000,
        example = "ns-move handed to beta in the September reorganisation"
    )]
    pub reason: Option<String>,
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

/// A team's namespaces (or other consumer groups): each 1 to 253 characters, each once.
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
    /// When the namespaces gained and removed changed hands (`null`: no list was sent).
    pub effective_from: Option<DateTime<Utc>>,
    /// Namespaces the team gained at `effective_from`.
    pub namespaces_gained: Vec<String>,
    /// Namespaces the team gave up at `effective_from` (to no team).
    pub namespaces_removed: Vec<String>,
    /// Consumers whose usage from `effective_from` on changed team (none when it is now: usage
    /// before it keeps its team).
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

/// One team, with the owners over time of each namespace it has owned. A team lead sees their own
/// team only.
#[utoipa::path(get, path = "/v1/teams/{team}", tag = "teams",
    params(("team" = String, Path, description = "team id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the team and its namespaces' owners over time", body = TeamWithHistory),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token, or another team's lead", body = ErrorBody),
        (status = 404, description = "no such team", body = ErrorBody)))]
async fn get_team(
    State(state): State<AppState>,
    principal: Principal,
    Path(team): Path<String>,
) -> Result<Json<TeamWithHistory>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let not_found = || ApiError::new(ErrorCode::NotFound, format!("no team {team:?}"));
    let id = TeamId::parse(&team).map_err(|_| not_found())?;
    team_in_scope(&principal, Some(id.clone()), "team")?;
    let row = team_store::list(&state.pool, Some(&id))
        .await?
        .pop()
        .ok_or_else(not_found)?;
    let history = team_store::history(&state.pool, &id).await?;
    Ok(Json(TeamWithHistory {
        team: row.into(),
        ownership: ownership_of(history, principal.team_scope()),
    }))
}

/// Creates or changes a team: name, cost center, GL account and namespaces. Only the fields sent
/// change (a field left out keeps its value; `null` clears `cost_center` or `gl_account`). A new
/// namespace list takes effect from `effective_from` (the request's time unless given): the
/// unlabelled consumers of the namespaces gained or removed change team from that instant on, and
/// a window that straddles it is split there.
#[utoipa::path(put, path = "/v1/teams/{team}", tag = "teams",
    params(("team" = String, Path, description = "team id: lowercase letters, digits, '-' or '_'", pattern = r"^[a-z0-9][a-z0-9_-]{0,62}$")),
    request_body = TeamPut,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the team as stored", body = TeamPutResult),
        (status = 400, description = "invalid fields, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody),
        (status = 409, description = "a namespace belongs to another team (named, with its owner), or the change would reach a month whose invoices are issued (named)", body = ErrorBody)))]
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
    check_dating(&body, Utc::now(), &mut errors);
    let (Some(team), true) = (team, errors.is_empty()) else {
        return Err(ApiError::invalid_fields("the team is invalid", errors));
    };
    let done = teams::put(
        &state.pool,
        &team,
        TeamUpdate {
            display_name: body.display_name.as_deref(),
            cost_center: body.cost_center.as_ref().map(Option::as_deref),
            gl_account: body.gl_account.as_ref().map(Option::as_deref),
            namespaces: body.namespaces.as_deref(),
            effective_from: body.effective_from,
            reason: body.reason.as_deref(),
        },
        &Actor::of(&principal),
    )
    .await
    .map_err(|e| match e {
        TeamError::NamespaceTaken { .. } => ApiError::conflict(ErrorCode::NamespaceTaken, &e),
        TeamError::IssuedMonth { .. } | TeamError::RawWindowsGone { .. } => {
            ApiError::conflict(ErrorCode::OwnershipConflict, &e)
        }
        e @ TeamError::WindowUnsplittable { .. } => ApiError::internal(e),
        TeamError::Db(e) => e.into(),
    })?;
    tracing::info!(team = %team, by = principal.token_id(), from = ?done.effective_from,
        reattributed = done.reattributed_consumers, "A team was updated.");
    Ok(Json(TeamPutResult {
        team: done.team.into(),
        effective_from: done.effective_from,
        namespaces_gained: done.gained,
        namespaces_removed: done.lost,
        reattributed_consumers: done.reattributed_consumers,
    }))
}

/// `effective_from` and `reason`: an instant the contract's data can have (2000 on, whole
/// microseconds, at most `ownership::MAX_DAYS_AHEAD` days ahead), only with `namespaces`, and one
/// in the past with a reason.
fn check_dating(body: &TeamPut, now: DateTime<Utc>, errors: &mut Vec<FieldError>) {
    if let Some(reason) = &body.reason
        && let Err(e) = crate::domain::text::check(reason, 1000)
    {
        errors.push(FieldError::new(
            "reason",
            format!("1 to 1000 printable characters: it {e}"),
        ));
    }
    let Some(at) = body.effective_from else {
        return;
    };
    if body.namespaces.is_none() {
        errors.push(FieldError::new(
            "effective_from",
            "dates a change of namespaces: send the team's `namespaces` with it",
        ));
    } else if at < ownership::beginning() {
        errors.push(FieldError::new(
            "effective_from",
            format!("{at} is before {}, before any data", ownership::beginning()),
        ));
    } else if at.timestamp_subsec_nanos() % 1000 != 0 {
        errors.push(FieldError::new(
            "effective_from",
            "whole microseconds or coarser",
        ));
    } else if at > now + chrono::Duration::days(ownership::MAX_DAYS_AHEAD) {
        errors.push(FieldError::new(
            "effective_from",
            format!(
                "{at} is more than {} days ahead; date the change closer to when it applies",
                ownership::MAX_DAYS_AHEAD
            ),
        ));
    } else if at < now && body.reason.is_none() {
        errors.push(FieldError::new(
            "reason",
            "a change dated in the past re-attributes usage already billed in drafts: say why",
        ));
    }
}
