//! What every dashboard page shares: the page frame, the signed-in viewer, failures shown as pages,
//! the month a page shows, and the small pieces the fleet and team pages both draw.

use std::collections::BTreeMap;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::{DOCTYPE, Markup, html};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::format::money;
use crate::auth::service as tokens;
use crate::billing::invoice::{Invoice, InvoiceKind, InvoiceStatus};
use crate::billing::period::PeriodState;
use crate::billing::rate_card::{Currency, RateCard};
use crate::billing::service as billing;
use crate::domain::access::Principal;
use crate::domain::time::Month;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::reports::monthly::MonthlyReport;

pub const COOKIE: &str = "slicemeter_session";
/// How long a dashboard session lasts, whatever happens in the browser.
pub const SESSION_HOURS: i64 = 8;

/// A page's failure, shown as a page.
pub enum UiError {
    /// No session: go and sign in.
    SignIn,
    Forbidden(String),
    NotFound,
    /// A form the server would not carry out, and why (the server's own words).
    Refused(String),
    /// A link with a parameter the page cannot take: the parameter and why, shown with 400.
    Invalid(String),
    Api(ApiError),
}

impl From<ApiError> for UiError {
    fn from(e: ApiError) -> Self {
        UiError::Api(e)
    }
}

impl From<sqlx::Error> for UiError {
    fn from(e: sqlx::Error) -> Self {
        UiError::Api(e.into())
    }
}

impl From<billing::Error> for UiError {
    fn from(e: billing::Error) -> Self {
        UiError::Api(e.into())
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let (status, heading, text) = match self {
            UiError::SignIn => return Redirect::to("/ui/signin").into_response(),
            UiError::Forbidden(why) => (StatusCode::FORBIDDEN, "Not for this sign-in", why),
            UiError::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                "There is nothing here for this sign-in.".to_owned(),
            ),
            UiError::Refused(why) => (StatusCode::CONFLICT, "Not done", why),
            UiError::Invalid(why) => (
                StatusCode::BAD_REQUEST,
                "Not a page this link can show",
                why,
            ),
            UiError::Api(e) => {
                let response = e.into_response();
                let status = response.status();
                let text = if status.is_server_error() {
                    "Something went wrong; the server log has the details.".to_owned()
                } else {
                    format!("The request could not be done ({status}).")
                };
                (status, "Something is in the way", text)
            }
        };
        (
            status,
            page(heading, None, html! { h1 { (heading) } p class="error" { (text) } p { a href="/ui/" { "Back to the dashboard" } } }),
        )
            .into_response()
    }
}

/// The signed-in caller of a dashboard page.
pub struct Viewer(pub Principal);

pub fn session_secret(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
}

pub fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, UiError> {
        let secret = session_secret(&parts.headers).ok_or(UiError::SignIn)?;
        let principal = tokens::session(&state.pool, &hash(&secret), Utc::now())
            .await?
            .ok_or(UiError::SignIn)?;
        Ok(Viewer(principal))
    }
}

/// Refuses form posts from other origins (with SameSite=Strict cookies, a second lock on the door).
pub fn same_origin(headers: &HeaderMap) -> Result<(), UiError> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (
        headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()),
        host,
    ) {
        (Some(origin), Some(host)) if origin.split_once("://").map(|(_, h)| h) != Some(host) => {
            Err(UiError::Forbidden(
                "This form was sent from another site.".into(),
            ))
        }
        _ => Ok(()),
    }
}

