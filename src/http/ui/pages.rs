//! The fleet page (finance, admin) and the team page (a team lead's own; finance and admins any).
//! Figures come from the same functions as the API's, so a page and `/v1/reports/monthly` agree to
//! the cent. Numbers carry `data-field` attributes so that tests can read them.

use std::collections::BTreeMap;

use axum::extract::{Form, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::{Markup, html};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::Deserialize;

use super::charts::{self, Bar, GpuBar, Palette, Segment, Series, SliceMark};
use super::format::{money, number, percent};
use super::{MonthQuery, UiError, Viewer, page, same_origin};
use crate::auth::Principal;
use crate::billing::period::PeriodState;
use crate::billing::pricing::{UsageAggregate, price};
use crate::billing::rate_card::Currency;
use crate::billing::report::MonthlyReport;
use crate::billing::{self, invoice::Invoice};
use crate::db;
use crate::db::audit::Actor;
use crate::domain::slice::{ShareWeights, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::domain::usage::OccupancySums;
use crate::http::{AppState, exports, invoices};
use crate::reports::usage::{self, GroupBy, Step};

/// What the form the viewer just sent did, in the page's own words (never text from the link).
fn done_message(q: &MonthQuery, month: Month, invoices: &[Invoice]) -> Option<String> {
    match q.done.as_deref()? {
        "drafted" => {
            let n = invoices.iter().filter(|i| i.status == "draft").count();
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

fn state_text(state: PeriodState) -> &'static str {
    match state {
        PeriodState::Open => "Open: the month has not ended, nothing can be drafted yet",
        PeriodState::Closed => "Closed: drafts may be made and made again",
        PeriodState::Issued => {
            "Issued: these figures are what was issued; later data waits as corrections"
        }
    }
}

/// Below this efficiency a slice is "held but idle" and highlighted.
const IDLE_EFFICIENCY: Decimal = Decimal::from_parts(2, 0, 0, false, 1);

fn f(d: Decimal) -> f64 {
    d.to_f64().unwrap_or(0.0)
}

fn month_form(action: &str, month: Month) -> Markup {
    html! {
        form method="get" action=(action) class="month" {
            label for="month" { "Month" }
            input id="month" name="month" type="month" value=(month.to_string());
            " "
            button type="submit" { "Show" }
        }
    }
}

fn currency_of(
    report: &MonthlyReport,
    cards: &BTreeMap<i64, crate::billing::rate_card::RateCard>,
) -> Currency {
    report
        .currency
        .as_deref()
        .and_then(|c| Currency::parse(c).ok())
        .or_else(|| cards.values().last().map(|c| c.currency.clone()))
        .unwrap_or_else(|| Currency::parse("USD").expect("USD exists"))
}

fn empty_state() -> Markup {
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

pub async fn fleet(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Query(q): Query<MonthQuery>,
) -> Result<Response, UiError> {
    if !matches!(viewer, Principal::Admin { .. } | Principal::Finance { .. }) {
        return Err(UiError::Forbidden(
            "The fleet page is for finance and admins; your sign-in shows your own team.".into(),
        ));
    }
    let month = q.month()?;
    let report = billing::monthly_report(&state.pool, month, Utc::now(), None).await;
    let cards = db::billing::rate_cards(&state.pool).await?;
    let invoices = db::invoices::list(&state.pool, Some(month), None).await?;
    let done = done_message(&q, month, &invoices);
    let body = match report {
        Err(e) => html! {
            h1 { "Fleet " (month) }
            (month_form("/ui/fleet", month))
            p class="error" role="alert" { (e.to_string()) }
        },
        Ok(report) => {
            let currency = currency_of(&report, &cards);
            let sums = db::reports::usage_sums(
                &state.pool,
                month.start(),
                month.end(),
                GroupBy::Team,
                Step::Day,
                None,
            )
            .await?;
            let weights = cards.values().last().map(|c| c.weights).unwrap_or_default();
            let daily = usage::build(
                month.start(),
                month.end(),
                GroupBy::Team,
                Step::Day,
                weights,
                &sums,
            );
            let capacity = db::ui::capacity_by_day(&state.pool, month.start(), month.end()).await?;
            let fleet = db::fleet::slices(&state.pool, Utc::now()).await?;
            let teams = db::teams::list(&state.pool, None).await?;
            let palette = Palette::new(teams.iter().map(|t| t.team_id.as_str()));
            fleet_body(
                month,
                &report,
                &currency,
                &daily,
                &capacity,
                &fleet,
                &invoices,
                &palette,
                done.as_deref(),
            )
        }
    };
    Ok(page(&format!("Fleet {month}"), Some(&viewer), body).into_response())
}

#[allow(clippy::too_many_arguments)]
fn fleet_body(
    month: Month,
    report: &MonthlyReport,
    currency: &Currency,
    daily: &usage::UsageReport,
    capacity: &[(chrono::DateTime<Utc>, Decimal)],
    fleet: &[db::fleet::FleetSliceRow],
    invoices: &[Invoice],
    palette: &Palette,
    done: Option<&str>,
) -> Markup {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let c = report.conservation.as_ref();
    let drafts = invoices.iter().filter(|i| i.status == "draft").count();
    html! {
        h1 { "Fleet " (month) }
        (month_form("/ui/fleet", month))
        p { span class="state" data-field="state" { (state_text(report.state)) } }
        @if let Some(n) = done { p class="notice" role="status" { (n) } }
        @if let Some(c) = c {
            section aria-labelledby="conservation-h" {
                h2 id="conservation-h" { "Where the fleet's cost went" }
                div class="cards" {
                    @for (label, field, value) in [
                        ("Fleet cost", "fleet_cost", c.fleet_cost),
                        ("Team charges", "team_charges", c.team_charges),
                        ("Unattributed", "unattributed", c.unattributed),
                        ("Unallocated", "unallocated", c.unallocated),
                        ("Sharing discount", "sharing_discount", c.sharing_discount),
                        ("Rounding residual", "rounding_residual", c.rounding_residual),
                    ] {
                        div class="card" {
                            div class="label" { (label) }
                            div class="value" data-field=(field) { (m(value)) }
                        }
                    }
                }
                p { "Fleet cost = team charges + unattributed + unallocated + sharing discount + rounding residual, to the cent." }
                (charts::stacked("conservation", "Fleet cost by destination",
                    &format!("Of {} of fleet cost in {month}: team charges {}, unattributed {}, unallocated {}, sharing discount {}, rounding {}.",
                        m(c.fleet_cost), m(c.team_charges), m(c.unattributed), m(c.unallocated), m(c.sharing_discount), m(c.rounding_residual)),
                    &[
                        Segment { label: "Team charges".into(), value: f(c.team_charges), hover: m(c.team_charges), colour: "#1f77b4" },
                        Segment { label: "Unattributed".into(), value: f(c.unattributed), hover: m(c.unattributed), colour: "#9467bd" },
                        Segment { label: "Unallocated".into(), value: f(c.unallocated), hover: m(c.unallocated), colour: "#bbbbbb" },
                        Segment { label: "Sharing discount".into(), value: f(c.sharing_discount), hover: m(c.sharing_discount), colour: "#2ca02c" },
                        Segment { label: "Rounding residual".into(), value: f(c.rounding_residual.abs()), hover: m(c.rounding_residual), colour: "#d95f02" },
                    ]))
            }
        }
        section aria-labelledby="teams-h" {
            h2 id="teams-h" { "Cost by team" }
            @if report.teams.is_empty() {
                (empty_state())
            } @else {
                (charts::bars("team-cost", &format!("Cost by team, {month}"),
                    "One bar per team: what its invoice lines for the month add up to.",
                    &currency.code,
                    &report.teams.iter().map(|t| Bar {
                        label: t.team.clone(), value: f(t.cost), hover: format!("{}: {}", t.team, m(t.cost)),
                        colour: palette.colour(&t.team),
                    }).collect::<Vec<_>>()))
                div class="scroll" {
                    table {
                        caption { "Teams in " (month) }
                        thead { tr {
                            th scope="col" { "Team" }
                            th scope="col" class="num" { "Cost" }
                            th scope="col" class="num" { "GPU-equivalent hours" }
                            th scope="col" class="num" { "Slice-hours" }
                            th scope="col" class="num" { "Efficiency" }
                            th scope="col" class="num" { "Idle cost" }
                        } }
                        tbody {
                            @for t in &report.teams {
                                tr data-team=(t.team) {
                                    th scope="row" { a href=(format!("/ui/team/{}?month={month}", t.team)) { (t.team) } }
                                    td class="num" data-field="cost" { (m(t.cost)) }
                                    td class="num" data-field="gpu_equivalent_hours" { (number(t.gpu_equivalent_hours, 2)) }
                                    td class="num" data-field="slice_hours" { (number(t.slice_hours, 2)) }
                                    td class="num" data-field="efficiency" { (percent(t.efficiency)) }
                                    td class="num" data-field="idle_cost" { (t.idle_cost.map_or("unknown".to_owned(), m)) }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(u) = &report.unattributed {
            section aria-labelledby="unattributed-h" {
                h2 id="unattributed-h" { "Held by consumers no team claims" }
                p {
                    strong data-field="unattributed_cost" { (m(u.month.cost)) }
                    " of GPU slices were held by consumers no team claims: the platform carries it, and nobody is invoiced for it. "
                    "Give their namespace to a team (" code { "PUT /v1/teams/{team}" } ") or label their pods with "
                    code { "team" } "; later months then bill that team."
                }
                @if !u.consumers.is_empty() {
                    div class="scroll" {
                        table {
                            caption { "Consumers no team claims now, most held first" }
                            thead { tr {
                                th scope="col" { "Namespace" } th scope="col" { "Pod" } th scope="col" { "Container" }
                                th scope="col" { "Unix user" } th scope="col" { "Job" } th scope="col" class="num" { "Slice-hours" }
                            } }
                            tbody {
                                @for c in &u.consumers {
                                    tr data-unattributed="" {
                                        td { (c.namespace.as_deref().unwrap_or("—")) }
                                        td { (c.pod.as_deref().unwrap_or("—")) }
                                        td { (c.container.as_deref().unwrap_or("—")) }
                                        td { (c.unix_user.as_deref().unwrap_or("—")) }
                                        td { (c.job_id.as_deref().unwrap_or("—")) }
                                        td class="num" { (number(c.slice_hours, 1)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if !report.pending_corrections.is_empty() {
            section aria-labelledby="pending-h" {
                h2 id="pending-h" { "Pending corrections" }
                p { "Data that arrived after " (month) " was issued. Its invoices stay as they are; these amounts are billed once, as correction lines on the next open period's invoices." }
                div class="scroll" {
                    table {
                        caption { "Corrections waiting, by team" }
                        thead { tr { th scope="col" { "Team" } th scope="col" { "Line" } th scope="col" class="num" { "Slice-hours" } th scope="col" class="num" { "Amount" } } }
                        tbody {
                            @for p in &report.pending_corrections {
                                @for l in &p.lines {
                                    tr data-pending=(p.team) {
                                        td { (p.team) }
                                        td { (l.description) }
                                        td class="num" { (number(l.slice_hours, 2)) }
                                        td class="num" data-field="pending_amount" { (m(l.amount)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        section aria-labelledby="util-h" {
            h2 id="util-h" { "Allocation versus utilization" }
            (allocation_chart(month, daily, capacity))
        }
        section aria-labelledby="map-h" {
            h2 id="map-h" { "GPU map (last hour)" }
            (gpu_map(fleet, palette))
        }
        section aria-labelledby="invoices-h" {
            h2 id="invoices-h" { "Invoices for " (month) }
            @if report.state == PeriodState::Open {
                p class="empty" { (month) " has not ended: drafts can be made from " (month.end().format("%Y-%m-%d %H:%M UTC")) "." }
            } @else {
                form method="post" action="/ui/invoices/run" class="inline" {
                    input type="hidden" name="month" value=(month.to_string());
                    button type="submit" { "Make drafts for " (month) }
                }
                @if drafts > 0 {
                    " "
                    a class="button" href=(format!("/ui/invoices/issue?month={month}")) { "Issue all " (drafts) " drafts…" }
                }
            }
            (invoice_table(invoices, currency, true))
            p {
                "Exports: "
                a href=(format!("/ui/exports/focus?period={month}")) download { "FOCUS 1.0 CSV" }
                " · "
                a href=(format!("/ui/exports/erp?period={month}")) download { "ERP journal CSV" }
                " (every invoice of the month issued first)"
            }
        }
    }
}

fn allocation_chart(
    month: Month,
    daily: &usage::UsageReport,
    capacity: &[(chrono::DateTime<Utc>, Decimal)],
) -> Markup {
    if capacity.is_empty() {
        return html! { p class="empty" { "No GPU reported in this month." } };
    }
    let mut held: BTreeMap<chrono::DateTime<Utc>, Decimal> = BTreeMap::new();
    let mut used: BTreeMap<chrono::DateTime<Utc>, Decimal> = BTreeMap::new();
    for r in &daily.rows {
        *held.entry(r.bucket).or_default() += r.figures.gpu_equivalent_hours;
        *used.entry(r.bucket).or_default() +=
            r.figures.used_gpu_equivalent_hours.unwrap_or_default();
    }
    let days: Vec<String> = capacity
        .iter()
        .map(|(d, _)| d.format("%m-%d").to_string())
        .collect();
    let series = |name: &str, colour: &'static str, values: Vec<Decimal>| Series {
        name: name.to_owned(),
        colour,
        hovers: capacity
            .iter()
            .zip(&values)
            .map(|((d, _), v)| format!("{} {name}: {} GPU-hours", d.date_naive(), number(*v, 1)))
            .collect(),
        values: values.iter().map(|v| f(*v)).collect(),
    };
    let cap: Vec<Decimal> = capacity.iter().map(|(_, h)| *h).collect();
    let alloc: Vec<Decimal> = capacity
        .iter()
        .map(|(d, _)| held.get(d).copied().unwrap_or_default())
        .collect();
    let busy: Vec<Decimal> = capacity
        .iter()
        .map(|(d, _)| used.get(d).copied().unwrap_or_default())
        .collect();
    let total_cap: Decimal = cap.iter().sum();
    let total_alloc: Decimal = alloc.iter().sum();
    let total_busy: Decimal = busy.iter().sum();
    let share = |x: Decimal| (total_cap > Decimal::ZERO).then(|| x / total_cap);
    html! {
        p data-field="utilization-summary" {
            "Of " (number(total_cap, 0)) " GPU-hours in " (month) ", "
            strong { (percent(share(total_alloc))) " were allocated" }
            " (blocked by a slice) and "
            strong { (percent(share(total_busy))) " were busy" } "."
        }
        (charts::lines("allocation", &format!("Allocation and utilization per day, {month}"),
            "GPU-hours present, allocated to slices, and actually busy, day by day.",
            "GPU-hours", &days,
            &[series("present", "#666666", cap), series("allocated", "#1f77b4", alloc), series("busy", "#d95f02", busy)]))
    }
}

fn gpu_map(rows: &[db::fleet::FleetSliceRow], palette: &Palette) -> Markup {
    if rows.is_empty() {
        return empty_state();
    }
    let w = ShareWeights::default();
    let mut gpus: Vec<GpuBar> = Vec::new();
    let mut last = None;
    for r in rows {
        if last.as_deref() != Some(r.gpu_uuid.as_str()) {
            gpus.push(GpuBar {
                label: format!("{} · {}", r.node, r.model.trim_start_matches("NVIDIA ")),
                slices: Vec::new(),
            });
            last = Some(r.gpu_uuid.clone());
        }
        let (Some(kind), Some(cs), Some(ms)) = (&r.kind, r.compute_share, r.memory_share) else {
            continue;
        };
        // Time-sliced replicas reserve nothing: below they share their GPU's bar equally.
        let share = if kind != "timeslice" {
            f(w.compute * cs + w.memory * ms)
        } else {
            0.0
        };
        let what = match (kind.as_str(), &r.profile) {
            ("mig", Some(p)) => format!("MIG {p}"),
            (k, _) => k.to_owned(),
        };
        let gpu = gpus.last_mut().expect("pushed above");
        gpu.slices.push(SliceMark {
            share,
            team: r.holder_team.clone(),
            hover: match &r.holder_team {
                Some(t) => format!(
                    "{what}: held by {t}{}",
                    r.holder_pod
                        .as_deref()
                        .map(|p| format!(" ({p})"))
                        .unwrap_or_default()
                ),
                None => format!("{what}: free"),
            },
        });
    }
    for g in &mut gpus {
        let unreserved = g.slices.iter().filter(|s| s.share == 0.0).count();
        if unreserved > 0 {
            for s in g.slices.iter_mut().filter(|s| s.share == 0.0) {
                s.share = 1.0 / unreserved as f64;
            }
        }
    }
    charts::gpu_map("gpu-map", &gpus, palette)
}

fn invoice_table(invoices: &[Invoice], currency: &Currency, can_issue: bool) -> Markup {
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
                                td { (i.number.as_deref().unwrap_or("draft")) }
                                td data-field="status" { (i.status) @if i.kind == "credit_note" { " (credit note)" } }
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
                                        @if i.status == "draft" {
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
    cost: Option<Decimal>,
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
    let exists = db::teams::list(&state.pool, Some(&team)).await?;
    let Some(info) = exists.into_iter().next() else {
        return Err(UiError::NotFound);
    };
    let month = q.month()?;
    let cards = db::billing::rate_cards(&state.pool).await?;
    let report =
        billing::monthly_report(&state.pool, month, Utc::now(), Some(team.as_str())).await?;
    let currency = currency_of(&report, &cards);
    let row = report.teams.first();

    // The last twelve months: what was invoiced, or what the month comes to now.
    let invoices = db::invoices::list(&state.pool, None, Some(&team)).await?;
    let mut history = Vec::new();
    for k in (0..12).rev() {
        let m = month.minus(k);
        let invoiced = invoices
            .iter()
            .filter(|i| i.period == m && i.kind == "invoice" && i.status != "void")
            .map(|i| i.total)
            .next();
        let cost = match invoiced {
            Some(total) => total,
            None if m == month => row.map(|r| r.cost).unwrap_or_default(),
            None => billing::period_bill(&state.pool, m)
                .await
                .map(|(b, _)| b.team_total(team.as_str()))
                .unwrap_or_default(),
        };
        history.push((m, cost, invoiced.is_some()));
    }

    let frozen = report.state == PeriodState::Issued;
    let slices = team_slice_lines(&state, &team, month, frozen, &cards).await?;
    let body = team_body(
        &info.display_name,
        &team,
        month,
        &report,
        &currency,
        &history,
        slices,
        &invoices,
        &q,
    );
    Ok(page(
        &format!("{} {month}", info.display_name),
        Some(&viewer),
        body,
    )
    .into_response())
}

async fn team_slice_lines(
    state: &AppState,
    team: &TeamId,
    month: Month,
    from_book: bool,
    cards: &BTreeMap<i64, crate::billing::rate_card::RateCard>,
) -> Result<Vec<SliceLine>, UiError> {
    let rows = db::ui::team_slices(&state.pool, team, month, from_book).await?;
    let mut by_slice: BTreeMap<String, (SliceLine, Decimal, Option<Decimal>, bool)> =
        BTreeMap::new();
    let gib = Decimal::from(1u64 << 30);
    for r in rows {
        let kind: SliceKind = r.kind.parse().map_err(|_| UiError::NotFound)?;
        let sums = OccupancySums {
            held_seconds: r.held_seconds,
            held_compute: r.held_seconds * r.compute_share,
            held_memory: r.held_seconds * r.memory_share,
            known_seconds: r.known_seconds,
            known_compute: r.known_seconds * r.compute_share,
            active_seconds: r.active_seconds,
            active_compute: r.active_seconds * r.compute_share,
            memory_gib_seconds: r.memory_byte_seconds / gib,
            memory_used: r.memory_byte_seconds * r.memory_share
                / Decimal::from(r.memory_reserved_bytes),
            windows: r.windows,
        };
        let card = r.rate_card.and_then(|c| cards.get(&c));
        let weights = card.map(|c| c.weights).unwrap_or_default();
        let charge = card.map(|card| {
            price(
                &UsageAggregate {
                    team: team.to_string(),
                    model: r.model.clone(),
                    kind,
                    profile: r.profile.clone(),
                    rate_card: card.id,
                    slices: 1,
                    sums,
                },
                card,
            )
        });
        let held_eq = sums.held_equivalent(kind.is_reserved(), &weights) / Decimal::from(3600);
        let used_eq = sums
            .used_equivalent(kind.is_reserved(), &weights)
            .map(|u| u / Decimal::from(3600));
        let e = by_slice.entry(r.slice_uuid.clone()).or_insert_with(|| {
            (
                SliceLine {
                    slice: r.slice_uuid.clone(),
                    model: r.model.clone(),
                    kind: r.kind.clone(),
                    profile: r.profile.clone(),
                    node: r.node.clone(),
                    held_hours: Decimal::ZERO,
                    gpu_eq_hours: Decimal::ZERO,
                    memory_used_gib: Decimal::ZERO,
                    memory_reserved_gib: Decimal::from(r.memory_reserved_bytes) / gib,
                    active_hours: Some(Decimal::ZERO),
                    efficiency: None,
                    cost: Some(Decimal::ZERO),
                },
                Decimal::ZERO,
                Some(Decimal::ZERO),
                true,
            )
        });
        e.0.held_hours += r.held_seconds / Decimal::from(3600);
        e.0.gpu_eq_hours += held_eq;
        e.0.memory_used_gib += r.memory_byte_seconds / gib;
        if r.known_seconds < r.held_seconds {
            e.0.active_hours = None;
        } else if let Some(a) = &mut e.0.active_hours {
            *a += r.active_seconds / Decimal::from(3600);
        }
        e.0.cost = match (e.0.cost, charge) {
            (Some(c), Some(ch)) => Some(c + ch.amount),
            _ => None,
        };
        e.1 += held_eq;
        e.2 = match (e.2, used_eq) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
    Ok(by_slice
        .into_values()
        .map(|(mut line, held, used, _)| {
            // Average memory used over the held time, against what the slice reserves.
            let held_s = line.held_hours * Decimal::from(3600);
            line.memory_used_gib = if held_s > Decimal::ZERO {
                line.memory_used_gib / held_s
            } else {
                Decimal::ZERO
            };
            line.efficiency = used.filter(|_| held > Decimal::ZERO).map(|u| u / held);
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
    history: &[(Month, Decimal, bool)],
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
        .filter_map(|s| Some(s.cost? * (Decimal::ONE - s.efficiency?)))
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
                    label: mo.to_string()[2..].to_owned(), value: f(*cost),
                    hover: format!("{mo}: {}{}", m(*cost), if *invoiced { " (invoiced)" } else { "" }),
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
                                    td class="num" { (number(s.memory_used_gib, 1)) " / " (number(s.memory_reserved_gib, 1)) " GiB" }
                                    td class="num" { (s.active_hours.map_or("unknown".to_owned(), |a| number(a, 1))) " / " (number(s.held_hours, 1)) " h" }
                                    td class="num" { (percent(s.efficiency)) }
                                    td class="num" { (s.cost.map_or("no rate card".to_owned(), |c| m(currency.round(c)))) }
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
        .map_err(|e: String| UiError::Api(crate::http::error::ApiError::bad_request(e)))
}

/// A form the server would not carry out: the page says why, in the server's words.
fn refused(e: billing::Error) -> UiError {
    match crate::http::error::ApiError::from(e) {
        crate::http::error::ApiError::Conflict { message, .. } => UiError::Refused(message),
        crate::http::error::ApiError::NotFound(_) => UiError::NotFound,
        other => UiError::Api(other),
    }
}

/// The confirmation before one invoice is issued: it cannot be changed afterwards.
pub async fn confirm_issue_invoice(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Path(id): Path<i64>,
) -> Result<Response, UiError> {
    require_finance(&viewer, "issue invoices")?;
    let invoice = db::invoices::get(&state.pool, id)
        .await?
        .filter(|i| i.status == "draft")
        .ok_or(UiError::NotFound)?;
    let cards = db::billing::rate_cards(&state.pool).await?;
    let currency = cards
        .values()
        .last()
        .map(|c| c.currency.clone())
        .unwrap_or_else(|| Currency::parse(&invoice.currency).expect("a stored currency"));
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
    let drafts: Vec<Invoice> = db::invoices::list(&state.pool, Some(month), None)
        .await?
        .into_iter()
        .filter(|i| i.status == "draft")
        .collect();
    let cards = db::billing::rate_cards(&state.pool).await?;
    let currency = cards
        .values()
        .last()
        .map(|c| c.currency.clone())
        .unwrap_or_else(|| Currency::parse("USD").expect("USD exists"));
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
    invoices::invoice_response(&state, &viewer, &id)
        .await
        .map_err(|e| match e {
            crate::http::error::ApiError::NotFound(_) => UiError::NotFound,
            other => UiError::Api(other),
        })
}

#[derive(Deserialize)]
pub struct PeriodQuery {
    period: String,
}

pub async fn focus_export(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Query(q): Query<PeriodQuery>,
) -> Result<Response, UiError> {
    let month: Month = q
        .period
        .parse()
        .map_err(|e: String| UiError::Api(crate::http::error::ApiError::bad_request(e)))?;
    Ok(exports::focus_response(&state, &viewer, month).await?)
}

pub async fn erp_export(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Query(q): Query<PeriodQuery>,
) -> Result<Response, UiError> {
    let month: Month = q
        .period
        .parse()
        .map_err(|e: String| UiError::Api(crate::http::error::ApiError::bad_request(e)))?;
    Ok(exports::erp_response(&state, &viewer, month).await?)
}
