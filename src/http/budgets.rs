//! `POST/GET /v1/budgets`, `GET/PUT/DELETE /v1/budgets/{id}` (issue 15): a monthly budget per
//! team, and where the current month stands against it: spent and forecast (`reports::forecast`,
//! in the invoices' money), their share of the budget, and the thresholds they have crossed.
//! Finance and admins change budgets (audited); a team lead reads their own team's.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody, ErrorCode};
use super::state::AppState;
use super::teams::ApiJson;
use crate::budgets::standing::{self, BudgetStanding};
use crate::budgets::store::BudgetRow;
use crate::budgets::{
    self, BudgetError, BudgetPeriod, BudgetSpec, Channel, ChannelInput, ChannelView, Threshold,
    ThresholdInput, Watch,
};
use crate::domain::access::{Actor, Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::scope::UsageScope;
use crate::domain::team::TeamId;
use crate::reports::service::{self as reports, ForecastReport};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_budget, list_budgets))
        .routes(routes!(get_budget, put_budget, delete_budget))
}

/// A budget to make, or what an existing one becomes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetInput {
    /// The team (on a change, left out or the budget's own).
    #[schema(example = "nlp")]
    pub team: Option<String>,
    /// Only this one of the team's namespaces (on a change, left out or the budget's own).
    #[schema(example = "nlp-prod")]
    pub namespace: Option<String>,
    /// Only the team's pods with this label, `key=value` (on a change, left out or the budget's
    /// own).
    #[schema(example = "app.kubernetes.io/part-of=search")]
    pub label: Option<String>,
    /// `month` (the default) or `quarter` (UTC calendar quarters; a fixed amount).
    #[schema(example = "month", pattern = "^(month|quarter)$")]
    pub period: Option<String>,
    /// A decimal amount per month (`"5000.00"`), or `"auto"`: the average of the team's last
    /// `auto_months` closed months.
    #[schema(example = "5000.00", pattern = r"^(auto|[0-9]{1,15}(\.[0-9]{1,4})?)$")]
    pub amount: String,
    /// With `auto`: how many closed months it averages, 1 to 12.
    #[schema(example = json!(null), minimum = 1, maximum = 12)]
    pub auto_months: Option<i64>,
    /// ISO 4217, as the rate cards bill.
    #[schema(example = "USD", pattern = "^[A-Z]{3}$")]
    pub currency: String,
    /// 1 to 10, e.g. `[{"kind": "actual", "percent": 80}, {"kind": "forecast", "percent": 100}]`.
    #[schema(min_items = 1, max_items = 10)]
    pub thresholds: Vec<ThresholdInput>,
    /// Where the budget's alerts go, at most 5 (`GET /v1/alerts`; README, Alerts). Left out, a
    /// change keeps the budget's channels (answers never show their URLs whole); `[]` removes them.
    #[schema(max_items = 5)]
    pub channels: Option<Vec<ChannelInput>>,
    /// Alert on a slice the team has held this many whole days (1 to 31) with no compute, with
    /// its cost. Left out, a change keeps it; `null` turns it off.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 31)]
    pub idle_days: Option<Option<i64>>,
    /// Alert on a day that cost more than this many times the team's median day of the 14 before
    /// it (a decimal above 1, at most 100, e.g. `"2.5"`). Left out, a change keeps it; `null`
    /// turns it off.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, example = "2.5")]
    pub spend_change: Option<Option<String>>,
}

