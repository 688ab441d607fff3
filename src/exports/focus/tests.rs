//! Rounding carried across rows, and the columns' formats.

use super::*;
use crate::billing::pricing::CarryRounder;
use rust_decimal_macros::dec;

#[test]
fn carried_rounding_sums_to_the_target_and_stays_within_a_cent_of_each_row() {
    let usd = Currency::parse("USD").unwrap();
    let exact = [
        dec!(0.333333),
        dec!(0.333333),
        dec!(0.333334),
        dec!(1.005),
        dec!(2.4449),
    ];
    let target = usd.round(exact.iter().sum::<Decimal>());
    let mut r = CarryRounder::new();
    let mut rows = Vec::new();
    for (i, e) in exact.iter().enumerate() {
        rows.push(if i + 1 == exact.len() {
            r.last(*e, target)
        } else {
            r.next(*e, &usd)
        });
    }
    assert_eq!(rows.iter().copied().sum::<Decimal>(), target);
    for (row, e) in rows.iter().zip(exact) {
        assert!((*row - e).abs() < dec!(0.01), "{row} vs {e}");
    }
    assert_eq!(
        rows,
        vec![dec!(0.33), dec!(0.34), dec!(0.33), dec!(1.00), dec!(2.45)]
    );
}

#[test]
fn decimals_are_written_with_a_fixed_scale() {
    assert_eq!(fixed(dec!(24), 6), "24.000000");
    assert_eq!(fixed(dec!(1337.142857), 2), "1337.14");
    assert_eq!(fixed(dec!(-0.005), 2), "0.00");
    assert_eq!(
        timestamp("2026-10-01T00:00:00Z".parse().unwrap()),
        "2026-10-01T00:00:00Z"
    );
    assert_eq!(Version::V1_0.columns().len(), 50);
    // FOCUS 1.3 adds five split cost allocation columns, ContractApplied and the two providers.
    assert_eq!(Version::V1_3.columns().len(), 72);
    // FOCUS 1.2's 57 columns and slicemeter's 7.
    assert_eq!(Version::V1_2.columns().len(), 64);
    assert_eq!(
        Version::V1_2
            .columns()
            .iter()
            .filter(|c| !c.starts_with("x_"))
            .count(),
        57
    );
}

#[test]
fn timestamps_are_written_as_chrono_formats_them() {
    use chrono::{Datelike, TimeZone};
    let strftime = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut t = Utc.with_ymd_and_hms(1999, 12, 31, 23, 59, 59).unwrap();
    // Every hour of three decades and a second off, leap days and years' ends among them.
    while t.year() < 2030 {
        assert_eq!(timestamp(t), strftime(t));
        t += chrono::Duration::seconds(3607);
    }
    for t in [
        Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).unwrap(),
        Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
        Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap(),
        Utc.with_ymd_and_hms(-1, 6, 15, 12, 30, 5).unwrap(),
    ] {
        assert_eq!(timestamp(t), strftime(t), "{t:?}");
    }
    assert_eq!(
        timestamp(Utc.with_ymd_and_hms(2026, 2, 3, 4, 5, 6).unwrap()),
        "2026-02-03T04:05:06Z"
    );
}
