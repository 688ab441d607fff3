//! Invoices: draft runs, issue, credit notes, JSON and CSV.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody, ErrorCode};
use super::state::AppState;
use super::teams::ApiJson;
use crate::billing::invoice::{self, Invoice, InvoiceError, store as repo};
use crate::billing::rate_card::RateCardConflict;
use crate::billing::service::{self as billing, RunSummary};
use crate::domain::access::Actor;
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use chrono::Utc;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(run_invoices))
        .routes(routes!(issue_period))
        .routes(routes!(list_invoices))
        .routes(routes!(get_invoice))
        .routes(routes!(issue_invoice))
        .routes(routes!(credit_invoice))
}

impl From<billing::Error> for ApiError {
    fn from(e: billing::Error) -> Self {
        match e {
            billing::Error::Billing(e) => ApiError::conflict(ErrorCode::CannotBill, &e),
            billing::Error::Invoice(e @ InvoiceError::NotFound(_)) => {
                ApiError::not_found(e.to_string())
            }
            billing::Error::RateCard(e @ RateCardConflict::NotFound(_)) => {
                ApiError::not_found(e.to_string())
            }
            billing::Error::RateCard(e) => ApiError::conflict(ErrorCode::RateCardConflict, &e),
            billing::Error::Db(e) => e.into(),
            e @ (billing::Error::Invoice(_)
            | billing::Error::NoDrafts(_)
            | billing::Error::NoBooks(_)
            | billing::Error::StaleCorrections { .. }) => {
                ApiError::conflict(ErrorCode::InvoiceState, &e)
            }
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RunRequest {
    pub period: Month,
}

/// Makes or remakes the drafts of a period that has ended, for every team with usage (never
/// `unattributed`), with correction lines for earlier issued periods that changed since. A team's
/// draft keeps its id from run to run; issued invoices are left as they are. While none of the
/// period's invoices is issued, the run takes the period's books from the rollups as they are now.
#[utoipa::path(post, path = "/v1/invoices/runs", tag = "billing",
    request_body = RunRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the drafts", body = RunSummary),
        (status = 400, description = "not a period", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs finance or admin", body = ErrorBody),
        (status = 409, description = "the month has not ended, or hours without a rate card", body = ErrorBody)))]
async fn run_invoices(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<RunRequest>,
) -> Result<Json<RunSummary>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let summary =
        billing::run_drafts(&state.pool, body.period, Utc::now(), &Actor::of(&principal)).await?;
    tracing::info!(period = %body.period, drafts = summary.drafts.len(), by = principal.token_id(), "An invoice run made drafts.");
    Ok(Json(summary))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListParams {
    /// `YYYY-MM`.
    #[param(pattern = r"^\d{4}-(0[1-9]|1[0-2])$")]
    period: Option<String>,
    /// A team id (a team lead may name only their own).
    #[param(pattern = r"^[a-z0-9][a-z0-9_-]{0,62}$")]
    team: Option<String>,
}

/// Invoices and credit notes, without lines. A team lead sees only their team's.
#[utoipa::path(get, path = "/v1/invoices", tag = "billing",
    params(ListParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "by period, team and id", body = Vec<Invoice>),
        (status = 400, description = "bad parameters", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "another team's invoices, or a collector", body = ErrorBody)))]
async fn list_invoices(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<Invoice>>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let Query(p) = params?;
    let mut errors = Vec::new();
    let period = p
        .period
        .as_deref()
        .map(str::parse::<Month>)
        .transpose()
        .map_err(|e| errors.push(FieldError::new("period", e)))
        .ok()
        .flatten();
    let team = p
        .team
        .as_deref()
        .map(TeamId::parse)
        .transpose()
        .map_err(|e| errors.push(FieldError::new("team", e.to_string())))
        .ok()
        .flatten();
    if !errors.is_empty() {
        return Err(ApiError::invalid_fields(
            "the parameters are invalid",
            errors,
        ));
    }
    let team = match (principal.team_scope(), team) {
        (Some(own), Some(asked)) if own != &asked => {
            return Err(ApiError::forbidden(
                "a team lead sees only their own team's invoices",
            ));
        }
        (Some(own), _) => Some(own.clone()),
        (None, asked) => asked,
    };
    Ok(Json(repo::list(&state.pool, period, team.as_ref()).await?))
}