/// A field that is there, `null` or not: `Some(None)` for `null`, `None` (by `default`) when left
/// out.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A budget, and where the current month stands against it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Budget {
    pub id: i64,
    #[schema(value_type = String)]
    pub team: TeamId,
    /// The one namespace it watches, if it is narrower than the team.
    pub namespace: Option<String>,
    /// The label (`key=value`) of the pods it watches, if it is narrower than the team.
    pub label: Option<String>,
    /// `month` or `quarter`.
    pub period: BudgetPeriod,
    /// The fixed amount a month; `null` for an `auto` budget.
    #[schema(value_type = Option<String>)]
    pub amount: Option<Decimal>,
    /// The closed months an `auto` budget averages; `null` for a fixed one.
    pub auto_months: Option<i16>,
    pub currency: String,
    pub thresholds: Vec<Threshold>,
    /// Where its alerts go, each URL shown to its origin only.
    pub channels: Vec<ChannelView>,
    pub idle_days: Option<i16>,
    #[schema(value_type = Option<String>)]
    pub spend_change: Option<Decimal>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The current month against the budget; `null` while billing cannot price the month (see
    /// `current_error`).
    pub current: Option<BudgetStanding>,
    /// Why `current` is `null` (hours of the month without a rate card).
    pub current_error: Option<String>,
}

/// The current month's forecasts of `team` (every team's, when `None`), read once for every
/// budget an answer holds; `Err` with why, where billing cannot price the month.
pub(crate) async fn forecasts(
    state: &AppState,
    team: Option<&TeamId>,
) -> Result<Result<ForecastReport, String>, ApiError> {
    match reports::forecasts(&state.pool, &state.reports, Utc::now(), team).await {
        Ok(r) => Ok(Ok(r)),
        Err(e) => {
            let e = ApiError::from(e);
            if e.code == ErrorCode::CannotBill {
                Ok(Err(e.message))
            } else {
                Err(e)
            }
        }
    }
}

async fn answer(
    state: &AppState,
    row: BudgetRow,
    forecasts: &Result<ForecastReport, String>,
) -> Result<Budget, ApiError> {
    let (current, current_error) = match forecasts {
        Ok(report) => (
            Some(standing::standing(&state.pool, &state.reports, &row, report).await?),
            None,
        ),
        Err(why) => (None, Some(why.clone())),
    };
    let (namespace, label) = match row.scope() {
        None => (None, None),
        Some(UsageScope::Namespace(ns)) => (Some(ns), None),
        Some(UsageScope::Label { key, value }) => (None, Some(format!("{key}={value}"))),
    };
    Ok(Budget {
        id: row.budget_id,
        namespace,
        label,
        period: row.period,
        thresholds: row.thresholds(),
        channels: row.channels().iter().map(Channel::redacted).collect(),
        idle_days: row.idle_days,
        spend_change: row.spend_change,
        team: row.team_id,
        amount: row.amount,
        auto_months: row.auto_months,
        currency: row.currency,
        created_at: row.created_at,
        updated_at: row.updated_at,
        current,
        current_error,
    })
}

/// The budget asked for, each bad field named; a channel this server cannot send to (a webhook
/// without a signing key, an email without SMTP) is refused now, not found failing later.
fn spec(state: &AppState, body: &BudgetInput) -> Result<BudgetSpec, ApiError> {
    let spec = BudgetSpec::parse(
        &body.amount,
        body.auto_months,
        &body.currency,
        &body.thresholds,
    );
    let watch = Watch::parse(
        body.channels.as_deref(),
        body.idle_days,
        body.spend_change.as_ref().map(Option::as_deref),
    );
    let mut fields = Vec::new();
    if let Ok(w) = &watch {
        for (i, c) in w.channels.iter().flatten().enumerate() {
            if let Some(why) = state.config.alerts.cannot_send(c) {
                fields.push(FieldError::new(format!("channels[{i}]"), why));
            }
        }
    }
    let scope = match (&body.namespace, &body.label) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(FieldError::new(
            "label",
            "a budget watches a namespace or a label, not both",
        )),
        (Some(ns), None) => match crate::domain::text::check(ns, 253) {
            Ok(()) if !ns.is_empty() => Ok(Some(UsageScope::Namespace(ns.clone()))),
            _ => Err(FieldError::new(
                "namespace",
                "a namespace has 1 to 253 characters",
            )),
        },
        (None, Some(l)) => UsageScope::label(l)
            .map(Some)
            .map_err(|e| FieldError::new("label", e)),
    };
    let period = match body.period.as_deref() {
        None => Ok(BudgetPeriod::Month),
        Some(p) => BudgetPeriod::parse(p).map_err(|e| FieldError::new("period", e)),
    };
    match (spec, watch, scope, period) {
        (Ok(spec), Ok(watch), Ok(scope), Ok(period)) if fields.is_empty() => {
            BudgetSpec { watch, ..spec }
                .for_scope(scope, period)
                .map_err(|all| ApiError::invalid_fields("the budget is invalid", all))
        }
        (spec, watch, scope, period) => {
            let mut all = spec.err().unwrap_or_default();
            all.extend(watch.err().unwrap_or_default());
            all.extend(scope.err());
            all.extend(period.err());
            all.extend(fields);
            Err(ApiError::invalid_fields("the budget is invalid", all))
        }
    }
}

