//! `POST /v1/ingest` against a real PostgreSQL.

use std::io::Write;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use slicemeter::domain::access::Role;
use slicemeter::http::state::ServerConfig;

use crate::support::*;

#[tokio::test]
async fn posting_the_same_batch_twice_stores_it_once_and_says_so() {
    let app = TestApp::spawn().await;
    let (start, end, windows) = minute_windows(30);
    let b = batch(&start, &end, windows);

    let first = app.ingest(&app.admin, &b).await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    assert_eq!(first.body, json!({"inserted": 30, "duplicates": 0}));
    let rows = app.count("select count(*) from occupancy").await;
    let held = app
        .count("select sum(held_seconds)::int8 from usage_hourly")
        .await;

    let second = app.ingest(&app.admin, &b).await;
    assert_eq!(second.status, StatusCode::OK, "{second:?}");
    assert_eq!(second.body, json!({"inserted": 0, "duplicates": 30}));
    assert_eq!(app.count("select count(*) from occupancy").await, rows);
    assert_eq!(rows, 30);
    // The rollup and the presence did not count the retry either.
    assert_eq!(
        app.count("select sum(held_seconds)::int8 from usage_hourly")
            .await,
        held
    );
    assert_eq!(held, 30 * 60);
    assert_eq!(
        app.count("select sum(present_seconds)::int8 from gpu_hourly")
            .await,
        600
    );
}

#[tokio::test]
async fn a_batch_with_some_windows_already_stored_stores_only_the_new_ones() {
    let app = TestApp::spawn().await;
    let (start, end, windows) = minute_windows(30);
    let first = batch(&start, &end, windows[..12].to_vec());
    assert_eq!(app.ingest(&app.admin, &first).await.status, StatusCode::OK);

    let again = app.ingest(&app.admin, &batch(&start, &end, windows)).await;
    assert_eq!(again.status, StatusCode::OK, "{again:?}");
    assert_eq!(again.body, json!({"inserted": 18, "duplicates": 12}));
    assert_eq!(app.count("select count(*) from occupancy").await, 30);
    assert_eq!(
        app.count("select sum(held_seconds)::int8 from usage_hourly")
            .await,
        30 * 60
    );
    assert_eq!(
        app.count("select sum(window_count)::int8 from usage_hourly")
            .await,
        30
    );
}

#[tokio::test]
async fn the_same_batch_posted_concurrently_is_stored_once() {
    let app = TestApp::spawn().await;
    let (start, end, windows) = minute_windows(60);
    let b = batch(&start, &end, windows);
    let replies = futures_util::future::join_all((0..4).map(|_| app.ingest(&app.admin, &b))).await;
    let inserted: i64 = replies
        .iter()
        .map(|r| {
            assert_eq!(r.status, StatusCode::OK, "{r:?}");
            r.body["inserted"].as_i64().unwrap()
        })
        .sum();
    assert_eq!(inserted, 60);
    assert_eq!(app.count("select count(*) from occupancy").await, 60);
    assert_eq!(
        app.count("select sum(held_seconds)::int8 from usage_hourly")
            .await,
        3600
    );
}

#[tokio::test]
async fn a_batch_with_one_bad_window_among_500_stores_nothing_and_names_that_window() {
    let app = TestApp::spawn().await;
    let (start, end, mut windows) = minute_windows(500);
    windows[317]["held_seconds"] = json!(75.5);
    let r = app.ingest(&app.admin, &batch(&start, &end, windows)).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{r:?}");
    assert_eq!(r.body["error"]["code"], "invalid_batch");
    let f = fields(&r);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, "windows[317].held_seconds");
    assert!(
        f[0].1.contains("exceeds the window's length (60 s)"),
        "{}",
        f[0].1
    );
    assert_eq!(app.count("select count(*) from occupancy").await, 0);
    assert_eq!(app.count("select count(*) from gpu").await, 0);
    assert_eq!(app.count("select count(*) from usage_hourly").await, 0);
}

