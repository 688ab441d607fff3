//! Reports' SQL. It reads the hourly rollups, or an issued period's books, never the raw windows:
//! usage sums per group and bucket, consumers no team claims, per-slice days (`slices::SliceDay`),
//! per-model days of presence, a period's documents for the ERP journal, and daily capacity.

use chrono::{DateTime, NaiveDate, Utc};
use futures_util::{Stream, StreamExt, TryStreamExt};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use super::monthly::UnattributedConsumer;
use super::slices::SliceDay;
use super::usage::{Dimension, GroupBy, Step, UsageSums};
use crate::billing::invoice::{InvoiceKind, InvoiceStatus};
use crate::domain::batch::DraClaim;
use crate::domain::dcgm::DcgmLabel;
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::domain::time::{Month, whole_days};

/// Sums of the rollups per bucket, invoice line (team, GPU model, kind, profile, rate card version
/// in force), reserved or not, and what else `group_by` asks for (node, the consumer's namespace,
/// workload, pod, container, label values): the terms DESIGN.md's share formula is linear in,
/// weighted by each slice's compute and memory share. `reports::usage` applies the weights and prices.
// long: one query for every `group_by`: its SQL text and its binds are assembled side by side so
// that they cannot disagree
pub async fn usage_sums(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: &GroupBy,
    step: Step,
    team: Option<&TeamId>,
) -> Result<Vec<UsageSums>, sqlx::Error> {
    // Whole days from the day rollups (unless the step is an hour), the rest from the hourly ones,
    // and so are days a rate card version starts after midnight: each hour priced by its own card.
    let days = whole_days(from, to).filter(|_| step != Step::Hour);
    let labels = group_by.label_keys();
    sqlx::query!(
        // Additions first, per slice or per share class (see each), and the shares weighed after,
        // once a group instead of once a row. Which of the two runs is `$16`'s choice; the other
        // is cut off before it reads a row. `$17` reads whole days from the team's day rollup
        // instead of the day rollup, when nothing finer is asked for.
        r#"with split as (
               select distinct date_trunc('day', r.effective_from, 'UTC') as day
               from rate_card r
               where r.effective_from <> date_trunc('day', r.effective_from, 'UTC')
                 and r.effective_from >= $5 and r.effective_from < $6),
           -- Month rollups read for a month's first whole days, up to `through` (`$18`: the
           -- step is a month), while they may be.
           months as materialized (
               select m.month, m.through
               from month_rollups_valid($5, $6) m
               where $18 and not $17),
           -- Where a month rollup is read, the whole days none covers: before, between and after
           -- them.
           day_ranges as (
               select r.lo, r.hi
               from (select coalesce(lag(m.through) over (order by m.month), $5) as lo,
                            m.month as hi
                     from months m
                     union all
                     select max(m.through), $6 from months m) r
               where r.lo < r.hi),
           rollup as not materialized (
               select d.day as at, d.slice_id, d.consumer_id, d.team_id, d.held_seconds,
                      d.compute_known_seconds, d.compute_active_seconds, d.memory_byte_seconds,
                      d.window_count
               from usage_daily d
               where d.day >= $5 and d.day < $6 and d.day not in (select day from split)
                 and not $17 and not exists (select from months)
               union all
               -- Each range its own read of the day rollup's key (`offset 0`: planned on its own,
               -- for each range), not a scan of every day of the months it touches.
               select d.day, d.slice_id, d.consumer_id, d.team_id, d.held_seconds,
                      d.compute_known_seconds, d.compute_active_seconds, d.memory_byte_seconds,
                      d.window_count
               from day_ranges r
               cross join lateral (
                   select * from usage_daily d
                   where d.day >= r.lo and d.day < r.hi and d.day not in (select day from split)
                     and ($4::text is null or d.team_id = $4)
                   offset 0) d
               union all
               -- A month rollup's row at its month's first hour, whose rate card version is the
               -- one of each of its days.
               select m.month, m.slice_id, m.consumer_id, m.team_id, m.held_seconds,
                      m.compute_known_seconds, m.compute_active_seconds, m.memory_byte_seconds,
                      m.window_count
               from months x
               join usage_month m on m.month = x.month
               -- The hours before the first whole day and from the last on (all of them when
               -- there is none), and split days': ranges of the key, so that a month of whole
               -- days reads no hourly row at all.
               union all
               select h.hour, h.slice_id, h.consumer_id, h.team_id, h.held_seconds,
                      h.compute_known_seconds, h.compute_active_seconds, h.memory_byte_seconds,
                      h.window_count
               from usage_hourly h
               where h.hour >= $1 and h.hour < coalesce($5, $2)
               union all
               select h.hour, h.slice_id, h.consumer_id, h.team_id, h.held_seconds,
                      h.compute_known_seconds, h.compute_active_seconds, h.memory_byte_seconds,
                      h.window_count
               from usage_hourly h
               where h.hour >= coalesce($6, $2) and h.hour < $2
               union all
               select h.hour, h.slice_id, h.consumer_id, h.team_id, h.held_seconds,
                      h.compute_known_seconds, h.compute_active_seconds, h.memory_byte_seconds,
                      h.window_count
               from split x
               join usage_hourly h on h.hour >= x.day and h.hour < x.day + interval '1 day'),
           -- Each hour of the range with the rate card version in force: a row finds its version
           -- by an equal hour, not by a range join per row.
           cards as (
               select t.at, r.rate_card_id
               from generate_series(date_trunc('hour', $1, 'UTC'), $2, interval '1 hour') t(at)
               join rate_card_span r
                 on t.at >= r.effective_from
                and (r.effective_until is null or t.at < r.effective_until)),
           -- The consumer's fields asked for.
           fields as not materialized (
               select c.consumer_id,
                      case when $8 then c.namespace end as namespace,
                      case when $9 then (workload_of(c.pod, c.labels, c.job_id, c.unix_user))[2]
                      end as workload,
                      case when $10 then c.pod end as pod,
                      case when $11 then c.container end as container,
                      case when cardinality($12::text[]) > 0 then
                          array(select c.labels ->> k.key
                                from unnest($12::text[]) with ordinality as k(key, n)
                                order by k.n)
                      end as labels,
                      case when $15 then c.dra_claim end as dra_claim
               from consumer c),
           -- Each row in its bucket, with its team (the row's own: a consumer's usage goes to the
           -- owner of its namespace at the time), version and the consumer's fields asked for.
           named as not materialized (
               select date_trunc($3, u.at, 'UTC') as bucket, u.slice_id, u.team_id, v.rate_card_id,
                      f.namespace, f.workload, f.pod, f.container, f.labels, f.dra_claim,
                      u.held_seconds, u.compute_known_seconds, u.compute_active_seconds,
                      u.memory_byte_seconds, u.window_count
               from rollup u
               join fields f using (consumer_id)
               left join cards v on v.at = u.at
               where ($4::text is null or u.team_id = $4)),
           -- Months, and any step grouped by a consumer's fields: each slice's and consumer's rows
           -- summed first (a month folds their days into one group), the consumer's fields named
           -- once a group rather than once a row (a month of a team is a slice's 30 day rows).
           per_consumer as (
               select date_trunc($3, u.at, 'UTC') as bucket, u.slice_id, u.consumer_id, u.team_id,
                      v.rate_card_id,
                      sum(u.held_seconds) as held, sum(u.compute_known_seconds) as known,
                      sum(u.compute_active_seconds) as active, sum(u.memory_byte_seconds) as memory,
                      sum(u.window_count)::int8 as windows
               from rollup u
               left join cards v on v.at = u.at
               where not $16 and ($4::text is null or u.team_id = $4)
               group by 1, 2, 3, 4, 5),
           -- Then each slice's groups summed by the consumer's fields, its shares joined after.
           per_slice as (
               select p.bucket, p.slice_id, p.team_id, p.rate_card_id, f.namespace, f.workload,
                      f.pod, f.container, f.labels, f.dra_claim,
                      sum(p.held) as held, sum(p.known) as known, sum(p.active) as active,
                      sum(p.memory) as memory, sum(p.windows)::int8 as windows
               from per_consumer p
               join fields f using (consumer_id)
               group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
           -- Days and hours by slice-level fields: a slice's rows barely fold there, so rows are
           -- summed per share class (model, kind, profile, shares), a few groups a bucket.
           per_class as (
               select n.bucket, n.team_id, n.rate_card_id, g.model, s.kind, s.profile, s.reserved,
                      s.compute_share, s.memory_share, s.memory_reserved_bytes,
                      case when $7 then g.node end as node,
                      case when $13 then g.gpu_uuid end as gpu_uuid,
                      case when $14 then s.gpu_instance_id end as gpu_instance_id,
                      n.namespace, n.workload, n.pod, n.container, n.labels, n.dra_claim,
                      sum(n.held_seconds) as held, sum(n.compute_known_seconds) as known,
                      sum(n.compute_active_seconds) as active, sum(n.memory_byte_seconds) as memory,
                      sum(n.window_count)::int8 as windows
               from named n
               join slice s using (slice_id)
               join gpu g using (gpu_id)
               where $16
               group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19),
           -- Whole days by the team's day rollup's fields only: its rows as they are, a few a
           -- day, summed with the others below.
           team_days as (
               select date_trunc($3, t.day, 'UTC') as bucket, t.team_id, v.rate_card_id, t.model,
                      t.kind, t.profile, t.kind <> 'timeslice' as reserved, t.compute_share,
                      t.memory_share, t.memory_reserved_bytes, null::text as node,
                      null::text as gpu_uuid, null::int2 as gpu_instance_id,
                      null::text as namespace, null::text as workload, null::text as pod,
                      null::text as container, null::text[] as labels, null::jsonb as dra_claim,
                      t.held_seconds as held, t.compute_known_seconds as known,
                      t.compute_active_seconds as active, t.memory_byte_seconds as memory,
                      t.window_count as windows
               from usage_team_daily t
               left join cards v on v.at = t.day
               where $17 and t.day >= $5 and t.day < $6 and t.day not in (select day from split)
                 and ($4::text is null or t.team_id = $4)),
           classes as (
               select p.bucket, p.team_id, p.rate_card_id, g.model, s.kind, s.profile, s.reserved,
                      s.compute_share, s.memory_share, s.memory_reserved_bytes,
                      case when $7 then g.node end as node,
                      case when $13 then g.gpu_uuid end as gpu_uuid,
                      case when $14 then s.gpu_instance_id end as gpu_instance_id,
                      p.namespace, p.workload, p.pod, p.container, p.labels, p.dra_claim,
                      p.held, p.known, p.active, p.memory, p.windows
               from per_slice p
               join slice s using (slice_id)
               join gpu g using (gpu_id)
               union all
               select * from per_class
               union all
               select * from team_days)
           select p.bucket as "bucket!", p.team_id as "team!: TeamId", p.model as "model!",
                  p.kind as "kind!: SliceKind", p.profile, p.rate_card_id as "rate_card?",
                  p.node, p.namespace, p.workload, p.pod, p.container,
                  p.labels as "labels: Vec<Option<String>>", p.gpu_uuid, p.gpu_instance_id,
                  p.dra_claim as "dra_claim: sqlx::types::Json<DraClaim>",
                  p.reserved as "reserved!",
                  round(sum(p.held), 9) as "held_seconds!",
                  round(sum(p.held * p.compute_share), 9) as "held_compute!",
                  round(sum(p.held * p.memory_share), 9) as "held_memory!",
                  round(sum(p.known), 9) as "known_seconds!",
                  round(sum(p.known * p.compute_share), 9) as "known_compute!",
                  round(sum(p.active), 9) as "compute_active_seconds!",
                  round(sum(p.active * p.compute_share), 9) as "active_compute!",
                  round(sum(p.memory) / 1073741824, 9) as "memory_gib_seconds!",
                  round(sum(p.memory * p.memory_share / p.memory_reserved_bytes), 9) as "memory_used!",
                  sum(p.windows)::int8 as "windows!"
           from classes p
           group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16
           order by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16"#,
        from,
        to,
        step.as_str(),
        team.map(TeamId::as_str),
        days.map(|d| d.0),
        days.map(|d| d.1),
        group_by.has_node(),
        group_by.has(&Dimension::Namespace),
        group_by.has(&Dimension::Workload),
        group_by.has(&Dimension::Pod),
        group_by.has(&Dimension::Container),
        &labels,
        group_by.has(&Dimension::Dcgm(DcgmLabel::Uuid)),
        group_by.has(&Dimension::Dcgm(DcgmLabel::GpuIId)),
        group_by.has_dra_claim(),
        step != Step::Month && !group_by.has_consumer_field(),
        step != Step::Hour && group_by.fits_team_days(),
        step == Step::Month
    )
    // Each row made into its sums as it comes: a month by the hour is millions of rows.
    .fetch(pool)
    .map_ok(|r| UsageSums {
        bucket: r.bucket,
        team: r.team,
        model: r.model,
        kind: r.kind,
        profile: r.profile,
        rate_card: r.rate_card,
        node: r.node,
        namespace: r.namespace,
        workload: r.workload,
        pod: r.pod,
        container: r.container,
        labels: r.labels.unwrap_or_default(),
        gpu_uuid: r.gpu_uuid,
        gpu_instance_id: r.gpu_instance_id,
        dra_claim: r.dra_claim.map(|c| c.0),
        reserved: r.reserved,
        sums: crate::occupancy_sums!(r),
    })
    .try_collect()
    .await
}

