//! `GET /v1/reports/usage` against rollups built by real ingest, checked against the raw windows.
//!
//! The file stays whole: every test compares the report with the raw windows through the same
//! helpers.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use axum::http::StatusCode;
use rust_decimal::Decimal;
use slicemeter::collector::Cadence;
use slicemeter::domain::access::Role;
use slicemeter::domain::slice::{GpuGeometry, Reservation};
use slicemeter::sim::SimFleet;
use sqlx::Row;

use crate::support::*;

/// Ingests `hours` of a simulated fleet through the API, with its teams configured.
pub async fn simulated(app: &TestApp, seed: u64, gpus: usize, from: &str, hours: i64) -> SimFleet {
    let cadence = Cadence {
        sample_interval: Duration::from_secs(5),
        window: Duration::from_secs(60),
        batch_period: Duration::from_secs(3600),
    };
    simulated_at(app, seed, gpus, from, hours, cadence).await
}

/// [`simulated`] at `cadence` (coarser windows for long stretches).
pub async fn simulated_at(
    app: &TestApp,
    seed: u64,
    gpus: usize,
    from: &str,
    hours: i64,
    cadence: Cadence,
) -> SimFleet {
    let fleet = SimFleet::generate(seed, gpus);
    for t in &fleet.teams {
        let ns: Vec<&str> = t.namespaces.iter().map(String::as_str).collect();
        app.put_team(&t.id, &ns).await;
    }
    let from: chrono::DateTime<chrono::Utc> = from.parse().unwrap();
    let mut batches = Vec::new();
    slicemeter::sim::generate::generate(
        &fleet,
        from,
        from + chrono::Duration::hours(hours),
        cadence,
        |day| {
            batches.extend(day);
            true
        },
    )
    .unwrap();
    for b in &batches {
        let r = app
            .ingest(&app.admin, &serde_json::to_value(b).unwrap())
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    fleet
}

#[derive(Default, Debug, PartialEq)]
struct Expected {
    held: Decimal,
    gpu_eq: Decimal,
    memory: Decimal,
    active: Decimal,
    windows: i64,
}

/// Sums per team computed straight from the raw windows, with the domain's share formula.
async fn expected_from_windows(app: &TestApp, key: &str) -> BTreeMap<String, Expected> {
    let rows = sqlx::query(&format!(
        "select {key} as key, s.kind, s.profile, s.compute_slices, s.memory_slices, s.memory_bytes,
                s.active_thread_percentage, s.pinned_memory_bytes, s.fraction, s.replicas, s.replica,
                g.memory_bytes as gpu_memory, g.compute_slices as gpu_compute, g.memory_slices as gpu_memory_slices,
                o.held_seconds, o.memory_byte_seconds, o.compute_active_seconds
         from occupancy o join slice s using (slice_id) join gpu g on g.gpu_id = s.gpu_id join consumer c using (consumer_id)"
    ))
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let half = Decimal::new(5, 1);
    let mut out: BTreeMap<String, Expected> = BTreeMap::new();
    for r in rows {
        let geo = GpuGeometry {
            memory_bytes: r.get::<i64, _>("gpu_memory") as u64,
            compute_slices: r.get::<i16, _>("gpu_compute") as u8,
            memory_slices: r.get::<i16, _>("gpu_memory_slices") as u8,
        };
        let kind: String = r.get("kind");
        let reservation = match kind.as_str() {
            "mig" => Reservation::Mig {
                profile: r.get("profile"),
                profile_id: None,
                compute_slices: r.get::<i16, _>("compute_slices") as u8,
                memory_slices: r.get::<i16, _>("memory_slices") as u8,
                memory_bytes: r.get::<i64, _>("memory_bytes") as u64,
            },
            "mps" => Reservation::Mps {
                active_thread_percentage: r.get::<i16, _>("active_thread_percentage") as u8,
                pinned_memory_bytes: r.get::<i64, _>("pinned_memory_bytes") as u64,
            },
            "vgpu" => Reservation::Vgpu {
                fraction: r.get("fraction"),
            },
            "timeslice" => Reservation::Timeslice {
                replicas: r.get::<i16, _>("replicas") as u16,
                replica: r.get::<i16, _>("replica") as u16,
            },
            _ => Reservation::Whole,
        };
        let share = reservation.physical_share(&geo);
        let held: Decimal = r.get("held_seconds");
        let memory: Decimal = r.get("memory_byte_seconds");
        let active: Decimal = r
            .get::<Option<Decimal>, _>("compute_active_seconds")
            .unwrap();
        let gpu_eq = if kind == "timeslice" {
            half * active + half * memory / Decimal::from(geo.memory_bytes)
        } else {
            held * (half * share.compute + half * share.memory)
        };
        let e = out.entry(r.get("key")).or_default();
        e.held += held;
        e.gpu_eq += gpu_eq;
        e.memory += memory;
        e.active += active;
        e.windows += 1;
    }
    out
}

fn dec(v: &serde_json::Value) -> Decimal {
    Decimal::from_str(
        v.as_str()
            .unwrap_or_else(|| panic!("a decimal string, got {v}")),
    )
    .unwrap()
}

fn hours(seconds: Decimal) -> Decimal {
    seconds / Decimal::from(3600)
}

/// The report rounds to six decimals once; the expectation is exact.
#[track_caller]
fn assert_hours(got: &serde_json::Value, want: Decimal, what: &str) {
    let got = dec(got);
    assert!(
        (got - want).abs() <= Decimal::new(5, 7),
        "{what}: report says {got}, the windows say {want}"
    );
}

#[tokio::test]
async fn usage_report_totals_equal_sums_computed_from_the_stored_windows() {
    let app = TestApp::spawn().await;
    simulated(&app, 5, 24, "2026-10-30T20:00:00Z", 6).await;
    // dcgm-exporter's labels too: null where a slice has none (not a MIG instance, no DRA claim).
    for (group_by, key) in [
        // A window's team as the owners' versions say at its start (none changes here).
        (
            "team",
            "consumer_team_at(c.team_label, c.namespace, o.window_start)",
        ),
        ("kind", "s.kind"),
        ("node", "g.node"),
        ("UUID", "g.gpu_uuid"),
        ("GPU_I_ID", "coalesce(s.gpu_instance_id::text, 'null')"),
        ("dra_claim_name", "coalesce(c.dra_claim ->> 'name', 'null')"),
    ] {
        let want = expected_from_windows(&app, key).await;
        let r = app
            .get(
                Some(&app.admin),
                &format!(
                    "/v1/reports/usage?from=2026-10-30&to=2026-11-01&group_by={group_by}&step=day"
                ),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        let totals = r.body["totals"].as_array().unwrap();
        assert_eq!(totals.len(), want.len(), "{group_by}: {totals:?}");
        if ["GPU_I_ID", "dra_claim_name"].contains(&group_by) {
            assert!(
                want.len() > 2,
                "{group_by}: the fleet has a few, and others: {want:?}"
            );
        }
        for t in totals {
            let key = t["key"][group_by].as_str().unwrap_or("null");
            let e = &want[key];
            let what = format!("{group_by} {key}");
            assert_hours(&t["slice_hours"], hours(e.held), &what);
            assert_hours(&t["gpu_equivalent_hours"], hours(e.gpu_eq), &what);
            assert_hours(
                &t["memory_gib_hours"],
                hours(e.memory / Decimal::from(1u64 << 30)),
                &what,
            );
            assert_hours(&t["compute_active_hours"], hours(e.active), &what);
            assert_eq!(
                t["windows"].as_i64().unwrap(),
                e.windows,
                "{group_by} {key}"
            );
        }
        let held: Decimal = want.values().map(|e| e.held).sum();
        assert_hours(&r.body["total"]["slice_hours"], hours(held), "total");
    }
    // The fleet mixes every kind, so the check above covered every share formula.
    let kinds = expected_from_windows(&app, "s.kind").await;
    assert_eq!(kinds.len(), 5, "{:?}", kinds.keys());
}

#[tokio::test]
async fn the_usage_report_buckets_by_hour_day_and_month_with_the_same_totals() {
    let app = TestApp::spawn().await;
    simulated(&app, 9, 8, "2026-10-31T22:00:00Z", 5).await;
    let mut totals = Vec::new();
    for (step, buckets) in [("hour", 5), ("day", 2), ("month", 2)] {
        let r = app
            .get(
                Some(&app.admin),
                &format!("/v1/reports/usage?from=2026-10-30T00:00:00Z&to=2026-11-02&group_by=gpu_model&step={step}"),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        let distinct: std::collections::BTreeSet<&str> = r.body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["bucket"].as_str().unwrap())
            .collect();
        assert_eq!(distinct.len(), buckets, "{step}: {distinct:?}");
        totals.push(r.body["total"].clone());
    }
    assert_eq!(totals[0], totals[1]);
    assert_eq!(totals[1], totals[2]);
}

#[tokio::test]
async fn a_team_lead_sees_only_their_own_team_in_the_usage_report() {
    let app = TestApp::spawn().await;
    let fleet = simulated(&app, 5, 12, "2026-10-30T20:00:00Z", 3).await;
    let team = &fleet.teams[0].id;
    let lead = app.token(Role::TeamLead, Some(team), None).await;
    let r = app
        .get(
            Some(&lead),
            "/v1/reports/usage?from=2026-10-30&to=2026-11-01&group_by=team",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let keys: Vec<&str> = r.body["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"]["team"].as_str().unwrap())
        .collect();
    assert_eq!(keys, vec![team.as_str()]);
    // Grouped otherwise, the figures are still only the team's.
    let by_node = app
        .get(
            Some(&lead),
            "/v1/reports/usage?from=2026-10-30&to=2026-11-01&group_by=node",
        )
        .await;
    assert_eq!(by_node.body["total"], r.body["total"]);
    let everyone = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-10-30&to=2026-11-01&group_by=team",
        )
        .await;
    assert!(everyone.body["totals"].as_array().unwrap().len() > 1);
    assert_ne!(everyone.body["total"], r.body["total"]);
    // A collector has no business reading reports.
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    let r = app
        .get(
            Some(&collector),
            "/v1/reports/usage?from=2026-10-30&to=2026-11-01",
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
}

#[tokio::test]
async fn bad_report_parameters_are_each_named() {
    let app = TestApp::spawn().await;
    let r = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-10-01T00:30:00Z&group_by=cluster&step=week",
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    let fields: Vec<&str> = r.body["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, vec!["from", "to", "group_by", "step"]);
    let r = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-01-01&to=2026-03-01&step=hour",
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.body["error"]["fields"][0]["message"]
            .as_str()
            .unwrap()
            .contains("the limit for step=hour")
    );
}

#[tokio::test]
async fn unattributed_usage_is_reported_and_moves_when_its_namespace_gets_a_team() {
    let app = TestApp::spawn().await;
    let b = batch(
        "2026-10-01T00:00:00Z",
        "2026-10-01T01:00:00Z",
        vec![
            window(
                MIG_3G,
                "2026-10-01T00:00:00Z",
                "2026-10-01T01:00:00Z",
                "research",
                "a",
                3600.0,
            ),
            window(
                MIG_1G_A,
                "2026-10-01T00:00:00Z",
                "2026-10-01T01:00:00Z",
                "research",
                "b",
                1800.0,
            ),
        ],
    );
    assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);
    let report = || {
        app.get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-10-01&to=2026-10-02&group_by=team",
        )
    };
    let before = report().await;
    assert_eq!(before.body["totals"][0]["key"]["team"], "unattributed");
    assert_eq!(
        dec(&before.body["totals"][0]["slice_hours"]),
        Decimal::new(15, 1)
    );

    let put = app.put_team("research", &["research"]).await;
    assert_eq!(put.body["reattributed_consumers"], 2);
    let after = report().await;
    let keys: Vec<&str> = after.body["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"]["team"].as_str().unwrap())
        .collect();
    assert_eq!(keys, vec!["research"]);
    // 3g.40gb for an hour + 1g.10gb for half an hour.
    let gpu_eq = (Decimal::new(5, 1) * Decimal::from(3) / Decimal::from(7) + Decimal::new(25, 2))
        + (Decimal::new(5, 1) / Decimal::from(7) + Decimal::new(5, 1) / Decimal::from(8))
            / Decimal::from(2);
    assert_hours(
        &after.body["total"]["gpu_equivalent_hours"],
        gpu_eq,
        "research",
    );
}