#[tokio::test]
async fn every_kind_of_bad_figure_gets_its_own_clear_error() {
    let app = TestApp::spawn().await;
    let (start, end, windows) = minute_windows(9);
    let mut b = batch(&start, &end, windows);
    b["windows"][0]["compute_active_seconds"] = json!(61.0);
    b["windows"][0]["held_seconds"] = json!(60.0);
    b["windows"][1]["memory_byte_seconds"] = json!(-1.0);
    b["windows"][2]["end"] = b["windows"][2]["start"].clone();
    b["windows"][3]["memory_peak_bytes"] = json!(-5);
    b["slices"][1]["kind"] = json!("sriov");
    b["slices"][2]["gpu_uuid"] = json!("GPU-not-in-this-batch");
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{r:?}");
    let f = fields(&r);
    let find = |field: &str| {
        f.iter()
            .find(|(name, _)| name == field)
            .unwrap_or_else(|| panic!("no error for {field}: {f:?}"))
            .1
            .clone()
    };
    assert!(find("windows[0].compute_active_seconds").contains("exceeds held_seconds (60)"));
    assert!(find("windows[1].memory_byte_seconds").contains("must not be negative"));
    assert!(find("windows[2].end").contains("is not after its start"));
    assert!(find("windows[3].memory_peak_bytes").contains("must not be negative"));
    assert!(find("slices[1].kind").contains("unknown slice kind \"sriov\""));
    assert!(find("slices[2].gpu_uuid").contains("slice on an unknown GPU"));
    assert_eq!(app.count("select count(*) from occupancy").await, 0);
}

#[tokio::test]
async fn a_period_far_in_the_future_is_refused_with_the_server_time() {
    let app = TestApp::spawn().await;
    let start = (chrono::Utc::now() + chrono::Duration::days(2))
        .format("%Y-%m-%dT%H:%M:00Z")
        .to_string();
    let end = (chrono::Utc::now() + chrono::Duration::days(2) + chrono::Duration::minutes(1))
        .format("%Y-%m-%dT%H:%M:00Z")
        .to_string();
    let r = app
        .ingest(
            &app.admin,
            &batch(
                &start,
                &end,
                vec![window(MIG_3G, &start, &end, "nlp", "p", 60.0)],
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{r:?}");
    let f = fields(&r);
    assert_eq!(f[0].0, "period.end");
    assert!(f[0].1.contains("is in the future (server time"), "{f:?}");
}

#[tokio::test]
async fn a_window_outside_its_batch_period_is_refused() {
    let app = TestApp::spawn().await;
    let b = batch(
        "2026-10-01T00:00:00Z",
        "2026-10-01T00:01:00Z",
        vec![window(
            MIG_3G,
            "2026-10-01T00:01:00Z",
            "2026-10-01T00:02:00Z",
            "nlp",
            "p",
            60.0,
        )],
    );
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        fields(&r)[0].1.contains("lies outside the batch period"),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_body_that_is_not_a_batch_names_the_path_of_the_problem() {
    let app = TestApp::spawn().await;
    let (start, end, windows) = minute_windows(3);
    let mut b = batch(&start, &end, windows);
    b["windows"][2]["held_seconds"] = json!("sixty");
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(r.body["error"]["code"], "malformed_batch");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("windows[2].held_seconds: invalid type: string \"sixty\""),
        "{message}"
    );
}

#[tokio::test]
async fn a_collector_ingests_only_for_its_own_node() {
    let app = TestApp::spawn().await;
    let node_a = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    let node_b = app.token(Role::Collector, None, Some("gpu-node-02")).await;
    let finance = app.token(Role::Finance, None, None).await;
    let (start, end, windows) = minute_windows(3);
    let b = batch(&start, &end, windows);

    let r = app.ingest(&node_b, &b).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reports for node \"gpu-node-02\", not \"gpu-node-01\"")
    );
    let r = app.ingest(&finance, &b).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    assert_eq!(app.count("select count(*) from occupancy").await, 0);

    let r = app.ingest(&node_a, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["inserted"], 3);
}

