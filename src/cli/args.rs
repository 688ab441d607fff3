//! Arguments more than one subcommand takes, and where a command's output goes.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

use crate::collector::Cadence;
use crate::exports::erp::{Layout, Platform};
use crate::exports::focus::Issuer;
use crate::exports::service::ExportConfig;
use crate::sim::SimFleet;

#[derive(Args)]
pub struct DbArgs {
    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
}

#[derive(Args)]
pub struct ExportArgs {
    /// FOCUS BillingAccountId of every row.
    #[arg(
        long,
        env = "SLICEMETER_BILLING_ACCOUNT_ID",
        default_value = "slicemeter"
    )]
    pub billing_account_id: String,
    /// FOCUS BillingAccountName.
    #[arg(
        long,
        env = "SLICEMETER_BILLING_ACCOUNT_NAME",
        default_value = "GPU chargeback"
    )]
    pub billing_account_name: String,
    /// FOCUS InvoiceIssuerName, ProviderName and PublisherName: the team running the GPUs.
    #[arg(long, env = "SLICEMETER_ISSUER_NAME", default_value = "GPU Platform")]
    pub issuer_name: String,
    /// Cost center the journal credits with what teams are charged.
    #[arg(
        long,
        env = "SLICEMETER_PLATFORM_COST_CENTER",
        default_value = "GPU-PLATFORM"
    )]
    pub platform_cost_center: String,
    /// GL account of that credit.
    #[arg(long, env = "SLICEMETER_PLATFORM_GL_ACCOUNT", default_value = "6490")]
    pub platform_gl_account: String,
    /// A TOML file naming and ordering the journal's columns (see deploy/erp-layout.example.toml).
    #[arg(long, env = "SLICEMETER_ERP_LAYOUT")]
    pub erp_layout: Option<PathBuf>,
}

impl ExportArgs {
    pub fn config(&self) -> anyhow::Result<ExportConfig> {
        let erp_layout = match &self.erp_layout {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                Layout::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
            }
            None => Layout::default(),
        };
        Ok(ExportConfig {
            issuer: Issuer {
                billing_account_id: self.billing_account_id.clone(),
                billing_account_name: self.billing_account_name.clone(),
                name: self.issuer_name.clone(),
                ..Issuer::default()
            },
            platform: Platform {
                cost_center: self.platform_cost_center.clone(),
                gl_account: self.platform_gl_account.clone(),
            },
            erp_layout,
        })
    }
}

#[derive(Args)]
pub struct CadenceArgs {
    /// How often to sample.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub sample_interval: Duration,
    /// Length of an occupancy window.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub window: Duration,
}

impl CadenceArgs {
    pub fn cadence(&self, batch_period: Duration) -> anyhow::Result<Cadence> {
        if self.sample_interval.is_zero() || self.window < self.sample_interval {
            bail!("--window must be at least --sample-interval, and both above zero");
        }
        Ok(Cadence {
            sample_interval: self.sample_interval,
            window: self.window,
            batch_period: batch_period.max(self.window),
        })
    }
}

#[derive(Args)]
pub struct SimFleetArgs {
    /// Seed of the simulated fleet: the same seed gives the same fleet and figures.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// GPUs in the simulated fleet (nodes of four).
    #[arg(long, default_value_t = 16)]
    pub gpus: usize,
    /// Its nodes are `<prefix>-01`, `<prefix>-02`, ...: fleets of other seeds can share one
    /// database under other prefixes.
    #[arg(long, default_value = "gpu-node", value_parser = node_prefix)]
    pub node_prefix: String,
}

impl SimFleetArgs {
    pub fn fleet(&self) -> SimFleet {
        SimFleet::generate(self.seed, self.gpus).with_node_prefix(&self.node_prefix)
    }

    /// The name of its first node.
    pub fn first_node(&self) -> String {
        format!("{}-01", self.node_prefix)
    }
}

/// A prefix that makes node names (letters, digits, `.`, `-`, `_`; room for the number).
fn node_prefix(s: &str) -> Result<String, String> {
    if crate::domain::batch::is_node_name(&format!("{s}-0000")) {
        Ok(s.to_owned())
    } else {
        Err("a node prefix has 1 to 248 letters, digits, '.', '-' or '_'".to_owned())
    }
}

/// A file to write to, or standard output.
pub fn output(out: Option<&PathBuf>) -> anyhow::Result<Box<dyn std::io::Write + Send>> {
    Ok(match out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::stdout()),
    })
}
