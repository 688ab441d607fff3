//! Retention of raw windows: months past `keep_raw_months` lose their `occupancy` and
//! `gpu_presence` partitions (detached and dropped by the server, never row by row), their rollups
//! and so every report stay, and a batch for such a month is refused.

use axum::http::StatusCode;
use chrono::{Duration, Utc};
use slicemeter::domain::access::Role;
use slicemeter::domain::time::Month;

use crate::billing::rate_card;
use crate::support::*;

/// A batch of three one-minute windows on the test H100, from `start`.
fn batch_at(start: chrono::DateTime<Utc>) -> serde_json::Value {
    let t = |m: i64| (start + Duration::minutes(m)).to_rfc3339();
    batch(
        &t(0),
        &t(10),
        vec![
            window(MIG_3G, &t(0), &t(1), "nlp", "a", 60.0),
            window(MIG_1G_A, &t(1), &t(2), "nlp", "b", 60.0),
            window(MIG_1G_B, &t(2), &t(3), "nlp", "c", 45.0),
        ],
    )
}

fn partition(table: &str, month: Month) -> String {
    format!("{table}_y{}", month.first_day().format("%Ym%m"))
}

/// How many partitions hold the month's raw windows: its days (0019: one level, each a partition
/// of `occupancy` itself).
async fn raw_days(app: &TestApp, month: Month) -> i64 {
    sqlx::query_scalar(
        "select count(*) from pg_partition_tree('occupancy') where relid::text like $1 || 'd__'",
    )
    .bind(partition("occupancy", month))
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

async fn exists(app: &TestApp, relation: &str) -> bool {
    sqlx::query_scalar::<_, bool>("select to_regclass($1) is not null")
        .bind(relation)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn months_past_retention_lose_their_raw_windows_keep_their_reports_and_refuse_new_batches() {
    let app = TestApp::spawn().await;
    let now = Utc::now();
    let this = Month::of(now);
    let (old, recent) = (this.minus(20), this.minus(1));
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    app.put_team("nlp", &["nlp"]).await;
    assert_eq!(
        rate_card(&app, &old.start().to_rfc3339(), "4.00")
            .await
            .status,
        StatusCode::CREATED
    );
    // Stored while the server kept everything.
    for month in [old, recent] {
        let r = app
            .ingest(&collector, &batch_at(month.start() + Duration::days(2)))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    let usage = format!(
        "/v1/reports/usage?from={}&to={}&group_by=team&step=day",
        old.start().to_rfc3339().replace('+', "%2B"),
        old.end().to_rfc3339().replace('+', "%2B")
    );
    let monthly = format!("/v1/reports/monthly/{old}");
    let usage_before = app.get(Some(&app.admin), &usage).await;
    let monthly_before = app.get(Some(&app.admin), &monthly).await;
    assert_eq!(usage_before.status, StatusCode::OK, "{usage_before:?}");
    assert_eq!(monthly_before.status, StatusCode::OK, "{monthly_before:?}");
    assert!(usage_before.body.to_string().contains("nlp"));
    assert_eq!(app.count("select count(*) from occupancy").await, 6);
    // Each day's windows have a partition of their own.
    let holding: Vec<String> =
        sqlx::query_scalar("select distinct tableoid::regclass::text from occupancy order by 1")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        holding,
        [old, recent].map(|m| format!("{}d03", partition("occupancy", m)))
    );
    assert_eq!(
        raw_days(&app, old).await,
        (old.end() - old.start()).num_days()
    );

    // A server keeping 13 months drops the old month's raw partitions when it starts.
    let mut config = test_config();
    config.ingest.keep_raw_months = Some(13);
    let served = app.serve(config.clone()).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while raw_days(&app, old).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the old month's raw windows were never dropped"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    served.stop().await;
    assert!(!exists(&app, &partition("gpu_presence", old)).await);
    // The recent month's raw data is untouched; the rollups of both are kept.
    assert_eq!(
        raw_days(&app, recent).await,
        (recent.end() - recent.start()).num_days()
    );
    assert_eq!(app.count("select count(*) from occupancy").await, 3);
    assert!(exists(&app, &partition("usage_hourly", old)).await);
    assert_eq!(
        app.get(Some(&app.admin), &usage).await.body,
        usage_before.body
    );
    assert_eq!(
        app.get(Some(&app.admin), &monthly).await.body,
        monthly_before.body
    );

    // A batch for a dropped month is refused, naming the field; a recent one is stored.
    let retained = slicemeter::http::router(slicemeter::http::state::AppState::new(
        app.pool.clone(),
        config,
    ));
    let post = |b: serde_json::Value| {
        let router = retained.clone();
        let token = collector.clone();
        async move {
            use tower::ServiceExt;
            let req = axum::http::Request::post("/v1/ingest")
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .body(axum::body::Body::from(serde_json::to_vec(&b).unwrap()))
                .unwrap();
            let response = router.oneshot(req).await.unwrap();
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            )
        }
    };
    let (status, body) = post(batch_at(old.start() + Duration::days(3))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let fields = body["error"]["fields"].as_array().unwrap();
    assert_eq!(fields.len(), 1, "{body}");
    assert_eq!(fields[0]["field"], "period.start");
    let kept_from = this.minus(13).first_day().to_string();
    assert!(
        fields[0]["message"].as_str().unwrap().contains(&format!(
            "older than the raw windows this server keeps (from {kept_from} on"
        )),
        "{body}"
    );
    assert_eq!(raw_days(&app, old).await, 0, "re-created");
    let (status, body) = post(batch_at(recent.start() + Duration::days(3))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(app.count("select count(*) from occupancy").await, 6);
}
