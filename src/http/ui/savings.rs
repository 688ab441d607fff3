//! The team page's "what to do first": right-sizing's recommendations (`plan::recommend`, the
//! last 14 days, today's rate card) as steps a lead can take, the largest saving first, each with
//! its money a month and its evidence. It is the page's one source of advice: the workload table's
//! advice column says the same words for the same workload, and nothing else on the page judges a
//! workload.

use maud::{Markup, html};
use rust_decimal::Decimal;
use rust_decimal::prelude::FromPrimitive;

use super::format::{money, number, percent};
use crate::billing::rate_card::Currency;
use crate::plan::recommend::{Action, Recommendation, SharedAlternative};

pub use crate::plan::RIGHT_SIZING_DAYS;

/// One thing a lead can do about one workload's slices.
#[derive(Debug, Clone)]
pub struct Step<'a> {
    pub rec: &'a Recommendation,
    /// What to do, in words: `Give it back`, `Move to 1g.10gb`, `Share the card under MPS (...)`;
    /// under 7 days of data, followed by "if it stays so".
    pub what: String,
    /// What it saves a month (negative: what it costs more); none without a rate card in force.
    pub monthly: Option<Decimal>,
    /// Another way, with less isolation: its words and what it saves a month.
    pub or: Option<(String, Decimal)>,
    /// From fewer than 7 days of data: advice if the days so far hold.
    pub provisional: bool,
}

fn gib(bytes: i64) -> String {
    number(Decimal::from(bytes) / Decimal::from(1u64 << 30), 1)
}

fn ratio(f: Option<f64>) -> String {
    percent(f.and_then(Decimal::from_f64))
}

fn mps(a: &SharedAlternative) -> String {
    format!(
        "share the card under MPS ({} % of the threads, {} GiB pinned; less isolation)",
        a.active_thread_percentage,
        gib(a.pinned_memory_bytes)
    )
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// What `r` advises a lead to do, if anything: a slice given back, a smaller (or, short of
/// memory or compute, a larger) profile, or a share of the card under MPS; under 7 days of data,
/// what the days so far advise.
pub fn step(r: &Recommendation) -> Option<Step<'_>> {
    let (action, profile, delta, alt, provisional) = match (r.action, &r.so_far) {
        (Action::Wait, Some(s)) => (
            s.action,
            s.recommended_profile.as_deref(),
            s.monthly_delta,
            s.shared_alternative.as_ref(),
            true,
        ),
        (Action::Wait, None) => return None,
        (a, _) => (
            a,
            r.recommended_profile.as_deref(),
            r.monthly_delta,
            r.shared_alternative.as_ref(),
            false,
        ),
    };
    let (what, monthly, or) = match (action, profile, alt) {
        (Action::GiveBack, _, _) => ("Give it back".to_owned(), delta, None),
        (Action::Resize, Some(p), alt) => (
            format!("Move to {p}"),
            delta,
            // MPS as the other way only where it saves against today's slice too.
            alt.filter(|a| a.monthly_delta > Decimal::ZERO)
                .map(|a| (mps(a), a.monthly_delta)),
        ),
        (Action::Keep, _, Some(a)) => (capitalised(&mps(a)), Some(a.monthly_delta), None),
        _ => return None,
    };
    // Under 7 days only a saving is worth a lead's time: a short job that ran hot a day is no
    // case for a larger slice yet.
    if provisional && monthly.is_none_or(|m| m <= Decimal::ZERO) {
        return None;
    }
    let what = if provisional {
        format!("{what} if it stays so")
    } else {
        what
    };
    Some(Step {
        rec: r,
        what,
        monthly,
        or,
        provisional,
    })
}

/// Every step of `recs`, the largest saving first (a tie: the judged one first; what costs more
/// last).
pub fn steps(recs: &[Recommendation]) -> Vec<Step<'_>> {
    let mut out: Vec<Step<'_>> = recs.iter().filter_map(step).collect();
    out.sort_by(|a, b| {
        b.monthly
            .cmp(&a.monthly)
            .then_with(|| a.provisional.cmp(&b.provisional))
            .then_with(|| a.rec.workload.cmp(&b.rec.workload))
    });
    out
}

/// The evidence of `r` in a sentence: how busy, how much memory, over how many days.
pub fn evidence(r: &Recommendation) -> String {
    let busy = match (r.compute_busy, r.compute_p95) {
        (None, _) => "compute not measured".to_owned(),
        (Some(b), Some(p)) => format!("{} busy (p95 {})", ratio(Some(b)), ratio(Some(p))),
        (Some(b), None) => format!("{} busy", ratio(Some(b))),
    };
    let confidence = match r.action {
        Action::Wait => "too few days to be sure".to_owned(),
        _ => format!("{:?} confidence", r.confidence).to_lowercase(),
    };
    format!(
        "{busy} over {} day{}; memory p99 {} of {} GiB; {confidence}",
        r.days_of_data,
        if r.days_of_data == 1 { "" } else { "s" },
        gib(r.memory_p99_bytes),
        gib(r.memory_reserved_bytes),
    )
}

/// What the steps add up to a month: the judged ones, then those from fewer than 7 days.
pub struct Totals {
    pub judged: Decimal,
    pub provisional: Decimal,
    pub provisional_count: usize,
}

