//! Month-end forecast per team (issue 15): what the month comes to if the last days' pace holds.
//! What is spent so far is the team's invoice lines as billing prices them now; the pace is the
//! team's cost over the last [`PACE_DAYS`] days per hour (or over the days since its first usage
//! in them, for a team younger than that), projected over the time left in the month; the band
//! projects the 10th and 90th percentiles of its daily cost in those days instead (a day without
//! usage at nothing, as the pace counts it). Pure: the service reads the figures.

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::Serialize;
use utoipa::ToSchema;

use crate::billing::rate_card::Currency;
use crate::domain::exact::Exact;
use crate::domain::team::TeamId;

/// Whole UTC days before today that the pace is measured over.
pub const PACE_DAYS: i64 = 7;

/// One team's month-end forecast.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TeamForecast {
    #[schema(value_type = String)]
    pub team: TeamId,
    /// The month so far: its invoice lines as billing prices them now.
    #[schema(value_type = String)]
    pub spent: Decimal,
    /// Cost per hour over the measured days, rounded to 6 decimals (the forecast uses it exact).
    #[schema(value_type = String)]
    pub hourly_rate: Decimal,
    /// The hours the pace was measured over: up to `PACE_DAYS` days to the last whole hour.
    #[schema(value_type = String)]
    pub measured_hours: Decimal,
    /// `spent + hourly_rate x hours_left`, to the minor unit.
    #[schema(value_type = String)]
    pub forecast: Decimal,
    /// `spent + p10 of daily cost x days left`; equal to `forecast` without a whole day measured.
    #[schema(value_type = String)]
    pub low: Decimal,
    /// `spent + p90 of daily cost x days left`.
    #[schema(value_type = String)]
    pub high: Decimal,
}

/// A team's cost in one bucket of the measured days: a whole UTC day, or hours of today.
#[derive(Debug, Clone, PartialEq)]
pub struct PaceCost {
    pub bucket: DateTime<Utc>,
    /// Whether the bucket is a whole day (today's hours are not).
    pub whole_day: bool,
    pub cost: Decimal,
}

/// The days the pace is measured over at `now`: from `PACE_DAYS` UTC midnights before today's to
/// the last whole hour.
pub fn pace_range(now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let today = crate::domain::time::start_of(now.date_naive());
    (
        today - Duration::days(PACE_DAYS),
        crate::domain::time::floor_hour(now),
    )
}

/// `team`'s forecast for the month ending at `month_end`, at `now`, from what it has `spent` and
/// its cost in the buckets of [`pace_range`] (`pace`, any order; empty: no usage in them).
pub fn forecast(
    team: TeamId,
    now: DateTime<Utc>,
    month_end: DateTime<Utc>,
    spent: Decimal,
    pace: &[PaceCost],
    currency: &Currency,
) -> TeamForecast {
    let (from, to) = pace_range(now);
    let seconds_left = Decimal::from((month_end - now).num_seconds().max(0));
    // A team whose first usage in the range came later is measured from that day on.
    let first = pace
        .iter()
        .filter(|p| p.cost != Decimal::ZERO)
        .map(|p| p.bucket)
        .min()
        .map_or(to, |b| b.max(from));
    let measured_hours = Decimal::from((to - first).num_hours().max(0));
    let total: Decimal = pace
        .iter()
        .filter(|p| p.bucket >= first)
        .map(|p| p.cost)
        .sum();
    // Exact until rounded once: a pace of so much a day is a fraction of it a second.
    let projected = |per_second: Exact| currency.round(per_second * seconds_left + spent);
    let forecast = if measured_hours > Decimal::ZERO {
        projected(Exact::from(total) / (measured_hours * Decimal::from(3600)))
    } else {
        currency.round(spent)
    };
    // Every whole day measured, those without usage at nothing: the pace counts them, and so
    // must the band, or a team that stopped would be forecast below its own band.
    let today = crate::domain::time::start_of(now.date_naive());
    let mut days: Vec<Decimal> = Vec::new();
    let mut day = first;
    while day < today {
        days.push(
            pace.iter()
                .filter(|p| p.whole_day && p.bucket == day)
                .map(|p| p.cost)
                .sum(),
        );
        day += Duration::days(1);
    }
    days.sort();
    let day_seconds = Decimal::from(86_400);
    let (low, high) = match (percentile(&days, 10), percentile(&days, 90)) {
        (Some(p10), Some(p90)) => (
            projected(Exact::from(p10) / day_seconds),
            projected(Exact::from(p90) / day_seconds),
        ),
        _ => (forecast, forecast),
    };
    TeamForecast {
        team,
        spent,
        hourly_rate: if measured_hours > Decimal::ZERO {
            (total / measured_hours).round_dp(6)
        } else {
            Decimal::ZERO
        },
        measured_hours,
        forecast,
        low,
        high,
    }
}

