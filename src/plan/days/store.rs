//! The day summaries' SQL: which days are due, one day's summary made anew, how far behind.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use crate::domain::team::TeamId;
use crate::domain::time::{Month, floor_day, whole_days};
use crate::plan::merge::{Merged, WindowPartial};
use crate::plan::store::{EvidenceGroup, day_rows, evidence_settings, pairs_sql, partial_sql};

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

/// The days from the first of the month of the first usage to `last` that need a summary (none,
/// or a stale one first marked by `$3`: a day written again settles before it is summarised
/// again, migration 0035), the newest first, at most `most`. The days of that month before the
/// first usage are summarised too (empty), so that the month's windows and its month rollup
/// (`reports::month_rollup`) cover it from its first day.
const DUE: &str =
    "select g.day from generate_series(date_trunc('month', (select min(day) from usage_daily), 'UTC'),
                                        $1::timestamptz, interval '24 hours') g(day)
                   where not exists (select from evidence_day_done x where x.day = g.day)
                      or exists (select from evidence_day_stale s
                                 where s.day = g.day and s.marked_at <= $3)
                   order by g.day desc limit $2";

/// The closed days not summarised at `now` (settled or not).
pub async fn lag(pool: &PgPool, now: DateTime<Utc>) -> Result<Lag, sqlx::Error> {
    let last = floor_day(now) - chrono::Duration::hours(24);
    let (days, oldest): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
        "select count(*), min(g.day)
         from generate_series(date_trunc('month', (select min(day) from usage_daily), 'UTC'),
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

/// Summarises at most `most` of the days that ended by `settled` and need a summary, those written
/// again only if first marked stale by `settled`, the newest first.
pub async fn summarise_due(
    pool: &PgPool,
    settled: DateTime<Utc>,
    most: i64,
) -> Result<Round, sqlx::Error> {
    let last = floor_day(settled) - chrono::Duration::hours(24);
    let due: Vec<DateTime<Utc>> = sqlx::query_scalar(DUE)
        .bind(last)
        .bind(most)
        .bind(settled)
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
    if !crate::db::try_day_lock(&mut tx, crate::db::EVIDENCE_DAY_LOCK, day).await? {
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
    // A day is read whole: hash joins, whatever the statistics say. While a month is loaded they
    // lag (a day's rows estimated at 817 where there were 117,000), and the nested loop they chose,
    // a pass over the day's hourly rows per consumer, ran past the statement timeout (54 s) while
    // holding the day's lock, which every batch writing the day waited on (issue 42: 18-49 s a
    // batch). With hash joins it took 9.6 s under that load.
    sqlx::query("select set_config('enable_nestloop', 'off', true)")
        .execute(&mut *tx)
        .await?;
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

/// What [`build_window`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// Built anew, with this many rows.
    Built(usize),
    /// Built already from the days as they are summarised now.
    UpToDate,
    /// A day of it is not summarised, or is stale: left for a later round.
    NotReady,
    /// Another builder holds it: left to that one.
    Busy,
}

/// The windows of closed days the product reads at `now` (`evidence_window`, migration 0031): the
/// month so far and the month before, whole (the team page's months), and right-sizing's whole
/// days (`plan::RIGHT_SIZING_DAYS`, the team page's, `/v1/recommendations`' and the plan's
/// default).
pub fn windows_due(now: DateTime<Utc>) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let today = floor_day(now);
    let this = Month::of(now);
    let (from, to) = crate::plan::right_sizing_range(crate::plan::RIGHT_SIZING_DAYS, now);
    let mut due = vec![(this.minus(1).start(), this.start())];
    if this.start() < today {
        due.push((this.start(), today));
    }
    if let Some(days) = whole_days(from, to.min(today)) {
        due.push(days);
    }
    due.sort();
    due.dedup();
    due
}

/// Builds the windows due at `now` ([`windows_due`]) that are not up to date, and drops the
/// windows no longer due.
pub async fn build_due_windows(
    pool: &PgPool,
    now: DateTime<Utc>,
) -> Result<Vec<((DateTime<Utc>, DateTime<Utc>), Window)>, sqlx::Error> {
    let due = windows_due(now);
    let (firsts, lasts): (Vec<_>, Vec<_>) = due.iter().copied().unzip();
    let mut tx = pool.begin().await?;
    sqlx::query(
        "delete from evidence_window w
         where (w.first_day, w.last_day) not in
               (select * from unnest($1::timestamptz[], $2::timestamptz[]))",
    )
    .bind(&firsts)
    .bind(&lasts)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "delete from evidence_window_done w
         where (w.first_day, w.last_day) not in
               (select * from unnest($1::timestamptz[], $2::timestamptz[]))",
    )
    .bind(&firsts)
    .bind(&lasts)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut out = Vec::new();
    for window in due {
        out.push((window, build_window(pool, window.0, window.1).await?));
    }
    Ok(out)
}

/// Makes the window `[first_day, last_day)` anew from its days' summaries, in one transaction,
/// if every day of it is summarised and none stale, and it was not built from them already.
pub async fn build_window(
    pool: &PgPool,
    first_day: DateTime<Utc>,
    last_day: DateTime<Utc>,
) -> Result<Window, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("set transaction isolation level repeatable read")
        .execute(&mut *tx)
        .await?;
    // Windows that start on the same day share a lock: a false wait at most, never two builders
    // of one window deleting and writing its rows at once.
    if !crate::db::try_day_lock(&mut tx, crate::db::EVIDENCE_WINDOW_LOCK, first_day).await? {
        tx.rollback().await?;
        return Ok(Window::Busy);
    }
    let days: Vec<DateTime<Utc>> =
        std::iter::successors(Some(first_day), |d| Some(*d + chrono::Duration::hours(24)))
            .take_while(|d| *d < last_day)
            .collect();
    let (seen, stale): (Vec<DateTime<Utc>>, bool) = sqlx::query_as(
        "select coalesce((select array_agg(d.summarised_at order by d.day) from evidence_day_done d
                          where d.day >= $1 and d.day < $2), '{}'),
                exists (select from evidence_day_stale s where s.day >= $1 and s.day < $2)",
    )
    .bind(first_day)
    .bind(last_day)
    .fetch_one(&mut *tx)
    .await?;
    if stale || seen.len() != days.len() || days.is_empty() {
        tx.rollback().await?;
        return Ok(Window::NotReady);
    }
    let built: Option<Vec<DateTime<Utc>>> = sqlx::query_scalar(
        "select seen from evidence_window_done where first_day = $1 and last_day = $2",
    )
    .bind(first_day)
    .bind(last_day)
    .fetch_optional(&mut *tx)
    .await?;
    if built.as_ref() == Some(&seen) {
        tx.rollback().await?;
        return Ok(Window::UpToDate);
    }
    sqlx::query("delete from evidence_window where first_day = $1 and last_day = $2")
        .bind(first_day)
        .bind(last_day)
        .execute(&mut *tx)
        .await?;
    evidence_settings(&mut tx).await?;
    // A team at a time: a large fleet's month of summaries is millions of rows.
    let teams: Vec<TeamId> =
        sqlx::query_scalar("select distinct team_id from evidence_day where day = any($1)")
            .bind(&days)
            .fetch_all(&mut *tx)
            .await?;
    let mut rows = 0;
    for team in teams {
        let windows = window_of_days(&mut tx, &days, &team).await?;
        rows += windows.len();
        for chunk in windows.chunks(500) {
            insert_window(&mut tx, first_day, last_day, chunk).await?;
        }
    }
    sqlx::query(
        "insert into evidence_window_done (first_day, last_day, seen, built_at)
         values ($1, $2, $3, now())
         on conflict (first_day, last_day) do update
         set seen = excluded.seen, built_at = excluded.built_at",
    )
    .bind(first_day)
    .bind(last_day)
    .bind(&seen)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Window::Built(rows))
}

