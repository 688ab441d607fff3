//! The first part of `scale`: a month of a simulated fleet posted through HTTP to the real server, as
//! collectors would send it with coarse windows (hourly, sampled every five minutes, a day a batch),
//! in chunks of GPUs one after another, printing each chunk's windows per second and its slowest
//! day against its fastest, the slowest chunk against the fastest, and the peak memory
//! of the simulator (a process of its own: this binary's hidden `post-fleet`) and of the server (this
//! process, which does nothing else meanwhile), and what PostgreSQL wrote and waited on meanwhile
//! (`pgstat`).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use slicemeter::cli::demo::register_teams;
use slicemeter::collector::Cadence;
use slicemeter::collector::shipper::Shipper;
use slicemeter::domain::time::Month;
use slicemeter::http::state::ServerConfig;
use slicemeter::sim::SimFleet;
use slicemeter::sim::generate;

use crate::common::{Loopback, admin_token, peak_rss_kib, publish_example_card};

/// A fleet's month (or its first `days`) posted through HTTP in chunks of at most `chunk` GPUs,
/// one after another (each a fleet of its own seed and nodes: the month of a fleet that grows),
/// its figures printed: each chunk's rate and its slowest day against its fastest, then the
/// slowest chunk against the fastest (issue 42: loading steady, within 1.5x).
pub async fn fill(
    pool: &sqlx::PgPool,
    gpus: usize,
    days: u32,
    month: Month,
    concurrency: usize,
    chunk: usize,
) -> anyhow::Result<()> {
    publish_example_card(pool, month).await?;
    let chunk = chunk.max(1);
    let config = ServerConfig {
        ingest_rate: 0.0,
        ..ServerConfig::default()
    };
    let server = Loopback::start(pool, config).await?;
    let token = admin_token(pool).await?;
    let watch = crate::pgstat::watch(pool).await?;
    let started = Instant::now();
    let plan: Vec<(u64, usize)> = (0..gpus)
        .step_by(chunk)
        .enumerate()
        .map(|(i, first)| (42 + i as u64, chunk.min(gpus - first)))
        .collect();
    // Every chunk's teams first, with the namespaces of all: a team put again with fewer would
    // give the rest up and re-attribute what was posted (a load of its own, not the chunk's).
    let mut all = SimFleet::generate(42, 1);
    for &(seed, n) in &plan {
        for t in SimFleet::generate(seed, n).teams {
            match all.teams.iter_mut().find(|a| a.id == t.id) {
                Some(a) => a.namespaces.extend(
                    t.namespaces
                        .into_iter()
                        .filter(|ns| !a.namespaces.contains(ns))
                        .collect::<Vec<_>>(),
                ),
                None => all.teams.push(t),
            }
        }
    }
    register_teams(pool, &all).await?;
    let (mut windows, mut peak_kib, mut chunks) = (0, 0, Vec::new());
    println!("chunk   GPUs     windows    seconds   windows/s   slowest day / fastest");
    for (i, &(seed, n)) in plan.iter().enumerate() {
        let t = Instant::now();
        let posted = post_chunk(&server.base, &token, n, days, seed, i, month, concurrency).await?;
        let seconds = t.elapsed().as_secs_f64();
        // A day that took under a second (a smoke run's) says nothing of a rate.
        let rates: Vec<f64> = posted
            .days
            .iter()
            .filter(|d| d.seconds >= 1.0)
            .map(DayPosted::rate)
            .collect();
        let spread = match (
            rates.iter().copied().reduce(f64::max),
            rates.iter().copied().reduce(f64::min),
        ) {
            (Some(fast), Some(slow)) => format!("{:.2}x", fast / slow),
            _ => "no day took a second".to_owned(),
        };
        println!(
            "{:>5}  {n:>5}  {:>10}  {seconds:>9.1}  {:>10.0}   {spread}",
            i + 1,
            posted.windows,
            posted.windows as f64 / seconds
        );
        windows += posted.windows;
        peak_kib = peak_kib.max(posted.peak_kib);
        chunks.push(seconds);
    }
    let elapsed = started.elapsed();
    let server_kib = peak_rss_kib(std::process::id()).unwrap_or(0);
    server.stop().await?;
    println!(
        "posted {gpus} GPUs x {days} days through HTTP in {} chunks: {windows} windows in {:.1} s \
         ({:.0} windows/s)",
        chunks.len(),
        elapsed.as_secs_f64(),
        windows as f64 / elapsed.as_secs_f64()
    );
    if let (Some(slow), Some(fast)) = (
        chunks.iter().copied().reduce(f64::max),
        chunks.iter().copied().reduce(f64::min),
    ) && chunks.len() > 1
    {
        println!(
            "slowest chunk / fastest: {:.2}x the seconds (chunks of {chunk} GPUs)",
            slow / fast
        );
    }
    println!(
        "peak resident memory: simulator {} MiB, server {} MiB",
        peak_kib / 1024,
        server_kib / 1024
    );
    watch.print().await
}

