//! The usage report's sums by a consumer's fields (a team page's workloads and cost over time, issue
//! 41) are summed per slice and consumer before the consumer is named, where they were named once a
//! row: every sum, to the last digit, equals the per-row read it replaced (`usage_per_row.sql`), on
//! a month with pod restarts, two consumers of one workload on one slice, a time-sliced replica, a
//! namespace re-attributed to another team after its days were written, a late write to a written
//! day, and ranges that start and end inside days.

use axum::http::StatusCode;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use slicemeter::domain::team::TeamId;
use slicemeter::domain::time::whole_days;
use slicemeter::reports::store as report_store;
use slicemeter::reports::usage::{Dimension, GroupBy, Step, UsageSums};
use sqlx::Row;

use crate::support::*;

const TS_GPU: &str = "GPU-00000000-0000-4000-8000-000000004199";

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// An hour of `slice` from `start` held by pod `pod` of Deployment `app` in namespace `ns`.
fn hour(slice: &str, start: DateTime<Utc>, ns: &str, app: &str, pod: &str, n: i64) -> Value {
    json!({"slice_uuid": slice, "start": start.to_rfc3339(),
           "end": (start + Duration::hours(1)).to_rfc3339(),
           "consumer": {"namespace": ns, "pod": format!("{app}-5d8c7b9f4-{pod}"), "container": "main",
                        "labels": {"pod-template-hash": "5d8c7b9f4"}},
           "held_seconds": 3600.0 - (n % 7) as f64,
           "memory_byte_seconds": 3.3e12 + (n % 13) as f64 * 1.7e11,
           "memory_peak_bytes": 4_000_000_000_i64,
           "compute_active_seconds": 300.0 + (n % 11) as f64 * 97.0})
}

