//! `slicemeter export`: a month's FOCUS rows or ERP journal lines, as CSV.

use std::io::Write;
use std::path::PathBuf;

use clap::Subcommand;

use super::args::{DbArgs, ExportArgs, output};
use crate::db;
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::exports::focus::Version;
use crate::exports::service as exports;
use crate::reports::service::ReportCache;

#[derive(Subcommand)]
pub enum ExportCommand {
    /// FOCUS rows of a month (1.2 unless `--focus-version 1.3` or `1.0`).
    Focus {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        period: Month,
        /// `1.2`, `1.3` or `1.0`.
        #[arg(long, default_value = "1.2", value_parser = Version::parse)]
        focus_version: Version,
        /// Only this team's rows.
        #[arg(long)]
        team: Option<String>,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        exports: ExportArgs,
    },
    /// Balanced journal lines of a month's issued invoices.
    Erp {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        period: Month,
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        exports: ExportArgs,
    },
}

pub async fn run(command: ExportCommand) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    match command {
        ExportCommand::Focus {
            db,
            period,
            focus_version,
            team,
            out,
            exports,
        } => {
            let pool = db::connect(&db.database_url, 4).await?;
            let team = team.as_deref().map(TeamId::parse).transpose()?;
            // One export: nothing to keep between reads.
            let cache = std::sync::Arc::new(ReportCache::new(std::time::Duration::ZERO));
            let config = std::sync::Arc::new(exports.config()?);
            let mut stream =
                Box::pin(exports::focus(&pool, &cache, period, team, config, focus_version).await?);
            let mut sink = output(out.as_ref())?;
            while let Some(chunk) = stream.next().await {
                sink.write_all(&chunk?)?;
            }
            sink.flush()?;
        }
        ExportCommand::Erp {
            db,
            period,
            out,
            exports,
        } => {
            let pool = db::connect(&db.database_url, 2).await?;
            let csv = exports::erp(&pool, period, &exports.config()?).await?;
            let mut sink = output(out.as_ref())?;
            sink.write_all(&csv)?;
            sink.flush()?;
        }
    }
    Ok(())
}
