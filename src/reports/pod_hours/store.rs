//! The pod-hour costs' SQL: the hourly rows as they are, their consumers' places and the slices'
//! classes, in one snapshot, and PostgreSQL's quotient for a group of rows whose memory used it
//! divides as one.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;

/// The `usage_hourly` rows of `[from, to)` (`team`'s only, if given) as the pod-hour costs read
/// them (`super::pod_hours`): as they are, unsummed, each with its team as an index into [`teams`]
/// (its name only where the table lacks it), the rate card version in force (`hour_cards`)
/// and, for a time-sliced slice, its memory used as
/// [`usage_sums`](crate::reports::store::usage_sums) divides it (`memory x share / reserved
/// bytes`, PostgreSQL's quotient, as text: exact whatever its places). At a 1,000-GPU month, two
/// million rows.
pub async fn pod_hour_rows(
    conn: &mut PgConnection,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    team: Option<&TeamId>,
) -> Result<HourRows, sqlx::Error> {
    // Two million rows are one plan's work: compiling it buys nothing back.
    sqlx::query!("set local jit = off")
        .execute(&mut *conn)
        .await?;
    let cards = hour_cards(&mut *conn, from, to).await?;
    let mut rows = HourRows {
        teams: teams(&mut *conn).await?,
        ..HourRows::default()
    };
    let mut read = sqlx::query!(
        r#"with teams as (
               select team_id, (row_number() over (order by team_id collate "C") - 1)::int4 as n
               from team)
           select h.hour, t.n as "team?", case when t.n is null then h.team_id end as team_gone,
                  h.slice_id, h.consumer_id, h.held_seconds as held,
                  h.compute_active_seconds as active,
                  case when not s.reserved
                       then (h.memory_byte_seconds * s.memory_share / s.memory_reserved_bytes)::text
                  end as memory_used
           from usage_hourly h
           join slice s using (slice_id)
           left join teams t using (team_id)
           where h.hour >= $1 and h.hour < $2 and ($3::text is null or h.team_id = $3)"#,
        from,
        to,
        team.map(TeamId::as_str),
    )
    .fetch(conn);
    while let Some(r) = read.try_next().await? {
        // Teams are never deleted: a row whose team the table lacks is broken books, never a row
        // to drop or to name nobody.
        let team = r.team.and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
            sqlx::Error::Protocol(format!(
                "an hourly row's team {:?} is not in the same snapshot",
                r.team_gone.unwrap_or_default()
            ))
        })?;
        rows.push(
            HourRow {
                hour: r.hour,
                team,
                rate_card: cards.get(&r.hour.timestamp()).copied(),
                slice_id: r.slice_id,
                consumer_id: r.consumer_id,
                held: r.held,
                active: r.active,
                memory_used: None,
            },
            r.memory_used,
        )?;
    }
    Ok(rows)
}

/// Each hour of `[from, to)` (by its Unix time) a rate card version is in force for, with it:
/// a row finds its version by its hour.
async fn hour_cards(
    conn: &mut PgConnection,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<HashMap<i64, i64>, sqlx::Error> {
    let hours = sqlx::query!(
        r#"select t.at as "at!", r.rate_card_id as "rate_card_id!"
           from generate_series(date_trunc('hour', $1, 'UTC'), $2, interval '1 hour') t(at)
           join rate_card_span r
             on t.at >= r.effective_from
            and (r.effective_until is null or t.at < r.effective_until)"#,
        from,
        to
    )
    .fetch_all(conn)
    .await?;
    Ok(hours
        .into_iter()
        .map(|h| (h.at.timestamp(), h.rate_card_id))
        .collect())
}

/// Every team, in the order [`pod_hour_rows`] numbers them.
async fn teams(conn: &mut PgConnection) -> Result<Vec<TeamId>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select team_id as "team_id: TeamId" from team order by team_id collate "C""#
    )
    .fetch_all(conn)
    .await
}

/// The consumers `ids` name (those of the hourly rows read), each with the place the usage report
/// names it by: namespace, workload and pod.
pub async fn consumer_places(
    conn: &mut PgConnection,
    ids: &[i64],
) -> Result<Vec<ConsumerPlace>, sqlx::Error> {
    sqlx::query_as!(
        ConsumerPlace,
        r#"select c.consumer_id, c.namespace, c.pod,
                  (workload_of(c.pod, c.labels, c.job_id, c.unix_user))[2] as workload
           from consumer c
           where c.consumer_id = any($1)"#,
        ids,
    )
    .fetch_all(conn)
    .await
}

/// Every slice's invoice line fields and shares.
pub async fn slice_classes(conn: &mut PgConnection) -> Result<Vec<SliceClass>, sqlx::Error> {
    sqlx::query_as!(
        SliceClass,
        r#"select s.slice_id, g.model, s.kind as "kind: SliceKind", s.profile, s.reserved,
                  s.compute_share, s.memory_share
           from slice s join gpu g using (gpu_id)"#
    )
    .fetch_all(conn)
    .await
}