/// Every (team, slice, rate card, day) of a month, as the hourly rollups give it: written here
/// against `usage_hourly` alone (the reference the day rollups must agree with).
const FROM_HOURS: &str = "
    select u.team_id, s.slice_uuid, r.rate_card_id, date_trunc('day', u.hour, 'UTC') as day,
           sum(u.window_count)::int8 as windows, sum(u.held_seconds) as held,
           sum(u.compute_known_seconds) as known, sum(u.compute_active_seconds) as active,
           sum(u.memory_byte_seconds) as memory
    from usage_hourly u
    join slice s using (slice_id)
    left join rate_card r on r.effective_from = (
        select max(effective_from) from rate_card where effective_from <= u.hour)
    where u.hour >= $1 and u.hour < $2
    group by 1, 2, 3, 4 order by 1, 2, 3, 4";

const FROM_PERIOD: &str = "
    select team_id, slice_uuid, rate_card_id, day, windows, held_seconds as held,
           known_seconds as known, active_seconds as active, memory_byte_seconds as memory
    from period_slice_day($3, false) order by 1, 2, 3, 4";

type DayRow = (
    String,
    String,
    Option<i64>,
    chrono::DateTime<chrono::Utc>,
    i64,
    Decimal,
    Decimal,
    Decimal,
    Decimal,
);

