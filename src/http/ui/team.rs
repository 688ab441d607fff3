//! The team page (a team lead's own; finance and admins any team's): what the team paid this
//! month and, beside it, what it can save and how (`savings`, right-sizing's one list); then what
//! it paid month by month, what it holds against what it uses slice by slice, and its invoices. Per-slice figures are
//! the FOCUS export's read model (`reports::slices`), priced by billing's own function.

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use maud::{Markup, html};
use rust_decimal::Decimal;

use super::format::{money, number, percent};
use super::handovers;
use super::layout::{
    MonthQuery, UiError, Viewer, currency_of, empty_state, invoice_table, month_form, page,
};
use super::over_time;
use super::savings::{self, RIGHT_SIZING_DAYS};
use super::unit_costs;
use super::workloads::{self, TableOrder, WorkloadLine};
use crate::billing::invoice::Invoice;
use crate::billing::rate_card::Currency;
use crate::billing::service as billing;
use crate::budgets;
use crate::budgets::standing::BudgetStanding;
use crate::domain::access::Principal;
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::plan::{
    self,
    recommend::{Recommendation, TargetProfile},
};
use crate::reports::forecast::TeamForecast;
use crate::reports::monthly::MonthlyReport;
use crate::reports::service as reports;
use crate::teams;

/// The team `team` names, if `viewer` may see it: another team's page is not found for a lead.
async fn visible_team(
    state: &AppState,
    viewer: &Principal,
    team: &str,
) -> Result<(TeamId, teams::TeamRow), UiError> {
    let team = TeamId::parse(team).map_err(|_| UiError::NotFound)?;
    match viewer {
        Principal::TeamLead { team: own, .. } if own != &team => return Err(UiError::NotFound),
        Principal::Collector { .. } | Principal::Importer { .. } => return Err(UiError::NotFound),
        _ => {}
    }
    let exists = teams::list(&state.pool, Some(&team)).await?;
    let info = exists.into_iter().next().ok_or(UiError::NotFound)?;
    Ok((team, info))
}

/// What the team page shows of `team`'s `month`: its report, in its currency, right-sizing now
/// (`None` while its evidence is being read), and its workload lines.
struct TeamMonth {
    report: MonthlyReport,
    currency: Currency,
    recommendations: Option<Vec<Recommendation>>,
    workloads: Vec<WorkloadLine>,
}

/// `team`'s `month`, waiting at most `evidence_wait` for right-sizing's evidence when none is kept
/// (`None`: until it is read, as the CSV must); past it, its workload lines come without their
/// percentiles and right-sizing is being read.
async fn team_month(
    state: &AppState,
    team: &TeamId,
    month: Month,
    evidence_wait: Option<Duration>,
) -> Result<TeamMonth, UiError> {
    // The month's evidence (its workload table) and right-sizing's, read in one scan.
    let now = Utc::now();
    let ranges = [
        (month.start(), month.end()),
        plan::right_sizing_range(RIGHT_SIZING_DAYS, now),
    ];
    let evidence = async {
        match evidence_wait {
            None => Some(state.evidence.get(&state.pool, &ranges, Some(team)).await).transpose(),
            Some(wait) => {
                state
                    .evidence
                    .get_within(&state.pool, &ranges, Some(team), wait)
                    .await
            }
        }
    };
    // The month's report and the workloads' costs are read while the evidence is waited for.
    let (cards, report, evidence, usage) = tokio::join!(
        billing::rate_cards(&state.pool),
        reports::monthly_report(&state.pool, &state.reports, month, now, Some(team)),
        evidence,
        workloads::usage(state, team, month)
    );
    let (report, evidence, usage) = (
        report?,
        evidence.map_err(ApiError::from)?,
        usage.map_err(ApiError::from)?,
    );
    let currency = currency_of(&report, &cards?);
    let recommendations = match &evidence {
        Some(e) => Some(
            plan::recommend_all(&state.pool, &e[1], TargetProfile::Default, now)
                .await
                .map_err(ApiError::from)?,
        ),
        None => None,
    };
    let workloads = workloads::lines(
        &usage,
        evidence.as_ref().map_or(&[][..], |e| &e[0]),
        recommendations.as_deref().unwrap_or_default(),
    );
    Ok(TeamMonth {
        report,
        currency,
        recommendations,
        workloads,
    })
}

