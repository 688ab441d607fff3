//! The sources a fleet already runs: NVIDIA's dcgm-exporter read live by `collect --source dcgm`,
//! and the same pages scraped by a real Prometheus (Debian's package, on loopback) and back-filled
//! by `import prometheus`. One timeline of two nodes, billed three ways, to the cent.
//!
//! The file stays whole: one timeline of two nodes and the fakes that serve it, billed three ways.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::domain::access::Role;
use slicemeter::sim::dcgm::{
    ExporterDevice, ExporterGpu, ExporterInstance, ExporterPage, ExporterPod,
};
use slicemeter::sim::prometheus::{LocalPrometheus, ScrapeTarget};

use crate::billing::d;
use crate::support::*;

/// Seconds of the timeline (from its start, T0) during which a pod holds a device.
#[derive(Debug, Clone, Copy)]
struct Held {
    node: usize,
    /// A MIG instance's GPU instance id, or the GPU itself.
    device: Dev,
    ns: &'static str,
    pod: &'static str,
    from: i64,
    to: i64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Dev {
    Gi(u32),
    A100,
    H200 { vgpu: u32, mib: u64, util: u32 },
}

const H100: &str = "GPU-11111111-2222-3333-4444-555555555555";
const A100: &str = "GPU-aaaaaaaa-2222-3333-4444-555555555555";
const H200: &str = "GPU-22222222-2222-3333-4444-555555555555";
const L40S: &str = "GPU-44444444-2222-3333-4444-555555555555";

/// Node 1 (its exporter writes `Hostname`): an H100 cut with `nvidia-smi mig -cgi 9,19,19` and a
/// whole A100. Node 2 (`hostname`, 4.6.0 and later): an H200 time-shared by two pods, with
/// `--kubernetes-virtual-gpus` and per-pod figures.
const TIMELINE: [Held; 6] = [
    Held {
        node: 0,
        device: Dev::Gi(2),
        ns: "nlp",
        pod: "trainer-0",
        from: 0,
        to: 40,
    },
    // A pod that moves from one 1g.10gb to the other.
    Held {
        node: 0,
        device: Dev::Gi(9),
        ns: "cv",
        pod: "infer-0",
        from: 0,
        to: 20,
    },
    Held {
        node: 0,
        device: Dev::Gi(10),
        ns: "cv",
        pod: "infer-0",
        from: 20,
        to: 40,
    },
    Held {
        node: 0,
        device: Dev::A100,
        ns: "nlp",
        pod: "notebook",
        from: 10,
        to: 30,
    },
    Held {
        node: 1,
        device: Dev::H200 {
            vgpu: 0,
            mib: 40_960,
            util: 60,
        },
        ns: "chat",
        pod: "vllm-0",
        from: 0,
        to: 40,
    },
    Held {
        node: 1,
        device: Dev::H200 {
            vgpu: 1,
            mib: 20_480,
            util: 25,
        },
        ns: "cv",
        pod: "embed-0",
        from: 0,
        to: 20,
    },
];
/// The GPUs are on the pages for these seconds; node 1's exporter does not answer in the gap.
const SPAN: i64 = 40;
const GAP: (i64, i64) = (24, 28);

fn pod(h: &Held, vgpu: Option<u32>, own: Option<(u64, u32)>) -> ExporterPod {
    ExporterPod {
        namespace: h.ns.into(),
        pod: h.pod.into(),
        container: "main".into(),
        uid: format!("uid-{}", h.pod),
        vgpu,
        own,
    }
}

/// Node `node`'s page at second `k` of the timeline.
fn page(node: usize, k: i64) -> String {
    let on = |h: &&Held| h.node == node && h.from <= k && k < h.to;
    let held: Vec<&Held> = TIMELINE.iter().filter(on).collect();
    if !(0..SPAN).contains(&k) {
        return ExporterPage {
            hostname_label: if node == 0 { "Hostname" } else { "hostname" },
            hostname: format!("gpu-node-{}", node + 1),
            virtual_gpus: node == 1,
            gpus: Vec::new(),
        }
        .render();
    }
    let instance = |id: u32, profile: &str, mib: u64| ExporterInstance {
        gpu_instance_id: id,
        profile: profile.into(),
        device: ExporterDevice {
            fb_used_mib: mib,
            fb_free_mib: 1_000,
            engine_active: 0.5,
            consumers: held
                .iter()
                .filter(|h| h.device == Dev::Gi(id))
                .map(|h| pod(h, None, None))
                .collect(),
        },
    };
    let mut text = if node == 0 {
        ExporterPage {
            hostname_label: "Hostname",
            hostname: "gpu-node-1".into(),
            virtual_gpus: false,
            gpus: vec![
                ExporterGpu {
                    index: 0,
                    uuid: H100.into(),
                    model: "NVIDIA H100 80GB HBM3".into(),
                    device: ExporterDevice::default(),
                    instances: vec![
                        instance(2, "3g.40gb", 30_000),
                        instance(9, "1g.10gb", 5_000),
                        instance(10, "1g.10gb", 5_000),
                    ],
                },
                ExporterGpu {
                    index: 1,
                    uuid: A100.into(),
                    model: "NVIDIA A100-SXM4-80GB".into(),
                    device: ExporterDevice {
                        fb_used_mib: 60_000,
                        fb_free_mib: 21_920,
                        engine_active: 0.02,
                        consumers: held
                            .iter()
                            .filter(|h| h.device == Dev::A100)
                            .map(|h| pod(h, None, None))
                            .collect(),
                    },
                    instances: Vec::new(),
                },
                // A model outside NVIDIA's MIG tables, idle: its memory is read from its
                // frame buffer's used and free figures.
                ExporterGpu {
                    index: 2,
                    uuid: L40S.into(),
                    model: "NVIDIA L40S".into(),
                    device: ExporterDevice {
                        fb_used_mib: 0,
                        fb_free_mib: 46_068,
                        engine_active: 0.0,
                        consumers: Vec::new(),
                    },
                    instances: Vec::new(),
                },
            ],
        }
        .render()
    } else {
        ExporterPage {
            hostname_label: "hostname",
            hostname: "gpu-node-2".into(),
            virtual_gpus: true,
            gpus: vec![ExporterGpu {
                index: 0,
                uuid: H200.into(),
                model: "NVIDIA H200".into(),
                device: ExporterDevice {
                    fb_used_mib: held
                        .iter()
                        .map(|h| match h.device {
                            Dev::H200 { mib, .. } => mib,
                            _ => 0,
                        })
                        .sum(),
                    fb_free_mib: 80_000,
                    engine_active: 0.85,
                    consumers: held
                        .iter()
                        .filter_map(|h| match h.device {
                            Dev::H200 { vgpu, mib, util } => {
                                Some(pod(h, Some(vgpu), Some((mib, util))))
                            }
                            _ => None,
                        })
                        .collect(),
                },
                instances: Vec::new(),
            }],
        }
        .render()
    };
    if node == 0 {
        // What a broken or hostile exporter might add: each is refused, counted and left out, on
        // both paths alike (Prometheus stores them as they are).
        let long = "p".repeat(100 * 1024);
        text.push_str(&format!(
            "DCGM_FI_DEV_FB_USED{{gpu=\"7\",UUID=\"GPU-nan\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node-1\",pod=\"x\",namespace=\"nlp\"}} NaN\n\
DCGM_FI_DEV_FB_USED{{gpu=\"8\",UUID=\"GPU-neg\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node-1\",pod=\"x\",namespace=\"nlp\"}} -5\n\
DCGM_FI_DEV_FB_USED{{gpu=\"9\",UUID=\"GPU-huge\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node-1\",pod=\"x\",namespace=\"nlp\"}} 1e18\n\
DCGM_FI_DEV_FB_USED{{gpu=\"10\",UUID=\"GPU-long\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node-1\",pod=\"{long}\"}} 1\n\
DCGM_FI_DEV_FB_USED{{gpu=\"11\",UUID=\"GPU-nomodel\",Hostname=\"gpu-node-1\",pod=\"x\",namespace=\"nlp\"}} 1\n"
        ));
    }
    text
}

/// When the timeline starts, and per node how far its seconds are shifted from the clock's, so that
/// every scrape, Prometheus' and the collector's, reads the second of the slot it stands for.
#[derive(Default)]
struct Clock {
    t0_ms: Option<i64>,
    shift_ms: [i64; 2],
}

async fn serve_page(
    State(clock): State<Arc<Mutex<Clock>>>,
    Path(node): Path<String>,
) -> axum::response::Response {
    let node = match node.as_str() {
        "node1" => 0,
        "node2" => 1,
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let now = chrono::Utc::now().timestamp_millis();
    let (t0, shift) = {
        let c = clock.lock().unwrap();
        (c.t0_ms, c.shift_ms[node])
    };
    let k = t0.map_or(-1, |t0| (now - t0 - shift).div_euclid(1000));
    if node == 0 && (GAP.0..GAP.1).contains(&k) {
        return (StatusCode::SERVICE_UNAVAILABLE, "DCGM is restarting").into_response();
    }
    page(node, k).into_response()
}

/// The bill the timeline makes, line by line as the monthly report prices it (team, model, kind,
/// profile), each line rounded once: reserved shares held for their seconds, the time-shared
/// replicas' measured shares, at 3,600 USD an hour (one a second) for the H100 and H200 and
/// 7,200 for the A100.
fn expected_bill() -> Vec<(&'static str, Decimal)> {
    let gpu_h200 = Decimal::from(150_754_820_096u64);
    let half = d("0.5");
    let mut lines: std::collections::BTreeMap<(&str, &str), Decimal> = Default::default();
    for h in &TIMELINE {
        let seconds = (h.from..h.to)
            .filter(|k| h.node == 1 || !(GAP.0..GAP.1).contains(k))
            .count() as i64;
        let team = match h.ns {
            "nlp" => "nlp",
            "cv" => "cv",
            _ => "chat",
        };
        let (line, amount) = match h.device {
            Dev::Gi(2) => (
                "H100 3g.40gb",
                (half * Decimal::from(3) / Decimal::from(7)
                    + half * Decimal::from(4) / Decimal::from(8))
                    * Decimal::from(seconds),
            ),
            Dev::Gi(_) => (
                "H100 1g.10gb",
                (half / Decimal::from(7) + half / Decimal::from(8)) * Decimal::from(seconds),
            ),
            Dev::A100 => ("A100 whole", Decimal::from(2 * seconds)),
            Dev::H200 { mib, util, .. } => (
                "H200 timeslice",
                d("0.75")
                    * (half * Decimal::from(util) / Decimal::from(100)
                        + half * Decimal::from(mib << 20) / gpu_h200)
                    * Decimal::from(seconds),
            ),
        };
        *lines.entry((team, line)).or_default() += amount;
    }
    let mut teams: std::collections::BTreeMap<&str, Decimal> = Default::default();
    for ((team, _), amount) in lines {
        *teams.entry(team).or_default() +=
            amount.round_dp_with_strategy(2, rust_decimal::RoundingStrategy::MidpointNearestEven);
    }
    teams.into_iter().collect()
}

async fn team_costs(app: &TestApp, month: &str) -> Vec<(String, Decimal)> {
    let r = app
        .get(Some(&app.admin), &format!("/v1/reports/monthly/{month}"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let mut costs: Vec<(String, Decimal)> = r.body["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["team"].as_str().unwrap().to_owned(),
                crate::billing::dec(&t["cost"]),
            )
        })
        .filter(|(_, c)| !c.is_zero())
        .collect();
    costs.sort();
    costs
}

async fn prepare(app: &TestApp, month_start: &str) {
    for (team, ns) in [("nlp", "nlp"), ("cv", "cv"), ("chat", "chat")] {
        let r = app.put_team(team, &[ns]).await;
        assert!(r.status.is_success(), "{r:?}");
    }
    let card = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/rate-cards",
            &json!({"effective_from": month_start, "currency": "USD", "default_hourly_cost": "1.00",
                    "prices": {"NVIDIA H100 80GB HBM3": "3600", "NVIDIA H200": "3600",
                               "NVIDIA A100-SXM4-80GB": "7200"}}),
        )
        .await;
    assert_eq!(card.status, StatusCode::CREATED, "{card:?}");
}

fn served_config() -> slicemeter::http::state::ServerConfig {
    slicemeter::http::state::ServerConfig {
        ingest_rate: 0.0,
        ..test_config()
    }
}

/// What the database holds: windows (and their held milliseconds), and seconds of presence.
async fn stored(app: &TestApp) -> (i64, i64, i64) {
    (
        app.count("select count(*) from occupancy").await,
        app.count("select coalesce(sum(held_seconds * 1000), 0)::int8 from occupancy")
            .await,
        app.count("select coalesce(sum(extract(epoch from period_end - period_start)), 0)::int8 from gpu_presence")
            .await,
    )
}

/// Presence rows, to tell that a run stored nothing at all.
async fn presence_rows(app: &TestApp) -> i64 {
    app.count("select count(*) from gpu_presence").await
}

fn import(
    base: &str,
    token: &str,
    prometheus: &str,
    from: i64,
    to: i64,
    state: &std::path::Path,
) -> std::process::Output {
    import_with(base, token, prometheus, (from, to), state, &TIMELINE_IMPORT)
}

/// The timeline's windows (10 s) and its time-shared node.
const TIMELINE_IMPORT: [&str; 4] = [
    "--window",
    "10s",
    "--node-sharing",
    "gpu-node-2=timeslice:2",
];

fn import_with(
    base: &str,
    token: &str,
    prometheus: &str,
    (from, to): (i64, i64),
    state: &std::path::Path,
    more: &[&str],
) -> std::process::Output {
    let at = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339()
    };
    Command::new(env!("CARGO_BIN_EXE_slicemeter"))
        .args(["import", "prometheus", "--url", prometheus])
        .args(more)
        .args(["--from", &at(from), "--to", &at(to)])
        .args(["--server", base])
        .arg("--state")
        .arg(state)
        .env("SLICEMETER_TOKEN", token)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// The issue's must-hold: the same timeline read live from the exporters and back-filled from the
/// Prometheus that scraped them bills the same, to the cent, and what the timeline says; importing
/// after live collection, or twice, stores nothing more; the scrape gap is neither held nor present.
#[tokio::test(flavor = "multi_thread")]
// long: one timeline billed three ways, each way's figures compared with the others' at the end
async fn live_collection_and_a_prometheus_back_fill_of_the_same_pages_bill_the_same_to_the_cent() {
    let clock = Arc::new(Mutex::new(Clock::default()));
    let exporters = axum::Router::new()
        .route("/{node}/metrics", axum::routing::get(serve_page))
        .with_state(clock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let exporter_addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, exporters).await });

    let data = tempfile::tempdir().unwrap();
    let targets: Vec<ScrapeTarget> = ["node1", "node2"]
        .iter()
        .map(|n| ScrapeTarget {
            job: format!("dcgm-{n}"),
            address: exporter_addr.clone(),
            path: format!("/{n}/metrics"),
        })
        .collect();
    let prometheus = tokio::task::spawn_blocking({
        let dir = data.path().join("prometheus");
        move || LocalPrometheus::start(&dir, &targets, Duration::from_secs(1))
    })
    .await
    .unwrap()
    .expect("Debian's prometheus package (the tests need it; .ci/run installs it)");
    let http = reqwest::Client::new();

    // Prometheus stamps each target's scrapes at a fixed phase of the second: read it off `up`.
    let mut phases = [None, None];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while phases.iter().any(Option::is_none) {
        assert!(
            std::time::Instant::now() < deadline,
            "Prometheus never scraped both exporters"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let r: Value = http
            .get(format!("{}/api/v1/query", prometheus.url))
            .query(&[("query", "up[5s]")])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for s in r["data"]["result"].as_array().into_iter().flatten() {
            let node = if s["metric"]["job"] == "dcgm-node1" {
                0
            } else {
                1
            };
            if let Some(v) = s["values"].as_array().and_then(|v| v.last()) {
                let ms = (v[0].as_f64().unwrap() * 1000.0).round() as i64;
                phases[node] = Some(ms.rem_euclid(1000));
            }
        }
    }
    // A scrape stamped at phase p of second k reads second k if the page's seconds are shifted by
    // a little less than p (and at most the collector's half second): both stay inside the second.
    let t0 = (chrono::Utc::now().timestamp_millis() / 10_000 + 2) * 10_000;
    {
        let mut c = clock.lock().unwrap();
        for (n, p) in phases.iter().enumerate() {
            c.shift_ms[n] = p.unwrap().min(500) - 100;
        }
        c.t0_ms = Some(t0);
    }
    let month = chrono::DateTime::from_timestamp_millis(t0)
        .unwrap()
        .format("%Y-%m")
        .to_string();
    let month_start = format!("{month}-01T00:00:00Z");

    // (a) Live: a collector per node reading its exporter.
    let live = TestApp::spawn().await;
    prepare(&live, &month_start).await;
    let live_served = live.serve(served_config()).await;
    let spool = tempfile::tempdir().unwrap();
    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let mut collectors = Vec::new();
    for (n, node) in ["gpu-node-1", "gpu-node-2"].iter().enumerate() {
        let token = live.token(Role::Collector, None, Some(node)).await;
        let mut c = Command::new(env!("CARGO_BIN_EXE_slicemeter"));
        c.args(["collect", "--source", "dcgm", "--node", node])
            .args([
                "--dcgm-url",
                &format!("http://{exporter_addr}/node{}/metrics", n + 1),
            ])
            .args(["--sample-interval", "1s", "--window", "10s"])
            .args(["--gpu-sharing", if n == 1 { "timeslice:2" } else { "none" }])
            .arg("--spool-dir")
            .arg(spool.path().join(node))
            .args(["--server", &live_served.base])
            .env("SLICEMETER_TOKEN", &token)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if n == 0 {
            c.args(["--metrics-listen", &metrics_addr]);
        }
        collectors.push(c.spawn().unwrap());
    }
    let end = t0 + (SPAN + 3) * 1000;
    tokio::time::sleep(Duration::from_millis(
        (end - chrono::Utc::now().timestamp_millis()).max(0) as u64,
    ))
    .await;
    let collector_page = http
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for c in &collectors {
        kill(Pid::from_raw(c.id() as i32), Signal::SIGINT).unwrap();
    }
    for mut c in collectors {
        let status = tokio::task::spawn_blocking(move || c.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "{status}");
    }
    let want: Vec<(String, Decimal)> = expected_bill()
        .into_iter()
        .map(|(t, c)| (t.to_owned(), c))
        .collect();
    assert_eq!(team_costs(&live, &month).await, want, "live collection");
    // Every hostile series was refused and counted, by its reason.
    for reason in ["bad_value", "bad_label", "no_model"] {
        let line = collector_page
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "slicemeter_collector_dcgm_refused_total{{reason=\"{reason}\"}}"
                ))
            })
            .unwrap_or_else(|| panic!("no {reason} counter:\n{collector_page}"));
        let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(n >= 1.0, "{line}");
    }
    // The gap is neither held nor present: node 1's GPUs were present 36 of the 40 seconds.
    let present: Vec<(String, i64)> = sqlx::query_as(
        "select g.gpu_uuid, sum(extract(epoch from p.period_end - p.period_start))::int8
         from gpu_presence p join gpu g using (gpu_id) group by 1 order by 1",
    )
    .fetch_all(&live.pool)
    .await
    .unwrap();
    assert_eq!(
        present,
        [
            (H100.to_owned(), 36),
            (H200.to_owned(), 40),
            (L40S.to_owned(), 36),
            (A100.to_owned(), 36)
        ]
    );

    // (b) A back-fill of the same time from what Prometheus scraped, into a server of its own.
    let backfill = TestApp::spawn().await;
    prepare(&backfill, &month_start).await;
    let backfill_served = backfill.serve(served_config()).await;
    let (from, to) = (t0 - 10_000, t0 + (SPAN + 10) * 1000);
    let state = data.path().join("import.state.json");
    let importer = backfill.token(Role::Importer, None, None).await;
    // A dry run first: what it would store, and the month's cost; nothing is sent.
    let out = import_with(
        &backfill_served.base,
        &importer,
        &prometheus.url,
        (from, to),
        &state,
        &[&TIMELINE_IMPORT[..], &["--dry-run"]].concat(),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The H100, A100 and L40S were present 36 s (the gap left out), the H200 40 s: 36 x 1 + 36 x 2
    // + 40 x 1 USD, and the L40S at the default 1 USD an hour, 0.01.
    assert!(
        said.contains(&format!("{month}: 4 GPUs, ")) && said.contains("fleet cost 148.01 USD"),
        "{said}"
    );
    assert_eq!(presence_rows(&backfill).await, 0, "a dry run sends nothing");
    let out = import(
        &backfill_served.base,
        &importer,
        &prometheus.url,
        from,
        to,
        &state,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("bad_value: "), "{said}");
    assert_eq!(team_costs(&backfill, &month).await, want, "back-filled");
    assert_eq!(
        stored(&backfill).await,
        stored(&live).await,
        "the same windows and presence as live collection"
    );

    // (b) again with its state file: every chunk was done, none is read again.
    let out = import(
        &backfill_served.base,
        &importer,
        &prometheus.url,
        from,
        to,
        &state,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("chunks were imported before")
            && String::from_utf8_lossy(&out.stdout).contains("0 windows sent, 0 stored"),
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );

    // (b) again, the state file gone: the server says what it has, and nothing is sent twice.
    std::fs::remove_file(&state).unwrap();
    let before = (stored(&backfill).await, presence_rows(&backfill).await);
    let out = import(
        &backfill_served.base,
        &importer,
        &prometheus.url,
        from,
        to,
        &state,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 windows sent, 0 stored"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        (stored(&backfill).await, presence_rows(&backfill).await),
        before
    );

    // (b) after (a): importing what live collection stored stores nothing new.
    let before = (stored(&live).await, presence_rows(&live).await);
    let out = import(
        &live_served.base,
        &live.admin,
        &prometheus.url,
        from,
        to,
        &data.path().join("live.state.json"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!((stored(&live).await, presence_rows(&live).await), before);
    assert_eq!(team_costs(&live, &month).await, want);

    live_served.stop().await;
    backfill_served.stop().await;
    drop(prometheus);
}

/// A Prometheus that answers badly, one way per path prefix: `/<mode>/api/v1/...`.
async fn bad_prometheus(Path(mode): Path<String>) -> axum::response::Response {
    let series = |value: &str| {
        format!(
            r#"{{"status":"success","data":{{"resultType":"matrix","result":[{{"metric":{{"__name__":"DCGM_FI_DEV_FB_USED","UUID":"GPU-1","modelName":"NVIDIA H200","Hostname":"gpu-node-1","pod":"p","namespace":"nlp"}},"values":[[1793887980,"{value}"]]}}]}}}}"#
        )
    };
    match mode.as_str() {
        "error" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"status":"error","errorType":"internal","error":"storage is on fire"}"#,
        )
            .into_response(),
        "refused" => (
            StatusCode::BAD_REQUEST,
            r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": parse error"}"#,
        )
            .into_response(),
        "hang" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            series("1").into_response()
        }
        "truncated" => series("1")[..120].to_owned().into_response(),
        "garbage" => "<html>proxy error</html>".into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn labels() -> &'static str {
    r#"{"status":"success","data":["UUID","__name__","pod"]}"#
}

