use chrono::TimeZone;
use rust_decimal_macros::dec;

use super::store::HourRow;
use super::*;

/// An hourly row of `consumer` on `slice` at hour `h` of a day.
fn row(h: u32, team: u32, slice: i32, consumer: i64, held: Decimal, active: Decimal) -> HourRow {
    HourRow {
        hour: Utc.with_ymd_and_hms(2026, 11, 3, h, 0, 0).unwrap(),
        team,
        rate_card: Some(1),
        slice_id: slice,
        consumer_id: consumer,
        held,
        active,
        memory_used: None,
    }
}

fn place(consumer: i64, pod: &str) -> ConsumerPlace {
    ConsumerPlace {
        consumer_id: consumer,
        namespace: Some("chat".into()),
        workload: Some("chat-api".into()),
        pod: Some(pod.into()),
    }
}

#[test]
fn pod_hours_summed_in_parts_are_the_pod_hours_summed_in_one() {
    let slices = vec![
        // A 1g.10gb: a seventh of the compute, an eighth of the memory.
        SliceClass {
            slice_id: 1,
            model: "H100".into(),
            kind: SliceKind::Mig,
            profile: Some("1g.10gb".into()),
            reserved: true,
            compute_share: dec!(0.1428571428571428571428571429),
            memory_share: dec!(0.125),
        },
        SliceClass {
            slice_id: 2,
            model: "H100".into(),
            kind: SliceKind::Timeslice,
            profile: None,
            reserved: false,
            compute_share: dec!(0.25),
            memory_share: dec!(0.25),
        },
    ];
    // Pod a has two containers (consumers 1 and 2), pod b one (3); hours 0 to 5.
    let consumers = vec![place(1, "a"), place(2, "a"), place(3, "b")];
    let mut rows = HourRows::default();
    rows.teams = vec![TeamId::parse("nlp").unwrap(), TeamId::parse("bio").unwrap()];
    for h in (0..6).rev() {
        let held = Decimal::from(3600 - h);
        rows.push(row(h, 0, 1, 1, held, dec!(0)), None).unwrap();
        rows.push(row(h, 0, 1, 2, dec!(1800), dec!(0)), None)
            .unwrap();
        rows.push(row(h, 1, 1, 3, dec!(3600), dec!(0)), None)
            .unwrap();
        // The time-sliced slice: pod b alone (PostgreSQL's quotient of its row), pod a's two
        // containers together (their group's quotient is asked for).
        let used = format!("{}.{}", 100 + h, h);
        let active = Decimal::new(12_345 + i64::from(h), 3);
        rows.push(row(h, 1, 2, 3, dec!(3600), active), Some(used))
            .unwrap();
        rows.push(row(h, 0, 2, 1, dec!(3600), active), Some("7.5".into()))
            .unwrap();
        rows.push(row(h, 0, 2, 2, dec!(3600), dec!(1.5)), Some("0.5".into()))
            .unwrap();
    }
    let one = sum(&rows, consumers.clone(), slices.clone(), 1).unwrap();
    // Hour 0's pod b: the reserved and the time-sliced slice are two invoice lines; pod a's reserved
    // slice sums its containers' held seconds before the share.
    let first: Vec<_> = one.sums.rows.iter().take(4).collect();
    assert_eq!(
        one.sums.teams,
        [TeamId::parse("bio").unwrap(), TeamId::parse("nlp").unwrap()]
    );
    assert_eq!((first[0].team, first[0].place), (0, 1));
    assert_eq!(first[0].compute, dec!(514.285714286)); // 3600 / 7, rounded half away
    assert_eq!(first[0].memory, dec!(450));
    assert_eq!(first[1].compute, dec!(3.08625)); // 12.345 x 0.25
    assert_eq!(first[1].memory, dec!(100.0));
    assert_eq!((first[2].team, first[2].place), (1, 0));
    assert_eq!(first[2].compute, dec!(771.428571429)); // 5400 / 7
    assert_eq!(first[3].compute, dec!(3.46125)); // (12.345 + 1.5) x 0.25
    assert_eq!(one.asked.len(), 6);
    assert_eq!(one.asked[0].2, vec![1, 2]);
    assert_eq!(one.pending.len(), 6);
    for parts in [2, 3, 5] {
        let many = sum(&rows, consumers.clone(), slices.clone(), parts).unwrap();
        assert_eq!(many.sums, one.sums, "{parts} parts");
        assert_eq!(many.asked, one.asked, "{parts} parts");
        assert_eq!(many.pending, one.pending, "{parts} parts");
    }
}
