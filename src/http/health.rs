//! Liveness, readiness and Prometheus metrics: the endpoints that need no token.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use chrono::Utc;
use std::time::Instant;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, ErrorBody};
use super::state::{AppState, GAUGES_MAX_AGE};
use crate::db;
use crate::reports::gauges;
use crate::reports::service as reports;
use crate::units::kept as units;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "alive", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok\n"
}

/// The server can reach its database and take requests.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "ready", body = String, content_type = "text/plain"),
        (status = 503, description = "the database is unreachable", body = ErrorBody)))]
async fn readyz(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    db::ping(&state.pool).await?;
    Ok("ready\n")
}

/// Prometheus metrics in the text exposition format, each node's ingest lag among them; with
/// `serve --metrics-billing`, also the month's billing figures so far (each team's cost and
/// GPU-equivalent hours, the fleet's allocation and busy ratios and unallocated cost) and, with
/// `--units-prometheus-url`, each unit's cost per team and model this month so far.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "metrics", body = String, content_type = "text/plain")))]
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut text = state.metrics.render();
    text.push_str(&fleet_gauges(&state).await);
    // Each unit's cost, as kept: a scrape never waits on the units' Prometheus. A billing figure,
    // so only where the billing gauges are shown.
    if state.config.metrics_billing
        && let Some(source) = &state.config.units_prometheus
        && let Some(kept) = state.unit_costs.get(&state.pool, &state.reports, source)
    {
        text.push_str(&units::render(&kept));
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
}

/// The fleet's gauges (`reports::gauges`), read anew once they are older than
/// [`GAUGES_MAX_AGE`]; left out, with a warning in the log, when the database cannot give them.
async fn fleet_gauges(state: &AppState) -> String {
    let mut kept = state.gauges.lock().await;
    if let Some((at, text)) = kept.as_ref()
        && at.elapsed() < GAUGES_MAX_AGE
    {
        return text.clone();
    }
    let billing = state.config.metrics_billing;
    match reports::fleet_gauges(&state.pool, &state.reports, Utc::now(), billing).await {
        Ok(g) => {
            let text = gauges::render(&g);
            *kept = Some((Instant::now(), text.clone()));
            text
        }
        Err(e) => {
            tracing::warn!(error = %e, "The fleet's gauges could not be read; /metrics goes without them.");
            String::new()
        }
    }
}
