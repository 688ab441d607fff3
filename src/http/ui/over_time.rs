//! "Cost over time" on the fleet and team pages: what each day or month of a range cost, stacked
//! by team (fleet) or by workload (team), from the usage report (so in the invoices' money, late
//! data included), with the team's budget as a line and the current month's forecast band. Ranges
//! are presets (this month and last month by day, the last 3 and 12 months by month) or custom
//! months; a team page with a budget also shows the current month's burn-down.

use chrono::{DateTime, Datelike, Duration, Utc};
use maud::{Markup, html};
use rust_decimal::Decimal;

use super::charts::{self, Band, Palette, Series, Stack};
use super::format::money;
use super::layout::{MonthQuery, UiError, f};
use crate::billing::rate_card::Currency;
use crate::budgets::standing::BudgetStanding;
use crate::domain::team::TeamId;
use crate::domain::time::{Month, start_of};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::reports::forecast::TeamForecast;
use crate::reports::service as reports;
use crate::reports::usage::{Dimension, GroupBy, Step};

/// Most months a custom range covers.
const MAX_MONTHS: u32 = 24;
/// Workloads drawn one by one; the rest are "other".
const MAX_STACKS: usize = 7;

/// The presets, as links show them.
const PRESETS: [(&str, &str); 4] = [
    ("this-month", "This month"),
    ("last-month", "Last month"),
    ("3m", "Last 3 months"),
    ("12m", "Last 12 months"),
];

/// The months a chart covers (both included) and its step: days within one month, else months.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostRange {
    pub first: Month,
    pub last: Month,
    pub preset: Option<&'static str>,
}

impl CostRange {
    /// The range `q` asks for (`range`, or `from` and `to`), the last 12 months by default.
    pub fn of(q: &MonthQuery, now: DateTime<Utc>) -> Result<CostRange, UiError> {
        let this = Month::of(now);
        let bad = |why: String| UiError::Api(ApiError::bad_request(why));
        let custom = |s: &Option<String>| -> Result<Option<Month>, UiError> {
            match s.as_deref().filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(m) => m.parse().map(Some).map_err(|e: String| bad(e)),
            }
        };
        if let (Some(first), Some(last)) = (custom(&q.from)?, custom(&q.to)?) {
            if first > last {
                return Err(bad(format!(
                    "the range's first month {first} is after its last, {last}"
                )));
            }
            if months_between(first, last) >= MAX_MONTHS {
                return Err(bad(format!("a range covers at most {MAX_MONTHS} months")));
            }
            return Ok(CostRange {
                first,
                last,
                preset: None,
            });
        }
        let (first, last, preset) = match q.range.as_deref().unwrap_or("12m") {
            "this-month" => (this, this, "this-month"),
            "last-month" => (this.minus(1), this.minus(1), "last-month"),
            "3m" => (this.minus(2), this, "3m"),
            "12m" => (this.minus(11), this, "12m"),
            other => {
                return Err(bad(format!(
                    "range {other:?} is none of this-month, last-month, 3m, 12m (or give from and to)"
                )));
            }
        };
        Ok(CostRange {
            first,
            last,
            preset: Some(preset),
        })
    }

    pub fn step(&self) -> Step {
        if self.first == self.last {
            Step::Day
        } else {
            Step::Month
        }
    }

    /// The columns' starts and labels.
    fn columns(&self, now: DateTime<Utc>) -> Vec<(DateTime<Utc>, String)> {
        match self.step() {
            Step::Day => {
                let end = self
                    .last
                    .end()
                    .min(start_of(now.date_naive()) + Duration::days(1));
                let mut out = Vec::new();
                let mut d = self.first.start();
                while d < end.max(self.first.start() + Duration::days(1)) {
                    out.push((d, format!("{}", d.day())));
                    d += Duration::days(1);
                }
                out
            }
            _ => {
                let mut out = Vec::new();
                let mut m = self.first;
                while m <= self.last {
                    out.push((m.start(), m.to_string()));
                    m = m.next();
                }
                out
            }
        }
    }
}

fn months_between(first: Month, last: Month) -> u32 {
    let (a, b) = (first.first_day(), last.first_day());
    ((b.year() - a.year()) * 12 + b.month() as i32 - a.month() as i32).max(0) as u32
}

/// What a range cost per column and per stack (team or workload).
pub struct CostOverTime {
    pub range: CostRange,
    pub labels: Vec<String>,
    /// By cost over the range, most first; `other` last.
    pub stacks: Vec<(String, Vec<Decimal>)>,
    pub totals: Vec<Decimal>,
    pub note: Option<String>,
}

