//! `slicemeter rate-card load`: publishes a rate card version from a TOML file.

use std::path::PathBuf;

use clap::Subcommand;

use super::args::DbArgs;
use crate::billing::service as billing;
use crate::db;
use crate::domain::access::Actor;

#[derive(Subcommand)]
pub enum RateCardCommand {
    /// Publish the version in a TOML file (see deploy/rate-card.example.toml).
    Load {
        #[command(flatten)]
        db: DbArgs,
        file: PathBuf,
    },
}

pub async fn run(command: RateCardCommand) -> anyhow::Result<()> {
    match command {
        RateCardCommand::Load { db, file } => {
            let pool = db::connect(&db.database_url, 2).await?;
            db::migrate(&pool).await?;
            let id = billing::load_rate_card(&pool, &file, &Actor::CLI).await?;
            println!("rate card version {id} published from {}", file.display());
        }
    }
    Ok(())
}