/// A Prometheus that answers 500, 400, hangs, cuts its answer short or answers HTML: each is an error
/// that names the query, and nothing of the chunk is stored.
#[tokio::test(flavor = "multi_thread")]
async fn a_prometheus_that_answers_badly_is_an_error_naming_the_query_and_nothing_is_stored() {
    let fake = axum::Router::new()
        .route("/{mode}/api/v1/query", axum::routing::get(bad_prometheus))
        .route("/{mode}/api/v1/labels", axum::routing::get(labels));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, fake).await });
    let app = TestApp::spawn().await;
    let served = app.serve(served_config()).await;
    let state = tempfile::tempdir().unwrap();
    for (mode, says) in [
        (
            "error",
            "HTTP 500 Internal Server Error: storage is on fire (internal)",
        ),
        (
            "refused",
            "HTTP 400 Bad Request: invalid parameter \"query\": parse error (bad_data)",
        ),
        ("hang", "no answer in time"),
        ("truncated", "the answer is not whole JSON"),
        ("garbage", "the answer is not whole JSON"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_slicemeter"))
            .args([
                "import",
                "prometheus",
                "--url",
                &format!("http://{addr}/{mode}"),
            ])
            .args(["--from", "2026-10-01", "--to", "2026-10-02"])
            .args([
                "--server",
                &served.base,
                "--retries",
                "0",
                "--query-timeout",
                "2s",
            ])
            .arg("--state")
            .arg(state.path().join(mode))
            .env("SLICEMETER_TOKEN", &app.admin)
            .env("RUST_LOG", "off")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{mode}: {stderr}");
        assert!(
            stderr.contains(
                "Prometheus' answer to {__name__=~\"(?i)DCGM_FI_DEV_FB_USED|DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_DEV_GPU_UTIL\"}[3600000ms] at 2026-10-01T00:59:59.999+00:00"
            ) && stderr.contains(says),
            "{mode}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{mode}: {stderr}");
    }
    assert_eq!(presence_rows(&app).await, 0);
    assert_eq!(app.count("select count(*) from gpu").await, 0);
    served.stop().await;
}

