//! The fleet page (finance, admin): the month's cost and where it went, allocation against use day
//! by day, the GPUs and their slices now, and the month's invoices. Figures come from the same
//! services as the API's, so the page and `/v1/reports/monthly` agree to the cent; numbers carry
//! `data-field` attributes so that tests can read them.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use maud::{Markup, html};
use rust_decimal::Decimal;

use super::charts::{self, Bar, GpuBar, Palette, Segment, Series, SliceMark};
use super::format::{money, number, percent};
use super::handovers;
use super::layout::{
    MonthQuery, UiError, Viewer, currency_of, done_message, empty_state, f, invoice_table,
    month_form, page, state_text,
};
use super::over_time;
use crate::billing::invoice::{Invoice, InvoiceStatus};
use crate::billing::period::PeriodState;
use crate::billing::rate_card::Currency;
use crate::billing::service as billing;
use crate::domain::access::Principal;
use crate::domain::slice::{ShareWeights, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::fleet::{self, FleetSliceRow, LastPresent};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::reports::allocation::DayAllocation;
use crate::reports::monthly::MonthlyReport;
use crate::reports::service as reports;
use crate::teams;

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
    let report =
        reports::monthly_report(&state.pool, &state.reports, month, Utc::now(), None).await;
    let cards = billing::rate_cards(&state.pool).await?;
    let invoices = billing::invoices(&state.pool, Some(month), None).await?;
    let done = done_message(&q, month, &invoices);
    let body = match report {
        Err(e) => html! {
            h1 { "Fleet " (month) }
            (month_form("/ui/fleet", month))
            p class="error" role="alert" { (e.to_string()) }
        },
        Ok(report) => {
            let currency = currency_of(&report, &cards);
            // The fleet's day by day, whoever held it.
            let daily = state
                .allocation
                .get(&state.pool, &state.reports, month)
                .await
                .map_err(ApiError::from)?;
            let fleet = fleet::slices(&state.pool, Utc::now(), LastPresent::Skipped).await?;
            let teams = teams::list(&state.pool, None).await?;
            let palette = Palette::new(teams.iter().map(|t| t.team_id.as_str()));
            let map = MapView {
                month,
                model: q.model.clone().filter(|m| !m.is_empty()),
                node: q.node.clone().filter(|n| !n.is_empty()),
                per_gpu_limit: state.config.gpu_map_per_gpu,
            };
            let now = Utc::now();
            let range = over_time::CostRange::of(&q, now)?;
            let over = over_time::read(&state, range, None, now).await?;
            let handovers = handovers::of_month(&state.pool, month).await?;
            html! {
                (fleet_body(
                    month,
                    &map,
                    &report,
                    &currency,
                    &daily.days,
                    &daily.capacity,
                    &fleet,
                    &invoices,
                    &palette,
                    done.as_deref(),
                ))
                (handovers::fleet_notice(month, &handovers))
                (over_time::section(&format!("/ui/fleet?month={month}"), &over, &currency,
                    Some(&palette), None, None, now))
            }
        }
    };
    Ok(page(&format!("Fleet {month}"), Some(&viewer), body).into_response())
}

#[allow(clippy::too_many_arguments)]
// long: the fleet page's markup, in the order the page shows it
fn fleet_body(
    month: Month,
    map: &MapView,
    report: &MonthlyReport,
    currency: &Currency,
    daily: &BTreeMap<chrono::DateTime<Utc>, DayAllocation>,
    capacity: &[(chrono::DateTime<Utc>, Decimal)],
    fleet: &[FleetSliceRow],
    invoices: &[Invoice],
    palette: &Palette,
    done: Option<&str>,
) -> Markup {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let c = report.conservation.as_ref();
    let drafts = invoices
        .iter()
        .filter(|i| i.status == InvoiceStatus::Draft)
        .count();
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
                        ("Of which placeable", "placeable", c.placeable),
                        ("Of which stranded", "stranded", c.stranded),
                        ("Sharing discount", "sharing_discount", c.sharing_discount),
                        ("Rounding residual", "rounding_residual", c.rounding_residual),
                    ] {
                        div class="card" {
                            div class="label" { (label) }
                            div class="value" data-field=(field) { (m(value)) }
                        }
                    }
                }
                p { "Fleet cost = team charges + unattributed + unallocated + sharing discount + rounding residual, to the cent. "
                    "Unallocated = placeable (a valid instance or share could still be given out) + stranded (what the cards' layouts leave to no profile or share: the price of a layout, which a new layout frees)." }
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
                        label: t.team.to_string(), value: f(t.cost), hover: format!("{}: {}", t.team, m(t.cost)),
                        colour: palette.colour(t.team.as_str()),
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
            (gpu_map(fleet, palette, map))
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
                a href=(format!("/ui/exports/focus?period={month}")) download { "FOCUS 1.2 CSV" }
                " · "
                a href=(format!("/ui/exports/erp?period={month}")) download { "ERP journal CSV" }
                " (every invoice of the month issued first)"
            }
        }
    }
}

