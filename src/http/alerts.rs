//! `GET /v1/alerts` (issue 15): the alerts the worker fired (`alerts`), newest first, each with its
//! deliveries' state: delivered, pending with its next attempt and last error, or failed.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{require, team_in_scope};
use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use crate::alerts::{self, AlertKind, DeliveryState};
use crate::budgets::ChannelView;
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::team::TeamId;

/// The most alerts one answer holds.
const MAX_LIMIT: i64 = 500;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_alerts))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct AlertParams {
    /// Only this team's (a team lead: their own, the default).
    #[param(example = "nlp", pattern = "^[a-z0-9][a-z0-9_-]{0,62}$")]
    team: Option<String>,
    /// At most this many, 1 to 500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
}

/// An alert fired, once for its budget, period, kind and key.
#[derive(Debug, Serialize, ToSchema)]
pub struct Alert {
    pub id: i64,
    /// `null` once its budget is deleted.
    pub budget_id: Option<i64>,
    #[schema(value_type = String)]
    pub team: TeamId,
    /// The month it is about, `YYYY-MM`.
    #[schema(example = "2026-12")]
    pub period: String,
    /// `actual`, `forecast`, `idle` or `spend_change`.
    #[schema(value_type = String, example = "forecast")]
    pub kind: AlertKind,
    /// What makes it one of its kind in the period: the threshold's percent, the idle slice
    /// (`gpu uuid/instance/workload`), the day.
    pub key: String,
    pub subject: String,
    /// The figures: amount, budget, currency, threshold, link, ...
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
    pub fired_at: DateTime<Utc>,
    pub deliveries: Vec<Delivery>,
}

/// An alert's delivery to one channel.
#[derive(Debug, Serialize, ToSchema)]
pub struct Delivery {
    pub id: i64,
    pub channel: ChannelView,
    /// `pending` (to be sent, or retried at `next_attempt_at`), `delivered` or `failed` (given up).
    #[schema(value_type = String, example = "delivered")]
    pub state: DeliveryState,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
}

fn month_of(d: NaiveDate) -> String {
    d.format("%Y-%m").to_string()
}

/// The alerts fired, newest first, with each delivery's state; a team lead gets their team's.
#[utoipa::path(get, path = "/v1/alerts", tag = "billing",
    params(AlertParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the alerts", body = Vec<Alert>),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token, or another team's", body = ErrorBody)))]
async fn list_alerts(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<AlertParams>, QueryRejection>,
) -> Result<Json<Vec<Alert>>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let Query(params) = params?;
    let mut fields = Vec::new();
    let asked = match params.team.as_deref().map(TeamId::parse).transpose() {
        Ok(t) => t,
        Err(e) => {
            fields.push(FieldError::new("team", e.to_string()));
            None
        }
    };
    let limit = params.limit.unwrap_or(100);
    if !(1..=MAX_LIMIT).contains(&limit) {
        fields.push(FieldError::new(
            "limit",
            format!("{limit} is not from 1 to {MAX_LIMIT}"),
        ));
    }
    if !fields.is_empty() {
        return Err(ApiError::invalid_fields(
            "the parameters are invalid",
            fields,
        ));
    }
    let team = team_in_scope(&principal, asked, "alerts")?;
    let rows = alerts::list(&state.pool, team.as_ref(), limit).await?;
    Ok(Json(
        rows.into_iter()
            .map(|(a, deliveries)| Alert {
                id: a.alert_id,
                budget_id: a.budget_id,
                team: a.team_id,
                period: month_of(a.period),
                kind: a.kind,
                key: a.key,
                subject: a.subject,
                details: a.details.0,
                fired_at: a.fired_at,
                deliveries: deliveries
                    .into_iter()
                    .map(|d| Delivery {
                        id: d.delivery_id,
                        channel: d.channel.0.redacted(),
                        state: d.state,
                        attempts: d.attempts,
                        next_attempt_at: d.next_attempt_at,
                        last_error: d.last_error,
                        delivered_at: d.delivered_at,
                    })
                    .collect(),
            })
            .collect(),
    ))
}
