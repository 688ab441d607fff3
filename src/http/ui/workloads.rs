//! The team page's workload table: a row per workload and slice (model, kind, profile) of a month,
//! its cost from the usage report (the invoice lines' figures, `reports::usage`), its memory p99
//! and compute from the month's hourly rollups (`plan::store::evidence`), and what right-sizing
//! advises for it now; sortable, and the same rows as a CSV.

use std::cmp::Ordering;
use std::collections::HashMap;

use maud::{Markup, html};
use rust_decimal::Decimal;

use super::format::{money, number, percent};
use super::layout::IDLE_EFFICIENCY;
use super::layout::{MonthQuery, UiError};
use super::savings;
use crate::billing::rate_card::Currency;
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::domain::text::spreadsheet_safe;
use crate::domain::time::Month;
use crate::http::state::AppState;
use crate::plan::Evidence;
use crate::plan::recommend::Recommendation;
use crate::reports::service as reports;
use crate::reports::usage::{Dimension, GroupBy, Step, UsageReport, UsageTotal};

/// One workload's slices of one model, kind and profile in a month.
#[derive(Debug, Clone)]
pub struct WorkloadLine {
    pub namespace: Option<String>,
    pub workload: Option<String>,
    /// `Deployment`, `Job`, ... where the rollups name it.
    pub workload_kind: Option<String>,
    pub model: String,
    pub kind: String,
    pub profile: Option<String>,
    pub held_hours: Decimal,
    pub cost: Option<Decimal>,
    pub idle_cost: Option<Decimal>,
    pub efficiency: Option<Decimal>,
    /// Compute-active over measured hours.
    pub compute_busy: Option<Decimal>,
    pub memory_p99_bytes: Option<i64>,
    pub memory_reserved_bytes: Option<i64>,
    /// What right-sizing advises now (`Move to 1g.10gb`, `Give it back`), and the monthly saving.
    pub advice: Option<(String, Option<Decimal>)>,
}

impl WorkloadLine {
    pub fn is_timeslice(&self) -> bool {
        self.kind == SliceKind::Timeslice.as_str()
    }

    /// Held but idle: a reservation under [`IDLE_EFFICIENCY`].
    pub fn is_idle(&self) -> bool {
        !self.is_timeslice() && self.efficiency.is_some_and(|e| e < IDLE_EFFICIENCY)
    }

    fn name(&self) -> String {
        format!(
            "{} / {}",
            self.namespace.as_deref().unwrap_or("—"),
            self.workload.as_deref().unwrap_or("—")
        )
    }

    fn slice(&self) -> String {
        let model = self.model.trim_start_matches("NVIDIA ");
        match &self.profile {
            Some(p) => format!("{model} {} {p}", self.kind),
            None => format!("{model} {}", self.kind),
        }
    }
}

/// The dimensions of the table's rows.
fn group_by() -> GroupBy {
    GroupBy::of(vec![
        Dimension::Namespace,
        Dimension::Workload,
        Dimension::GpuModel,
        Dimension::Kind,
        Dimension::Profile,
    ])
}

/// The team's usage of `month` by workload, priced: what [`lines`] are made of.
pub async fn usage(
    state: &AppState,
    team: &TeamId,
    month: Month,
) -> Result<UsageReport, crate::billing::service::Error> {
    reports::usage_report(
        &state.pool,
        &state.reports,
        month.start(),
        month.end(),
        &group_by(),
        Step::Month,
        Some(team),
    )
    .await
}

/// The team's workload lines of its month's [`usage`], each with its `evidence` (the month's)
/// and `recs` (right-sizing now) beside it.
pub fn lines(
    report: &UsageReport,
    evidence: &[Evidence],
    recs: &[Recommendation],
) -> Vec<WorkloadLine> {
    // Each row finds its evidence and advice by key, the first of each key as SQL ordered them:
    // a team can have thousands of workloads.
    let mut by_key: HashMap<Key<'_>, &Evidence> = HashMap::new();
    for e in evidence {
        by_key
            .entry((
                e.namespace.as_deref(),
                &e.workload,
                &e.model,
                e.kind.as_str(),
                e.profile.as_deref(),
            ))
            .or_insert(e);
    }
    let mut advice: HashMap<Key<'_>, &Recommendation> = HashMap::new();
    for r in recs {
        advice
            .entry((
                r.namespace.as_deref(),
                &r.workload,
                &r.gpu_model,
                r.kind.as_str(),
                r.profile.as_deref(),
            ))
            .or_insert(r);
    }
    report
        .totals
        .iter()
        .map(|t| line(t, &by_key, &advice))
        .collect()
}