/// The `pct`th percentile of sorted `values`, interpolated between ranks (as SQL's
/// `percentile_cont`); `None` for none.
fn percentile(values: &[Decimal], pct: u32) -> Option<Decimal> {
    let last = values.len().checked_sub(1)?;
    let rank = Decimal::from(last) * Decimal::from(pct) / Decimal::from(100);
    let below = rank.floor();
    let i = below.to_usize().unwrap_or(0).min(last);
    let j = (i + 1).min(last);
    Some(values[i] + (values[j] - values[i]) * (rank - below))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    /// Whole days of the range before `now`'s day at `per_day`, and today's hours at `per_day / 24`
    /// an hour.
    fn steady(now: DateTime<Utc>, per_day: Decimal) -> Vec<PaceCost> {
        let (from, to) = pace_range(now);
        let today = crate::domain::time::start_of(now.date_naive());
        let mut pace: Vec<PaceCost> = (0..PACE_DAYS)
            .map(|k| PaceCost {
                bucket: from + Duration::days(k),
                whole_day: true,
                cost: per_day,
            })
            .collect();
        if to > today {
            pace.push(PaceCost {
                bucket: today,
                whole_day: false,
                cost: per_day / Decimal::from(24) * Decimal::from((to - today).num_hours()),
            });
        }
        pace
    }

    #[test]
    fn a_constant_pace_projects_to_spent_plus_rate_times_the_time_left() {
        // 1.857142857... an hour: a 3g.40gb of an H100 at 4.00.
        let rate = d("4.00") * (d("0.5") * d("3") / d("7") + d("0.5") * d("4") / d("8"));
        let now = at("2026-12-02T05:30:00Z");
        let pace = steady(now, rate * d("24"));
        let f = forecast(
            TeamId::parse("nlp").unwrap(),
            now,
            at("2027-01-01T00:00:00Z"),
            d("54.93"),
            &pace,
            &usd(),
        );
        assert_eq!(f.measured_hours, d("173"), "7 days and 5 hours of today");
        assert_eq!(f.hourly_rate, d("1.857143"));
        // 29 days, 18 hours and 30 minutes left: 714.5 hours.
        let want = (d("54.93") + rate * d("714.5")).round_dp(2);
        assert_eq!(f.forecast, d("1381.86"));
        assert_eq!(f.forecast, want);
        assert_eq!(
            (f.low, f.high),
            (f.forecast, f.forecast),
            "every day the same"
        );
    }

    #[test]
    fn a_forecast_on_a_half_cent_rounds_to_the_even_cent() {
        // 0.12 a day is 0.005 an hour: over 7 days and 23 hours measured, 0.955 / 191 h. An hour
        // before the month ends, the forecast is what was spent + 0.005, exactly a half cent.
        let now = at("2026-12-31T23:00:00Z");
        let pace = steady(now, d("0.12"));
        let on = |spent: &str| {
            let f = forecast(
                TeamId::parse("nlp").unwrap(),
                now,
                at("2027-01-01T00:00:00Z"),
                d(spent),
                &pace,
                &usd(),
            );
            assert_eq!(f.measured_hours, d("191"));
            assert_eq!(f.hourly_rate, d("0.005"));
            (f.forecast, f.low, f.high)
        };
        assert_eq!(on("10.00"), (d("10.00"), d("10.00"), d("10.00")), "10.005");
        assert_eq!(on("10.01"), (d("10.02"), d("10.02"), d("10.02")), "10.015");
    }

    #[test]
    fn the_band_projects_the_10th_and_90th_percentile_days() {
        let now = at("2026-12-10T00:00:00Z");
        // Days of 10, 20, ..., 70: p10 = 16, p90 = 64.
        let pace: Vec<PaceCost> = (0..7)
            .map(|k| PaceCost {
                bucket: at("2026-12-03T00:00:00Z") + Duration::days(k),
                whole_day: true,
                cost: Decimal::from(10 * (k + 1)),
            })
            .collect();
        let f = forecast(
            TeamId::parse("nlp").unwrap(),
            now,
            at("2027-01-01T00:00:00Z"),
            d("300"),
            &pace,
            &usd(),
        );
        // 280 over 168 hours, for 22 days.
        assert_eq!(f.forecast, d("1180.00"));
        assert_eq!(f.low, d("652.00"));
        assert_eq!(f.high, d("1708.00"));
    }

    #[test]
    fn days_without_usage_count_at_nothing_in_the_band_as_in_the_pace() {
        let now = at("2026-12-10T00:00:00Z");
        // 48 a day from the 3rd to the 6th, then nothing for three days.
        let pace: Vec<PaceCost> = (0..4)
            .map(|k| PaceCost {
                bucket: at("2026-12-03T00:00:00Z") + Duration::days(k),
                whole_day: true,
                cost: d("48"),
            })
            .collect();
        let f = forecast(
            TeamId::parse("nlp").unwrap(),
            now,
            at("2027-01-01T00:00:00Z"),
            d("300"),
            &pace,
            &usd(),
        );
        // 192 over the 168 hours measured, for 528 hours left.
        assert_eq!(f.measured_hours, d("168"));
        assert_eq!(f.forecast, d("903.43"));
        // Days of 0, 0, 0, 48, 48, 48, 48: p10 = 0, p90 = 48, for 22 days.
        assert_eq!(f.low, d("300.00"));
        assert_eq!(f.high, d("1356.00"));
        assert!(f.low <= f.forecast && f.forecast <= f.high, "{f:?}");
    }

    #[test]
    fn a_team_seen_only_since_yesterday_is_measured_from_then_and_one_without_usage_keeps_its_spend()
     {
        let now = at("2026-12-10T12:00:00Z");
        let pace = vec![
            PaceCost {
                bucket: at("2026-12-09T00:00:00Z"),
                whole_day: true,
                cost: d("48"),
            },
            PaceCost {
                bucket: at("2026-12-10T00:00:00Z"),
                whole_day: false,
                cost: d("24"),
            },
        ];
        let f = forecast(
            TeamId::parse("nlp").unwrap(),
            now,
            at("2027-01-01T00:00:00Z"),
            d("72"),
            &pace,
            &usd(),
        );
        assert_eq!(f.measured_hours, d("36"));
        assert_eq!(f.hourly_rate, d("2"));
        assert_eq!(f.forecast, d("1104.00"), "72 + 2 x 516 hours");
        let idle = forecast(
            TeamId::parse("nlp").unwrap(),
            now,
            at("2027-01-01T00:00:00Z"),
            d("72"),
            &[],
            &usd(),
        );
        assert_eq!(
            (idle.forecast, idle.low, idle.high),
            (d("72"), d("72"), d("72"))
        );
        assert_eq!(idle.measured_hours, Decimal::ZERO);
    }
}