fn refused(e: BudgetError) -> ApiError {
    match e {
        BudgetError::UnknownTeam(_) => ApiError::invalid_fields(
            "the budget is invalid",
            vec![FieldError::new("team", e.to_string())],
        ),
        BudgetError::NotTheTeams(..) => ApiError::invalid_fields(
            "the budget is invalid",
            vec![FieldError::new("namespace", e.to_string())],
        ),
        BudgetError::TeamHasOne(..) => ApiError::new(ErrorCode::BudgetExists, e.to_string()),
        BudgetError::Db(e) => e.into(),
    }
}

/// A budget id from the path; none that is not a number exists.
fn id_of(id: &str) -> Result<i64, ApiError> {
    id.parse::<i64>()
        .map_err(|_| ApiError::not_found(format!("there is no budget {id:?}")))
}

/// Makes a team's monthly budget (one a team). Audited (`budget.create`).
#[utoipa::path(post, path = "/v1/budgets", tag = "billing",
    request_body = BudgetInput,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "the budget, with the current month against it", body = Budget),
        (status = 400, description = "each bad field named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody),
        (status = 409, description = "the team has a budget already", body = ErrorBody)))]
async fn create_budget(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<BudgetInput>,
) -> Result<(StatusCode, Json<Budget>), ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let team = match body.team.as_deref().map(TeamId::parse) {
        Some(Ok(t)) if t.is_unattributed() => Err(FieldError::new(
            "team",
            "unattributed usage is never invoiced, so it has no budget: attribute it to a team",
        )),
        Some(Ok(t)) => Ok(t),
        Some(Err(e)) => Err(FieldError::new("team", e.to_string())),
        None => Err(FieldError::new("team", "a budget needs its team")),
    };
    let (team, spec) = match (team, spec(&state, &body)) {
        (Ok(team), Ok(spec)) => (team, spec),
        (team, spec) => {
            let mut fields: Vec<FieldError> = team.err().into_iter().collect();
            if let Err(e) = spec {
                fields.extend(e.fields);
            }
            return Err(ApiError::invalid_fields("the budget is invalid", fields));
        }
    };
    let row = budgets::create(&state.pool, &team, &spec, &Actor::of(&principal))
        .await
        .map_err(refused)?;
    let f = forecasts(&state, Some(&team)).await?;
    Ok((StatusCode::CREATED, Json(answer(&state, row, &f).await?)))
}

/// Every budget with the current month against it, by team; a team lead gets their team's.
#[utoipa::path(get, path = "/v1/budgets", tag = "billing",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the budgets", body = Vec<Budget>),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token", body = ErrorBody)))]
async fn list_budgets(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Vec<Budget>>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let rows = budgets::list(&state.pool, principal.team_scope()).await?;
    if rows.is_empty() {
        return Ok(Json(Vec::new()));
    }
    let f = forecasts(&state, principal.team_scope()).await?;
    let mut out = Vec::new();
    for row in rows {
        out.push(answer(&state, row, &f).await?);
    }
    Ok(Json(out))
}

