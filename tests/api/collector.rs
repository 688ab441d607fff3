//! `slicemeter collect` as a process, against a server on loopback.

use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use slicemeter::domain::access::Role;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_collector_started_before_its_server_retries_until_its_windows_are_stored() {
    let app = TestApp::spawn().await;
    let token = app.token(Role::Collector, None, Some("gpu-node-02")).await;
    let spool = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("collector.log");
    // Reserve a port, then leave it closed for a while: the collector's first posts fail.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut collector = Command::new(env!("CARGO_BIN_EXE_slicemeter"))
        .args([
            "collect",
            "--source",
            "sim",
            "--node",
            "gpu-node-02",
            "--seed",
            "3",
            "--gpus",
            "8",
        ])
        .args(["--sample-interval", "250ms", "--window", "1s"])
        .arg("--spool-dir")
        .arg(spool.path())
        .arg("--server")
        .arg(format!("http://127.0.0.1:{port}"))
        .env("SLICEMETER_TOKEN", &token)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(app.count("select count(*) from gpu_presence").await, 0);

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let served = Served::on(&app, listener, test_config());
    tokio::time::sleep(Duration::from_secs(4)).await;
    kill(Pid::from_raw(collector.id() as i32), Signal::SIGINT).unwrap();
    let status = tokio::task::spawn_blocking(move || collector.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    served.stop().await;

    // Every second since the collector started is a batch: the ones that waited for the server too.
    let periods = app
        .count("select count(distinct period_start) from gpu_presence")
        .await;
    assert!(periods >= 6, "{periods} periods stored");
    // A sample holds for two intervals (500 ms). A collector starved of the CPU longer than that
    // (the server in this process catching up on the backlog, on CI's 2 cores) leaves the stretch
    // out, by design (`Integrator`), and says so with its length: every gap between the stored
    // periods is one the collector logged (a late sample just before it stopped is logged too,
    // with no period after it).
    let gaps: Vec<i64> = sqlx::query_scalar(
        "select (extract(epoch from period_start - prev) * 1000)::int8
         from (select period_start, lag(period_end) over (order by period_start) prev
               from (select distinct period_start, period_end from gpu_presence) p) x
         where prev is not null and prev <> period_start",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let log = std::fs::read_to_string(&log).unwrap();
    let logged: Vec<i64> = log
        .lines()
        .filter(|l| l.contains("The sampler was late"))
        .filter_map(|l| {
            l.split("unobserved_ms=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    for gap in &gaps {
        assert!(
            logged.contains(gap),
            "a gap of {gap} ms between periods that the collector did not log as unobserved:\n{log}"
        );
    }
    assert!(app.count("select count(*) from occupancy").await > 0);
    assert_eq!(
        app.count(
            "select count(*) from occupancy where window_end - window_start > interval '1 second'"
        )
        .await,
        0
    );
    // All of node 2's GPUs, and nobody else's.
    assert_eq!(app.count("select count(distinct node) from gpu").await, 1);
    assert_eq!(app.count("select count(*) from gpu").await, 4);
}

/// A collector that stops running for a while (starved, or here stopped with SIGSTOP) leaves that
/// stretch out of its windows and says so, and a dry run ends cleanly on Ctrl-C.
#[test]
fn a_stalled_collector_logs_the_stretch_it_did_not_observe_and_a_dry_run_stops_on_ctrl_c() {
    let logs = tempfile::tempdir().unwrap();
    let (out, err) = (logs.path().join("out.json"), logs.path().join("err.log"));
    let mut collector = Command::new(env!("CARGO_BIN_EXE_slicemeter"))
        .args(["collect", "--source", "sim", "--node", "gpu-node-02"])
        .args(["--gpus", "8", "--seed", "3", "--dry-run"])
        .args(["--sample-interval", "250ms", "--window", "1s"])
        .env("RUST_LOG", "warn")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(collector.id() as i32);
    std::thread::sleep(Duration::from_millis(2200));
    kill(pid, Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    kill(pid, Signal::SIGCONT).unwrap();
    std::thread::sleep(Duration::from_millis(2200));
    kill(pid, Signal::SIGINT).unwrap();
    let status = collector.wait().unwrap();
    let err = std::fs::read_to_string(&err).unwrap();
    assert!(status.success(), "{status}: {err}");

    // The printed batches' periods, in order: one gap, as long as the log says.
    let out = std::fs::read_to_string(&out).unwrap();
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&out)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let periods: Vec<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> = docs
        .iter()
        .filter_map(|d| d.get("period"))
        .map(|p| {
            (
                p["start"].as_str().unwrap().parse().unwrap(),
                p["end"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    assert!(periods.len() >= 5, "{periods:?}");
    let gaps: Vec<i64> = periods
        .windows(2)
        .map(|w| (w[1].0 - w[0].1).num_milliseconds())
        .filter(|ms| *ms != 0)
        .collect();
    // The 2 s stop, less the 500 ms a sample holds, is one gap; a collector starved on a busy
    // machine may leave short ones too, but every gap is one it logged, with its length.
    let long: Vec<&i64> = gaps.iter().filter(|ms| **ms > 1000).collect();
    assert_eq!(long.len(), 1, "one long stretch unobserved: {periods:?}");
    let logged: Vec<i64> = err
        .lines()
        .filter(|l| l.contains("The sampler was late"))
        .filter_map(|l| {
            l.split("unobserved_ms=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(!logged.is_empty(), "{err}");
    for gap in &gaps {
        assert!(
            logged.contains(gap),
            "a gap of {gap} ms that the collector did not log (it logged {logged:?}): {err}"
        );
    }
}

/// The sum of every series of `name` in a Prometheus text page (`None`: no such series).
fn metric(page: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = page
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Polls the collector's `/metrics` until `done` holds for the page, for at most 30 s.
async fn metrics_until(addr: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = reqwest::get(format!("http://{addr}/metrics")).await {
            assert_eq!(r.status(), 200);
            let page = r.text().await.unwrap();
            if done(&page) {
                return page;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the collector's metrics never showed {what}:\n{page}"
            );
        } else {
            assert!(
                std::time::Instant::now() < deadline,
                "the collector never served /metrics on {addr}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_collector_serves_its_spool_and_shipping_counters_on_its_metrics_address() {
    let app = TestApp::spawn().await;
    let token = app.token(Role::Collector, None, Some("gpu-node-03")).await;
    let spool = tempfile::tempdir().unwrap();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (server_addr, metrics_addr) = (free(), free().to_string());
    let collector = Command::new(env!("CARGO_BIN_EXE_slicemeter"))
        .args(["collect", "--source", "sim", "--node", "gpu-node-03"])
        .args(["--seed", "3", "--gpus", "12"])
        .args(["--sample-interval", "100ms", "--window", "1s"])
        .args(["--metrics-listen", &metrics_addr])
        .arg("--spool-dir")
        .arg(spool.path())
        .arg("--server")
        .arg(format!("http://{server_addr}"))
        .env("SLICEMETER_TOKEN", &token)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(collector.id() as i32);
    // The server is not up yet: batches wait in the spool, and the page says so.
    let page = metrics_until(&metrics_addr, "two spooled batches and a retry", |p| {
        metric(p, "slicemeter_collector_spool_batches").is_some_and(|n| n >= 2.0)
            && metric(p, "slicemeter_collector_retries_total").is_some_and(|n| n >= 1.0)
    })
    .await;
    assert!(metric(&page, "slicemeter_collector_spool_bytes").unwrap() > 0.0);
    assert_eq!(
        metric(&page, "slicemeter_collector_windows_shipped_total").unwrap_or(0.0),
        0.0
    );
    assert_eq!(app.count("select count(*) from occupancy").await, 0);

    // Once the server is up the spool empties, and what was shipped is what the server stored.
    let listener = tokio::net::TcpListener::bind(server_addr).await.unwrap();
    let served = Served::on(&app, listener, test_config());
    let page = metrics_until(&metrics_addr, "an empty spool after shipping", |p| {
        metric(p, "slicemeter_collector_spool_batches") == Some(0.0)
            && metric(p, "slicemeter_collector_windows_shipped_total").is_some_and(|n| n > 0.0)
    })
    .await;
    let shipped = metric(&page, "slicemeter_collector_windows_shipped_total").unwrap();
    assert_eq!(metric(&page, "slicemeter_collector_spool_bytes"), Some(0.0));
    kill(pid, Signal::SIGINT).unwrap();
    let mut collector = collector;
    let status = tokio::task::spawn_blocking(move || collector.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    // The page was read before the last batches went out: at least that many windows are stored.
    let stored = app.count("select count(*) from occupancy").await as f64;
    assert!(
        stored >= shipped,
        "{shipped} windows shipped, {stored} stored"
    );
    served.stop().await;
}