#[tokio::test]
// long: one month read every way the report can read it, each compared with the hourly rollups
async fn a_month_read_from_day_rollups_is_the_month_of_the_hourly_ones_even_across_a_price_change_at_six()
 {
    let app = TestApp::spawn().await;
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    app.put_team("nlp", &["nlp"]).await;
    for (from, price) in [
        ("2026-09-01T00:00:00Z", "4.00"),
        // A price change in the middle of a day: its hours are under two versions.
        ("2026-09-10T06:00:00Z", "5.00"),
        ("2026-09-20T00:00:00Z", "6.00"),
    ] {
        let r = crate::billing::rate_card(&app, from, price).await;
        assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    }
    // Windows around the change and on whole days, crossing hours and midnight.
    let mut minute = 0;
    for day in [
        "2026-09-09",
        "2026-09-10",
        "2026-09-11",
        "2026-09-20",
        "2026-09-30",
    ] {
        let start: chrono::DateTime<chrono::Utc> = format!("{day}T00:00:00Z").parse().unwrap();
        let at = |m: i64| (start + chrono::Duration::minutes(m)).to_rfc3339();
        let mut windows = Vec::new();
        for (k, (s, e)) in [(300, 420), (350, 370), (359, 365), (719, 781), (1380, 1439)]
            .into_iter()
            .enumerate()
        {
            let slice = [MIG_3G, MIG_1G_A, MIG_1G_B, MIG_3G, MIG_1G_A][k];
            let held = ((e - s) * 60) as f64;
            minute += 1;
            windows.push(window(
                slice,
                &at(s),
                &at(e),
                "nlp",
                &format!("p{minute}"),
                held,
            ));
        }
        let r = app
            .ingest(&collector, &batch(&at(0), &at(1440), windows))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{day}: {r:?}");
    }
    let (from, to): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) = (
        "2026-09-01T00:00:00Z".parse().unwrap(),
        "2026-10-01T00:00:00Z".parse().unwrap(),
    );
    let month = chrono::NaiveDate::from_ymd_opt(2026, 9, 1).unwrap();
    let rows = |sql: &'static str| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_as::<_, DayRow>(sql)
                .bind(from)
                .bind(to)
                .bind(month)
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    let (hours, period) = (rows(FROM_HOURS).await, rows(FROM_PERIOD).await);
    assert_eq!(period, hours);
    // What billing prices, the month per (team, slice, rate card), is the hourly reference summed
    // over its days: the first day, windows and every sum.
    type SliceSums = (
        String,
        String,
        Option<i64>,
        chrono::DateTime<chrono::Utc>,
        i64,
        Decimal,
        Decimal,
        Decimal,
        Decimal,
    );
    let mut expected: std::collections::BTreeMap<(String, String, Option<i64>), SliceSums> =
        std::collections::BTreeMap::new();
    for (team, slice, card, day, windows, held, known, active, memory) in &hours {
        let e = expected
            .entry((team.clone(), slice.clone(), *card))
            .or_insert_with(|| {
                (
                    team.clone(),
                    slice.clone(),
                    *card,
                    *day,
                    0,
                    Decimal::ZERO,
                    Decimal::ZERO,
                    Decimal::ZERO,
                    Decimal::ZERO,
                )
            });
        e.3 = e.3.min(*day);
        e.4 += windows;
        e.5 += held;
        e.6 += known;
        e.7 += active;
        e.8 += memory;
    }
    let sums: Vec<SliceSums> = sqlx::query_as(
        "select p.team_id, s.slice_uuid, p.rate_card_id, p.first_day, p.windows, p.held_seconds,
                p.known_seconds, p.active_seconds, p.memory_byte_seconds
         from period_slice_sums($1, false) p join slice s using (slice_id) order by 1, 2, 3",
    )
    .bind(month)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(sums, expected.into_values().collect::<Vec<_>>());
    assert!(sums.len() > 3, "{sums:?}");
    // The split day has rows under both versions; the day rollups hold the month too.
    let tenth = |r: &&DayRow| r.3.date_naive().to_string() == "2026-09-10";
    let versions: std::collections::BTreeSet<Option<i64>> =
        period.iter().filter(tenth).map(|r| r.2).collect();
    assert_eq!(versions.len(), 2, "{period:?}");
    assert_eq!(
        app.count("select count(distinct day) from usage_daily")
            .await,
        5
    );
    assert_eq!(
        app.count("select sum(held_seconds)::int8 from usage_daily")
            .await,
        app.count("select sum(held_seconds)::int8 from usage_hourly")
            .await
    );
    assert_eq!(
        app.count("select sum(present_seconds)::int8 from gpu_daily")
            .await,
        5 * 86_400
    );
    // A range that starts and ends inside days: its whole day from the day rollup, its edges
    // from the hourly one; the same totals as the hourly report, and per day the same held time.
    let report = |step: &'static str| {
        let app = &app;
        async move {
            let r = app
                .get(
                    Some(&app.admin),
                    &format!("/v1/reports/usage?from=2026-09-09T06:00:00Z&to=2026-09-11T12:00:00Z&group_by=team&step={step}"),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{r:?}");
            r.body
        }
    };
    let (by_hour, by_day) = (report("hour").await, report("day").await);
    assert_eq!(by_hour["total"], by_day["total"]);
    let held_per_day = |body: &serde_json::Value| {
        let mut days: BTreeMap<String, Decimal> = BTreeMap::new();
        for row in body["rows"].as_array().unwrap() {
            let day = row["bucket"].as_str().unwrap()[..10].to_owned();
            *days.entry(day).or_default() +=
                Decimal::from_str(row["slice_hours"].as_str().unwrap()).unwrap();
        }
        days
    };
    let days = held_per_day(&by_day);
    assert_eq!(days.len(), 3, "{days:?}");
    assert_eq!(days, held_per_day(&by_hour));
}

