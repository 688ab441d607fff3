//! The day summaries' SQL: which days are due, one day's summary made anew, how far behind.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::time::floor_day;
use crate::plan::store::{evidence_settings, pairs_sql, partial_sql};

/// The closed days that right-sizing reads from the hourly rollups because their summary is
/// missing or stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lag {
    pub days: i64,
    /// The oldest of them.
    pub oldest: Option<DateTime<Utc>>,
}

impl Lag {
    /// How long ago the oldest day not summarised ended, in seconds (0: none).
    pub fn oldest_age_seconds(&self, now: DateTime<Utc>) -> f64 {
        self.oldest.map_or(0.0, |d| {
            ((now - d).num_milliseconds() as f64 / 1e3 - 86_400.0).max(0.0)
        })
    }
}

/// The days from the first with usage to `last` that need a summary (none, or a stale one), the
/// newest first, at most `most`.
const DUE: &str =
    "select g.day from generate_series((select min(day) from usage_daily), $1::timestamptz,
                                        interval '24 hours') g(day)
                   where not exists (select from evidence_day_done x where x.day = g.day)
                      or exists (select from evidence_day_stale s where s.day = g.day)
                   order by g.day desc limit $2";

/// The closed days not summarised at `now` (settled or not).
pub async fn lag(pool: &PgPool, now: DateTime<Utc>) -> Result<Lag, sqlx::Error> {
    let last = floor_day(now) - chrono::Duration::hours(24);
    let (days, oldest): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
        "select count(*), min(g.day) from generate_series((select min(day) from usage_daily),
                                                          $1::timestamptz, interval '24 hours') g(day)
         where not exists (select from evidence_day_done x where x.day = g.day)
            or exists (select from evidence_day_stale s where s.day = g.day)",
    )
    .bind(last)
    .fetch_one(pool)
    .await?;
    Ok(Lag { days, oldest })
}

/// What a round of [`summarise_due`] did.
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// The days summarised, each with the time it took.
    pub summarised: Vec<(DateTime<Utc>, std::time::Duration)>,
    /// Days left for the next round because a write to them held their lock.
    pub busy: usize,
}

/// Summarises at most `most` of the days that ended by `settled` and need a summary, the newest
/// first.
pub async fn summarise_due(
    pool: &PgPool,
    settled: DateTime<Utc>,
    most: i64,
) -> Result<Round, sqlx::Error> {
    let last = floor_day(settled) - chrono::Duration::hours(24);
    let due: Vec<DateTime<Utc>> = sqlx::query_scalar(DUE)
        .bind(last)
        .bind(most)
        .fetch_all(pool)
        .await?;
    let mut round = Round::default();
    for day in due {
        let t = std::time::Instant::now();
        if summarise_day(pool, day).await? {
            round.summarised.push((day, t.elapsed()));
        } else {
            round.busy += 1;
        }
    }
    Ok(round)
}

/// Makes `day`'s summary anew from the hourly rollups, in one transaction: false, doing nothing,
/// when a write to the day holds its lock.
pub async fn summarise_day(pool: &PgPool, day: DateTime<Utc>) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let locked: bool = sqlx::query_scalar("select pg_try_advisory_xact_lock($1, $2)")
        .bind(crate::db::EVIDENCE_DAY_LOCK)
        .bind(crate::db::evidence_day_lock(day))
        .fetch_one(&mut *tx)
        .await?;
    if !locked {
        tx.rollback().await?;
        return Ok(false);
    }
    // Every write marked before the lock was taken has committed, and none can mark it again
    // until this commits: what is read below is all there is.
    sqlx::query("delete from evidence_day_stale where day = $1")
        .bind(day)
        .execute(&mut *tx)
        .await?;
    sqlx::query("delete from evidence_day where day = $1")
        .bind(day)
        .execute(&mut *tx)
        .await?;
    evidence_settings(&mut tx).await?;
    sqlx::query(concat!(
        "insert into evidence_day (day, team_id, namespace, workload_kind, workload, model, kind,
                                   profile, compute_share, memory_share, memory_reserved_bytes,
                                   gpu_compute_slices, gpu_memory_bytes, held_seconds,
                                   known_seconds, compute_active_seconds, first_hour, last_hour,
                                   slice_ids, memory_peaks, compute_ratios)
         select $3::timestamptz, p.team_id, p.namespace, p.workload_kind, p.workload, p.model,
                p.kind, p.profile, p.compute_share, p.memory_share, p.memory_reserved_bytes,
                p.gpu_compute_slices, p.gpu_memory_bytes, ",
        partial_sql!(),
        " from (",
        pairs_sql!(),
        ") p
         join usage_hourly u on u.consumer_id = p.consumer_id and u.slice_id = p.slice_id
                            and u.team_id = p.team_id
         where u.hour >= $3 and u.hour < $3 + interval '24 hours' and u.held_seconds > 0
         group by p.team_id, p.namespace, p.workload_kind, p.workload, p.model, p.kind, p.profile,
                  p.compute_share, p.memory_share, p.memory_reserved_bytes, p.gpu_compute_slices,
                  p.gpu_memory_bytes"
    ))
    .bind(vec![day])
    .bind(None::<String>)
    .bind(day)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "insert into evidence_day_done (day, summarised_at) values ($1, now())
         on conflict (day) do update set summarised_at = excluded.summarised_at",
    )
    .bind(day)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}
