//! One evaluation of every budget: what has crossed a threshold, idled or jumped is fired, each
//! once per period (`store::fire`). Only one server evaluates at a time (an advisory lock held by
//! the evaluation's transaction); the unique key would keep a second one from firing twice anyway.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde_json::json;
use sqlx::PgPool;

use super::AlertConfig;
use super::kind::AlertKind;
use super::store::{self, Fire};
use crate::billing::rate_card::Currency;
use crate::billing::service::Error;
use crate::budgets::standing::{self, BudgetStanding};
use crate::budgets::store::{self as budgets, BudgetRow};
use crate::budgets::{Threshold, ThresholdKind};
use crate::domain::team::TeamId;
use crate::domain::time::{Month, start_of};
use crate::reports::service::{self as reports, IdleSlice, ReportCache};

/// The days before a day its spend is compared with.
pub const SPEND_CHANGE_DAYS: usize = 14;

/// Evaluates every budget at `now`; the alerts fired anew. Nothing when another server is
/// evaluating.
pub async fn evaluate(
    pool: &PgPool,
    cache: &ReportCache,
    config: &AlertConfig,
    now: DateTime<Utc>,
) -> Result<usize, Error> {
    let mut tx = pool.begin().await?;
    if !store::try_lock_evaluation(&mut tx).await? {
        return Ok(0);
    }
    let all = budgets::list(&mut tx, None).await?;
    if all.is_empty() {
        return Ok(0);
    }
    let link = |team: &TeamId, month: Month| {
        format!(
            "{}/ui/team/{team}?month={month}",
            config.public_url.trim_end_matches('/')
        )
    };
    let mut fires: Vec<(Fire, &BudgetRow)> = Vec::new();

    match reports::forecasts(pool, cache, now, None).await {
        Ok(report) => {
            let currency = report
                .currency
                .as_deref()
                .and_then(|c| Currency::parse(c).ok());
            for b in &all {
                let s = standing::standing(pool, cache, b, &report).await?;
                if let (Some(budget), Some(c)) = (s.budget, &currency) {
                    for t in &s.crossed {
                        let link = link(&b.team_id, Month::of(s.period_start));
                        let fire = threshold_fire(b, &s, t, budget, c, &link);
                        fires.push((fire, b));
                    }
                }
            }
        }
        // Hours of the month without a rate card: no figure to compare until there is one.
        Err(Error::Billing(e)) => {
            tracing::warn!(error = %e, "Budgets not evaluated against the month: billing cannot price it.");
        }
        Err(e) => return Err(e),
    }

    let today = start_of(now.date_naive());
    let this_month = Month::of(now);
    let mut idle_days: Vec<i16> = all.iter().filter_map(|b| b.idle_days).collect();
    idle_days.sort_unstable();
    idle_days.dedup();
    for days in idle_days {
        let idle = reports::idle_slices(pool, cache, today, days as u32).await?;
        let currency = currency_now(pool).await?;
        for b in all.iter().filter(|b| b.idle_days == Some(days)) {
            for s in idle.iter().filter(|s| s.team == b.team_id) {
                let Some(c) = &currency else { continue };
                let fire = idle_fire(b, s, days, this_month, c, &link(&b.team_id, this_month));
                fires.push((fire, b));
            }
        }
    }

    if all.iter().any(|b| b.spend_change.is_some()) {
        let from = today - Duration::days(SPEND_CHANGE_DAYS as i64 + 1);
        let (costs, currency) = reports::daily_costs(pool, cache, from, today).await?;
        let currency = currency.and_then(|c| Currency::parse(&c).ok());
        let day = today - Duration::days(1);
        for b in &all {
            let (Some(k), Some(c)) = (b.spend_change, &currency) else {
                continue;
            };
            let team = &b.team_id;
            let trailing: Vec<Decimal> = (1..=SPEND_CHANGE_DAYS as i64)
                .map(|n| {
                    costs
                        .get(&(team.clone(), day - Duration::days(n)))
                        .copied()
                        .unwrap_or_default()
                })
                .collect();
            let cost = costs.get(&(team.clone(), day)).copied().unwrap_or_default();
            if let Some(median) = jumped(cost, &trailing, k) {
                let month = Month::of(day);
                let fire = spend_fire(
                    b,
                    day.date_naive(),
                    cost,
                    median,
                    k,
                    c,
                    &link(&b.team_id, month),
                );
                fires.push((fire, b));
            }
        }
    }

    let mut fired = 0;
    for (fire, budget) in &fires {
        if let Some(id) = store::fire(&mut tx, fire, &budget.channels()).await? {
            fired += 1;
            tracing::info!(alert = id, team = %fire.team, kind = fire.kind.as_str(), key = %fire.key, "Alert fired.");
        }
    }
    tx.commit().await?;
    Ok(fired)
}

/// The currency of the rate card in force last.
async fn currency_now(pool: &PgPool) -> Result<Option<Currency>, Error> {
    let cards = crate::billing::rate_card::store::rate_cards(pool).await?;
    Ok(cards.values().last().map(|c| c.currency.clone()))
}

/// The median of `trailing` when `cost` is more than `factor` times it (and it is above zero:
/// a team's first spending is not a jump).
pub fn jumped(cost: Decimal, trailing: &[Decimal], factor: Decimal) -> Option<Decimal> {
    if trailing.is_empty() {
        return None;
    }
    let mut sorted = trailing.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / Decimal::TWO
    };
    (median > Decimal::ZERO && cost > median * factor).then_some(median)
}

