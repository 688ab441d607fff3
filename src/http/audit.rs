//! `GET /v1/audit`: who published rate cards, ran, issued and credited invoices, changed teams and
//! made or revoked tokens (admin, finance).

use axum::Json;
use axum::extract::{Query, State};
use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use crate::audit::{
    AuditAction,
    store::{self as audit, AuditEntry},
};
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_audit))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct AuditParams {
    /// Start (inclusive), RFC 3339; default 30 days before `to`.
    #[param(format = DateTime)]
    from: Option<String>,
    /// End (exclusive), RFC 3339; default now.
    #[param(format = DateTime)]
    to: Option<String>,
    /// Only this action, e.g. `invoice.issue`.
    #[param(
        pattern = r"^(rate_card\.(publish|withdraw)|gpu\.move|invoice\.(run|issue|credit)|team\.put|token\.(create|revoke)|budget\.(create|update|delete)|unit\.(put|delete))$"
    )]
    action: Option<String>,
    /// At most this many entries, newest first (1 to 1000, default 100).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 1000)]
    limit: Option<String>,
}

fn instant(field: &str, v: &str, errors: &mut Vec<FieldError>) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            errors.push(FieldError::new(
                field,
                format!("{v:?} is not an RFC 3339 instant"),
            ))
        })
        .ok()
}

/// The audit log, newest first.
#[utoipa::path(get, path = "/v1/audit", tag = "operations",
    params(AuditParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "entries, newest first", body = Vec<AuditEntry>),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody)))]
async fn list_audit(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<AuditParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let Query(p) = params?;
    let mut errors = Vec::new();
    let to =
        p.to.as_deref()
            .map_or(Some(Utc::now()), |v| instant("to", v, &mut errors));
    let from = p.from.as_deref().map_or_else(
        || to.map(|t| t - Duration::days(30)),
        |v| instant("from", v, &mut errors),
    );
    let action = match p.action.as_deref().map(|a| (a, a.parse::<AuditAction>())) {
        None => None,
        Some((_, Ok(a))) => Some(a),
        Some((a, Err(()))) => {
            let all: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
            errors.push(FieldError::new(
                "action",
                format!("{a:?} is not one of {}", all.join(", ")),
            ));
            None
        }
    };
    let limit = match p.limit.as_deref().map(str::parse::<i64>) {
        None => Some(100),
        Some(Ok(n)) if (1..=1000).contains(&n) => Some(n),
        Some(_) => {
            errors.push(FieldError::new("limit", "limit is a number from 1 to 1000"));
            None
        }
    };
    let (Some(from), Some(to), Some(limit), true) = (from, to, limit, errors.is_empty()) else {
        return Err(ApiError::invalid_fields(
            "the parameters are invalid",
            errors,
        ));
    };
    Ok(Json(
        audit::list(&state.pool, from, to, action, limit).await?,
    ))
}
