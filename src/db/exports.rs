//! Queries behind the exports: per (team, slice, day) usage rows, streamed in invoice-line order, and
//! per (model, rate card, day) fleet figures for the platform's rows.

use chrono::{DateTime, Utc};
use futures_util::Stream;
use futures_util::StreamExt;
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::domain::team::TeamId;

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

/// Usage rows of `[from, to)`, optionally of one team, ordered by invoice line (team, model, kind,
/// profile, rate card) then slice and day, streamed: memory does not grow with the fleet.
pub fn slice_days<'c>(
    conn: &'c mut PgConnection,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    team: Option<&'c TeamId>,
) -> impl Stream<Item = Result<SliceDay, sqlx::Error>> + 'c {
    sqlx::query_as!(
        SliceDay,
        r#"select c.team_id as "team!", t.display_name as "team_name!", t.cost_center,
                  g.model as "model!", s.kind as "kind!", s.profile, r.rate_card_id as "rate_card?",
                  s.slice_uuid as "slice_uuid!", g.node as "node!",
                  date_trunc('day', u.hour, 'UTC') as "day!",
                  sum(u.window_count)::int8 as "windows!",
                  sum(u.held_seconds) as "held_seconds!",
                  sum(u.compute_known_seconds) as "known_seconds!",
                  sum(u.compute_active_seconds) as "active_seconds!",
                  sum(u.memory_byte_seconds) as "memory_byte_seconds!",
                  s.compute_share as "compute_share!", s.memory_share as "memory_share!",
                  s.memory_reserved_bytes as "memory_reserved_bytes!"
           from usage_hourly u
           join consumer c using (consumer_id)
           join team t on t.team_id = c.team_id
           join slice s using (slice_id)
           join gpu g using (gpu_id)
           left join rate_card_span r on u.hour >= r.effective_from and (r.effective_until is null or u.hour < r.effective_until)
           where u.hour >= $1 and u.hour < $2 and ($3::text is null or c.team_id = $3)
           group by c.team_id, t.display_name, t.cost_center, g.model, s.kind, s.profile,
                    r.rate_card_id, s.slice_id, g.node, 10
           order by 1, 4, 5, 6, 7, 8, 10"#,
        from,
        to,
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

/// GPU presence per (model, rate card, day) of `[from, to)`, ordered so.
pub async fn model_days(
    conn: &mut PgConnection,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<ModelDay>, sqlx::Error> {
    sqlx::query_as!(
        ModelDay,
        r#"select g.model as "model!", r.rate_card_id as "rate_card?",
                  date_trunc('day', h.hour, 'UTC') as "day!",
                  sum(h.present_seconds) as "present_seconds!"
           from gpu_hourly h
           join gpu g using (gpu_id)
           left join rate_card_span r on h.hour >= r.effective_from and (r.effective_until is null or h.hour < r.effective_until)
           where h.hour >= $1 and h.hour < $2
           group by 1, 2, 3
           order by 1, 2, 3"#,
        from,
        to
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

/// Every invoice and credit note of `period`, by team then id.
pub async fn period_documents(
    conn: &mut PgConnection,
    period: chrono::NaiveDate,
) -> Result<Vec<PeriodDocument>, sqlx::Error> {
    sqlx::query_as!(
        PeriodDocument,
        r#"select i.invoice_id, i.kind, i.status, i.number, i.team_id as team,
                  t.display_name as team_name, t.cost_center, t.gl_account, i.currency, i.total
           from invoice i join team t using (team_id)
           where i.period = $1
           order by i.team_id, i.invoice_id"#,
        period
    )
    .fetch_all(conn)
    .await
}