fn money(d: Decimal, c: &Currency) -> String {
    format!("{} {}", d.round_dp(c.minor_units), c.code)
}

fn threshold_fire(
    b: &BudgetRow,
    s: &BudgetStanding,
    t: &Threshold,
    budget: Decimal,
    c: &Currency,
    link: &str,
) -> Fire {
    let (kind, figure, subject) = match t.kind {
        ThresholdKind::Actual => (
            AlertKind::Actual,
            s.spent,
            format!(
                "{}{} has spent {} of its {} budget for {}: past its {} % threshold",
                b.team_id,
                scope_words(b),
                money(s.spent, c),
                money(budget, c),
                s.period,
                t.percent
            ),
        ),
        ThresholdKind::Forecast => (
            AlertKind::Forecast,
            s.forecast,
            format!(
                "{}{} is forecast to spend {} in {}, against a budget of {}: past its {} % forecast threshold",
                b.team_id,
                scope_words(b),
                money(s.forecast, c),
                s.period,
                money(budget, c),
                t.percent
            ),
        ),
    };
    Fire {
        budget_id: b.budget_id,
        team: b.team_id.clone(),
        period: Month::of(s.period_start),
        kind,
        key: t.percent.to_string(),
        subject,
        details: json!({
            "team": b.team_id, "scope": b.scope().map(|s| s.stored()), "period": s.period,
            "threshold": t, "amount": figure.round_dp(c.minor_units),
            "budget": budget.round_dp(c.minor_units), "currency": c.code,
            "spent": s.spent.round_dp(c.minor_units), "forecast": s.forecast.round_dp(c.minor_units),
            "low": s.low.round_dp(c.minor_units), "high": s.high.round_dp(c.minor_units),
            "link": link,
        }),
    }
}

/// ` (namespace x)` or ` (label k=v)` after a team's name; nothing for a whole team.
fn scope_words(b: &BudgetRow) -> String {
    use crate::domain::scope::UsageScope;
    match b.scope() {
        None => String::new(),
        Some(UsageScope::Namespace(ns)) => format!(" (namespace {ns})"),
        Some(UsageScope::Label { key, value }) => format!(" (label {key}={value})"),
    }
}

fn idle_fire(
    b: &BudgetRow,
    s: &IdleSlice,
    days: i16,
    month: Month,
    c: &Currency,
    link: &str,
) -> Fire {
    let slice = match (&s.profile, s.gpu_instance_id) {
        (Some(p), Some(gi)) => format!("{p} (GPU instance {gi}) of {}", s.gpu_uuid),
        (Some(p), None) => format!("{p} of {}", s.gpu_uuid),
        _ => format!("a share of {}", s.gpu_uuid),
    };
    Fire {
        budget_id: b.budget_id,
        team: s.team.clone(),
        period: month,
        kind: AlertKind::Idle,
        key: format!(
            "{}/{}/{}",
            s.gpu_uuid,
            s.gpu_instance_id.map_or(String::new(), |g| g.to_string()),
            s.workload
        ),
        subject: format!(
            "{}'s {} held {slice} on {} for {days} days with no compute: {}",
            b.team_id,
            s.workload,
            s.node,
            money(s.cost, c)
        ),
        details: json!({
            "team": b.team_id, "month": month, "days": days, "workload": s.workload,
            "node": s.node, "gpu_uuid": s.gpu_uuid, "gpu_instance_id": s.gpu_instance_id,
            "profile": s.profile, "amount": s.cost.round_dp(c.minor_units), "currency": c.code,
            "link": link,
        }),
    }
}

fn spend_fire(
    b: &BudgetRow,
    day: NaiveDate,
    cost: Decimal,
    median: Decimal,
    factor: Decimal,
    c: &Currency,
    link: &str,
) -> Fire {
    Fire {
        budget_id: b.budget_id,
        team: b.team_id.clone(),
        period: Month::of(start_of(day)),
        kind: AlertKind::SpendChange,
        key: day.to_string(),
        subject: format!(
            "{} spent {} on {day}, more than {factor} times its median day of {} over the {SPEND_CHANGE_DAYS} days before",
            b.team_id,
            money(cost, c),
            money(median, c)
        ),
        details: json!({
            "team": b.team_id, "day": day, "amount": cost.round_dp(c.minor_units),
            "median": median.round_dp(c.minor_units), "factor": factor, "currency": c.code,
            "link": link,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn a_day_jumps_past_factor_times_the_median_of_the_days_before_it() {
        // 14 days: seven at 10, six at 12, one at 40. Sorted, the 7th and 8th are 10 and 12: a
        // median of 11.
        let mut trailing = vec![d("10"); 7];
        trailing.extend(vec![d("12"); 6]);
        trailing.push(d("40"));
        assert_eq!(jumped(d("33.01"), &trailing, d("3")), Some(d("11")));
        assert_eq!(
            jumped(d("33.00"), &trailing, d("3")),
            None,
            "not more than 3 x 11"
        );
        // A team without spend before: its first day is no jump.
        assert_eq!(jumped(d("500"), &[Decimal::ZERO; 14], d("2")), None);
    }
}
