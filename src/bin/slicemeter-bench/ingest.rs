//! `ingest`: simulated batches posted through the real HTTP ingest on loopback, from 1, 16 and 64
//! nodes at once, each batch written alone (the baseline) and in groups (group commit), and, in the
//! same run, the same rows `COPY`'d into a scratch copy of the table: the floor that ingest's
//! validation, idempotency and rollups are measured against. As many bodiless round trips to the
//! same server, as many in flight, give the ceiling HTTP alone puts on each size of batch.

use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt};
use slicemeter::collector::Cadence;
use slicemeter::collector::shipper::{Encoded, Shipper};
use slicemeter::db;
use slicemeter::domain::batch::Batch;
use slicemeter::domain::time::{floor_hour, months_touched, next_month};
use slicemeter::http::state::ServerConfig;
use slicemeter::ingest::group::GroupCommit;
use slicemeter::sim::{GPUS_PER_NODE, SimFleet, generate};

use crate::common::{Loopback, admin_token, in_scratch_schema, percentile};

#[derive(Debug, clap::Args)]
pub struct IngestBenchArgs {
    /// The database to work in (a scratch schema is created and dropped); without one, a private PostgreSQL is started for the run.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// GPUs in the simulated fleet (four a node: 256 is 64 nodes).
    #[arg(long, default_value_t = 256)]
    pub gpus: usize,
    /// Hours of 60 s windows to generate (at least enough for `--min-batches-per-node`).
    #[arg(long, default_value_t = 6)]
    pub hours: i64,
    /// Batches each node sends, at least: with few, all of a node's batches are in flight within a
    /// few waves and the run measures its ramp, not a rate (64 nodes sending six hour-long batches
    /// each gave 0.34-0.53 of `COPY` from one run to the next; 24 each, 0.50-0.55).
    #[arg(long, default_value_t = 24)]
    pub min_batches_per_node: u32,
    /// Times one batch reports on, each measured: 60 s is what a live collector sends, 15 min long
    /// enough to reach 0.3 of `COPY` on a 2-core machine (docs/benchmarks.md, ingest), 1 h a back-fill.
    #[arg(long, value_delimiter = ',', default_value = "60s,15m,1h", value_parser = humantime::parse_duration)]
    pub batch_period: Vec<Duration>,
    /// Nodes sending at once (batches in flight, each from another node), each measured.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub nodes: Vec<usize>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// A size that runs in seconds (16 GPUs, 1 hour): CI runs it so that the benchmark cannot rot.
    #[arg(long)]
    pub smoke: bool,
    /// Windows of closed days only (ending at today's midnight, as a back-fill's): every batch
    /// marks its days for right-sizing's day summaries, and each grouped run is measured again
    /// without the marks (`unmarked`), what the marks cost.
    #[arg(long)]
    pub closed_days: bool,
}

pub async fn ingest(args: IngestBenchArgs) -> anyhow::Result<()> {
    let most = args.nodes.iter().copied().max().unwrap_or(1) as u32;
    in_scratch_schema(args.database_url.as_deref(), most + 8, |pool, _| {
        run(&args, pool)
    })
    .await
}

