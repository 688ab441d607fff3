//! `ingest`: simulated batches posted through the real HTTP ingest on loopback and, in the same run,
//! the same rows `COPY`'d into a scratch copy of the table: the floor that ingest's validation,
//! idempotency and rollups are measured against.

use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt};
use slicemeter::auth::store as tokens;
use slicemeter::collector::Cadence;
use slicemeter::collector::shipper::Shipper;
use slicemeter::db;
use slicemeter::domain::access::{Actor, Role};
use slicemeter::domain::batch::Batch;
use slicemeter::domain::time::{floor_hour, months_touched, next_month};
use slicemeter::http::server;
use slicemeter::http::state::ServerConfig;
use slicemeter::sim::{SimFleet, generate};

use crate::common::{in_scratch_schema, percentile};

#[derive(Debug, clap::Args)]
pub struct IngestBenchArgs {
    /// The database to work in (a scratch schema is created and dropped); without one, a private PostgreSQL is started for the run.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// GPUs in the simulated fleet.
    #[arg(long, default_value_t = 64)]
    pub gpus: usize,
    /// Hours of 60 s windows to generate.
    #[arg(long, default_value_t = 6)]
    pub hours: i64,
    /// Time one batch reports on: 60 s is what a live collector sends.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub batch_period: Duration,
    /// Batches in flight at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// A size that runs in seconds (4 GPUs, 1 hour): CI runs it so that the benchmark cannot rot.
    #[arg(long)]
    pub smoke: bool,
}

pub async fn ingest(args: IngestBenchArgs) -> anyhow::Result<()> {
    let connections = (args.concurrency as u32 + 4).max(8);
    in_scratch_schema(args.database_url.as_deref(), connections, |pool, _| {
        run(&args, pool)
    })
    .await
}

async fn run(args: &IngestBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let (gpus, hours) = if args.smoke {
        (4, 1)
    } else {
        (args.gpus, args.hours)
    };
    let fleet = SimFleet::generate(args.seed, gpus);
    let from = floor_hour(Utc::now()) - chrono::Duration::hours(hours + 1);
    let to = from + chrono::Duration::hours(hours);
    let cadence = Cadence {
        sample_interval: Duration::from_secs(5),
        window: Duration::from_secs(60),
        batch_period: args.batch_period,
    };
    let mut batches: Vec<Batch> = Vec::new();
    generate::generate(&fleet, from, to, cadence, |day| {
        batches.extend(day);
        true
    })?;
    // Interleaved by time, then node, as collectors of many nodes arrive: batches in flight at
    // once report different GPUs, rather than queueing on one node's locks.
    batches.sort_by(|a, b| (a.period.start, &a.node).cmp(&(b.period.start, &b.node)));
    let windows: u64 = batches.iter().map(|b| b.windows.len() as u64).sum();
    eprintln!(
        "bench ingest: {} GPUs, {} h of 60 s windows: {} batches, {} windows",
        gpus,
        hours,
        batches.len(),
        windows
    );
    // Partitions exist before either side is timed.
    db::Partitions::default()
        .ensure(&pool, &months_touched(from, to))
        .await?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    // No rate limit: the benchmark measures ingest, not the limiter (`load` measures that).
    let config = ServerConfig {
        ingest_rate: 0.0,
        ..ServerConfig::default()
    };
    let serving = tokio::spawn(server::serve(pool.clone(), listener, config, async move {
        let _ = stopped.changed().await;
    }));
    let (_, token) = tokens::create(
        &pool,
        Role::Admin,
        None,
        None,
        Some("bench"),
        None,
        &Actor::CLI,
    )
    .await?;
    let shipper = Shipper::new(&base, &token)?;

    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures_util::stream::iter(batches.iter().map(|b| {
        let shipper = shipper.clone();
        async move {
            let t = Instant::now();
            shipper.send(b).await.map(|o| (t.elapsed(), o))
        }
    }))
    .buffer_unordered(args.concurrency.max(1))
    .map_ok(|(latency, outcome)| {
        debug_assert_eq!(outcome.duplicates, 0);
        latency
    })
    .try_collect()
    .await?;
    let http_elapsed = started.elapsed();
    stop.send(true).ok();
    serving.await??;
    latencies.sort();

    let stored: i64 = sqlx::query_scalar("select count(*) from occupancy")
        .fetch_one(&pool)
        .await?;
    anyhow::ensure!(
        stored as u64 == windows,
        "stored {stored} windows, generated {windows}"
    );

    // The floor: the same rows, COPY'd into an empty copy of the table.
    let mut conn = pool.acquire().await?;
    sqlx::query(
        "create table occupancy_copy (like occupancy including all) partition by range (window_start)",
    )
    .execute(&mut *conn)
    .await?;
    for month in months_touched(from, to) {
        sqlx::query(&format!(
            "create table occupancy_copy_{} partition of occupancy_copy for values from ('{month} 00:00:00+00') to ('{} 00:00:00+00')",
            month.format("%Y%m"),
            next_month(month)
        ))
        .execute(&mut *conn)
        .await?;
    }
    const COLUMNS: &str = "(slice_id, consumer_id, window_start, window_end, held_seconds, \
                           memory_byte_seconds, memory_peak_bytes, compute_active_seconds)";
    let rows: Vec<u8> = conn
        .copy_out_raw(&format!(
            "copy (select {} from occupancy) to stdout",
            COLUMNS.trim_matches(|c| c == '(' || c == ')')
        ))
        .await?
        .try_fold(Vec::new(), |mut acc, chunk| async move {
            acc.extend_from_slice(&chunk);
            Ok(acc)
        })
        .await?;
    let started = Instant::now();
    let mut copy = conn
        .copy_in_raw(&format!("copy occupancy_copy {COLUMNS} from stdin"))
        .await?;
    copy.send(rows.as_slice()).await?;
    let copied = copy.finish().await?;
    let copy_elapsed = started.elapsed();
    anyhow::ensure!(
        copied == windows,
        "copied {copied} rows, expected {windows}"
    );

    let http_rate = windows as f64 / http_elapsed.as_secs_f64();
    let copy_rate = windows as f64 / copy_elapsed.as_secs_f64();
    println!("windows                      {windows}");
    println!(
        "HTTP ingest                  {:>10.0} windows/s  ({:.2} s, {} batches, concurrency {})",
        http_rate,
        http_elapsed.as_secs_f64(),
        batches.len(),
        args.concurrency
    );
    println!(
        "  per batch latency          p50 {:.1} ms, p99 {:.1} ms",
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "plain COPY (floor)           {:>10.0} windows/s  ({:.2} s)",
        copy_rate,
        copy_elapsed.as_secs_f64()
    );
    println!(
        "ratio HTTP ingest / COPY     {:>10.3}",
        http_rate / copy_rate
    );
    Ok(())
}
