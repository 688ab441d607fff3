//! The `team` and `namespace_owner` statements, and the re-attribution of the rollups' hours a
//! change of ownership reaches, run inside `teams`' transactions.
//!
//! The file stays whole: the re-attribution is one sequence of statements over the same two
//! temporary tables, each reading what the one before wrote.

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use crate::domain::ownership::{OwnerVersion, Ownership};
use crate::domain::team::TeamId;

#[derive(Debug, Clone)]
pub struct TeamRow {
    pub team_id: TeamId,
    pub display_name: String,
    pub cost_center: Option<String>,
    pub gl_account: Option<String>,
    /// The namespaces it owns now.
    pub namespaces: Vec<String>,
}

pub async fn list(pool: &PgPool, only: Option<&TeamId>) -> Result<Vec<TeamRow>, sqlx::Error> {
    sqlx::query_as!(
        TeamRow,
        r#"select t.team_id as "team_id: TeamId", t.display_name, t.cost_center, t.gl_account,
                  coalesce(array_agg(n.namespace order by n.namespace)
                           filter (where n.namespace is not null), '{}') as "namespaces!"
           from team t left join team_namespace_now n using (team_id)
           where $1::text is null or t.team_id = $1
           group by t.team_id
           order by t.team_id"#,
        only.map(TeamId::as_str)
    )
    .fetch_all(pool)
    .await
}

/// One version of a namespace's ownership, as kept.
#[derive(Debug, Clone)]
pub struct VersionRow {
    pub namespace: String,
    pub effective_from: DateTime<Utc>,
    /// `None`: no team owns it from then.
    pub team_id: Option<TeamId>,
    pub recorded_at: DateTime<Utc>,
    pub reason: Option<String>,
}

/// Every version of each namespace `team` ever owned, by namespace and instant: their owners over
/// time, the other teams' versions included.
pub async fn history(pool: &PgPool, team: &TeamId) -> Result<Vec<VersionRow>, sqlx::Error> {
    sqlx::query_as!(
        VersionRow,
        r#"select o.namespace, o.effective_from, o.team_id as "team_id: TeamId", o.recorded_at,
                  o.reason
         from namespace_owner o
         where o.namespace in (select namespace from namespace_owner where team_id = $1)
         order by o.namespace, o.effective_from"#,
        team.as_str()
    )
    .fetch_all(pool)
    .await
}

/// The versions that start in `[from, to)`, with the one before each (same namespace), by instant:
/// the namespaces that changed hands in that time.
pub async fn changes_between(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<(VersionRow, Option<TeamId>)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select o.namespace, o.effective_from, o.team_id as "team_id: TeamId", o.recorded_at,
                  o.reason,
                  (select p.team_id from namespace_owner p
                   where p.namespace = o.namespace and p.effective_from < o.effective_from
                   order by p.effective_from desc limit 1) as "before: TeamId"
           from namespace_owner o
           where o.effective_from >= $1 and o.effective_from < $2
           order by o.effective_from, o.namespace"#,
        from,
        to
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                VersionRow {
                    namespace: r.namespace,
                    effective_from: r.effective_from,
                    team_id: r.team_id,
                    recorded_at: r.recorded_at,
                    reason: r.reason,
                },
                r.before,
            )
        })
        .collect())
}

/// Serialises changes of ownership, and makes each wait for the batches that read the owners
/// before it (`ingest::store::read_ownership` holds a share lock until it commits), and the batches
/// after it wait for it: no window is added under an owner being replaced.
pub async fn lock_ownership(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("lock table namespace_owner in share row exclusive mode")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The versions of `namespaces`.
pub async fn ownership(
    conn: &mut PgConnection,
    namespaces: &[String],
) -> Result<Ownership, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select namespace, effective_from, team_id as "team_id: TeamId"
           from namespace_owner where namespace = any($1)"#,
        namespaces
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(Ownership::from_rows(rows.into_iter().map(|r| {
        (
            r.namespace,
            OwnerVersion {
                from: r.effective_from,
                team: r.team_id,
            },
        )
    })))
}