/// The consumers whose usage in `[from, to)` no team claims (no label, and no owner of their
/// namespace at the time), most held first.
pub async fn unattributed_consumers(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<UnattributedConsumer>, sqlx::Error> {
    let days = whole_days(from, to);
    sqlx::query_as!(
        UnattributedConsumer,
        r#"with rollup as (
               select d.consumer_id, d.held_seconds from usage_daily d
               where d.day >= $3 and d.day < $4 and d.team_id = 'unattributed'
               union all
               select h.consumer_id, h.held_seconds from usage_hourly h
               where h.hour >= $1 and h.hour < coalesce($3, $2) and h.team_id = 'unattributed'
               union all
               select h.consumer_id, h.held_seconds from usage_hourly h
               where h.hour >= coalesce($4, $2) and h.hour < $2 and h.team_id = 'unattributed')
           select c.namespace, c.pod, c.container, c.unix_user, c.job_id,
                  round(sum(u.held_seconds) / 3600, 6) as "slice_hours!"
           from rollup u join consumer c using (consumer_id)
           group by c.consumer_id
           order by 6 desc, c.consumer_id
           limit 50"#,
        from,
        to,
        days.map(|d| d.0),
        days.map(|d| d.1)
    )
    .fetch_all(pool)
    .await
}

/// Usage rows of `month`, from its books or the rollups (`from_book`), optionally of one team,
/// ordered by invoice line (team, model, kind, profile, rate card) then slice and day, one row per
/// slice and day, streamed: memory does not grow with the fleet.
pub fn slice_days<'c>(
    conn: &'c mut PgConnection,
    month: Month,
    from_book: bool,
    team: Option<&'c TeamId>,
) -> impl Stream<Item = Result<SliceDay, sqlx::Error>> + 'c {
    Box::pin(one_row_per_day(slice_day_entries(
        conn, month, from_book, team,
    )))
}

