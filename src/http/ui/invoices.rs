//! The dashboard's invoice forms (finance, admin): make a month's drafts, issue one draft or all of
//! a month's after a confirmation page (issued invoices never change), read one as a page (its lines
//! with their provenance, corrections and credits) or download it as CSV. They
//! call the same billing service as the API, and say what they did in the page's own words.

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::{Markup, html};
use rust_decimal::Decimal;
use serde::Deserialize;

use super::format::{money, number};
use super::layout::{MonthQuery, UiError, Viewer, latest_currency, page, same_origin};
use crate::billing::invoice::{Invoice, InvoiceKind, InvoiceLine, InvoiceStatus};
use crate::billing::period::LineKind;
use crate::billing::rate_card::{Currency, PriceSource};
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
    let invoice = billing::invoice(&state.pool, id)
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
    let drafts: Vec<Invoice> = billing::invoices(&state.pool, Some(month), None)
        .await?
        .into_iter()
        .filter(|i| i.status == InvoiceStatus::Draft)
        .collect();
    let currency = latest_currency(&billing::rate_cards(&state.pool).await?);
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

/// `/ui/invoices/{id}`: the invoice as a page, its lines with their provenance; `{id}.csv`: as CSV.
/// Another team's is not found for a team lead, either way.
pub async fn invoice(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let not_found = |e: ApiError| match e.code.status() {
        StatusCode::NOT_FOUND => UiError::NotFound,
        _ => UiError::Api(e),
    };
    if id.ends_with(".csv") {
        return api::invoice_response(&state, &viewer, &id)
            .await
            .map_err(not_found);
    }
    let invoice = api::visible_invoice(&state, &viewer, &id)
        .await
        .map_err(not_found)?;
    Ok(page(&title_of(&invoice), Some(&viewer), invoice_page(&invoice)?).into_response())
}

fn title_of(i: &Invoice) -> String {
    let what = match i.kind {
        InvoiceKind::CreditNote => "Credit note",
        InvoiceKind::Invoice => "Invoice",
    };
    match &i.number {
        Some(n) => format!("{what} {n}"),
        None => format!("Draft {} {}", what.to_lowercase(), i.id),
    }
}

/// What a line's columns do not say: a line of no slice (the idle spread) is its description; a
/// model off the price list is priced at the rate card's default.
fn note(l: &InvoiceLine) -> String {
    if l.gpu_model.is_none() {
        l.description.clone()
    } else if l.price_source == Some(PriceSource::Default) {
        "model not on the price list: default rate".into()
    } else {
        String::new()
    }
}

fn invoice_page(i: &Invoice) -> Result<Markup, UiError> {
    let currency = Currency::parse(&i.currency).map_err(|e| UiError::Api(ApiError::internal(e)))?;
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let sections = [
        (
            "Usage",
            "What the team's slices blocked, priced by the rate card version in force.",
            vec![LineKind::Usage, LineKind::IdleSpread],
        ),
        (
            "Corrections",
            "Differences found after an earlier month was issued (late data, re-attribution), billed here once.",
            vec![LineKind::Correction],
        ),
        (
            "Credits",
            "The reversal of an issued invoice's lines.",
            vec![LineKind::Credit],
        ),
    ];
    Ok(html! {
        h1 { (title_of(i)) }
        dl class="facts" {
            dt { "Team" } dd data-field="team" { a href=(format!("/ui/team/{}?month={}", i.team, i.period)) { (i.team) } }
            dt { "Period" } dd data-field="period" { (i.period) }
            dt { "Status" } dd data-field="status" { (i.status) }
            @if let Some(at) = i.issued_at { dt { "Issued" } dd { (at.format("%Y-%m-%d %H:%M UTC")) } }
            @if let Some(c) = i.credits { dt { "Voids" } dd { a href=(format!("/ui/invoices/{c}")) { "invoice " (c) } } }
            @if let Some(c) = i.credited_by { dt { "Voided by" } dd { a href=(format!("/ui/invoices/{c}")) { "credit note " (c) } } }
            dt { "Total" } dd data-field="total" { strong { (m(i.total)) } }
        }
        p {
            a href=(format!("/ui/invoices/{}.csv", i.id)) download { "Download this invoice (CSV)" }
            @if i.status == InvoiceStatus::Draft {
                " · A draft changes with every run of its month's drafts until it is issued."
            }
        }
        @for (heading, about, kinds) in &sections {
            @let lines: Vec<_> = i.lines.iter().filter(|l| kinds.contains(&l.line_kind)).collect();
            // Correction lines say which issued month they correct.
            @let corrects = kinds.contains(&LineKind::Correction);
            @if !lines.is_empty() {
                section data-section=(heading.to_lowercase()) {
                    h2 { (heading) }
                    p { (about) }
                    div class="scroll" {
                        table data-table="lines" {
                            caption { (heading) " lines" }
                            thead { tr {
                                th scope="col" class="num" { "#" }
                                @if corrects { th scope="col" { "Corrects" } }
                                th scope="col" { "GPU model" }
                                th scope="col" { "Kind" }
                                th scope="col" { "Profile" }
                                th scope="col" class="num" { "Rate card" }
                                th scope="col" class="num" { "Slice-hours" }
                                th scope="col" class="num" { "GPU-eq. hours" }
                                th scope="col" class="num" { "Unit price" }
                                th scope="col" class="num" { "Amount" }
                                th scope="col" { "Note" }
                            } }
                            tbody {
                                @for l in &lines {
                                    tr data-line=(l.line_no) {
                                        td class="num" { (l.line_no) }
                                        @if corrects { td { (l.corrects_period.map(|p| p.to_string()).unwrap_or_default()) } }
                                        td { (l.gpu_model.as_deref().unwrap_or("")) }
                                        td { (l.slice_kind.map(|k| k.as_str()).unwrap_or("")) }
                                        td { (l.profile.as_deref().unwrap_or("")) }
                                        td class="num" data-field="rate-card" { (l.rate_card.map(|v| format!("v{v}")).unwrap_or_default()) }
                                        td class="num" { (number(l.slice_hours, 2)) }
                                        td class="num" { (number(l.gpu_equivalent_hours, 4)) }
                                        td class="num" { (l.unit_price.map(&m).unwrap_or_default()) }
                                        td class="num" data-field="amount" { (m(l.amount)) }
                                        td { (note(l)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if i.lines.is_empty() { p class="empty" { "This invoice has no lines." } }
    })
}
