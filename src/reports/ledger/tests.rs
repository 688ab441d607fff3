//! The ledger's figures computed by hand, and its CSV.

use proptest::prelude::*;
use rust_decimal_macros::dec;

use super::*;
use crate::billing::rate_card::{IdlePolicy, IsolationFactors};
use crate::domain::slice::{GpuGeometry, Reservation, ShareWeights};

const H100_MODEL: &str = "NVIDIA H100 80GB HBM3";
const H100: GpuGeometry = GpuGeometry {
    memory_bytes: 85_520_809_984,
    compute_slices: 7,
    memory_slices: 8,
};

fn card() -> BTreeMap<i64, RateCard> {
    BTreeMap::from([(
        1,
        RateCard {
            id: 1,
            effective_from: "2026-01-01T00:00:00Z".parse().unwrap(),
            currency: Currency::parse("USD").unwrap(),
            weights: ShareWeights::default(),
            factors: IsolationFactors::default(),
            idle_policy: IdlePolicy::Platform,
            prices: BTreeMap::from([(H100_MODEL.to_owned(), dec!(4.00))]),
            default_hourly_cost: dec!(3.00),
            note: None,
        },
    )])
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn held(hour: &str, team: &str, slice: &str, r: &Reservation, seconds: i64) -> ConsumerSeconds {
    held_by(at(hour), team, slice, r, seconds)
}

fn held_by(
    hour: DateTime<Utc>,
    team: &str,
    slice: &str,
    r: &Reservation,
    seconds: i64,
) -> ConsumerSeconds {
    ConsumerSeconds {
        bucket: hour,
        rate_card: Some(1),
        team: TeamId::parse(team).unwrap(),
        workload: Some(format!("{team}-trainer")),
        slice_uuid: slice.into(),
        kind: r.kind(),
        profile: None,
        share: r.physical_share(&H100),
        held: Exact::from(seconds),
        active: Exact::zero(),
        memory_byte_seconds: Exact::zero(),
    }
}

fn mig(c: u8, m: u8) -> Reservation {
    Reservation::Mig {
        profile: format!("{c}g"),
        profile_id: None,
        compute_slices: c,
        memory_slices: m,
        memory_bytes: 1,
    }
}

#[test]
fn each_hour_of_a_card_adds_up_to_its_cost_to_the_cent() {
    let header = Card {
        gpu_uuid: "GPU-a".into(),
        model: H100_MODEL.into(),
        node: "gpu-node-01".into(),
    };
    // Hour 1: two 3g.40gb (nlp, search) leave a compute slice stranded: 4.00 = 1.86 + 1.86 +
    // 0.29 stranded, less a cent of rounding (1.857142 x 2 = 3.714286; 0.285714).
    // Hour 2: an MPS client of 50 % and 40 GiB (nlp) half the hour, the card empty after:
    // 4.00 x (0.5 x 0.5 + 0.5 x 42949672960 / 85520809984) x 0.5 = 1.002233 allocated, charged
    // 0.9 of it (0.902010, 0.90), discount 0.100223 (0.10); unallocated 2.997767 (3.00), all
    // placeable (threads and memory are left for a client).
    let mps = Reservation::Mps {
        active_thread_percentage: 50,
        pinned_memory_bytes: 40 << 30,
    };
    let consumers = [
        held("2026-10-01T00:00:00Z", "nlp", "GPU-a::0", &mig(3, 4), 3600),
        held(
            "2026-10-01T00:00:00Z",
            "search",
            "GPU-a::1",
            &mig(3, 4),
            3600,
        ),
        held("2026-10-01T01:00:00Z", "nlp", "GPU-a::mps0", &mps, 1800),
    ];
    let presence = [
        CardSeconds {
            bucket: at("2026-10-01T00:00:00Z"),
            rate_card: Some(1),
            present_seconds: dec!(3600),
            stranded: StrandedSeconds::of_gpu(
                &H100,
                dec!(3600),
                Decimal::ZERO,
                Decimal::ZERO,
                Decimal::ZERO,
            ),
        },
        CardSeconds {
            bucket: at("2026-10-01T01:00:00Z"),
            rate_card: Some(1),
            present_seconds: dec!(3600),
            stranded: StrandedSeconds::default(),
        },
    ];
    let l = ledger(
        header,
        at("2026-10-01T00:00:00Z"),
        at("2026-10-01T02:00:00Z"),
        Step::Hour,
        &consumers,
        &presence,
        &|_| false,
        &card(),
    )
    .unwrap();
    assert_eq!(l.currency.as_deref(), Some("USD"));
    let figures: Vec<_> = l
        .steps
        .iter()
        .map(|s| {
            (
                s.cost,
                s.consumers.iter().map(|h| h.charge).collect::<Vec<_>>(),
                s.sharing_discount,
                s.placeable,
                s.stranded,
                s.rounding,
            )
        })
        .collect();
    assert_eq!(
        figures,
        [
            (
                dec!(4.00),
                vec![dec!(1.86), dec!(1.86)],
                dec!(0.00),
                dec!(0.00),
                dec!(0.29),
                dec!(-0.01)
            ),
            (
                dec!(4.00),
                vec![dec!(0.90)],
                dec!(0.10),
                dec!(3.00),
                dec!(0.00),
                dec!(0.00)
            ),
        ]
    );
    assert_eq!(l.steps[1].consumers[0].slice_hours, dec!(0.5));
    // The CSV: per step the cost, then rows that add up to it.
    let csv = String::from_utf8(to_csv(&l).unwrap()).unwrap();
    let mut r = csv::Reader::from_reader(csv.as_bytes());
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2 * 5 + 3);
    assert_eq!(&rows[0][6], "cost");
    assert_eq!(&rows[1][7], "nlp");
    assert_eq!(&rows[1][8], "nlp-trainer");
    let parts: Decimal = rows[1..7]
        .iter()
        .map(|r| r[14].parse::<Decimal>().unwrap())
        .sum();
    assert_eq!(parts, dec!(4.00));
}

