//! The ledger's SQL: one card's hours from the hourly rollups, or an issued month's days from its
//! books (`book_gpu_days` for presence and what the layout stranded, `book_slice_days` for its
//! consumers).

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{CardSeconds, ConsumerSeconds};
use crate::billing::pricing::StrandedSeconds;
use crate::domain::exact::Exact;
use crate::domain::slice::{GpuGeometry, PhysicalShare, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::reports::usage::Step;

/// A card as the ledger names and measures it.
#[derive(Debug, Clone)]
pub struct Gpu {
    pub gpu_id: i32,
    pub gpu_uuid: String,
    pub model: String,
    pub node: String,
    pub geometry: GpuGeometry,
}

pub async fn gpu(pool: &PgPool, uuid: &str) -> Result<Option<Gpu>, sqlx::Error> {
    let row = sqlx::query!(
        "select gpu_id, gpu_uuid, model, node, memory_bytes, compute_slices, memory_slices
         from gpu where gpu_uuid = $1",
        uuid
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Gpu {
        gpu_id: r.gpu_id,
        gpu_uuid: r.gpu_uuid,
        model: r.model,
        node: r.node,
        geometry: GpuGeometry {
            memory_bytes: u64::try_from(r.memory_bytes).unwrap_or(1),
            compute_slices: u8::try_from(r.compute_slices).unwrap_or(1),
            memory_slices: u8::try_from(r.memory_slices).unwrap_or(1),
        },
    }))
}

fn exact(s: &str) -> Result<Exact, sqlx::Error> {
    Exact::parse(s).ok_or_else(|| sqlx::Error::Decode(format!("{s:?} is not a sum").into()))
}

