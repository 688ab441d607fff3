//! `load`: many simulated collectors post to one server on loopback, after a baseline of one
//! collector alone; prints windows per second, ingest latency, 429s and errors of both, their ratio,
//! and checks that the windows stored are exactly those generated.

use std::time::{Duration, Instant};

use chrono::Utc;
use slicemeter::auth::store as tokens;
use slicemeter::collector::shipper::{Encoded, ShipError, Shipper};
use slicemeter::collector::{Cadence, Replay};
use slicemeter::db;
use slicemeter::domain::access::{Actor, Role};
use slicemeter::domain::time::{floor_hour, months_touched};
use slicemeter::http::state::ServerConfig;
use slicemeter::sim::source::SimSource;
use slicemeter::sim::{GPUS_PER_NODE, SimFleet};

use crate::common::{Loopback, in_scratch_schema, percentile};

#[derive(Debug, clap::Args)]
pub struct LoadBenchArgs {
    /// The database to work in (a scratch schema is created and dropped); without one, a private PostgreSQL is started for the run.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
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
    /// A size that runs in seconds (4 collectors for 3 s after 2 s alone): CI runs it so that the
    /// benchmark cannot rot.
    #[arg(long)]
    pub smoke: bool,
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
    let shipper = Shipper::new(&base, &token)?;
    let to = from + chrono::Duration::days(30);
    let mut replay = Replay::new(SimSource::new(&fleet, &node)?, cadence, from, to)?;
    let step = chrono::Duration::from_std(cadence.batch_period)?;
    let mut at = from;
    let mut tally = LoadTally::default();
    'run: while Instant::now() < until && !replay.is_done() {
        at += step;
        for batch in replay.advance(at)? {
            tally.batches += 1;
            tally.windows_generated += batch.windows.len() as u64;
            let encoded = Encoded::of(&batch);
            loop {
                let started = Instant::now();
                match shipper.send(&encoded).await {
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
    in_scratch_schema(args.database_url.as_deref(), 24, |pool, _| run(&args, pool)).await
}

async fn run(args: &LoadBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let (collectors, duration, baseline_length) = if args.smoke {
        (4, Duration::from_secs(3), Duration::from_secs(2))
    } else {
        (args.collectors, args.duration, args.baseline)
    };
    let nodes = collectors + 1;
    let fleet = SimFleet::generate(args.seed, nodes * GPUS_PER_NODE);
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

    let config = ServerConfig {
        ingest_rate: args.ingest_rate,
        ingest_burst: args.ingest_burst,
        ..ServerConfig::default()
    };
    let server = Loopback::start(&pool, config).await?;
    let base = server.base.clone();
    eprintln!(
        "bench load: {} collectors of {} GPUs each for {:?} after a baseline of one for {:?}; {} s batches; {} batches/s per token (bursts of {})",
        collectors,
        GPUS_PER_NODE,
        duration,
        baseline_length,
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
    let mut baseline = phase(&tokens_by_node[..1], baseline_length).await?;
    let mut loaded = phase(&tokens_by_node[1..], duration).await?;
    server.stop().await?;

    let stored: i64 = sqlx::query_scalar("select count(*) from occupancy")
        .fetch_one(&pool)
        .await?;
    let generated = baseline.windows_generated + loaded.windows_generated;
    let acknowledged = baseline.inserted + loaded.inserted;
    baseline.print("baseline: 1 collector");
    loaded.print(&format!("load: {collectors} collectors"));
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
