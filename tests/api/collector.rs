//! `slicemeter collect` as a process, against a server on loopback.

use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use slicemeter::auth::Role;
use slicemeter::http::ServerConfig;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_collector_started_before_its_server_retries_until_its_windows_are_stored() {
    let app = TestApp::spawn().await;
    let token = app.token(Role::Collector, None, Some("gpu-node-02")).await;
    let spool = tempfile::tempdir().unwrap();
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
        .args(["--sample-interval", "100ms", "--window", "1s"])
        .arg("--spool-dir")
        .arg(spool.path())
        .arg("--server")
        .arg(format!("http://127.0.0.1:{port}"))
        .env("SLICEMETER_TOKEN", &token)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(app.count("select count(*) from gpu_presence").await, 0);

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(slicemeter::server::serve(
        app.pool.clone(),
        listener,
        ServerConfig::default(),
        async move {
            let _ = stopped.changed().await;
        },
    ));
    tokio::time::sleep(Duration::from_secs(4)).await;
    kill(Pid::from_raw(collector.id() as i32), Signal::SIGINT).unwrap();
    let status = tokio::task::spawn_blocking(move || collector.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    stop.send(true).unwrap();
    server.await.unwrap().unwrap();

    // Every second since the collector started is a batch: the ones that waited for the server too.
    let periods = app
        .count("select count(distinct period_start) from gpu_presence")
        .await;
    assert!(periods >= 6, "{periods} periods stored");
    let gaps = app
        .count(
            "select count(*) from (select period_start, lag(period_end) over (order by period_start) prev
                                    from (select distinct period_start, period_end from gpu_presence) p) x
             where prev is not null and prev <> period_start",
        )
        .await;
    assert_eq!(gaps, 0, "the periods tile the time the collector ran");
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