/// The card's steps in `[from, to)` from the hourly rollups: its consumers and its presence, per step
/// and rate card version in force. The rollups' keys start with the hour, so the card's rows are
/// probed by key (each hour of the range, and each of the card's slices) rather than read out of
/// every row of the range: 12 ms instead of 190 ms for a card of a 1,000-GPU month.
pub async fn from_rollups(
    pool: &PgPool,
    gpu: &Gpu,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Step,
) -> Result<(Vec<ConsumerSeconds>, Vec<CardSeconds>), sqlx::Error> {
    let consumers = sqlx::query!(
        r#"with cards as (
               select t.at, r.rate_card_id
               from generate_series($2::timestamptz, $3::timestamptz, interval '1 hour') t(at)
               join rate_card_span r
                 on t.at >= r.effective_from
                and (r.effective_until is null or t.at < r.effective_until))
           select date_trunc($4, u.hour, 'UTC') as "bucket!", v.rate_card_id as "rate_card?",
                  u.team_id as "team!: TeamId",
                  (workload_of(c.pod, c.labels, c.job_id, c.unix_user))[2] as "workload?",
                  s.slice_uuid as "slice_uuid!", s.kind as "kind!: SliceKind", s.profile as "profile?",
                  s.compute_share as "compute_share!", s.memory_share as "memory_share!",
                  s.memory_reserved_bytes as "memory_reserved_bytes!",
                  sum(u.held_seconds)::text as "held!", sum(u.compute_active_seconds)::text as "active!",
                  sum(u.memory_byte_seconds)::text as "memory!"
           from usage_hourly u
           join slice s on s.slice_id = u.slice_id
           join consumer c on c.consumer_id = u.consumer_id
           left join cards v on v.at = u.hour
           where u.gpu_id = $1
             and u.hour = any(array(select generate_series($2::timestamptz,
                                                           $3::timestamptz - interval '1 hour',
                                                           interval '1 hour')))
             and u.slice_id = any(array(select slice_id from slice where gpu_id = $1))
           group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
           order by 1, 2, 3, 4, 5"#,
        gpu.gpu_id,
        from,
        to,
        step.as_str()
    )
    .fetch_all(pool)
    .await?;
    let consumers = consumers
        .into_iter()
        .map(|r| {
            Ok(ConsumerSeconds {
                bucket: r.bucket,
                rate_card: r.rate_card,
                team: r.team,
                workload: r.workload,
                slice_uuid: r.slice_uuid,
                kind: r.kind,
                profile: r.profile,
                share: PhysicalShare {
                    kind: r.kind,
                    compute: r.compute_share,
                    memory: r.memory_share,
                    memory_reserved_bytes: u64::try_from(r.memory_reserved_bytes)
                        .unwrap_or_default(),
                },
                held: exact(&r.held)?,
                active: exact(&r.active)?,
                memory_byte_seconds: exact(&r.memory)?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let presence = sqlx::query!(
        r#"with cards as (
               select t.at, r.rate_card_id
               from generate_series($2::timestamptz, $3::timestamptz, interval '1 hour') t(at)
               join rate_card_span r
                 on t.at >= r.effective_from
                and (r.effective_until is null or t.at < r.effective_until))
           select date_trunc($4, h.hour, 'UTC') as "bucket!", v.rate_card_id as "rate_card?",
                  sum(h.present_seconds) as "present_seconds!",
                  sum(h.stranded_compute_slice_seconds) as "compute_slice_seconds!",
                  sum(h.stranded_memory_slice_seconds) as "memory_slice_seconds!",
                  sum(h.stranded_thread_percent_seconds) as "thread_percent_seconds!",
                  sum(h.stranded_memory_byte_seconds) as "memory_byte_seconds!"
           from gpu_hourly h
           left join cards v on v.at = h.hour
           where h.gpu_id = $1
             and h.hour = any(array(select generate_series($2::timestamptz,
                                                           $3::timestamptz - interval '1 hour',
                                                           interval '1 hour')))
           group by 1, 2
           order by 1, 2"#,
        gpu.gpu_id,
        from,
        to,
        step.as_str()
    )
    .fetch_all(pool)
    .await?;
    let presence = presence
        .into_iter()
        .map(|r| CardSeconds {
            bucket: r.bucket,
            rate_card: r.rate_card,
            present_seconds: r.present_seconds,
            stranded: StrandedSeconds::of_gpu(
                &gpu.geometry,
                r.compute_slice_seconds,
                r.memory_slice_seconds,
                r.thread_percent_seconds,
                r.memory_byte_seconds,
            ),
        })
        .collect();
    Ok((consumers, presence))
}

/// The card's steps in `[from, to)` of the issued `month`, from its books (days: a step is a day
/// or the month); `None` when the books were written before they kept each card's days
/// (migration 0028; `book_gpu` since 0030).
pub async fn from_books(
    pool: &PgPool,
    gpu: &Gpu,
    month: Month,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Step,
) -> Result<Option<(Vec<ConsumerSeconds>, Vec<CardSeconds>)>, sqlx::Error> {
    let kept = sqlx::query_scalar!(
        r#"select exists (select 1 from book_gpu where period = $1) as "kept!""#,
        month.first_day()
    )
    .fetch_one(pool)
    .await?;
    if !kept {
        return Ok(None);
    }
    let consumers = sqlx::query!(
        r#"select date_trunc($5, x.day, 'UTC') as "bucket!", b.rate_card_id as "rate_card?",
                  b.team_id as "team!: TeamId", b.slice_uuid as "slice_uuid!", b.kind as "kind!: SliceKind",
                  b.profile as "profile?", b.compute_share as "compute_share!",
                  b.memory_share as "memory_share!",
                  b.memory_reserved_bytes as "memory_reserved_bytes!",
                  sum(x.held)::text as "held!", sum(x.active)::text as "active!",
                  sum(x.memory)::text as "memory!"
           from book_slice_days($1) b
           join slice s on s.slice_id = b.slice_id
           cross join lateral unnest(b.days, b.day_held, b.day_active, b.day_memory)
                as x(day, held, active, memory)
           where b.period = $1 and s.gpu_id = $2 and x.day >= $3 and x.day < $4
           group by 1, 2, 3, 4, 5, 6, 7, 8, 9
           order by 1, 2, 3, 4"#,
        month.first_day(),
        gpu.gpu_id,
        from,
        to,
        step.as_str()
    )
    .fetch_all(pool)
    .await?;
    let consumers = consumers
        .into_iter()
        .map(|r| {
            Ok(ConsumerSeconds {
                bucket: r.bucket,
                rate_card: r.rate_card,
                team: r.team,
                workload: None,
                slice_uuid: r.slice_uuid,
                kind: r.kind,
                profile: r.profile,
                share: PhysicalShare {
                    kind: r.kind,
                    compute: r.compute_share,
                    memory: r.memory_share,
                    memory_reserved_bytes: u64::try_from(r.memory_reserved_bytes)
                        .unwrap_or_default(),
                },
                held: exact(&r.held)?,
                active: exact(&r.active)?,
                memory_byte_seconds: exact(&r.memory)?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let presence = sqlx::query!(
        r#"select date_trunc($5, d.day, 'UTC') as "bucket!", b.rate_card_id as "rate_card?",
                  sum(d.present_seconds) as "present_seconds!",
                  sum(d.stranded_compute_slice_seconds) as "compute_slice_seconds!",
                  sum(d.stranded_memory_slice_seconds) as "memory_slice_seconds!",
                  sum(d.stranded_thread_percent_seconds) as "thread_percent_seconds!",
                  sum(d.stranded_memory_byte_seconds) as "memory_byte_seconds!"
           from book_gpu_days($1) b
           cross join lateral unnest(b.days, b.present_seconds,
                                     b.stranded_compute_slice_seconds,
                                     b.stranded_memory_slice_seconds,
                                     b.stranded_thread_percent_seconds,
                                     b.stranded_memory_byte_seconds)
                as d(day, present_seconds, stranded_compute_slice_seconds,
                     stranded_memory_slice_seconds, stranded_thread_percent_seconds,
                     stranded_memory_byte_seconds)
           where b.period = $1 and b.gpu_id = $2 and d.day >= $3 and d.day < $4
           group by 1, 2
           order by 1, 2"#,
        month.first_day(),
        gpu.gpu_id,
        from,
        to,
        step.as_str()
    )
    .fetch_all(pool)
    .await?;
    let presence = presence
        .into_iter()
        .map(|r| CardSeconds {
            bucket: r.bucket,
            rate_card: r.rate_card,
            present_seconds: r.present_seconds,
            stranded: StrandedSeconds::of_gpu(
                &gpu.geometry,
                r.compute_slice_seconds,
                r.memory_slice_seconds,
                r.thread_percent_seconds,
                r.memory_byte_seconds,
            ),
        })
        .collect();
    Ok(Some((consumers, presence)))
}
