//! The month rollup's SQL: the closed days' state, the rollups built, one month built anew.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::cover::{Cover, DayState, cover, due};
use crate::domain::time::{Month, floor_day};

/// What [`build_month`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Built {
    /// Built anew, with this many rows.
    Built(u64),
    /// Built already from its days as they are summarised now.
    UpToDate,
    /// The month's first closed day is not summarised, or is stale: left for a later round.
    NotReady,
    /// Another builder holds it: left to that one.
    Busy,
}

/// The closed days from `$1` to before `$2`, each with when it was summarised and whether it is
/// stale, in order.
const DAYS: &str = "select g.day, x.summarised_at,
                           exists (select from evidence_day_stale s where s.day = g.day) as stale
                    from generate_series($1::timestamptz, $2::timestamptz - interval '24 hours',
                                         interval '24 hours') g(day)
                    left join evidence_day_done x on x.day = g.day
                    order by g.day";

/// The months whose rollup is missing or not what their days are now, the newest first, from the
/// month of the first usage to the day before `now`'s: what the background step has yet to build
/// (`slicemeter_month_rollups_due`).
pub async fn months_due(pool: &PgPool, now: DateTime<Utc>) -> Result<Vec<Month>, sqlx::Error> {
    let today = floor_day(now);
    let first: Option<DateTime<Utc>> =
        sqlx::query_scalar("select date_trunc('month', min(day), 'UTC') from usage_daily")
            .fetch_one(pool)
            .await?;
    let Some(first) = first.filter(|f| *f < today) else {
        return Ok(Vec::new());
    };
    let days: Vec<DayState> = sqlx::query_as(DAYS)
        .bind(first)
        .bind(today)
        .fetch_all(pool)
        .await?;
    let built: Vec<Cover> = sqlx::query_as("select month, through, seen from usage_month_done")
        .fetch_all(pool)
        .await?;
    Ok(due(&days, &built))
}

/// Builds at most `most` of the [`months_due`], the newest first, after sweeping the builds no
/// longer named ([`sweep_builds`]).
pub async fn build_due(
    pool: &PgPool,
    now: DateTime<Utc>,
    most: usize,
) -> Result<Vec<(Month, Built)>, sqlx::Error> {
    sweep_builds(&mut *pool.acquire().await?).await?;
    let mut out = Vec::new();
    for month in months_due(pool, now).await?.into_iter().take(most) {
        out.push((month, build_month(pool, month, now).await?));
    }
    Ok(out)
}

/// Makes `month`'s rollup anew from the day rollup, in one transaction, over its first closed days
/// that are summarised and not stale at `now`, unless it was built from them already.
pub async fn build_month(
    pool: &PgPool,
    month: Month,
    now: DateTime<Utc>,
) -> Result<Built, sqlx::Error> {
    let mut tx = pool.begin().await?;
    // The days' state and their rows read in one snapshot: a write that lands after it marks its
    // day stale, and the rollup is not read until built again.
    sqlx::query("set transaction isolation level repeatable read")
        .execute(&mut *tx)
        .await?;
    if !crate::db::try_day_lock(&mut tx, crate::db::MONTH_ROLLUP_LOCK, month.start()).await? {
        tx.rollback().await?;
        return Ok(Built::Busy);
    }
    let days: Vec<DayState> = sqlx::query_as(DAYS)
        .bind(month.start())
        .bind(month.end().min(floor_day(now)))
        .fetch_all(&mut *tx)
        .await?;
    let Some(cover) = cover(month, &days) else {
        tx.rollback().await?;
        return Ok(Built::NotReady);
    };
    let built: Option<Cover> =
        sqlx::query_as("select month, through, seen from usage_month_done where month = $1")
            .bind(month.start())
            .fetch_optional(&mut *tx)
            .await?;
    if built.as_ref() == Some(&cover) {
        tx.rollback().await?;
        return Ok(Built::UpToDate);
    }
    let rows = write_month(&mut tx, &cover).await?;
    tx.commit().await?;
    Ok(Built::Built(rows))
}

