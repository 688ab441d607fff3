//! The `slicemeter` command line: one module per subcommand, each mapping its flags (with their
//! `SLICEMETER_*` environment fallbacks) onto the library's services. `main.rs` parses and
//! dispatches; `anyhow` is used only here, at the edge.

pub mod args;
pub mod collect;
pub mod demo;
mod demo_prometheus;
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
pub mod unit;

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
    /// Define units of work (cost per million tokens, per inference) from a TOML file.
    Unit {
        #[command(subcommand)]
        command: unit::UnitCommand,
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

/// The configuration table of `docs/operations.md`: a row per flag and argument of every
/// subcommand, read from clap's definitions (the flag, its environment variable, its default and
/// its help), so that the manual cannot drift from `--help`. `tests/docs.rs` compares the two.
pub fn config_table() -> String {
    use clap::CommandFactory;
    let mut out =
        String::from("| command | flag | env | default | meaning |\n|---|---|---|---|---|\n");
    let cli = Cli::command();
    for sub in cli.get_subcommands() {
        config_rows(sub, sub.get_name(), &mut out);
    }
    out
}

fn config_rows(cmd: &clap::Command, path: &str, out: &mut String) {
    let cell = |s: &str| {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace('|', "\\|")
    };
    if cmd.is_hide_set() {
        return;
    }
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.is_hide_set() || id == "help" || id == "version" {
            continue;
        }
        let flag = match arg.get_long() {
            Some(long) => format!("`--{long}`"),
            None => format!("`<{}>`", id.to_uppercase()),
        };
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let takes_value = !matches!(
            arg.get_action(),
            clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count
        );
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = if !takes_value {
            String::new()
        } else if arg.is_required_set() {
            "(required)".to_owned()
        } else if defaults.is_empty() {
            String::new()
        } else {
            format!("`{}`", defaults.join(","))
        };
        let mut help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| cell(&h.to_string()))
            .unwrap_or_default();
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if takes_value && !values.is_empty() {
            help = format!("{help} (one of {})", values.join(", "))
                .trim_start()
                .to_owned();
        }
        out.push_str(&format!(
            "| {path} | {flag} | {env} | {default} | {help} |\n"
        ));
    }
    for sub in cmd.get_subcommands() {
        config_rows(sub, &format!("{path} {}", sub.get_name()), out);
    }
}