/// Namespace, workload, GPU model, slice kind and profile.
type Key<'a> = (Option<&'a str>, &'a str, &'a str, &'a str, Option<&'a str>);

fn line(
    t: &UsageTotal,
    evidence: &HashMap<Key<'_>, &Evidence>,
    recs: &HashMap<Key<'_>, &Recommendation>,
) -> WorkloadLine {
    let value = |k: &str| t.key.get(k).cloned().flatten();
    let (namespace, workload) = (value("namespace"), value("workload"));
    let model = value("gpu_model").unwrap_or_default();
    let kind = value("kind").unwrap_or_default();
    // The profile dimension names the kind where there is no MIG profile.
    let profile = value("profile").filter(|p| *p != kind);
    let (e, r) = match &workload {
        Some(w) => {
            let key = (
                namespace.as_deref(),
                w.as_str(),
                model.as_str(),
                kind.as_str(),
                profile.as_deref(),
            );
            (evidence.get(&key).copied(), recs.get(&key).copied())
        }
        None => (None, None),
    };
    let f = &t.figures;
    let measured = f.slice_hours - f.compute_unknown_hours;
    WorkloadLine {
        namespace,
        workload,
        workload_kind: e.map(|e| e.workload_kind.clone()),
        profile,
        held_hours: f.slice_hours,
        cost: f.cost,
        idle_cost: f.idle_cost,
        efficiency: f.efficiency,
        compute_busy: (measured > Decimal::ZERO).then(|| f.compute_active_hours / measured),
        memory_p99_bytes: e.map(|e| e.memory_p99_bytes),
        memory_reserved_bytes: e
            .map(|e| e.memory_reserved_bytes)
            .filter(|_| kind != SliceKind::Timeslice.as_str()),
        // The same step, in the same words, as the page's "what to do first".
        advice: r.and_then(savings::step).map(|s| (s.what, s.monthly)),
        model,
        kind,
    }
}

/// The keys the table sorts by, as its headings' links name them.
pub const SORT_KEYS: [&str; 7] = [
    "workload",
    "slice",
    "cost",
    "efficiency",
    "idle",
    "saving",
    "held",
];

/// Rows a page of the table shows: the costliest 20 first.
pub const PAGE_ROWS: usize = 20;

/// How the table is asked for in a link: sorted by a key, which way, and which page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOrder {
    pub sort: &'static str,
    pub desc: bool,
    /// 1, 2, ...; none: every row.
    pub page: Option<usize>,
}

impl TableOrder {
    /// The order `q` asks for (by cost, largest first, the first page, by default); a value the
    /// table cannot take is refused, naming its parameter.
    pub fn of(q: &MonthQuery) -> Result<TableOrder, UiError> {
        let sort = match q.sort.as_deref() {
            None => "cost",
            Some(s) => SORT_KEYS.iter().copied().find(|k| *k == s).ok_or_else(|| {
                UiError::Invalid(format!("sort: must be one of {}", SORT_KEYS.join(", ")))
            })?,
        };
        let desc = match q.dir.as_deref() {
            None | Some("desc") => true,
            Some("asc") => false,
            Some(_) => return Err(UiError::Invalid("dir: must be asc or desc".into())),
        };
        let page = match q.page.as_deref() {
            None => Some(1),
            Some("all") => None,
            Some(p) => Some(p.parse::<usize>().ok().filter(|p| *p >= 1).ok_or_else(|| {
                UiError::Invalid("page: must be a whole number from 1, or all".into())
            })?),
        };
        Ok(TableOrder { sort, desc, page })
    }

