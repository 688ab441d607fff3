//! `export`: peak memory and time of a month's FOCUS export for fleets of several sizes, each run in
//! a process of its own (`focus-child`: this binary again, streaming the export the way `slicemeter
//! export focus` does) so that its peak resident memory is its own.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::StreamExt;
use slicemeter::db;
use slicemeter::domain::time::Month;
use slicemeter::exports::focus::Version;
use slicemeter::exports::service::{self as exports, ExportConfig};
use slicemeter::reports::service::ReportCache;

use crate::common::{in_scratch_schema, load_month, peak_rss_kib, tempfile_path};

#[derive(Debug, clap::Args)]
pub struct ExportBenchArgs {
    /// The database to work in (a scratch schema per fleet size is created and dropped); without one, a private PostgreSQL is started for the run.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Fleet sizes to compare, the smallest first.
    #[arg(long, value_delimiter = ',', default_value = "10,1000")]
    pub gpus: Vec<usize>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Sizes that run in seconds (4 and 8 GPUs): CI runs them so that the benchmark cannot rot.
    #[arg(long)]
    pub smoke: bool,
    /// Another build's `slicemeter-bench` (an earlier commit's, say): each month is also exported
    /// by it, right after this build's export of the same rows, and the two are printed together.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
}

/// One measured export: FOCUS rows, CSV bytes, peak resident KiB, time.
#[derive(Debug, Clone, Copy)]
struct Measured {
    rows: usize,
    bytes: usize,
    peak_kib: u64,
    elapsed: Duration,
}

/// Runs `exe focus-child` on `month` of the database at `scoped` and measures it.
async fn measure(
    exe: &std::path::Path,
    month: Month,
    scoped: &str,
    gpus: usize,
) -> anyhow::Result<Measured> {
    let out = tempfile_path(&format!("focus-{gpus}.csv"));
    let started = Instant::now();
    // A process of its own: its peak memory is the export's alone.
    let mut child = std::process::Command::new(exe)
        .args(["focus-child", "--period", &month.to_string(), "--out"])
        .arg(&out)
        .env("DATABASE_URL", scoped)
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
    anyhow::ensure!(status.success(), "the export by {exe:?} failed: {status}");
    let elapsed = started.elapsed();
    let text = std::fs::read_to_string(&out)?;
    std::fs::remove_file(&out).ok();
    let rows = text.lines().count().saturating_sub(1);
    anyhow::ensure!(rows > 0, "the export of {gpus} GPUs by {exe:?} has no rows");
    Ok(Measured {
        rows,
        bytes: text.len(),
        peak_kib,
        elapsed,
    })
}

/// The export one measured process runs.
#[derive(Debug, clap::Args)]
pub struct FocusChildArgs {
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    #[arg(long)]
    pub period: Month,
    #[arg(long)]
    pub out: PathBuf,
}

/// Streams a month's FOCUS rows to a file, as `slicemeter export focus` does.
pub async fn focus_child(args: FocusChildArgs) -> anyhow::Result<()> {
    let pool = db::connect(&args.database_url, 4).await?;
    let cache = std::sync::Arc::new(ReportCache::new(std::time::Duration::ZERO));
    let config = Arc::new(ExportConfig::default());
    let mut stream = Box::pin(
        exports::focus(&pool, &cache, args.period, None, config, Version::default()).await?,
    );
    let mut out = std::io::BufWriter::new(std::fs::File::create(&args.out)?);
    while let Some(chunk) = stream.next().await {
        out.write_all(&chunk?)?;
    }
    out.flush()?;
    Ok(())
}

pub async fn export(args: ExportBenchArgs) -> anyhow::Result<()> {
    let month = Month::of(Utc::now()).minus(1);
    let mut results = Vec::new();
    let sizes = if args.smoke {
        vec![4, 8]
    } else {
        args.gpus.clone()
    };
    let baseline = args.baseline.as_deref();
    for &gpus in &sizes {
        let results = &mut results;
        in_scratch_schema(args.database_url.as_deref(), 8, |pool, scoped| async move {
            let rollups = load_month(&pool, gpus, args.seed, month).await?;
            let this = measure(&std::env::current_exe()?, month, &scoped, gpus).await?;
            let before = match baseline {
                Some(exe) => Some(measure(exe, month, &scoped, gpus).await?),
                None => None,
            };
            results.push((gpus, rollups, this, before));
            Ok(())
        })
        .await?;
    }
    println!("build      GPUs   rollup rows   FOCUS rows   CSV bytes     peak RSS    time");
    let line = |build: &str, gpus: usize, rollups: i64, m: &Measured| {
        println!(
            "{build:<10} {gpus:<6} {rollups:>11}   {:>10}   {:>11}   {:>7.1} MiB   {:.2} s",
            m.rows,
            m.bytes,
            m.peak_kib as f64 / 1024.0,
            m.elapsed.as_secs_f64()
        );
    };
    for (gpus, rollups, this, before) in &results {
        line("this", *gpus, *rollups, this);
        if let Some(b) = before {
            line("baseline", *gpus, *rollups, b);
            println!(
                "{gpus} GPUs: this build takes {:.2}x the baseline's time",
                this.elapsed.as_secs_f64() / b.elapsed.as_secs_f64().max(1e-9)
            );
        }
    }
    if let (Some(first), Some(last)) = (results.first(), results.last()) {
        println!(
            "peak RSS ratio {} GPUs / {} GPUs: {:.2} for {:.0}x the rows",
            last.0,
            first.0,
            last.2.peak_kib as f64 / first.2.peak_kib.max(1) as f64,
            last.2.rows as f64 / first.2.rows.max(1) as f64
        );
    }
    Ok(())
}
