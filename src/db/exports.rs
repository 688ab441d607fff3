//! Queries behind the exports: per (team, slice, day) usage rows, streamed in invoice-line order, and
//! per (model, rate card, day) fleet figures for the platform's rows.

use chrono::{DateTime, Utc};
use futures_util::Stream;
use futures_util::StreamExt;
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::domain::team::TeamId;
use crate::domain::time::Month;

/// One slice's occupancy on one day, for one team, under one rate card version.
#[derive(Debug, Clone)]
pub struct SliceDay {
    pub team: String,
    pub team_name: String,
    pub cost_center: Option<String>,
    pub model: String,
    pub kind: String,
    pub profile: Option<String>,
    pub rate_card: Option<i64>,
    pub slice_uuid: String,
    pub node: String,
    pub day: DateTime<Utc>,
    pub windows: i64,
    pub held_seconds: Decimal,
    pub known_seconds: Decimal,
    pub active_seconds: Decimal,
    pub memory_byte_seconds: Decimal,
    pub compute_share: Decimal,
    pub memory_share: Decimal,
    pub memory_reserved_bytes: i64,
}

/// Usage rows of `month`, from its books or the rollups (`from_book`), optionally of one team,
/// ordered by invoice line (team, model, kind, profile, rate card) then slice and day, streamed:
/// memory does not grow with the fleet.
pub fn slice_days<'c>(
    conn: &'c mut PgConnection,
    month: Month,
    from_book: bool,
    team: Option<&'c TeamId>,
) -> impl Stream<Item = Result<SliceDay, sqlx::Error>> + 'c {
    sqlx::query_as!(
        SliceDay,
        r#"select d.team_id as "team!", d.team_name as "team_name!", d.cost_center,
                  d.model as "model!", d.kind as "kind!", d.profile, d.rate_card_id as "rate_card?",
                  d.slice_uuid as "slice_uuid!", d.node as "node!", d.day as "day!",
                  d.windows as "windows!", d.held_seconds as "held_seconds!",
                  d.known_seconds as "known_seconds!", d.active_seconds as "active_seconds!",
                  d.memory_byte_seconds as "memory_byte_seconds!",
                  d.compute_share as "compute_share!", d.memory_share as "memory_share!",
                  d.memory_reserved_bytes as "memory_reserved_bytes!"
           from period_slice_day($1, $2) d
           where $3::text is null or d.team_id = $3
           order by d.team_id, d.model, d.kind, d.profile, d.rate_card_id, d.slice_uuid, d.day"#,
        month.first_day(),
        from_book,
        team.map(TeamId::as_str)
    )
    .fetch(conn)
    .map(|r| r)
}

/// A model's fleet figures for one day under one rate card: GPU-seconds present, and the share-
/// weighted held seconds of its slices (reserved and time-sliced apart).
#[derive(Debug, Clone)]
pub struct ModelDay {
    pub model: String,
    pub rate_card: Option<i64>,
    pub day: DateTime<Utc>,
    pub present_seconds: Decimal,
}

/// GPU presence per (model, rate card, day) of `month`, from its books or the rollups, ordered so.
pub async fn model_days(
    conn: &mut PgConnection,
    month: Month,
    from_book: bool,
) -> Result<Vec<ModelDay>, sqlx::Error> {
    sqlx::query_as!(
        ModelDay,
        r#"select d.model as "model!", d.rate_card_id as "rate_card?", d.day as "day!",
                  d.present_seconds as "present_seconds!"
           from period_model_day($1, $2) d
           order by 1, 2, 3"#,
        month.first_day(),
        from_book
    )
    .fetch_all(conn)
    .await
}

/// An invoice or credit note of a period, with its team's accounting fields.
#[derive(Debug, Clone)]
pub struct PeriodDocument {
    pub invoice_id: i64,
    pub kind: String,
    pub status: String,
    pub number: Option<String>,
    pub team: String,
    pub team_name: String,
    pub cost_center: Option<String>,
    pub gl_account: Option<String>,
    pub currency: String,
    pub total: Decimal,
}

/// Every invoice and credit note of `period`, by team then id, naming the team as the invoice does
/// (as it was when drafted).
pub async fn period_documents(
    conn: &mut PgConnection,
    period: chrono::NaiveDate,
) -> Result<Vec<PeriodDocument>, sqlx::Error> {
    sqlx::query_as!(
        PeriodDocument,
        r#"select i.invoice_id, i.kind, i.status, i.number, i.team_id as team,
                  coalesce(i.team_name, t.display_name) as "team_name!",
                  coalesce(i.cost_center, t.cost_center) as cost_center,
                  coalesce(i.gl_account, t.gl_account) as gl_account, i.currency, i.total
           from invoice i join team t using (team_id)
           where i.period = $1
           order by i.team_id, i.invoice_id"#,
        period
    )
    .fetch_all(conn)
    .await
}
