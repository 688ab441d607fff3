//! `slicemeter migrate`: applies the embedded migrations.

use super::args::DbArgs;
use crate::db;

pub async fn run(args: DbArgs) -> anyhow::Result<()> {
    let pool = db::connect(&args.database_url, 2).await?;
    db::migrate(&pool).await?;
    println!("migrations applied");
    Ok(())
}