pub fn totals(steps: &[Step<'_>]) -> Totals {
    let positive = |s: &&Step<'_>| s.monthly.filter(|m| *m > Decimal::ZERO);
    Totals {
        judged: steps
            .iter()
            .filter(|s| !s.provisional)
            .filter_map(|s| positive(&s))
            .sum(),
        provisional: steps
            .iter()
            .filter(|s| s.provisional)
            .filter_map(|s| positive(&s))
            .sum(),
        provisional_count: steps
            .iter()
            .filter(|s| s.provisional && positive(s).is_some())
            .count(),
    }
}

/// The card beside the month's cost: what the team can save a month and the largest step.
pub fn card(recs: Option<&[Recommendation]>, currency: &Currency) -> Markup {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let Some(recs) = recs else {
        return html! {
            div class="card saving" {
                div class="label" { "You can save" }
                div class="value" data-field="right-sizing-pending" { "being read…" }
                div class="muted" { "Right-sizing's evidence is being read; reload in a minute." }
            }
        };
    };
    let steps = steps(recs);
    let t = totals(&steps);
    html! {
        div class="card saving" {
            div class="label" { "You can save, from the last " (RIGHT_SIZING_DAYS) " days" }
            div class="value" data-field="saving-total" { (m(t.judged)) " a month" }
            @if t.provisional_count > 0 {
                div class="muted" data-field="saving-provisional" {
                    "and " (m(t.provisional)) " more if " (t.provisional_count) " newer workload"
                    @if t.provisional_count != 1 { "s" } " stay" @if t.provisional_count == 1 { "s" } " as they are"
                }
            }
            @if let Some(top) = steps.first().filter(|s| s.monthly.is_some_and(|m| m > Decimal::ZERO)) {
                div data-field="top-saving" {
                    "First: " strong { (top.what) } " for " (top.rec.workload) ", "
                    strong data-field="top-saving-amount" { (m(top.monthly.unwrap_or_default())) } " a month"
                }
            }
        }
    }
}

/// The steps as a table, each with its saving and evidence; or, while the evidence is being read
/// (`None`), that it is.
pub fn section(recs: Option<&[Recommendation]>, currency: &Currency) -> Markup {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let heading = html! {
        h2 id="savings-h" { "What to do first" }
    };
    let Some(recs) = recs else {
        return html! {
            section aria-labelledby="savings-h" data-section="savings" {
                (heading)
                p class="notice" data-field="right-sizing-pending-note" {
                    "Right-sizing's evidence is being read (percentiles over every hour of the last "
                    (RIGHT_SIZING_DAYS) " days); reload in a minute to see what could hold less."
                }
            }
        };
    };
    let steps = steps(recs);
    let t = totals(&steps);
    // Workloads under 7 days whose days so far advise nothing: counted, never judged.
    let waiting = recs
        .iter()
        .filter(|r| r.action == Action::Wait)
        .filter(|r| step(r).is_none())
        .count();
    html! {
        section aria-labelledby="savings-h" data-section="savings" {
            (heading)
            @if steps.is_empty() {
                p data-field="right-sizing-none" {
                    "No saving found in the last " (RIGHT_SIZING_DAYS) " days of data at today's rate card."
                }
            } @else {
                p data-field="right-sizing-summary" {
                    strong { (steps.len()) " step" @if steps.len() != 1 { "s" } }
                    ", the largest saving first, each a month at today's rate card: "
                    strong { (m(t.judged)) } " from workloads with 7 days of data or more"
                    @if t.provisional_count > 0 { ", " (m(t.provisional)) " more if the newer ones stay as they are" }
                    "."
                }
                div class="scroll" {
                    table class="responsive" data-table="right-sizing" {
                        caption { "Each workload's step, what it saves, and the evidence for it (the last "
                                  (RIGHT_SIZING_DAYS) " days)" }
                        thead { tr {
                            th scope="col" { "Workload" }
                            th scope="col" { "Holds" }
                            th scope="col" { "Do" }
                            th scope="col" class="num" { "Saving / month" }
                            th scope="col" { "Evidence" }
                        } }
                        tbody {
                            @for s in &steps {
                                @let r = s.rec;
                                tr data-workload=(r.workload) data-provisional=[s.provisional.then_some("true")] {
                                    td data-label="Workload" {
                                        (r.namespace.as_deref().unwrap_or("—")) " / " (r.workload)
                                        " " span class="muted" { "(" (r.workload_kind) ")" }
                                    }
                                    td data-label="Holds" {
                                        (r.gpu_model.trim_start_matches("NVIDIA ")) " " (r.kind.as_str())
                                        @if let Some(p) = &r.profile { " " (p) }
                                        @if r.slices > 1 { " x " (r.slices) }
                                    }
                                    td data-label="Do" data-field="do" {
                                        strong { (s.what) }
                                        @if let Some((how, saves)) = &s.or {
                                            br;
                                            span class="muted" data-field="mps" { "or " (how) ": saves " (m(*saves)) }
                                        }
                                    }
                                    td class="num" data-label="Saving / month" data-field="saving" {
                                        @match s.monthly {
                                            Some(d) if d < Decimal::ZERO => { "costs " (m(-d)) " more" }
                                            Some(d) => { (m(d)) }
                                            None => { "not priced" }
                                        }
                                    }
                                    td data-label="Evidence" data-field="evidence" { (evidence(r)) }
                                }
                            }
                        }
                    }
                }
            }
            @if waiting > 0 {
                p class="muted" data-field="right-sizing-waiting" {
                    (waiting) " more workload" @if waiting != 1 { "s have" } @else { " has" }
                    " under 7 days of data and nothing to save so far."
                }
            }
        }
    }
}
