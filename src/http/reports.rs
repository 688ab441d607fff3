//! `GET /v1/reports/usage`: what was held and used, from the hourly rollups.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use chrono::{DateTime, NaiveDate, Utc};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{require, team_in_scope};
use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::domain::time::{floor_hour, start_of};
use crate::reports::monthly::MonthlyReport;
use crate::reports::service::{self as reports, ForecastReport};
use crate::reports::usage::{GroupBy, Step, UsageReport};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(usage_report))
        .routes(routes!(monthly_report))
        .routes(routes!(forecast))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ForecastParams {
    /// Only this team (a team lead: their own, the default).
    #[param(example = "nlp", pattern = "^[a-z0-9][a-z0-9_-]{0,62}$")]
    team: Option<String>,
}

/// The current month's forecast per team: what it has spent so far (its invoice lines as billing
/// prices them now), its cost per hour over the last 7 days (from the first day of its usage in
/// them, for a younger team) projected over the time left in the month, and a band projecting the
/// 10th and 90th percentiles of its daily cost in those days. A team lead gets their own team.
#[utoipa::path(get, path = "/v1/reports/forecast", tag = "reports",
    params(ForecastParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the forecast", body = ForecastReport),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token, or another team's", body = ErrorBody),
        (status = 409, description = "hours without a rate card", body = ErrorBody)))]
async fn forecast(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<ForecastParams>, QueryRejection>,
) -> Result<Json<ForecastReport>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let Query(params) = params?;
    let asked = match params.team.as_deref().map(TeamId::parse).transpose() {
        Ok(t) => t,
        Err(e) => {
            return Err(ApiError::invalid_fields(
                "the forecast's parameters are invalid",
                vec![FieldError::new("team", e.to_string())],
            ));
        }
    };
    let team = team_in_scope(&principal, asked, "forecast")?;
    Ok(Json(
        reports::forecasts(&state.pool, &state.reports, Utc::now(), team.as_ref()).await?,
    ))
}

/// Per team: cost, GPU-equivalent hours, slice-hours, efficiency and the cost of held-but-idle
/// capacity; what consumers no team claims held; and the conservation block (fleet cost = team
/// charges + unattributed + unallocated + sharing discount + rounding residual). Once the period is
/// issued the figures are what was issued, whatever arrived since; late data shows as pending
/// corrections. A team lead gets their own team only, without the fleet-wide blocks.
#[utoipa::path(get, path = "/v1/reports/monthly/{period}", tag = "reports",
    params(("period" = String, Path, description = "the month, `YYYY-MM`", pattern = r"^\d{4}-(0[1-9]|1[0-2])$")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the report", body = MonthlyReport),
        (status = 400, description = "not a month", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token", body = ErrorBody),
        (status = 409, description = "hours without a rate card", body = ErrorBody)))]
async fn monthly_report(
    State(state): State<AppState>,
    principal: Principal,
    Path(period): Path<String>,
) -> Result<Json<MonthlyReport>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let month: Month = period.parse().map_err(|e: String| {
        ApiError::invalid_fields("the period is invalid", vec![FieldError::new("period", e)])
    })?;
    Ok(Json(
        reports::monthly_report(
            &state.pool,
            &state.reports,
            month,
            Utc::now(),
            principal.team_scope(),
        )
        .await?,
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct UsageParams {
    /// Start of the range (inclusive): an RFC 3339 instant on an hour boundary, or a date (UTC midnight).
    #[param(
        required = true,
        example = "2026-10-01",
        pattern = r"^\d{4}-\d{2}-\d{2}(T\d{2}:00:00(\.0+)?(Z|[+-]\d{2}:00))?$"
    )]
    from: Option<String>,
    /// End of the range (exclusive), like `from`.
    #[param(
        required = true,
        example = "2026-11-01",
        pattern = r"^\d{4}-\d{2}-\d{2}(T\d{2}:00:00(\.0+)?(Z|[+-]\d{2}:00))?$"
    )]
    to: Option<String>,
    /// What rows are grouped by, comma-separated, up to six: `team` (default), `gpu_model`, `kind`,
    /// `profile`, `node`, `namespace`, `workload` (the pod's Deployment, StatefulSet or Job, else
    /// the pod), `pod`, `container`, `label:<key>` (a pod label's value), and NVIDIA dcgm-exporter's
    /// labels under its names (`UUID`, `Hostname`, `modelName`, `GPU_I_PROFILE`, `GPU_I_ID`,
    /// `dra_claim_name`, `dra_claim_namespace`, `dra_driver_name`, `dra_pool_name`,
    /// `dra_device_name`), e.g. `team,namespace` or `UUID,GPU_I_ID,pod`.
    #[param(
        example = "team,namespace,workload",
        pattern = r"^(team|gpu_model|kind|profile|node|namespace|workload|pod|container|label:[A-Za-z0-9._/-]{1,317}|UUID|Hostname|modelName|GPU_I_PROFILE|GPU_I_ID|dra_claim_name|dra_claim_namespace|dra_driver_name|dra_pool_name|dra_device_name)(,(team|gpu_model|kind|profile|node|namespace|workload|pod|container|label:[A-Za-z0-9._/-]{1,317}|UUID|Hostname|modelName|GPU_I_PROFILE|GPU_I_ID|dra_claim_name|dra_claim_namespace|dra_driver_name|dra_pool_name|dra_device_name)){0,5}$"
    )]
    group_by: Option<String>,
    /// `hour`, `day` (default) or `month`.
    #[param(pattern = "^(hour|day|month)$")]
    step: Option<String>,
}

