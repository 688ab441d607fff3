//! The team page (a team lead's own; finance and admins any team's): what the team paid month by
//! month, what it holds against what it uses slice by slice, and its invoices. Per-slice figures are
//! the FOCUS export's read model (`reports::slices`), priced by billing's own function.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use futures_util::TryStreamExt;
use maud::{Markup, html};
use rust_decimal::Decimal;

use super::charts::{self, Bar};
use super::format::{money, number, percent};
use super::layout::{
    IDLE_EFFICIENCY, MonthQuery, UiError, Viewer, currency_of, empty_state, f, invoice_table,
    month_form, page,
};
use crate::billing::invoice::{Invoice, InvoiceKind, InvoiceStatus, store as invoices};
use crate::billing::period::PeriodState;
use crate::billing::rate_card::{Currency, RateCard, store as rate_cards};
use crate::domain::access::Principal;
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::http::error::{ApiError, ErrorCode};
use crate::http::state::AppState;
use crate::plan::{
    self,
    recommend::{Action, Recommendation, TargetProfile},
};
use crate::reports::monthly::MonthlyReport;
use crate::reports::service as reports;
use crate::reports::slices::SliceDay;
use crate::reports::store as report_store;
use crate::teams::store as team_store;

/// One row of the team's slice table.
struct SliceLine {
    slice: String,
    model: String,
    kind: String,
    profile: Option<String>,
    node: String,
    held_hours: Decimal,
    gpu_eq_hours: Decimal,
    memory_used_gib: Decimal,
    memory_reserved_gib: Decimal,
    active_hours: Option<Decimal>,
    efficiency: Option<Decimal>,
    cost: Decimal,
}

pub async fn team(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Path(team): Path<String>,
    Query(q): Query<MonthQuery>,
) -> Result<Response, UiError> {
    let team = TeamId::parse(&team).map_err(|_| UiError::NotFound)?;
    match &viewer {
        Principal::TeamLead { team: own, .. } if own != &team => return Err(UiError::NotFound),
        Principal::Collector { .. } => return Err(UiError::NotFound),
        _ => {}
    }
    let exists = team_store::list(&state.pool, Some(&team)).await?;
    let Some(info) = exists.into_iter().next() else {
        return Err(UiError::NotFound);
    };
    let month = q.month()?;
    let cards = rate_cards::rate_cards(&state.pool).await?;
    let report =
        reports::monthly_report(&state.pool, &state.reports, month, Utc::now(), Some(&team))
            .await?;
    let currency = currency_of(&report, &cards);
    let row = report.teams.first();

    // The last twelve months: what was invoiced, or what the month comes to now.
    let invoices = invoices::list(&state.pool, None, Some(&team)).await?;
    let mut history = Vec::new();
    for k in (0..12).rev() {
        let m = month.minus(k);
        let invoiced = invoices
            .iter()
            .filter(|i| {
                i.period == m && i.kind == InvoiceKind::Invoice && i.status != InvoiceStatus::Void
            })
            .map(|i| i.total)
            .next();
        // A month billing cannot price (hours without a rate card) says why, never 0.
        let cost = match invoiced {
            Some(total) => Ok(total),
            None if m == month => Ok(row.map(|r| r.cost).unwrap_or_default()),
            None => reports::team_cost(&state.pool, &state.reports, m, &team)
                .await
                .map_err(|e| e.to_string()),
        };
        history.push((m, cost, invoiced.is_some()));
    }

    let frozen = report.state == PeriodState::Issued;
    let slices = team_slice_lines(&state, &team, month, frozen, &cards).await?;
    let recommendations = plan::recommendations(
        &state.pool,
        Some(team.as_str()),
        RIGHT_SIZING_DAYS,
        TargetProfile::Default,
        Utc::now(),
    )
    .await
    .map_err(ApiError::from)?;
    let body = html! {
        (team_body(
            &info.display_name,
            &team,
            month,
            &report,
            &currency,
            &history,
            slices,
            &invoices,
            &q,
        ))
        (right_sizing(&recommendations, &currency))
    };
    Ok(page(
        &format!("{} {month}", info.display_name),
        Some(&viewer),
        body,
    )
    .into_response())
}