/// Posts chunk `index` (`gpus` GPUs of `seed`, its nodes named apart) through the hidden
/// `post-fleet`, a process of its own; what it printed.
#[allow(clippy::too_many_arguments)]
async fn post_chunk(
    base: &str,
    token: &str,
    gpus: usize,
    days: u32,
    seed: u64,
    index: usize,
    month: Month,
    concurrency: usize,
) -> anyhow::Result<FleetPosted> {
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["post-fleet", "--url", base])
        .args(["--gpus", &gpus.to_string(), "--days", &days.to_string()])
        .args(["--seed", &seed.to_string(), "--from"])
        .arg(month.start().to_rfc3339())
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--node-prefix", &format!("c{}-", index + 1)])
        .env("SLICEMETER_TOKEN", token)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let report = tokio::task::spawn_blocking(move || -> anyhow::Result<FleetPosted> {
        let line = std::io::BufReader::new(stdout)
            .lines()
            .last()
            .ok_or_else(|| anyhow::anyhow!("post-fleet printed nothing"))??;
        Ok(serde_json::from_str(&line)?)
    });
    let status = tokio::task::spawn_blocking(move || child.wait()).await??;
    anyhow::ensure!(status.success(), "post-fleet failed: {status}");
    report.await?
}

#[derive(Debug, clap::Args)]
pub struct PostFleetArgs {
    #[arg(long)]
    pub url: String,
    #[arg(long, env = "SLICEMETER_TOKEN", hide_env_values = true)]
    pub token: String,
    #[arg(long)]
    pub gpus: usize,
    #[arg(long)]
    pub days: u32,
    #[arg(long)]
    pub seed: u64,
    #[arg(long)]
    pub from: DateTime<Utc>,
    #[arg(long)]
    pub concurrency: usize,
    /// Put before each node's name, so that chunks of one fleet posted apart are nodes apart.
    #[arg(long, default_value = "")]
    pub node_prefix: String,
}

/// What `post-fleet` prints on its last line, as JSON.
#[derive(Debug, Serialize, Deserialize)]
struct FleetPosted {
    windows: u64,
    days: Vec<DayPosted>,
    peak_kib: u64,
}

/// A simulated day's windows, and the seconds from the end of the day before (the start, for the
/// first) to its last batch answered.
#[derive(Debug, Serialize, Deserialize)]
struct DayPosted {
    day: DateTime<Utc>,
    windows: u64,
    seconds: f64,
}

impl DayPosted {
    fn rate(&self) -> f64 {
        self.windows as f64 / self.seconds.max(1e-9)
    }
}

/// Per simulated day: windows stored, and when its last batch was answered.
type Answered = BTreeMap<DateTime<Utc>, (u64, Instant)>;

/// The simulator's side of [`fill`]: generates the fleet's days and posts them, timing each day.
pub async fn post_fleet(args: PostFleetArgs) -> anyhow::Result<()> {
    let mut fleet = SimFleet::generate(args.seed, args.gpus);
    for node in &mut fleet.nodes {
        node.name = format!("{}{}", args.node_prefix, node.name);
    }
    let cadence = Cadence {
        sample_interval: Duration::from_secs(300),
        window: Duration::from_secs(3600),
        batch_period: Duration::from_secs(86_400),
    };
    let to = args.from + chrono::Duration::days(i64::from(args.days));
    let shipper = Shipper::new(&args.url, &args.token)?;
    let answered: Arc<Mutex<Answered>> = Arc::default();
    let started = Instant::now();
    let totals = generate::generate_and_ingest(
        fleet,
        args.from,
        to,
        cadence,
        args.concurrency.max(1),
        indicatif::ProgressBar::hidden(),
        |b| {
            let (shipper, answered) = (shipper.clone(), answered.clone());
            async move {
                let outcome = shipper.send_with_retry(&b).await?;
                let day = b.period.start;
                let mut days = answered.lock().expect("not poisoned");
                let e = days.entry(day).or_insert((0, Instant::now()));
                e.0 += outcome.inserted;
                e.1 = Instant::now();
                Ok::<_, anyhow::Error>(outcome)
            }
        },
    )
    .await?;
    let answered = answered.lock().expect("not poisoned");
    let mut since = started;
    let days = answered
        .iter()
        .map(|(day, &(windows, last))| {
            let seconds = last.duration_since(since).as_secs_f64();
            since = last;
            DayPosted {
                day: *day,
                windows,
                seconds,
            }
        })
        .collect();
    let posted = FleetPosted {
        windows: totals.inserted,
        days,
        peak_kib: peak_rss_kib(std::process::id()).unwrap_or(0),
    };
    println!("{}", serde_json::to_string(&posted)?);
    Ok(())
}
