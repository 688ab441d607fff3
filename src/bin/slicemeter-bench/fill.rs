//! The first part of `scale`: a month of a simulated fleet posted through HTTP to the real server, as
//! collectors would send it with coarse windows (hourly, sampled every five minutes, a day a batch),
//! printing windows per second for each simulated day against the first day's, and the peak memory
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

/// A fleet's month (or its first `days`) posted through HTTP, its figures printed.
pub async fn fill(
    pool: &sqlx::PgPool,
    gpus: usize,
    days: u32,
    month: Month,
    concurrency: usize,
) -> anyhow::Result<()> {
    publish_example_card(pool, month).await?;
    let seed = 42;
    register_teams(pool, &SimFleet::generate(seed, gpus)).await?;
    let config = ServerConfig {
        ingest_rate: 0.0,
        ..ServerConfig::default()
    };
    let server = Loopback::start(pool, config).await?;
    let token = admin_token(pool).await?;
    let watch = crate::pgstat::watch(pool).await?;
    let started = Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["post-fleet", "--url", &server.base])
        .args(["--gpus", &gpus.to_string(), "--days", &days.to_string()])
        .args(["--seed", &seed.to_string(), "--from"])
        .arg(month.start().to_rfc3339())
        .args(["--concurrency", &concurrency.to_string()])
        .env("SLICEMETER_TOKEN", &token)
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
    let posted = report.await??;
    let elapsed = started.elapsed();
    let server_kib = peak_rss_kib(std::process::id()).unwrap_or(0);
    server.stop().await?;
    println!(
        "posted {gpus} GPUs x {days} days through HTTP: {} windows in {:.1} s ({:.0} windows/s)",
        posted.windows,
        elapsed.as_secs_f64(),
        posted.windows as f64 / elapsed.as_secs_f64()
    );
    println!("day          windows    seconds   windows/s   x day 1");
    // A day that took under a second (a smoke run's) says nothing of a rate.
    let timed: Vec<&DayPosted> = posted.days.iter().filter(|d| d.seconds >= 1.0).collect();
    let first = timed.first().map(|d| d.rate());
    for d in &posted.days {
        match first.filter(|_| d.seconds >= 1.0) {
            Some(first) => println!(
                "{}  {:>9}  {:>9.1}  {:>10.0}   {:>6.2}x",
                d.day.format("%Y-%m-%d"),
                d.windows,
                d.seconds,
                d.rate(),
                d.rate() / first
            ),
            None => println!(
                "{}  {:>9}  {:>9.1}  (under a second)",
                d.day.format("%Y-%m-%d"),
                d.windows,
                d.seconds
            ),
        }
    }
    match (timed.first(), timed.last()) {
        (Some(f), Some(l)) => println!(
            "last day / first day: {:.2}x the windows per second",
            l.rate() / f.rate()
        ),
        _ => println!("last day / first day: no day took a second, too short to say"),
    }
    println!(
        "peak resident memory: simulator {} MiB, server {} MiB",
        posted.peak_kib / 1024,
        server_kib / 1024
    );
    watch.print().await
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
    let fleet = SimFleet::generate(args.seed, args.gpus);
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