/// The team's slices in `month`: its slice-days (from the month's books once issued), each priced
/// under the rate card in force, summed per slice.
async fn team_slice_lines(
    state: &AppState,
    team: &TeamId,
    month: Month,
    from_book: bool,
    cards: &BTreeMap<i64, RateCard>,
) -> Result<Vec<SliceLine>, UiError> {
    let mut conn = state.pool.acquire().await?;
    let days: Vec<SliceDay> = report_store::slice_days(&mut conn, month, from_book, Some(team))
        .try_collect()
        .await?;
    drop(conn);
    let hour = Decimal::from(3600);
    let gib = Decimal::from(1u64 << 30);
    // Each slice's line, and its used GPU-equivalent hours (unknown once any day's are).
    let mut by_slice: BTreeMap<&str, (SliceLine, Option<Decimal>)> = BTreeMap::new();
    for d in &days {
        let charge = d
            .charge(cards)
            .map_err(|e| UiError::Api(ApiError::conflict(ErrorCode::CannotBill, &e)))?;
        let (line, used) = by_slice.entry(d.slice_uuid.as_str()).or_insert_with(|| {
            (
                SliceLine {
                    slice: d.slice_uuid.clone(),
                    model: d.model.clone(),
                    kind: d.kind.as_str().to_owned(),
                    profile: d.profile.clone(),
                    node: d.node.clone(),
                    held_hours: Decimal::ZERO,
                    gpu_eq_hours: Decimal::ZERO,
                    memory_used_gib: Decimal::ZERO,
                    memory_reserved_gib: Decimal::from(d.memory_reserved_bytes) / gib,
                    active_hours: Some(Decimal::ZERO),
                    efficiency: None,
                    cost: Decimal::ZERO,
                },
                Some(Decimal::ZERO),
            )
        });
        line.held_hours += d.held_seconds / hour;
        line.gpu_eq_hours += charge.gpu_equivalent_hours;
        line.memory_used_gib += d.memory_byte_seconds / gib;
        if d.known_seconds < d.held_seconds {
            line.active_hours = None;
        } else if let Some(a) = &mut line.active_hours {
            *a += d.active_seconds / hour;
        }
        line.cost += charge.amount;
        *used = match (*used, charge.used_gpu_equivalent_hours) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
    Ok(by_slice
        .into_values()
        .map(|(mut line, used)| {
            // Average memory used over the held time, against what the slice reserves.
            let held_s = line.held_hours * hour;
            line.memory_used_gib = if held_s > Decimal::ZERO {
                line.memory_used_gib / held_s
            } else {
                Decimal::ZERO
            };
            line.efficiency = used
                .filter(|_| line.gpu_eq_hours > Decimal::ZERO)
                .map(|u| u / line.gpu_eq_hours);
            line
        })
        .collect())
}

#[allow(clippy::too_many_arguments)]
fn team_body(
    name: &str,
    team: &TeamId,
    month: Month,
    report: &MonthlyReport,
    currency: &Currency,
    history: &[(Month, Result<Decimal, String>, bool)],
    mut slices: Vec<SliceLine>,
    invoices: &[Invoice],
    q: &MonthQuery,
) -> Markup {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let row = report.teams.first();
    let current = month == Month::of(Utc::now());
    let sort = q.sort.as_deref().unwrap_or("cost");
    let desc = q.dir.as_deref() != Some("asc");
    slices.sort_by(|a, b| {
        let o = match sort {
            "model" => a.model.cmp(&b.model),
            "kind" => a.kind.cmp(&b.kind),
            "node" => a.node.cmp(&b.node),
            "held" => a.held_hours.cmp(&b.held_hours),
            "gpu_eq" => a.gpu_eq_hours.cmp(&b.gpu_eq_hours),
            "efficiency" => a.efficiency.cmp(&b.efficiency),
            _ => a.cost.cmp(&b.cost),
        };
        if desc { o.reverse() } else { o }.then_with(|| a.slice.cmp(&b.slice))
    });
    let idle: Vec<&SliceLine> = slices
        .iter()
        .filter(|s| s.kind != "timeslice" && s.efficiency.is_some_and(|e| e < IDLE_EFFICIENCY))
        .collect();
    let idle_cost: Decimal = idle
        .iter()
        .filter_map(|s| Some(s.cost * (Decimal::ONE - s.efficiency?)))
        .sum();
    let header = |key: &str, label: &str, numeric: bool| {
        let active = sort == key;
        let next_dir = if active && desc { "asc" } else { "desc" };
        let aria = if active {
            if desc { "descending" } else { "ascending" }
        } else {
            "none"
        };
        html! {
            th scope="col" class=[numeric.then_some("num")] aria-sort=(aria) {
                a href=(format!("/ui/team/{team}?month={month}&sort={key}&dir={next_dir}")) { (label) }
            }
        }
    };
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
        }
        @for p in &report.pending_corrections {
            p class="notice" data-field="pending" {
                "Data that arrived after " (month) " was issued adds " strong { (m(p.amount)) }
                "; it is billed once, as corrections on the next open period's invoice."
            }
        }
        section aria-labelledby="history-h" {
            h2 id="history-h" { "Last 12 months" }
            (charts::bars("history", &format!("{name}: cost per month"),
                "Invoiced months show their invoice total; the others what they come to now.",
                &currency.code,
                &history.iter().map(|(mo, cost, invoiced)| Bar {
                    label: mo.to_string()[2..].to_owned(),
                    value: cost.as_ref().map_or(0.0, |c| f(*c)),
                    hover: match cost {
                        Ok(c) => format!("{mo}: {}{}", m(*c), if *invoiced { " (invoiced)" } else { "" }),
                        Err(why) => format!("{mo}: not priced ({why})"),
                    },
                    colour: "#1f77b4",
                }).collect::<Vec<_>>()))
        }
        section aria-labelledby="slices-h" {
            h2 id="slices-h" { "Slices held in " (month) }
            @if slices.is_empty() {
                (empty_state())
            } @else {
                @if !idle.is_empty() {
                    p class="notice" data-field="idle-summary" {
                        strong { (idle.len()) " slice" @if idle.len() != 1 { "s" } }
                        " held but idle (under " (percent(Some(IDLE_EFFICIENCY))) " efficiency) cost "
                        strong { (m(currency.round(idle_cost))) } " of idle capacity: consider giving them back."
                    }
                }
                div class="scroll" {
                    table {
                        caption { "Each slice the team held; highlighted rows are held but idle. Select a heading to sort." }
                        thead { tr {
                            (header("model", "GPU model", false))
                            (header("kind", "Kind", false))
                            th scope="col" { "Profile" }
                            (header("node", "Node", false))
                            (header("held", "Held hours", true))
                            (header("gpu_eq", "GPU-equivalent hours", true))
                            th scope="col" class="num" { "Memory used / reserved" }
                            th scope="col" class="num" { "Compute active / held" }
                            (header("efficiency", "Efficiency", true))
                            (header("cost", "Cost", true))
                        } }
                        tbody {
                            @for s in &slices {
                                @let is_idle = s.kind != "timeslice" && s.efficiency.is_some_and(|e| e < IDLE_EFFICIENCY);
                                tr class=[is_idle.then_some("idle")] data-slice=(s.slice) {
                                    td { (s.model) }
                                    td { (s.kind) }
                                    td { (s.profile.as_deref().unwrap_or("—")) }
                                    td { (s.node) }
                                    td class="num" { (number(s.held_hours, 1)) }
                                    td class="num" { (number(s.gpu_eq_hours, 2)) }
                                    // A time-sliced replica reserves nothing: it pays for what it uses.
                                    @if s.kind == "timeslice" {
                                        td class="num" { (number(s.memory_used_gib, 1)) " GiB / none reserved" }
                                    } @else {
                                        td class="num" { (number(s.memory_used_gib, 1)) " / " (number(s.memory_reserved_gib, 1)) " GiB" }
                                    }
                                    td class="num" { (s.active_hours.map_or("unknown".to_owned(), |a| number(a, 1))) " / " (number(s.held_hours, 1)) " h" }
                                    @if s.kind == "timeslice" {
                                        td class="num" data-field="slice-efficiency" { "pay-per-use" }
                                    } @else {
                                        td class="num" data-field="slice-efficiency" { (percent(s.efficiency)) }
                                    }
                                    td class="num" { (m(currency.round(s.cost))) }
                                }
                            }
                        }
                    }
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
/// month: the largest saving first.
fn right_sizing(recs: &[Recommendation], currency: &Currency) -> Markup {
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