/// Adds up adjacent rows of one slice, team, rate card version and day: the books keep a day once
/// per consumer of the team that held the slice on it (migration 0021).
fn one_row_per_day<'c>(
    rows: impl Stream<Item = Result<SliceDay, sqlx::Error>> + 'c,
) -> impl Stream<Item = Result<SliceDay, sqlx::Error>> + 'c {
    futures_util::stream::unfold(
        (Box::pin(rows), None::<SliceDay>),
        |(mut rows, mut held)| async move {
            loop {
                match rows.next().await {
                    Some(Ok(next)) => match held.as_mut() {
                        Some(day) if day.same_day(&next) => day.add(&next),
                        _ => {
                            if let Some(done) = held.replace(next) {
                                return Some((Ok(done), (rows, held)));
                            }
                        }
                    },
                    Some(Err(e)) => return Some((Err(e), (rows, None))),
                    None => return held.take().map(|done| (Ok(done), (rows, None))),
                }
            }
        },
    )
}

/// `slice_days`' rows as the database gives them: from books, a day may come once per consumer.
fn slice_day_entries<'c>(
    conn: &'c mut PgConnection,
    month: Month,
    from_book: bool,
    team: Option<&'c TeamId>,
) -> impl Stream<Item = Result<SliceDay, sqlx::Error>> + 'c {
    sqlx::query_as!(
        SliceDay,
        r#"select d.team_id as "team!: TeamId", d.team_name as "team_name!", d.cost_center,
                  d.model as "model!", d.kind as "kind!: SliceKind", d.profile,
                  d.rate_card_id as "rate_card?",
                  d.slice_uuid as "slice_uuid!", d.node as "node!", d.day as "day!",
                  d.windows as "windows!", d.held_seconds as "held_seconds!",
                  d.known_seconds as "known_seconds!", d.active_seconds as "compute_active_seconds!",
                  d.memory_byte_seconds as "memory_byte_seconds!",
                  d.compute_share as "compute_share!", d.memory_share as "memory_share!",
                  d.memory_reserved_bytes as "memory_reserved_bytes!",
                  g.gpu_uuid as "gpu_uuid?", s.gpu_instance_id
           from period_slice_day($1, $2) d
           left join slice s on s.slice_id = d.slice_id
           left join gpu g on g.gpu_id = s.gpu_id
           where $3::text is null or d.team_id = $3
           order by d.team_id, d.model, d.kind, d.profile, d.rate_card_id, d.slice_uuid, d.day"#,
        month.first_day(),
        from_book,
        team.map(TeamId::as_str)
    )
    .fetch(conn)
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