/// The team page's workload table as CSV, sorted as on the page.
pub async fn workloads_csv(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Path(team): Path<String>,
    Query(q): Query<MonthQuery>,
) -> Result<Response, UiError> {
    let (team, _) = visible_team(&state, &viewer, &team).await?;
    let month = q.month()?;
    // Every row, whatever page the table showed.
    let order = TableOrder::of(&q)?;
    let TeamMonth {
        currency,
        workloads: mut lines,
        ..
    } = team_month(&state, &team, month, None).await?;
    workloads::sort(&mut lines, order.sort, order.desc);
    let body = workloads::to_csv(&lines, &currency).map_err(ApiError::internal)?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"slicemeter-workloads-{team}-{month}.csv\""),
            ),
        ],
        body,
    )
        .into_response())
}

pub async fn team(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Path(team): Path<String>,
    Query(q): Query<MonthQuery>,
) -> Result<Response, UiError> {
    let (team, info) = visible_team(&state, &viewer, &team).await?;
    let month = q.month()?;
    let order = TableOrder::of(&q)?;
    let now = Utc::now();
    let range = over_time::CostRange::of(&q, now)?;
    // The page's reads are independent of each other: each waits on the database, not on the
    // others, so they are read at once (the month's workloads and cost over time each read the
    // team's rows of the month).
    let (month_read, standing, over, invoices, handovers, unit_costs) = tokio::join!(
        team_month(&state, &team, month, Some(state.config.evidence_wait)),
        forecast_and_budget(&state, &team, now),
        over_time::read(&state, range, Some(&team), now),
        billing::invoices(&state.pool, None, Some(&team)),
        handovers::of_month(&state.pool, month),
        unit_costs::kept(&state, month),
    );
    let TeamMonth {
        report,
        currency,
        recommendations,
        workloads,
    } = month_read?;
    let (forecast, budget, daily) = standing?;
    let (over, invoices, handovers) = (over?, invoices?, handovers?);
    let burn = match (&budget, &forecast, daily) {
        (Some(b), Some(fc), Some(daily)) => over_time::burn_down(&daily, b, fc, &currency, now),
        _ => None,
    };
    let current = month == Month::of(now);
    let charts = html! {
        (over_time::section(&format!("/ui/team/{team}?month={month}"), &over, &currency, None,
            budget.as_ref(), forecast.as_ref(), now))
        @if let Some(b) = burn { (b) }
    };

    let main = team_body(
        &info.display_name,
        &team,
        month,
        &report,
        &currency,
        charts,
        forecast.as_ref().filter(|_| current),
        budget.as_ref().filter(|_| current),
        workloads,
        recommendations.as_deref(),
        &invoices,
        order,
    )?;
    let body = html! {
        (main)
        (unit_costs::section(unit_costs.as_deref(), &team))
        (handovers::team_notice(&team, month, &handovers))
    };
    Ok(page(
        &format!("{} {month}", info.display_name),
        Some(&viewer),
        body,
    )
    .into_response())
}

/// A team's forecast, its monthly budget's standing and its cost per day of the current month.
type Standing = (
    Option<TeamForecast>,
    Option<BudgetStanding>,
    Option<Vec<(chrono::DateTime<Utc>, Decimal)>>,
);

/// The current month: where it ends if the last days' pace holds, and against `team`'s budget, if
/// it has one (the cards show them for the current month, the charts whatever the month), with
/// the team's cost per day of the month for the budget's burn-down (read only where there is one).
async fn forecast_and_budget(
    state: &AppState,
    team: &TeamId,
    now: chrono::DateTime<Utc>,
) -> Result<Standing, UiError> {
    let report = match crate::http::budgets::forecasts(state, Some(team)).await? {
        Ok(report) => report,
        Err(_) => return Ok((None, None, None)),
    };
    // The whole team's monthly budget; narrower ones are in the API.
    let budget = match budgets::list(&state.pool, Some(team))
        .await?
        .into_iter()
        .find(|b| b.scope().is_none() && b.period == budgets::BudgetPeriod::Month)
    {
        Some(row) => Some(
            crate::budgets::standing::standing(&state.pool, &state.reports, &row, &report).await?,
        ),
        None => None,
    };
    let forecast = report.teams.into_iter().next();
    let daily = match (&budget, &forecast) {
        (Some(_), Some(_)) => {
            let this = Month::of(now);
            let (daily, _) =
                reports::daily_costs(&state.pool, &state.reports, this.start(), this.end()).await?;
            Some(
                daily
                    .into_iter()
                    .filter(|((t, _), _)| t == team)
                    .map(|((_, day), cost)| (day, cost))
                    .collect(),
            )
        }
        _ => None,
    };
    Ok((forecast, budget, daily))
}