#[tokio::test]
async fn ingest_without_a_valid_token_is_unauthorized() {
    let app = TestApp::spawn().await;
    let (start, end, windows) = minute_windows(3);
    let b = batch(&start, &end, windows);
    let r = app.send_json("POST", None, "/v1/ingest", &b).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{r:?}");
    assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer");
    for bad in [
        "nonsense",
        "smt_1_0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        let r = app.ingest(bad, &b).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bad}: {r:?}");
        assert_eq!(
            r.body["error"]["message"],
            "the token is invalid, revoked or expired"
        );
    }
    let token = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    let id: i64 = token.split('_').nth(1).unwrap().parse().unwrap();
    assert!(
        slicemeter::auth::store::revoke(&app.pool, id, &slicemeter::domain::access::Actor::CLI)
            .await
            .unwrap()
    );
    assert_eq!(
        app.ingest(&token, &b).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(app.count("select count(*) from occupancy").await, 0);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

async fn post_raw(app: &TestApp, body: Vec<u8>, gzip: bool) -> Reply {
    let mut req = Request::post("/v1/ingest")
        .header(header::AUTHORIZATION, format!("Bearer {}", app.admin))
        .header(header::CONTENT_TYPE, "application/json");
    if gzip {
        req = req.header(header::CONTENT_ENCODING, "gzip");
    }
    app.request(req.body(Body::from(body)).unwrap()).await
}

#[tokio::test]
async fn a_gzip_body_is_accepted() {
    let app = TestApp::spawn().await;
    let (start, end, windows) = minute_windows(6);
    let json = serde_json::to_vec(&batch(&start, &end, windows)).unwrap();
    let r = post_raw(&app, gzip(&json), true).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["inserted"], 6);
}

#[tokio::test]
async fn an_oversize_body_gets_413_with_the_limit_before_or_after_gzip() {
    let app = TestApp::with_config(ServerConfig {
        body_limit: 64 << 10,
        ..test_config()
    })
    .await;
    let (start, end, windows) = minute_windows(600);
    let json = serde_json::to_vec(&batch(&start, &end, windows)).unwrap();
    assert!(json.len() > 64 << 10);
    let r = post_raw(&app, json.clone(), false).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{r:?}");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit of 64 KiB (65536 bytes)")
    );
    // Small on the wire, too big once decompressed.
    let packed = gzip(&json);
    assert!(packed.len() < 64 << 10);
    let r = post_raw(&app, packed, true).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{r:?}");
    assert_eq!(app.count("select count(*) from occupancy").await, 0);
}

#[tokio::test]
async fn a_period_overlapping_one_already_reported_is_refused_and_stores_nothing() {
    let app = TestApp::spawn().await;
    let first = batch("2026-10-01T00:00:00Z", "2026-10-01T00:10:00Z", vec![]);
    assert_eq!(app.ingest(&app.admin, &first).await.status, StatusCode::OK);
    let overlapping = batch(
        "2026-10-01T00:05:00Z",
        "2026-10-01T00:15:00Z",
        vec![window(
            MIG_3G,
            "2026-10-01T00:10:00Z",
            "2026-10-01T00:11:00Z",
            "nlp",
            "p",
            60.0,
        )],
    );
    let r = app.ingest(&app.admin, &overlapping).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    let f = fields(&r);
    assert_eq!(f[0].0, "gpus[0]");
    assert!(f[0].1.contains("overlaps this batch's period"), "{f:?}");
    assert_eq!(app.count("select count(*) from occupancy").await, 0);
    // Fleet cost counts the GPU's ten minutes once.
    assert_eq!(
        app.count("select sum(present_seconds)::int8 from gpu_hourly")
            .await,
        600
    );
    let next = batch("2026-10-01T00:10:00Z", "2026-10-01T00:15:00Z", vec![]);
    assert_eq!(app.ingest(&app.admin, &next).await.status, StatusCode::OK);
    assert_eq!(
        app.count("select sum(present_seconds)::int8 from gpu_hourly")
            .await,
        900
    );
}