/// GPU presence per (model, rate card, day) of `month`, from its books or the rollups, ordered so.
pub async fn model_days(
    conn: &mut PgConnection,
    month: Month,
    from_book: bool,
) -> Result<Vec<ModelDay>, sqlx::Error> {
    sqlx::query_as!(
        ModelDay,
        r#"select d.model as "model!", d.rate_card_id as "rate_card?", d.day as "day!",
                  sum(d.present_seconds) as "present_seconds!"
           from period_model_day($1, $2) d
           group by 1, 2, 3
           order by 1, 2, 3"#,
        month.first_day(),
        from_book
    )
    .fetch_all(conn)
    .await
}

/// An invoice or credit note of a period, with its team's accounting fields.
#[derive(Debug, Clone)]
pub struct PeriodDocument {
    pub invoice_id: i64,
    pub kind: InvoiceKind,
    pub status: InvoiceStatus,
    pub number: Option<String>,
    pub team: TeamId,
    pub team_name: String,
    pub cost_center: Option<String>,
    pub gl_account: Option<String>,
    pub currency: String,
    pub total: Decimal,
}

/// Every invoice and credit note of `period`, by team then id, naming the team as the invoice does
/// (as it was when drafted).
pub async fn period_documents(
    conn: &mut PgConnection,
    period: NaiveDate,
) -> Result<Vec<PeriodDocument>, sqlx::Error> {
    sqlx::query_as!(
        PeriodDocument,
        r#"select i.invoice_id, i.kind as "kind: InvoiceKind", i.status as "status: InvoiceStatus",
                  i.number, i.team_id as "team: TeamId",
                  coalesce(i.team_name, t.display_name) as "team_name!",
                  coalesce(i.cost_center, t.cost_center) as cost_center,
                  coalesce(i.gl_account, t.gl_account) as gl_account, i.currency, i.total
           from invoice i join team t using (team_id)
           where i.period = $1
           order by i.team_id, i.invoice_id"#,
        period
    )
    .fetch_all(conn)
    .await
}