#[tokio::test]
async fn an_upgrade_sums_the_stored_hours_into_day_rollups() {
    let pool = empty_pool().await;
    apply_migrations(&pool, 1..=8).await;
    sqlx::raw_sql(
        "select ensure_month_partition('usage_hourly', '2026-09-01');
         select ensure_month_partition('gpu_hourly', '2026-09-01');
         insert into usage_hourly values ('2026-09-01 00:00Z', 1, 1, 3600, 10, 7, 5, 3600, 1),
                                         ('2026-09-01 23:00Z', 1, 1, 1800, 20, 9, 6, 1800, 2),
                                         ('2026-09-02 00:00Z', 1, 1, 600, 30, 3, 7, 600, 1);
         insert into gpu_hourly values ('2026-09-01 00:00Z', 1, 3600), ('2026-09-01 23:00Z', 1, 3600),
                                       ('2026-09-02 00:00Z', 1, 600);",
    )
    .execute(&pool)
    .await
    .unwrap();
    apply_migrations(&pool, 9..=9).await;
    let days: Vec<(
        chrono::DateTime<chrono::Utc>,
        Decimal,
        Decimal,
        i64,
        Decimal,
        i32,
    )> = sqlx::query_as(
        "select day, held_seconds, memory_byte_seconds, memory_peak_bytes,
                    compute_active_seconds, window_count from usage_daily order by day",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let at = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    assert_eq!(
        days,
        vec![
            (
                at("2026-09-01T00:00:00Z"),
                Decimal::from(5400),
                Decimal::from(30),
                9,
                Decimal::from(11),
                3
            ),
            (
                at("2026-09-02T00:00:00Z"),
                Decimal::from(600),
                Decimal::from(30),
                3,
                Decimal::from(7),
                1
            ),
        ]
    );
    let present: Vec<Decimal> =
        sqlx::query_scalar("select present_seconds from gpu_daily order by day")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(present, vec![Decimal::from(7200), Decimal::from(600)]);
}

