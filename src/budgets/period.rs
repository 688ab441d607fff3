//! What a budget's amount covers: a UTC calendar month or quarter, and the one holding a moment.

use chrono::{DateTime, Datelike, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::time::Month;

/// What a budget's amount covers: a calendar month, or a quarter (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BudgetPeriod {
    Month,
    Quarter,
}

/// A stored period is read as one: an unknown word is an error, not a month.
impl TryFrom<String> for BudgetPeriod {
    type Error = String;
    fn try_from(s: String) -> Result<BudgetPeriod, String> {
        BudgetPeriod::parse(&s)
    }
}

impl std::fmt::Display for BudgetPeriod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One period of a budget: its first month, its bounds, and its name (`2026-12`, `2026-Q4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodBounds {
    pub first: Month,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub name: String,
}

impl BudgetPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Month => "month",
            BudgetPeriod::Quarter => "quarter",
        }
    }

    pub fn parse(s: &str) -> Result<BudgetPeriod, String> {
        match s {
            "month" => Ok(BudgetPeriod::Month),
            "quarter" => Ok(BudgetPeriod::Quarter),
            other => Err(format!("{other:?} is neither month nor quarter")),
        }
    }

    /// The period holding `now`.
    pub fn holding(self, now: DateTime<Utc>) -> PeriodBounds {
        let month = Month::of(now);
        match self {
            BudgetPeriod::Month => PeriodBounds {
                first: month,
                start: month.start(),
                end: month.end(),
                name: month.to_string(),
            },
            BudgetPeriod::Quarter => {
                let day = month.first_day();
                let first = month.minus(day.month0() % 3);
                PeriodBounds {
                    first,
                    start: first.start(),
                    end: first.next().next().end(),
                    name: format!("{}-Q{}", day.year(), day.month0() / 3 + 1),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_period_is_month_or_quarter_and_nothing_else() {
        assert_eq!(
            BudgetPeriod::try_from("quarter".to_owned()),
            Ok(BudgetPeriod::Quarter)
        );
        assert_eq!(BudgetPeriod::Month.to_string(), "month");
        for bad in ["", "Month", "year", "2026-12"] {
            assert!(BudgetPeriod::try_from(bad.to_owned()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_quarter_is_its_three_calendar_months() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let q = BudgetPeriod::Quarter.holding(at("2026-12-02T07:00:00Z"));
        assert_eq!(q.name, "2026-Q4");
        assert_eq!(
            (q.start, q.end),
            (at("2026-10-01T00:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
        let q = BudgetPeriod::Quarter.holding(at("2026-01-01T00:00:00Z"));
        assert_eq!(
            (q.name.as_str(), q.end),
            ("2026-Q1", at("2026-04-01T00:00:00Z"))
        );
        let m = BudgetPeriod::Month.holding(at("2026-02-28T23:59:59Z"));
        assert_eq!(
            (m.name.as_str(), m.end),
            ("2026-02", at("2026-03-01T00:00:00Z"))
        );
    }
}
