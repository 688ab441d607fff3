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
use slicemeter::reports::exports::{self, ExportConfig};
use slicemeter::reports::focus::Version;
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
    for &gpus in &sizes {
        let results = &mut results;
        in_scratch_schema(args.database_url.as_deref(), 8, |pool, scoped| async move {
            let rollups = load_month(&pool, gpus, args.seed, month).await?;
            let out = tempfile_path(&format!("focus-{gpus}.csv"));
            let started = Instant::now();
            // This binary again, as a process of its own: its peak memory is the export's alone.
            let mut child = std::process::Command::new(std::env::current_exe()?)
                .args(["focus-child", "--period", &month.to_string(), "--out"])
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
            anyhow::ensure!(
                text.lines().count() > 1,
                "the export of {gpus} GPUs has no rows"
            );
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
