//! The pod-hour costs' SQL: the hourly rows as they are, their consumers' places and the slices'
//! classes, in one snapshot, and PostgreSQL's quotient for a group of rows whose memory used it
//! divides as one.

use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;

/// The `usage_hourly` rows of `[from, to)` (`team`'s only, if given) as the pod-hour costs read
/// them (`super::pod_hours`): as they are, unsummed, each with the rate card version in force and,
/// for a time-sliced slice, its memory used as [`usage_sums`](crate::reports::store::usage_sums) divides it (`memory x share /
/// reserved bytes`, PostgreSQL's quotient, as text: exact whatever its places). At a 1,000-GPU
/// month, two million rows.
pub async fn pod_hour_rows(
    conn: &mut PgConnection,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    team: Option<&TeamId>,
) -> Result<HourRows, sqlx::Error> {
    let mut read = sqlx::query_as!(
        HourRow,
        r#"with cards as (
               select t.at, r.rate_card_id
               from generate_series(date_trunc('hour', $1, 'UTC'), $2, interval '1 hour') t(at)
               join rate_card_span r
                 on t.at >= r.effective_from
                and (r.effective_until is null or t.at < r.effective_until))
           select h.hour, h.team_id as "team: TeamId", v.rate_card_id as "rate_card?",
                  h.slice_id, h.consumer_id, h.held_seconds as held,
                  h.compute_active_seconds as active,
                  case when not s.reserved
                       then (h.memory_byte_seconds * s.memory_share / s.memory_reserved_bytes)::text
                  end as memory_used
           from usage_hourly h
           join slice s using (slice_id)
           left join cards v on v.at = h.hour
           where h.hour >= $1 and h.hour < $2 and ($3::text is null or h.team_id = $3)"#,
        from,
        to,
        team.map(TeamId::as_str),
    )
    .fetch(conn);
    let mut rows = HourRows::default();
    while let Some(row) = read.try_next().await? {
        rows.push(row);
    }
    Ok(rows)
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
}

const CHUNK: usize = 1 << 16;

impl HourRows {
    fn push(&mut self, row: HourRow) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < CHUNK => c.push(row),
            _ => {
                let mut c = Vec::with_capacity(CHUNK);
                c.push(row);
                self.chunks.push(c);
            }
        }
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn iter(&self) -> impl Iterator<Item = &HourRow> {
        self.chunks.iter().flatten()
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
    pub team: TeamId,
    pub rate_card: Option<i64>,
    pub slice_id: i32,
    pub consumer_id: i64,
    pub held: Decimal,
    pub active: Decimal,
    /// A time-sliced slice's memory used (`memory x share / reserved bytes`), exact, as text.
    pub memory_used: Option<String>,
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