/// One budget with the current month against it; another team's is not found for a team lead.
#[utoipa::path(get, path = "/v1/budgets/{id}", tag = "billing",
    params(("id" = String, Path, description = "the budget's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the budget", body = Budget),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token", body = ErrorBody),
        (status = 404, description = "no such budget (or another team's)", body = ErrorBody)))]
async fn get_budget(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Budget>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let id = id_of(&id)?;
    let row = budgets::get(&state.pool, id)
        .await?
        .filter(|b| principal.team_scope().is_none_or(|own| *own == b.team_id))
        .ok_or_else(|| ApiError::not_found(format!("there is no budget {id}")))?;
    let team = row.team_id.clone();
    let f = forecasts(&state, Some(&team)).await?;
    Ok(Json(answer(&state, row, &f).await?))
}

/// Replaces a budget's amount, currency and thresholds, and its channels, `idle_days` and
/// `spend_change` where given (its team stays). Audited (`budget.update`, with what it was).
#[utoipa::path(put, path = "/v1/budgets/{id}", tag = "billing",
    params(("id" = String, Path, description = "the budget's id")),
    request_body = BudgetInput,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the budget as it is now", body = Budget),
        (status = 400, description = "each bad field named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody),
        (status = 404, description = "no such budget", body = ErrorBody)))]
async fn put_budget(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<BudgetInput>,
) -> Result<Json<Budget>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let id = id_of(&id)?;
    let spec = spec(&state, &body)?;
    let Some(existing) = budgets::get(&state.pool, id).await? else {
        return Err(ApiError::not_found(format!("there is no budget {id}")));
    };
    // What a budget is of does not change: its team, scope and period (make another budget).
    let mut moved = Vec::new();
    if let Some(team) = &body.team
        && *team != existing.team_id.as_str()
    {
        moved.push(FieldError::new(
            "team",
            format!(
                "budget {id} is {:?}'s; a budget does not move to another team",
                existing.team_id
            ),
        ));
    }
    let given_scope = spec
        .scope
        .as_ref()
        .map(UsageScope::stored)
        .unwrap_or_default();
    if (body.namespace.is_some() || body.label.is_some()) && given_scope != existing.scope {
        moved.push(FieldError::new(
            if body.namespace.is_some() {
                "namespace"
            } else {
                "label"
            },
            format!(
                "budget {id} watches {:?}; make another budget for another scope",
                existing.scope
            ),
        ));
    }
    if body.period.is_some() && spec.period != existing.period {
        moved.push(FieldError::new(
            "period",
            format!(
                "budget {id} is a {} budget; make another for another period",
                existing.period
            ),
        ));
    }
    if !moved.is_empty() {
        return Err(ApiError::invalid_fields("the budget is invalid", moved));
    }
    // Left out, they stay what they are.
    let spec = BudgetSpec {
        scope: existing.scope(),
        period: existing.period,
        ..spec
    }
    .for_scope(existing.scope(), existing.period)
    .map_err(|all| ApiError::invalid_fields("the budget is invalid", all))?;
    let row = budgets::update(&state.pool, id, &spec, &Actor::of(&principal))
        .await
        .map_err(refused)?
        .ok_or_else(|| ApiError::not_found(format!("there is no budget {id}")))?;
    let team = row.team_id.clone();
    let f = forecasts(&state, Some(&team)).await?;
    Ok(Json(answer(&state, row, &f).await?))
}

/// Deletes a budget. Audited (`budget.delete`, with what it was).
#[utoipa::path(delete, path = "/v1/budgets/{id}", tag = "billing",
    params(("id" = String, Path, description = "the budget's id")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "deleted"),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody),
        (status = 404, description = "no such budget", body = ErrorBody)))]
async fn delete_budget(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let id = id_of(&id)?;
    if budgets::delete(&state.pool, id, &Actor::of(&principal))
        .await
        .map_err(refused)?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("there is no budget {id}")))
    }
}
