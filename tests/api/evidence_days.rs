//! Right-sizing's evidence from the day summaries (issue 41): every field of the evidence and of
//! each recommendation, money to the cent, equals what the hourly rollups alone give, on a fleet
//! where each action occurs, through a late write to a summarised day and its summary made again.

use axum::http::StatusCode;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use slicemeter::domain::time::{Month, floor_day, floor_hour};
use slicemeter::plan::{self, days, recommend::TargetProfile, store};

use crate::support::*;

pub(crate) const GIB: i64 = 1 << 30;
const MIG_GPU: &str = "GPU-00000000-0000-4000-8000-000000004100";
const MPS_GPU: &str = "GPU-00000000-0000-4000-8000-000000004200";
const TS_GPU: &str = "GPU-00000000-0000-4000-8000-000000004300";
const LATE_GPU: &str = "GPU-00000000-0000-4000-8000-000000004400";

pub(crate) fn gpu(uuid: &str, mig: bool) -> Value {
    json!({"uuid": uuid, "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
           "compute_slices": 7, "memory_slices": 8, "mig_enabled": mig})
}

pub(crate) fn mig(
    uuid: &str,
    gpu: &str,
    profile: &str,
    id: i64,
    c: i64,
    m: i64,
    bytes: i64,
) -> Value {
    json!({"uuid": uuid, "gpu_uuid": gpu, "kind": "mig", "profile": profile, "profile_id": id,
           "compute_slices": c, "memory_slices": m, "memory_bytes": bytes})
}

/// An hour of `slice` held from `start` by pod `pod` of Deployment `app` in namespace `ns`, at
/// `peak` bytes and `busy` of its compute (none: not measured).
pub(crate) fn hour(
    slice: &str,
    start: DateTime<Utc>,
    ns: &str,
    app: &str,
    pod: &str,
    peak: i64,
    busy: Option<f64>,
) -> Value {
    let mut w = json!({"slice_uuid": slice, "start": start.to_rfc3339(),
           "end": (start + Duration::hours(1)).to_rfc3339(),
           "consumer": {"namespace": ns, "pod": format!("{app}-5d8c7b9f4-{pod:x>5}"), "container": "main",
                        "labels": {"pod-template-hash": "5d8c7b9f4"}},
           "held_seconds": 3600.0, "memory_byte_seconds": 3600.0 * peak as f64 * 0.8,
           "memory_peak_bytes": peak});
    if let Some(busy) = busy {
        w["compute_active_seconds"] = json!(3600.0 * busy);
    }
    w
}