/// The range's cost by team (`team` `None`) or by `team`'s workloads.
pub async fn read(
    state: &AppState,
    range: CostRange,
    team: Option<&TeamId>,
    now: DateTime<Utc>,
) -> Result<CostOverTime, UiError> {
    let columns = range.columns(now);
    let group_by = GroupBy::of(vec![if team.is_some() {
        Dimension::Workload
    } else {
        Dimension::Team
    }]);
    let key = if team.is_some() { "workload" } else { "team" };
    let report = reports::usage_report(
        &state.pool,
        &state.reports,
        range.first.start(),
        range.last.end(),
        &group_by,
        range.step(),
        team,
    )
    .await?;
    let mut by_stack: std::collections::BTreeMap<String, Vec<Decimal>> = Default::default();
    for r in &report.rows {
        let Some(i) = columns.iter().position(|(start, _)| *start == r.bucket) else {
            continue;
        };
        let name = r
            .key
            .get(key)
            .cloned()
            .flatten()
            .unwrap_or_else(|| "(none)".into());
        by_stack
            .entry(name)
            .or_insert_with(|| vec![Decimal::ZERO; columns.len()])[i] +=
            r.figures.cost.unwrap_or_default();
    }
    let mut stacks: Vec<(String, Vec<Decimal>)> = by_stack.into_iter().collect();
    stacks.sort_by(|a, b| {
        let (sa, sb): (Decimal, Decimal) = (a.1.iter().sum(), b.1.iter().sum());
        sb.cmp(&sa).then_with(|| a.0.cmp(&b.0))
    });
    if team.is_some() && stacks.len() > MAX_STACKS {
        let rest = stacks.split_off(MAX_STACKS - 1);
        let mut other = vec![Decimal::ZERO; columns.len()];
        for (_, v) in &rest {
            for (o, x) in other.iter_mut().zip(v) {
                *o += *x;
            }
        }
        stacks.push((format!("{} other workloads", rest.len()), other));
    }
    let totals = (0..columns.len())
        .map(|i| stacks.iter().map(|(_, v)| v[i]).sum())
        .collect();
    Ok(CostOverTime {
        range,
        labels: columns.into_iter().map(|(_, l)| l).collect(),
        stacks,
        totals,
        note: report.cost_note,
    })
}

/// The section: preset links, the custom form, the chart and its table. `base` is the page's path
/// with its `month`; `palette` colours teams (fleet page; workloads otherwise); `budget` and
/// `forecast` are the current month's (team page).
pub fn section(
    base: &str,
    data: &CostOverTime,
    currency: &Currency,
    palette: Option<&Palette>,
    budget: Option<&BudgetStanding>,
    forecast: Option<&TeamForecast>,
    now: DateTime<Utc>,
) -> Markup {
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let range = data.range;
    let monthly = range.step() == Step::Month;
    let this = Month::of(now);
    let current_column = if monthly && range.first <= this && this <= range.last {
        Some(months_between(range.first, this) as usize)
    } else {
        None
    };
    let colours = [
        "#1f77b4", "#d95f02", "#2ca02c", "#7570b3", "#e7298a", "#8c564b", "#999999",
    ];
    let stacks: Vec<Stack> = data
        .stacks
        .iter()
        .enumerate()
        .map(|(k, (name, values))| Stack {
            name: name.clone(),
            colour: palette.map_or(colours[k % colours.len()], |p| p.colour(name)),
            values: values.iter().map(|v| f(*v)).collect(),
        })
        .collect();
    let reference = budget
        .and_then(|b| b.budget)
        .filter(|_| monthly)
        .map(|b| (f(b), format!("budget: {} a month", m(b))));
    let bands: Vec<Band> = match (current_column, forecast) {
        (Some(i), Some(fc)) => vec![Band {
            column: i,
            low: f(fc.low),
            high: f(fc.high),
            hover: format!(
                "{this} forecast {} (p10–p90 {} – {})",
                m(fc.forecast),
                m(fc.low),
                m(fc.high)
            ),
        }],
        _ => Vec::new(),
    };
    let what = if palette.is_some() {
        "team"
    } else {
        "workload"
    };
    let title = format!(
        "Cost per {} by {what}, {}{}",
        if monthly { "month" } else { "day" },
        range.first,
        if range.first == range.last {
            String::new()
        } else {
            format!(" to {}", range.last)
        }
    );
    html! {
        section id="cost" aria-labelledby="cost-h" {
            h2 id="cost-h" { "Cost over time" }
            nav class="presets" aria-label="Range" {
                @for (p, text) in PRESETS {
                    @if range.preset == Some(p) {
                        strong aria-current="true" { (text) }
                    } @else {
                        a href=(format!("{base}&range={p}#cost")) { (text) }
                    }
                    " · "
                }
                form method="get" action="" class="inline" {
                    @for (k, v) in hidden(base) { input type="hidden" name=(k) value=(v); }
                    label for="from" { "From" }
                    input id="from" name="from" type="month" value=(range.first.to_string());
                    label for="to" { "to" }
                    input id="to" name="to" type="month" value=(range.last.to_string());
                    button class="secondary" type="submit" { "Show" }
                }
            }
            @if let Some(note) = &data.note { p class="muted" { (note) } }
            (charts::columns("cost-over-time", &title,
                "What each period's hours cost under the rate cards in force, late data included (an invoiced month can differ from its invoice by corrections billed later).",
                &currency.code, &data.labels, &stacks, reference, &bands))
            div class="scroll" {
                table data-table="cost-over-time" {
                    caption { (title) }
                    thead { tr { th scope="col" { (if monthly { "Month" } else { "Day" }) } th scope="col" class="num" { "Cost" } } }
                    tbody {
                        @for (label, total) in data.labels.iter().zip(&data.totals) {
                            tr data-period=(label) { td { (label) } td class="num" data-field="period-cost" { (m(*total)) } }
                        }
                    }
                }
            }
        }
    }
}

