//! `--source nvml` without a GPU: recorded shapes of real GPUs behind the NVML trait, a fake kubelet
//! on a unix socket, and windows checked end to end through ingest, attribution and pricing.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::collector::attribution::{
    self, Attribution, SharedSnapshot, kubeapi::KubeApi, procfs::Procfs,
};
use slicemeter::collector::source::nvml::replay::{ReplayGpu, ReplayNvml};
use slicemeter::collector::source::nvml::{NvmlSource, Sharing};
use slicemeter::collector::source::{Source, SourceError};
use slicemeter::collector::{Cadence, Replay};
use slicemeter::domain::batch::Batch;

use crate::billing::{d, dec, rate_card};
use crate::kubelet::{FakeKubelet, pod};
use crate::support::*;

async fn snapshot_of(kubelet: &FakeKubelet, api: Option<KubeApi>) -> SharedSnapshot {
    let (snapshot, _task) =
        attribution::watch(kubelet.socket.clone(), api, Duration::from_millis(200));
    for _ in 0..100 {
        if snapshot.read().unwrap().is_some() {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the fake kubelet never answered");
}

/// Replays a source over `[from, from + hours)` with hourly samples and windows, a day a batch.
async fn replay<S: Source + 'static>(source: S, from: &str, hours: i64) -> Vec<Batch> {
    let from: DateTime<Utc> = from.parse().unwrap();
    tokio::task::spawn_blocking(move || {
        let cadence = Cadence {
            sample_interval: Duration::from_secs(3600),
            window: Duration::from_secs(3600),
            batch_period: Duration::from_secs(86_400),
        };
        let mut r =
            Replay::new(source, cadence, from, from + chrono::Duration::hours(hours)).unwrap();
        r.advance(from + chrono::Duration::hours(hours)).unwrap()
    })
    .await
    .unwrap()
}

async fn ingest_all(app: &TestApp, batches: &[Batch]) {
    for b in batches {
        let r = app
            .ingest(&app.admin, &serde_json::to_value(b).unwrap())
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
}

fn uuid_of(batch: &Batch, profile: &str) -> Vec<String> {
    batch
        .slices
        .iter()
        .filter(|s| s.profile.as_deref() == Some(profile))
        .map(|s| s.uuid.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_h100_cut_9_19_19_measured_through_nvml_and_the_kubelet_prices_to_the_worked_example() {
    let app = TestApp::spawn().await;
    for team in ["nlp", "search", "vision"] {
        app.put_team(team, &[team]).await;
    }
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    let h100 = ReplayGpu::h100_cgi_9_19_19(0, "GPU-h100-0");
    let (big, small_a, small_b) = (
        h100.migs[0].uuid.clone(),
        h100.migs[1].uuid.clone(),
        h100.migs[2].uuid.clone(),
    );
    let kubelet = FakeKubelet::start(vec![
        pod("nlp", "trainer-0", &[&big]),
        pod("search", "ranker-0", &[&small_a]),
        pod("vision", "detector-0", &[&small_b]),
    ])
    .await;
    let source = NvmlSource::new(
        ReplayNvml::new(vec![h100]),
        Attribution {
            kubelet: Some(snapshot_of(&kubelet, None).await),
            ..Attribution::default()
        },
        "gpu-node-01",
        Sharing::None,
    );
    let batches = replay(source, "2026-09-01T00:00:00Z", 720).await;
    assert_eq!(batches.len(), 30);
    let first = &batches[0];
    assert_eq!(uuid_of(first, "3g.40gb"), vec![big.clone()]);
    let three_g = first.slices.iter().find(|s| s.uuid == big).unwrap();
    assert_eq!(
        (
            three_g.profile_id,
            three_g.compute_slices,
            three_g.memory_slices
        ),
        (Some(9), Some(3), Some(4))
    );
    assert_eq!(three_g.memory_bytes, Some(42_412_802_048));
    ingest_all(&app, &batches).await;

    let r = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    let costs: Vec<(String, Decimal)> = r.body["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["team"].as_str().unwrap().to_owned(), dec(&t["cost"])))
        .collect();
    assert_eq!(
        costs,
        vec![
            ("nlp".into(), d("1337.14")),
            ("search".into(), d("385.71")),
            ("vision".into(), d("385.71"))
        ]
    );
    assert_eq!(dec(&r.body["conservation"]["fleet_cost"]), d("2880.00"));
    assert_eq!(dec(&r.body["conservation"]["unallocated"]), d("771.43"));
    // Hopper has GPM: compute activity is known, so efficiency is too.
    assert!(!r.body["teams"][0]["efficiency"].is_null(), "{}", r.body);
    let compute: Decimal = sqlx::query_scalar(
        "select sum(compute_active_seconds) from occupancy o join slice s using (slice_id) where s.slice_uuid = $1",
    )
    .bind(&big)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        compute,
        Decimal::from(720 * 3600) / Decimal::from(4),
        "25 % busy, every hour"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mig_instance_without_a_compute_figure_is_unknown_in_windows_and_reports() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    let a100 = ReplayGpu::a100_mig_no_gpm(0, "GPU-a100-0");
    let uuid = a100.migs[0].uuid.clone();
    let kubelet = FakeKubelet::start(vec![pod("nlp", "trainer-0", &[&uuid])]).await;
    let source = NvmlSource::new(
        ReplayNvml::new(vec![a100]),
        Attribution {
            kubelet: Some(snapshot_of(&kubelet, None).await),
            ..Attribution::default()
        },
        "gpu-node-01",
        Sharing::None,
    );
    let batches = replay(source, "2026-09-01T00:00:00Z", 24).await;
    assert!(
        batches[0]
            .windows
            .iter()
            .all(|w| w.compute_active_seconds.is_none())
    );
    let profiles: Vec<_> = batches[0]
        .slices
        .iter()
        .map(|s| s.profile.clone().unwrap())
        .collect();
    assert_eq!(profiles, vec!["4g.40gb", "3g.40gb"]);
    // NVML's GPU instance ids travel with the slices (dcgm-exporter's GPU_I_ID).
    let instances: Vec<_> = batches[0]
        .slices
        .iter()
        .map(|s| s.gpu_instance_id)
        .collect();
    assert_eq!(instances, vec![Some(1), Some(2)]);
    ingest_all(&app, &batches).await;
    let monthly = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    let nlp = &monthly.body["teams"][0];
    assert_eq!(nlp["team"], "nlp");
    assert!(nlp["efficiency"].is_null(), "unknown, not 0: {nlp}");
    assert!(nlp["idle_cost"].is_null());
    let usage = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-09-01&to=2026-09-02&group_by=team&step=day",
        )
        .await;
    assert!(usage.body["total"]["efficiency"].is_null());
    assert_eq!(dec(&usage.body["total"]["compute_unknown_hours"]), d("24"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_h200_cut_into_seven_1g_18gb_is_seven_slices_with_its_profile() {
    let app = TestApp::spawn().await;
    let h200 = ReplayGpu::h200_7x1g(0, "GPU-h200-0");
    let holders: Vec<String> = h200.migs.iter().map(|m| m.uuid.clone()).collect();
    let kubelet = FakeKubelet::start(
        holders
            .iter()
            .enumerate()
            .map(|(i, u)| pod("genai", &format!("chat-{i}"), &[u]))
            .collect(),
    )
    .await;
    let source = NvmlSource::new(
        ReplayNvml::new(vec![h200]),
        Attribution {
            kubelet: Some(snapshot_of(&kubelet, None).await),
            ..Attribution::default()
        },
        "gpu-node-02",
        Sharing::None,
    );
    let batches = replay(source, "2026-09-01T00:00:00Z", 2).await;
    let b = &batches[0];
    assert_eq!(b.gpus[0].model, "NVIDIA H200");
    assert_eq!(b.slices.len(), 7);
    for s in &b.slices {
        assert_eq!(
            (
                s.profile.as_deref(),
                s.profile_id,
                s.compute_slices,
                s.memory_slices
            ),
            (Some("1g.18gb"), Some(19), Some(1), Some(1))
        );
        assert_eq!(s.memory_bytes, Some(16 << 30));
    }
    assert_eq!(b.windows.len(), 7 * 2);
    ingest_all(&app, &batches).await;
    assert_eq!(
        app.count("select count(distinct pod) from consumer").await,
        7
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_time_sliced_gpu_bills_each_replica_for_its_own_processes() {
    let app = TestApp::spawn().await;
    let gpu = ReplayGpu::timesliced_4_processes(0, "GPU-ts-0");
    // The kubelet hands replicas to four pods; /proc ties each process to its pod (HOSTNAME).
    let kubelet = FakeKubelet::start(
        (0..4)
            .map(|i| {
                pod(
                    "vision",
                    &format!("infer-{i}"),
                    &[&format!("GPU-ts-0::{i}")],
                )
            })
            .collect(),
    )
    .await;
    let proc = tempfile::tempdir().unwrap();
    for (i, pid) in (4101..=4104).enumerate() {
        let d = proc.path().join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("cgroup"),
            "0::/kubepods.slice/kubepods-besteffort.slice/cri-containerd-1.scope\n",
        )
        .unwrap();
        std::fs::write(d.join("status"), "Uid:\t1000\t1000\t1000\t1000\n").unwrap();
        std::fs::write(
            d.join("environ"),
            format!("PATH=/bin\0HOSTNAME=infer-{i}\0"),
        )
        .unwrap();
    }
    let source = NvmlSource::new(
        ReplayNvml::new(vec![gpu]),
        Attribution {
            kubelet: Some(snapshot_of(&kubelet, None).await),
            procfs: Procfs {
                root: proc.path().to_owned(),
            },
            ..Attribution::default()
        },
        "gpu-node-03",
        Sharing::Timeslice(4),
    );
    let batches = replay(source, "2026-09-01T00:00:00Z", 1).await;
    let b = &batches[0];
    assert_eq!(b.slices.len(), 4);
    assert!(
        b.slices
            .iter()
            .all(|s| s.kind == "timeslice" && s.replicas == Some(4))
    );
    let by_replica: BTreeMap<String, (f64, Option<f64>)> = b
        .windows
        .iter()
        .map(|w| {
            (
                w.slice_uuid.clone(),
                (
                    w.memory_byte_seconds / 3600.0 / f64::from(1 << 30),
                    w.compute_active_seconds.map(|c| c / 3600.0),
                ),
            )
        })
        .collect();
    // Process 4102 (10 GiB, 25 % of the SMs) runs in pod infer-1, which holds replica ::1.
    assert_eq!(by_replica["GPU-ts-0::1"], (10.0, Some(0.25)));
    assert_eq!(by_replica["GPU-ts-0::0"], (6.0, Some(0.30)));
    assert_eq!(by_replica["GPU-ts-0::3"], (1.0, Some(0.05)));
    ingest_all(&app, &batches).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn off_kubernetes_a_gpu_is_held_by_its_process_unit_or_the_static_map() {
    let app = TestApp::spawn().await;
    let proc = tempfile::tempdir().unwrap();
    let d = proc.path().join("777");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cgroup"), "0::/system.slice/train-llm.service\n").unwrap();
    std::fs::write(d.join("status"), "Uid:\t0\t0\t0\t0\n").unwrap();
    std::fs::write(d.join("environ"), "PATH=/bin\0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("teams.toml");
    std::fs::write(&map, "[teams]\n\"GPU-idle-1\" = \"research\"\n").unwrap();
    let mut quiet = ReplayGpu::whole(1, "GPU-idle-1", 0);
    quiet.processes.clear();
    let source = NvmlSource::new(
        ReplayNvml::new(vec![ReplayGpu::whole(0, "GPU-busy-0", 777), quiet]),
        Attribution {
            procfs: Procfs {
                root: proc.path().to_owned(),
            },
            static_map: attribution::load_static_map(&map).unwrap(),
            ..Attribution::default()
        },
        "workstation-7",
        Sharing::None,
    );
    let batches = replay(source, "2026-09-01T00:00:00Z", 1).await;
    ingest_all(&app, &batches).await;
    let consumers: Vec<(Option<String>, Option<String>, String)> = sqlx::query_as(
        "select distinct c.job_id, c.unix_user, u.team_id
             from consumer c join usage_hourly u using (consumer_id) order by c.job_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        consumers,
        vec![
            (Some("static:GPU-idle-1".into()), None, "research".into()),
            (
                Some("train-llm.service".into()),
                Some("root".into()),
                "unattributed".into()
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gpu_that_falls_off_the_bus_stops_being_measured_and_the_others_go_on() {
    let h100 = ReplayGpu::h100_cgi_9_19_19(0, "GPU-h100-0");
    let mut h200 = ReplayGpu::h200_7x1g(1, "GPU-h200-1");
    h200.lost_after = Some(7 * 3);
    let mut devices: Vec<String> = h100.migs.iter().map(|m| m.uuid.clone()).collect();
    devices.extend(h200.migs.iter().map(|m| m.uuid.clone()));
    let kubelet = FakeKubelet::start(
        devices
            .iter()
            .enumerate()
            .map(|(i, d)| pod("nlp", &format!("p-{i}"), &[d]))
            .collect(),
    )
    .await;
    let source = NvmlSource::new(
        ReplayNvml::new(vec![h100, h200]),
        Attribution {
            kubelet: Some(snapshot_of(&kubelet, None).await),
            ..Attribution::default()
        },
        "gpu-node-04",
        Sharing::None,
    );
    let batches = replay(source, "2026-09-01T00:00:00Z", 6).await;
    let windows = |prefix: &str| -> usize {
        batches
            .iter()
            .flat_map(|b| &b.windows)
            .filter(|w| w.slice_uuid.starts_with(prefix))
            .count()
    };
    assert_eq!(
        windows("MIG-GPU-h100-0"),
        3 * 6,
        "the H100 is measured all along"
    );
    assert_eq!(
        windows("MIG-GPU-h200-1"),
        7 * 3,
        "the H200 until it fell off the bus"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn labels_from_the_api_server_name_the_team_and_dra_claims_are_kept() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    let h100 = ReplayGpu::h100_cgi_9_19_19(0, "GPU-h100-0");
    let (big, small) = (h100.migs[0].uuid.clone(), h100.migs[1].uuid.clone());
    let mut claimed = pod("nlp", "detector-0", &[]);
    claimed.containers[0].dynamic_resources.push(
        slicemeter::collector::attribution::podresources::DynamicResource {
            claim_name: "gpu-claim".into(),
            claim_namespace: "nlp".into(),
            claim_resources: vec![
                slicemeter::collector::attribution::podresources::ClaimResource {
                    cdi_devices: vec![],
                    driver_name: "gpu.nvidia.com".into(),
                    pool_name: "gpu-node-01".into(),
                    device_name: small.clone(),
                },
            ],
        },
    );
    let kubelet = FakeKubelet::start(vec![pod("nlp", "trainer-0", &[&big]), claimed]).await;
    // The API server says trainer-0 belongs to team search, whatever its namespace.
    let api = axum::Router::new().route(
        "/api/v1/pods",
        axum::routing::get(|| async {
            axum::Json(json!({"items": [
                {"metadata": {"uid": "u-1", "namespace": "nlp", "name": "trainer-0", "labels": {"team": "search"}}},
                {"metadata": {"uid": "u-2", "namespace": "nlp", "name": "detector-0"}}
            ]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, api).await.unwrap() });
    let kube = KubeApi::new(&base, "sa-token", None, "gpu-node-01").unwrap();
    let source = NvmlSource::new(
        ReplayNvml::new(vec![h100]),
        Attribution {
            kubelet: Some(snapshot_of(&kubelet, Some(kube)).await),
            ..Attribution::default()
        },
        "gpu-node-01",
        Sharing::None,
    );
    let batches = replay(source, "2026-09-01T00:00:00Z", 1).await;
    ingest_all(&app, &batches).await;
    let rows: Vec<(String, String, Option<Value>)> = sqlx::query_as(
        "select distinct c.pod, u.team_id, c.dra_claim
             from consumer c join usage_hourly u using (consumer_id) order by c.pod",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(rows[0].0, "detector-0");
    assert_eq!(rows[0].1, "nlp");
    assert_eq!(rows[0].2.as_ref().unwrap()["name"], "gpu-claim");
    assert_eq!(rows[0].2.as_ref().unwrap()["driver"], "gpu.nvidia.com");
    assert_eq!(
        (rows[1].0.as_str(), rows[1].1.as_str()),
        ("trainer-0", "search")
    );
}

#[test]
fn without_the_driver_the_nvml_source_says_what_to_do() {
    let mut source = NvmlSource::new(
        ReplayNvml::without_driver(),
        Attribution::default(),
        "n",
        Sharing::None,
    );
    let err = match source.inventory() {
        Err(SourceError::Unavailable(e)) => e,
        other => panic!("{other:?}"),
    };
    assert!(
        err.starts_with(
            "NVML is not available: install the NVIDIA driver, or run with --source sim"
        ),
        "{err}"
    );
}

#[test]
fn collect_with_nvml_on_a_machine_without_the_driver_exits_with_that_message() {
    let has_driver = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libnvidia-ml.so.1"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slicemeter"))
        .args([
            "collect",
            "--source",
            "nvml",
            "--once",
            "--dry-run",
            "--window",
            "2s",
            "--sample-interval",
            "1s",
        ])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if has_driver {
        // On a GPU machine the same command reads the GPUs.
        assert!(out.status.success(), "{stderr}");
        return;
    }
    assert!(!out.status.success());
    assert!(
        stderr
            .contains("NVML is not available: install the NVIDIA driver, or run with --source sim"),
        "{stderr}"
    );
}