fn allocation_chart(
    month: Month,
    daily: &BTreeMap<chrono::DateTime<Utc>, DayAllocation>,
    capacity: &[(chrono::DateTime<Utc>, Decimal)],
) -> Markup {
    if capacity.is_empty() {
        return html! { p class="empty" { "No GPU reported in this month." } };
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
        .map(|(d, _)| daily.get(d).map(|a| a.held).unwrap_or_default())
        .collect();
    let busy: Vec<Decimal> = capacity
        .iter()
        .map(|(d, _)| daily.get(d).map(|a| a.busy).unwrap_or_default())
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

/// Which GPUs the map shows, and how many it draws one by one.
pub struct MapView {
    pub month: Month,
    pub model: Option<String>,
    pub node: Option<String>,
    /// Past this many GPUs, the map draws a bar per GPU model (or, within a model, per node), each
    /// linking to the GPUs behind it: the page stays small whatever the fleet.
    pub per_gpu_limit: usize,
}

impl MapView {
    fn link(&self, key: &str, value: &str) -> String {
        let mut url = form_urlencoded::Serializer::new(String::new());
        url.append_pair("month", &self.month.to_string());
        url.append_pair(key, value);
        format!("/ui/fleet?{}#map-h", url.finish())
    }
}

/// A GPU's bar, with what the map groups it by.
struct PlacedGpu {
    model: String,
    node: String,
    bar: GpuBar,
}

fn gpu_map(rows: &[FleetSliceRow], palette: &Palette, view: &MapView) -> Markup {
    let gpus: Vec<PlacedGpu> = gpu_bars(rows, view.month)
        .into_iter()
        .filter(|g| view.node.as_ref().is_none_or(|n| *n == g.node))
        .filter(|g| view.model.as_ref().is_none_or(|m| *m == g.model))
        .collect();
    if gpus.is_empty() {
        return empty_state();
    }
    let scope = match (&view.node, &view.model) {
        (Some(n), _) => Some(format!("node {n}")),
        (None, Some(m)) => Some(m.clone()),
        (None, None) => None,
    };
    // One bar per GPU while they are few (or one node's), else one per model or node.
    let per_gpu = gpus.len() <= view.per_gpu_limit || view.node.is_some();
    let (what, bars): (&str, Vec<GpuBar>) = if per_gpu {
        ("GPU", gpus.into_iter().map(|g| g.bar).collect())
    } else if view.model.is_none() {
        (
            "GPU model",
            grouped(gpus, |g| g.model.clone(), |k| view.link("model", k)),
        )
    } else {
        (
            "node",
            grouped(gpus, |g| g.node.clone(), |k| view.link("node", k)),
        )
    };
    html! {
        @if scope.is_some() || !per_gpu {
            p class="map-scope" data-map-rows=(what) {
                "One bar per " (what)
                @if let Some(s) = &scope { " of " (s) }
                @if !per_gpu {
                    " (" (bars.len()) " bars), cut by team at the GPUs' average share; follow a bar's label for the GPUs behind it."
                }
                @if scope.is_some() {
                    " " a href=(format!("/ui/fleet?month={}#map-h", view.month)) { "The whole fleet" }
                }
            }
        }
        (charts::gpu_map("gpu-map", &bars, palette))
    }
}

/// One bar per group of GPUs: each team's slices as the group's average share of a GPU, the
/// rest grey.
fn grouped(
    gpus: Vec<PlacedGpu>,
    key: impl Fn(&PlacedGpu) -> String,
    link: impl Fn(&str) -> String,
) -> Vec<GpuBar> {
    let mut groups: BTreeMap<String, (usize, BTreeMap<TeamId, f64>)> = BTreeMap::new();
    for g in &gpus {
        let (count, teams) = groups.entry(key(g)).or_default();
        *count += 1;
        for s in &g.bar.slices {
            if let Some(t) = &s.team {
                *teams.entry(t.clone()).or_default() += s.share;
            }
        }
    }
    groups
        .into_iter()
        .map(|(k, (count, teams))| {
            let held: f64 = teams.values().sum::<f64>() / count as f64;
            let mut slices: Vec<SliceMark> = teams
                .into_iter()
                .map(|(team, share)| SliceMark {
                    share: share / count as f64,
                    hover: format!(
                        "{team}: {} of {count} GPUs' capacity",
                        percent_of(share / count as f64)
                    ),
                    team: Some(team),
                })
                .collect();
            slices.push(SliceMark {
                share: (1.0 - held).max(0.0),
                team: None,
                hover: format!("free: {}", percent_of((1.0 - held).max(0.0))),
            });
            GpuBar {
                label: format!(
                    "{} · {count} GPU{}",
                    k.trim_start_matches("NVIDIA "),
                    if count == 1 { "" } else { "s" }
                ),
                link: Some(link(&k)),
                slices,
            }
        })
        .collect()
}

fn percent_of(share: f64) -> String {
    format!("{:.0} %", share * 100.0)
}

/// Each GPU as a bar cut into its slices, its label linking to its ledger of `month` (CSV).
fn gpu_bars(rows: &[FleetSliceRow], month: Month) -> Vec<PlacedGpu> {
    let w = ShareWeights::default();
    let mut gpus: Vec<PlacedGpu> = Vec::new();
    let mut last = None;
    for r in rows {
        if last.as_deref() != Some(r.gpu_uuid.as_str()) {
            gpus.push(PlacedGpu {
                model: r.model.clone(),
                node: r.node.clone(),
                bar: GpuBar {
                    label: format!("{} · {}", r.node, r.model.trim_start_matches("NVIDIA ")),
                    link: Some(format!(
                        "/ui/gpus/{}/ledger?month={month}",
                        form_urlencoded::byte_serialize(r.gpu_uuid.as_bytes()).collect::<String>()
                    )),
                    slices: Vec::new(),
                },
            });
            last = Some(r.gpu_uuid.clone());
        }
        let (Some(kind), Some(cs), Some(ms)) = (r.kind, r.compute_share, r.memory_share) else {
            continue;
        };
        // Time-sliced replicas reserve nothing: below they share their GPU's bar equally.
        let share = if kind.is_reserved() {
            f(w.weigh(cs, ms))
        } else {
            0.0
        };
        let what = match (kind, &r.profile) {
            (SliceKind::Mig, Some(p)) => format!("MIG {p}"),
            (k, _) => k.as_str().to_owned(),
        };
        let gpu = &mut gpus.last_mut().expect("pushed above").bar;
        gpu.slices.push(SliceMark {
            share,
            team: r.consumer_team.clone(),
            hover: match &r.consumer_team {
                Some(t) => format!(
                    "{what}: held by {t}{}",
                    r.consumer_pod
                        .as_deref()
                        .map(|p| format!(" ({p})"))
                        .unwrap_or_default()
                ),
                None => format!("{what}: free"),
            },
        });
    }
    for g in &mut gpus {
        let slices = &mut g.bar.slices;
        let unreserved = slices.iter().filter(|s| s.share == 0.0).count();
        if unreserved > 0 {
            for s in slices.iter_mut().filter(|s| s.share == 0.0) {
                s.share = 1.0 / unreserved as f64;
            }
        }
    }
    gpus
}