async fn post(app: &TestApp, from: DateTime<Utc>, to: DateTime<Utc>, windows: Vec<Value>) {
    let (mut gpus, mut slices) = h100_inventory();
    gpus.as_array_mut().unwrap().push(
        json!({"uuid": TS_GPU, "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
               "compute_slices": 7, "memory_slices": 8, "mig_enabled": false}),
    );
    slices.as_array_mut().unwrap().push(
        json!({"uuid": "GPU-41-ts::0", "gpu_uuid": TS_GPU, "kind": "timeslice", "replicas": 2, "replica": 0}),
    );
    let b = json!({"node": "gpu-node-01", "period": {"start": from.to_rfc3339(), "end": to.to_rfc3339()},
                   "gpus": gpus, "slices": slices, "windows": windows});
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

/// Ten days of October 2026, a batch a day: the 3g.40gb held by `embedder`, whose pod restarts
/// every third day; one 1g.10gb by two pods of `ranker` taking turns by the hour; the other by
/// `keeper` in namespace `vision`; the time-sliced replica by `tsapp`. Then `vision` passes to
/// team `nlp` from the 5th (its days re-attributed), and the 3rd gets a late hour.
async fn month(app: &TestApp) {
    app.put_team("nlp", &["nlp", "search"]).await;
    app.put_team("vision", &["vision"]).await;
    let first = at("2026-10-01T00:00:00Z");
    for d in 0..10 {
        let day = first + Duration::days(d);
        let mut w = Vec::new();
        for h in 0..24 {
            let n = d * 24 + h;
            let t = day + Duration::hours(h);
            if h == 23 && d == 2 {
                continue; // its hour comes late, below
            }
            w.push(hour(
                MIG_3G,
                t,
                "nlp",
                "embedder",
                &format!("e{:04}", d / 3),
                n,
            ));
            let pod = if h % 2 == 0 { "ra001" } else { "ra002" };
            w.push(hour(MIG_1G_A, t, "search", "ranker", pod, n));
            if h % 4 != 3 {
                w.push(hour(MIG_1G_B, t, "vision", "keeper", "kp001", n));
            }
            w.push(hour("GPU-41-ts::0", t, "nlp", "tsapp", "ts001", n));
        }
        let end = day + Duration::hours(if d == 2 { 23 } else { 24 });
        post(app, day, end, w).await;
    }
    app.put_team_from("vision", &[], "2026-10-05T00:00:00Z")
        .await;
    app.put_team_from("nlp", &["nlp", "search", "vision"], "2026-10-05T00:00:00Z")
        .await;
    let late = at("2026-10-03T23:00:00Z");
    post(
        app,
        late,
        late + Duration::hours(1),
        vec![hour(MIG_3G, late, "nlp", "embedder", "late1", 71)],
    )
    .await;
}

/// The reference read's rows, as `usage_sums` gives them.
async fn per_row(
    app: &TestApp,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: &GroupBy,
    step: Step,
    team: Option<&TeamId>,
) -> Vec<UsageSums> {
    let days = whole_days(from, to).filter(|_| step != Step::Hour);
    let rows = sqlx::query(include_str!("usage_per_row.sql"))
        .bind(from)
        .bind(to)
        .bind(step.as_str())
        .bind(team.map(TeamId::as_str))
        .bind(days.map(|d| d.0))
        .bind(days.map(|d| d.1))
        .bind(group_by.has_node())
        .bind(group_by.has(&Dimension::Namespace))
        .bind(group_by.has(&Dimension::Workload))
        .bind(group_by.has(&Dimension::Pod))
        .bind(group_by.has(&Dimension::Container))
        .bind(group_by.label_keys())
        .bind(group_by.has(&Dimension::Dcgm(slicemeter::domain::dcgm::DcgmLabel::Uuid)))
        .bind(group_by.has(&Dimension::Dcgm(
            slicemeter::domain::dcgm::DcgmLabel::GpuIId,
        )))
        .bind(group_by.has_dra_claim())
        .bind(step != Step::Month && !group_by.has_consumer_field())
        .bind(step != Step::Hour && group_by.fits_team_days())
        .fetch_all(&app.pool)
        .await
        .unwrap();
    rows.into_iter()
        .map(|r| UsageSums {
            bucket: r.get("bucket"),
            team: TeamId::parse(r.get::<String, _>("team").as_str()).unwrap(),
            model: r.get("model"),
            kind: r.get::<String, _>("kind").parse().unwrap(),
            profile: r.get("profile"),
            rate_card: r.get("rate_card"),
            node: r.get("node"),
            namespace: r.get("namespace"),
            workload: r.get("workload"),
            pod: r.get("pod"),
            container: r.get("container"),
            labels: r
                .get::<Option<Vec<Option<String>>>, _>("labels")
                .unwrap_or_default(),
            gpu_uuid: r.get("gpu_uuid"),
            gpu_instance_id: r.get("gpu_instance_id"),
            dra_claim: r
                .get::<Option<sqlx::types::Json<_>>, _>("dra_claim")
                .map(|c| c.0),
            reserved: r.get("reserved"),
            sums: slicemeter::domain::usage::OccupancySums {
                held_seconds: r.get("held_seconds"),
                held_compute: r.get("held_compute"),
                held_memory: r.get("held_memory"),
                known_seconds: r.get("known_seconds"),
                known_compute: r.get("known_compute"),
                compute_active_seconds: r.get("compute_active_seconds"),
                active_compute: r.get("active_compute"),
                memory_gib_seconds: r.get("memory_gib_seconds"),
                memory_used: r.get("memory_used"),
                windows: r.get("windows"),
            },
        })
        .collect()
}

#[tokio::test]
async fn usage_by_a_consumers_fields_summed_per_consumer_equals_the_per_row_read_to_the_digit() {
    let app = TestApp::spawn().await;
    month(&app).await;
    let nlp = TeamId::parse("nlp").unwrap();
    let page: GroupBy = "namespace,workload,gpu_model,kind,profile".parse().unwrap();
    let cases: Vec<(&str, &str, GroupBy, Step, Option<&TeamId>)> = vec![
        // The team page's workloads, and its cost over time.
        (
            "2026-10-01T00:00:00Z",
            "2026-11-01T00:00:00Z",
            page.clone(),
            Step::Month,
            Some(&nlp),
        ),
        (
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
            "workload".parse().unwrap(),
            Step::Month,
            Some(&nlp),
        ),
        // The fleet's, by pod and container, and ranges that start and end inside days.
        (
            "2026-10-01T00:00:00Z",
            "2026-11-01T00:00:00Z",
            "team,namespace,workload".parse().unwrap(),
            Step::Month,
            None,
        ),
        (
            "2026-10-02T05:00:00Z",
            "2026-10-08T17:00:00Z",
            "team,pod,container,gpu_model".parse().unwrap(),
            Step::Month,
            None,
        ),
        (
            "2026-10-02T05:00:00Z",
            "2026-10-08T17:00:00Z",
            page.clone(),
            Step::Day,
            Some(&nlp),
        ),
        (
            "2026-10-03T20:00:00Z",
            "2026-10-04T03:00:00Z",
            "team,workload".parse().unwrap(),
            Step::Hour,
            None,
        ),
    ];
    for (from, to, group_by, step, team) in cases {
        let (from, to) = (at(from), at(to));
        let now = report_store::usage_sums(&app.pool, from, to, &group_by, step, team)
            .await
            .unwrap();
        let before = per_row(&app, from, to, &group_by, step, team).await;
        assert!(
            !now.is_empty(),
            "{group_by:?} {step:?} from {from}: no rows"
        );
        assert_eq!(now, before, "{group_by:?} {step:?} from {from} to {to}");
    }
    // The re-attribution moved vision's days from the 5th: both teams have rows of it.
    let by_team = report_store::usage_sums(
        &app.pool,
        at("2026-10-01T00:00:00Z"),
        at("2026-11-01T00:00:00Z"),
        &"team,namespace".parse().unwrap(),
        Step::Month,
        None,
    )
    .await
    .unwrap();
    let vision: Vec<&str> = by_team
        .iter()
        .filter(|s| s.namespace.as_deref() == Some("vision"))
        .map(|s| s.team.as_str())
        .collect();
    assert_eq!(vision, ["nlp", "vision"]);
}

/// The unit cost's pod-hour sums (`reports::pod_hours`: the hourly rows summed in Rust) are the usage
/// report's by hour and pod, to the digit, where a pod's hour is several rows: two containers of
/// one pod taking turns on a MIG slice and on a time-sliced replica (a group whose memory used is
/// PostgreSQL's quotient of the group's sum), a pod on both 1g.10gb slices and on both replicas of
/// a time-sliced GPU in one hour; for every team and for one.
#[tokio::test]
async fn pod_hour_sums_summed_in_rust_are_the_usage_reports_to_the_digit() {
    use rust_decimal::Decimal;
    use slicemeter::reports::pod_hours;
    use std::collections::BTreeMap;
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp", "search"]).await;
    app.put_team("vision", &["vision"]).await;
    let t0 = at("2026-10-01T00:00:00Z");
    let min = |m: i64| (t0 + Duration::minutes(m)).to_rfc3339();
    // Figures whose quotients and products run to many places.
    let w = |slice: &str, from: i64, to: i64, ns: &str, pod: &str, container: &str, k: i64| {
        let held = ((to - from) * 60 - k % 7) as f64;
        json!({"slice_uuid": slice, "start": min(from), "end": min(to),
               "consumer": {"namespace": ns, "pod": pod, "container": container},
               "held_seconds": held, "memory_byte_seconds": held * 1.0e9 + (k * 7_919) as f64,
               "memory_peak_bytes": 4_000_000_000_i64,
               "compute_active_seconds": held / 3.0 + k as f64})
    };
    let (ts0, ts1) = ("GPU-44-ts::0", "GPU-44-ts::1");
    let mut windows = Vec::new();
    for h in 0..6 {
        let m = h * 60;
        let k = h + 1;
        // Two containers of one pod taking turns on the 3g.40gb, and on replica 0.
        windows.push(w(MIG_3G, m, m + 20, "nlp", "embedder-0", "main", k));
        windows.push(w(
            MIG_3G,
            m + 20,
            m + 60,
            "nlp",
            "embedder-0",
            "warmup",
            k + 3,
        ));
        windows.push(w(ts0, m, m + 25, "nlp", "tsapp-0", "main", k + 5));
        windows.push(w(ts0, m + 25, m + 45, "nlp", "tsapp-0", "sidecar", k + 8));
        // One pod on both replicas in the same hour, and on both 1g.10gb slices.
        windows.push(w(ts1, m + 10, m + 50, "nlp", "tsapp-0", "main", k + 13));
        windows.push(w(MIG_1G_A, m, m + 30, "vision", "keeper-0", "main", k + 21));
        windows.push(w(
            MIG_1G_B,
            m + 30,
            m + 55,
            "vision",
            "keeper-0",
            "main",
            k + 34,
        ));
    }
    let (mut gpus, mut slices) = h100_inventory();
    gpus.as_array_mut().unwrap().push(
        json!({"uuid": TS_GPU, "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
               "compute_slices": 7, "memory_slices": 8, "mig_enabled": false}),
    );
    for (uuid, replica) in [(ts0, 0), (ts1, 1)] {
        slices
            .as_array_mut()
            .unwrap()
            .push(json!({"uuid": uuid, "gpu_uuid": TS_GPU,
            "kind": "timeslice", "replicas": 2, "replica": replica}));
    }
    let b = json!({"node": "gpu-node-01", "period": {"start": min(0), "end": min(360)},
                   "gpus": gpus, "slices": slices, "windows": windows});
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    // The fixture's point: hours of one slice and pod in several rows.
    let several = app
        .count(
            "select count(*) from (select h.hour, h.slice_id, c.pod from usage_hourly h
             join consumer c using (consumer_id) group by 1, 2, 3 having count(*) > 1) g",
        )
        .await;
    assert_eq!(several, 12, "6 hours x (the 3g.40gb, replica 0)");

    let group_by: GroupBy = "team,namespace,workload,pod".parse().unwrap();
    let (from, to) = (t0, t0 + Duration::hours(6));
    let nlp = TeamId::parse("nlp").unwrap();
    for team in [None, Some(&nlp)] {
        let key = |s: &UsageSums| {
            (
                s.bucket,
                s.team.clone(),
                s.model.clone(),
                s.kind,
                s.profile.clone(),
                s.namespace.clone(),
                s.workload.clone(),
                s.pod.clone(),
            )
        };
        // What a price reads of each row: a reserved slice's held compute and memory, a
        // time-sliced replica's active compute and memory used.
        let read = |s: &UsageSums| {
            let o = &s.sums;
            if s.reserved {
                (o.held_compute, o.held_memory)
            } else {
                (o.active_compute, o.memory_used)
            }
        };
        let want: BTreeMap<_, _> =
            report_store::usage_sums(&app.pool, from, to, &group_by, Step::Hour, team)
                .await
                .unwrap()
                .iter()
                .map(|s| (key(s), read(s)))
                .collect();
        let pod_hours = pod_hours::sums(&app.pool, from, to, team).await.unwrap();
        let got: BTreeMap<_, _> = UsageSums::of_pod_hours(&pod_hours)
            .iter()
            .map(|s| (key(s), read(s)))
            .collect();
        // Each hour: the embedder on the 3g.40gb, the time-sliced pod, and vision's keeper.
        let pods = if team.is_some() { 2 } else { 3 };
        assert_eq!(want.len(), 6 * pods, "{team:?}: {want:#?}");
        assert_eq!(got, want, "{team:?}");
        // Not a tautology of zeros: the time-sliced pod's memory used has its nine places.
        let ts = want
            .iter()
            .find(|(k, _)| k.7.as_deref() == Some("tsapp-0"))
            .unwrap();
        assert!(ts.1.1.scale() == 9 && ts.1.1 > Decimal::ONE, "{ts:?}");
    }
}
