//! The `slicemeter` command: parses its arguments and dispatches to the subcommand's module in
//! `slicemeter::cli`.

use clap::Parser;
use slicemeter::cli::{
    Cli, Command, collect, demo, export, gpu, import, invoice, migrate, plan, rate_card, serve,
    simulate, token, unit,
};

/// mimalloc rather than glibc's malloc: ingest allocates for every JSON value and row, and glibc's
/// malloc and free were a tenth of the server's CPU on hour-long batches (measured with slicemeter-bench ingest, 2026-12-04).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    slicemeter::process::init_tracing();
    match Cli::parse().command {
        Command::Serve(args) => serve::run(*args).await,
        Command::Collect(args) => collect::run(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Migrate(args) => migrate::run(args).await,
        Command::Simulate(args) => simulate::run(args).await,
        Command::Token { command } => token::run(command).await,
        Command::Gpu { command } => gpu::run(command).await,
        Command::Import { command } => import::run(command).await,
        Command::RateCard { command } => rate_card::run(command).await,
        Command::Unit { command } => unit::run(command).await,
        Command::Invoice { command } => invoice::run(command).await,
        Command::Export { command } => export::run(command).await,
        Command::Plan(args) => plan::run(args).await,
        Command::Openapi => {
            println!("{}", slicemeter::http::openapi().to_pretty_json()?);
            Ok(())
        }
    }
}
