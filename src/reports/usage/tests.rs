//! The usage report's pricing and grouping, on hand-built rollup sums.

use super::*;
use crate::billing::pricing::tests::card;
use rust_decimal_macros::dec;

const H100: &str = "NVIDIA H100 80GB HBM3";

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// `held` seconds of a slice with these shares, a quarter busy, half its memory used.
fn sums(reserved: bool, held: Decimal, compute_share: Decimal, memory_share: Decimal) -> UsageSums {
    UsageSums {
        bucket: at("2026-10-01T00:00:00Z"),
        team: TeamId::parse("nlp").unwrap(),
        model: H100.into(),
        kind: if reserved {
            SliceKind::Mig
        } else {
            SliceKind::Timeslice
        },
        profile: reserved.then(|| "3g.40gb".to_owned()),
        rate_card: None,
        node: None,
        namespace: None,
        workload: None,
        pod: None,
        container: None,
        labels: Vec::new(),
        gpu_uuid: None,
        gpu_instance_id: None,
        dra_claim: None,
        reserved,
        sums: OccupancySums {
            held_seconds: held,
            held_compute: held * compute_share,
            held_memory: held * memory_share,
            known_seconds: held,
            known_compute: held * compute_share,
            compute_active_seconds: held / dec!(4),
            active_compute: held / dec!(4) * compute_share,
            memory_gib_seconds: dec!(0),
            memory_used: held / dec!(2) * memory_share,
            windows: 1,
        },
    }
}

fn report(rows: &[UsageSums], group_by: &str, invoiced: &Invoiced) -> UsageReport {
    let cards = BTreeMap::from([(1, card())]);
    build(
        at("2026-10-01T00:00:00Z"),
        at("2026-11-01T00:00:00Z"),
        &group_by.parse().unwrap(),
        Step::Month,
        ShareWeights::default(),
        rows,
        &cards,
        invoiced,
    )
}

#[test]
fn a_3g_40gb_held_for_an_hour_is_0_46_gpu_hours_and_its_efficiency_weighs_compute_and_memory() {
    let s = sums(true, dec!(3600), dec!(3) / dec!(7), dec!(0.5));
    let r = report(&[s], "team", &Invoiced::default());
    let f = &r.total;
    assert_eq!(f.slice_hours, dec!(1));
    assert_eq!(f.gpu_equivalent_hours, dec!(0.464286));
    // 25 % busy on 3/7 of compute, half of its memory used: (0.5*3/7*0.25 + 0.5*0.5*0.5) / 0.4642857
    assert_eq!(f.efficiency, Some(dec!(0.3846)));
    // No rate card in force: no cost, and the report says why.
    assert_eq!(f.cost, None);
    assert!(r.cost_note.unwrap().contains("no rate card"));
}

#[test]
fn unknown_compute_makes_efficiency_unknown_not_zero() {
    let mut s = sums(true, dec!(3600), dec!(1), dec!(1));
    s.sums.known_seconds = dec!(0);
    s.sums.known_compute = dec!(0);
    s.sums.compute_active_seconds = dec!(0);
    s.sums.active_compute = dec!(0);
    s.rate_card = Some(1);
    let r = report(&[s], "team", &Invoiced::default());
    assert_eq!(r.total.efficiency, None);
    assert_eq!(r.total.used_gpu_equivalent_hours, None);
    assert_eq!(r.total.compute_unknown_hours, dec!(1));
    assert_eq!(r.total.gpu_equivalent_hours, dec!(1));
    // An hour of a whole H100 at 4.00; how much of it idled is not known.
    assert_eq!(r.total.cost, Some(dec!(4.00)));
    assert_eq!(r.total.idle_cost, None);
}

#[test]
fn a_timeslice_replica_blocks_what_it_measurably_used() {
    // A quarter busy and half the GPU's memory: 0.5*0.25 + 0.5*0.5 = 0.375 GPU-hours.
    let s = sums(false, dec!(3600), dec!(1), dec!(1));
    let r = report(&[s], "team", &Invoiced::default());
    assert_eq!(r.total.gpu_equivalent_hours, dec!(0.375));
    assert_eq!(r.total.efficiency, Some(dec!(1)));
}

