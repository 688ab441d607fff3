//! Billing's SQL for a period, run inside `service`'s transactions: the period locks; the period's
//! books (migrations/0007_books.sql: the usage and presence its invoice run priced, written by each
//! run while none of the period's invoices is issued and frozen by the first issue, so that an issued
//! period's invoices, report and exports are read from what was issued); and the aggregates pricing
//! reads from the books or the rollups: usage per (team, model, kind, profile) and GPU presence per
//! model, each split by the rate card version in force for its hours.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use super::period::Books;
use super::pricing::{PresenceAggregate, StrandedSeconds, UsageAggregate};
use crate::domain::exact::Exact;
use crate::domain::slice::{GpuGeometry, PhysicalShare, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::domain::usage::{ExactSums, OccupancySums};

const GIB: Decimal = Decimal::from_parts(1 << 30, 0, 0, false, 0);

/// Serializes runs, issues and credits of `month`: taken first, before anything is read.
pub async fn lock_period(conn: &mut PgConnection, month: Month) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "select pg_advisory_xact_lock(hashtext('slicemeter.period:' || $1::text)) as locked",
        month.to_string()
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(())
}

/// Serializes every issue and credit (after the period's lock): what was billed for any period
/// changes only under it.
pub async fn lock_issuing(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("select pg_advisory_xact_lock(hashtext('slicemeter.issue')) as locked")
        .fetch_one(&mut *conn)
        .await?;
    Ok(())
}

/// Where `month`'s books stand.
pub async fn books(conn: &mut PgConnection, month: Month) -> Result<Books, sqlx::Error> {
    let row = sqlx::query!(
        "select frozen_at from book where period = $1",
        month.first_day()
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(match row {
        None => Books::None,
        Some(r) => match r.frozen_at {
            Some(at) => Books::Issued { at },
            None => Books::Drafted,
        },
    })
}

/// The months in `[first, last]` whose books are frozen (issued).
pub async fn issued_periods(
    conn: &mut PgConnection,
    first: Month,
    last: Month,
) -> Result<Vec<Month>, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        "select period from book
         where frozen_at is not null and period >= $1 and period <= $2
         order by period",
        first.first_day(),
        last.first_day()
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(Month::from_first_day)
    .collect())
}

/// Replaces the period's unfrozen books with what the rollups hold now. Usage is written one row
/// per (team, slice, rate card version): what billing prices (`period_slice_sums`), the names the
/// exports print, and the days that `period_slice_day` unnests, a day once per consumer of the
/// team (gathered as they are, not summed per day first: migration 0021). A month of 10,000 GPUs
/// is then 70,000 rows, not 2.1 million slice-days beside 70,000 sums (migration 0020).
///
/// Where the month rollup covers the whole month and may be read, the books name its current
/// build (`book.month_build`, migrations 0034 and 0036) and their rows are its rows, the names
/// that can change frozen beside them ([`write_books_from_build`]); else they are gathered from
/// the day rollup with their days ([`write_books_from_days`]). The same books either way, as
/// `book_slice_days` and `book_gpu_days` read them, each slice's days perhaps in another order.
pub async fn write_books(conn: &mut PgConnection, month: Month) -> Result<(), sqlx::Error> {
    let p = month.first_day();
    // The book first: an issued month's refuses (`book_frozen`), and its rows then go with it.
    // Not a trigger on `book`: under Citus a reference table's trigger cannot write to the
    // distributed books (migration 0019).
    sqlx::query!("delete from book where period = $1", p)
        .execute(&mut *conn)
        .await?;
    sqlx::query!("delete from book_slice where period = $1", p)
        .execute(&mut *conn)
        .await?;
    sqlx::query!("delete from book_model_day where period = $1", p)
        .execute(&mut *conn)
        .await?;
    sqlx::query!("delete from book_gpu where period = $1", p)
        .execute(&mut *conn)
        .await?;
    sqlx::query!("delete from book_team where period = $1", p)
        .execute(&mut *conn)
        .await?;
    // No build of the month while its books name one: the builder skips a month another holds.
    crate::db::day_lock(conn, crate::db::MONTH_ROLLUP_LOCK, month.start()).await?;
    let build = sqlx::query_scalar!(
        "select d.build
         from usage_month_done d
         join month_rollups_valid($1, $2) v on v.month = d.month
         join usage_month_build b on b.build = d.build
         where d.month = $1 and v.through = $2 and b.gpus_cover_slices",
        month.start(),
        month.end()
    )
    .fetch_optional(&mut *conn)
    .await?;
    match build {
        Some(build) => write_books_from_build(conn, month, build).await,
        None => write_books_from_days(conn, month).await,
    }
}

