//! The team page (a team lead's own; finance and admins any team's): what the team paid month by
//! month, what it holds against what it uses slice by slice, and its invoices. Per-slice figures are
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
    IDLE_EFFICIENCY, MonthQuery, UiError, Viewer, currency_of, empty_state, invoice_table,
    month_form, page,
};
use super::over_time;
use super::workloads::{self, WorkloadLine};
use crate::billing::invoice::{Invoice, store as invoices};
use crate::billing::rate_card::{Currency, store as rate_cards};
use crate::budgets;
use crate::budgets::standing::BudgetStanding;
use crate::domain::access::Principal;
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::plan::{
    self,
    recommend::{Action, Recommendation, TargetProfile},
};
use crate::reports::forecast::TeamForecast;
use crate::reports::monthly::MonthlyReport;
use crate::reports::service as reports;
use crate::teams::store as team_store;

/// The team `team` names, if `viewer` may see it: another team's page is not found for a lead.
async fn visible_team(
    state: &AppState,
    viewer: &Principal,
    team: &str,
) -> Result<(TeamId, team_store::TeamRow), UiError> {
    let team = TeamId::parse(team).map_err(|_| UiError::NotFound)?;
    match viewer {
        Principal::TeamLead { team: own, .. } if own != &team => return Err(UiError::NotFound),
        Principal::Collector { .. } | Principal::Importer { .. } => return Err(UiError::NotFound),
        _ => {}
    }
    let exists = team_store::list(&state.pool, Some(&team)).await?;
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
    let cards = rate_cards::rate_cards(&state.pool).await?;
    let report =
        reports::monthly_report(&state.pool, &state.reports, month, Utc::now(), Some(team)).await?;
    let currency = currency_of(&report, &cards);
    // The month's evidence (its workload table) and right-sizing's, read in one scan.
    let now = Utc::now();
    let ranges = [
        (month.start(), month.end()),
        plan::right_sizing_range(RIGHT_SIZING_DAYS, now),
    ];
    let evidence = async {
        match evidence_wait {
            None => Some(
                state
                    .evidence
                    .get(&state.pool, &ranges, Some(team.as_str()))
                    .await,
            )
            .transpose(),
            Some(wait) => {
                state
                    .evidence
                    .get_within(&state.pool, &ranges, Some(team.as_str()), wait)
                    .await
            }
        }
    };
    // The workloads' costs are read while the evidence is waited for.
    let (evidence, usage) = tokio::join!(evidence, workloads::usage(state, team, month));
    let (evidence, usage) = (
        evidence.map_err(ApiError::from)?,
        usage.map_err(ApiError::from)?,
    );
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
    let TeamMonth {
        currency,
        workloads: mut lines,
        ..
    } = team_month(&state, &team, month, None).await?;
    workloads::sort(
        &mut lines,
        q.sort.as_deref().unwrap_or("cost"),
        q.dir.as_deref() != Some("asc"),
    );
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
    let TeamMonth {
        report,
        currency,
        recommendations,
        workloads,
    } = team_month(&state, &team, month, Some(state.config.evidence_wait)).await?;
    // The current month: where it ends if the last days' pace holds, and against its budget, if
    // it has one (the cards show them for the current month, the charts whatever the month).
    let now = Utc::now();
    let (forecast, budget) = match crate::http::budgets::forecasts(&state, Some(&team)).await? {
        Ok(report) => {
            // The whole team's monthly budget; narrower ones are in the API.
            let budget = match budgets::list(&state.pool, Some(&team))
                .await?
                .into_iter()
                .find(|b| b.scope().is_none() && b.period() == budgets::BudgetPeriod::Month)
            {
                Some(row) => Some(
                    crate::budgets::standing::standing(&state.pool, &state.reports, &row, &report)
                        .await?,
                ),
                None => None,
            };
            (report.teams.into_iter().next(), budget)
        }
        Err(_) => (None, None),
    };
    let range = over_time::CostRange::of(&q, now)?;
    let over = over_time::read(&state, range, Some(&team), now).await?;
    let burn = match (&budget, &forecast) {
        (Some(b), Some(fc)) => {
            let this = Month::of(now);
            let (daily, _) =
                reports::daily_costs(&state.pool, &state.reports, this.start(), this.end()).await?;
            let daily: Vec<_> = daily
                .into_iter()
                .filter(|((t, _), _)| *t == team)
                .map(|((_, day), cost)| (day, cost))
                .collect();
            over_time::burn_down(&daily, b, fc, &currency, now)
        }
        _ => None,
    };
    let invoices = invoices::list(&state.pool, None, Some(&team)).await?;
    let handovers = handovers::of_month(&state.pool, month).await?;
    let current = month == Month::of(now);
    let charts = html! {
        (over_time::section(&format!("/ui/team/{team}?month={month}"), &over, &currency, None,
            budget.as_ref(), forecast.as_ref(), now))
        @if let Some(b) = burn { (b) }
    };

    let body = html! {
        (team_body(
            &info.display_name,
            &team,
            month,
            &report,
            &currency,
            charts,
            forecast.as_ref().filter(|_| current),
            budget.as_ref().filter(|_| current),
            workloads,
            recommendations.is_none(),
            &invoices,
            &q,
        ))
        (handovers::team_notice(&team, month, &handovers))
        (right_sizing(recommendations.as_deref(), &currency))
    };
    Ok(page(
        &format!("{} {month}", info.display_name),
        Some(&viewer),
        body,
    )
    .into_response())
}

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
    evidence_pending: bool,
    invoices: &[Invoice],
    q: &MonthQuery,
) -> Markup {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let row = report.teams.first();
    let current = month == Month::of(Utc::now());
    let sort = q.sort.as_deref().unwrap_or("cost");
    let desc = q.dir.as_deref() != Some("asc");
    workloads::sort(&mut workloads, sort, desc);
    let idle: Vec<&WorkloadLine> = workloads.iter().filter(|w| w.is_idle()).collect();
    let idle_cost: Decimal = idle.iter().filter_map(|w| w.idle_cost).sum();
    html! {
        h1 { (name) " · " (month) }
        (month_form(&format!("/ui/team/{team}"), month))
        div class="cards" {
            div class="card" {
                div class="label" { "Cost " @if current { "so far this month" } @else { "in " (month) } }
                div class="value" data-field="cost" { (m(row.map(|r| r.cost).unwrap_or_default())) }
            }
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
        @for p in &report.pending_corrections {
            p class="notice" data-field="pending" {
                "Data that arrived after " (month) " was issued adds " strong { (m(p.amount)) }
                "; it is billed once, as corrections on the next open period's invoice."
            }
        }
        (charts)
        section aria-labelledby="workloads-h" {
            h2 id="workloads-h" { "Workloads in " (month) }
            @if workloads.is_empty() {
                (empty_state())
            } @else {
                @if !idle.is_empty() {
                    p class="notice" data-field="idle-summary" {
                        strong { (idle.len()) " workload slice" @if idle.len() != 1 { "s" } }
                        " held but idle (under " (percent(Some(IDLE_EFFICIENCY))) " efficiency) cost "
                        strong { (m(idle_cost)) } " of idle capacity: consider giving them back or a smaller slice."
                    }
                }
                @if evidence_pending {
                    p class="notice" data-field="evidence-pending" {
                        "Memory p99 and compute p95 are being read (percentiles over every hour of the month); "
                        "reload in a minute to see them."
                    }
                }
                p { a href=(format!("/ui/team/{team}/workloads.csv?month={month}&sort={sort}&dir={}", if desc { "desc" } else { "asc" }))
                      download { "Download this table (CSV)" } }
                div class="scroll" {
                    (workloads::table(&workloads, currency, &format!("/ui/team/{team}?month={month}"), sort, desc))
                }
            }
        }
        section aria-labelledby="invoices-h" {
            h2 id="invoices-h" { "Invoices" }
            (invoice_table(invoices, currency, false))
        }
    }
}

/// The days of data right-sizing judges by on the team page.
const RIGHT_SIZING_DAYS: u32 = 14;

/// The team's workloads that could hold less (`/v1/recommendations`), each with what it saves a
/// month: the largest saving first; or, while their evidence is being read (`None`), that it is.
fn right_sizing(recs: Option<&[Recommendation]>, currency: &Currency) -> Markup {
    let Some(recs) = recs else {
        return html! {
            section aria-labelledby="right-sizing-h" {
                h2 id="right-sizing-h" { "Right-sizing, from the last " (RIGHT_SIZING_DAYS) " days" }
                p class="notice" data-field="right-sizing-pending" {
                    "Right-sizing's evidence is being read (percentiles over every hour of the last "
                    (RIGHT_SIZING_DAYS) " days); reload in a minute to see what could hold less."
                }
            }
        };
    };
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let mut act: Vec<&Recommendation> = recs
        .iter()
        .filter(|r| matches!(r.action, Action::Resize | Action::GiveBack))
        .collect();
    act.sort_by_key(|r| std::cmp::Reverse(r.monthly_delta));
    let waiting = recs.iter().filter(|r| r.action == Action::Wait).count();
    let saving: Decimal = act
        .iter()
        .filter_map(|r| r.monthly_delta)
        .filter(|d| *d > Decimal::ZERO)
        .sum();
    let gib = |b: i64| number(Decimal::from(b) / Decimal::from(1u64 << 30), 1);
    html! {
        section aria-labelledby="right-sizing-h" {
            h2 id="right-sizing-h" { "Right-sizing, from the last " (RIGHT_SIZING_DAYS) " days" }
            @if act.is_empty() {
                p { "Every workload holds what it needs"
                    @if waiting > 0 { " (" (waiting) " with under 7 days of data, not judged yet)" }
                    "." }
            } @else {
                p class="notice" data-field="right-sizing-summary" {
                    strong { (act.len()) " workload" @if act.len() != 1 { "s" } }
                    " could hold less: " strong { (m(saving)) } " a month at today's rate card."
                    @if waiting > 0 { " " (waiting) " more have under 7 days of data." }
                }
                div class="scroll" {
                    table data-table="right-sizing" {
                        caption { "What each workload holds, what it needs, and the smaller slice that would do" }
                        thead { tr {
                            th scope="col" { "Workload" }
                            th scope="col" { "Holds" }
                            th scope="col" { "Advice" }
                            th scope="col" class="num" { "Saving / month" }
                            th scope="col" class="num" { "Memory p99 / reserved" }
                            th scope="col" class="num" { "Compute p95" }
                            th scope="col" { "Confidence" }
                        } }
                        tbody {
                            @for r in &act {
                                tr data-workload=(r.workload) {
                                    td { (r.namespace.as_deref().unwrap_or("—")) " / " (r.workload)
                                         " " span class="muted" { "(" (r.workload_kind) ")" } }
                                    td { (r.gpu_model.trim_start_matches("NVIDIA ")) " " (r.kind.as_str())
                                         @if let Some(p) = &r.profile { " " (p) }
                                         @if r.slices > 1 { " x " (r.slices) } }
                                    td { @match (r.action, &r.recommended_profile) {
                                        (Action::GiveBack, _) => { "Give it back" }
                                        (_, Some(p)) => { "Move to " strong { (p) } }
                                        _ => { "—" }
                                    }
                                    @if let Some(a) = &r.shared_alternative {
                                        br;
                                        span class="muted" data-field="mps" {
                                            "or share the card under MPS (" (a.active_thread_percentage) " % of the threads, "
                                            (gib(a.pinned_memory_bytes)) " GiB pinned; less isolation): saves " (m(a.monthly_delta))
                                        }
                                    } }
                                    td class="num" data-field="saving" { (r.monthly_delta.map_or("—".to_owned(), m)) }
                                    td class="num" { (gib(r.memory_p99_bytes)) " / " (gib(r.memory_reserved_bytes)) " GiB" }
                                    td class="num" { (r.compute_p95.map_or("unknown".to_owned(), |p| format!("{:.1} %", p * 100.0))) }
                                    td { (format!("{:?}", r.confidence).to_lowercase()) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