/// One invoice with its lines, as JSON, or as CSV when the id ends in `.csv`
/// (`/v1/invoices/12.csv`). A team lead gets 404 for another team's invoice.
#[utoipa::path(get, path = "/v1/invoices/{id}", tag = "billing",
    params(("id" = String, Path, description = "the invoice id, e.g. `12`; `12.csv` for CSV")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the invoice", content(
            (Invoice = "application/json"),
            (String = "text/csv"))),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token", body = ErrorBody),
        (status = 404, description = "no such invoice (or another team's)", body = ErrorBody)))]
async fn get_invoice(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    invoice_response(&state, &principal, &id).await
}

/// Invoice `raw` with its lines, if `principal` may see it (a team lead: their team's; another
/// team's is not found).
pub(crate) async fn visible_invoice(
    state: &AppState,
    principal: &Principal,
    raw: &str,
) -> Result<Invoice, ApiError> {
    require(principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let id = invoice_id(raw)?;
    repo::get(&state.pool, id)
        .await?
        .filter(|i| principal.team_scope().is_none_or(|t| *t == i.team))
        .ok_or_else(|| ApiError::not_found(format!("there is no invoice {id}")))
}

/// An invoice as JSON, or as CSV for an id ending in `.csv`; the dashboard serves the same.
pub(crate) async fn invoice_response(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<Response, ApiError> {
    let (raw, csv) = match id.strip_suffix(".csv") {
        Some(raw) => (raw, true),
        None => (id, false),
    };
    let invoice = visible_invoice(state, principal, raw).await?;
    if !csv {
        return Ok(Json(invoice).into_response());
    }
    let body = invoice::to_csv(&invoice).map_err(ApiError::internal)?;
    let name = format!(
        "slicemeter-invoice-{}-{}-{}.csv",
        invoice
            .number
            .clone()
            .unwrap_or_else(|| format!("draft-{}", invoice.id)),
        invoice.team,
        invoice.period
    );
    Ok((
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
        .into_response())
}

/// Issues every draft of a period in one transaction (all or none), numbered in team order, once the
/// period's grace for late data has passed; its books are frozen from then on.
#[utoipa::path(post, path = "/v1/invoices/issue", tag = "billing",
    request_body = RunRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the invoices issued", body = Vec<Invoice>),
        (status = 400, description = "not a period", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs finance or admin", body = ErrorBody),
        (status = 409, description = "too early (the grace period says when), no drafts, or drafts out of date", body = ErrorBody)))]
async fn issue_period(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<RunRequest>,
) -> Result<Json<Vec<Invoice>>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let issued = billing::issue_period(
        &state.pool,
        body.period,
        Utc::now(),
        &state.config.billing,
        &Actor::of(&principal),
    )
    .await?;
    tracing::info!(period = %body.period, invoices = issued.len(), by = principal.token_id(), "A period's invoices were issued.");
    Ok(Json(issued))
}

/// Issues a draft: the next gap-free number of the year, and frozen from then on, once its
/// period's grace for late data has passed.
#[utoipa::path(post, path = "/v1/invoices/{id}/issue", tag = "billing",
    params(("id" = i64, Path, description = "the invoice id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "issued", body = Invoice),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs finance or admin", body = ErrorBody),
        (status = 404, description = "no such invoice", body = ErrorBody),
        (status = 409, description = "not a draft, too early (the grace period says when), or out of date", body = ErrorBody)))]
async fn issue_invoice(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Invoice>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let id = invoice_id(&id)?;
    let invoice = billing::issue(
        &state.pool,
        id,
        Utc::now(),
        &state.config.billing,
        &Actor::of(&principal),
    )
    .await?;
    tracing::info!(id, number = ?invoice.number, by = principal.token_id(), "An invoice was issued.");
    Ok(Json(invoice))
}

/// An invoice id from a path: anything that is not one names no invoice.
fn invoice_id(raw: &str) -> Result<i64, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::not_found(format!("there is no invoice {raw}")))
}

/// Voids an issued invoice by issuing a credit note that reverses it; returns the credit note.
#[utoipa::path(post, path = "/v1/invoices/{id}/credit", tag = "billing",
    params(("id" = i64, Path, description = "the issued invoice to void")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the credit note, issued", body = Invoice),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs finance or admin", body = ErrorBody),
        (status = 404, description = "no such invoice", body = ErrorBody),
        (status = 409, description = "not an issued invoice", body = ErrorBody)))]
async fn credit_invoice(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Invoice>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let id = invoice_id(&id)?;
    let note = billing::credit(&state.pool, id, &Actor::of(&principal)).await?;
    tracing::info!(id, credit_note = ?note.number, by = principal.token_id(), "An invoice was voided by a credit note.");
    Ok(Json(note))
}
