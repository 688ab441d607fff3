//! The ledger's figures computed by hand, and its CSV.

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

fn held(hour: &str, team: &str, slice: &str, r: &Reservation, seconds: i64) -> HolderSeconds {
    HolderSeconds {
        bucket: at(hour),
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
    let holders = [
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
        &holders,
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
                s.holders.iter().map(|h| h.charge).collect::<Vec<_>>(),
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
    assert_eq!(l.steps[1].holders[0].slice_hours, dec!(0.5));
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
            holders: vec![HolderCharge {
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
