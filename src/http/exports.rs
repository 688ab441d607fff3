//! `GET /v1/exports/focus`, `GET /v1/exports/erp`: CSV for cost tools and the ERP, streamed.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody, ErrorCode};
use super::state::AppState;
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::time::Month;
use crate::exports::focus::Version;
use crate::exports::service::{self as exports, ExportError};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(focus_export))
        .routes(routes!(erp_export))
}

impl From<ExportError> for ApiError {
    fn from(e: ExportError) -> Self {
        match e {
            ExportError::Billing(e) => e.into(),
            ExportError::Unpriced(e) => ApiError::conflict(ErrorCode::CannotBill, &e),
            ExportError::Db(e) => e.into(),
            ExportError::Csv(e) => ApiError::internal(e),
            other => ApiError::conflict(ErrorCode::CannotExport, &other),
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PeriodParams {
    /// The month, `YYYY-MM`.
    #[param(
        required = true,
        example = "2026-10",
        pattern = r"^\d{4}-(0[1-9]|1[0-2])$"
    )]
    period: Option<String>,
}

fn period(
    params: Result<Query<PeriodParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Month, ApiError> {
    let Query(p) = params?;
    let raw = p.period.ok_or_else(|| {
        ApiError::invalid_fields(
            "a period is required",
            vec![FieldError::new(
                "period",
                "period is required, e.g. 2026-10",
            )],
        )
    })?;
    raw.parse().map_err(|e: String| {
        ApiError::invalid_fields("the period is invalid", vec![FieldError::new("period", e)])
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct FocusParams {
    /// The month, `YYYY-MM`.
    #[param(
        required = true,
        example = "2026-10",
        pattern = r"^\d{4}-(0[1-9]|1[0-2])$"
    )]
    period: Option<String>,
    /// The FOCUS version: `1.2` (default), `1.3` (with its split cost allocation columns) or `1.0`.
    #[param(example = "1.2", pattern = r"^1\.[023]$")]
    version: Option<String>,
}

fn csv_response(what: &str, month: Month, body: Body) -> Response {
    let name = format!(
        "slicemeter-{what}-{month}-generated-{}.csv",
        Utc::now().format("%Y%m%dT%H%M%SZ")
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

/// FOCUS 1.2 (or, with `version`, 1.3 or 1.0) cost and usage rows of a month: one per (team, slice,
/// day), the idle capacity spread to teams, corrections (`ChargeClass` Correction) and the
/// platform's unallocated, sharing-discount and rounding rows, which together sum to the month's
/// fleet cost. Streamed. A team lead gets their team's rows only.
#[utoipa::path(get, path = "/v1/exports/focus", tag = "exports",
    params(FocusParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "FOCUS CSV", body = String, content_type = "text/csv"),
        (status = 400, description = "no or a bad period or version", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token", body = ErrorBody),
        (status = 409, description = "hours without a rate card", body = ErrorBody)))]
async fn focus_export(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<FocusParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(p) = params?;
    let mut errors = Vec::new();
    let month = match p.period.as_deref() {
        None => {
            errors.push(FieldError::new(
                "period",
                "period is required, e.g. 2026-10",
            ));
            None
        }
        Some(raw) => raw
            .parse::<Month>()
            .map_err(|e| errors.push(FieldError::new("period", e)))
            .ok(),
    };
    let version = p
        .version
        .as_deref()
        .map_or(Ok(Version::default()), Version::parse)
        .map_err(|e| errors.push(FieldError::new("version", e)))
        .ok();
    match (month, version) {
        (Some(month), Some(version)) => focus_response(&state, &principal, month, version).await,
        _ => Err(ApiError::invalid_fields(
            "the export parameters are invalid",
            errors,
        )),
    }
}

/// The FOCUS export of `month` as the principal may see it; the dashboard serves the same.
pub(crate) async fn focus_response(
    state: &AppState,
    principal: &Principal,
    month: Month,
    version: Version,
) -> Result<Response, ApiError> {
    require(principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let stream = exports::focus(
        &state.pool,
        &state.reports,
        month,
        principal.team_scope().cloned(),
        state.config.exports.clone(),
        version,
    )
    .await?;
    Ok(csv_response("focus", month, Body::from_stream(stream)))
}

/// Balanced journal lines of a month's issued invoices: a debit per team cost center and GL account,
/// one credit to the platform's GPU cost center. Columns as the configured layout says.
#[utoipa::path(get, path = "/v1/exports/erp", tag = "exports",
    params(PeriodParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "journal CSV", body = String, content_type = "text/csv"),
        (status = 400, description = "no or a bad period", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs finance or admin", body = ErrorBody),
        (status = 409, description = "drafts left, no invoices, or a team without cost center", body = ErrorBody)))]
async fn erp_export(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<PeriodParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let month = period(params)?;
    erp_response(&state, &principal, month).await
}

/// The ERP journal of `month`; the dashboard serves the same.
pub(crate) async fn erp_response(
    state: &AppState,
    principal: &Principal,
    month: Month,
) -> Result<Response, ApiError> {
    require(principal, &[Role::Admin, Role::Finance])?;
    let csv = exports::erp(&state.pool, month, &state.config.exports).await?;
    Ok(csv_response("erp-journal", month, Body::from(csv)))
}