/// The page frame: language, title, stylesheet, navigation for the viewer's role.
pub fn page(title: &str, viewer: Option<&Principal>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · slicemeter" }
                link rel="stylesheet" href="/ui/assets/app.css";
            }
            body {
                header class="top" {
                    a class="brand" href="/ui/" { "slicemeter" }
                    @if let Some(v) = viewer {
                        nav aria-label="Main" {
                            @match v {
                                Principal::TeamLead { team, .. } => {
                                    a href=(format!("/ui/team/{team}")) { "My team" }
                                }
                                Principal::Admin { .. } => {
                                    a href="/ui/fleet" { "Fleet" }
                                    a href="/ui/plan" { "Plan" }
                                    a href="/ui/tokens" { "Tokens" }
                                }
                                _ => {
                                    a href="/ui/fleet" { "Fleet" }
                                    a href="/ui/plan" { "Plan" }
                                }
                            }
                            a href="/docs/" { "API" }
                        }
                        form method="post" action="/ui/signout" {
                            button class="secondary" type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct MonthQuery {
    pub month: Option<String>,
    pub sort: Option<String>,
    pub dir: Option<String>,
    /// The team page's workload table: a page of its rows (1, 2, ...), or `all`.
    pub page: Option<String>,
    /// What a form just did (`drafted`, `issued`, `issued_all`): the page says it in its own words.
    pub done: Option<String>,
    /// The invoice a form acted on.
    pub invoice: Option<i64>,
    /// The fleet page's GPU map drilled down to one GPU model, or one node.
    pub model: Option<String>,
    pub node: Option<String>,
    /// The cost-over-time chart's range: a preset, or `from` and `to` months.
    pub range: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
}

impl MonthQuery {
    /// The month asked for; by default the last closed one, whose figures are whole (the current
    /// month is a click away, `month_form`).
    pub fn month(&self) -> Result<Month, UiError> {
        match self.month.as_deref().filter(|m| !m.is_empty()) {
            None => Ok(Month::of(Utc::now()).minus(1)),
            Some(m) => m
                .parse()
                .map_err(|e: String| UiError::Invalid(format!("month: {e}"))),
        }
    }
}

/// What the form the viewer just sent did, in the page's own words (never text from the link).
pub fn done_message(q: &MonthQuery, month: Month, invoices: &[Invoice]) -> Option<String> {
    match q.done.as_deref()? {
        "drafted" => {
            let n = invoices
                .iter()
                .filter(|i| i.status == InvoiceStatus::Draft)
                .count();
            Some(format!(
                "Drafts for {month} are made: {n} to review, then issue."
            ))
        }
        "issued" => {
            let i = invoices.iter().find(|i| Some(i.id) == q.invoice)?;
            Some(format!(
                "Issued {} for {}.",
                i.number.as_deref().unwrap_or("the invoice"),
                i.team
            ))
        }
        "issued_all" => Some(format!(
            "Every draft of {month} is issued; its books are frozen."
        )),
        _ => None,
    }
}

pub fn state_text(state: PeriodState) -> &'static str {
    match state {
        PeriodState::Open => "Open: the month has not ended, nothing can be drafted yet",
        PeriodState::Closed => "Closed: drafts may be made and made again",
        PeriodState::Issued => {
            "Issued: these figures are what was issued; later data waits as corrections"
        }
    }
}

/// Below this efficiency a slice is "held but idle" and highlighted.
pub const IDLE_EFFICIENCY: Decimal = Decimal::from_parts(2, 0, 0, false, 1);

pub fn f(d: Decimal) -> f64 {
    d.to_f64().unwrap_or(0.0)
}

pub fn month_form(action: &str, month: Month) -> Markup {
    html! {
        form method="get" action=(action) class="month" {
            label for="month" { "Month" }
            input id="month" name="month" type="month" value=(month.to_string());
            " "
            button type="submit" { "Show" }
            @let this = Month::of(Utc::now());
            @if month != this {
                " "
                a href=(format!("{action}?month={this}")) data-field="this-month" { "This month so far" }
            } @else {
                " "
                a href=(format!("{action}?month={}", this.minus(1))) data-field="last-month" { "Last month" }
            }
        }
    }
}

/// The currency a month's figures are in: the report's, else the latest rate card's.
pub fn currency_of(report: &MonthlyReport, cards: &BTreeMap<i64, RateCard>) -> Currency {
    report
        .currency
        .as_deref()
        .and_then(|c| Currency::parse(c).ok())
        .unwrap_or_else(|| latest_currency(cards))
}

/// The currency the latest rate card bills in (USD before there is any).
pub fn latest_currency(cards: &BTreeMap<i64, RateCard>) -> Currency {
    cards
        .values()
        .last()
        .map(|c| c.currency.clone())
        .unwrap_or_else(|| Currency::parse("USD").expect("USD exists"))
}

pub fn empty_state() -> Markup {
    html! {
        div class="empty" {
            p { "No usage in this month yet." }
            p {
                "Start a collector on each GPU node: "
                code { "slicemeter collect --server http://<this server>:8080 --token <collector token>" }
                " (a token from " code { "slicemeter token create --role collector --node <node>" }
                "), or try everything with " code { "slicemeter demo" } "."
            }
        }
    }
}

pub fn invoice_table(invoices: &[Invoice], currency: &Currency, can_issue: bool) -> Markup {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    html! {
        @if invoices.is_empty() {
            p class="empty" { "No invoices yet for this month." }
        } @else {
            div class="scroll" {
                table {
                    caption { "Invoices and credit notes" }
                    thead { tr {
                        th scope="col" { "Team" }
                        th scope="col" { "Period" }
                        th scope="col" { "Number" }
                        th scope="col" { "Status" }
                        th scope="col" class="num" { "Total" }
                        th scope="col" { "Download" }
                        @if can_issue { th scope="col" { "Action" } }
                    } }
                    tbody {
                        @for i in invoices {
                            tr data-invoice=(i.id) data-team=(i.team) {
                                td { (i.team) }
                                td { (i.period) }
                                td { a href=(format!("/ui/invoices/{}", i.id)) data-field="open" { (i.number.as_deref().unwrap_or("draft")) } }
                                td data-field="status" { (i.status) @if i.kind == InvoiceKind::CreditNote { " (credit note)" } }
                                td class="num" data-field="total" { (m(i.total)) }
                                td {
                                    a href=(format!("/ui/invoices/{}.csv", i.id)) download
                                        aria-label=(format!("Download invoice {} as CSV", i.number.as_deref().unwrap_or("draft"))) { "CSV" }
                                    " · "
                                    a href=(format!("/ui/exports/focus?period={}", i.period)) download
                                        aria-label=(format!("Download the FOCUS rows of {}", i.period)) { "FOCUS rows" }
                                }
                                @if can_issue {
                                    td {
                                        @if i.status == InvoiceStatus::Draft {
                                            a href=(format!("/ui/invoices/{}/issue", i.id))
                                                aria-label=(format!("Issue the invoice of {}", i.team)) { "Issue…" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
