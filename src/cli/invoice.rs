//! `slicemeter invoice`: makes a period's drafts and issues them, through the same billing service
//! calls as the API.

use std::time::Duration;

use chrono::Utc;
use clap::Subcommand;

use super::args::DbArgs;
use crate::billing::service::{self as billing, BillingConfig};
use crate::db;
use crate::domain::access::Actor;
use crate::domain::time::Month;

#[derive(Subcommand)]
pub enum InvoiceCommand {
    /// Make or replace the drafts of a period for every team with usage.
    Run {
        #[command(flatten)]
        db: DbArgs,
        /// The month, YYYY-MM.
        #[arg(long)]
        period: Month,
    },
    /// Issue every draft of a period in one transaction: numbers are given in team order.
    Issue {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        period: Month,
        /// How long after a month ends its invoices wait for late data.
        #[arg(long, env = "SLICEMETER_ISSUE_GRACE", default_value = "1d", value_parser = humantime::parse_duration)]
        issue_grace: Duration,
    },
}

pub async fn run(command: InvoiceCommand) -> anyhow::Result<()> {
    match command {
        InvoiceCommand::Run { db, period } => {
            let pool = db::connect(&db.database_url, 4).await?;
            db::migrate(&pool).await?;
            let run = billing::run_drafts(&pool, period, Utc::now(), &Actor::CLI).await?;
            println!("id\tteam\tperiod\tstatus\ttotal\tcurrency\tlines");
            for i in &run.drafts {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    i.id,
                    i.team,
                    i.period,
                    i.status,
                    i.total,
                    i.currency,
                    i.lines.len()
                );
            }
            for team in &run.already_issued {
                eprintln!(
                    "{team}: the invoice for {period} is already issued; changes go to its next invoice"
                );
            }
        }
        InvoiceCommand::Issue {
            db,
            period,
            issue_grace,
        } => {
            let pool = db::connect(&db.database_url, 4).await?;
            db::migrate(&pool).await?;
            let config = BillingConfig {
                issue_grace: chrono::Duration::from_std(issue_grace)?,
            };
            let issued =
                billing::issue_period(&pool, period, Utc::now(), &config, &Actor::CLI).await?;
            for issued in issued {
                println!(
                    "{}\t{}\t{}\t{} {}",
                    issued.number.unwrap_or_default(),
                    issued.team,
                    issued.period,
                    issued.total,
                    issued.currency
                );
            }
        }
    }
    Ok(())
}