/// Replaces the month's rows with the day rollup's sums over `[month, through)`, per consumer, and
/// makes a new build of it (`usage_month_build`): per slice with its days (the books' grain), each
/// GPU's days and the presence per model and day, from `gpu_daily`, and whether those GPUs are
/// all its slices are on. Records what they cover, and sweeps the builds no book names
/// ([`sweep_builds`]). Returns the rows per consumer.
async fn write_month(tx: &mut PgConnection, cover: &Cover) -> Result<u64, sqlx::Error> {
    sqlx::query("delete from usage_month where month = $1")
        .bind(cover.month)
        .execute(&mut *tx)
        .await?;
    let rows = sqlx::query(
        "insert into usage_month (month, team_id, slice_id, gpu_id, consumer_id, held_seconds,
                                  memory_byte_seconds, compute_active_seconds,
                                  compute_known_seconds, window_count)
         select $1, d.team_id, d.slice_id, d.gpu_id, d.consumer_id, sum(d.held_seconds),
                sum(d.memory_byte_seconds), sum(d.compute_active_seconds),
                sum(d.compute_known_seconds), sum(d.window_count)
         from usage_daily d
         where d.day >= $1 and d.day < $2
         group by d.team_id, d.slice_id, d.gpu_id, d.consumer_id",
    )
    .bind(cover.month)
    .bind(cover.through)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let build: i64 =
        sqlx::query_scalar("insert into usage_month_build (month) values ($1) returning build")
            .bind(cover.month)
            .fetch_one(&mut *tx)
            .await?;
    // As `billing::store::write_books` gathers a month's day rows per team and slice: a day once
    // per consumer of the team.
    sqlx::query(
        "insert into usage_month_slice (build, month, team_id, slice_id, windows, first_day,
                                        held_seconds, known_seconds, active_seconds,
                                        memory_byte_seconds, days, day_windows, day_held,
                                        day_known, day_active, day_memory)
         select $3, $1, d.team_id, d.slice_id, sum(d.window_count)::int8, min(d.day),
                sum(d.held_seconds), sum(d.compute_known_seconds), sum(d.compute_active_seconds),
                sum(d.memory_byte_seconds), array_agg(d.day), array_agg(d.window_count::int8),
                array_agg(d.held_seconds), array_agg(d.compute_known_seconds),
                array_agg(d.compute_active_seconds), array_agg(d.memory_byte_seconds)
         from usage_daily d
         where d.day >= $1 and d.day < $2
         group by d.team_id, d.slice_id",
    )
    .bind(cover.month)
    .bind(cover.through)
    .bind(build)
    .execute(&mut *tx)
    .await?;
    // As `billing::store::write_gpu_days` and `period_model_day` read the month's whole days.
    sqlx::query(
        "insert into usage_month_gpu
         select $3, d.gpu_id, array_agg(d.day), array_agg(d.present_seconds),
                array_agg(d.stranded_compute_slice_seconds),
                array_agg(d.stranded_memory_slice_seconds),
                array_agg(d.stranded_thread_percent_seconds),
                array_agg(d.stranded_memory_byte_seconds)
         from gpu_daily d
         where d.day >= $1 and d.day < $2
         group by d.gpu_id",
    )
    .bind(cover.month)
    .bind(cover.through)
    .bind(build)
    .execute(&mut *tx)
    .await?;
    // Whether the books may take the build's rows as they are: each slice's card has its row,
    // where the books freeze its node (`book_slice_built`). A card with usage and no presence
    // (none reported) leaves the month's runs gathering the day rollup.
    sqlx::query(
        "update usage_month_build b
         set gpus_cover_slices = not exists (
                 select from usage_month_slice m
                 join slice s on s.slice_id = m.slice_id
                 where m.build = $1
                   and not exists (select from usage_month_gpu g
                                   where g.build = $1 and g.gpu_id = s.gpu_id))
         where b.build = $1",
    )
    .bind(build)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "insert into usage_month_model_day
         select $3, g.model, d.day, sum(d.present_seconds), g.memory_bytes, g.compute_slices,
                g.memory_slices, sum(d.stranded_compute_slice_seconds),
                sum(d.stranded_memory_slice_seconds), sum(d.stranded_thread_percent_seconds),
                sum(d.stranded_memory_byte_seconds)
         from gpu_daily d
         join gpu g using (gpu_id)
         where d.day >= $1 and d.day < $2
         group by g.model, g.memory_bytes, g.compute_slices, g.memory_slices, d.day",
    )
    .bind(cover.month)
    .bind(cover.through)
    .bind(build)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "insert into usage_month_done (month, through, seen, built_at, build)
         values ($1, $2, $3, now(), $4)
         on conflict (month) do update
         set through = excluded.through, seen = excluded.seen, built_at = excluded.built_at,
             build = excluded.build",
    )
    .bind(cover.month)
    .bind(cover.through)
    .bind(&cover.seen)
    .bind(build)
    .execute(&mut *tx)
    .await?;
    sweep_builds(tx).await?;
    Ok(rows)
}

/// Removes the builds that are neither a month's current one (`usage_month_done`) nor named by a
/// book, with their rows: those a new build replaced, and those a run's books stopped naming when
/// they were written again. A build a book names is kept (its foreign key), as long as the book.
/// Returns the builds removed.
pub async fn sweep_builds(conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        "delete from usage_month_build b
         where not exists (select from usage_month_done d where d.build = b.build)
           and not exists (select from book k where k.month_build = b.build)",
    )
    .execute(conn)
    .await?
    .rows_affected())
}