/// What a window of `days` keeps of `team`'s groups, from the days' summaries: each group's
/// largest values, enough for its percentiles once a range adds its part days and today's hours
/// (two days of each of the group's slices' hours).
async fn window_of_days(
    conn: &mut PgConnection,
    days: &[DateTime<Utc>],
    team: &TeamId,
) -> Result<Vec<(EvidenceGroup, WindowPartial)>, sqlx::Error> {
    let mut merged: std::collections::BTreeMap<EvidenceGroup, Merged> = Default::default();
    for row in day_rows(conn, days, Some(team)).await? {
        merged.entry(row.group).or_default().add(row.partial);
    }
    Ok(merged
        .into_iter()
        .filter_map(|(g, m)| Some((g, m.window(48)?)))
        .collect())
}

/// Writes `rows` of the window `[first_day, last_day)`.
async fn insert_window(
    conn: &mut PgConnection,
    first_day: DateTime<Utc>,
    last_day: DateTime<Utc>,
    rows: &[(EvidenceGroup, WindowPartial)],
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut q = sqlx::QueryBuilder::new(
        "insert into evidence_window (first_day, last_day, team_id, namespace, workload_kind,
             workload, model, kind, profile, compute_share, memory_share, memory_reserved_bytes,
             gpu_compute_slices, gpu_memory_bytes, held_seconds, known_seconds,
             compute_active_seconds, first_hour, last_hour, slice_ids, memory_count, memory_top,
             compute_count, compute_top) ",
    );
    q.push_values(rows, |mut b, (g, w)| {
        b.push_bind(first_day)
            .push_bind(last_day)
            .push_bind(&g.team_id)
            .push_bind(&g.namespace)
            .push_bind(&g.workload_kind)
            .push_bind(&g.workload)
            .push_bind(&g.model)
            .push_bind(g.kind)
            .push_bind(&g.profile)
            .push_bind(g.compute_share)
            .push_bind(g.memory_share)
            .push_bind(g.memory_reserved_bytes)
            .push_bind(g.gpu_compute_slices)
            .push_bind(g.gpu_memory_bytes)
            .push_bind(w.held_seconds)
            .push_bind(w.known_seconds)
            .push_bind(w.compute_active_seconds)
            .push_bind(w.first_hour)
            .push_bind(w.last_hour)
            .push_bind(&w.slice_ids)
            .push_bind(w.memory_count)
            .push_bind(&w.memory_top)
            .push_bind(w.compute_count)
            .push_bind(&w.compute_top);
    });
    q.build().execute(conn).await?;
    Ok(())
}
