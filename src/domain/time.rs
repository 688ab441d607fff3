//! Time helpers: every period is half-open `[start, end)` in UTC, hours and months on UTC boundaries.

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Timelike, Utc};

/// Hours in an average month (365 x 24 / 12): what monthly figures projected from a span of
/// days are priced over.
pub const AVERAGE_MONTH_HOURS: u32 = 730;

/// The start of the UTC hour that holds `t`.
pub fn floor_hour(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(0)
        .and_then(|t| t.with_second(0))
        .and_then(|t| t.with_minute(0))
        .expect("every instant has an hour start")
}

/// The start of the UTC day that holds `t`.
pub fn floor_day(t: DateTime<Utc>) -> DateTime<Utc> {
    start_of(t.date_naive())
}

/// Seconds from `start` to `end`, to the microsecond (the ingest contract's finest time).
pub fn seconds_between(start: DateTime<Utc>, end: DateTime<Utc>) -> rust_decimal::Decimal {
    rust_decimal::Decimal::new((end - start).num_microseconds().unwrap_or(i64::MAX), 6).normalize()
}

/// Seconds of `[start, end)` in each hour it touches, to the microsecond: GPU presence per hour.
pub fn seconds_by_hour(
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, rust_decimal::Decimal)> {
    let mut out = Vec::new();
    let mut from = start;
    while from < end {
        let next = (floor_hour(from) + Duration::hours(1)).min(end);
        let us = (next - from).num_microseconds().unwrap_or(0);
        out.push((
            floor_hour(from),
            rust_decimal::Decimal::new(us, 6).normalize(),
        ));
        from = next;
    }
    out
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

/// The whole UTC days inside `[start, end)`, as `[first midnight, last midnight)`, if there are
/// any: what can be read from the day rollups, the rest of the range from the hourly ones.
pub fn whole_days(
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let midnight = |t: DateTime<Utc>| start_of(t.date_naive());
    let first = if midnight(start) == start {
        start
    } else {
        midnight(start) + Duration::days(1)
    };
    let last = midnight(end);
    (first < last).then_some((first, last))
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
    use rust_decimal_macros::dec;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn presence_seconds_are_counted_per_hour() {
        assert_eq!(
            seconds_by_hour(t("2026-10-01T09:30:00Z"), t("2026-10-01T11:15:00Z")),
            vec![
                (t("2026-10-01T09:00:00Z"), dec!(1800)),
                (t("2026-10-01T10:00:00Z"), dec!(3600)),
                (t("2026-10-01T11:00:00Z"), dec!(900)),
            ]
        );
        assert_eq!(
            seconds_by_hour(
                t("2026-10-01T09:59:59.9995Z"),
                t("2026-10-01T10:00:00.0005Z")
            ),
            vec![
                (t("2026-10-01T09:00:00Z"), dec!(0.0005)),
                (t("2026-10-01T10:00:00Z"), dec!(0.0005)),
            ]
        );
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

/// A billing period: a calendar month in UTC, written `YYYY-MM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Month(NaiveDate);

impl Month {
    pub fn of(t: DateTime<Utc>) -> Month {
        Month(month_of(t))
    }

    pub fn from_first_day(d: NaiveDate) -> Month {
        Month(NaiveDate::from_ymd_opt(d.year(), d.month(), 1).expect("first of the month exists"))
    }

    pub fn first_day(self) -> NaiveDate {
        self.0
    }

    pub fn start(self) -> DateTime<Utc> {
        start_of(self.0)
    }

    pub fn end(self) -> DateTime<Utc> {
        start_of(next_month(self.0))
    }

    pub fn next(self) -> Month {
        Month(next_month(self.0))
    }

    pub fn minus(self, months: u32) -> Month {
        Month(
            self.0
                .checked_sub_months(chrono::Months::new(months))
                .expect("months stay in range"),
        )
    }
}

impl std::fmt::Display for Month {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.format("%Y-%m"))
    }
}

impl std::str::FromStr for Month {
    type Err = String;
    fn from_str(s: &str) -> Result<Month, String> {
        NaiveDate::parse_from_str(&format!("{s}-01"), "%Y-%m-%d")
            .ok()
            .filter(|_| s.len() == 7)
            .map(Month)
            .ok_or_else(|| format!("{s:?} is not a month: use YYYY-MM, e.g. 2026-10"))
    }
}

impl serde::Serialize for Month {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Month {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Month, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for Month {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::SchemaType::Type(
                utoipa::openapi::Type::String,
            ))
            .pattern(Some(r"^\d{4}-(0[1-9]|1[0-2])$"))
            .description(Some("A calendar month in UTC"))
            .examples([serde_json::json!("2026-10")])
            .into()
    }
}

impl utoipa::ToSchema for Month {}

#[cfg(test)]
mod month_tests {
    use super::*;

    #[test]
    fn months_parse_print_and_bound_their_days() {
        let m: Month = "2026-12".parse().unwrap();
        assert_eq!(m.to_string(), "2026-12");
        assert_eq!(m.start().to_rfc3339(), "2026-12-01T00:00:00+00:00");
        assert_eq!(m.end().to_rfc3339(), "2027-01-01T00:00:00+00:00");
        assert_eq!(m.minus(12).to_string(), "2025-12");
        for bad in ["2026-13", "2026-1", "26-10", "2026-10-01", ""] {
            assert!(bad.parse::<Month>().is_err(), "{bad}");
        }
    }
}
