//! `slicemeter-bench`: benchmarks that print figures, each against a baseline measured in the same
//! run, each in a scratch schema dropped at the end. A binary of its own, not part of the product's;
//! every benchmark has a `--smoke` size that CI runs, so that none can rot.

mod billing;
mod common;
mod export;
mod fill;
mod ingest;
mod load;
mod pages;
mod pgstat;
mod plan;
mod scale;
mod sources;
mod units;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "slicemeter-bench", about = "slicemeter's benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// HTTP ingest of simulated batches against a plain COPY of the same rows, in one run.
    Ingest(ingest::IngestBenchArgs),
    /// An invoice run over a simulated month against one GROUP BY over the same rollups.
    Billing(billing::BillingBenchArgs),
    /// Peak memory and time of a month's FOCUS export, for fleets of several sizes.
    Export(export::ExportBenchArgs),
    /// Many simulated collectors against one server on loopback, after a one-collector baseline.
    Load(load::LoadBenchArgs),
    /// The fleet dashboard page's bytes and server time, plain and gzip'd, against a bar per GPU.
    Pages(pages::PagesBenchArgs),
    /// Right-sizing and the consolidation plan over a fleet of MIG cards, with peak memory.
    Plan(plan::PlanBenchArgs),
    /// A month of a large fleet written into the rollups with SQL, read as finance reads it.
    Scale(scale::ScaleBenchArgs),
    /// One scrape of a dcgm-exporter page, and `import prometheus` of a month from a real Prometheus.
    Sources(sources::SourcesBenchArgs),
    /// The unit cost of a month for every team, against a real Prometheus serving vLLM counters.
    Units(units::UnitsBenchArgs),
    /// The process `export` measures (not for people).
    #[command(hide = true)]
    FocusChild(export::FocusChildArgs),
    /// The simulator `scale` posts a month with, a process of its own (not for people).
    #[command(hide = true)]
    PostFleet(fill::PostFleetArgs),
}

/// mimalloc rather than glibc's malloc: ingest allocates for every JSON value and row, and glibc's
/// malloc and free were a tenth of the server's CPU on hour-long batches (measured with slicemeter-bench ingest, 2026-12-04).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    slicemeter::process::init_tracing();
    match Cli::parse().command {
        Command::Ingest(args) => ingest::ingest(args).await,
        Command::Billing(args) => billing::billing(args).await,
        Command::Export(args) => export::export(args).await,
        Command::Load(args) => load::load(args).await,
        Command::Pages(args) => pages::pages(args).await,
        Command::Plan(args) => plan::plan(args).await,
        Command::Scale(args) => scale::scale(args).await,
        Command::Sources(args) => sources::sources(args).await,
        Command::Units(args) => units::units(args).await,
        Command::FocusChild(args) => export::focus_child(args).await,
        Command::PostFleet(args) => fill::post_fleet(args).await,
    }
}
