//! `slicemeter gpu move`: registers a GPU to another node, on the record.

use anyhow::bail;
use clap::Subcommand;

use super::args::DbArgs;
use crate::db;
use crate::domain::access::Actor;
use crate::domain::batch::is_node_name;
use crate::fleet;

#[derive(Subcommand)]
pub enum GpuCommand {
    /// Register a GPU to another node, on the record (audited as `gpu.move`).
    Move {
        #[command(flatten)]
        db: DbArgs,
        /// The GPU's uuid, as NVML reports it.
        uuid: String,
        /// The node that reports it from now on.
        #[arg(long)]
        node: String,
    },
}

pub async fn run(command: GpuCommand) -> anyhow::Result<()> {
    match command {
        GpuCommand::Move { db, uuid, node } => {
            if !is_node_name(&node) {
                bail!("{node:?} is not a node name: use 1 to 253 letters, digits, '.', '-' or '_'");
            }
            let pool = db::connect(&db.database_url, 2).await?;
            db::migrate(&pool).await?;
            match fleet::move_gpu(&pool, &uuid, &node, &Actor::CLI).await? {
                Some(g) => println!("{} now belongs to node {}", g.gpu_uuid, g.node),
                None => bail!("there is no GPU {uuid}"),
            }
        }
    }
    Ok(())
}