/// The query pairs of `base` (`/ui/...?month=2026-11`), for a GET form to keep.
fn hidden(base: &str) -> Vec<(String, String)> {
    base.split_once('?')
        .map(|(_, q)| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

/// The current month's burn-down: spent by day against the budget, and where the forecast takes it.
pub fn burn_down(
    daily: &[(DateTime<Utc>, Decimal)],
    budget: &BudgetStanding,
    forecast: &TeamForecast,
    currency: &Currency,
    now: DateTime<Utc>,
) -> Option<Markup> {
    let amount = budget.budget?;
    let m = |d: Decimal| money(d, &currency.code, currency.minor_units);
    let month = budget.month;
    let days = (month.end() - month.start()).num_days() as usize;
    let today = (now - month.start()).num_days().clamp(0, days as i64 - 1) as usize;
    let mut spent = Vec::new();
    let mut cumulative = Decimal::ZERO;
    for d in 0..=today {
        let day = month.start() + Duration::days(d as i64);
        cumulative += daily
            .iter()
            .filter(|(t, _)| *t == day)
            .map(|(_, c)| *c)
            .sum::<Decimal>();
        spent.push(cumulative);
    }
    // From today's spend, straight to the forecast at month end.
    let last = spent.last().copied().unwrap_or_default();
    let left = (days - 1 - today).max(1);
    let projected: Vec<Decimal> = (0..days)
        .map(|d| {
            if d <= today {
                spent[d]
            } else {
                last + (forecast.forecast - last) * Decimal::from(d - today) / Decimal::from(left)
            }
        })
        .collect();
    let x: Vec<String> = (1..=days).map(|d| d.to_string()).collect();
    let series = [
        Series {
            name: "spent".into(),
            colour: "#1f77b4",
            values: spent.iter().map(|v| f(*v)).collect(),
            hovers: spent
                .iter()
                .enumerate()
                .map(|(d, v)| format!("{month}-{:02}: spent {}", d + 1, m(*v)))
                .collect(),
        },
        Series {
            name: "forecast".into(),
            colour: "#7570b3",
            values: projected.iter().map(|v| f(*v)).collect(),
            hovers: projected
                .iter()
                .enumerate()
                .map(|(d, v)| format!("{month}-{:02}: {}", d + 1, m(*v)))
                .collect(),
        },
        Series {
            name: format!("budget {}", m(amount)),
            colour: "#b00020",
            values: vec![f(amount); days],
            hovers: vec![format!("budget {}", m(amount)); days],
        },
    ];
    Some(html! {
        section aria-labelledby="burn-h" data-chart-section="burn-down" {
            h2 id="burn-h" { "Budget burn-down, " (month) }
            p {
                "Spent " strong data-field="burn-spent" { (m(budget.spent)) } " of "
                strong data-field="burn-budget" { (m(amount)) } "; at the last 7 days' pace the month ends at "
                strong { (m(forecast.forecast)) } "."
            }
            (charts::lines("burn-down", &format!("Budget burn-down, {month}"),
                "What the month has spent day by day, where the forecast takes it, and the budget.",
                &currency.code, &x, &series))
        }
    })
}