#[test]
fn a_name_a_spreadsheet_would_run_is_quoted_in_the_csv() {
    let l = Ledger {
        card: Card {
            gpu_uuid: "GPU-a".into(),
            model: "=HYPERLINK(\"x\")".into(),
            node: "n".into(),
        },
        from: at("2026-10-01T00:00:00Z"),
        to: at("2026-10-01T01:00:00Z"),
        step: Step::Hour,
        currency: Some("USD".into()),
        steps: vec![LedgerStep {
            start: at("2026-10-01T00:00:00Z"),
            end: at("2026-10-01T01:00:00Z"),
            source: Source::Rollups,
            cost: dec!(4.00),
            consumers: vec![ConsumerCharge {
                team: TeamId::parse("nlp").unwrap(),
                workload: Some("-2+3".into()),
                slice_uuid: "GPU-a::0".into(),
                kind: SliceKind::Whole,
                profile: None,
                slice_hours: dec!(1),
                charge: dec!(4.00),
            }],
            sharing_discount: dec!(0.00),
            unallocated: dec!(0.00),
            placeable: dec!(0.00),
            stranded: dec!(0.00),
            rounding: dec!(0.00),
        }],
    };
    let csv = String::from_utf8(to_csv(&l).unwrap()).unwrap();
    assert!(csv.contains("'=HYPERLINK"), "{csv}");
    assert!(csv.contains(",'-2+3,"), "{csv}");
}

/// A MIG instance of the H100 table.
fn instance(profile: &str) -> Reservation {
    let p = crate::domain::profiles::by_name("H100-SXM5-80GB", profile).unwrap();
    Reservation::Mig {
        profile: profile.into(),
        profile_id: Some(p.profile_id),
        compute_slices: p.compute_slices,
        memory_slices: p.memory_slices,
        memory_bytes: p.memory_bytes(),
    }
}

