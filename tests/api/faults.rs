//! Faults, with real processes on loopback: a collector killed with SIGKILL mid-batch, a server killed
//! mid-ingest, PostgreSQL restarted during a stream. After each, the stored windows are exactly the
//! windows generated (count and sums): none missing, none doubled.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use rust_decimal::Decimal;
use slicemeter::collector::{Cadence, Replay};
use slicemeter::db::cluster::PrivateCluster;
use slicemeter::domain::access::Role;
use slicemeter::sim::SimFleet;
use slicemeter::sim::source::SimSource;
use sqlx::PgPool;

use crate::support::*;

const NODE: &str = "gpu-node-01";
const FROM: &str = "2026-09-01T00:00:00Z";
const TO: &str = "2026-09-01T12:00:00Z";

/// Count and sums of what the collector's replay generates: computed here the same way.
fn generated() -> (i64, Decimal, Decimal) {
    generate().1
}

/// The number of batches the collector's replay makes, and [`generated`].
fn generate() -> (usize, (i64, Decimal, Decimal)) {
    let fleet = SimFleet::generate(5, 8);
    let cadence = Cadence {
        sample_interval: Duration::from_secs(30),
        window: Duration::from_secs(60),
        batch_period: Duration::from_secs(600),
    };
    let (from, to) = (FROM.parse().unwrap(), TO.parse().unwrap());
    let mut r = Replay::new(SimSource::new(&fleet, NODE).unwrap(), cadence, from, to).unwrap();
    let batches = r.advance(to).unwrap();
    let dec = |f: f64| Decimal::from_str(&f.to_string()).unwrap();
    let windows: Vec<_> = batches.iter().flat_map(|b| &b.windows).collect();
    (
        batches.len(),
        (
            windows.len() as i64,
            windows.iter().map(|w| dec(w.held_seconds)).sum(),
            windows.iter().map(|w| dec(w.memory_byte_seconds)).sum(),
        ),
    )
}