/// Each team's lines of `period`'s invoices that `pick` picks, summed.
async fn invoiced_lines(
    app: &TestApp,
    period: &str,
    pick: impl Fn(&serde_json::Value) -> bool,
) -> BTreeMap<String, Decimal> {
    let list = app
        .get(Some(&app.admin), &format!("/v1/invoices?period={period}"))
        .await;
    let mut out = BTreeMap::new();
    for i in list.body.as_array().unwrap() {
        if i["kind"] != "invoice" || i["status"] == "void" {
            continue;
        }
        let full = app
            .get(Some(&app.admin), &format!("/v1/invoices/{}", i["id"]))
            .await;
        let sum: Decimal = full.body["lines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| pick(l))
            .map(|l| Decimal::from_str(l["amount"].as_str().unwrap()).unwrap())
            .sum();
        *out.entry(i["team"].as_str().unwrap().to_owned())
            .or_default() += sum;
    }
    out
}

/// Each team's usage lines of `period`'s invoices, summed.
async fn invoiced_usage(app: &TestApp, period: &str) -> BTreeMap<String, Decimal> {
    invoiced_lines(app, period, |l| l["line_kind"] == "usage").await
}

/// Each team's cost in a usage report's rows.
fn cost_by_team(report: &serde_json::Value) -> BTreeMap<String, Decimal> {
    let mut out = BTreeMap::new();
    for r in report["rows"].as_array().unwrap() {
        let team = r["key"]["team"].as_str().unwrap().to_owned();
        let cost = Decimal::from_str(r["cost"].as_str().expect("every row is priced")).unwrap();
        *out.entry(team).or_default() += cost;
    }
    out.remove("unattributed");
    out
}

#[tokio::test]
async fn usage_by_namespace_and_workload_adds_up_to_the_invoices_and_the_team_totals() {
    let app = TestApp::spawn().await;
    // A month under two rate cards (one from the 16th), August's last day issued before late
    // data arrived, September drafted.
    crate::exports::simulated_month(&app).await;
    let by = |range: &str, group_by: &str, step: &str| {
        format!("/v1/reports/usage?{range}&group_by={group_by}&step={step}")
    };
    let september = "from=2026-09-01&to=2026-10-01";
    let fine = app
        .get(
            Some(&app.admin),
            &by(september, "team,namespace,workload", "day"),
        )
        .await;
    assert_eq!(fine.status, StatusCode::OK, "{fine:?}");
    assert_eq!(fine.body["currency"], "USD");
    assert_eq!(fine.body["cost_note"], serde_json::Value::Null);
    assert_eq!(
        fine.body["group_by"],
        serde_json::json!(["team", "namespace", "workload"])
    );
    let totals = fine.body["totals"].as_array().unwrap();
    let teams: std::collections::BTreeSet<&str> = totals
        .iter()
        .map(|t| t["key"]["team"].as_str().unwrap())
        .collect();
    assert!(
        totals.len() > teams.len() * 2,
        "workloads are finer than teams: {} rows, {} teams",
        totals.len(),
        teams.len()
    );
    // Deployments' pods are one workload under the Deployment's name, not one per pod.
    let workloads: Vec<&str> = totals
        .iter()
        .filter_map(|t| t["key"]["workload"].as_str())
        .collect();
    let pods = app
        .get(Some(&app.admin), &by(september, "pod", "month"))
        .await;
    assert!(
        workloads.len() < pods.body["totals"].as_array().unwrap().len(),
        "{workloads:?}"
    );

    // Day by day, by workload, the month's rows add up to each team's invoice to the cent ...
    let invoiced = invoiced_usage(&app, "2026-09").await;
    assert!(invoiced.len() >= 3, "{invoiced:?}");
    assert_eq!(cost_by_team(&fine.body), invoiced);
    // ... and to the team totals of a coarser report, and to the monthly report less its spread
    // of idle capacity.
    let coarse = app
        .get(Some(&app.admin), &by(september, "team", "month"))
        .await;
    assert_eq!(cost_by_team(&coarse.body), invoiced);
    assert_eq!(fine.body["total"]["cost"], coarse.body["total"]["cost"]);

    // August was issued before gpu-node-01's late day arrived: its rows are what its hours cost
    // now, which is what was issued plus the corrections September's drafts bill for August.
    let august = "from=2026-08-01&to=2026-09-01";
    let issued = app
        .get(Some(&app.admin), &by(august, "team,workload", "month"))
        .await;
    assert_eq!(issued.status, StatusCode::OK, "{issued:?}");
    let mut want = invoiced_usage(&app, "2026-08").await;
    let corrections = invoiced_lines(&app, "2026-09", |l| {
        l["line_kind"] == "correction" && l["corrects_period"] == "2026-08"
    })
    .await;
    assert!(
        corrections.values().any(|c| !c.is_zero()),
        "the late day brings corrections: {corrections:?}"
    );
    for (team, c) in corrections {
        *want.entry(team).or_default() += c;
    }
    assert_eq!(cost_by_team(&issued.body), want);

    // A team lead's rows are their team's, with the same figures as finance sees for it.
    let (team, want) = invoiced.iter().next().unwrap();
    let lead = app.token(Role::TeamLead, Some(team), None).await;
    let own = app
        .get(
            Some(&lead),
            &by(september, "team,namespace,workload", "day"),
        )
        .await;
    assert_eq!(own.status, StatusCode::OK, "{own:?}");
    assert_eq!(
        cost_by_team(&own.body),
        BTreeMap::from([(team.clone(), *want)])
    );
    let theirs: Vec<&serde_json::Value> = fine.body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["key"]["team"] == team.as_str())
        .collect();
    assert_eq!(own.body["rows"].as_array().unwrap().len(), theirs.len());
}