#[tokio::test]
async fn a_slice_reported_with_another_reservation_is_refused() {
    let app = TestApp::spawn().await;
    let (start, end, windows) = minute_windows(3);
    assert_eq!(
        app.ingest(&app.admin, &batch(&start, &end, windows))
            .await
            .status,
        StatusCode::OK
    );
    let mut b = batch("2026-10-01T01:00:00Z", "2026-10-01T01:01:00Z", vec![]);
    b["slices"][0]["profile"] = json!("4g.40gb");
    b["slices"][0]["compute_slices"] = json!(4);
    b["slices"] = json!([b["slices"][0].clone()]);
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    assert!(
        fields(&r)[0].1.contains("reservation never changes"),
        "{r:?}"
    );
}

#[tokio::test]
async fn gpu_instance_ids_are_refused_out_of_range_twice_on_a_gpu_or_off_a_mig_instance() {
    let app = TestApp::spawn().await;
    let mut b = batch("2026-10-01T00:00:00Z", "2026-10-01T00:01:00Z", vec![]);
    b["slices"][0]["gpu_instance_id"] = json!(64);
    b["slices"][2]["gpu_instance_id"] = json!(7);
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{r:?}");
    assert_eq!(
        fields(&r),
        vec![
            (
                "slices[0].gpu_instance_id".to_owned(),
                "gpu_instance_id must be 0 to 63, got 64".to_owned()
            ),
            (
                "slices[2].gpu_instance_id".to_owned(),
                format!("GPU instance 7 is already slices[1] on {H100}")
            ),
        ]
    );
    // A whole GPU has no GPU instance.
    let whole = json!({"node": "gpu-node-01",
        "period": {"start": "2026-10-01T00:00:00Z", "end": "2026-10-01T00:01:00Z"},
        "gpus": [{"uuid": "GPU-W", "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
                  "compute_slices": 7, "memory_slices": 8, "mig_enabled": false}],
        "slices": [{"uuid": "GPU-W", "gpu_uuid": "GPU-W", "kind": "whole", "gpu_instance_id": 0}]});
    let r = app.ingest(&app.admin, &whole).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{r:?}");
    assert_eq!(
        fields(&r),
        vec![(
            "slices[0].gpu_instance_id".to_owned(),
            "only a mig slice has a GPU instance id, and this one is whole".to_owned()
        )]
    );
    let stored: i64 = sqlx::query_scalar("select count(*) from slice")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0);
}

#[tokio::test]
async fn a_mig_instance_keeps_the_gpu_instance_id_it_was_registered_with() {
    let app = TestApp::spawn().await;
    let (start, end, windows) = minute_windows(3);
    assert_eq!(
        app.ingest(&app.admin, &batch(&start, &end, windows))
            .await
            .status,
        StatusCode::OK
    );
    // Another id for the same instance contradicts its registration: refused, nothing stored.
    let mut b = batch("2026-10-01T01:00:00Z", "2026-10-01T01:01:00Z", vec![]);
    b["slices"][0]["gpu_instance_id"] = json!(3);
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    assert_eq!(
        fields(&r),
        vec![(
            "slices[0].gpu_instance_id".to_owned(),
            format!(
                "{MIG_3G} is registered as GPU instance 2, not 3; a MIG instance keeps its GPU instance id, so report a new instance under a new uuid"
            )
        )]
    );
    // A collector that sends no ids (an older release) is taken, and the ids stay as registered.
    let mut b = batch("2026-10-01T01:00:00Z", "2026-10-01T01:01:00Z", vec![]);
    for s in b["slices"].as_array_mut().unwrap() {
        s.as_object_mut().unwrap().remove("gpu_instance_id");
    }
    assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);
    let ids: Vec<Option<i16>> =
        sqlx::query_scalar("select gpu_instance_id from slice order by gpu_instance_id")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(ids, vec![Some(2), Some(7), Some(8)]);
}

