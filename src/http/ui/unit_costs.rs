//! The team page's cost per unit of work: the team's unit costs of the month so far, per workload
//! and model ("USD 0.41 per 1M generated tokens, nlp / chat-api, Llama-3.1-8B"), as kept for
//! `/metrics` (`units::kept`, the unit cost report's service). Nothing is shown where no
//! Prometheus or no definition is configured, or the team counted no unit.

use std::sync::Arc;

use maud::{Markup, html};

use super::format::{money, number};
use crate::billing::rate_card::Currency;
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::http::state::AppState;
use crate::units::kept::MonthUnitCosts;

/// The unit costs kept for `month`, waiting at most the evidence wait for the first read after
/// the server started; none without a units' Prometheus, or for another month.
pub async fn kept(state: &AppState, month: Month) -> Option<Arc<MonthUnitCosts>> {
    let source = state.config.units_prometheus.as_ref()?;
    let kept = state
        .unit_costs
        .get_within(
            &state.pool,
            &state.reports,
            source,
            state.config.evidence_wait,
        )
        .await?;
    (kept.month == month).then_some(kept)
}

/// `1M generated tokens`, `1k triton inferences`, `1 requests`.
fn per(per_units: i64, name: &str) -> String {
    let n = if per_units % 1_000_000 == 0 {
        format!("{}M", per_units / 1_000_000)
    } else if per_units % 1_000 == 0 {
        format!("{}k", per_units / 1_000)
    } else {
        per_units.to_string()
    };
    format!("{n} {}", name.replace('_', " "))
}

/// The section, or nothing when the team has no unit cost this month.
pub fn section(kept: Option<&MonthUnitCosts>, team: &TeamId) -> Markup {
    let Some(kept) = kept else {
        return html! {};
    };
    let mut lines = Vec::new();
    for u in &kept.units {
        let r = &u.by_workload;
        let Some(currency) = r.currency.as_deref().and_then(|c| Currency::parse(c).ok()) else {
            continue;
        };
        for row in &r.rows {
            let get = |k: &str| row.key.get(k).cloned().flatten();
            if get("team").as_deref() != Some(team.as_str()) {
                continue;
            }
            let Some(unit_cost) = row.unit_cost else {
                continue;
            };
            lines.push((
                format!(
                    "{} per {}",
                    money(unit_cost, &currency.code, currency.minor_units),
                    per(r.per_units, &r.unit)
                ),
                format!(
                    "{} / {}",
                    get("namespace").as_deref().unwrap_or("—"),
                    get("workload").as_deref().unwrap_or("—")
                ),
                get("model").unwrap_or_else(|| "unknown".into()),
                row.units,
                money(row.cost, &currency.code, currency.minor_units),
            ));
        }
    }
    if lines.is_empty() {
        return html! {};
    }
    html! {
        section aria-labelledby="unit-cost-h" {
            h2 id="unit-cost-h" { "Cost per unit of work" }
            div class="scroll" {
                table class="responsive" data-table="unit-cost" {
                    caption {
                        "What the slices that served the units cost, over the units counted in the same hours, "
                        (kept.month) " to " (kept.to.format("%Y-%m-%d %H:00 UTC")) "."
                    }
                    thead { tr {
                        th scope="col" { "Unit cost" }
                        th scope="col" { "Workload" }
                        th scope="col" { "Model" }
                        th scope="col" class="num" { "Units" }
                        th scope="col" class="num" { "Cost" }
                    } }
                    tbody {
                        @for (unit_cost, workload, model, units, cost) in &lines {
                            tr {
                                td data-field="unit-cost" { (unit_cost) }
                                td { (workload) }
                                td { (model) }
                                td class="num" { (number(*units, 0)) }
                                td class="num" { (cost) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_divisor_reads_as_people_say_it() {
        assert_eq!(per(1_000_000, "generated_tokens"), "1M generated tokens");
        assert_eq!(per(1_000, "triton_inferences"), "1k triton inferences");
        assert_eq!(per(250, "requests"), "250 requests");
    }
}
