//! The dashboard's own queries: sign-in sessions, a team's slices over a month, and the fleet's daily
//! capacity.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;

use crate::domain::team::TeamId;
use crate::domain::time::Month;

/// Opens a session for an API token until `expires_at`.
pub async fn create_session(
    pool: &PgPool,
    hash: &[u8; 32],
    token_id: i64,
    expires_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into ui_session (session_hash, api_token_id, expires_at) values ($1, $2, $3)",
        &hash[..],
        token_id,
        expires_at
    )
    .execute(pool)
    .await?;
    // Sign-ins are rare: a good moment to forget expired sessions.
    sqlx::query!("delete from ui_session where expires_at < now() - interval '1 day'")
        .execute(pool)
        .await?;
    Ok(())
}

/// A live session: the token it acts with.
pub struct SessionToken {
    pub token_id: i64,
    pub role: String,
    pub team_id: Option<String>,
    pub node: Option<String>,
}

/// The token behind an unexpired session whose token is neither revoked nor expired.
pub async fn session(
    pool: &PgPool,
    hash: &[u8; 32],
    now: DateTime<Utc>,
) -> Result<Option<SessionToken>, sqlx::Error> {
    sqlx::query_as!(
        SessionToken,
        "select t.api_token_id as token_id, t.role, t.team_id, t.node
         from ui_session s join api_token t using (api_token_id)
         where s.session_hash = $1 and s.expires_at > $2
           and t.revoked_at is null and (t.expires_at is null or t.expires_at > $2)",
        &hash[..],
        now
    )
    .fetch_optional(pool)
    .await
}

pub async fn delete_session(pool: &PgPool, hash: &[u8; 32]) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ui_session where session_hash = $1", &hash[..])
        .execute(pool)
        .await?;
    Ok(())
}

/// One slice a team held during `[from, to)`, under one rate card version.
#[derive(Debug, Clone)]
pub struct TeamSlice {
    pub slice_uuid: String,
    pub model: String,
    pub kind: String,
    pub profile: Option<String>,
    pub node: String,
    pub rate_card: Option<i64>,
    pub windows: i64,
    pub held_seconds: Decimal,
    pub known_seconds: Decimal,
    pub active_seconds: Decimal,
    pub memory_byte_seconds: Decimal,
    pub compute_share: Decimal,
    pub memory_share: Decimal,
    pub memory_reserved_bytes: i64,
}

/// The slices `team` held in `month`, from the month's books or the rollups, per rate card version.
pub async fn team_slices(
    pool: &PgPool,
    team: &TeamId,
    month: Month,
    from_book: bool,
) -> Result<Vec<TeamSlice>, sqlx::Error> {
    sqlx::query_as!(
        TeamSlice,
        r#"select d.slice_uuid as "slice_uuid!", d.model as "model!", d.kind as "kind!", d.profile,
                  d.node as "node!", d.rate_card_id as "rate_card?",
                  sum(d.windows)::int8 as "windows!",
                  sum(d.held_seconds) as "held_seconds!",
                  sum(d.known_seconds) as "known_seconds!",
                  sum(d.active_seconds) as "active_seconds!",
                  sum(d.memory_byte_seconds) as "memory_byte_seconds!",
                  d.compute_share as "compute_share!", d.memory_share as "memory_share!",
                  d.memory_reserved_bytes as "memory_reserved_bytes!"
           from period_slice_day($1, $2) d
           where d.team_id = $3
           group by d.slice_uuid, d.model, d.kind, d.profile, d.node, d.rate_card_id,
                    d.compute_share, d.memory_share, d.memory_reserved_bytes
           order by d.slice_uuid, d.rate_card_id"#,
        month.first_day(),
        from_book,
        team.as_str()
    )
    .fetch_all(pool)
    .await
}

/// GPU-hours present per day of `[from, to)`: the fleet's capacity.
pub async fn capacity_by_day(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<(DateTime<Utc>, Decimal)>, sqlx::Error> {
    Ok(sqlx::query!(
        r#"select date_trunc('day', hour, 'UTC') as "day!", sum(present_seconds) / 3600 as "hours!"
           from gpu_hourly where hour >= $1 and hour < $2 group by 1 order by 1"#,
        from,
        to
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.day, r.hours))
    .collect())
}
