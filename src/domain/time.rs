//! Time helpers: every period is half-open `[start, end)` in UTC, hours and months on UTC boundaries.

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Timelike, Utc};

/// The start of the UTC hour that holds `t`.
pub fn floor_hour(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(0)
        .and_then(|t| t.with_second(0))
        .and_then(|t| t.with_minute(0))
        .expect("every instant has an hour start")
}

/// The first day of the UTC month that holds `t`.
pub fn month_of(t: DateTime<Utc>) -> NaiveDate {
    NaiveDate::from_ymd_opt(t.year(), t.month(), 1).expect("first of the month exists")
}

/// The first day of the month after `month`.
pub fn next_month(month: NaiveDate) -> NaiveDate {
    month
        .checked_add_months(chrono::Months::new(1))
        .expect("months stay in range")
}

/// Midnight UTC at the start of `day`.
pub fn start_of(day: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).expect("midnight exists"))
}

/// The months that `[start, end)` touches, in order.
pub fn months_touched(start: DateTime<Utc>, end: DateTime<Utc>) -> Vec<NaiveDate> {
    let mut months = Vec::new();
    if end <= start {
        return months;
    }
    let last = month_of(end - Duration::nanoseconds(1));
    let mut m = month_of(start);
    while m <= last {
        months.push(m);
        m = next_month(m);
    }
    months
}

/// `t` rounded down to a multiple of `step` since the Unix epoch.
pub fn floor_to(t: DateTime<Utc>, step: Duration) -> DateTime<Utc> {
    let step_ms = step.num_milliseconds().max(1);
    let ms = t.timestamp_millis();
    DateTime::from_timestamp_millis(ms - ms.rem_euclid(step_ms)).expect("in range")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_period_across_new_year_touches_both_months() {
        assert_eq!(
            months_touched(t("2026-12-31T23:59:00Z"), t("2027-01-01T00:01:00Z")),
            vec![
                NaiveDate::from_ymd_opt(2026, 12, 1).unwrap(),
                NaiveDate::from_ymd_opt(2027, 1, 1).unwrap()
            ]
        );
        // An end exactly on a month boundary does not touch the next month.
        assert_eq!(
            months_touched(t("2026-10-31T23:00:00Z"), t("2026-11-01T00:00:00Z")).len(),
            1
        );
    }

    #[test]
    fn instants_floor_to_hours_and_steps() {
        assert_eq!(
            floor_hour(t("2026-10-01T13:59:59.999Z")),
            t("2026-10-01T13:00:00Z")
        );
        assert_eq!(
            floor_to(t("2026-10-01T13:07:31Z"), Duration::seconds(60)),
            t("2026-10-01T13:07:00Z")
        );
    }
}
