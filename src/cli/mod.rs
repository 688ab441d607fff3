//! The `slicemeter` command line: one module per subcommand, each mapping its flags (with their
//! `SLICEMETER_*` environment fallbacks) onto the library's services. `main.rs` parses and
//! dispatches; `anyhow` is used only here, at the edge.

pub mod args;
pub mod collect;
pub mod demo;
pub mod export;
pub mod gpu;
pub mod import;
pub mod invoice;
pub mod migrate;
pub mod plan;
pub mod rate_card;
pub mod serve;
pub mod simulate;
pub mod token;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "slicemeter", version, about = "Chargeback for fractional GPUs")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Serve the API (applies migrations first).
    Serve(Box<serve::ServeArgs>),
    /// Measure a node's GPUs and ship occupancy windows to a server.
    Collect(collect::CollectArgs),
    /// Run everything on a private PostgreSQL with a month of a simulated fleet: the quick start.
    Demo(demo::DemoArgs),
    /// Apply the database migrations.
    Migrate(args::DbArgs),
    /// Generate a simulated fleet's batches in fast-forward, to a file or a server.
    Simulate(simulate::SimulateArgs),
    /// Create, list or revoke API tokens.
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
    /// Back-fill past months from what the fleet already runs (Prometheus and dcgm-exporter).
    Import {
        #[command(subcommand)]
        command: import::ImportCommand,
    },
    /// Move a GPU to another node (only that node's collector reports it from then on).
    Gpu {
        #[command(subcommand)]
        command: gpu::GpuCommand,
    },
    /// Publish rate card versions.
    RateCard {
        #[command(subcommand)]
        command: rate_card::RateCardCommand,
    },
    /// Make and issue invoices.
    Invoice {
        #[command(subcommand)]
        command: invoice::InvoiceCommand,
    },
    /// Export a month for finance: FOCUS 1.2 (or 1.0) cost data or ERP journal lines, as CSV.
    Export {
        #[command(subcommand)]
        command: export::ExportCommand,
    },
    /// Plan the MIG cards' consolidation: each model's instances on the fewest cards (advice only).
    Plan(plan::PlanArgs),
    /// Print the OpenAPI document the code describes.
    Openapi,
}
