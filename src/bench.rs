//! Benchmarks that print figures. `bench ingest` posts simulated batches through the real HTTP ingest
//! and, in the same run, `COPY`s the same rows into a scratch copy of the table: the floor that
//! ingest's validation, idempotency and rollups are measured against. Everything happens in a scratch
//! schema that is dropped at the end.

use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::postgres::PgConnectOptions;

use crate::auth::Role;
use crate::collector::Cadence;
use crate::collector::shipper::Shipper;
use crate::db::audit::Actor;
use crate::db::{self, tokens};
use crate::domain::batch::Batch;
use crate::domain::time::{floor_hour, months_touched};
use crate::http::ServerConfig;
use crate::server;
use crate::sim::SimFleet;
use crate::simulate;

#[derive(Debug, clap::Args)]
pub struct IngestBenchArgs {
    /// The database to work in (a scratch schema is created and dropped).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
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
}

#[derive(Debug, clap::Args)]
pub struct BillingBenchArgs {
    /// The database to work in (a scratch schema is created and dropped).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// GPUs in the simulated fleet.
    #[arg(long, default_value_t = 1000)]
    pub gpus: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

#[derive(Debug, clap::Args)]
pub struct ExportBenchArgs {
    /// The database to work in (a scratch schema per fleet size is created and dropped).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Fleet sizes to compare, the smallest first.
    #[arg(long, value_delimiter = ',', default_value = "10,1000")]
    pub gpus: Vec<usize>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Runs `body` on a pool confined to a scratch schema, which is dropped afterwards.
async fn in_scratch_schema<F, Fut>(url: &str, connections: u32, body: F) -> anyhow::Result<()>
where
    F: FnOnce(sqlx::PgPool, String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let schema = format!("slicemeter_bench_{}", std::process::id());
    let admin = db::connect(url, 2).await?;
    sqlx::query(&format!("create schema {schema}"))
        .execute(&admin)
        .await?;
    let options = PgConnectOptions::from_str(url)?.options([("search_path", schema.as_str())]);
    let result = async {
        let pool = db::connect_with(options, connections).await?;
        db::migrate(&pool).await?;
        body(pool, schema.clone()).await
    }
    .await;
    sqlx::query(&format!("drop schema {schema} cascade"))
        .execute(&admin)
        .await
        .context("dropping the scratch schema")?;
    result
}

pub async fn ingest(args: IngestBenchArgs) -> anyhow::Result<()> {
    let connections = (args.concurrency as u32 + 4).max(8);
    in_scratch_schema(&args.database_url, connections, |pool, _| {
        run_ingest(&args, pool)
    })
    .await
}

async fn run_ingest(args: &IngestBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let fleet = SimFleet::generate(args.seed, args.gpus);
    let from = floor_hour(Utc::now()) - chrono::Duration::hours(args.hours + 1);
    let to = from + chrono::Duration::hours(args.hours);
    let cadence = Cadence {
        sample_interval: Duration::from_secs(5),
        window: Duration::from_secs(60),
        batch_period: args.batch_period,
    };
    let mut batches: Vec<Batch> = Vec::new();
    simulate::generate(&fleet, from, to, cadence, |day| {
        batches.extend(day);
        true
    })?;
    let windows: u64 = batches.iter().map(|b| b.windows.len() as u64).sum();
    eprintln!(
        "bench ingest: {} GPUs, {} h of 60 s windows: {} batches, {} windows",
        args.gpus,
        args.hours,
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
    let serving = tokio::spawn(server::serve(
        pool.clone(),
        listener,
        ServerConfig::default(),
        async move {
            let _ = stopped.changed().await;
        },
    ));
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
            crate::domain::time::next_month(month)
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

/// `bench billing`: a simulated month of `--gpus` GPUs; the time to run every team's invoices against,
/// in the same run, one `SELECT ... GROUP BY team` over the same rollups (reading the data once).
pub async fn billing(args: BillingBenchArgs) -> anyhow::Result<()> {
    in_scratch_schema(&args.database_url, 8, |pool, _| run_billing(&args, pool)).await
}

async fn run_billing(args: &BillingBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    use crate::domain::time::Month;

    let month = Month::of(Utc::now()).minus(1);
    let rollup_rows = load_month(&pool, args.gpus, args.seed, month).await?;

    // The floor first, then the invoice run; each twice, the second timed, so both read warm caches.
    let floor = || async {
        sqlx::query(
            "select c.team_id, sum(u.held_seconds * s.compute_share), sum(u.held_seconds * s.memory_share)
             from usage_hourly u join slice s using (slice_id) join consumer c using (consumer_id)
             where u.hour >= $1 and u.hour < $2 group by c.team_id",
        )
        .bind(month.start())
        .bind(month.end())
        .fetch_all(&pool)
        .await
    };
    floor().await?;
    let t = Instant::now();
    let teams = floor().await?.len();
    let floor_time = t.elapsed();
    crate::billing::run_drafts(&pool, month, chrono::Utc::now(), &Actor::CLI).await?;
    let t = Instant::now();
    let run = crate::billing::run_drafts(&pool, month, chrono::Utc::now(), &Actor::CLI).await?;
    let run_time = t.elapsed();
    let lines: usize = run.drafts.iter().map(|i| i.lines.len()).sum();
    println!("rollup rows                   {rollup_rows}");
    println!(
        "invoice run (all teams)       {:>8.3} s  ({} drafts, {lines} lines)",
        run_time.as_secs_f64(),
        run.drafts.len()
    );
    println!(
        "SELECT sum() GROUP BY team    {:>8.3} s  ({teams} teams)",
        floor_time.as_secs_f64()
    );
    println!(
        "ratio run / floor             {:>8.2}",
        run_time.as_secs_f64() / floor_time.as_secs_f64()
    );
    Ok(())
}

/// Loads `month` of a simulated fleet of `gpus` GPUs (teams, hourly windows sampled every five
/// minutes, a day a batch) straight through ingest, with the example rate card in force. Returns
/// the number of rollup rows.
async fn load_month(
    pool: &sqlx::PgPool,
    gpus: usize,
    seed: u64,
    month: crate::domain::time::Month,
) -> anyhow::Result<i64> {
    use crate::billing::rate_card::RateCardInput;
    let mut card: RateCardInput = toml::from_str(include_str!("../deploy/rate-card.example.toml"))?;
    card.effective_from = month.start();
    let card = card
        .validate(chrono::Utc::now())
        .map_err(|e| anyhow::anyhow!("example rate card: {e:?}"))?;
    db::billing::insert_rate_card(pool, &card, &Actor::CLI).await?;
    let fleet = SimFleet::generate(seed, gpus);
    crate::demo::register_teams(pool, &fleet).await?;
    let cadence = Cadence {
        sample_interval: Duration::from_secs(300),
        window: Duration::from_secs(3600),
        batch_period: Duration::from_secs(86_400),
    };
    let started = Instant::now();
    let partitions = db::Partitions::default();
    let limits = crate::ingest::Limits::default();
    let bar = simulate::progress(
        simulate::expected_batches(&fleet, month.start(), month.end(), cadence.batch_period),
        "loading a month",
    );
    let totals =
        simulate::generate_and_ingest(fleet, month.start(), month.end(), cadence, 2, bar, |b| {
            let (pool, partitions, limits) = (pool, &partitions, &limits);
            async move { crate::ingest::ingest(pool, partitions, b, Utc::now(), limits).await }
        })
        .await?;
    sqlx::query("analyze").execute(pool).await?;
    let rollup_rows: i64 = sqlx::query_scalar("select count(*) from usage_hourly")
        .fetch_one(pool)
        .await?;
    eprintln!(
        "loaded {gpus} GPUs, {month}: {} windows, {rollup_rows} rollup rows, in {:.1} s",
        totals.inserted,
        started.elapsed().as_secs_f64()
    );
    Ok(rollup_rows)
}

/// `bench export`: peak memory and time of `slicemeter export focus` for a month of each fleet size,
/// each run as its own process so that its peak resident memory is its own.
pub async fn export(args: ExportBenchArgs) -> anyhow::Result<()> {
    use crate::domain::time::Month;
    let month = Month::of(Utc::now()).minus(1);
    let mut results = Vec::new();
    for &gpus in &args.gpus {
        let url = args.database_url.clone();
        let results = &mut results;
        in_scratch_schema(&args.database_url, 8, |pool, schema| async move {
            let rollups = load_month(&pool, gpus, args.seed, month).await?;
            let sep = if url.contains('?') { '&' } else { '?' };
            let scoped = format!("{url}{sep}options=-c%20search_path%3D{schema}");
            let out = tempfile_path(&format!("focus-{gpus}.csv"));
            let started = Instant::now();
            let mut child = std::process::Command::new(std::env::current_exe()?)
                .args(["export", "focus", "--period", &month.to_string(), "--out"])
                .arg(&out)
                .env("DATABASE_URL", &scoped)
                .env("RUST_LOG", "error")
                .spawn()?;
            let mut peak_kib = 0u64;
            let status = loop {
                if let Some(kib) = peak_rss_kib(child.id()) {
                    peak_kib = peak_kib.max(kib);
                }
                if let Some(status) = child.try_wait()? {
                    break status;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            anyhow::ensure!(status.success(), "the export failed: {status}");
            let elapsed = started.elapsed();
            let text = std::fs::read_to_string(&out)?;
            std::fs::remove_file(&out).ok();
            results.push((
                gpus,
                rollups,
                text.lines().count() - 1,
                text.len(),
                peak_kib,
                elapsed,
            ));
            Ok(())
        })
        .await?;
    }
    println!("GPUs   rollup rows   FOCUS rows   CSV bytes     peak RSS    time");
    for (gpus, rollups, rows, bytes, kib, t) in &results {
        println!(
            "{gpus:<6} {rollups:>11}   {rows:>10}   {bytes:>11}   {:>7.1} MiB   {:.2} s",
            *kib as f64 / 1024.0,
            t.as_secs_f64()
        );
    }
    if let (Some(first), Some(last)) = (results.first(), results.last()) {
        println!(
            "peak RSS ratio {} GPUs / {} GPUs: {:.2} for {:.0}x the rows",
            last.0,
            first.0,
            last.4 as f64 / first.4.max(1) as f64,
            last.2 as f64 / first.2.max(1) as f64
        );
    }
    Ok(())
}

/// Peak resident memory of a running process (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn tempfile_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("slicemeter-bench-{}-{name}", std::process::id()))
}

#[derive(Debug, clap::Args)]
pub struct LoadBenchArgs {
    /// The database to work in (a scratch schema is created and dropped).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Simulated collectors, one node of four GPUs and one collector token each.
    #[arg(long, default_value_t = 200)]
    pub collectors: usize,
    /// How long the collectors post.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// How long the single collector of the baseline posts, before the load.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub baseline: Duration,
    /// Time one batch reports on: 60 s is what a live collector sends.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub batch_period: Duration,
    /// Batches a second each token may post (the server's --ingest-rate).
    #[arg(long, default_value_t = ServerConfig::default().ingest_rate)]
    pub ingest_rate: f64,
    /// The server's --ingest-burst.
    #[arg(long, default_value_t = ServerConfig::default().ingest_burst)]
    pub ingest_burst: f64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// What the collectors of one phase did.
#[derive(Default)]
struct LoadTally {
    batches: u64,
    windows_generated: u64,
    inserted: u64,
    duplicates: u64,
    rate_limited: u64,
    errors: Vec<String>,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl LoadTally {
    fn add(&mut self, other: LoadTally) {
        self.batches += other.batches;
        self.windows_generated += other.windows_generated;
        self.inserted += other.inserted;
        self.duplicates += other.duplicates;
        self.rate_limited += other.rate_limited;
        self.errors.extend(other.errors);
        self.latencies.extend(other.latencies);
    }

    fn print(&mut self, label: &str) {
        self.latencies.sort();
        let secs = self.elapsed.as_secs_f64();
        println!(
            "{label:<28} {:>10.0} windows/s  {:>7.1} batches/s  p50 {:.1} ms  p99 {:.1} ms  ({} batches, {} windows in {:.1} s)",
            self.inserted as f64 / secs,
            self.batches as f64 / secs,
            percentile(&self.latencies, 0.50).as_secs_f64() * 1e3,
            percentile(&self.latencies, 0.99).as_secs_f64() * 1e3,
            self.batches,
            self.inserted,
            secs
        );
        println!(
            "{:<28} 429 (deliberate): {}  other errors: {}",
            "",
            self.rate_limited,
            self.errors.len()
        );
        for e in self.errors.iter().take(5) {
            println!("{:<28}   {e}", "");
        }
    }
}

/// One simulated collector: replays its node in fast-forward and posts each batch until `until`,
/// then finishes the batch in hand. A 429 waits the server's Retry-After and posts the same batch
/// again, as the real shipper does; any other failure is an error of the run.
async fn load_collector(
    fleet: SimFleet,
    node: String,
    token: String,
    base: String,
    cadence: Cadence,
    from: chrono::DateTime<Utc>,
    until: Instant,
) -> anyhow::Result<LoadTally> {
    use crate::collector::shipper::ShipError;
    use crate::collector::source::sim::SimSource;
    let shipper = Shipper::new(&base, &token)?;
    let to = from + chrono::Duration::days(30);
    let mut replay =
        crate::collector::Replay::new(SimSource::new(fleet, &node)?, cadence, from, to)?;
    let step = chrono::Duration::from_std(cadence.batch_period)?;
    let mut at = from;
    let mut tally = LoadTally::default();
    'run: while Instant::now() < until && !replay.is_done() {
        at += step;
        for batch in replay.advance(at)? {
            tally.batches += 1;
            tally.windows_generated += batch.windows.len() as u64;
            loop {
                let started = Instant::now();
                match shipper.send(&batch).await {
                    Ok(outcome) => {
                        tally.latencies.push(started.elapsed());
                        tally.inserted += outcome.inserted;
                        tally.duplicates += outcome.duplicates;
                        break;
                    }
                    Err(ShipError::Transient {
                        status: Some(reqwest::StatusCode::TOO_MANY_REQUESTS),
                        retry_after,
                        ..
                    }) => {
                        tally.rate_limited += 1;
                        tokio::time::sleep(retry_after.unwrap_or(Duration::from_secs(1))).await;
                    }
                    Err(e) => {
                        tally.errors.push(format!("{node}: {e}"));
                        break 'run;
                    }
                }
            }
        }
    }
    Ok(tally)
}

/// `bench load`: `--collectors` simulated collectors post to one server on loopback for
/// `--duration`, after a baseline of one collector alone; prints windows per second, ingest latency,
/// 429s and errors of both, their ratio, and checks that the windows stored are exactly those
/// generated.
pub async fn load(args: LoadBenchArgs) -> anyhow::Result<()> {
    in_scratch_schema(&args.database_url, 24, |pool, _| run_load(&args, pool)).await
}

async fn run_load(args: &LoadBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let nodes = args.collectors + 1;
    let fleet = SimFleet::generate(args.seed, nodes * crate::sim::GPUS_PER_NODE);
    anyhow::ensure!(
        fleet.nodes.len() == nodes,
        "the fleet has {} nodes",
        fleet.nodes.len()
    );
    let from = floor_hour(Utc::now()) - chrono::Duration::days(31);
    db::Partitions::default()
        .ensure(
            &pool,
            &months_touched(from, from + chrono::Duration::days(31)),
        )
        .await?;
    let cadence = Cadence {
        sample_interval: Duration::from_secs(30),
        window: Duration::from_secs(60),
        batch_period: args.batch_period,
    };
    let mut tokens_by_node = Vec::with_capacity(nodes);
    for node in &fleet.nodes {
        let (_, token) = tokens::create(
            &pool,
            Role::Collector,
            None,
            Some(&node.name),
            Some("bench load"),
            None,
            &Actor::CLI,
        )
        .await?;
        tokens_by_node.push((node.name.clone(), token));
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let config = ServerConfig {
        ingest_rate: args.ingest_rate,
        ingest_burst: args.ingest_burst,
        ..ServerConfig::default()
    };
    let serving = tokio::spawn(server::serve(pool.clone(), listener, config, async move {
        let _ = stopped.changed().await;
    }));
    eprintln!(
        "bench load: {} collectors of {} GPUs each for {:?} after a baseline of one for {:?}; {} s batches; {} batches/s per token (bursts of {})",
        args.collectors,
        crate::sim::GPUS_PER_NODE,
        args.duration,
        args.baseline,
        args.batch_period.as_secs(),
        args.ingest_rate,
        args.ingest_burst
    );

    let phase = |who: &[(String, String)], length: Duration| {
        let until = Instant::now() + length;
        let tasks: Vec<_> = who
            .iter()
            .map(|(node, token)| {
                tokio::spawn(load_collector(
                    fleet.clone(),
                    node.clone(),
                    token.clone(),
                    base.clone(),
                    cadence,
                    from,
                    until,
                ))
            })
            .collect();
        async move {
            let started = Instant::now();
            let mut tally = LoadTally::default();
            for t in tasks {
                tally.add(t.await??);
            }
            tally.elapsed = started.elapsed();
            anyhow::Ok(tally)
        }
    };
    let mut baseline = phase(&tokens_by_node[..1], args.baseline).await?;
    let mut loaded = phase(&tokens_by_node[1..], args.duration).await?;
    stop.send(true).ok();
    serving.await??;

    let stored: i64 = sqlx::query_scalar("select count(*) from occupancy")
        .fetch_one(&pool)
        .await?;
    let generated = baseline.windows_generated + loaded.windows_generated;
    let acknowledged = baseline.inserted + loaded.inserted;
    baseline.print("baseline: 1 collector");
    loaded.print(&format!("load: {} collectors", args.collectors));
    println!(
        "ratio load / baseline        {:>10.2}x windows/s, p99 latency {:.2}x",
        (loaded.inserted as f64 / loaded.elapsed.as_secs_f64())
            / (baseline.inserted as f64 / baseline.elapsed.as_secs_f64()),
        percentile(&loaded.latencies, 0.99).as_secs_f64()
            / percentile(&baseline.latencies, 0.99).as_secs_f64()
    );
    let exact = stored as u64 == generated
        && acknowledged == generated
        && baseline.duplicates + loaded.duplicates == 0;
    println!(
        "count check                  generated {generated}, acknowledged {acknowledged}, stored {stored}: {}",
        if exact { "exact" } else { "MISMATCH" }
    );
    let errors = baseline.errors.len() + loaded.errors.len();
    anyhow::ensure!(errors == 0, "{errors} requests failed with other than 429");
    anyhow::ensure!(exact, "the windows stored are not the windows generated");
    Ok(())
}
