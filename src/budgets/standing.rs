//! Where the current period (month or quarter) stands against a budget: spent and forecast
//! (`reports::forecast`, in the invoices' money; for a namespace, a label or a quarter, the usage
//! report's), their share of the budget, and the thresholds crossed. The API answers it with every
//! budget; the alert worker fires from it.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;

use super::store::BudgetRow;
use super::{BudgetPeriod, Threshold, ThresholdKind};
use crate::billing::service::Error;
use crate::domain::time::Month;
use crate::reports::service::{self as reports, ForecastReport, ReportCache};

/// The current period against the budget.
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetStanding {
    /// The current month.
    pub month: Month,
    /// The budget's current period: `2026-12`, or `2026-Q4` for a quarter, and its bounds.
    #[schema(example = "2026-12")]
    pub period: String,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    /// The amount for this period: the fixed one, or the average of the closed months (`null`
    /// while there is none billing can price).
    #[schema(value_type = Option<String>)]
    pub budget: Option<Decimal>,
    /// The period so far, and its forecast with the band (`GET /v1/reports/forecast`).
    #[schema(value_type = String)]
    pub spent: Decimal,
    #[schema(value_type = String)]
    pub forecast: Decimal,
    #[schema(value_type = String)]
    pub low: Decimal,
    #[schema(value_type = String)]
    pub high: Decimal,
    /// Spent and forecast as percents of the budget, to 0.01; `null` without a budget to compare.
    #[schema(value_type = Option<String>)]
    pub spent_percent: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub forecast_percent: Option<Decimal>,
    /// The thresholds the month has reached: `actual` ones by spent, `forecast` ones by forecast.
    pub crossed: Vec<Threshold>,
    /// Why figures are missing (no closed month to average, the invoices in another currency).
    pub note: Option<String>,
}

/// Where the period of `row` holding `report`'s moment stands against it.
pub async fn standing(
    pool: &PgPool,
    cache: &ReportCache,
    row: &BudgetRow,
    report: &ForecastReport,
) -> Result<BudgetStanding, Error> {
    let month = report.month;
    let team = &row.team_id;
    let period = row.period.holding(report.as_of);
    let scope = row.scope();
    // A team's month is the invoices' (`report`); a narrower scope or a quarter is the usage
    // report's cost of it.
    let (spent, forecast, low, high) = if scope.is_none() && row.period == BudgetPeriod::Month {
        report
            .teams
            .iter()
            .find(|f| f.team == *team)
            .map_or(Default::default(), |f| (f.spent, f.forecast, f.low, f.high))
    } else {
        reports::period_forecast(
            pool,
            cache,
            report.as_of,
            team,
            scope.as_ref(),
            period.start,
            period.end,
        )
        .await?
        .map_or(Default::default(), |f| (f.spent, f.forecast, f.low, f.high))
    };
    let mut note = None;
    let budget = match (row.amount, row.auto_months) {
        (Some(amount), _) => Some(amount),
        (None, Some(months)) => {
            let avg =
                reports::average_cost(pool, cache, month, team, u32::try_from(months).unwrap_or(1))
                    .await?;
            if avg.is_none_or(|a| a <= Decimal::ZERO) {
                note = Some(format!(
                    "no cost in the last {months} closed months to average: no budget this month"
                ));
                None
            } else {
                avg
            }
        }
        (None, None) => None,
    };
    let budget = match &report.currency {
        Some(c) if *c != row.currency => {
            note = Some(format!(
                "the invoices are in {c}, this budget in {}: not compared",
                row.currency
            ));
            None
        }
        _ => budget,
    };
    let percent = |x: Decimal| budget.map(|b| (x * Decimal::from(100) / b).round_dp(2));
    let crossed = match budget {
        Some(b) => crossed(row, spent, forecast, b),
        None => Vec::new(),
    };
    Ok(BudgetStanding {
        month,
        period: period.name,
        period_start: period.start,
        period_end: period.end,
        budget,
        spent,
        forecast,
        low,
        high,
        spent_percent: percent(spent),
        forecast_percent: percent(forecast),
        crossed,
        note,
    })
}

fn crossed(row: &BudgetRow, spent: Decimal, forecast: Decimal, budget: Decimal) -> Vec<Threshold> {
    row.thresholds()
        .into_iter()
        .filter(|t| {
            let figure = match t.kind {
                ThresholdKind::Actual => spent,
                ThresholdKind::Forecast => forecast,
            };
            t.crossed_by(figure, budget)
        })
        .collect()
}