/// Three workloads' thirds of one 3g.40gb month: 1,337.142857... each a third of it.
fn thirds() -> Vec<UsageSums> {
    ["api", "batch", "notebook"]
        .into_iter()
        .map(|w| {
            let mut s = sums(true, dec!(240) * dec!(3600), dec!(3) / dec!(7), dec!(0.5));
            s.rate_card = Some(1);
            s.namespace = Some("ml".into());
            s.workload = Some(w.into());
            s
        })
        .collect()
}

fn costs(r: &UsageReport) -> Vec<Decimal> {
    r.totals.iter().map(|t| t.figures.cost.unwrap()).collect()
}

#[test]
fn workloads_sharing_an_invoice_line_add_up_to_it_to_the_cent() {
    // Each third is 445.714285...: rounded alone they would make 1,337.13, not the line's 1,337.14.
    let r = report(&thirds(), "team,namespace,workload", &Invoiced::default());
    assert_eq!(costs(&r), vec![dec!(445.71), dec!(445.72), dec!(445.71)]);
    assert_eq!(r.total.cost, Some(dec!(1337.14)));
    assert_eq!(r.currency.as_deref(), Some("USD"));
    assert_eq!(r.cost_note, None);
    let key = &r.totals[1].key;
    assert_eq!(key["workload"].as_deref(), Some("batch"));
    assert_eq!(key["namespace"].as_deref(), Some("ml"));
    assert_eq!(key["team"].as_deref(), Some("nlp"));
}

#[test]
fn rows_are_rounded_in_their_own_order_whatever_order_their_sums_come_in() {
    // The database gives the sums unordered, and a row's sums may come in pieces (two slices of one
    // pod): the notebook's third in two halves, apart, and "batch" first. Rounded in the order they
    // came, the carried cent would land on the notebook.
    let [api, batch, notebook]: [UsageSums; 3] = thirds().try_into().unwrap();
    let half = |s: &UsageSums| {
        let mut h = sums(true, dec!(120) * dec!(3600), dec!(3) / dec!(7), dec!(0.5));
        h.rate_card = s.rate_card;
        h.namespace = s.namespace.clone();
        h.workload = s.workload.clone();
        h
    };
    let r = report(
        &[batch, half(&notebook), api, half(&notebook)],
        "team,namespace,workload",
        &Invoiced::default(),
    );
    // As when they come one a row, in order: the carried cent lands on the second row, "batch".
    assert_eq!(costs(&r), vec![dec!(445.71), dec!(445.72), dec!(445.71)]);
    assert_eq!(r.total.cost, Some(dec!(1337.14)));
    let workloads: Vec<_> = r.totals.iter().map(|t| t.key["workload"].clone()).collect();
    assert_eq!(
        workloads,
        [
            Some("api".into()),
            Some("batch".into()),
            Some("notebook".into())
        ]
    );
}

#[test]
fn an_issued_line_is_apportioned_as_issued_and_a_part_month_at_its_own_price() {
    // The line was issued at 1,300.00 (before late data): the rows still add up to the invoice.
    let line = (
        Month::of(at("2026-10-01T00:00:00Z")),
        TeamId::parse("nlp").unwrap(),
        H100.to_owned(),
        SliceKind::Mig,
        Some("3g.40gb".to_owned()),
        1,
    );
    let invoiced = Invoiced(BTreeMap::from([(line, dec!(1300.00))]));
    let r = report(&thirds(), "workload", &invoiced);
    assert_eq!(costs(&r), vec![dec!(433.33), dec!(433.34), dec!(433.33)]);
    // A range that is part of the month is not the invoice: priced and rounded on its own.
    let cards = BTreeMap::from([(1, card())]);
    let part = build(
        at("2026-10-01T00:00:00Z"),
        at("2026-10-15T00:00:00Z"),
        &"workload".parse().unwrap(),
        Step::Month,
        ShareWeights::default(),
        &thirds(),
        &cards,
        &invoiced,
    );
    assert_eq!(part.total.cost, Some(dec!(1337.14)));
}