/// The memory used of time-sliced slices' groups of hourly rows (an hour, a slice and the rows'
/// consumers: the containers of one pod), as [`usage_sums`](crate::reports::store::usage_sums) divides a group's sum: PostgreSQL's
/// quotient of `sum(memory) x share / reserved bytes`, as text, in `groups`' order.
pub async fn memory_used_of_groups(
    conn: &mut PgConnection,
    groups: &[(DateTime<Utc>, i32, Vec<i64>)],
) -> Result<Vec<String>, sqlx::Error> {
    let (mut hours, mut slices, mut consumers, mut ns) = (vec![], vec![], vec![], vec![]);
    for (n, (hour, slice, members)) in groups.iter().enumerate() {
        for c in members {
            hours.push(*hour);
            slices.push(*slice);
            consumers.push(*c);
            ns.push(n as i32);
        }
    }
    sqlx::query_scalar!(
        r#"select (sum(h.memory_byte_seconds) * s.memory_share / s.memory_reserved_bytes)::text
                  as "memory_used!"
           from unnest($1::timestamptz[], $2::int4[], $3::int8[], $4::int4[])
                as g(hour, slice_id, consumer_id, n)
           join usage_hourly h using (hour, slice_id, consumer_id)
           join slice s using (slice_id)
           group by g.n, s.memory_share, s.memory_reserved_bytes
           order by g.n"#,
        &hours,
        &slices,
        &consumers,
        &ns,
    )
    .fetch_all(conn)
    .await
}

/// The rows [`pod_hour_rows`] reads, in chunks of [`CHUNK`] rows: two million rows are not moved
/// again each time a vector of them grows (the pages of each move fresh memory to zero).
#[derive(Debug, Default)]
pub struct HourRows {
    chunks: Vec<Vec<HourRow>>,
    len: usize,
    /// The teams the rows' indices name: every team of the table.
    pub teams: Vec<TeamId>,
    /// The time-sliced rows' memory used, exact, as text.
    quotients: Vec<String>,
}

const CHUNK: usize = 1 << 16;

impl HourRows {
    /// Adds `row`, with its memory used if its slice is time-sliced.
    pub(super) fn push(
        &mut self,
        mut row: HourRow,
        memory_used: Option<String>,
    ) -> Result<(), sqlx::Error> {
        if let Some(q) = memory_used {
            self.quotients.push(q);
            row.memory_used = Some(u32::try_from(self.quotients.len() - 1).map_err(|_| {
                sqlx::Error::Protocol("over 2^32 time-sliced hourly rows".to_owned())
            })?);
        }
        match self.chunks.last_mut() {
            Some(c) if c.len() < CHUNK => c.push(row),
            _ => {
                let mut c = Vec::with_capacity(CHUNK);
                c.push(row);
                self.chunks.push(c);
            }
        }
        self.len += 1;
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn iter(&self) -> impl Iterator<Item = &HourRow> {
        self.chunks.iter().flatten()
    }

    /// The rows `range` holds, in order.
    pub fn range(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = &HourRow> {
        let n = range.len();
        self.chunks[range.start / CHUNK..]
            .iter()
            .flatten()
            .skip(range.start % CHUNK)
            .take(n)
    }

    /// A time-sliced row's memory used (`memory x share / reserved bytes`), exact, as text.
    pub fn memory_used(&self, row: &HourRow) -> Option<&str> {
        row.memory_used.map(|i| self.quotients[i as usize].as_str())
    }
}

impl std::ops::Index<usize> for HourRows {
    type Output = HourRow;
    fn index(&self, i: usize) -> &HourRow {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

/// One hourly row, as [`pod_hour_rows`] reads it.
#[derive(Debug, Clone)]
pub struct HourRow {
    pub hour: DateTime<Utc>,
    /// Its team's index into [`HourRows::teams`].
    pub team: u32,
    pub rate_card: Option<i64>,
    pub slice_id: i32,
    pub consumer_id: i64,
    pub held: Decimal,
    pub active: Decimal,
    /// A time-sliced slice's: its memory used's index ([`HourRows::memory_used`]), set by
    /// [`HourRows::push`].
    pub(super) memory_used: Option<u32>,
}

/// A consumer's place in the usage report's rows.
#[derive(Debug, Clone)]
pub struct ConsumerPlace {
    pub consumer_id: i64,
    pub namespace: Option<String>,
    pub workload: Option<String>,
    pub pod: Option<String>,
}

/// A slice's invoice line fields (but the team and rate card) and shares.
#[derive(Debug, Clone)]
pub struct SliceClass {
    pub slice_id: i32,
    pub model: String,
    pub kind: SliceKind,
    pub profile: Option<String>,
    pub reserved: bool,
    pub compute_share: Decimal,
    pub memory_share: Decimal,
}
