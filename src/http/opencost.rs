//! `GET /allocation` and `GET /allocation/compute`: OpenCost's allocation API, for `kubectl cost`,
//! OpenCost's UI and whatever else reads it, answered from the usage report (`exports::opencost`).
//! The same tokens and scoping as the rest of the API: a team lead sees their team's allocations.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use crate::billing::rate_card::Currency;
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::time::Month;
use crate::exports::opencost::{self, Idle};
use crate::reports::service as reports;
use crate::reports::usage::Step;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(allocation))
        .routes(routes!(allocation_compute))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct AllocationParams {
    /// `today`, `yesterday`, `week`, `lastweek`, `month`, `lastmonth`, `7d`, `24h`, or an RFC 3339
    /// or Unix pair `start,end` (UTC; widened to whole hours).
    #[param(
        required = true,
        example = "lastmonth",
        pattern = r"^(today|yesterday|week|lastweek|month|lastmonth|[1-9][0-9]{0,5}[mhdw]|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z,\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z|\d{9,10}[,|-]\d{9,10})$"
    )]
    window: Option<String>,
    /// `namespace`, `pod`, `container`, `controller`, `node`, `cluster`, `team`, `label:<key>`,
    /// comma-separated (default `namespace`).
    #[param(
        example = "namespace",
        pattern = r"^(cluster|namespace|pod|container|controller|node|team|label:[A-Za-z0-9._/-]{1,317})(,(cluster|namespace|pod|container|controller|node|team|label:[A-Za-z0-9._/-]{1,317}))*$"
    )]
    aggregate: Option<String>,
    /// `1h`, `1d` or `month`: one set per step; none, one set for the window.
    #[param(example = "1d", pattern = "^(1h|60m|hour|1d|24h|day|month)$")]
    step: Option<String>,
    /// `true`: one set for the whole window whatever `step`.
    #[param(example = "true", pattern = "^(true|false|1|0|all)$")]
    accumulate: Option<String>,
    /// `true`: the capacity no slice held, as the allocation `__idle__` (whole months only).
    #[param(example = "false", pattern = "^(true|false|1|0)$")]
    idle: Option<String>,
    /// OpenCost's name for `idle`.
    #[serde(rename = "includeIdle")]
    #[param(rename = "includeIdle", pattern = "^(true|false|1|0)$")]
    include_idle: Option<String>,
    /// `true`: idle capacity spread over the allocations by their cost (`sharedCost`).
    #[serde(rename = "shareIdle")]
    #[param(rename = "shareIdle", pattern = "^(true|false|1|0)$")]
    share_idle: Option<String>,
}

/// OpenCost's allocation sets: `{"code": 200, "status": "success", "data": [{name: allocation}]}`,
/// one set per step. The GPU figures are slicemeter's: `gpuHours` GPU-equivalent hours (held hours
/// x physical share), `gpuCost` their cost under the rate cards in force (an open month's sets add
/// up to its invoices' usage lines), `gpuEfficiency` used over held; CPU, memory, storage and
/// network are 0. Idle capacity (`idle`, `shareIdle`) is the fleet's cost less the allocations',
/// for windows of whole months, and for finance and admins.
#[utoipa::path(get, path = "/allocation", tag = "reports",
    params(AllocationParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "OpenCost's allocation sets", body = Object),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token, or idle capacity asked by a team lead", body = ErrorBody)))]
async fn allocation(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<AllocationParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    answer(&state, &principal, params).await
}

/// The same as `GET /allocation`, under the path OpenCost's UI and `kubectl cost --opencost` use.
#[utoipa::path(get, path = "/allocation/compute", tag = "reports",
    params(AllocationParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "OpenCost's allocation sets", body = Object),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token, or idle capacity asked by a team lead", body = ErrorBody)))]
async fn allocation_compute(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<AllocationParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    answer(&state, &principal, params).await
}

/// `r`'s value, or its error recorded against `name`.
fn take<T>(errors: &mut Vec<FieldError>, name: &str, r: Result<T, String>) -> Option<T> {
    r.map_err(|e| errors.push(FieldError::new(name, e))).ok()
}