#[test]
fn idle_cost_is_the_unused_part_of_the_cost() {
    let r = report(&thirds(), "team", &Invoiced::default());
    // Efficiency 0.3846: 1,337.14 x (1 - 0.384615...) = 822.86.
    assert_eq!(r.total.idle_cost, Some(dec!(822.86)));
}

#[test]
fn labels_and_missing_values_group_as_null() {
    let mut rows = thirds();
    rows[0].labels = vec![Some("search".into())];
    rows[1].labels = vec![None];
    rows[2].labels = vec![Some("search".into())];
    let r = report(&rows, "label:app", &Invoiced::default());
    let keys: Vec<Option<&str>> = r
        .totals
        .iter()
        .map(|t| t.key["label:app"].as_deref())
        .collect();
    assert_eq!(keys, vec![None, Some("search")]);
    assert_eq!(costs(&r), vec![dec!(445.71), dec!(891.43)]);
}

#[test]
fn group_by_names_every_wrong_dimension() {
    let g: GroupBy = "team,namespace,label:app.kubernetes.io/name"
        .parse()
        .unwrap();
    assert_eq!(g.to_string(), "team,namespace,label:app.kubernetes.io/name");
    assert_eq!(g.label_keys(), vec!["app.kubernetes.io/name".to_owned()]);
    let e = "cluster,team,team,label:".parse::<GroupBy>().unwrap_err();
    assert!(e.contains("\"cluster\" is not one of team, gpu_model, kind, profile, node, namespace, workload, pod, container, label:<key>, UUID, Hostname, modelName, GPU_I_PROFILE, GPU_I_ID, dra_claim_name"), "{e}");
    assert!(e.contains("\"team\" is given twice"), "{e}");
    assert!(e.contains("\"\" is not a label key"), "{e}");
    // dcgm-exporter's names are case-sensitive, as Prometheus labels are.
    let e = "gpu_i_id".parse::<GroupBy>().unwrap_err();
    assert!(e.contains("\"gpu_i_id\" is not one of"), "{e}");
    let e = "pod,container,namespace,workload,team,node,kind"
        .parse::<GroupBy>()
        .unwrap_err();
    assert!(
        e.contains("7 dimensions; a report groups by at most 6"),
        "{e}"
    );
    assert!(
        "week"
            .parse::<Step>()
            .unwrap_err()
            .contains("hour, day, month")
    );
}

#[test]
fn dcgm_exporter_labels_group_mig_instances_and_claims_and_are_null_where_dcgm_has_none() {
    // Two MIG instances of one GPU (GPU instances 1 and 2, the second held through a DRA claim)
    // and a time-sliced replica of another.
    let mut rows = thirds();
    rows[0].gpu_uuid = Some("GPU-1".into());
    rows[0].gpu_instance_id = Some(1);
    rows[1].gpu_uuid = Some("GPU-1".into());
    rows[1].gpu_instance_id = Some(2);
    rows[1].dra_claim = Some(DraClaim {
        namespace: "ml".into(),
        name: "batch-0-gpu".into(),
        driver: Some("gpu.nvidia.com".into()),
        pool: None,
        device: None,
    });
    rows[2] = sums(false, dec!(240) * dec!(3600), dec!(1), dec!(1));
    rows[2].rate_card = Some(1);
    rows[2].gpu_uuid = Some("GPU-2".into());
    rows[2].node = Some("node-2".into());
    let r = report(
        &rows,
        "UUID,GPU_I_PROFILE,GPU_I_ID,dra_claim_name,dra_driver_name,Hostname",
        &Invoiced::default(),
    );
    let keys: Vec<Vec<Option<&str>>> = r
        .totals
        .iter()
        .map(|t| {
            [
                "UUID",
                "GPU_I_PROFILE",
                "GPU_I_ID",
                "dra_claim_name",
                "dra_driver_name",
                "Hostname",
            ]
            .iter()
            .map(|k| t.key[*k].as_deref())
            .collect()
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            vec![Some("GPU-1"), Some("3g.40gb"), Some("1"), None, None, None],
            vec![
                Some("GPU-1"),
                Some("3g.40gb"),
                Some("2"),
                Some("batch-0-gpu"),
                Some("gpu.nvidia.com"),
                None
            ],
            vec![Some("GPU-2"), None, None, None, None, Some("node-2")],
        ]
    );
}
