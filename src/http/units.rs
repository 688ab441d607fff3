//! `/v1/unit-definitions` (admin) and `GET /v1/reports/unit-cost`: what a unit of work (a million
//! tokens, an inference) cost, per team, model or workload.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody, ErrorCode};
use super::reports::instant;
use super::state::AppState;
use super::teams::ApiJson;
use crate::domain::access::{Actor, Principal, Role};
use crate::domain::fields::FieldError;
use crate::units::cost::{self, UnitCostReport, UnitGroupBy};
use crate::units::service::{self, UnitCostError};
use crate::units::{UnitDefinitionInput, UnitDefinitionView, check_name, store};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_units))
        .routes(routes!(get_unit, put_unit, delete_unit))
        .routes(routes!(unit_cost))
}

impl From<UnitCostError> for ApiError {
    fn from(e: UnitCostError) -> Self {
        match e {
            UnitCostError::Books(e) => e.into(),
            UnitCostError::Prometheus(e) => {
                tracing::warn!(error = %e, "The units' Prometheus did not answer.");
                ApiError::new(ErrorCode::UnitsUnavailable, e.to_string())
            }
            UnitCostError::Client(e) => ApiError::new(ErrorCode::UnitsUnavailable, e),
        }
    }
}

fn unknown(name: &str) -> ApiError {
    ApiError::not_found(format!(
        "there is no unit definition {name:?}; an admin defines it with PUT /v1/unit-definitions/{{name}}"
    ))
}

/// Every unit definition, by name (admin).
#[utoipa::path(get, path = "/v1/unit-definitions", tag = "reports",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the definitions", body = Vec<UnitDefinitionView>),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin", body = ErrorBody)))]
async fn list_units(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Vec<UnitDefinitionView>>, ApiError> {
    require(&principal, &[Role::Admin])?;
    Ok(Json(store::list(&state.pool).await?))
}

/// One unit definition (admin).
#[utoipa::path(get, path = "/v1/unit-definitions/{name}", tag = "reports",
    params(("name" = String, Path, description = "the unit's name", example = "generated_tokens")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the definition", body = UnitDefinitionView),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin", body = ErrorBody),
        (status = 404, description = "no such unit", body = ErrorBody)))]
async fn get_unit(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> Result<Json<UnitDefinitionView>, ApiError> {
    require(&principal, &[Role::Admin])?;
    store::get(&state.pool, &name)
        .await?
        .map(Json)
        .ok_or_else(|| unknown(&name))
}

/// Defines a unit, or replaces its definition (admin): a PromQL counter expression (at most 2000
/// characters, no range or subquery over 31 days, checked before it is stored and sent only to the
/// configured Prometheus), the label naming the model, and the labels joining a series to the
/// slices' holders (namespace and pod, or namespace and workload). Audited as `unit.put`.
#[utoipa::path(put, path = "/v1/unit-definitions/{name}", tag = "reports",
    params(("name" = String, Path, description = "the unit's name", example = "generated_tokens")),
    request_body = UnitDefinitionInput,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "replaced", body = UnitDefinitionView),
        (status = 201, description = "defined", body = UnitDefinitionView),
        (status = 400, description = "invalid fields, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin", body = ErrorBody)))]
async fn put_unit(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
    ApiJson(input): ApiJson<UnitDefinitionInput>,
) -> Result<(StatusCode, Json<UnitDefinitionView>), ApiError> {
    require(&principal, &[Role::Admin])?;
    let def = input
        .validate(&name)
        .map_err(|fields| ApiError::invalid_fields("the unit definition is invalid", fields))?;
    let replaced = store::put(&state.pool, &def, &Actor::of(&principal)).await?;
    state.unit_costs.invalidate();
    tracing::info!(unit = %def.name, replaced, by = principal.token_id(), "A unit definition was put.");
    let view = store::get(&state.pool, &name)
        .await?
        .ok_or_else(|| unknown(&name))?;
    let status = if replaced {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(view)))
}

/// Deletes a unit definition (admin); audited as `unit.delete`.
#[utoipa::path(delete, path = "/v1/unit-definitions/{name}", tag = "reports",
    params(("name" = String, Path, description = "the unit's name", example = "generated_tokens")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "deleted"),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin", body = ErrorBody),
        (status = 404, description = "no such unit", body = ErrorBody)))]