#[tokio::test]
async fn usage_by_day_and_by_hour_adds_up_to_the_invoices_whichever_way_it_is_summed() {
    let app = TestApp::spawn().await;
    // Every slice kind, pods of a team taking turns on slices, a second rate card from the 16th.
    crate::exports::simulated_month(&app).await;
    let invoiced = invoiced_usage(&app, "2026-09").await;
    assert!(invoiced.len() >= 3, "{invoiced:?}");
    let september = |group_by: &str, step: &str| {
        format!("/v1/reports/usage?from=2026-09-01&to=2026-10-01&group_by={group_by}&step={step}")
    };
    let month = app.get(Some(&app.admin), &september("team", "month")).await;
    assert_eq!(month.status, StatusCode::OK, "{month:?}");
    // Days and hours by slice-level fields are summed per share class; months, and anything by a
    // consumer's field, per slice first. Each gives the month's figures, and adds up to every
    // team's invoice to the cent.
    for (group_by, step, buckets) in [
        ("team", "day", 30),
        ("team,kind,node", "hour", 720),
        ("team,UUID,GPU_I_ID", "day", 30),
        ("team,workload", "hour", 720),
        ("team,profile", "month", 1),
    ] {
        let r = app.get(Some(&app.admin), &september(group_by, step)).await;
        assert_eq!(r.status, StatusCode::OK, "{group_by} by {step}: {r:?}");
        assert_eq!(
            r.body["total"], month.body["total"],
            "{group_by} by {step}: held, GPU-equivalent, used and memory hours"
        );
        assert_eq!(
            cost_by_team(&r.body),
            invoiced,
            "{group_by} by {step}: the rows priced"
        );
        let rows = r.body["rows"].as_array().unwrap();
        let distinct: std::collections::BTreeSet<&str> = rows
            .iter()
            .map(|row| row["bucket"].as_str().unwrap())
            .collect();
        assert_eq!(distinct.len(), buckets, "{group_by} by {step}");
        if group_by == "team,kind,node" {
            let kinds: std::collections::BTreeSet<&str> = rows
                .iter()
                .map(|row| row["key"]["kind"].as_str().unwrap())
                .collect();
            // Time-sliced replicas are priced on what they measurably used, the others on
            // their reserved share: both formulas are summed here.
            assert_eq!(kinds.len(), 5, "{kinds:?}");
        }
    }
}

