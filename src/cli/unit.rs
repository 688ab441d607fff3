//! `slicemeter unit apply`: puts unit definitions from a TOML file (deploy/units.example.toml),
//! checked as `PUT /v1/unit-definitions/{name}` checks them and audited as it is (`unit.put`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;

use super::args::DbArgs;
use crate::db;
use crate::domain::access::Actor;
use crate::units::{self, store};

#[derive(Subcommand)]
pub enum UnitCommand {
    /// Define, or redefine, every unit in a TOML file (see deploy/units.example.toml); a file with
    /// a bad field stores nothing, and units it does not name are left as they are.
    Apply {
        #[command(flatten)]
        db: DbArgs,
        file: PathBuf,
    },
}

pub async fn run(command: UnitCommand) -> anyhow::Result<()> {
    match command {
        UnitCommand::Apply { db, file } => {
            let name = file.display();
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {name}"))?;
            let defs = units::from_toml(&text).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            let pool = db::connect(&db.database_url, 2).await?;
            db::migrate(&pool).await?;
            for def in &defs {
                let replaced = store::put(&pool, def, &Actor::CLI).await?;
                let what = if replaced { "redefined" } else { "defined" };
                println!("unit {} {what} from {name}", def.name);
            }
        }
    }
    Ok(())
}