    pub fn dir(&self) -> &'static str {
        if self.desc { "desc" } else { "asc" }
    }

    /// The rows of `lines` (sorted) this page shows; a page past the last is refused.
    pub fn rows<'a>(&self, lines: &'a [WorkloadLine]) -> Result<&'a [WorkloadLine], UiError> {
        let Some(page) = self.page else {
            return Ok(lines);
        };
        let pages = lines.len().div_ceil(PAGE_ROWS).max(1);
        if page > pages {
            return Err(UiError::Invalid(format!(
                "page: the table has {pages} page{} of {PAGE_ROWS} rows",
                if pages == 1 { "" } else { "s" }
            )));
        }
        let from = (page - 1) * PAGE_ROWS;
        Ok(&lines[from..lines.len().min(from + PAGE_ROWS)])
    }
}

/// Sorts by `key` (`cost` when unknown), largest first unless `desc` is false; ties by name.
pub fn sort(lines: &mut [WorkloadLine], key: &str, desc: bool) {
    let saving = |l: &WorkloadLine| l.advice.as_ref().and_then(|a| a.1);
    lines.sort_by(|a, b| {
        let o: Ordering = match key {
            "workload" => a.name().cmp(&b.name()),
            "slice" => a.slice().cmp(&b.slice()),
            "efficiency" => a.efficiency.cmp(&b.efficiency),
            "idle" => a.idle_cost.cmp(&b.idle_cost),
            "saving" => saving(a).cmp(&saving(b)),
            "held" => a.held_hours.cmp(&b.held_hours),
            _ => a.cost.cmp(&b.cost),
        };
        if desc { o.reverse() } else { o }
            .then_with(|| a.name().cmp(&b.name()))
            .then_with(|| a.slice().cmp(&b.slice()))
    });
}

fn gib(bytes: i64) -> String {
    number(Decimal::from(bytes) / Decimal::from(1u64 << 30), 1)
}

/// The table, its headings linking to `base` sorted by them.
pub fn table(
    lines: &[WorkloadLine],
    currency: &Currency,
    base: &str,
    sort: &str,
    desc: bool,
) -> Markup {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let cost = |c: Option<Decimal>| c.map_or("not priced".to_owned(), m);
    let header = |key: &str, label: &str, numeric: bool| {
        let active = sort == key;
        let next_dir = if active && desc { "asc" } else { "desc" };
        let aria = match (active, desc) {
            (false, _) => "none",
            (true, true) => "descending",
            (true, false) => "ascending",
        };
        html! {
            th scope="col" class=[numeric.then_some("num")] aria-sort=(aria) {
                a href=(format!("{base}&sort={key}&dir={next_dir}")) { (label) }
            }
        }
    };
    html! {
        table class="responsive" data-table="workloads" {
            caption { "Each workload's slices; highlighted rows used under " (percent(Some(IDLE_EFFICIENCY)))
                      " of what they held. Select a heading to sort." }
            thead { tr {
                (header("workload", "Workload", false))
                (header("slice", "Slice", false))
                (header("cost", "Cost", true))
                (header("efficiency", "Efficiency", true))
                (header("idle", "Idle cost", true))
                (header("saving", "Advice, saving / month", true))
                (header("held", "Held hours", true))
                th scope="col" class="num" { "Memory p99 / reserved" }
                th scope="col" class="num" { "Compute busy" }
            } }
            tbody {
                @for l in lines {
                    tr class=[l.is_idle().then_some("idle")]
                       data-workload=(l.workload.as_deref().unwrap_or(""))
                       data-kind=(l.kind) {
                        td data-label="Workload" { (l.name())
                             @if let Some(k) = &l.workload_kind { " " span class="muted" { "(" (k) ")" } } }
                        td data-label="Slice" { (l.slice()) }
                        td class="num" data-label="Cost" data-field="cost" { (cost(l.cost)) }
                        // A time-sliced replica reserves nothing: it pays for what it uses.
                        @if l.is_timeslice() {
                            td class="num" data-label="Efficiency" data-field="efficiency" { "pay-per-use" }
                            td class="num" data-label="Idle cost" data-field="idle-cost" { "—" }
                        } @else {
                            td class="num" data-label="Efficiency" data-field="efficiency" { (percent(l.efficiency)) }
                            td class="num" data-label="Idle cost" data-field="idle-cost" { (l.idle_cost.map_or("unknown".to_owned(), m)) }
                        }
                        td class="num" data-label="Advice, saving / month" data-field="saving" {
                            @match &l.advice {
                                Some((what, saving)) => { (what) @if let Some(s) = saving { ": " (m(*s)) } }
                                None => { "—" }
                            }
                        }
                        td class="num" data-label="Held hours" { (number(l.held_hours, 1)) }
                        td class="num" data-label="Memory p99 / reserved" {
                            (l.memory_p99_bytes.map_or("unknown".to_owned(), gib)) " / "
                            (l.memory_reserved_bytes.map_or("none reserved".to_owned(), |b| gib(b) + " GiB"))
                        }
                        td class="num" data-label="Compute busy" { (percent(l.compute_busy)) }
                    }
                }
            }
        }
    }
}