/// The page, leading with action: the month's cost and what the team can save beside it, the
/// steps to take, then cost over time, the workloads (a page of them) and the invoices.
#[allow(clippy::too_many_arguments)]
fn team_body(
    name: &str,
    team: &TeamId,
    month: Month,
    report: &MonthlyReport,
    currency: &Currency,
    charts: Markup,
    forecast: Option<&TeamForecast>,
    budget: Option<&BudgetStanding>,
    mut workloads: Vec<WorkloadLine>,
    recommendations: Option<&[Recommendation]>,
    invoices: &[Invoice],
    order: TableOrder,
) -> Result<Markup, UiError> {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let row = report.teams.first();
    let current = month == Month::of(Utc::now());
    workloads::sort(&mut workloads, order.sort, order.desc);
    let shown = order.rows(&workloads)?;
    let base = format!("/ui/team/{team}?month={month}");
    Ok(html! {
        h1 { (name) " · " (month) }
        (month_form(&format!("/ui/team/{team}"), month))
        div class="cards lead" {
            div class="card" {
                div class="label" { "Cost " @if current { "so far this month" } @else { "in " (month) } }
                div class="value" data-field="cost" { (m(row.map(|r| r.cost).unwrap_or_default())) }
            }
            (savings::card(recommendations, currency))
            @if let Some(f) = forecast {
                div class="card" {
                    div class="label" { "Forecast at month end" }
                    div class="value" data-field="forecast" { (m(f.forecast)) }
                    div class="muted" data-field="forecast-band" {
                        "p10–p90: " (m(f.low)) " – " (m(f.high)) "; " (m(f.hourly_rate)) " an hour"
                    }
                }
            }
            @if let Some(b) = budget {
                div class="card" {
                    div class="label" { "Budget this month" }
                    @match b.budget {
                        Some(amount) => {
                            div class="value" data-field="budget" { (m(amount)) }
                            div class="muted" {
                                "spent " span data-field="budget-spent-percent" { (number(b.spent_percent.unwrap_or_default(), 2)) " %" }
                                ", forecast " span data-field="budget-forecast-percent" { (number(b.forecast_percent.unwrap_or_default(), 2)) " %" }
                            }
                            @if !b.crossed.is_empty() {
                                div class="notice" data-field="budget-crossed" {
                                    "Crossed: "
                                    @for (i, t) in b.crossed.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        (format!("{:?}", t.kind).to_lowercase()) " " (t.percent) " %"
                                    }
                                }
                            }
                        }
                        None => {
                            div class="value" data-field="budget" { "none" }
                            div class="muted" { (b.note.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
        (savings::section(recommendations, currency))
        @for p in &report.pending_corrections {
            p class="notice" data-field="pending" {
                "Data that arrived after " (month) " was issued adds " strong { (m(p.amount)) }
                "; it is billed once, as corrections on the next open period's invoice."
            }
        }
        div class="cards secondary" {
            div class="card" {
                div class="label" { "GPU-equivalent hours" }
                div class="value" data-field="gpu_equivalent_hours" { (number(row.map(|r| r.gpu_equivalent_hours).unwrap_or_default(), 2)) }
            }
            div class="card" {
                div class="label" { "Efficiency (used / held)" }
                div class="value" data-field="efficiency" { (percent(row.and_then(|r| r.efficiency))) }
            }
            div class="card" {
                div class="label" { "Cost of held-but-idle capacity" }
                div class="value" data-field="idle_cost" { (row.and_then(|r| r.idle_cost).map_or("unknown".to_owned(), m)) }
            }
        }
        (charts)
        section aria-labelledby="workloads-h" {
            h2 id="workloads-h" { "Workloads in " (month) }
            @if workloads.is_empty() {
                (empty_state())
            } @else {
                @if recommendations.is_none() {
                    p class="notice" data-field="evidence-pending" {
                        "Memory p99 and compute p95 are being read (percentiles over every hour of the month); "
                        "reload in a minute to see them."
                    }
                }
                p { a href=(format!("/ui/team/{team}/workloads.csv?month={month}&sort={}&dir={}", order.sort, order.dir()))
                      download { "Download this table (CSV)" } " (all " (workloads.len()) " rows)" }
                (workloads::pager(workloads.len(), &order, &base))
                div class="scroll" {
                    (workloads::table(shown, currency, &base, order.sort, order.desc))
                }
            }
        }
        section aria-labelledby="invoices-h" {
            h2 id="invoices-h" { "Invoices" }
            (invoice_table(invoices, currency, false))
        }
    })
}
