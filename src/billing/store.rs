//! Billing's SQL for a period, run inside `service`'s transactions: the period locks; the period's
//! books (migrations/0007_books.sql: the usage and presence its invoice run priced, written by each
//! run while none of the period's invoices is issued and frozen by the first issue, so that an issued
//! period's invoices, report and exports are read from what was issued); and the aggregates pricing
//! reads from the books or the rollups: usage per (team, model, kind, profile) and GPU presence per
//! model, each split by the rate card version in force for its hours.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::period::Books;
use super::pricing::{PresenceAggregate, UsageAggregate};
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::domain::usage::OccupancySums;

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
            Some(at) => Books::Frozen { at },
            None => Books::Drafted,
        },
    })
}

/// The months in `[first, last]` whose books are frozen (issued).
pub async fn frozen_periods(
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

/// Makes the partition of `month`'s books if it is not there. Making one locks the whole books
/// table to the end of the transaction, so the invoice run makes it in a transaction of its own
/// first; and it cannot be made while a statement uses the table, so not in the books' own insert.
pub async fn books_partition(conn: &mut PgConnection, month: Month) -> Result<(), sqlx::Error> {
    sqlx::query("select ensure_month_partition('book_slice_day', $1)")
        .bind(month.first_day())
        .execute(conn)
        .await?;
    Ok(())
}

/// Replaces the period's unfrozen books with what the rollups hold now, in one statement (one
/// snapshot: usage and presence from the same instant). The slice-days are written with their sums
/// per slice, team and rate card version (what billing prices, `period_slice_sums`), so that
/// pricing the books never reads the slice-days again. The sums are read from the rollups rather
/// than from the slice-days just written: the same additions over the same snapshot, and cheaper,
/// as summing the written rows needs them kept aside (a month of 2,000 GPUs: 5.2-5.5 s for the
/// statement, against 5.5-6.6 s summing the kept rows).
pub async fn write_books(conn: &mut PgConnection, month: Month) -> Result<(), sqlx::Error> {
    let p = month.first_day();
    // The book first: an issued month's refuses (`book_frozen`), and its rows then go with it.
    // Not a trigger on `book`: under Citus a reference table's trigger cannot write to the
    // distributed slice-days (migration 0019).
    sqlx::query!("delete from book where period = $1", p)
        .execute(&mut *conn)
        .await?;
    sqlx::query!("delete from book_slice_day where period = $1", p)
        .execute(&mut *conn)
        .await?;
    sqlx::query!("delete from book_slice_sums where period = $1", p)
        .execute(&mut *conn)
        .await?;
    sqlx::query!("delete from book_model_day where period = $1", p)
        .execute(&mut *conn)
        .await?;
    books_partition(&mut *conn, month).await?;
    sqlx::query!(
        "with b as (insert into book (period) values ($1) returning period),
              u as (insert into book_slice_day select * from period_slice_day($1, false) returning 1),
              s as (insert into book_slice_sums select $1, * from period_slice_sums($1, false)
                    returning 1),
              m as (insert into book_model_day select * from period_model_day($1, false) returning 1)
         select (select count(*) from u) as usage_rows, (select count(*) from s) as slice_rows,
                (select count(*) from m) as presence_rows
         from b",
        p
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(())
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
        // Two steps: the month summed per slice, team and rate card (additions only,
        // `period_slice_sums`), then each slice's sums weighed by its shares: a handful of
        // multiplications per slice instead of per row.
        r#"with per_slice as (
               select d.slice_id, d.team_id, d.rate_card_id, d.model, d.kind, d.profile,
                      d.compute_share, d.memory_share, d.memory_reserved_bytes,
                      d.windows, d.first_day as first_hour, d.held_seconds as held,
                      d.known_seconds as known, d.active_seconds as active,
                      d.memory_byte_seconds as memory
               from period_slice_sums($1, $2) d
               where $3::text is null or d.team_id = $3)
           select p.team_id as "team!: TeamId", p.model as "model!", p.kind as "kind!", p.profile,
                  p.rate_card_id as "rate_card?",
                  count(*) as "slices!",
                  sum(p.windows)::int8 as "windows!",
                  min(p.first_hour) as "first_hour!",
                  round(sum(p.held), 12) as "held_seconds!",
                  round(sum(p.held * p.compute_share), 12) as "held_compute!",
                  round(sum(p.held * p.memory_share), 12) as "held_memory!",
                  round(sum(p.known), 12) as "known_seconds!",
                  round(sum(p.known * p.compute_share), 12) as "known_compute!",
                  round(sum(p.active), 12) as "active_seconds!",
                  round(sum(p.active * p.compute_share), 12) as "active_compute!",
                  round(sum(p.memory) / 1073741824, 6) as "memory_gib_seconds!",
                  round(sum(p.memory * p.memory_share / p.memory_reserved_bytes), 12) as "memory_used!"
           from per_slice p
           group by 1, 2, 3, 4, 5
           order by 1, 2, 3, 4, 5"#,
        month.first_day(),
        from_book,
        team.map(TeamId::as_str)
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut uncovered: Option<DateTime<Utc>> = None;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        if r.rate_card.is_none() {
            uncovered = Some(uncovered.map_or(r.first_hour, |u| u.min(r.first_hour)));
        }
        out.push((
            UsageAggregate {
                team: r.team,
                model: r.model,
                kind: SliceKind::from_str(&r.kind).map_err(|e| sqlx::Error::Decode(e.into()))?,
                profile: r.profile,
                rate_card: r.rate_card.unwrap_or_default(),
                slices: r.slices,
                sums: OccupancySums {
                    held_seconds: r.held_seconds,
                    held_compute: r.held_compute,
                    held_memory: r.held_memory,
                    known_seconds: r.known_seconds,
                    known_compute: r.known_compute,
                    active_seconds: r.active_seconds,
                    active_compute: r.active_compute,
                    memory_gib_seconds: r.memory_gib_seconds,
                    memory_used: r.memory_used,
                    windows: r.windows,
                },
            },
            r.rate_card,
        ));
    }
    Ok((out, uncovered))
}

/// GPU presence of `month` per (model, rate card in force), from its books or the rollups, and the
/// first uncovered day.
pub async fn presence_aggregates(
    conn: &mut PgConnection,
    month: Month,
    from_book: bool,
) -> Result<(Vec<(PresenceAggregate, Option<i64>)>, Option<DateTime<Utc>>), sqlx::Error> {
    let rows = sqlx::query!(
        r#"select d.model as "model!", d.rate_card_id as "rate_card?",
                  min(d.day) as "first_hour!", sum(d.present_seconds) as "present_seconds!"
           from period_model_day($1, $2) d
           group by 1, 2
           order by 1, 2"#,
        month.first_day(),
        from_book
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut uncovered: Option<DateTime<Utc>> = None;
    let out = rows
        .into_iter()
        .map(|r| {
            if r.rate_card.is_none() {
                uncovered = Some(uncovered.map_or(r.first_hour, |u| u.min(r.first_hour)));
            }
            (
                PresenceAggregate {
                    model: r.model,
                    rate_card: r.rate_card.unwrap_or_default(),
                    present_seconds: r.present_seconds,
                },
                r.rate_card,
            )
        })
        .collect();
    Ok((out, uncovered))
}