async fn stored(pool: &PgPool) -> (i64, Decimal, Decimal) {
    sqlx::query_as("select count(*), coalesce(sum(held_seconds), 0), coalesce(sum(memory_byte_seconds), 0) from occupancy")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn wait_for_windows(pool: &PgPool, at_least: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while stored(pool).await.0 < at_least {
        assert!(Instant::now() < deadline, "no windows arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process that is killed (SIGKILL) and reaped when the test lets go of it, even on a
/// failed assertion: an orphaned server would hold the test's output open.
struct Proc(Child);

impl Proc {
    fn kill9(&mut self) {
        self.0.kill().ok(); // SIGKILL
        self.0.wait().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn server(database_url: &str, port: u16) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_slicemeter"))
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--ingest-rate",
                "0",
            ])
            .env("DATABASE_URL", database_url)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

async fn wait_ready(port: u16) {
    let client = reqwest::Client::new();
    for _ in 0..200 {
        if client
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server did not become ready");
}

/// `slicemeter collect` replaying the node's twelve hours into its spool and shipping them.
fn collector(port: u16, token: &str, spool: &Path, extra: &[&str]) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_slicemeter"))
            .args([
                "collect", "--source", "sim", "--node", NODE, "--seed", "5", "--gpus", "8",
            ])
            .args([
                "--sample-interval",
                "30s",
                "--window",
                "60s",
                "--replay-batch-period",
                "10m",
            ])
            .args(["--replay-from", FROM, "--replay-to", TO])
            .args(extra)
            .arg("--spool-dir")
            .arg(spool)
            .args(["--server", &format!("http://127.0.0.1:{port}")])
            .env("SLICEMETER_TOKEN", token)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Waits for the process to exit on its own, within two minutes, and asserts it succeeded.
async fn finishes(mut child: Proc) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            return;
        }
        assert!(Instant::now() < deadline, "the process did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops the private cluster when the test lets go of it.
struct Cluster(PrivateCluster);

impl Drop for Cluster {
    fn drop(&mut self) {
        self.0.stop().ok();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_collector_killed_mid_batch_and_restarted_stores_exactly_what_was_generated() {
    let app = TestApp::spawn().await;
    let token = app.token(Role::Collector, None, Some(NODE)).await;
    let port = free_port();
    let mut srv = server(&app.database_url, port);
    wait_ready(port).await;
    let spool = tempfile::tempdir().unwrap();
    let mut first = collector(port, &token, spool.path(), &[]);
    wait_for_windows(&app.pool, 1).await;
    first.kill9();
    let partial = stored(&app.pool).await.0;
    finishes(collector(port, &token, spool.path(), &[])).await;
    let want = generated();
    assert!(
        partial < want.0,
        "the kill came mid-stream ({partial} of {} windows)",
        want.0
    );
    assert_eq!(stored(&app.pool).await, want);
    srv.kill9();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spool_filled_while_the_server_was_away_ships_after_a_kill_and_a_restart() {
    let app = TestApp::spawn().await;
    let token = app.token(Role::Collector, None, Some(NODE)).await;
    let port = free_port();
    let spool = tempfile::tempdir().unwrap();
    let (want_batches, want) = generate();
    // No server: everything goes to the spool, then the collector is killed.
    let mut c = collector(port, &token, spool.path(), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(spool.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".batch.gz")
        })
        .count()
        < want_batches
    {
        assert!(
            Instant::now() < deadline,
            "the replay did not spool its {want_batches} batches"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.kill9();
    assert_eq!(stored(&app.pool).await.0, 0);
    let mut srv = server(&app.database_url, port);
    wait_ready(port).await;
    // Restarted only to ship: the spool alone brings every window.
    let drain = Proc(
        Command::new(env!("CARGO_BIN_EXE_slicemeter"))
            .args([
                "collect",
                "--drain",
                "--node",
                NODE,
                "--server",
                &format!("http://127.0.0.1:{port}"),
            ])
            .arg("--spool-dir")
            .arg(spool.path())
            .env("SLICEMETER_TOKEN", &token)
            .env("RUST_LOG", "error")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    finishes(drain).await;
    assert_eq!(stored(&app.pool).await, want);
    assert_eq!(
        std::fs::read_dir(spool.path()).unwrap().count(),
        1,
        "only the (empty) rejected folder is left"
    );
    srv.kill9();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_mid_ingest_loses_and_doubles_nothing() {
    let app = TestApp::spawn().await;
    let token = app.token(Role::Collector, None, Some(NODE)).await;
    let port = free_port();
    let mut srv = server(&app.database_url, port);
    wait_ready(port).await;
    let spool = tempfile::tempdir().unwrap();
    let c = collector(port, &token, spool.path(), &[]);
    wait_for_windows(&app.pool, 1).await;
    srv.kill9();
    let partial = stored(&app.pool).await.0;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _srv = server(&app.database_url, port);
    finishes(c).await;
    let want = generated();
    assert!(
        partial < want.0,
        "the kill came mid-stream ({partial} of {} windows)",
        want.0
    );
    assert_eq!(stored(&app.pool).await, want);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgresql_restart_during_a_stream_loses_and_doubles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cluster = tokio::task::spawn_blocking({
        let root = dir.path().join("pg");
        move || PrivateCluster::start(&root).map(Cluster)
    })
    .await
    .unwrap()
    .unwrap();
    slicemeter::db::cluster::ensure_database(&cluster.0.url("postgres"), "faults")
        .await
        .unwrap();
    let url = cluster.0.url("faults");
    let pool = slicemeter::db::connect(&url, 2).await.unwrap();
    slicemeter::db::migrate(&pool).await.unwrap();
    let (_, token) = slicemeter::auth::store::create(
        &pool,
        Role::Collector,
        None,
        Some(NODE),
        None,
        None,
        &slicemeter::domain::access::Actor::CLI,
    )
    .await
    .unwrap();
    let port = free_port();
    let mut srv = server(&url, port);
    wait_ready(port).await;
    let spool = tempfile::tempdir().unwrap();
    let c = collector(port, &token, spool.path(), &[]);
    wait_for_windows(&pool, 1).await;

    // Stop PostgreSQL; while it is away the server says it is not ready, and ingest waits.
    cluster = tokio::task::spawn_blocking(move || cluster.0.stop().map(|()| cluster))
        .await
        .unwrap()
        .unwrap();
    let readyz = reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
        .await
        .unwrap();
    assert_eq!(readyz.status(), 503);
    assert!(readyz.headers().contains_key("retry-after"));
    let ingest = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/ingest"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(ingest.status(), 503, "{:?}", ingest.text().await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster = tokio::task::spawn_blocking(move || cluster.0.start_again().map(|()| cluster))
        .await
        .unwrap()
        .unwrap();
    finishes(c).await;
    let pool = slicemeter::db::connect(&url, 2).await.unwrap();
    assert_eq!(stored(&pool).await, generated());
    pool.close().await;
    srv.kill9();
    drop(cluster);
}

fn spooled(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".batch.gz")
        })
        .count()
}

fn drain(port: u16, token: &str, spool: &Path, extra: &[&str]) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_slicemeter"))
            .args(["collect", "--drain", "--node", NODE])
            .args(["--server", &format!("http://127.0.0.1:{port}")])
            .args(extra)
            .arg("--spool-dir")
            .arg(spool)
            .env("SLICEMETER_TOKEN", token)
            .env("RUST_LOG", "error")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_collector_with_a_wrong_token_keeps_every_batch_until_the_token_is_fixed() {
    let app = TestApp::spawn().await;
    let token = app.token(Role::Collector, None, Some(NODE)).await;
    let wrong = format!("smt_999999_{}", "0".repeat(64));
    let port = free_port();
    let mut srv = server(&app.database_url, port);
    wait_ready(port).await;
    let spool = tempfile::tempdir().unwrap();
    let (want_batches, want) = generate();
    // Every batch is answered 401: none may be set aside, all stay spooled and retried.
    let mut c = collector(port, &wrong, spool.path(), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while spooled(spool.path()) < want_batches {
        assert!(Instant::now() < deadline, "the replay did not spool");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Long enough for a few refusals and retries.
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.kill9();
    assert_eq!(stored(&app.pool).await.0, 0);
    assert_eq!(spooled(spool.path()), want_batches, "nothing lost");
    assert_eq!(
        std::fs::read_dir(spool.path().join("rejected"))
            .unwrap()
            .count(),
        0,
        "nothing set aside for a wrong token"
    );
    // The operator fixes the token: everything ships, once.
    finishes(drain(port, &token, spool.path(), &[])).await;
    assert_eq!(stored(&app.pool).await, want);
    srv.kill9();
}

#[tokio::test(flavor = "multi_thread")]
async fn set_aside_batches_are_shipped_again_with_resend_rejected() {
    let app = TestApp::spawn().await;
    let token = app.token(Role::Collector, None, Some(NODE)).await;
    let port = free_port();
    let spool = tempfile::tempdir().unwrap();
    let (want_batches, want) = generate();
    // Spool everything with no server, then set some of it aside as if refused.
    let mut c = collector(port, &token, spool.path(), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while spooled(spool.path()) < want_batches {
        assert!(Instant::now() < deadline, "the replay did not spool");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.kill9();
    let mut files: Vec<_> = std::fs::read_dir(spool.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".batch.gz"))
        .collect();
    files.sort();
    for f in &files[..5] {
        std::fs::rename(
            f,
            spool.path().join("rejected").join(f.file_name().unwrap()),
        )
        .unwrap();
    }
    let mut srv = server(&app.database_url, port);
    wait_ready(port).await;
    finishes(drain(port, &token, spool.path(), &[])).await;
    assert!(
        stored(&app.pool).await.0 < want.0,
        "five batches were set aside"
    );
    finishes(drain(port, &token, spool.path(), &["--resend-rejected"])).await;
    assert_eq!(stored(&app.pool).await, want);
    assert_eq!(
        std::fs::read_dir(spool.path().join("rejected"))
            .unwrap()
            .count(),
        0
    );
    srv.kill9();
}

/// The server's pool stops any statement at its statement timeout (so a query whose request was
/// cut off stops too), answered 503 `timeout`; an export's transaction lifts it for itself alone.
#[tokio::test]
async fn a_request_pool_stops_long_statements_and_an_export_lifts_that_for_itself_only() {
    use slicemeter::http::error::{ApiError, ErrorCode};
    let app = TestApp::spawn().await;
    let pool =
        slicemeter::db::connect_for_requests(&app.database_url, 1, Duration::from_millis(200))
            .await
            .unwrap();
    let started = Instant::now();
    let e = sqlx::query("select pg_sleep(2)")
        .execute(&pool)
        .await
        .expect_err("stopped by the statement timeout");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    let api = ApiError::from(e);
    assert_eq!(api.code, ErrorCode::Timeout);
    assert_eq!(
        api.code.status(),
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(api.message.contains("time limit"), "{}", api.message);

    let mut tx = pool.begin().await.unwrap();
    slicemeter::db::without_statement_timeout(&mut tx)
        .await
        .unwrap();
    sqlx::query("select pg_sleep(0.4)")
        .execute(&mut *tx)
        .await
        .expect("no timeout inside the export's transaction");
    tx.commit().await.unwrap();
    // The same (only) connection has its timeout back.
    assert!(
        sqlx::query("select pg_sleep(0.4)")
            .execute(&pool)
            .await
            .is_err()
    );
}

/// A client that goes away stops its query: the server's request pool closes a connection returned
/// mid-statement instead of waiting the statement out, and PostgreSQL, checking its clients every
/// second, stops the statement then. Here the request's token lookup waits on a lock the test holds;
/// the client hangs up; the waiting statement is gone long before its statement timeout (54 s),
/// while the lock is still held, and the server goes on answering.
#[tokio::test]
async fn a_query_stops_when_its_client_goes_away() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn().await;
    let config = test_config();
    let pool =
        slicemeter::db::connect_for_requests(&app.database_url, 4, config.statement_timeout())
            .await
            .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let served = Served::with_pool(pool, listener, config);
    let addr = served.addr.clone();
    let request = format!(
        "GET /v1/teams HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\r\n",
        app.admin
    );
    let waiting = || {
        app.count(
            "select count(*) from pg_stat_activity where datname = current_database() \
             and wait_event_type = 'Lock' and query like '%api_token%'",
        )
    };

    let mut lock = app.pool.begin().await.unwrap();
    sqlx::query("lock table api_token in access exclusive mode")
        .execute(&mut *lock)
        .await
        .unwrap();
    let mut client = tokio::net::TcpStream::connect(&addr).await.unwrap();
    client.write_all(request.as_bytes()).await.unwrap();
    let started = Instant::now();
    while waiting().await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the request's token lookup never waited on the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(client);
    let hung_up = Instant::now();
    while waiting().await > 0 {
        assert!(
            hung_up.elapsed() < Duration::from_secs(10),
            "the statement of a request whose client went away still runs after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "statement stopped {:?} after the client hung up",
        hung_up.elapsed()
    );
    lock.rollback().await.unwrap();

    // The pool is whole: the next request is answered.
    let mut client = tokio::net::TcpStream::connect(&addr).await.unwrap();
    client
        .write_all(
            request
                .replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut reply = String::new();
    client.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    served.stop().await;
}