#[tokio::test]
async fn usage_groups_by_pod_container_and_label_with_null_where_there_is_none() {
    let app = TestApp::spawn().await;
    simulated(&app, 3, 8, "2026-10-30T20:00:00Z", 3).await;
    let r = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-10-30&to=2026-11-01&group_by=label:app,container&step=month",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let totals = r.body["totals"].as_array().unwrap();
    assert!(!totals.is_empty());
    for t in totals {
        let key = t["key"].as_object().unwrap();
        assert_eq!(
            key.keys().collect::<Vec<_>>(),
            vec!["container", "label:app"]
        );
    }
    assert!(
        totals.iter().any(|t| t["key"]["label:app"].is_string()),
        "the simulated pods carry an app label: {totals:?}"
    );
    // Whatever the grouping, the figures add up to the same whole.
    let by_team = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-10-30&to=2026-11-01&group_by=team&step=month",
        )
        .await;
    assert_eq!(r.body["total"], by_team.body["total"]);
    let by_pod = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-10-30&to=2026-11-01&group_by=pod,kind&step=month",
        )
        .await;
    assert_eq!(by_pod.body["total"], by_team.body["total"]);

    // Each wrong dimension is named.
    let bad = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-10-30&to=2026-11-01&group_by=team,team,cluster,label:a%20b",
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{bad:?}");
    let message = bad.body["error"]["fields"][0]["message"].as_str().unwrap();
    assert!(message.contains("\"team\" is given twice"), "{message}");
    assert!(message.contains("\"cluster\" is not one of"), "{message}");
    assert!(message.contains("\"a b\" is not a label key"), "{message}");
}