async fn answer(
    state: &AppState,
    principal: &Principal,
    params: Result<Query<AllocationParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    require(principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let Query(p) = params?;
    let mut errors = Vec::new();
    let window = match p.window.as_deref() {
        None => take(
            &mut errors,
            "window",
            Err("window is required, e.g. lastmonth or 7d".into()),
        ),
        Some(w) => take(&mut errors, "window", opencost::parse_window(w, Utc::now())),
    };
    let aggregate = take(
        &mut errors,
        "aggregate",
        opencost::parse_aggregate(p.aggregate.as_deref().unwrap_or("namespace")),
    );
    let step = take(&mut errors, "step", opencost::parse_step(p.step.as_deref()));
    let accumulate = take(
        &mut errors,
        "accumulate",
        opencost::parse_bool("accumulate", p.accumulate.as_deref()),
    );
    let idle = take(
        &mut errors,
        "idle",
        opencost::parse_bool("idle", p.idle.as_deref()),
    );
    let include_idle = take(
        &mut errors,
        "includeIdle",
        opencost::parse_bool("includeIdle", p.include_idle.as_deref()),
    );
    let share_idle = take(
        &mut errors,
        "shareIdle",
        opencost::parse_bool("shareIdle", p.share_idle.as_deref()),
    );
    let (
        Some((from, to)),
        Some(aggregate),
        Some(step),
        Some(accumulate),
        Some(idle),
        Some(include_idle),
        Some(share_idle),
    ) = (
        window,
        aggregate,
        step,
        accumulate,
        idle,
        include_idle,
        share_idle,
    )
    else {
        return Err(ApiError::invalid_fields(
            "the allocation parameters are invalid",
            errors,
        ));
    };
    let idle = match (share_idle, idle || include_idle) {
        (true, _) => Idle::Shared,
        (false, true) => Idle::Separate,
        (false, false) => Idle::Off,
    };
    let accumulate = accumulate || step.is_none();
    let query_step = step.unwrap_or(Step::Day);
    let mut errors = Vec::new();
    if to - from > query_step.max_range() {
        errors.push(FieldError::new(
            "window",
            format!(
                "the window is longer than {} days, the limit for step={}",
                query_step.max_range().num_days(),
                query_step.as_str()
            ),
        ));
    }
    let months = opencost::whole_months(from, to);
    if idle != Idle::Off {
        if principal.team_scope().is_some() {
            return Err(ApiError::forbidden(
                "idle capacity is the fleet's: finance and admins may ask for it",
            ));
        }
        if months.is_none() || !(accumulate || step == Some(Step::Month)) {
            errors.push(FieldError::new(
                "idle",
                "idle capacity is known for whole months: use a window such as lastmonth or month, and no step or step=month",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid_fields(
            "the allocation parameters are invalid",
            errors,
        ));
    }
    let report = reports::usage_report(
        &state.pool,
        &state.reports,
        from,
        to,
        &opencost::group_by(&aggregate),
        query_step,
        principal.team_scope(),
    )
    .await?;
    // Each month's fleet cost and its placeable and stranded capacity, for idle capacity: the
    // month as billing prices it now.
    let mut fleet_cost: BTreeMap<Month, [Decimal; 3]> = BTreeMap::new();
    if idle != Idle::Off {
        for m in months.unwrap_or_default() {
            let inputs = reports::month(&state.pool, &state.reports, m).await?;
            let c = &inputs.bill().conservation;
            fleet_cost.insert(m, [c.fleet_cost, c.placeable, c.stranded]);
        }
    }
    let idle_cost = |start, end, allocated| idle_of(&fleet_cost, start, end, allocated);
    let currency = report
        .currency
        .as_deref()
        .and_then(|c| Currency::parse(c).ok());
    let sets = opencost::sets(
        &report,
        &aggregate,
        accumulate,
        idle,
        &idle_cost,
        currency.as_ref(),
    );
    Ok(Json(
        json!({"code": 200, "status": "success", "data": sets}),
    ))
}

/// Idle capacity of `[start, end)` if it is whole months: their fleet cost less `allocated`, and
/// their placeable and stranded capacity (`months`: each month's fleet cost, placeable, stranded).
fn idle_of(
    months: &BTreeMap<Month, [Decimal; 3]>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    allocated: Decimal,
) -> Option<opencost::IdleCost> {
    let whole = opencost::whole_months(start, end)?;
    let sum = |i: usize| -> Decimal {
        whole
            .iter()
            .filter_map(|m| months.get(m))
            .map(|f| f[i])
            .sum()
    };
    Some(opencost::IdleCost {
        total: sum(0) - allocated,
        placeable: sum(1),
        stranded: sum(2),
    })
}