/// One run's figures.
struct Measured {
    windows: u64,
    batches: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

// long: the benchmark's table in order, each batch period's runs (alone, grouped, unmarked), ceilings
// and floor printed together
async fn run(args: &IngestBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let (gpus, hours) = if args.smoke {
        (16, 1)
    } else {
        (args.gpus, args.hours)
    };
    let fleet = SimFleet::generate(args.seed, gpus);
    // Each batch period's hours: at least `hours`, and enough for its minimum of batches a node.
    let hours_of = |period: Duration| {
        if args.smoke {
            return hours;
        }
        let enough = (period.as_secs() * u64::from(args.min_batches_per_node)).div_ceil(3600);
        hours.max(i64::try_from(enough).unwrap_or(i64::MAX))
    };
    let longest = args
        .batch_period
        .iter()
        .map(|&p| hours_of(p))
        .max()
        .unwrap_or(hours);
    let now = if args.closed_days {
        slicemeter::domain::time::floor_day(Utc::now())
    } else {
        floor_hour(Utc::now())
    };
    // Partitions exist before anything is timed.
    db::Partitions::default()
        .ensure(
            &pool,
            &months_touched(now - chrono::Duration::hours(longest + 1), now),
        )
        .await?;
    println!(
        "bench ingest: {gpus} GPUs ({} nodes), 60 s windows over {}; HTTP on loopback against plain COPY of the same rows",
        gpus.div_ceil(GPUS_PER_NODE),
        if args.smoke {
            format!("{hours} h")
        } else {
            format!(
                "at least {hours} h, and {} batches a node",
                args.min_batches_per_node
            )
        }
    );
    println!(
        "{:<8} {:>6} {:<9} {:>9} {:>9} {:>14} {:>16} {:>14} {:>8}",
        "batch",
        "nodes",
        "writes",
        "batches",
        "windows",
        "HTTP win/s",
        "p50 / p99 ms",
        "COPY win/s",
        "ratio"
    );
    for &period in &args.batch_period {
        // Closed days: to midnight; otherwise to an hour ago.
        let from = now - chrono::Duration::hours(hours_of(period) + i64::from(!args.closed_days));
        let to = from + chrono::Duration::hours(hours_of(period));
        let cadence = Cadence {
            sample_interval: Duration::from_secs(5),
            window: Duration::from_secs(60),
            batch_period: period,
        };
        let mut batches: Vec<Batch> = Vec::new();
        generate::generate(&fleet, from, to, cadence, |day| {
            batches.extend(day);
            true
        })?;
        // Interleaved by time, then node, as collectors of many nodes arrive: batches in flight at
        // once report different nodes' GPUs.
        batches.sort_by(|a, b| (a.period.start, &a.node).cmp(&(b.period.start, &b.node)));
        // Encoded before the clock starts, as the floor's rows are read out before its `COPY`: a
        // collector gzips its JSON on its own node, not on the server's cores.
        let bodies: Vec<Encoded> = batches.iter().map(Encoded::of).collect();
        let mut runs = Vec::new();
        for &nodes in &args.nodes {
            // The baseline: a group closes at its first window, so every batch is written alone.
            for (writes, group) in [
                (
                    "alone",
                    GroupCommit {
                        max_windows: 1,
                        ..GroupCommit::default()
                    },
                ),
                ("grouped", GroupCommit::default()),
                (
                    "unmarked",
                    GroupCommit {
                        evidence_marks: false,
                        ..GroupCommit::default()
                    },
                ),
            ] {
                if writes == "unmarked" && !args.closed_days {
                    continue;
                }
                forget_everything(&pool).await?;
                runs.push((
                    nodes,
                    writes,
                    http_ingest(&pool, &bodies, nodes, group).await?,
                ));
            }
        }
        // The ceiling HTTP itself puts on these batches: as many bodiless round trips to the
        // server (`GET /healthz`: no token, no body, no database), as many in flight, on the same
        // cores. No ingest of these batches can be faster than this.
        let mut ceilings = Vec::new();
        for &nodes in &args.nodes {
            ceilings.push((nodes, round_trips(&pool, bodies.len(), nodes).await?));
        }
        let (copied, copy_elapsed) = copy_floor(&pool).await?;
        let copy_rate = copied as f64 / copy_elapsed.as_secs_f64();
        for (nodes, elapsed) in ceilings {
            let rate = copied as f64 / elapsed.as_secs_f64();
            println!(
                "{:<8} {:>6} {:<9} {:>9} {:>9} {:>14.0} {:>16} {:>14.0} {:>8.3}",
                humantime::format_duration(period).to_string(),
                nodes,
                "HTTP only",
                bodies.len(),
                copied,
                rate,
                "",
                copy_rate,
                rate / copy_rate
            );
        }
        for (nodes, writes, m) in &runs {
            anyhow::ensure!(
                m.windows == copied,
                "ingest stored {} windows, the floor copied {copied}",
                m.windows
            );
            let rate = m.windows as f64 / m.elapsed.as_secs_f64();
            println!(
                "{:<8} {:>6} {:<9} {:>9} {:>9} {:>14.0} {:>16} {:>14.0} {:>8.3}",
                humantime::format_duration(period).to_string(),
                nodes,
                writes,
                m.batches,
                m.windows,
                rate,
                format!(
                    "{:.1} / {:.1}",
                    percentile(&m.latencies, 0.50).as_secs_f64() * 1e3,
                    percentile(&m.latencies, 0.99).as_secs_f64() * 1e3
                ),
                copy_rate,
                rate / copy_rate
            );
        }
    }
    Ok(())
}

/// Empties what ingest wrote, so that the next run stores the same batches anew.
async fn forget_everything(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    sqlx::query(
        "truncate occupancy, gpu_presence, usage_hourly, usage_daily, usage_team_daily,
                  usage_month_days, gpu_hourly, gpu_daily, evidence_day, evidence_day_done,
                  evidence_day_stale, evidence_window, evidence_window_done, usage_month,
                  usage_month_slice, usage_month_gpu, usage_month_model_day, usage_month_done,
                  slice, consumer, gpu cascade",
    )
    .execute(pool)
    .await?;
    sqlx::query("drop table if exists occupancy_copy")
        .execute(pool)
        .await?;
    Ok(())
}

/// Posts `batches` through a server of its own (no rate limit: this measures ingest, not the
/// limiter, which `load` measures), `nodes` batches in flight at once.
async fn http_ingest(
    pool: &sqlx::PgPool,
    batches: &[Encoded],
    nodes: usize,
    group_commit: GroupCommit,
) -> anyhow::Result<Measured> {
    let config = ServerConfig {
        ingest_rate: 0.0,
        group_commit,
        ..ServerConfig::default()
    };
    let server = Loopback::start(pool, config).await?;
    let token = admin_token(pool).await?;
    let shipper = Shipper::new(&server.base, &token)?;
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures_util::stream::iter(batches.iter().map(|b| {
        let shipper = shipper.clone();
        async move {
            let t = Instant::now();
            shipper.send(b).await.map(|o| (t.elapsed(), o))
        }
    }))
    .buffer_unordered(nodes.max(1))
    .map_ok(|(latency, outcome)| {
        debug_assert_eq!(outcome.duplicates, 0);
        latency
    })
    .try_collect()
    .await?;
    let elapsed = started.elapsed();
    server.stop().await?;
    latencies.sort();
    let stored: i64 = sqlx::query_scalar("select count(*) from occupancy")
        .fetch_one(pool)
        .await?;
    Ok(Measured {
        windows: stored as u64,
        batches: batches.len(),
        elapsed,
        latencies,
    })
}

/// `n` bodiless round trips to the server (`GET /healthz`), `nodes` in flight at once.
async fn round_trips(pool: &sqlx::PgPool, n: usize, nodes: usize) -> anyhow::Result<Duration> {
    let server = Loopback::start(pool, ServerConfig::default()).await?;
    let client = reqwest::Client::new();
    let url = format!("{}/healthz", server.base);
    let started = Instant::now();
    futures_util::stream::iter((0..n).map(|_| {
        let (client, url) = (&client, &url);
        async move {
            client
                .get(url)
                .send()
                .await?
                .error_for_status()?
                .bytes()
                .await
        }
    }))
    .buffer_unordered(nodes.max(1))
    .try_for_each(|_| async { Ok(()) })
    .await?;
    let elapsed = started.elapsed();
    server.stop().await?;
    Ok(elapsed)
}

/// The floor: the stored rows, `COPY`'d into an empty copy of the table.
async fn copy_floor(pool: &sqlx::PgPool) -> anyhow::Result<(u64, Duration)> {
    let mut conn = pool.acquire().await?;
    sqlx::query(
        "create table occupancy_copy (like occupancy including all) partition by range (window_start)",
    )
    .execute(&mut *conn)
    .await?;
    let months: Vec<chrono::NaiveDate> = sqlx::query_scalar(
        "select distinct (date_trunc('month', window_start, 'UTC') at time zone 'UTC')::date from occupancy",
    )
    .fetch_all(&mut *conn)
    .await?;
    for month in months {
        sqlx::query(&format!(
            "create table occupancy_copy_{} partition of occupancy_copy for values from ('{month} 00:00:00+00') to ('{} 00:00:00+00')",
            month.format("%Y%m"),
            next_month(month)
        ))
        .execute(&mut *conn)
        .await?;
    }
    const COLUMNS: &str = "(slice_id, gpu_id, consumer_id, window_start, window_end, held_seconds, \
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
    Ok((copied, started.elapsed()))
}
