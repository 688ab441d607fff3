//! `slicemeter token`: create, revoke and list API tokens.

use std::time::Duration;

use anyhow::bail;
use chrono::{DateTime, Utc};
use clap::Subcommand;

use super::args::DbArgs;
use crate::auth::store as tokens;
use crate::db;
use crate::domain::access::{Actor, Role};
use crate::domain::team::TeamId;

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Create a token; it is printed once and only its hash is stored.
    Create {
        #[command(flatten)]
        db: DbArgs,
        /// What the token may do.
        #[arg(long, value_enum)]
        role: Role,
        /// The team of a team_lead token.
        #[arg(long)]
        team: Option<String>,
        /// The node of a collector token.
        #[arg(long)]
        node: Option<String>,
        /// A note on what the token is for.
        #[arg(long)]
        label: Option<String>,
        /// Expire after this long (e.g. 90d).
        #[arg(long, value_parser = humantime::parse_duration)]
        expires_in: Option<Duration>,
    },
    /// Revoke a token by its id (the number after `smt_`).
    Revoke {
        #[command(flatten)]
        db: DbArgs,
        /// The token's id (the number after `smt_`).
        id: i64,
    },
    /// List tokens (never their secrets).
    List {
        #[command(flatten)]
        db: DbArgs,
    },
}

pub async fn run(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create {
            db,
            role,
            team,
            node,
            label,
            expires_in,
        } => {
            let pool = db::connect(&db.database_url, 2).await?;
            db::migrate(&pool).await?;
            let team = team.as_deref().map(TeamId::parse).transpose()?;
            let expires_at: Option<DateTime<Utc>> = expires_in
                .map(|d| chrono::Duration::from_std(d).map(|d| Utc::now() + d))
                .transpose()?;
            let (id, token) = tokens::create(
                &pool,
                role,
                team.as_ref(),
                node.as_deref(),
                label.as_deref(),
                expires_at,
                &Actor::CLI,
            )
            .await?;
            eprintln!("token {id} ({role}) created; it is shown once:");
            println!("{token}");
        }
        TokenCommand::Revoke { db, id } => {
            let pool = db::connect(&db.database_url, 2).await?;
            if tokens::revoke(&pool, id, &Actor::CLI).await? {
                println!("token {id} revoked");
            } else {
                bail!("there is no unrevoked token {id}");
            }
        }
        TokenCommand::List { db } => {
            let pool = db::connect(&db.database_url, 2).await?;
            println!("id\trole\tteam\tnode\tcreated\texpires\trevoked\tlabel");
            for t in tokens::list(&pool, None).await? {
                let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    t.id,
                    t.role,
                    opt(t.team_id.map(String::from)),
                    opt(t.node),
                    t.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
                    opt(t.expires_at.map(|e| e.to_rfc3339())),
                    opt(t.revoked_at.map(|e| e.to_rfc3339())),
                    opt(t.label)
                );
            }
        }
    }
    Ok(())
}
