//! Group commit: batches that arrive together are written in one transaction, and a group that
//! meets a duplicate, a conflict or another node's GPU is stored batch by batch, each batch
//! answered as it would have been alone.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};
use slicemeter::http::state::ServerConfig;
use slicemeter::ingest::group::GroupCommit;

use crate::support::*;

/// Gathers for long enough that requests sent together surely meet, with one writer: 3 s, since
/// 0.5 s let eight requests of a loaded 2-core CI machine fall into two groups.
async fn gathering_app() -> TestApp {
    TestApp::with_config(ServerConfig {
        ingest_rate: 0.0,
        group_commit: GroupCommit {
            wait: Duration::from_secs(3),
            writers: 1,
            ..GroupCommit::default()
        },
        ..test_config()
    })
    .await
}

/// Node `n`'s H100 (uuids of its own) cut 3g.40gb + 1g.10gb, with two minutes of windows from
/// 2026-10-01T00:00Z: four windows.
fn node_batch(n: u32) -> Value {
    let gpu = format!("GPU-00000000-0000-4000-8000-{:012x}", 0x100 + n);
    let slice = |k: u32| format!("MIG-00000000-0000-4000-8000-{:012x}", 0x10_000 + n * 16 + k);
    let windows: Vec<Value> = (0..2)
        .flat_map(|m| {
            let s = format!("2026-10-01T00:0{m}:00Z");
            let e = format!("2026-10-01T00:0{}:00Z", m + 1);
            vec![
                window(&slice(1), &s, &e, "nlp", &format!("trainer-{n}"), 60.0),
                window(&slice(2), &s, &e, "vision", &format!("server-{n}"), 30.0),
            ]
        })
        .collect();
    json!({"node": format!("gpu-node-{n:02}"),
           "period": {"start": "2026-10-01T00:00:00Z", "end": "2026-10-01T00:02:00Z"},
           "gpus": [{"uuid": gpu, "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
                     "compute_slices": 7, "memory_slices": 8, "mig_enabled": true}],
           "slices": [
               {"uuid": slice(1), "gpu_uuid": gpu, "kind": "mig", "profile": "3g.40gb", "profile_id": 9,
                "compute_slices": 3, "memory_slices": 4, "memory_bytes": 42412802048_i64},
               {"uuid": slice(2), "gpu_uuid": gpu, "kind": "mig", "profile": "1g.10gb", "profile_id": 19,
                "compute_slices": 1, "memory_slices": 1, "memory_bytes": 10468982784_i64}],
           "windows": windows})
}

#[tokio::test]
async fn batches_sent_together_are_stored_in_one_transaction() {
    let app = gathering_app().await;
    let batches: Vec<Value> = (1..=8).map(node_batch).collect();
    let replies =
        futures_util::future::join_all(batches.iter().map(|b| app.ingest(&app.admin, b))).await;
    for r in &replies {
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        assert_eq!(r.body, json!({"inserted": 4, "duplicates": 0}));
    }
    assert_eq!(app.count("select count(*) from occupancy").await, 32);
    // Rows written by one transaction carry its id.
    assert_eq!(
        app.count("select count(distinct xmin::text) from occupancy")
            .await,
        1
    );
    assert_eq!(
        app.count("select sum(held_seconds)::int8 from usage_hourly")
            .await,
        8 * (2 * 60 + 2 * 30)
    );
    assert_eq!(
        app.count("select sum(present_seconds)::int8 from gpu_daily")
            .await,
        8 * 120
    );
    assert_eq!(app.count("select count(*) from gpu_presence").await, 8);
}

#[tokio::test]
async fn a_group_with_a_duplicate_a_conflict_and_an_invalid_batch_stores_the_others_once() {
    let app = gathering_app().await;
    // Node 1's batch, stored before; it comes again in the group.
    let resent = node_batch(1);
    let first = app.ingest(&app.admin, &resent).await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");

    let good: Vec<Value> = (2..=6).map(node_batch).collect();
    // Node 7 reports node 1's 3g.40gb slice as on its own GPU: a slice's GPU never changes.
    let mut conflict = node_batch(7);
    let own = conflict["slices"][0]["uuid"].clone();
    conflict["slices"][0]["uuid"] = resent["slices"][0]["uuid"].clone();
    for w in conflict["windows"].as_array_mut().unwrap() {
        if w["slice_uuid"] == own {
            w["slice_uuid"] = resent["slices"][0]["uuid"].clone();
        }
    }
    // Node 8 reports node 1's GPU: another node's.
    let mut theft = node_batch(8);
    theft["gpus"][0]["uuid"] = resent["gpus"][0]["uuid"].clone();
    for s in theft["slices"].as_array_mut().unwrap() {
        s["gpu_uuid"] = resent["gpus"][0]["uuid"].clone();
    }
    theft["period"] = json!({"start": "2026-10-01T01:00:00Z", "end": "2026-10-01T01:02:00Z"});
    theft["windows"] = json!([]);
    // Node 9's has a window that ends before it starts.
    let mut invalid = node_batch(9);
    invalid["windows"][1]["end"] = json!("2026-09-30T23:00:00Z");

    let mut all: Vec<&Value> = good.iter().collect();
    all.extend([&resent, &conflict, &theft, &invalid]);
    let replies =
        futures_util::future::join_all(all.iter().map(|b| app.ingest(&app.admin, b))).await;
    let (good_replies, rest) = replies.split_at(good.len());
    for r in good_replies {
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        assert_eq!(r.body, json!({"inserted": 4, "duplicates": 0}));
    }
    let (dup, conflicted, stolen, bad) = (&rest[0], &rest[1], &rest[2], &rest[3]);
    assert_eq!(dup.status, StatusCode::OK, "{dup:?}");
    assert_eq!(dup.body, json!({"inserted": 0, "duplicates": 4}));
    assert_eq!(conflicted.status, StatusCode::CONFLICT, "{conflicted:?}");
    assert_eq!(field_names(conflicted), vec!["slices[0]"], "{conflicted:?}");
    assert_eq!(stolen.status, StatusCode::FORBIDDEN, "{stolen:?}");
    assert_eq!(field_names(stolen), vec!["gpus[0].uuid"], "{stolen:?}");
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{bad:?}");
    assert!(
        field_names(bad).iter().any(|f| f.starts_with("windows[1]")),
        "{bad:?}"
    );

    // Node 1 once and nodes 2-6 once; nothing of nodes 7-9.
    assert_eq!(app.count("select count(*) from occupancy").await, 6 * 4);
    assert_eq!(
        app.count("select sum(held_seconds)::int8 from usage_hourly")
            .await,
        6 * (2 * 60 + 2 * 30)
    );
    assert_eq!(
        app.count(
            "select count(*) from gpu where node in ('gpu-node-07', 'gpu-node-08', 'gpu-node-09')"
        )
        .await,
        0
    );
    assert_eq!(app.count("select count(*) from gpu_presence").await, 6);
}