#[tokio::test]
async fn mig_instances_that_cannot_coexist_are_refused() {
    let app = TestApp::spawn().await;
    let mut b = batch("2026-10-01T00:00:00Z", "2026-10-01T00:01:00Z", vec![]);
    let mut big = b["slices"][0].clone();
    big["uuid"] = json!("MIG-extra");
    big["profile"] = json!("4g.40gb");
    big["compute_slices"] = json!(4);
    big["gpu_instance_id"] = json!(1);
    b["slices"].as_array_mut().unwrap().push(big);
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{r:?}");
    assert!(
        fields(&r)[0]
            .1
            .contains("use 9 compute slices, the GPU has 7"),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_window_across_an_hour_boundary_is_split_exactly_in_the_rollup() {
    let app = TestApp::spawn().await;
    let b = batch(
        "2026-10-31T23:59:00Z",
        "2026-11-01T00:01:00Z",
        vec![window(
            MIG_3G,
            "2026-10-31T23:59:30Z",
            "2026-11-01T00:00:30Z",
            "nlp",
            "p",
            59.0,
        )],
    );
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let rows: Vec<(chrono::DateTime<chrono::Utc>, rust_decimal::Decimal)> =
        sqlx::query_as("select hour, held_seconds from usage_hourly order by hour")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 2, "October and November each get their part");
    assert_eq!(rows[0].1 + rows[1].1, rust_decimal::Decimal::from(59));
    assert_eq!(rows[0].1.round_dp(3), rust_decimal::Decimal::new(29_500, 3));
    // The batch's presence is split the same way: 60 s in each month.
    assert_eq!(
        app.count("select count(*) from gpu_hourly where present_seconds = 60")
            .await,
        2
    );
}

#[tokio::test]
async fn unknown_compute_activity_is_stored_as_unknown() {
    let app = TestApp::spawn().await;
    let mut w = window(
        MIG_3G,
        "2026-10-01T00:00:00Z",
        "2026-10-01T00:01:00Z",
        "nlp",
        "p",
        60.0,
    );
    w["compute_active_seconds"] = Value::Null;
    let r = app
        .ingest(
            &app.admin,
            &batch("2026-10-01T00:00:00Z", "2026-10-01T00:01:00Z", vec![w]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        app.count("select count(*) from occupancy where compute_active_seconds is null")
            .await,
        1
    );
    assert_eq!(
        app.count("select sum(compute_known_seconds)::int8 from usage_hourly")
            .await,
        0
    );
}

#[tokio::test]
async fn the_database_itself_refuses_windows_that_break_the_rules() {
    let app = TestApp::spawn().await;
    slicemeter::db::Partitions::default()
        .ensure(&app.pool, &["2026-10-01".parse().unwrap()])
        .await
        .unwrap();
    for (bad, constraint) in [
        (
            "'2026-10-01 00:00Z', '2026-10-01 00:01Z', 61, 0, 0, 1",
            "occupancy_held_within_window",
        ),
        (
            "'2026-10-01 00:00Z', '2026-10-01 00:01Z', 60, -1, 0, 1",
            "occupancy_memory_non_negative",
        ),
        (
            "'2026-10-01 00:00Z', '2026-10-01 00:01Z', 30, 0, 0, 31",
            "occupancy_compute_within_held",
        ),
        (
            "'2026-10-01 00:01Z', '2026-10-01 00:01Z', 0, 0, 0, 0",
            "occupancy_window_positive",
        ),
    ] {
        let err = sqlx::query(&format!(
            "insert into occupancy (slice_id, gpu_id, consumer_id, window_start, window_end,
                                    held_seconds, memory_byte_seconds, memory_peak_bytes,
                                    compute_active_seconds)
             values (1, 1, 1, {bad})"
        ))
        .execute(&app.pool)
        .await
        .unwrap_err();
        assert!(err.to_string().contains(constraint), "{constraint}: {err}");
    }
}
