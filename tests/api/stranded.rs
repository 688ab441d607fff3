//! Stranded capacity: what a GPU's layout leaves that no profile or share can take, recorded with the
//! GPU's presence from the slices each batch says the GPU has.

use serde_json::{Value, json};

use crate::support::*;

fn h100(uuid: &str, mig: bool) -> Value {
    json!({"uuid": uuid, "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
           "compute_slices": 7, "memory_slices": 8, "mig_enabled": mig})
}

fn mig(gpu: &str, n: usize, profile: &str, id: i64, c: i64, m: i64, bytes: i64) -> Value {
    json!({"uuid": format!("{gpu}::{n}"), "gpu_uuid": gpu, "kind": "mig", "profile": profile,
           "profile_id": id, "compute_slices": c, "memory_slices": m, "memory_bytes": bytes})
}

/// Per GPU, its stranded compute slices, memory slices, thread percent and memory bytes, each as
/// seconds' worth over the day.
async fn stranded(app: &TestApp) -> Vec<(String, i64, i64, i64, i64)> {
    sqlx::query_as(
        "select g.gpu_uuid, d.stranded_compute_slice_seconds::int8,
                d.stranded_memory_slice_seconds::int8, d.stranded_thread_percent_seconds::int8,
                (d.stranded_memory_byte_seconds / 3600)::int8
         from gpu_daily d join gpu g using (gpu_id) order by 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn each_layout_strands_what_no_profile_or_share_can_take_for_as_long_as_it_stands() {
    let app = TestApp::spawn().await;
    let gib = 1i64 << 30;
    let slices = [
        // Two 3g.40gb: one compute slice and no memory slice left.
        vec![
            mig("GPU-a", 0, "3g.40gb", 9, 3, 4, 42412802048),
            mig("GPU-a", 1, "3g.40gb", 9, 3, 4, 42412802048),
        ],
        // Four 1g.20gb: three compute slices with no memory.
        (0..4)
            .map(|n| mig("GPU-b", n, "1g.20gb", 15, 1, 2, 21_067_988_992))
            .collect(),
        // Seven 1g.10gb: the eighth memory slice has no compute.
        (0..7)
            .map(|n| mig("GPU-c", n, "1g.10gb", 19, 1, 1, 10468982784))
            .collect(),
        // `-cgi 9,19,19`: a 2g.20gb still fits beside it.
        vec![
            mig("GPU-d", 0, "3g.40gb", 9, 3, 4, 42412802048),
            mig("GPU-d", 1, "1g.10gb", 19, 1, 1, 10468982784),
            mig("GPU-d", 2, "1g.10gb", 19, 1, 1, 10468982784),
        ],
        // An empty MIG card.
        vec![],
        // MPS with every thread given out and 20 GiB not pinned: the memory is stranded.
        (0..2)
            .map(|n| {
                json!({"uuid": format!("GPU-f::{n}"), "gpu_uuid": "GPU-f", "kind": "mps",
                       "active_thread_percentage": 50, "pinned_memory_bytes": 30 * gib})
            })
            .collect(),
    ];
    let uuids = ["GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-e", "GPU-f"];
    let batch = json!({
        "node": "gpu-node-01",
        "period": {"start": "2026-10-01T00:00:00Z", "end": "2026-10-01T01:00:00Z"},
        "gpus": uuids.iter().map(|u| h100(u, *u != "GPU-f")).collect::<Vec<_>>(),
        "slices": slices.iter().flatten().collect::<Vec<_>>(),
        "windows": []
    });
    let r = app.ingest(&app.admin, &batch).await;
    assert_eq!(r.status, axum::http::StatusCode::OK, "{r:?}");
    let free_mps = 85_520_809_984 - 60 * gib;
    assert_eq!(
        stranded(&app).await,
        [
            ("GPU-a".to_owned(), 3600, 0, 0, 0),
            ("GPU-b".to_owned(), 3 * 3600, 0, 0, 0),
            ("GPU-c".to_owned(), 0, 3600, 0, 0),
            ("GPU-d".to_owned(), 0, 0, 0, 0),
            ("GPU-e".to_owned(), 0, 0, 0, 0),
            ("GPU-f".to_owned(), 0, 0, 0, free_mps),
        ]
    );
}
