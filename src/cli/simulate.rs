//! `slicemeter simulate`: a simulated fleet's batches in fast-forward, to a file or a server.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use chrono::{NaiveDate, Utc};
use clap::Args;

use super::args::{CadenceArgs, SimFleetArgs};
use crate::collector::shipper::Shipper;
use crate::domain::time::start_of;
use crate::sim::generate;

#[derive(Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub fleet: SimFleetArgs,
    /// Days to generate.
    #[arg(long, default_value_t = 1)]
    pub days: u32,
    /// First day (UTC midnight); default: `days` days before today.
    #[arg(long)]
    pub start: Option<NaiveDate>,
    #[command(flatten)]
    pub cadence: CadenceArgs,
    /// Time one batch reports on: consecutive windows are sent together.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub batch_period: Duration,
    /// Write batches as JSON lines to this file (`-` for standard output).
    #[arg(long, conflicts_with = "post", required_unless_present = "post")]
    pub out: Option<PathBuf>,
    /// Post batches to this server.
    #[arg(long)]
    pub post: Option<String>,
    /// An admin token (with --post).
    #[arg(
        long,
        env = "SLICEMETER_TOKEN",
        hide_env_values = true,
        requires = "post"
    )]
    pub token: Option<String>,
    /// Batches in flight at once (with --post).
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
}

pub async fn run(args: SimulateArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let cadence = args.cadence.cadence(args.batch_period)?;
    let fleet = args.fleet.fleet();
    let start = match args.start {
        Some(d) => start_of(d),
        None => start_of(Utc::now().date_naive()) - chrono::Duration::days(i64::from(args.days)),
    };
    let end = start + chrono::Duration::days(i64::from(args.days));
    let bar = generate::progress(
        generate::expected_batches(&fleet, start, end, cadence.batch_period),
        "simulating",
    );
    let started = std::time::Instant::now();
    if let Some(out) = &args.out {
        let writer: Box<dyn Write> = if out.as_os_str() == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(
                std::fs::File::create(out)
                    .with_context(|| format!("creating {}", out.display()))?,
            )
        };
        let mut writer = std::io::BufWriter::with_capacity(1 << 20, writer);
        let mut failed = None;
        let mut windows = 0u64;
        generate::generate(&fleet, start, end, cadence, |node_day| {
            for b in &node_day {
                windows += b.windows.len() as u64;
                if let Err(e) = serde_json::to_writer(&mut writer, b)
                    .map_err(std::io::Error::from)
                    .and_then(|_| writer.write_all(b"\n"))
                {
                    failed = Some(e);
                    return false;
                }
            }
            bar.inc(node_day.len() as u64);
            true
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        writer.flush()?;
        bar.finish_and_clear();
        eprintln!(
            "{} windows of {} GPUs over {} days written in {:.1} s, peak resident memory {}",
            windows,
            args.fleet.gpus,
            args.days,
            started.elapsed().as_secs_f64(),
            peak_memory()
        );
    } else if let Some(server) = &args.post {
        let token = args
            .token
            .as_deref()
            .context("--post needs --token (an admin token)")?;
        let shipper = Shipper::new(server, token)?;
        let totals = generate::generate_and_ingest(
            fleet,
            start,
            end,
            cadence,
            args.concurrency.max(1),
            bar,
            |b| {
                let shipper = shipper.clone();
                async move { shipper.send_with_retry(&b).await }
            },
        )
        .await?;
        eprintln!(
            "{} batches posted: {} windows new, {} already stored, in {:.1} s, peak resident memory {}",
            totals.batches,
            totals.inserted,
            totals.duplicates,
            started.elapsed().as_secs_f64(),
            peak_memory()
        );
    }
    Ok(())
}

/// This process's peak resident memory, in MiB, as `/proc` says it.
fn peak_memory() -> String {
    crate::process::peak_rss_kib(std::process::id())
        .map_or_else(|| "unknown".to_owned(), |kib| format!("{} MiB", kib / 1024))
}