/// Blocks written with `promtool` carry no staleness markers: a series that stops is, to a
/// `query_range`, still there for Prometheus' 5-minute look-back. The import reads raw samples, so a
/// pod seen in the scrapes of minutes 0 to 9 held its slice for 10 minutes, not 15.
#[tokio::test(flavor = "multi_thread")]
async fn a_series_from_promtool_blocks_is_held_to_its_last_sample_plus_one_interval_not_the_look_back()
 {
    let month = slicemeter::domain::time::Month::of(chrono::Utc::now()).minus(1);
    let start = month.start().timestamp();
    let mut text = String::new();
    ExporterPage::openmetrics_head(&mut text, "DCGM_FI_DEV_FB_USED");
    let held = Held {
        node: 0,
        device: Dev::Gi(9),
        ns: "cv",
        pod: "infer-0",
        from: 0,
        to: 10,
    };
    for minute in 0..10 {
        ExporterPage {
            hostname_label: "hostname",
            hostname: "gpu-node-1".into(),
            virtual_gpus: false,
            gpus: vec![ExporterGpu {
                index: 0,
                uuid: H100.into(),
                model: "NVIDIA H100 80GB HBM3".into(),
                device: ExporterDevice::default(),
                instances: vec![ExporterInstance {
                    gpu_instance_id: 9,
                    profile: "1g.10gb".into(),
                    device: ExporterDevice {
                        fb_used_mib: 4_096,
                        fb_free_mib: 5_888,
                        engine_active: 0.5,
                        consumers: vec![pod(&held, None, None)],
                    },
                }],
            }],
        }
        .openmetrics_samples(&mut text, "DCGM_FI_DEV_FB_USED", start + minute * 60);
    }
    text.push_str("# EOF\n");
    let data = tempfile::tempdir().unwrap();
    let storage = data.path().join("prometheus");
    std::fs::create_dir_all(&storage).unwrap();
    let file = data.path().join("in.om");
    std::fs::write(&file, text).unwrap();
    let promtool = slicemeter::sim::prometheus::binary("promtool").unwrap();
    let out = Command::new(promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&file)
        .arg(&storage)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let prometheus = tokio::task::spawn_blocking(move || {
        LocalPrometheus::start(&storage, &[], Duration::from_secs(60))
    })
    .await
    .unwrap()
    .unwrap();
    // What `query_range` would say: the series still there five minutes after its last sample.
    let http = reqwest::Client::new();
    let r: Value = http
        .get(format!("{}/api/v1/query", prometheus.url))
        .query(&[
            ("query", "DCGM_FI_DEV_FB_USED".to_owned()),
            ("time", (start + 9 * 60 + 240).to_string()),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["data"]["result"].as_array().unwrap().len(), 1, "{r}");

    let app = TestApp::spawn().await;
    let served = app.serve(served_config()).await;
    let importer = app.token(Role::Importer, None, None).await;
    let out = import_with(
        &served.base,
        &importer,
        &prometheus.url,
        (start * 1000, (start + 3600) * 1000),
        &data.path().join("state.json"),
        &["--window", "60s"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("every 60000 ms"),
        "the scrape interval is read from the samples: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        app.count("select sum(held_seconds)::int8 from occupancy")
            .await,
        600
    );
    assert_eq!(
        app.count(
            "select sum(extract(epoch from period_end - period_start))::int8 from gpu_presence"
        )
        .await,
        600
    );
    served.stop().await;
}

/// A Prometheus behind a proxy that wants a bearer token or basic auth.
async fn guarded(headers: axum::http::HeaderMap) -> axum::response::Response {
    let ok = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            // `reader:pa ss` in base64.
            v == "Bearer s3cret" || v == "Basic cmVhZGVyOnBhIHNz"
        });
    if ok {
        r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#.into_response()
    } else {
        (StatusCode::UNAUTHORIZED, "Unauthorized").into_response()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_query_api_is_read_with_a_bearer_token_or_basic_auth() {
    let fake = axum::Router::new()
        .route("/api/v1/query", axum::routing::get(guarded))
        .route("/api/v1/labels", axum::routing::get(labels));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, fake).await });
    let app = TestApp::spawn().await;
    let served = app.serve(served_config()).await;
    let importer = app.token(Role::Importer, None, None).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("password"), "pa ss\n").unwrap();
    let password_file = dir.path().join("password");
    let run = |more: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_slicemeter"))
            .args(["import", "prometheus", "--url", &format!("http://{addr}")])
            .args(["--from", "2026-10-01", "--to", "2026-10-01T02:00:00Z"])
            .args(["--server", &served.base, "--retries", "0"])
            .arg("--state")
            .arg(dir.path().join("state.json"))
            .args(more)
            .env("SLICEMETER_TOKEN", &importer)
            .env("RUST_LOG", "off")
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("HTTP 401 Unauthorized: Unauthorized"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["--prometheus-token", "s3cret"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(dir.path().join("state.json")).unwrap();
    let out = run(&[
        "--prometheus-user",
        "reader",
        "--prometheus-password-file",
        password_file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 windows sent"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    served.stop().await;
}