pub(super) fn instant(
    field: &str,
    value: Option<&str>,
    errors: &mut Vec<FieldError>,
) -> Option<DateTime<Utc>> {
    let Some(value) = value else {
        errors.push(FieldError::new(
            field,
            format!("{field} is required, e.g. 2026-10-01"),
        ));
        return None;
    };
    let t = if let Ok(day) = NaiveDate::parse_from_str(value, "%Y-%m-%d") {
        start_of(day)
    } else if let Ok(t) = DateTime::parse_from_rfc3339(value) {
        t.with_timezone(&Utc)
    } else {
        errors.push(FieldError::new(
            field,
            format!("{value:?} is neither a date (2026-10-01) nor an RFC 3339 instant"),
        ));
        return None;
    };
    if floor_hour(t) != t {
        errors.push(FieldError::new(
            field,
            format!("{value:?} is not on an hour boundary; reports are hourly"),
        ));
        return None;
    }
    Some(t)
}

/// Slice-hours held, GPU-equivalent hours (held hours x physical share, by the newest rate card's
/// weights, 0.5/0.5 by default), memory GiB-hours used, compute-active hours, efficiency, cost and
/// idle cost, per bucket and group. Costs are the invoice lines' figures: for every open month the
/// range covers whole, the rows add up to the month's usage lines to the cent; an issued month's
/// rows are what its hours cost now (issued lines plus the corrections late data brings). A team
/// lead sees only their team.
#[utoipa::path(get, path = "/v1/reports/usage", tag = "reports",
    params(UsageParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the report", body = UsageReport),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token", body = ErrorBody)))]
async fn usage_report(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<UsageParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<UsageReport>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let Query(p) = params?;
    let mut errors = Vec::new();
    let from = instant("from", p.from.as_deref(), &mut errors);
    let to = instant("to", p.to.as_deref(), &mut errors);
    let group_by = p
        .group_by
        .as_deref()
        .unwrap_or("team")
        .parse::<GroupBy>()
        .map_err(|e| errors.push(FieldError::new("group_by", e)))
        .ok();
    let step = p
        .step
        .as_deref()
        .unwrap_or("day")
        .parse::<Step>()
        .map_err(|e| errors.push(FieldError::new("step", e)))
        .ok();
    if let (Some(from), Some(to), Some(step)) = (from, to, step) {
        if to <= from {
            errors.push(FieldError::new("to", "to must be after from"));
        } else if to - from > step.max_range() {
            errors.push(FieldError::new(
                "to",
                format!(
                    "the range is longer than {} days, the limit for step={}; use a coarser step or a shorter range",
                    step.max_range().num_days(),
                    step.as_str()
                ),
            ));
        }
    }
    let (Some(from), Some(to), Some(group_by), Some(step), true) =
        (from, to, group_by, step, errors.is_empty())
    else {
        return Err(ApiError::invalid_fields(
            "the report parameters are invalid",
            errors,
        ));
    };
    Ok(Json(
        reports::usage_report(
            &state.pool,
            &state.reports,
            from,
            to,
            &group_by,
            step,
            principal.team_scope(),
        )
        .await?,
    ))
}