/// Which rows of `total` a page shows and the links to the others, each keeping `base`'s month
/// and the table's order.
pub fn pager(total: usize, order: &TableOrder, base: &str) -> Markup {
    let link = |page: &str| format!("{base}&sort={}&dir={}&page={page}", order.sort, order.dir());
    let pages = total.div_ceil(PAGE_ROWS).max(1);
    html! {
        nav class="pager" aria-label="Pages of the workload table" data-field="pager" {
            @match order.page {
                None => {
                    "All " (total) " rows. "
                    @if total > PAGE_ROWS { a href=(link("1")) { "Show the top " (PAGE_ROWS) } }
                }
                Some(p) => {
                    @let from = (p - 1) * PAGE_ROWS + 1;
                    @let to = total.min(p * PAGE_ROWS);
                    "Rows " (from) "–" (to) " of " (total) ". "
                    @if p > 1 { a href=(link(&(p - 1).to_string())) rel="prev" { "Previous " (PAGE_ROWS) } " " }
                    @if p < pages { a href=(link(&(p + 1).to_string())) rel="next" { "Next " (PAGE_ROWS.min(total - to)) } " " }
                    @if pages > 1 { a href=(link("all")) data-field="show-all" { "Show all " (total) } }
                }
            }
        }
    }
}

/// The table as CSV, one record per row in the same order; text cells safe to open in a
/// spreadsheet, figures plain numbers.
pub fn to_csv(lines: &[WorkloadLine], currency: &Currency) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "namespace",
        "workload",
        "workload_kind",
        "gpu_model",
        "kind",
        "profile",
        "held_hours",
        "currency",
        "cost",
        "efficiency",
        "idle_cost",
        "memory_p99_gib",
        "memory_reserved_gib",
        "compute_busy",
        "advice",
        "monthly_saving",
    ])?;
    let text = |v: Option<&str>| spreadsheet_safe(v.unwrap_or_default()).into_owned();
    let num = |d: Option<Decimal>| d.map(|d| d.normalize().to_string()).unwrap_or_default();
    let gib =
        |b: Option<i64>| num(b.map(|b| (Decimal::from(b) / Decimal::from(1u64 << 30)).round_dp(3)));
    for l in lines {
        w.write_record([
            text(l.namespace.as_deref()),
            text(l.workload.as_deref()),
            text(l.workload_kind.as_deref()),
            text(Some(&l.model)),
            text(Some(&l.kind)),
            text(l.profile.as_deref()),
            num(Some(l.held_hours)),
            text(Some(&currency.code)),
            num(l.cost),
            num(l.efficiency.filter(|_| !l.is_timeslice())),
            num(l.idle_cost.filter(|_| !l.is_timeslice())),
            gib(l.memory_p99_bytes),
            gib(l.memory_reserved_bytes),
            num(l.compute_busy.map(|b| b.round_dp(4))),
            text(l.advice.as_ref().map(|a| a.0.as_str())),
            num(l.advice.as_ref().and_then(|a| a.1)),
        ])?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}
