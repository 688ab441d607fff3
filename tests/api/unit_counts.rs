//! Kept counts (`units::counts`): each unit's settled hours counted once, a UTC day a step, and
//! kept in PostgreSQL, against Debian's real `prometheus`. A kept period's unit cost is answered
//! to the same figures with Prometheus gone (its retention past); an hour not kept still asks it;
//! a change of the definition's counting drops what was kept, a change of its description does
//! not; and the kept days add up to what one read of the whole period counts, across a scrape gap
//! over midnight, a restart and a series silent for a whole day; one unseen for 31 days is
//! forgotten.

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde_json::json;
use slicemeter::http::state::ServerConfig;
use slicemeter::units::{counts, service, store};

use crate::support::*;
use crate::units::{counters, define, fleet, source, start_prometheus};

fn at(t: &str) -> DateTime<Utc> {
    t.parse().unwrap()
}

async fn kept_rows(app: &TestApp) -> i64 {
    sqlx::query_scalar("select count(*) from unit_hour_count")
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_kept_periods_unit_cost_is_answered_without_prometheus_until_its_counting_changes() {
    let dir = tempfile::tempdir().unwrap();
    let prometheus = start_prometheus(dir.path(), &counters()).await;
    let src = source(&prometheus.url);
    let app = TestApp::with_config(ServerConfig {
        ingest_rate: 0.0,
        units_prometheus: Some(src.clone()),
        ..test_config()
    })
    .await;
    fleet(&app).await;
    define(&app).await;
    let uri = "/v1/reports/unit-cost?from=2026-10-02T00:00:00Z&to=2026-10-02T06:00:00Z\
               &unit=generated_tokens&group_by=team,model";
    let live = app.get(Some(&app.admin), uri).await;
    assert_eq!(live.status, StatusCode::OK, "{live:?}");
    assert_eq!(live.body["rows"].as_array().unwrap().len(), 2, "{live:?}");

    // At 00:30 on 2026-10-03 the hours up to midnight have settled: kept from the first hour of
    // the month before.
    let now = at("2026-10-03T00:30:00Z");
    counts::keep(&app.pool, &src, now).await.unwrap();
    let span = (at("2026-09-01T00:00:00Z"), at("2026-10-03T00:00:00Z"));
    assert_eq!(
        store::count_span(&app.pool, "generated_tokens")
            .await
            .unwrap(),
        Some(span)
    );
    // chat-a-0's 4 hours, chat-b-0's 3, the ghost's and the stray's first: 9 (hour, pod) counts.
    assert_eq!(kept_rows(&app).await, 9);
    // Nothing more has settled: a second round keeps nothing again.
    counts::keep(&app.pool, &src, now).await.unwrap();
    assert_eq!(kept_rows(&app).await, 9);

    // Prometheus gone (its retention past): the kept hours answer alike, to the cent.
    drop(prometheus);
    let kept = app.get(Some(&app.admin), uri).await;
    assert_eq!(kept.status, StatusCode::OK, "{kept:?}");
    assert_eq!(kept.body, live.body);
    // An hour not kept still needs Prometheus.
    let r = app
        .get(
            Some(&app.admin),
            "/v1/reports/unit-cost?from=2026-10-02T00:00:00Z&to=2026-10-03T01:00:00Z&unit=generated_tokens",
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{r:?}");

    // A new description counts alike: kept. A new label counts otherwise: dropped, to be counted
    // again.
    let put = |body: serde_json::Value| {
        let app = &app;
        async move {
            app.send_json(
                "PUT",
                Some(&app.admin),
                "/v1/unit-definitions/generated_tokens",
                &body,
            )
            .await
        }
    };
    let r = put(json!({"expression": "vllm:generation_tokens_total",
                       "model_label": "model_name", "description": "vLLM's tokens"}))
    .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let r = app.get(Some(&app.admin), uri).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body, live.body);
    let r =
        put(json!({"expression": "vllm:generation_tokens_total", "model_label": "model"})).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(kept_rows(&app).await, 0);
    assert_eq!(
        store::count_span(&app.pool, "generated_tokens")
            .await
            .unwrap(),
        None
    );
    let r = app.get(Some(&app.admin), uri).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{r:?}");
}

/// One series' samples as OpenMetrics lines: (time, value) pairs.
fn series(out: &mut String, pod: &str, samples: &[(&str, u64)]) {
    for (t, v) in samples {
        out.push_str(&format!(
            "vllm:generation_tokens_total{{model_name=\"A\",namespace=\"ns\",pod=\"{pod}\"}} {v} {}\n",
            at(t).timestamp()
        ));
    }
}

/// Every 5 minutes from `from` to `to`, the value `v(k)` at the `k`th.
fn every_5_minutes(from: &str, to: &str, v: impl Fn(i64) -> u64) -> Vec<(String, u64)> {
    let (a, b) = (at(from), at(to));
    (0..)
        .map(|k| (a + chrono::Duration::minutes(5 * k), k))
        .take_while(|(t, _)| *t <= b)
        .map(|(t, k)| (t.to_rfc3339(), v(k)))
        .collect()
}

#[tokio::test]
async fn the_kept_days_count_what_one_read_of_the_whole_period_counts() {
    let mut text = String::new();
    // `gap`: +1,000 every 5 minutes from 22:00, silent from 23:45 to 00:10 across midnight,
    // restarted at 01:00 (500), then +1,000 again to 02:00.
    let gap: Vec<(String, u64)> =
        every_5_minutes("2026-10-01T22:00:00Z", "2026-10-02T02:00:00Z", |k| {
            if k < 36 {
                1000 * k as u64
            } else {
                500 + 1000 * (k as u64 - 36)
            }
        })
        .into_iter()
        .filter(|(t, _)| {
            !(at("2026-10-01T23:45:00Z")..=at("2026-10-02T00:10:00Z")).contains(&at(t))
        })
        .collect();
    let gap: Vec<(&str, u64)> = gap.iter().map(|(t, v)| (t.as_str(), *v)).collect();
    series(&mut text, "gap", &gap);
    // `silent`: +100 every 5 minutes 23:00-23:30 on the 1st, nothing on the 2nd, +100 again from
    // 2,000 at 00:30 on the 3rd.
    let mut silent = every_5_minutes("2026-10-01T23:00:00Z", "2026-10-01T23:30:00Z", |k| {
        100 + 100 * k as u64
    });
    silent.extend(every_5_minutes(
        "2026-10-03T00:30:00Z",
        "2026-10-03T01:00:00Z",
        |k| 2000 + 100 * k as u64,
    ));
    let silent: Vec<(&str, u64)> = silent.iter().map(|(t, v)| (t.as_str(), *v)).collect();
    series(&mut text, "silent", &silent);
    // `gone`: +100 every 5 minutes in the first half hour of September, back at 5,000 on the 4th
    // of October at 00:30: unseen for over 31 days, forgotten, it counts from there anew.
    let mut gone = every_5_minutes("2026-09-01T00:00:00Z", "2026-09-01T00:30:00Z", |k| {
        100 + 100 * k as u64
    });
    gone.extend(every_5_minutes(
        "2026-10-04T00:30:00Z",
        "2026-10-04T01:00:00Z",
        |k| 5000 + 100 * k as u64,
    ));
    let gone: Vec<(&str, u64)> = gone.iter().map(|(t, v)| (t.as_str(), *v)).collect();
    series(&mut text, "gone", &gone);
    text.push_str("# EOF\n");

    let dir = tempfile::tempdir().unwrap();
    let prometheus = start_prometheus(dir.path(), &text).await;
    let src = source(&prometheus.url);
    let app = TestApp::with_config(ServerConfig {
        units_prometheus: Some(src.clone()),
        ..test_config()
    })
    .await;
    define(&app).await;
    counts::keep(&app.pool, &src, at("2026-10-04T02:30:00Z"))
        .await
        .unwrap();
    let def = store::get(&app.pool, "generated_tokens")
        .await
        .unwrap()
        .unwrap()
        .definition;
    let (from, to) = (at("2026-10-01T00:00:00Z"), at("2026-10-04T02:00:00Z"));
    let kept = service::counted(&app.pool, &src, &def, from, to)
        .await
        .unwrap();
    let whole = service::increases(&src, &def, from, to, None)
        .await
        .unwrap();
    assert_eq!(kept.hours, whole.hours);

    let by_pod = |pod: &str| -> Vec<(String, f64)> {
        kept.hours
            .iter()
            .filter(|((_, k), _)| k.join.as_deref() == Some(pod))
            .map(|((h, _), v)| (h.format("%dT%H").to_string(), *v))
            .collect()
    };
    // 23:40's 20,000 to 00:15's 27,000 counted in the 2nd's first hour, with its 8 more steps and
    // the restart's 500 at 01:00.
    assert_eq!(
        by_pod("gap"),
        vec![
            ("01T22".into(), 12_000.0),
            ("01T23".into(), 8_000.0),
            ("02T00".into(), 7_000.0 + 8_000.0 + 500.0),
            ("02T01".into(), 12_000.0),
        ]
    );
    // From 700 at 23:30 on the 1st to 2,000 at 00:30 on the 3rd, a whole day kept between.
    assert_eq!(
        by_pod("silent"),
        vec![("01T23".into(), 600.0), ("03T00".into(), 1_300.0 + 600.0)]
    );
    assert_eq!(by_pod("gone"), vec![("04T00".into(), 600.0)]);
    // Prometheus gone: the same figures from what was kept.
    drop(prometheus);
    let again = service::counted(&app.pool, &src, &def, from, to)
        .await
        .unwrap();
    assert_eq!(again.hours, kept.hours);
}