async fn delete_unit(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    require(&principal, &[Role::Admin])?;
    if store::delete(&state.pool, &name, &Actor::of(&principal)).await? {
        state.unit_costs.invalidate();
        tracing::info!(unit = %name, by = principal.token_id(), "A unit definition was deleted.");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(unknown(&name))
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct UnitCostParams {
    /// Start of the range (inclusive): an RFC 3339 instant on an hour boundary, or a date (UTC midnight).
    #[param(
        required = true,
        example = "2026-10-01",
        pattern = r"^\d{4}-\d{2}-\d{2}(T\d{2}:00:00(\.0+)?(Z|[+-]\d{2}:00))?$"
    )]
    from: Option<String>,
    /// End of the range (exclusive), like `from`; at most 31 days after it.
    #[param(
        required = true,
        example = "2026-11-01",
        pattern = r"^\d{4}-\d{2}-\d{2}(T\d{2}:00:00(\.0+)?(Z|[+-]\d{2}:00))?$"
    )]
    to: Option<String>,
    /// The unit definition's name.
    #[param(
        required = true,
        example = "generated_tokens",
        pattern = "^[a-z][a-z0-9_]{0,62}$"
    )]
    unit: Option<String>,
    /// `team`, `model` or `workload`, or several comma-separated (default `team,model`).
    #[param(
        example = "team,model",
        pattern = "^(team|model|workload)(,(team|model|workload)){0,2}$"
    )]
    group_by: Option<String>,
    /// `json` (default) or `csv`.
    #[param(pattern = "^(json|csv)$")]
    format: Option<String>,
}

/// Cost per unit of work: for each group, the cost of the slices that served the units in their
/// hours (the usage report's figures, priced as invoices are: issued months as issued, plus their
/// late data's corrections) over the units the definition's counters counted in the same hours (a
/// counter reset counted once), per `per_units` units, rounded once, half to even. Hours with cost
/// and no units, and units with no cost, are listed apart. A team lead sees only their team (and
/// units without cost only in their team's namespaces).
#[utoipa::path(get, path = "/v1/reports/unit-cost", tag = "reports",
    params(UnitCostParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the report (CSV with format=csv)", body = UnitCostReport,
            content((UnitCostReport = "application/json"), (String = "text/csv"))),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector or importer token", body = ErrorBody),
        (status = 404, description = "no such unit", body = ErrorBody),
        (status = 409, description = "this server reads no Prometheus for units (`units_not_configured`)", body = ErrorBody),
        (status = 502, description = "the units' Prometheus did not answer (`units_unavailable`; the message names the query)", body = ErrorBody)))]
async fn unit_cost(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<UnitCostParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let Query(p) = params?;
    let mut errors = Vec::new();
    let from = instant("from", p.from.as_deref(), &mut errors);
    let to = instant("to", p.to.as_deref(), &mut errors);
    if let (Some(from), Some(to)) = (from, to) {
        if to <= from {
            errors.push(FieldError::new("to", "to must be after from"));
        } else if to - from > chrono::Duration::days(31) {
            errors.push(FieldError::new(
                "to",
                "the range is longer than 31 days, the limit of a unit cost (its hours are joined one by one)",
            ));
        }
    }
    let unit = match p.unit.as_deref() {
        None => {
            errors.push(FieldError::new(
                "unit",
                "unit is required, e.g. generated_tokens",
            ));
            None
        }
        Some(u) => check_name(u)
            .map_err(|e| errors.push(FieldError::new("unit", e)))
            .ok()
            .map(|_| u.to_owned()),
    };
    let group_by = p
        .group_by
        .as_deref()
        .unwrap_or("team,model")
        .parse::<UnitGroupBy>()
        .map_err(|e| errors.push(FieldError::new("group_by", e)))
        .ok();
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
    let (Some(from), Some(to), Some(unit), Some(group_by), true) =
        (from, to, unit, group_by, errors.is_empty())
    else {
        return Err(ApiError::invalid_fields(
            "the unit cost's parameters are invalid",
            errors,
        ));
    };
    let def = store::get(&state.pool, &unit)
        .await?
        .ok_or_else(|| unknown(&unit))?
        .definition;
    let Some(source) = state.config.units_prometheus.as_ref() else {
        return Err(ApiError::new(
            ErrorCode::UnitsNotConfigured,
            "no Prometheus is configured for units: start the server with --units-prometheus-url",
        ));
    };
    let report = service::unit_cost(
        &state.pool,
        &state.reports,
        source,
        &def,
        from,
        to,
        &group_by,
        principal.team_scope(),
    )
    .await?;
    if !csv {
        return Ok(Json(report).into_response());
    }
    let body = cost::to_csv(&report).map_err(ApiError::internal)?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"slicemeter-unit-cost-{unit}-{}.csv\"",
                    from.format("%Y%m%dT%H")
                ),
            ),
        ],
        body,
    )
        .into_response())
}
