//! `GET /v1/gpus/{uuid}/ledger`: one card's cost and where every unit of it went, step by step
//! (finance and admins).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody};
use super::reports::instant;
use super::state::AppState;
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;
use crate::reports::ledger::service::{LedgerError, card_ledger};
use crate::reports::ledger::{self, Ledger};
use crate::reports::usage::Step;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(gpu_ledger))
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        match e {
            e @ LedgerError::UnknownGpu(_) => ApiError::not_found(e.to_string()),
            e @ LedgerError::HoursOfIssuedMonth(_) => ApiError::invalid_fields(
                "the ledger's parameters are invalid",
                vec![FieldError::new("step", e.to_string())],
            ),
            LedgerError::Billing(e) => e.into(),
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct LedgerParams {
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
    /// `hour`, `day` (default) or `month`. At most 93 days of hours, 366 of days.
    #[param(pattern = "^(hour|day|month)$")]
    step: Option<String>,
    /// `json` (default) or `csv`.
    #[param(pattern = "^(json|csv)$")]
    format: Option<String>,
}

/// One card's ledger: for each step, the card's cost (its hours present at its model's hourly cost
/// under the rate card in force) = each holder's charge (team, workload, slice) + sharing discount
/// + placeable + stranded unallocated capacity + rounding, to the minor unit, each figure rounded
/// once, half to even. An issued month is read from its books (by day or month: its books keep
/// days, and its holders' teams and slices, not workloads). The CSV has a row per figure, the
/// step's `cost` row first.
#[utoipa::path(get, path = "/v1/gpus/{uuid}/ledger", tag = "fleet",
    params(("uuid" = String, Path, description = "the GPU's uuid"), LedgerParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the ledger (CSV with format=csv)", body = Ledger,
            content((Ledger = "application/json"), (String = "text/csv"))),
        (status = 400, description = "bad parameters, each named (a reversed range, more than 93 days of hours, hours of an issued month)", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs finance or admin", body = ErrorBody),
        (status = 404, description = "no such GPU", body = ErrorBody),
        (status = 409, description = "hours without a rate card", body = ErrorBody)))]
async fn gpu_ledger(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
    params: Result<Query<LedgerParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let Query(p) = params?;
    let mut errors = Vec::new();
    let from = instant("from", p.from.as_deref(), &mut errors);
    let to = instant("to", p.to.as_deref(), &mut errors);
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
        } else if to - from > ledger::max_range(step) {
            errors.push(FieldError::new(
                "to",
                format!(
                    "the range is longer than {} days, the limit for step={}; use a coarser step or a shorter range",
                    ledger::max_range(step).num_days(),
                    step.as_str()
                ),
            ));
        }
    }
    let csv = match p.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(other) => {
            errors.push(FieldError::new(
                "format",
                format!("{other:?} is not a format: json or csv"),
            ));
            false
        }
    };
    let (Some(from), Some(to), Some(step), true) = (from, to, step, errors.is_empty()) else {
        return Err(ApiError::invalid_fields(
            "the ledger's parameters are invalid",
            errors,
        ));
    };
    respond(&state, &principal, &uuid, from, to, step, csv).await
}

/// The ledger of `uuid` as JSON or CSV, for finance and admins (the API's and the dashboard's).
pub(crate) async fn respond(
    state: &AppState,
    principal: &Principal,
    uuid: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Step,
    csv: bool,
) -> Result<Response, ApiError> {
    require(principal, &[Role::Admin, Role::Finance])?;
    let l = card_ledger(&state.pool, uuid, from, to, step).await?;
    if !csv {
        return Ok(Json(l).into_response());
    }
    let body = ledger::to_csv(&l).map_err(ApiError::internal)?;
    let name: String = uuid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"slicemeter-ledger-{name}-{}.csv\"",
                    from.format("%Y%m%dT%H")
                ),
            ),
        ],
        body,
    )
        .into_response())
}