/// The books of `month` from the month rollup's `build`, which covers the month, in one
/// statement: the book names the build, whose rows per team and slice, GPUs and presence per
/// model and day are its books, under the rate card version in force at the month's start (no
/// version starts inside a month whose rollup may be read). What can change of their names is
/// frozen beside them: each team's name and cost centre (`book_team`) and each card's node
/// (`book_gpu`, which the build's slices are all on); `book_slice_days` reads them together.
async fn write_books_from_build(
    conn: &mut PgConnection,
    month: Month,
    build: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "with b as (insert into book (period, month_build) values ($1, $2) returning period),
              card as materialized (
                    select (select r.rate_card_id from rate_card_span r
                            where $1::timestamp at time zone 'UTC' >= r.effective_from
                              and (r.effective_until is null
                                   or $1::timestamp at time zone 'UTC' < r.effective_until))
                             as rate_card_id),
              t as (insert into book_team (period, team_id, team_name, cost_center)
                    select $1, k.team_id, coalesce(t.display_name, k.team_id), t.cost_center
                    from (select distinct m.team_id from usage_month_slice m where m.build = $2) k
                    left join team t on t.team_id = k.team_id
                    returning 1),
              c as (insert into book_gpu (period, gpu_id, rate_card_id, node)
                    select $1, m.gpu_id, (select rate_card_id from card), g.node
                    from usage_month_gpu m
                    join gpu g on g.gpu_id = m.gpu_id
                    where m.build = $2
                    returning 1),
              m as (insert into book_model_day
                    select $1, m.model, (select rate_card_id from card), m.day,
                           m.present_seconds, m.memory_bytes, m.compute_slices, m.memory_slices,
                           m.stranded_compute_slice_seconds, m.stranded_memory_slice_seconds,
                           m.stranded_thread_percent_seconds, m.stranded_memory_byte_seconds
                    from usage_month_model_day m where m.build = $2
                    returning 1)
         select (select count(*) from t) as team_rows, (select count(*) from c) as gpu_rows,
                (select count(*) from m) as presence_rows
         from b",
        month.first_day(),
        build
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(())
}

/// The books of `month` gathered from the day rollup, each row with its days: usage and presence
/// per model in one statement (one snapshot), then each card's days ([`write_gpu_days`]).
async fn write_books_from_days(conn: &mut PgConnection, month: Month) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "with b as (insert into book (period) values ($1) returning period),
              k as (select u.slice_id, u.team_id, u.rate_card_id, sum(u.windows)::int8 as windows,
                           min(u.day) as first_day, sum(u.held) as held, sum(u.known) as known,
                           sum(u.active) as active, sum(u.memory) as memory,
                           array_agg(u.day) as days, array_agg(u.windows) as day_windows,
                           array_agg(u.held) as day_held, array_agg(u.known) as day_known,
                           array_agg(u.active) as day_active, array_agg(u.memory) as day_memory
                    from period_usage_days($1) u
                    group by u.slice_id, u.team_id, u.rate_card_id),
              u as (insert into book_slice
                    select $1, k.team_id, coalesce(t.display_name, k.team_id), t.cost_center,
                           g.model, s.kind, s.profile, k.rate_card_id, s.slice_id, s.slice_uuid,
                           g.node, s.compute_share, s.memory_share, s.memory_reserved_bytes,
                           k.windows, k.first_day, k.held, k.known, k.active, k.memory, k.days,
                           k.day_windows, k.day_held, k.day_known, k.day_active, k.day_memory
                    from k
                    join slice s on s.slice_id = k.slice_id
                    join gpu g on g.gpu_id = s.gpu_id
                    left join team t on t.team_id = k.team_id
                    returning 1),
              m as (insert into book_model_day select * from period_model_day($1, false) returning 1)
         select (select count(*) from u) as slice_rows, (select count(*) from m) as presence_rows
         from b",
        month.first_day()
    )
    .fetch_one(&mut *conn)
    .await?;
    write_gpu_days(conn, month).await?;
    Ok(())
}

/// Writes each GPU's days of `month` into its books, presence and stranded seconds (`book_gpu`,
/// one row per GPU and rate card version with its days as arrays: what the per-card ledger and the
/// FOCUS split cost allocation of an issued month are read from); part of
/// [`write_books_from_days`], a statement of its own so that its cost can be measured apart (`slicemeter-bench scale`).
/// Returns the rows written.
pub async fn write_gpu_days(conn: &mut PgConnection, month: Month) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "insert into book_gpu
         select $1, d.gpu_id, d.rate_card_id, array_agg(d.day), array_agg(d.present_seconds),
                array_agg(d.stranded_compute_slice_seconds),
                array_agg(d.stranded_memory_slice_seconds),
                array_agg(d.stranded_thread_percent_seconds),
                array_agg(d.stranded_memory_byte_seconds)
         from period_gpu_day($1, false) d
         group by d.gpu_id, d.rate_card_id",
        month.first_day()
    )
    .execute(&mut *conn)
    .await?
    .rows_affected())
}

