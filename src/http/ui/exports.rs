//! The dashboard's export links: a month's FOCUS rows or ERP journal, as the API streams them to the
//! same token, and a card's ledger of a month (CSV, by day), as the API answers it.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::Deserialize;

use super::layout::{UiError, Viewer};
use crate::domain::time::Month;
use crate::exports::focus::Version;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::http::{exports, ledger};

#[derive(Deserialize)]
pub struct PeriodQuery {
    period: String,
}

impl PeriodQuery {
    fn month(&self) -> Result<Month, UiError> {
        self.period
            .parse()
            .map_err(|e: String| UiError::Api(ApiError::bad_request(e)))
    }
}

pub async fn focus_export(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Query(q): Query<PeriodQuery>,
) -> Result<Response, UiError> {
    let month = q.month()?;
    Ok(exports::focus_response(&state, &viewer, month, Version::default()).await?)
}

pub async fn erp_export(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Query(q): Query<PeriodQuery>,
) -> Result<Response, UiError> {
    let month = q.month()?;
    Ok(exports::erp_response(&state, &viewer, month).await?)
}

#[derive(Deserialize)]
pub struct MonthQuery {
    month: String,
}

/// `/ui/gpus/{uuid}/ledger?month=YYYY-MM`: the fleet page's GPU map links each card here.
pub async fn gpu_ledger(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Path(uuid): Path<String>,
    Query(q): Query<MonthQuery>,
) -> Result<Response, UiError> {
    let month: Month = q
        .month
        .parse()
        .map_err(|e: String| UiError::Api(ApiError::bad_request(e)))?;
    Ok(ledger::respond(
        &state,
        &viewer,
        &uuid,
        month.start(),
        month.end(),
        crate::reports::usage::Step::Day,
        true,
    )
    .await?)
}
