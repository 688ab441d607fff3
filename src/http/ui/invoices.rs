//! The dashboard's invoice forms (finance, admin): make a month's drafts, issue one draft or all of
//! a month's after a confirmation page (issued invoices never change), and download one as CSV. They
//! call the same billing service as the API, and say what they did in the page's own words.

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::html;
use rust_decimal::Decimal;
use serde::Deserialize;

use super::format::money;
use super::layout::{MonthQuery, UiError, Viewer, latest_currency, page, same_origin};
use crate::billing::invoice::{Invoice, InvoiceStatus, store as invoices};
use crate::billing::rate_card::{Currency, store as rate_cards};
use crate::billing::service as billing;
use crate::domain::access::{Actor, Principal};
use crate::domain::time::Month;
use crate::http::error::ApiError;
use crate::http::invoices as api;
use crate::http::state::AppState;

#[derive(Deserialize)]
pub struct MonthForm {
    month: String,
}

pub async fn run_invoices(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    headers: HeaderMap,
    Form(form): Form<MonthForm>,
) -> Result<Response, UiError> {
    same_origin(&headers)?;
    require_finance(&viewer, "make invoices")?;
    let month = month_of_form(&form.month)?;
    billing::run_drafts(&state.pool, month, Utc::now(), &Actor::of(&viewer))
        .await
        .map_err(refused)?;
    Ok(Redirect::to(&format!("/ui/fleet?month={month}&done=drafted")).into_response())
}

fn require_finance(viewer: &Principal, what: &str) -> Result<(), UiError> {
    if matches!(viewer, Principal::Admin { .. } | Principal::Finance { .. }) {
        Ok(())
    } else {
        Err(UiError::Forbidden(format!(
            "Only finance and admins {what}."
        )))
    }
}

fn month_of_form(raw: &str) -> Result<Month, UiError> {
    raw.parse()
        .map_err(|e: String| UiError::Api(ApiError::bad_request(e)))
}

/// A form the server would not carry out: the page says why, in the server's words.
fn refused(e: billing::Error) -> UiError {
    let e = ApiError::from(e);
    match e.code.status() {
        StatusCode::CONFLICT => UiError::Refused(e.message),
        StatusCode::NOT_FOUND => UiError::NotFound,
        _ => UiError::Api(e),
    }
}

/// The confirmation before one invoice is issued: it cannot be changed afterwards.
pub async fn confirm_issue_invoice(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Path(id): Path<i64>,
) -> Result<Response, UiError> {
    require_finance(&viewer, "issue invoices")?;
    let invoice = invoices::get(&state.pool, id)
        .await?
        .filter(|i| i.status == InvoiceStatus::Draft)
        .ok_or(UiError::NotFound)?;
    // The invoice's own currency (a stored one was a rate card's, so it parses; if not, a 500 page).
    let currency =
        Currency::parse(&invoice.currency).map_err(|e| UiError::Api(ApiError::internal(e)))?;
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let body = html! {
        h1 { "Issue the invoice of " (invoice.team) " for " (invoice.period) "?" }
        p {
            "Its total is " strong data-field="total" { (m(invoice.total)) } " over " (invoice.lines.len()) " lines. "
            "Issuing gives it the next number of the year and freezes it, and the books of " (invoice.period)
            " with it: it can only be voided by a credit note, and data that arrives later is billed as corrections on a later invoice."
        }
        form method="post" action=(format!("/ui/invoices/{id}/issue")) class="inline" {
            input type="hidden" name="month" value=(invoice.period.to_string());
            button type="submit" { "Issue invoice" }
        }
        " "
        a href=(format!("/ui/fleet?month={}", invoice.period)) { "Cancel" }
    };
    Ok(page("Issue an invoice", Some(&viewer), body).into_response())
}

pub async fn issue_invoice(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    headers: HeaderMap,
    Path(id): Path<i64>,
    Form(form): Form<MonthForm>,
) -> Result<Response, UiError> {
    same_origin(&headers)?;
    require_finance(&viewer, "issue invoices")?;
    let month = month_of_form(&form.month)?;
    billing::issue(
        &state.pool,
        id,
        Utc::now(),
        &state.config.billing,
        &Actor::of(&viewer),
    )
    .await
    .map_err(refused)?;
    Ok(Redirect::to(&format!("/ui/fleet?month={month}&done=issued&invoice={id}")).into_response())
}

/// The confirmation before every draft of a month is issued.
pub async fn confirm_issue_period(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Query(q): Query<MonthQuery>,
) -> Result<Response, UiError> {
    require_finance(&viewer, "issue invoices")?;
    let month = q.month()?;
    let drafts: Vec<Invoice> = invoices::list(&state.pool, Some(month), None)
        .await?
        .into_iter()
        .filter(|i| i.status == InvoiceStatus::Draft)
        .collect();
    let currency = latest_currency(&rate_cards::rate_cards(&state.pool).await?);
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let total: Decimal = drafts.iter().map(|i| i.total).sum();
    let body = html! {
        h1 { "Issue every draft of " (month) "?" }
        @if drafts.is_empty() {
            p class="empty" { "There are no drafts for " (month) "." }
        } @else {
            p {
                (drafts.len()) " invoices, " strong data-field="total" { (m(total)) } " in all, are issued together (all or none), "
                "numbered in team order. They cannot be changed afterwards, and the books of " (month) " are frozen: "
                "data that arrives later is billed as corrections on a later invoice."
            }
            div class="scroll" {
                table {
                    caption { "The drafts to issue" }
                    thead { tr { th scope="col" { "Team" } th scope="col" class="num" { "Total" } } }
                    tbody {
                        @for i in &drafts {
                            tr data-invoice=(i.id) { td { (i.team) } td class="num" { (m(i.total)) } }
                        }
                    }
                }
            }
            form method="post" action="/ui/invoices/issue" class="inline" {
                input type="hidden" name="month" value=(month.to_string());
                button type="submit" { "Issue all " (drafts.len()) " invoices" }
            }
            " "
        }
        a href=(format!("/ui/fleet?month={month}")) { "Cancel" }
    };
    Ok(page("Issue a month's invoices", Some(&viewer), body).into_response())
}

pub async fn issue_period(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    headers: HeaderMap,
    Form(form): Form<MonthForm>,
) -> Result<Response, UiError> {
    same_origin(&headers)?;
    require_finance(&viewer, "issue invoices")?;
    let month = month_of_form(&form.month)?;
    billing::issue_period(
        &state.pool,
        month,
        Utc::now(),
        &state.config.billing,
        &Actor::of(&viewer),
    )
    .await
    .map_err(refused)?;
    Ok(Redirect::to(&format!("/ui/fleet?month={month}&done=issued_all")).into_response())
}

pub async fn invoice_csv(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    if !id.ends_with(".csv") {
        return Err(UiError::NotFound);
    }
    api::invoice_response(&state, &viewer, &id)
        .await
        .map_err(|e| match e.code.status() {
            StatusCode::NOT_FOUND => UiError::NotFound,
            _ => UiError::Api(e),
        })
}