/// Freezes the period's books (its first invoice is being issued); `false` if there are none.
pub async fn freeze_books(conn: &mut PgConnection, month: Month) -> Result<bool, sqlx::Error> {
    let p = month.first_day();
    sqlx::query!(
        "update book set frozen_at = now() where period = $1 and frozen_at is null",
        p
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query_scalar!(
        r#"select exists (select 1 from book where period = $1) as "exists!""#,
        p
    )
    .fetch_one(&mut *conn)
    .await
}

/// Unfreezes the books when no issued invoice of the period is left (a credit note voided the last),
/// so that the next run prices what the rollups hold then.
pub async fn unfreeze_books_if_nothing_issued(
    conn: &mut PgConnection,
    month: Month,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "update book set frozen_at = null
         where period = $1 and frozen_at is not null
           and not exists (select 1 from invoice i where i.period = $1
                           and i.kind = 'invoice' and i.status = 'issued')",
        month.first_day()
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Usage of `month` per (team, model, kind, profile, rate card in force), optionally of one team,
/// from its books or the rollups (`from_book`), and the first day no rate card covered, if any.
pub async fn usage_aggregates(
    conn: &mut PgConnection,
    month: Month,
    from_book: bool,
    team: Option<&TeamId>,
) -> Result<(Vec<(UsageAggregate, Option<i64>)>, Option<DateTime<Utc>>), sqlx::Error> {
    let rows = sqlx::query!(
        // Two steps: the month summed per group of slices that share their shares (the day
        // rollup at the team's grain, `period_team_lines`; the books per slice), additions only,
        // then each group's sums weighed by its shares: a handful of multiplications per group
        // instead of per row.
        r#"with per_group as (
               select d.team_id, d.rate_card_id, d.model, d.kind, d.profile, d.compute_share,
                      d.memory_share, d.memory_reserved_bytes, 1::int8 as slices, d.windows,
                      d.first_day as first_hour, d.held_seconds as held,
                      d.known_seconds as known, d.active_seconds as active,
                      d.memory_byte_seconds as memory
               from period_slice_sums($1, true) d
               where $2
               union all
               select d.team_id, d.rate_card_id, d.model, d.kind, d.profile, d.compute_share,
                      d.memory_share, d.memory_reserved_bytes, d.slices, d.windows,
                      d.first_day, d.held, d.known, d.active, d.memory
               from period_team_lines($1) d
               where not $2),
           per_team as (select * from per_group p where $3::text is null or p.team_id = $3)
           -- Per share, additions only: the shares are applied in Rust as fractions
           -- (`ExactSums`), exact, and the sums come as text because they may be longer than a
           -- Decimal holds.
           select p.team_id as "team!: TeamId", p.model as "model!", p.kind as "kind!: SliceKind", p.profile,
                  p.rate_card_id as "rate_card?", p.compute_share as "compute_share!",
                  p.memory_share as "memory_share!",
                  p.memory_reserved_bytes as "memory_reserved_bytes!",
                  sum(p.slices)::int8 as "slices!",
                  sum(p.windows)::int8 as "windows!",
                  min(p.first_hour) as "first_hour!",
                  sum(p.held)::text as "held!",
                  sum(p.known)::text as "known!",
                  sum(p.active)::text as "active!",
                  sum(p.memory)::text as "memory!"
           from per_team p
           group by 1, 2, 3, 4, 5, 6, 7, 8
           order by 1, 2, 3, 4, 5, 6, 7, 8"#,
        month.first_day(),
        from_book,
        team.map(TeamId::as_str)
    )
    .fetch_all(&mut *conn)
    .await?;
    let exact = |s: &str| {
        Exact::parse(s).ok_or_else(|| sqlx::Error::Decode(format!("{s:?} is not a sum").into()))
    };
    let mut uncovered: Option<DateTime<Utc>> = None;
    let mut out: Vec<(UsageAggregate, Option<i64>)> = Vec::with_capacity(rows.len());
    for r in rows {
        if r.rate_card.is_none() {
            uncovered = Some(uncovered.map_or(r.first_hour, |u| u.min(r.first_hour)));
        }
        let kind = r.kind;
        let share = PhysicalShare {
            kind,
            compute: r.compute_share,
            memory: r.memory_share,
            memory_reserved_bytes: u64::try_from(r.memory_reserved_bytes).unwrap_or_default(),
        };
        let (held, known, active, memory) = (
            exact(&r.held)?,
            exact(&r.known)?,
            exact(&r.active)?,
            exact(&r.memory)?,
        );
        let part = ExactSums::of_share(&held, &active, &memory, &share);
        let known_compute = &known * Exact::share(share.compute);
        let sums = OccupancySums {
            held_seconds: held.to_decimal(),
            held_compute: part.held_compute.to_decimal(),
            held_memory: part.held_memory.to_decimal(),
            known_seconds: known.to_decimal(),
            known_compute: known_compute.to_decimal(),
            compute_active_seconds: active.to_decimal(),
            active_compute: part.active_compute.to_decimal(),
            memory_gib_seconds: (memory / GIB).round(6),
            memory_used: part.memory_used.to_decimal(),
            windows: r.windows,
        };
        let rate_card = r.rate_card.unwrap_or_default();
        match out.last_mut() {
            Some((u, _))
                if u.team == r.team
                    && u.model == r.model
                    && u.kind == kind
                    && u.profile == r.profile
                    && u.rate_card == rate_card =>
            {
                u.slices += r.slices;
                u.sums.add(&sums);
                u.exact.add(&part);
            }
            _ => out.push((
                UsageAggregate {
                    team: r.team,
                    model: r.model,
                    kind,
                    profile: r.profile,
                    rate_card,
                    slices: r.slices,
                    sums,
                    exact: part,
                },
                r.rate_card,
            )),
        }
    }
    Ok((out, uncovered))
}

/// GPU presence of `month` per (model, rate card in force), with what its GPUs' layouts stranded,
/// from its books or the rollups, and the first uncovered day. One read: presence per model and
/// day comes per GPU geometry with its stranded seconds (migration 0030), which are counted in the
/// geometry's units (its slices and bytes) and made exact here; books written before migration
/// 0028 hold no geometry and nothing stranded.
pub async fn presence_aggregates(
    conn: &mut PgConnection,
    month: Month,
    from_book: bool,
) -> Result<(Vec<(PresenceAggregate, Option<i64>)>, Option<DateTime<Utc>>), sqlx::Error> {
    let rows = sqlx::query!(
        r#"select d.model as "model!", d.rate_card_id as "rate_card?",
                  d.memory_bytes, d.compute_slices, d.memory_slices,
                  min(d.day) as "first_hour!", sum(d.present_seconds) as "present_seconds!",
                  sum(d.stranded_compute_slice_seconds) as "compute_slice_seconds!",
                  sum(d.stranded_memory_slice_seconds) as "memory_slice_seconds!",
                  sum(d.stranded_thread_percent_seconds) as "thread_percent_seconds!",
                  sum(d.stranded_memory_byte_seconds) as "memory_byte_seconds!"
           from period_model_day($1, $2) d
           group by 1, 2, 3, 4, 5
           order by 1, 2, 3, 4, 5"#,
        month.first_day(),
        from_book
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut uncovered: Option<DateTime<Utc>> = None;
    let mut out: Vec<(PresenceAggregate, Option<i64>)> = Vec::new();
    for r in rows {
        if r.rate_card.is_none() {
            uncovered = Some(uncovered.map_or(r.first_hour, |u| u.min(r.first_hour)));
        }
        let stranded = match (r.memory_bytes, r.compute_slices, r.memory_slices) {
            (Some(memory_bytes), Some(compute_slices), Some(memory_slices)) => {
                StrandedSeconds::of_gpu(
                    &GpuGeometry {
                        memory_bytes: u64::try_from(memory_bytes).unwrap_or(1),
                        compute_slices: u8::try_from(compute_slices).unwrap_or(1),
                        memory_slices: u8::try_from(memory_slices).unwrap_or(1),
                    },
                    r.compute_slice_seconds,
                    r.memory_slice_seconds,
                    r.thread_percent_seconds,
                    r.memory_byte_seconds,
                )
            }
            _ => StrandedSeconds::default(),
        };
        match out.last_mut() {
            Some((p, c)) if p.model == r.model && *c == r.rate_card => {
                p.present_seconds += r.present_seconds;
                p.stranded.add(&stranded);
            }
            _ => out.push((
                PresenceAggregate {
                    model: r.model,
                    rate_card: r.rate_card.unwrap_or_default(),
                    present_seconds: r.present_seconds,
                    stranded,
                },
                r.rate_card,
            )),
        }
    }
    Ok((out, uncovered))
}
