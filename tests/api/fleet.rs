//! `GET /v1/fleet` and the operations endpoints.

use axum::http::StatusCode;
use slicemeter::domain::access::Role;

use crate::support::*;

#[tokio::test]
async fn the_fleet_lists_gpus_slices_and_who_held_them_in_the_last_hour() {
    let app = TestApp::spawn().await;
    let now = chrono::Utc::now();
    let start = slicemeter::domain::time::floor_to(
        now - chrono::Duration::minutes(3),
        chrono::Duration::minutes(1),
    );
    let end = start + chrono::Duration::minutes(1);
    let (s, e) = (start.to_rfc3339(), end.to_rfc3339());
    let b = batch(
        &s,
        &e,
        vec![window(MIG_3G, &s, &e, "nlp", "embedder-0", 60.0)],
    );
    assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);
    let r = app.get(Some(&app.admin), "/v1/fleet").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let gpu = &r.body["gpus"][0];
    assert_eq!(gpu["model"], "NVIDIA H100 80GB HBM3");
    let slices = gpu["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 3);
    let held: Vec<_> = slices.iter().filter(|s| !s["holder"].is_null()).collect();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0]["profile"], "3g.40gb");
    assert_eq!(held[0]["holder"]["pod"], "embedder-0");
    assert_eq!(held[0]["holder"]["team"], "unattributed");
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    assert_eq!(
        app.get(Some(&lead), "/v1/fleet").await.status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn health_readiness_and_metrics_need_no_token() {
    let app = TestApp::spawn().await;
    assert_eq!(app.get(None, "/healthz").await.status, StatusCode::OK);
    let r = app.get(None, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, "ready\n");
    let (start, end, windows) = minute_windows(3);
    app.ingest(&app.admin, &batch(&start, &end, windows)).await;
    let r = app.get(None, "/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.body
            .as_str()
            .unwrap()
            .contains("slicemeter_ingest_windows_total{result=\"inserted\"}"),
        "{r:?}"
    );
    let r = app.get(None, "/v1/no-such-thing").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["error"]["code"], "not_found");
}

#[tokio::test]
async fn readiness_fails_with_503_and_retry_after_when_the_database_is_gone() {
    let app = TestApp::spawn().await;
    app.pool.close().await;
    let r = app.get(None, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{r:?}");
    assert_eq!(r.headers["retry-after"], "5");
    assert_eq!(app.get(None, "/healthz").await.status, StatusCode::OK);
}