/// The namespaces `team` owns at `at`, by name.
pub async fn owned_at(
    conn: &mut PgConnection,
    team: &TeamId,
    at: DateTime<Utc>,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select n.namespace as "namespace!"
           from (select distinct on (o.namespace) o.namespace, o.team_id
                 from namespace_owner o
                 where o.namespace in (select namespace from namespace_owner where team_id = $1)
                   and o.effective_from <= $2
                 order by o.namespace, o.effective_from desc) n
           where n.team_id = $1
           order by n.namespace"#,
        team.as_str(),
        at
    )
    .fetch_all(&mut *conn)
    .await
}

/// A team's fields as they stand.
pub struct TeamFields {
    pub display_name: String,
    pub cost_center: Option<String>,
    pub gl_account: Option<String>,
}

/// Locks the team's row until the transaction ends and reads it; `None` for a new team.
pub async fn lock(
    conn: &mut PgConnection,
    team: &TeamId,
) -> Result<Option<TeamFields>, sqlx::Error> {
    sqlx::query_as!(
        TeamFields,
        "select display_name, cost_center, gl_account from team where team_id = $1 for update",
        team.as_str()
    )
    .fetch_optional(&mut *conn)
    .await
}

pub async fn upsert(
    conn: &mut PgConnection,
    team: &TeamId,
    name: &str,
    cost_center: Option<&str>,
    gl_account: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into team (team_id, display_name, cost_center, gl_account) values ($1, $2, $3, $4)
         on conflict (team_id) do update set display_name = excluded.display_name,
             cost_center = excluded.cost_center, gl_account = excluded.gl_account, updated_at = now()",
        team.as_str(),
        name,
        cost_center,
        gl_account
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// From `at`, `team` owns `namespaces` (`None`: no team does): a version each, replacing one that
/// starts at the same instant.
pub async fn put_versions(
    conn: &mut PgConnection,
    namespaces: &[String],
    at: DateTime<Utc>,
    team: Option<&TeamId>,
    reason: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into namespace_owner (namespace, effective_from, team_id, reason)
         select n, $2, $3, $4 from unnest($1::text[]) n
         on conflict (namespace, effective_from) do update set
             team_id = excluded.team_id, reason = excluded.reason, recorded_at = now()",
        namespaces,
        at,
        team.map(TeamId::as_str),
        reason
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Takes the period locks (`billing::store::lock_period`'s keys) of the months from `first` to
/// `last`, in order, so that no month is issued while its hours change team; then the first of
/// them whose books are frozen, if any.
pub async fn lock_months_and_find_issued(
    conn: &mut PgConnection,
    first: NaiveDate,
    last: NaiveDate,
) -> Result<Option<NaiveDate>, sqlx::Error> {
    sqlx::query!(
        r#"select pg_advisory_xact_lock(hashtext('slicemeter.period:' || to_char(m, 'YYYY-MM')))
                  as "locked"
           from generate_series($1::date, $2::date, interval '1 month') m
           order by m"#,
        first,
        last
    )
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query_scalar!(
        "select min(period) from book where frozen_at is not null and period >= $1 and period <= $2",
        first,
        last
    )
    .fetch_one(&mut *conn)
    .await
}

/// Where a namespace's change reaches: its unlabelled consumers' hours from `from` until `until`
/// (its next version; `None`: none).
#[derive(Debug, Clone)]
pub struct Reach {
    pub namespace: String,
    pub from: DateTime<Utc>,
    pub until: Option<DateTime<Utc>>,
}

/// An hour of one consumer on one slice whose rollup rows a change splits anew: its namespace
/// changes owner inside the hour, so the rows are made again from the raw windows.
#[derive(Debug, Clone)]
pub struct SplitHour {
    pub hour: DateTime<Utc>,
    pub slice_id: i32,
    pub gpu_id: i32,
    pub consumer_id: i64,
    pub namespace: String,
    /// What the rollup holds for it now, all teams together, and the teams.
    pub held_seconds: Decimal,
    pub window_count: i64,
    pub teams: Vec<TeamId>,
}

/// Marks the hours `reaches` reach (those the consumers held a slice in: the days their month's
/// bits say, hour by hour) and gives every hour no change falls inside the owner in force at its
/// start. Returns the consumers whose rows changed team, and the hours a change falls inside, to be
/// made again from the raw windows ([`replace_split_hours`]).
pub async fn reattribute_whole_hours(
    conn: &mut PgConnection,
    reaches: &[Reach],
) -> Result<(Vec<i64>, Vec<SplitHour>), sqlx::Error> {
    let namespaces: Vec<String> = reaches.iter().map(|r| r.namespace.clone()).collect();
    let from: Vec<DateTime<Utc>> = reaches.iter().map(|r| r.from).collect();
    let until: Vec<Option<DateTime<Utc>>> = reaches.iter().map(|r| r.until).collect();
    // Temporary tables live in this transaction only, so these statements are not checked at
    // compile time.
    sqlx::query(
        "create temp table reattributed_hour (
             hour timestamptz not null, slice_id integer not null, gpu_id integer not null,
             consumer_id bigint not null, namespace text not null, split boolean not null
         ) on commit drop",
    )
    .execute(&mut *conn)
    .await?;
    // Each (slice, consumer) the namespace's unlabelled consumers held from the change's month
    // on, every hour of each day held (bit d-1 of its month's days for day d: a UTC midnight,
    // stepped without a time zone) inside the reach; `split` when a version starts inside it.
    sqlx::query(
        "insert into reattributed_hour
         with reach as (
             select * from unnest($1::text[], $2::timestamptz[], $3::timestamptz[])
                 as r(namespace, from_at, until_at)),
         held as (
             select k.month, k.slice_id, k.gpu_id, k.consumer_id, bit_or(k.days) as days,
                    r.namespace, r.from_at, r.until_at
             from reach r
             join consumer c on c.namespace = r.namespace and c.team_label is null
             join usage_month_days k on k.consumer_id = c.consumer_id
                                    and k.month >= date_trunc('month', r.from_at, 'UTC')
                                    and (r.until_at is null or k.month < r.until_at)
             group by k.month, k.slice_id, k.gpu_id, k.consumer_id, r.namespace, r.from_at,
                      r.until_at)
         select x.hour, k.slice_id, k.gpu_id, k.consumer_id, k.namespace,
                exists (select 1 from namespace_owner o
                        where o.namespace = k.namespace and o.effective_from > x.hour
                          and o.effective_from < x.hour + interval '1 hour')
         from held k
         cross join lateral (
             select (k.month at time zone 'UTC' + (b * 24 + h) * interval '1 hour')
                        at time zone 'UTC' as hour
             from generate_series(0, 30) b, generate_series(0, 23) h
             where k.days & (1 << b) <> 0) x
         where x.hour >= date_trunc('hour', k.from_at, 'UTC')
           and (k.until_at is null or x.hour < k.until_at)",
    )
    .bind(&namespaces)
    .bind(&from)
    .bind(&until)
    .execute(&mut *conn)
    .await?;
    sqlx::query("analyze reattributed_hour")
        .execute(&mut *conn)
        .await?;
    // An hour no version starts inside holds one team per (slice, consumer), before and after
    // (the versions after a change are those before and one more): its rows change team in place.
    let moved: Vec<i64> = sqlx::query_scalar(
        "update usage_hourly u set team_id = namespace_team_at(r.namespace, u.hour)
         from reattributed_hour r
         where not r.split and u.hour = r.hour and u.slice_id = r.slice_id
           and u.gpu_id = r.gpu_id and u.consumer_id = r.consumer_id
           and u.team_id <> namespace_team_at(r.namespace, u.hour)
         returning u.consumer_id",
    )
    .fetch_all(&mut *conn)
    .await?;
    let split = sqlx::query_as::<
        _,
        (
            DateTime<Utc>,
            i32,
            i32,
            i64,
            String,
            Decimal,
            i64,
            Vec<TeamId>,
        ),
    >(
        "select u.hour, u.slice_id, u.gpu_id, u.consumer_id, r.namespace, sum(u.held_seconds),
                sum(u.window_count)::int8, array_agg(u.team_id order by u.team_id)
         from reattributed_hour r
         join usage_hourly u on u.hour = r.hour and u.slice_id = r.slice_id
                            and u.gpu_id = r.gpu_id and u.consumer_id = r.consumer_id
         where r.split
         group by 1, 2, 3, 4, 5
         order by 1, 2, 3, 4",
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(
        |(hour, slice_id, gpu_id, consumer_id, namespace, held_seconds, window_count, teams)| {
            SplitHour {
                hour,
                slice_id,
                gpu_id,
                consumer_id,
                namespace,
                held_seconds,
                window_count,
                teams,
            }
        },
    )
    .collect();
    Ok((moved, split))
}

/// A raw window read back for a split hour, with the hour it is read for.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RawWindow {
    pub hour: DateTime<Utc>,
    pub slice_id: i32,
    pub gpu_id: i32,
    pub consumer_id: i64,
    pub window_start: DateTime<Utc>,
    pub window_end: DateTime<Utc>,
    pub held_seconds: Decimal,
    pub memory_byte_seconds: Decimal,
    pub memory_peak_bytes: i64,
    pub compute_active_seconds: Option<Decimal>,
}

/// The raw windows that overlap each split hour's, of its slice and consumer. A window is at most
/// a batch's period long, and a period at most 7 days (`serve --max-period`).
pub async fn raw_windows(
    conn: &mut PgConnection,
    hours: &[SplitHour],
) -> Result<Vec<RawWindow>, sqlx::Error> {
    let hour: Vec<DateTime<Utc>> = hours.iter().map(|h| h.hour).collect();
    let slice: Vec<i32> = hours.iter().map(|h| h.slice_id).collect();
    let gpu: Vec<i32> = hours.iter().map(|h| h.gpu_id).collect();
    let consumer: Vec<i64> = hours.iter().map(|h| h.consumer_id).collect();
    sqlx::query_as!(
        RawWindow,
        r#"select k.hour as "hour!", o.slice_id, o.gpu_id, o.consumer_id, o.window_start,
                  o.window_end, o.held_seconds, o.memory_byte_seconds, o.memory_peak_bytes,
                  o.compute_active_seconds
           from unnest($1::timestamptz[], $2::int4[], $3::int4[], $4::int8[])
                as k(hour, slice_id, gpu_id, consumer_id)
           join occupancy o on o.slice_id = k.slice_id and o.gpu_id = k.gpu_id
                           and o.consumer_id = k.consumer_id
                           and o.window_start >= k.hour - interval '7 days'
                           and o.window_start < k.hour + interval '1 hour'
                           and o.window_end > k.hour
           order by 1, 2, 3, 4, 5"#,
        &hour,
        &slice,
        &gpu,
        &consumer
    )
    .fetch_all(&mut *conn)
    .await
}

/// A rollup row made again for a split hour.
#[derive(Debug, Clone)]
pub struct HourRow {
    pub hour: DateTime<Utc>,
    pub slice_id: i32,
    pub gpu_id: i32,
    pub consumer_id: i64,
    pub team_id: TeamId,
    pub held_seconds: Decimal,
    pub memory_byte_seconds: Decimal,
    pub memory_peak_bytes: i64,
    pub compute_active_seconds: Decimal,
    pub compute_known_seconds: Decimal,
    pub window_count: i32,
}

/// Replaces the rollup rows of the split hours with `rows` (parts of windows: summed here, per
/// key, as ingest sums them).
pub async fn replace_split_hours(
    conn: &mut PgConnection,
    rows: &[HourRow],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "delete from usage_hourly u using reattributed_hour r
         where r.split and u.hour = r.hour and u.slice_id = r.slice_id and u.gpu_id = r.gpu_id
           and u.consumer_id = r.consumer_id",
    )
    .execute(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(());
    }
    let col = |f: fn(&HourRow) -> Decimal| rows.iter().map(f).collect::<Vec<Decimal>>();
    sqlx::query!(
        "insert into usage_hourly (hour, slice_id, gpu_id, consumer_id, team_id, held_seconds,
                                   memory_byte_seconds, memory_peak_bytes, compute_active_seconds,
                                   compute_known_seconds, window_count)
         select hour, slice_id, gpu_id, consumer_id, team_id, sum(held), sum(memory), max(peak),
                sum(active), sum(known), sum(windows)
         from unnest($1::timestamptz[], $2::int4[], $3::int4[], $4::int8[], $5::text[],
                     $6::numeric[], $7::numeric[], $8::int8[], $9::numeric[], $10::numeric[],
                     $11::int4[])
             as t (hour, slice_id, gpu_id, consumer_id, team_id, held, memory, peak, active,
                   known, windows)
         group by 1, 2, 3, 4, 5",
        &rows.iter().map(|r| r.hour).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.slice_id).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.gpu_id).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.consumer_id).collect::<Vec<_>>(),
        &rows
            .iter()
            .map(|r| r.team_id.to_string())
            .collect::<Vec<_>>(),
        &col(|r| r.held_seconds),
        &col(|r| r.memory_byte_seconds),
        &rows.iter().map(|r| r.memory_peak_bytes).collect::<Vec<_>>(),
        &col(|r| r.compute_active_seconds),
        &col(|r| r.compute_known_seconds),
        &rows.iter().map(|r| r.window_count).collect::<Vec<_>>(),
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Makes the day rollup, the team's day rollup and the months' held days of the days the marked
/// hours fall on again, from the hourly rows as they now stand: each such (day, slice, consumer)'s
/// rows go, their sums leave their teams' day rows, and the sums of its hours per team come back.
pub async fn reattribute_days(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "create temp table reattributed_day on commit drop as
         select distinct date_trunc('day', hour, 'UTC') as day, slice_id, gpu_id, consumer_id
         from reattributed_hour",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query("analyze reattributed_day")
        .execute(&mut *conn)
        .await?;
    // The closed days among them are marked for right-sizing's day summaries to be made again
    // (`ingest::store::mark_closed_days`: each day's lock shared, in order, then the mark).
    sqlx::query(
        "with locked as materialized (
             select d.day, pg_advisory_xact_lock_shared($1, (extract(epoch from d.day) / 86400)::int4)
             from (select distinct day from reattributed_day
                   where day < date_trunc('day', now(), 'UTC')) d
             order by d.day)
         insert into evidence_day_stale (day) select day from locked
         on conflict do nothing",
    )
    .bind(crate::db::EVIDENCE_DAY_LOCK)
    .execute(&mut *conn)
    .await?;
    // The old rows out, subtracted from their teams' day rows (an update: an insert's row meets
    // the table's checks before its conflict).
    sqlx::query(
        "with gone as (
             delete from usage_daily d using reattributed_day r
             where d.day = r.day and d.slice_id = r.slice_id and d.gpu_id = r.gpu_id
               and d.consumer_id = r.consumer_id
             returning d.*),
         x as (
             select o.day, o.team_id, g.model, s.kind, s.profile, s.compute_share,
                    s.memory_share, s.memory_reserved_bytes, sum(o.held_seconds) as held,
                    sum(o.memory_byte_seconds) as memory, sum(o.compute_active_seconds) as active,
                    sum(o.compute_known_seconds) as known, sum(o.window_count) as windows
             from gone o
             join slice s on s.slice_id = o.slice_id
             join gpu g on g.gpu_id = s.gpu_id
             group by 1, 2, 3, 4, 5, 6, 7, 8)
         update usage_team_daily t set
             held_seconds = t.held_seconds - x.held,
             memory_byte_seconds = t.memory_byte_seconds - x.memory,
             compute_active_seconds = t.compute_active_seconds - x.active,
             compute_known_seconds = t.compute_known_seconds - x.known,
             window_count = t.window_count - x.windows
         from x
         where t.day = x.day and t.team_id = x.team_id and t.model = x.model and t.kind = x.kind
           and t.profile is not distinct from x.profile and t.compute_share = x.compute_share
           and t.memory_share = x.memory_share
           and t.memory_reserved_bytes = x.memory_reserved_bytes",
    )
    .execute(&mut *conn)
    .await?;
    // The new rows, each day's hours summed per team (24 lookups by the whole key each), added to
    // their teams' day rows.
    sqlx::query(
        "with fresh as (
             insert into usage_daily (day, slice_id, gpu_id, consumer_id, team_id, held_seconds,
                                      memory_byte_seconds, memory_peak_bytes,
                                      compute_active_seconds, compute_known_seconds, window_count)
             select r.day, u.slice_id, u.gpu_id, u.consumer_id, u.team_id, sum(u.held_seconds),
                    sum(u.memory_byte_seconds), max(u.memory_peak_bytes),
                    sum(u.compute_active_seconds), sum(u.compute_known_seconds),
                    sum(u.window_count)
             from reattributed_day r
             cross join generate_series(0, 23) x
             join usage_hourly u on u.hour = r.day + x * interval '1 hour'
                                and u.slice_id = r.slice_id and u.gpu_id = r.gpu_id
                                and u.consumer_id = r.consumer_id
             group by 1, 2, 3, 4, 5
             returning *)
         insert into usage_team_daily (day, team_id, model, kind, profile, compute_share,
                                       memory_share, memory_reserved_bytes, held_seconds,
                                       memory_byte_seconds, compute_active_seconds,
                                       compute_known_seconds, window_count)
         select f.day, f.team_id, g.model, s.kind, s.profile, s.compute_share, s.memory_share,
                s.memory_reserved_bytes, sum(f.held_seconds), sum(f.memory_byte_seconds),
                sum(f.compute_active_seconds), sum(f.compute_known_seconds), sum(f.window_count)
         from fresh f
         join slice s on s.slice_id = f.slice_id
         join gpu g on g.gpu_id = s.gpu_id
         group by 1, 2, 3, 4, 5, 6, 7, 8
         order by 1, 2, 3, 4, 5, 6, 7, 8
         on conflict (day, team_id, model, kind, profile, compute_share, memory_share,
                      memory_reserved_bytes) do update set
             held_seconds = usage_team_daily.held_seconds + excluded.held_seconds,
             memory_byte_seconds = usage_team_daily.memory_byte_seconds + excluded.memory_byte_seconds,
             compute_active_seconds = usage_team_daily.compute_active_seconds + excluded.compute_active_seconds,
             compute_known_seconds = usage_team_daily.compute_known_seconds + excluded.compute_known_seconds,
             window_count = usage_team_daily.window_count + excluded.window_count",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "delete from usage_team_daily t
         where t.day in (select distinct day from reattributed_day)
           and t.window_count = 0 and t.held_seconds = 0 and t.memory_byte_seconds = 0
           and t.compute_active_seconds = 0 and t.compute_known_seconds = 0",
    )
    .execute(&mut *conn)
    .await?;
    // The months' held days of each (slice, consumer) touched: every day it held the slice that
    // month (its rows' bits together), each day under the teams its day rows now name.
    sqlx::query(
        "create temp table reattributed_month on commit drop as
         select k.month, k.slice_id, k.gpu_id, k.consumer_id, bit_or(k.days) as days
         from usage_month_days k
         join (select distinct date_trunc('month', day, 'UTC') as month, slice_id, gpu_id,
                      consumer_id
               from reattributed_day) r
           on k.month = r.month and k.slice_id = r.slice_id and k.gpu_id = r.gpu_id
          and k.consumer_id = r.consumer_id
         group by 1, 2, 3, 4",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "delete from usage_month_days k using reattributed_month r
         where k.month = r.month and k.slice_id = r.slice_id and k.gpu_id = r.gpu_id
           and k.consumer_id = r.consumer_id",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "insert into usage_month_days (month, gpu_id, slice_id, consumer_id, team_id, days)
         select r.month, r.gpu_id, r.slice_id, r.consumer_id, d.team_id, bit_or(day_bit(d.day))
         from reattributed_month r
         cross join lateral (
             select (r.month at time zone 'UTC' + b * interval '1 day') at time zone 'UTC' as day
             from generate_series(0, 30) b
             where r.days & (1 << b) <> 0) x
         join usage_daily d on d.day = x.day and d.slice_id = r.slice_id and d.gpu_id = r.gpu_id
                           and d.consumer_id = r.consumer_id
         group by 1, 2, 3, 4, 5",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}
