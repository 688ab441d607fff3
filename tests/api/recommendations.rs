//! Right-sizing over the API: evidence from ingest, the recommended slice and what it saves.

use std::str::FromStr;

use axum::http::StatusCode;
use chrono::{DateTime, Duration, DurationRound, Utc};
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::domain::access::Role;

use crate::billing::dec;
use crate::support::*;

const GIB: i64 = 1 << 30;

/// A window of `slice` held the whole hour from `start` by a Deployment's pod.
fn hour(slice: &str, start: DateTime<Utc>, team: &str, app: &str, peak: i64, busy: f64) -> Value {
    json!({"slice_uuid": slice, "start": start.to_rfc3339(),
           "end": (start + Duration::hours(1)).to_rfc3339(),
           "consumer": {"namespace": team, "pod": format!("{app}-5d8c7b9f4-x7k2q"), "container": "main",
                        "labels": {"pod-template-hash": "5d8c7b9f4"}},
           "held_seconds": 3600.0, "memory_byte_seconds": 3600.0 * peak as f64 * 0.8,
           "memory_peak_bytes": peak, "compute_active_seconds": 3600.0 * busy})
}

/// The H100 of `support` held for the last `days` full days: its 3g.40gb by nlp's `embedder`
/// (6 GiB peak, 3 % busy), one 1g.10gb by search's `ranker` (2 GiB, never busy), the other by
/// vision's `detector` for the last 5 days only (busy half the time).
async fn fourteen_days(app: &TestApp) {
    app.put_team("nlp", &["nlp"]).await;
    app.put_team("search", &["search"]).await;
    app.put_team("vision", &["vision"]).await;
    let end = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    for d in (1..=14).rev() {
        let day = end - Duration::days(d);
        let mut windows = Vec::new();
        for h in 0..24 {
            let t = day + Duration::hours(h);
            windows.push(hour(MIG_3G, t, "nlp", "embedder", 6 * GIB, 0.03));
            windows.push(hour(MIG_1G_A, t, "search", "ranker", 2 * GIB, 0.0));
            if d <= 5 {
                windows.push(hour(MIG_1G_B, t, "vision", "detector", 3 * GIB, 0.5));
            }
        }
        let b = batch(
            &day.to_rfc3339(),
            &(day + Duration::days(1)).to_rfc3339(),
            windows,
        );
        let r = app.ingest(&app.admin, &b).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
}

/// The team page reads its month and right-sizing's days in one scan: each range still gets
/// only its own hours, and an hour in both ranges counts in both.
#[tokio::test]
async fn ranges_read_together_each_get_their_own_hours() {
    let app = TestApp::spawn().await;
    fourteen_days(&app).await;
    let end = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    let early = (end - Duration::days(14), end - Duration::days(7));
    let late = (end - Duration::days(3), end);
    let all = (end - Duration::days(14), end);
    let read = slicemeter::plan::store::evidence(&app.pool, &[early, late, all], None)
        .await
        .unwrap();
    assert_eq!(read.len(), 3);
    let held = |range: usize, workload: &str| {
        read[range]
            .iter()
            .find(|e| e.workload == workload)
            .map(|e| (e.days, e.held_seconds))
    };
    let hours = |h: i64| Decimal::from(h * 3600);
    // The detector ran for the last 5 days only: nothing of it in the first week.
    assert_eq!(held(0, "embedder"), Some((7, hours(7 * 24))));
    assert_eq!(held(0, "ranker"), Some((7, hours(7 * 24))));
    assert_eq!(held(0, "detector"), None);
    assert_eq!(read[0].len(), 2);
    assert_eq!(held(1, "embedder"), Some((3, hours(3 * 24))));
    assert_eq!(held(1, "detector"), Some((3, hours(3 * 24))));
    assert_eq!(read[1].len(), 3);
    assert_eq!(held(2, "embedder"), Some((14, hours(14 * 24))));
    assert_eq!(held(2, "detector"), Some((5, hours(5 * 24))));
    // Ranges apart are read apart, each answered in its place.
    let apart = slicemeter::plan::store::evidence(&app.pool, &[late, early], None)
        .await
        .unwrap();
    assert_eq!(apart[0].len(), 3, "{:?}", apart[0]);
    assert_eq!(apart[1].len(), 2, "{:?}", apart[1]);
    assert_eq!(
        apart[0]
            .iter()
            .map(|e| (e.days, e.held_seconds))
            .collect::<Vec<_>>(),
        read[1]
            .iter()
            .map(|e| (e.days, e.held_seconds))
            .collect::<Vec<_>>()
    );
    // Only one team's, when asked.
    let vision = slicemeter::plan::store::evidence(
        &app.pool,
        &[early, late],
        Some(&"vision".parse().unwrap()),
    )
    .await
    .unwrap();
    assert!(vision[0].is_empty(), "{:?}", vision[0]);
    assert_eq!(vision[1].len(), 1);
    assert_eq!(vision[1][0].workload, "detector");
    assert_eq!(vision[1][0].memory_p99_bytes, 3 * GIB);
}

/// The team page's first read after a start waits for right-sizing's evidence at most
/// `evidence_wait`: past it the page comes with its costs but without the percentiles, says they
/// are being read, and the read goes on behind it; a later page shows what it found. The CSV, a
/// file to keep, always waits for them.
#[tokio::test]
async fn the_team_page_goes_without_right_sizing_past_its_wait_and_shows_it_once_read() {
    let app = TestApp::with_config(slicemeter::http::state::ServerConfig {
        evidence_wait: std::time::Duration::ZERO,
        ingest_rate: 0.0,
        ..test_config()
    })
    .await;
    let out = app.cli(&["rate-card", "load", "deploy/rate-card.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    fourteen_days(&app).await;
    let cookie = crate::fleet::ui_session(&app, &app.admin).await;
    // The month of the last hour ingested (the first hour of a month holds none of the 14 days).
    let end = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    let month = (end - Duration::hours(1)).format("%Y-%m");

    // The CSV of a team not read yet: every figure, percentiles included.
    let csv = crate::fleet::ui_page(
        &app,
        &cookie,
        &format!("/ui/team/search/workloads.csv?month={month}"),
    )
    .await;
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let header = rows.headers().unwrap().clone();
    let p99 = header.iter().position(|h| h == "memory_p99_gib").unwrap();
    let ranker: Vec<_> = rows.records().map(Result::unwrap).collect();
    assert_eq!(ranker.len(), 1, "{csv}");
    assert_eq!(&ranker[0][1], "ranker");
    assert_eq!(&ranker[0][p99], "2", "{csv}");

    let uri = format!("/ui/team/nlp?month={month}");
    let first = crate::fleet::ui_page(&app, &cookie, &uri).await;
    assert!(
        first.contains(r#"data-field="right-sizing-pending""#),
        "{first}"
    );
    assert!(first.contains(r#"data-field="evidence-pending""#));
    assert!(!first.contains(r#"data-table="right-sizing""#));
    assert!(!first.contains("Every workload holds what it needs"));
    // Its costs are there: the embedder's workload line.
    assert!(first.contains(r#"data-workload="embedder""#), "{first}");

    let mut page = first;
    for _ in 0..400 {
        if !page.contains("right-sizing-pending") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        page = crate::fleet::ui_page(&app, &cookie, &uri).await;
    }
    assert!(!page.contains(r#"data-field="right-sizing-pending""#));
    assert!(!page.contains(r#"data-field="evidence-pending""#));
    // The 3g.40gb held at 6 GiB and 3 % busy: right-sizing now advises a smaller slice.
    assert!(page.contains(r#"data-table="right-sizing""#), "{page}");
    assert!(
        page.contains(r#"data-field="right-sizing-summary""#),
        "{page}"
    );
}

fn of<'a>(list: &'a Value, workload: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|r| r["workload"] == workload)
        .unwrap_or_else(|| panic!("no {workload} in {list}"))
}

/// An invoice line of `hours` on an H100 at the demo rate card (4.00 an hour, weights 0.5/0.5,
/// MIG factor 1.00) for a profile of `compute`/7 and `memory`/8 slices, rounded to the cent.
fn line(compute: i64, memory: i64, hours: i64) -> Decimal {
    let half = Decimal::from_str("0.5").unwrap();
    let share = half * Decimal::from(compute) / Decimal::from(7)
        + half * Decimal::from(memory) / Decimal::from(8);
    (Decimal::from(4) * share * Decimal::from(hours))
        .round_dp_with_strategy(2, rust_decimal::RoundingStrategy::MidpointNearestEven)
}

#[tokio::test]
async fn an_oversized_3g_is_cut_to_a_1g_an_idle_slice_given_back_and_five_days_wait() {
    let app = TestApp::spawn().await;
    let out = app.cli(&["rate-card", "load", "deploy/rate-card.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    fourteen_days(&app).await;
    let r = app
        .get(Some(&app.admin), "/v1/recommendations?days=14&profile=prod")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body.as_array().unwrap().len(), 3, "{}", r.body);

    let embedder = of(&r.body, "embedder");
    assert_eq!(embedder["team"], "nlp");
    assert_eq!(embedder["workload_kind"], "Deployment");
    assert_eq!(embedder["profile"], "3g.40gb");
    assert_eq!(embedder["action"], "resize");
    assert_eq!(embedder["recommended_profile"], "1g.10gb");
    assert_eq!(embedder["confidence"], "high");
    assert_eq!(embedder["days_of_data"], 14);
    assert_eq!(embedder["memory_p99_bytes"], 6 * GIB);
    assert_eq!(embedder["compute_p95"], 0.03);
    // 730 hours a month on each profile, each line rounded once: 1355.71 - 391.07.
    let (today, smaller) = (line(3, 4, 730), line(1, 1, 730));
    assert_eq!(today, dec(&json!("1355.71")));
    assert_eq!(dec(&embedder["monthly_today"]), today);
    assert_eq!(dec(&embedder["monthly_recommended"]), smaller);
    assert_eq!(dec(&embedder["monthly_delta"]), today - smaller);
    assert_eq!(dec(&embedder["monthly_delta"]), dec(&json!("964.64")));

    let ranker = of(&r.body, "ranker");
    assert_eq!(ranker["action"], "give_back");
    assert_eq!(ranker["recommended_profile"], Value::Null);
    assert_eq!(dec(&ranker["monthly_delta"]), line(1, 1, 730));
    assert_eq!(ranker["confidence"], "high");

    let detector = of(&r.body, "detector");
    assert_eq!(detector["action"], "wait");
    assert_eq!(detector["confidence"], "low");
    assert_eq!(detector["days_of_data"], 5);
    assert_eq!(detector["monthly_delta"], Value::Null);
    assert!(
        detector["reason"]
            .as_str()
            .unwrap()
            .contains("5 days of data; a recommendation needs 7"),
        "{detector}"
    );

    // Judged as development (0.8 target) the embedder still fits a 1g; over 6 days nothing is
    // recommended, at low confidence.
    let dev = app
        .get(Some(&app.admin), "/v1/recommendations?days=6&profile=dev")
        .await;
    assert_eq!(dev.status, StatusCode::OK, "{dev:?}");
    let embedder = of(&dev.body, "embedder");
    assert_eq!(embedder["action"], "wait");
    assert_eq!(embedder["confidence"], "low");
}

#[tokio::test]
async fn a_team_lead_gets_their_own_workloads_only() {
    let app = TestApp::spawn().await;
    fourteen_days(&app).await;
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let r = app.get(Some(&lead), "/v1/recommendations").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let teams: Vec<&str> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["team"].as_str().unwrap())
        .collect();
    assert_eq!(teams, vec!["nlp"]);
    // No rate card: the evidence and the advice, no money.
    assert_eq!(r.body[0]["action"], "resize");
    assert_eq!(r.body[0]["monthly_delta"], Value::Null);
    let other = app
        .get(Some(&lead), "/v1/recommendations?team=search")
        .await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{other:?}");
    let own = app.get(Some(&lead), "/v1/recommendations?team=nlp").await;
    assert_eq!(own.status, StatusCode::OK);
    assert_eq!(own.body, r.body);
    for (query, field) in [
        ("days=0", "days"),
        ("profile=turbo", "profile"),
        ("days=x&profile=turbo", "days"),
        ("team=a%00b", "team"),
        ("team=Not%20A%20Team", "team"),
    ] {
        let r = app
            .get(Some(&app.admin), &format!("/v1/recommendations?{query}"))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}: {r:?}");
        assert_eq!(r.body["error"]["fields"][0]["field"], field, "{query}");
    }
}

#[tokio::test]
async fn the_plan_takes_the_recommendations_first_unless_told_not_to() {
    let app = TestApp::spawn().await;
    fourteen_days(&app).await;
    let r = app
        .get(Some(&app.admin), "/v1/plans/consolidation?profile=prod")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let m = &r.body["models"][0];
    assert_eq!(m["cards_today"], 1);
    assert_eq!(m["instances"], 3);
    assert_eq!(m["instances_released"], 1);
    let moves: Vec<(String, String, String)> = m["moves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["action"].as_str().unwrap().to_owned(),
                x["slice_uuid"].as_str().unwrap().to_owned(),
                x["profile"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // The idle 1g.10gb goes first, then the 3g.40gb is made a 1g.10gb where it is; the
    // detector's (5 days of data) stays as it is.
    assert_eq!(
        moves,
        vec![
            ("release".into(), MIG_1G_A.into(), "1g.10gb".into()),
            ("shrink".into(), MIG_3G.into(), "1g.10gb".into()),
        ]
    );
    let card = &m["cards"][0]["instances"];
    let shrunk = card
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["slice_uuid"] == MIG_3G)
        .unwrap();
    assert_eq!(shrunk["profile"], "1g.10gb");
    assert_eq!(shrunk["profile_today"], "3g.40gb");
    assert_eq!(card.as_array().unwrap().len(), 2);

    let as_is = app
        .get(Some(&app.admin), "/v1/plans/consolidation?right_size=false")
        .await;
    assert_eq!(as_is.status, StatusCode::OK, "{as_is:?}");
    let m = &as_is.body["models"][0];
    assert_eq!(m["instances_released"], 0);
    assert_eq!(m["moves"], json!([]));
    assert_eq!(m["cards"][0]["instances"].as_array().unwrap().len(), 3);
    let bad = app
        .get(Some(&app.admin), "/v1/plans/consolidation?right_size=maybe")
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.body["error"]["fields"][0]["field"], "right_size");
}

/// A 3g.40gb of an H100 of its own held the last 14 days by `team`'s `embedder` Deployment
/// (labelled with the team) at 6 GiB and 3 % busy: what the team page's right-sizing shows.
pub async fn oversized_for(app: &TestApp, team: &str) {
    let gpu = "GPU-00000000-0000-4000-8000-000000000300";
    let slice = "MIG-00000000-0000-4000-8000-000000000301";
    let end = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    for d in (1..=14).rev() {
        let day = end - Duration::days(d);
        let windows: Vec<Value> = (0..24)
            .map(|h| {
                let mut w = hour(
                    slice,
                    day + Duration::hours(h),
                    "rs-demo",
                    "embedder",
                    6 * GIB,
                    0.03,
                );
                w["consumer"]["labels"]["team"] = json!(team);
                w
            })
            .collect();
        let b = json!({"node": "gpu-node-09", "period": {"start": day.to_rfc3339(),
                                                         "end": (day + Duration::days(1)).to_rfc3339()},
                       "gpus": [{"uuid": gpu, "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
                                 "compute_slices": 7, "memory_slices": 8, "mig_enabled": true}],
                       "slices": [{"uuid": slice, "gpu_uuid": gpu, "kind": "mig", "profile": "3g.40gb",
                                   "profile_id": 9, "compute_slices": 3, "memory_slices": 4,
                                   "memory_bytes": 42412802048_i64}],
                       "windows": windows});
        let r = app.ingest(&app.admin, &b).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
}