pub(crate) async fn post(
    app: &TestApp,
    node: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    gpus: Value,
    slices: Value,
    windows: Vec<Value>,
) {
    let b = json!({"node": node, "period": {"start": from.to_rfc3339(), "end": to.to_rfc3339()},
                   "gpus": gpus, "slices": slices, "windows": windows});
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

/// 14 days to `end` (and today's hours before it), one batch a node and day: on a MIG H100 an
/// oversized 3g.40gb (resize), an idle 1g.10gb (give back) and a busy 1g.10gb that fits (keep);
/// two MPS shares of one Deployment (its cheaper MPS alternative) and, for the last 5 days only,
/// a third (wait); a time-sliced replica (pay per use) whose compute is measured half the hours.
async fn fleet(app: &TestApp, end: DateTime<Utc>) {
    for team in ["nlp", "search", "vision", "shared", "fresh"] {
        app.put_team(team, &[team]).await;
    }
    let mig_slices = json!([
        mig("MIG-41-3g", MIG_GPU, "3g.40gb", 9, 3, 4, 42412802048),
        mig("MIG-41-1a", MIG_GPU, "1g.10gb", 19, 1, 1, 10468982784),
        mig("MIG-41-1b", MIG_GPU, "1g.10gb", 19, 1, 1, 10468982784),
    ]);
    let mps = |uuid: &str| {
        json!({"uuid": uuid, "gpu_uuid": MPS_GPU, "kind": "mps", "active_thread_percentage": 30,
               "pinned_memory_bytes": 20 * GIB})
    };
    let shared_slices = json!([
        mps("GPU-41-mps::a"), mps("GPU-41-mps::b"), mps("GPU-41-mps::c"),
        {"uuid": "GPU-41-ts::0", "gpu_uuid": TS_GPU, "kind": "timeslice", "replicas": 2, "replica": 0},
    ]);
    let first = floor_day(end - Duration::days(14));
    let mut day = first;
    while day < end {
        let to = (day + Duration::days(1)).min(end);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut t = day;
        while t < to {
            let n = (t - first).num_hours();
            let wobble = (n * 7919 % 23) as f64 / 100.0;
            a.push(hour(
                "MIG-41-3g",
                t,
                "nlp",
                "embedder",
                "a1",
                6 * GIB + n % 5 * GIB / 10,
                Some(0.01 + wobble / 10.0),
            ));
            a.push(hour(
                "MIG-41-1a",
                t,
                "search",
                "ranker",
                "a1",
                2 * GIB,
                Some(0.0),
            ));
            a.push(hour(
                "MIG-41-1b",
                t,
                "vision",
                "keeper",
                "a1",
                7 * GIB + n % 11 * GIB / 10,
                Some(0.3 + wobble),
            ));
            b.push(hour(
                "GPU-41-mps::a",
                t,
                "shared",
                "mpsapp",
                "p1",
                3 * GIB + n % 3 * GIB,
                Some(0.05 + wobble / 4.0),
            ));
            b.push(hour(
                "GPU-41-mps::b",
                t,
                "shared",
                "mpsapp",
                "p2",
                4 * GIB,
                Some(0.08),
            ));
            if end - t <= Duration::days(5) {
                b.push(hour(
                    "GPU-41-mps::c",
                    t,
                    "fresh",
                    "waiter",
                    "w1",
                    5 * GIB,
                    Some(0.4 + wobble),
                ));
            }
            b.push(hour(
                "GPU-41-ts::0",
                t,
                "shared",
                "tsapp",
                "t1",
                9 * GIB + n % 13 * GIB / 7,
                (n % 2 == 0).then_some(0.2 + wobble),
            ));
            t += Duration::hours(1);
        }
        if day < to {
            post(
                app,
                "gpu-node-41a",
                day,
                to,
                json!([gpu(MIG_GPU, true)]),
                mig_slices.clone(),
                a,
            )
            .await;
            post(
                app,
                "gpu-node-41b",
                day,
                to,
                json!([gpu(MPS_GPU, false), gpu(TS_GPU, false)]),
                shared_slices.clone(),
                b,
            )
            .await;
        }
        day += Duration::days(1);
    }
}

async fn recommendations(
    app: &TestApp,
    evidence: &[Vec<store::Evidence>],
    now: DateTime<Utc>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for e in evidence {
        let recs = plan::recommend_all(&app.pool, e, TargetProfile::Default, now)
            .await
            .unwrap();
        out.push(serde_json::to_value(recs).unwrap());
    }
    out
}

/// The evidence of `ranges` from the summaries (windows where built, and days), from the days'
/// summaries alone and from the hourly rollups alone, and their recommendations, equal to the last
/// digit; the summaries' read is returned.
async fn equal_both_ways(
    app: &TestApp,
    ranges: &[(DateTime<Utc>, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> Vec<Vec<store::Evidence>> {
    let hourly = store::evidence_from(&app.pool, ranges, None, store::Source::HourlyOnly)
        .await
        .unwrap();
    let summarised = store::evidence(&app.pool, ranges, None).await.unwrap();
    assert_eq!(format!("{summarised:#?}"), format!("{hourly:#?}"));
    let days_only = store::evidence_from(&app.pool, ranges, None, store::Source::Days)
        .await
        .unwrap();
    assert_eq!(format!("{days_only:#?}"), format!("{hourly:#?}"));
    assert_eq!(
        recommendations(app, &summarised, now).await,
        recommendations(app, &hourly, now).await
    );
    // One team's read is that team's part of the fleet's.
    let vision_team = slicemeter::domain::team::TeamId::parse("vision").unwrap();
    let vision = store::evidence(&app.pool, ranges, Some(&vision_team))
        .await
        .unwrap();
    for (one, all) in vision.iter().zip(&summarised) {
        let theirs: Vec<_> = all.iter().filter(|e| e.team.as_str() == "vision").collect();
        assert_eq!(
            format!("{:?}", one.iter().collect::<Vec<_>>()),
            format!("{theirs:?}")
        );
    }
    summarised
}

// long: one fleet's story in order (read raw, summarised, a late write, summarised again, hours
// gone), each step checked against the one before
#[tokio::test]
async fn evidence_and_recommendations_from_day_summaries_equal_those_from_the_hourly_rollups() {
    let app = TestApp::spawn().await;
    let out = app.cli(&["rate-card", "load", "deploy/rate-card.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    let now = Utc::now();
    let end = floor_hour(now);
    fleet(&app, end).await;
    let today = floor_day(now);
    let ranges = [
        // Right-sizing's: from an hour inside a day to the current hour, today's hours in it.
        plan::right_sizing_range(14, now),
        // Whole days, the open one among them.
        (today - Duration::days(10), today + Duration::days(1)),
        // Ending inside a day.
        (
            end - Duration::days(20),
            today - Duration::days(3) + Duration::hours(5),
        ),
    ];
    let before = equal_both_ways(&app, &ranges, now).await;
    // Every action occurs.
    let recs = recommendations(&app, &before, now).await;
    let actions: std::collections::BTreeSet<String> = recs[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        actions,
        ["give_back", "keep", "pay_per_use", "resize", "wait"]
            .map(String::from)
            .into()
    );
    let mpsapp = recs[0]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["workload"] == "mpsapp")
        .unwrap_or_else(|| panic!("{}", recs[0]));
    assert_eq!(mpsapp["kind"], "mps");
    assert_eq!(mpsapp["slices"], 2);
    assert!(
        recs[0]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["shared_alternative"]["kind"] == "mps"),
        "{}",
        recs[0]
    );

    // Every closed day summarised, from the first of the month the usage starts in (those before
    // it empty): nothing lags, and the days come from their summaries.
    let round = days::summarise_due(&app.pool, now, 100).await.unwrap();
    let closed = (today - floor_day(end - Duration::days(14))).num_days() as usize;
    let from_month = (today - Month::of(end - Duration::days(14)).start()).num_days() as usize;
    assert_eq!(round.summarised.len(), from_month);
    assert_eq!(
        round.summarised[0].0,
        today - Duration::days(1),
        "the newest first"
    );
    assert_eq!(
        days::lag(&app.pool, now).await.unwrap(),
        days::Lag {
            days: 0,
            oldest: None
        }
    );
    assert_eq!(
        app.count("select count(distinct day) from evidence_day")
            .await,
        closed as i64
    );
    let summarised = equal_both_ways(&app, &ranges, now).await;
    assert_eq!(format!("{summarised:?}"), format!("{before:?}"));

    // Each range's whole closed days as a window: read from it, the same again.
    // The days summarised start on the first of the month the usage starts in.
    let windows = windows_of(&ranges, Month::of(end - Duration::days(14)).start(), today);
    for &(a, b) in &windows {
        assert!(
            matches!(days::build_window(&app.pool, a, b).await.unwrap(), days::Window::Built(n) if n > 0),
            "{a} - {b}"
        );
        assert_eq!(
            days::build_window(&app.pool, a, b).await.unwrap(),
            days::Window::UpToDate
        );
    }
    let windowed = equal_both_ways(&app, &ranges, now).await;
    assert_eq!(format!("{windowed:?}"), format!("{before:?}"));
    // One builder of a window at a time: while another holds its lock, it is left to that one.
    let (a, b) = windows[0];
    let mut other = app.pool.acquire().await.unwrap();
    let lock = (
        slicemeter::db::EVIDENCE_WINDOW_LOCK,
        slicemeter::db::evidence_day_lock(a),
    );
    sqlx::query("select pg_advisory_lock($1, $2)")
        .bind(lock.0)
        .bind(lock.1)
        .execute(&mut *other)
        .await
        .unwrap();
    assert_eq!(
        days::build_window(&app.pool, a, b).await.unwrap(),
        days::Window::Busy
    );
    sqlx::query("select pg_advisory_unlock($1, $2)")
        .bind(lock.0)
        .bind(lock.1)
        .execute(&mut *other)
        .await
        .unwrap();
    assert_eq!(
        days::build_window(&app.pool, a, b).await.unwrap(),
        days::Window::UpToDate
    );

    // A late write to a summarised day: the embedder on a card of another node for an hour, at
    // 30 GiB. The day is stale and read from the hourly rollups until summarised again.
    let late = today - Duration::days(3);
    post(
        &app,
        "gpu-node-41c",
        late + Duration::hours(2),
        late + Duration::hours(3),
        json!([gpu(LATE_GPU, true)]),
        json!([mig(
            "MIG-41-late",
            LATE_GPU,
            "3g.40gb",
            9,
            3,
            4,
            42412802048
        )]),
        vec![hour(
            "MIG-41-late",
            late + Duration::hours(2),
            "nlp",
            "embedder",
            "b2",
            30 * GIB,
            Some(0.9),
        )],
    )
    .await;
    assert_eq!(
        app.count("select count(*) from evidence_day_stale").await,
        1
    );
    assert_eq!(
        days::lag(&app.pool, now).await.unwrap(),
        days::Lag {
            days: 1,
            oldest: Some(late)
        }
    );
    let after = equal_both_ways(&app, &ranges, now).await;
    let embedder = |read: &[Vec<store::Evidence>]| {
        read[0]
            .iter()
            .find(|e| e.workload == "embedder")
            .map(|e| (e.slices, e.memory_max_bytes))
            .unwrap()
    };
    assert_eq!(embedder(&before).0, 1);
    assert_eq!(embedder(&after), (2, 30 * GIB));

    let again = days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
    assert_eq!(
        again.summarised.iter().map(|d| d.0).collect::<Vec<_>>(),
        vec![late]
    );
    assert_eq!(
        app.count("select count(*) from evidence_day_stale").await,
        0
    );
    let resummarised = equal_both_ways(&app, &ranges, now).await;
    assert_eq!(format!("{resummarised:?}"), format!("{after:?}"));
    // The windows holding the late day were built from its summary before: built again, from
    // the new one; the others are as they were.
    for &(a, b) in &windows {
        let built = days::build_window(&app.pool, a, b).await.unwrap();
        if a <= late && late < b {
            assert!(
                matches!(built, days::Window::Built(_)),
                "{a} - {b}: {built:?}"
            );
        } else {
            assert_eq!(built, days::Window::UpToDate, "{a} - {b}");
        }
    }
    let rebuilt = equal_both_ways(&app, &ranges, now).await;
    assert_eq!(format!("{rebuilt:?}"), format!("{after:?}"));

    // A namespace that changes team from inside a summarised day: its hours from then on change
    // team, and those days are stale until summarised again.
    let moved = today - Duration::days(6) + Duration::hours(9);
    app.put_team_from("search", &[], &moved.to_rfc3339()).await;
    app.put_team_from("vision", &["vision", "search"], &moved.to_rfc3339())
        .await;
    assert_eq!(
        days::lag(&app.pool, now).await.unwrap(),
        days::Lag {
            days: 6,
            oldest: Some(floor_day(moved))
        }
    );
    let reattributed = equal_both_ways(&app, &ranges, now).await;
    assert!(
        reattributed[0]
            .iter()
            .any(|e| e.workload == "ranker" && e.team.as_str() == "vision"),
        "{reattributed:?}"
    );
    assert_eq!(
        days::summarise_due(&app.pool, Utc::now(), 100)
            .await
            .unwrap()
            .summarised
            .len(),
        6
    );
    let after = equal_both_ways(&app, &ranges, now).await;
    assert_eq!(format!("{after:?}"), format!("{reattributed:?}"));

    // A summarised day is read from its summary, not its hours: with the hours of the day before
    // the late one gone (no write marks that), the summaries still give what they gave.
    let gone = late - Duration::days(1);
    sqlx::query("delete from usage_hourly where hour >= $1 and hour < $2")
        .bind(gone)
        .bind(late)
        .execute(&app.pool)
        .await
        .unwrap();
    let kept = store::evidence(&app.pool, &ranges, None).await.unwrap();
    assert_eq!(format!("{kept:?}"), format!("{after:?}"));
    let hourly = store::evidence_from(&app.pool, &ranges, None, store::Source::HourlyOnly)
        .await
        .unwrap();
    assert_ne!(format!("{hourly:?}"), format!("{after:?}"));

    // Windows built from the days as they are summarised now are read instead of the days: with
    // the days' summaries gone too, the windows still give what they gave.
    for &(a, b) in &windows {
        let built = days::build_window(&app.pool, a, b).await.unwrap();
        assert!(
            matches!(built, days::Window::Built(_)),
            "{a} - {b}: {built:?}"
        );
    }
    let saved: Vec<(String,)> = sqlx::query_as("select to_json(d)::text from evidence_day d")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    sqlx::query("delete from evidence_day")
        .execute(&app.pool)
        .await
        .unwrap();
    let from_windows = store::evidence(&app.pool, &ranges, None).await.unwrap();
    assert_eq!(format!("{from_windows:?}"), format!("{after:?}"));
    let from_days = store::evidence_from(&app.pool, &ranges, None, store::Source::Days)
        .await
        .unwrap();
    assert_ne!(format!("{from_days:?}"), format!("{after:?}"));
    for (row,) in &saved {
        sqlx::query("insert into evidence_day select * from json_populate_record(null::evidence_day, $1::json)")
            .bind(row)
            .execute(&app.pool)
            .await
            .unwrap();
    }

    // A window that kept too few of a workload's largest values for a range (here: cut to its
    // largest compute fraction, where p95 of over 20 values is not the largest) is not used for
    // that read: the range is read from its days.
    let cut = sqlx::query(
        "update evidence_window set compute_top = compute_top[cardinality(compute_top):]
         where compute_count > 20",
    )
    .execute(&app.pool)
    .await
    .unwrap()
    .rows_affected();
    assert!(cut > 0);
    let fallen_back = store::evidence(&app.pool, &ranges, None).await.unwrap();
    assert_eq!(format!("{fallen_back:?}"), format!("{after:?}"));
}

/// Each range's whole days from `first` (the first day summarised) to `today`: the window it
/// reads once built.
fn windows_of(
    ranges: &[(DateTime<Utc>, DateTime<Utc>)],
    first: DateTime<Utc>,
    today: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    ranges
        .iter()
        .filter_map(|&(from, to)| {
            slicemeter::domain::time::whole_days(from.max(first), to.min(today))
        })
        .collect()
}

/// The demo's fleet (seed 42, 16 GPUs, 15-minute windows from 60 s samples, 6-hour batches) for
/// the last 9 days: its evidence and recommendations from the summaries equal the hourly
/// rollups' too.
#[tokio::test]
async fn the_demo_fleets_evidence_from_day_summaries_equals_the_hourly_rollups() {
    let app = TestApp::spawn().await;
    let out = app.cli(&["rate-card", "load", "deploy/rate-card.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    let now = Utc::now();
    let from = floor_day(now) - Duration::days(9);
    let cadence = slicemeter::collector::Cadence {
        sample_interval: std::time::Duration::from_secs(60),
        window: std::time::Duration::from_secs(15 * 60),
        batch_period: std::time::Duration::from_secs(6 * 3600),
    };
    let hours = (floor_hour(now) - from).num_hours();
    crate::reports::simulated_at(&app, 42, 16, &from.to_rfc3339(), hours, cadence).await;
    let ranges = [
        plan::right_sizing_range(7, now),
        (from, floor_day(now) + Duration::days(1)),
    ];
    let before = equal_both_ways(&app, &ranges, now).await;
    assert!(before[1].len() > 10, "{before:?}");
    // Each closed day from the first of the month the usage starts in.
    let round = days::summarise_due(&app.pool, now, 100).await.unwrap();
    assert_eq!(
        round.summarised.len() as i64,
        (floor_day(now) - Month::of(from).start()).num_days()
    );
    let after = equal_both_ways(&app, &ranges, now).await;
    assert_eq!(format!("{after:?}"), format!("{before:?}"));
}