/// Layouts a card may stand in (valid ones: every instance has a placement).
const LAYOUTS: [&[&str]; 5] = [
    &["3g.40gb", "3g.40gb"],
    &["1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb"],
    &["1g.10gb"; 7],
    &["3g.40gb", "1g.10gb", "1g.10gb"],
    &[],
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Random cards, each in a layout for some hours, its instances held part of each hour by
    /// random teams: every hour of every card adds up to its cost with at most half a cent of
    /// rounding per figure rounded, stranded never passes unallocated; and the cards' month
    /// ledgers add up to the month's bill (fleet cost, unallocated, stranded, discount) but for
    /// the rounding of each card's figures.
    #[test]
    fn every_cards_hours_add_up_and_the_cards_add_up_to_the_months_bill(
        cards in proptest::collection::vec(
            (0..LAYOUTS.len(), 1..4i64, proptest::collection::vec((0..3usize, 0..=3600i64), 7)),
            1..5,
        )
    ) {
        use crate::billing::period::bill;
        use crate::billing::pricing::PresenceAggregate;
        let rate = card();
        let half = dec!(0.005);
        let month = (at("2026-10-01T00:00:00Z"), at("2026-11-01T00:00:00Z"));
        let teams = ["nlp", "search", "vision"];
        let (mut usage, mut presence) = (Vec::new(), Vec::new());
        let mut months: Vec<Ledger> = Vec::new();
        for (n, (layout, hours, held)) in cards.iter().enumerate() {
            let slices: Vec<Reservation> = LAYOUTS[*layout].iter().map(|p| instance(p)).collect();
            let s = crate::domain::layout::stranded(&H100, &slices.iter().collect::<Vec<_>>());
            let mut consumers = Vec::new();
            let mut present = Vec::new();
            for h in 0..*hours {
                let hour = month.0 + chrono::Duration::hours(h);
                present.push(CardSeconds {
                    bucket: hour,
                    rate_card: Some(1),
                    present_seconds: dec!(3600),
                    stranded: StrandedSeconds::of_gpu(
                        &H100,
                        Decimal::from(s.compute_slices) * dec!(3600),
                        Decimal::from(s.memory_slices) * dec!(3600),
                        Decimal::ZERO,
                        Decimal::ZERO,
                    ),
                });
                for (i, r) in slices.iter().enumerate() {
                    let (team, seconds) = held[i];
                    if seconds == 0 {
                        continue;
                    }
                    let mut x = held_by(hour, teams[team], &format!("GPU-{n}::{i}"), r, seconds);
                    x.profile = Some(LAYOUTS[*layout][i].to_owned());
                    consumers.push(x);
                }
            }
            let header = |uuid: String| Card { gpu_uuid: uuid, model: H100_MODEL.into(), node: "n".into() };
            let hourly = ledger(header(format!("GPU-{n}")), month.0, month.1, Step::Hour,
                                &consumers, &present, &|_| false, &rate).unwrap();
            for st in &hourly.steps {
                let charges: Decimal = st.consumers.iter().map(|h| h.charge).sum();
                prop_assert_eq!(st.cost, dec!(4.00));
                prop_assert_eq!(st.cost, charges + st.sharing_discount + st.placeable + st.stranded + st.rounding);
                prop_assert_eq!(st.unallocated, st.placeable + st.stranded);
                prop_assert!(st.placeable >= Decimal::ZERO, "{st:?}");
                prop_assert!(st.rounding.abs() <= half * Decimal::from(st.consumers.len() + 3), "{st:?}");
            }
            // The same hours a month at a time, and as billing reads them.
            let by_month: Vec<ConsumerSeconds> = consumers.iter().cloned().map(|mut h| { h.bucket = month.0; h }).collect();
            let present_month: Vec<CardSeconds> = present.iter().cloned().map(|mut p| { p.bucket = month.0; p }).collect();
            months.push(ledger(header(format!("GPU-{n}")), month.0, month.1, Step::Month,
                               &by_month, &present_month, &|_| false, &rate).unwrap());
            for h in &consumers {
                usage.push((UsageAggregate {
                    team: h.team.clone(),
                    model: H100_MODEL.into(),
                    kind: h.kind,
                    profile: h.profile.clone(),
                    rate_card: 1,
                    slices: 1,
                    sums: OccupancySums { held_seconds: h.held.to_decimal(), ..Default::default() },
                    exact: ExactSums::of_share(&h.held, &h.active, &h.memory_byte_seconds, &h.share),
                }, Some(1)));
            }
            for p in &present {
                presence.push((PresenceAggregate {
                    model: H100_MODEL.into(),
                    rate_card: 1,
                    present_seconds: p.present_seconds,
                    stranded: p.stranded.clone(),
                }, Some(1)));
            }
        }
        let b = bill(&usage, &presence, &rate, None).unwrap();
        let k = &b.conservation;
        let total = |f: fn(&LedgerStep) -> Decimal| -> Decimal {
            months.iter().flat_map(|l| &l.steps).map(f).sum()
        };
        // Each card's month rounds each figure once, the bill once for the fleet.
        let slack = half * Decimal::from(months.len() + 1);
        prop_assert_eq!(total(|s| s.cost), k.fleet_cost);
        for (mine, billed) in [
            (total(|s| s.unallocated), k.unallocated),
            (total(|s| s.stranded), k.stranded),
            (total(|s| s.sharing_discount), k.sharing_discount),
        ] {
            prop_assert!((mine - billed).abs() <= slack, "{mine} against {billed}");
        }
    }
}