/// The unit cost prices each pod's hours from a read of its own (`pod_hour_costs`: only the sums a
/// price needs): every row's cost is the usage report's at that step and grouping, to the cent,
/// for an issued month with late data, an open one under two rate cards, a range within a month,
/// and a team lead's own team.
#[tokio::test]
async fn the_unit_costs_pod_hour_costs_are_the_usage_reports_row_by_row() {
    use slicemeter::domain::team::TeamId;
    use slicemeter::reports::service::{ReportCache, pod_hour_costs};
    type Costs = BTreeMap<(chrono::DateTime<chrono::Utc>, Vec<Option<String>>), Option<Decimal>>;

    let app = TestApp::spawn().await;
    crate::exports::simulated_month(&app).await;
    let invoiced = invoiced_usage(&app, "2026-09").await;
    let team = TeamId::parse(invoiced.keys().next().unwrap()).unwrap();
    let ranges = [
        ("2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z", None),
        ("2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z", None),
        ("2026-09-10T06:00:00Z", "2026-09-20T00:00:00Z", None),
        ("2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z", Some(&team)),
    ];
    for (from, to, own) in ranges {
        let token = match own {
            Some(t) => app.token(Role::TeamLead, Some(t.as_str()), None).await,
            None => app.admin.clone(),
        };
        let r = app
            .get(
                Some(&token),
                &format!(
                    "/v1/reports/usage?from={from}&to={to}&group_by=team,namespace,workload,pod&step=hour"
                ),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        let want: Costs = r.body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                let key = ["team", "namespace", "workload", "pod"]
                    .iter()
                    .map(|k| row["key"][k].as_str().map(str::to_owned))
                    .collect();
                let cost = row["cost"].as_str().map(|c| Decimal::from_str(c).unwrap());
                (
                    (row["bucket"].as_str().unwrap().parse().unwrap(), key),
                    cost,
                )
            })
            .collect();
        assert!(want.len() > 100, "{from}: {} rows", want.len());
        let got = pod_hour_costs(
            &app.pool,
            &ReportCache::new(Duration::ZERO),
            from.parse().unwrap(),
            to.parse().unwrap(),
            own,
        )
        .await
        .unwrap();
        assert_eq!(got.by_name(), want, "{from} to {to}, {own:?}");
        assert_eq!(got.currency.map(|c| c.code), Some("USD".to_owned()));
    }
}