/// GPU-hours present per day of `month`: the fleet's capacity.
pub async fn capacity_by_day(
    pool: &PgPool,
    month: Month,
) -> Result<Vec<(DateTime<Utc>, Decimal)>, sqlx::Error> {
    // A month is whole days: the day rollup holds each day's presence summed.
    Ok(sqlx::query!(
        r#"select day as "day!", sum(present_seconds) / 3600 as "hours!"
           from gpu_daily where day >= $1 and day < $2 group by 1 order by 1"#,
        month.start(),
        month.end()
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.day, r.hours))
    .collect())
}

/// Seconds from `now` back to each node's last batch received (the batch of its GPUs' latest
/// period), by node.
pub async fn node_ingest_lags(
    pool: &PgPool,
    now: DateTime<Utc>,
) -> Result<Vec<(String, f64)>, sqlx::Error> {
    Ok(sqlx::query!(
        r#"select g.node as "node!",
                  extract(epoch from $1 - max(l.received_at))::float8 as "lag!"
           from gpu g
           cross join lateral (
               select p.received_at from gpu_presence p
               where p.gpu_id = g.gpu_id
               order by p.period_start desc
               limit 1) l
           group by g.node
           order by g.node"#,
        now
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.node, r.lag.max(0.0)))
    .collect())
}
