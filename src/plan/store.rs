//! Today's MIG layouts, as the rollups show them, and right-sizing's evidence, as the rollups, the
//! day summaries and the windows of days show it. The file stays whole: the evidence read is one
//! snapshot's statements (days, windows, hours) and the SQL they share, and SQL lives in stores.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use sqlx::{PgConnection, PgPool};

use super::merge::{LeftOut, Merged, WindowPartial};
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::domain::time::floor_day;

/// A card as it is today, with the MIG instances held on it.
#[derive(Debug, Clone)]
pub struct CardToday {
    pub gpu_uuid: String,
    pub node: String,
    pub model: String,
    pub compute_slices: u8,
    pub memory_slices: u8,
    pub instances: Vec<InstanceToday>,
}

#[derive(Debug, Clone)]
pub struct InstanceToday {
    pub slice_uuid: String,
    pub profile: String,
    pub compute_slices: u8,
    pub memory_slices: u8,
    /// Who held it most in that hour.
    pub consumer: Option<Consumer>,
}

/// A workload as right-sizing names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Consumer {
    pub team: TeamId,
    pub namespace: Option<String>,
    pub workload_kind: String,
    pub workload: String,
}

/// Every MIG-mode card (of `model`, when given) reported present since `since`, with the MIG
/// instances held in the last hour it was present.
pub async fn cards_today(
    pool: &PgPool,
    since: DateTime<Utc>,
    model: Option<&str>,
) -> Result<Vec<CardToday>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"with last as (
               select h.gpu_id, max(h.hour) as hour from gpu_hourly h
               where h.hour >= $1 group by h.gpu_id)
           select g.gpu_uuid, g.node, g.model, g.compute_slices as gpu_compute,
                  g.memory_slices as gpu_memory,
                  i.slice_uuid as "slice_uuid?", i.profile as "profile?",
                  i.compute_slices as "compute_slices?", i.memory_slices as "memory_slices?",
                  i.team_id as "team_id?: TeamId", i.namespace, i.w[1] as "workload_kind?",
                  i.w[2] as "workload?"
           from last l
           join gpu g on g.gpu_id = l.gpu_id
           left join lateral (
               select distinct on (s.slice_id) s.slice_uuid, s.profile, s.compute_slices,
                      s.memory_slices, u.team_id, c.namespace,
                      coalesce(workload_of(c.pod, c.labels, c.job_id, c.unix_user),
                               array['Consumer', c.consumer_id::text]) as w
               from slice s
               join usage_hourly u on u.slice_id = s.slice_id and u.hour = l.hour
               join consumer c on c.consumer_id = u.consumer_id
               where s.gpu_id = l.gpu_id and s.kind = 'mig' and u.held_seconds > 0
               order by s.slice_id, u.held_seconds desc, c.consumer_id) i on true
           where g.mig_enabled and ($2::text is null or g.model = $2)
           order by g.model, g.node, g.gpu_uuid, i.slice_uuid"#,
        since,
        model
    )
    .fetch_all(pool)
    .await?;
    let mut cards: Vec<CardToday> = Vec::new();
    for r in rows {
        if cards.last().is_none_or(|c| c.gpu_uuid != r.gpu_uuid) {
            cards.push(CardToday {
                gpu_uuid: r.gpu_uuid.clone(),
                node: r.node.clone(),
                model: r.model.clone(),
                compute_slices: u8::try_from(r.gpu_compute).unwrap_or(7),
                memory_slices: u8::try_from(r.gpu_memory).unwrap_or(8),
                instances: Vec::new(),
            });
        }
        if let (Some(uuid), Some(profile), Some(c), Some(m)) =
            (r.slice_uuid, r.profile, r.compute_slices, r.memory_slices)
        {
            let card = cards.last_mut().expect("pushed above");
            let consumer = match (r.team_id, r.workload_kind, r.workload) {
                (Some(team), Some(workload_kind), Some(workload)) => Some(Consumer {
                    team,
                    namespace: r.namespace,
                    workload_kind,
                    workload,
                }),
                _ => None,
            };
            card.instances.push(InstanceToday {
                slice_uuid: uuid,
                profile,
                compute_slices: u8::try_from(c).unwrap_or(u8::MAX),
                memory_slices: u8::try_from(m).unwrap_or(u8::MAX),
                consumer,
            });
        }
    }
    Ok(cards)
}

/// What a workload's slices of one kind and profile held and used over a window, for
/// right-sizing.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub team: TeamId,
    pub namespace: Option<String>,
    pub workload_kind: String,
    pub workload: String,
    pub model: String,
    pub kind: SliceKind,
    pub profile: Option<String>,
    pub compute_share: Decimal,
    pub memory_share: Decimal,
    pub memory_reserved_bytes: i64,
    pub gpu_compute_slices: u8,
    pub gpu_memory_bytes: i64,
    pub slices: i64,
    /// From the first hour held to the end of the last, in seconds.
    pub span_seconds: i64,
    /// The span in days, rounded up.
    pub days: i64,
    pub held_seconds: Decimal,
    pub known_seconds: Decimal,
    pub compute_active_seconds: Decimal,
    pub memory_p99_bytes: i64,
    pub memory_max_bytes: i64,
    pub compute_p95: Option<f64>,
}

impl Evidence {
    pub fn compute_share_f64(&self) -> f64 {
        self.compute_share.to_f64().unwrap_or(1.0)
    }
}

/// A workload and slice class as evidence groups them: the consumer's workload (named once per
/// consumer, `workload_of`, migration 0012), the GPU model and the slice's kind, profile and share.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, sqlx::FromRow)]
pub(super) struct EvidenceGroup {
    pub(super) team_id: TeamId,
    pub(super) namespace: Option<String>,
    pub(super) workload: String,
    pub(super) model: String,
    pub(super) kind: SliceKind,
    pub(super) profile: Option<String>,
    pub(super) workload_kind: String,
    pub(super) compute_share: Decimal,
    pub(super) memory_share: Decimal,
    pub(super) memory_reserved_bytes: i64,
    pub(super) gpu_compute_slices: i16,
    pub(super) gpu_memory_bytes: i64,
}

#[derive(sqlx::FromRow)]
struct EvidencePair {
    consumer_id: i64,
    slice_id: i32,
    #[sqlx(flatten)]
    group: EvidenceGroup,
}

/// The (consumer, slice, team) pairs that held anything on the days `$1` (only team `$2`'s, when
/// not null), each with its evidence group: from the day rollups, so that the hourly rows are
/// neither joined to consumers nor grouped on text. The read and the day summaries share it.
macro_rules! pairs_sql {
    () => {
        "select p.consumer_id, p.slice_id, p.team_id, c.namespace,
                w.w[1] as workload_kind, w.w[2] as workload, g.model, s.kind, s.profile,
                s.compute_share, s.memory_share, s.memory_reserved_bytes,
                g.compute_slices as gpu_compute_slices, g.memory_bytes as gpu_memory_bytes
         from (select distinct d.consumer_id, d.slice_id, d.team_id from usage_daily d
               where d.day = any($1::timestamptz[]) and d.held_seconds > 0) p
         join consumer c using (consumer_id)
         join slice s using (slice_id)
         join gpu g using (gpu_id)
         cross join lateral (
             select coalesce(workload_of(c.pod, c.labels, c.job_id, c.unix_user),
                             array['Consumer', c.consumer_id::text]) as w) w
         where $2::text is null or p.team_id = $2"
    };
}
pub(crate) use pairs_sql;

/// The columns of a [`Partial`] of hourly rows `u`, as the read and the day summaries take them:
/// the compute-active fraction as `(active / nullif(known, 0))::float8`, the hours with none
/// left out, as `percentile_cont` leaves out nulls.
macro_rules! partial_sql {
    () => {
        "sum(u.held_seconds) as held_seconds, sum(u.compute_known_seconds) as known_seconds,
         sum(u.compute_active_seconds) as compute_active_seconds,
         min(u.hour) as first_hour, max(u.hour) as last_hour,
         array_agg(distinct u.slice_id) as slice_ids,
         array_agg(u.memory_peak_bytes) as memory_peaks,
         coalesce(array_agg((u.compute_active_seconds / nullif(u.compute_known_seconds, 0))::float8)
                  filter (where u.compute_known_seconds <> 0), '{}') as compute_ratios"
    };
}
pub(crate) use partial_sql;

/// A summarised day's row of a group.
#[derive(sqlx::FromRow)]
pub(super) struct DayRow {
    pub(super) day: DateTime<Utc>,
    #[sqlx(flatten)]
    pub(super) group: EvidenceGroup,
    #[sqlx(flatten)]
    pub(super) partial: super::merge::Partial,
}

/// Where [`evidence`] reads: the windows and closed days summarised (`plan::days`) where it can,
/// the closed days' summaries alone, or the hourly rollups alone (what the summaries are checked
/// against, and the benchmark's baseline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Summaries,
    Days,
    HourlyOnly,
}

/// Every workload's evidence over each of `ranges` (`[from, to)`; only `team`'s, when given), a
/// list per range in the order of team, namespace, workload, model, kind and profile: each closed
/// day a range covers whole and that is summarised (and not written since) from its summary
/// (`evidence_day`), every other hour (today's, a day written since its summary or not summarised
/// yet, a range's part day) from the hourly rollups, merged per group in one path ([`super::merge::Merged`]).
/// Ranges that overlap are read together, in one scan of the hourly rows they leave to read;
/// ranges apart are read apart, so that no scan covers the months between them.
pub async fn evidence(
    pool: &PgPool,
    ranges: &[(DateTime<Utc>, DateTime<Utc>)],
    team: Option<&TeamId>,
) -> Result<Vec<Vec<Evidence>>, sqlx::Error> {
    evidence_from(pool, ranges, team, Source::Summaries).await
}

/// [`evidence`], read from `source`.
pub async fn evidence_from(
    pool: &PgPool,
    ranges: &[(DateTime<Utc>, DateTime<Utc>)],
    team: Option<&TeamId>,
    source: Source,
) -> Result<Vec<Vec<Evidence>>, sqlx::Error> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| ranges[i].0);
    let mut out: Vec<Vec<Evidence>> = ranges.iter().map(|_| Vec::new()).collect();
    let mut together: Vec<usize> = Vec::new();
    let mut end = None;
    for i in order.into_iter().map(Some).chain([None]) {
        let apart = match (i, end) {
            (Some(i), Some(end)) => ranges[i].0 > end,
            (None, _) => true,
            (Some(_), None) => false,
        };
        if apart && !together.is_empty() {
            let asked: Vec<_> = together.iter().map(|&j| ranges[j]).collect();
            let read = match evidence_together(pool, &asked, team, source).await? {
                Ok(read) => read,
                // A percentile fell among the values a window left out: from the days.
                Err(LeftOut) => evidence_together(pool, &asked, team, Source::Days)
                    .await?
                    .map_err(|_| {
                        sqlx::Error::Protocol("the days' summaries left values out".into())
                    })?,
            };
            for (j, read) in together.drain(..).zip(read) {
                out[j] = read;
            }
            end = None;
        }
        if let Some(i) = i {
            together.push(i);
            end = Some(end.map_or(ranges[i].1, |e: DateTime<Utc>| e.max(ranges[i].1)));
        }
    }
    Ok(out)
}

/// [`evidence`] of ranges read together, in one snapshot: the summarised days they cover, then
/// the hours left, a run of adjacent hours at a time.
async fn evidence_together(
    pool: &PgPool,
    ranges: &[(DateTime<Utc>, DateTime<Utc>)],
    team: Option<&TeamId>,
    source: Source,
) -> Result<Result<Vec<Vec<Evidence>>, LeftOut>, sqlx::Error> {
    let (Some(first), Some(last)) = (
        ranges.iter().map(|r| r.0).min(),
        ranges.iter().map(|r| r.1).max(),
    ) else {
        return Ok(Ok(Vec::new()));
    };
    // One snapshot: a day summarised (or written) between two statements is read once, from one
    // place.
    let mut tx = crate::db::read_snapshot(pool).await?;
    evidence_settings(&mut tx).await?;
    let summarised = match source {
        Source::Summaries | Source::Days => summarised_days(&mut tx, first, last).await?,
        Source::HourlyOnly => Vec::new(),
    };
    let mut split = super::merge::Split::of(ranges, &summarised);
    let mut merged: std::collections::BTreeMap<EvidenceGroup, Vec<Option<Merged>>> =
        Default::default();
    if source == Source::Summaries {
        // A range whose whole days are a window built from them as they are summarised now reads
        // the window's rows, not its days'.
        for (r, (first_day, last_day)) in windows(&mut tx, &split).await? {
            let rows: Vec<WindowRow> = sqlx::query_as(
                "select team_id, namespace, workload_kind, workload, model, kind, profile,
                        compute_share, memory_share, memory_reserved_bytes, gpu_compute_slices,
                        gpu_memory_bytes, held_seconds, known_seconds, compute_active_seconds,
                        first_hour, last_hour, slice_ids, memory_count, memory_top, compute_count,
                        compute_top
                 from evidence_window
                 where first_day = $1 and last_day = $2 and ($3::text is null or team_id = $3)",
            )
            .bind(first_day)
            .bind(last_day)
            .bind(team)
            .fetch_all(&mut *tx)
            .await?;
            for row in rows {
                let per_range = merged
                    .entry(row.group)
                    .or_insert_with(|| ranges.iter().map(|_| None).collect());
                per_range[r]
                    .get_or_insert_with(Merged::default)
                    .add_window(row.partial);
            }
            for rs in split.days.values_mut() {
                rs.retain(|&x| x != r);
            }
        }
        split.days.retain(|_, rs| !rs.is_empty());
    }
    // A month of a large team is hundreds of thousands of rows: each group's key is copied once,
    // and a row's values are copied only for the second range that holds it.
    let mut add = |group: &EvidenceGroup, rs: &[usize], p: super::merge::Partial| {
        let Some((&last, rest)) = rs.split_last() else {
            return;
        };
        if !merged.contains_key(group) {
            merged.insert(group.clone(), ranges.iter().map(|_| None).collect());
        }
        let per_range = merged.get_mut(group).expect("inserted above");
        for &r in rest {
            per_range[r]
                .get_or_insert_with(Merged::default)
                .add(p.clone());
        }
        per_range[last].get_or_insert_with(Merged::default).add(p);
    };
    let days: Vec<DateTime<Utc>> = split.days.keys().copied().collect();
    for row in day_rows(&mut tx, &days, team).await? {
        if let Some(rs) = split.days.get(&row.day) {
            add(&row.group, rs, row.partial);
        }
    }
    if !split.runs.is_empty() {
        let pairs: Vec<EvidencePair> = sqlx::query_as(pairs_sql!())
            .bind(split.raw_days())
            .bind(team)
            .fetch_all(&mut *tx)
            .await?;
        // The groups, each pair's numbered once.
        let mut groups: std::collections::BTreeMap<&EvidenceGroup, i32> = Default::default();
        for p in &pairs {
            let n = i32::try_from(groups.len()).unwrap_or(i32::MAX);
            groups.entry(&p.group).or_insert(n);
        }
        let mut by_number: Vec<&EvidenceGroup> = groups.keys().copied().collect();
        for (g, &n) in &groups {
            by_number[n as usize] = g;
        }
        let consumers: Vec<i64> = pairs.iter().map(|p| p.consumer_id).collect();
        let slices: Vec<i32> = pairs.iter().map(|p| p.slice_id).collect();
        let teams: Vec<&str> = pairs.iter().map(|p| p.group.team_id.as_str()).collect();
        let gids: Vec<i32> = pairs.iter().map(|p| groups[&p.group]).collect();
        for (bounds, stretches) in &split.runs {
            if pairs.is_empty() {
                break;
            }
            let rows: Vec<StretchRow> = sqlx::query_as(concat!(
                "select k.gid, width_bucket(u.hour, $1::timestamptz[]) as stretch, ",
                partial_sql!(),
                " from usage_hourly u
                 join unnest($4::int8[], $5::int4[], $6::text[], $7::int4[])
                      as k(consumer_id, slice_id, team_id, gid)
                   on k.consumer_id = u.consumer_id and k.slice_id = u.slice_id
                  and k.team_id = u.team_id
                 where u.hour >= $2 and u.hour < $3 and u.held_seconds > 0
                   and ($8::text is null or u.team_id = $8)
                 group by 1, 2"
            ))
            .bind(bounds)
            .bind(bounds[0])
            .bind(bounds[bounds.len() - 1])
            .bind(&consumers)
            .bind(&slices)
            .bind(&teams)
            .bind(&gids)
            // A team's: its rows alone reach the join (the hours' rows are every team's).
            .bind(team)
            .fetch_all(&mut *tx)
            .await?;
            for row in rows {
                let (Some(group), Some(of)) = (
                    usize::try_from(row.gid).ok().and_then(|g| by_number.get(g)),
                    usize::try_from(row.stretch - 1)
                        .ok()
                        .and_then(|s| stretches.get(s)),
                ) else {
                    continue;
                };
                add(group, of, row.partial);
            }
        }
    }
    tx.commit().await?;
    Ok(finish(merged, ranges.len()))
}

/// Each range's evidence of the groups `merged`, in the order of team, namespace, workload, model,
/// kind and profile.
fn finish(
    merged: std::collections::BTreeMap<EvidenceGroup, Vec<Option<Merged>>>,
    ranges: usize,
) -> Result<Vec<Vec<Evidence>>, LeftOut> {
    let mut out: Vec<Vec<Evidence>> = (0..ranges).map(|_| Vec::new()).collect();
    for (g, per_range) in merged {
        for (r, m) in per_range.into_iter().enumerate() {
            if let Some(f) = m.map(Merged::finish).transpose()?.flatten() {
                out[r].push(evidence_of(&g, f));
            }
        }
    }
    // As SQL orders them: a missing namespace or profile last.
    fn key(e: &Evidence) -> (&str, bool, Option<&str>, &str, &str, SliceKind, bool) {
        (
            e.team.as_str(),
            e.namespace.is_none(),
            e.namespace.as_deref(),
            e.workload.as_str(),
            e.model.as_str(),
            e.kind,
            e.profile.is_none(),
        )
    }
    for evidence in &mut out {
        evidence.sort_by(|a, b| key(a).cmp(&key(b)).then_with(|| a.profile.cmp(&b.profile)));
    }
    Ok(out)
}

/// A window's row of a group.
#[derive(sqlx::FromRow)]
struct WindowRow {
    #[sqlx(flatten)]
    group: EvidenceGroup,
    #[sqlx(flatten)]
    partial: WindowPartial,
}

/// The ranges of `split` whose whole summarised days are a window (`[first, last)`) built from
/// those days as they are summarised now, each with its window.
async fn windows(
    conn: &mut PgConnection,
    split: &super::merge::Split,
) -> Result<Vec<(usize, (DateTime<Utc>, DateTime<Utc>))>, sqlx::Error> {
    let day = chrono::Duration::hours(24);
    let mut days_of: std::collections::BTreeMap<usize, Vec<DateTime<Utc>>> = Default::default();
    for (d, rs) in &split.days {
        for &r in rs {
            days_of.entry(r).or_default().push(*d);
        }
    }
    // Ranges whose days run unbroken: their first day and the day after their last.
    let asked: Vec<(usize, DateTime<Utc>, DateTime<Utc>)> = days_of
        .into_iter()
        .filter(|(_, days)| days.windows(2).all(|w| w[1] == w[0] + day))
        .filter_map(|(r, days)| Some((r, *days.first()?, *days.last()? + day)))
        .collect();
    if asked.is_empty() {
        return Ok(Vec::new());
    }
    let firsts: Vec<DateTime<Utc>> = asked.iter().map(|a| a.1).collect();
    let lasts: Vec<DateTime<Utc>> = asked.iter().map(|a| a.2).collect();
    let built: Vec<(DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        "select w.first_day, w.last_day from evidence_window_done w
         where (w.first_day, w.last_day) in
               (select * from unnest($1::timestamptz[], $2::timestamptz[]))
           and w.seen = (select coalesce(array_agg(d.summarised_at order by d.day), '{}')
                         from evidence_day_done d
                         where d.day >= w.first_day and d.day < w.last_day)",
    )
    .bind(&firsts)
    .bind(&lasts)
    .fetch_all(conn)
    .await?;
    Ok(asked
        .into_iter()
        .filter(|(_, a, b)| built.contains(&(*a, *b)))
        .map(|(r, a, b)| (r, (a, b)))
        .collect())
}

/// The days of `[from, to)` (and the one before, whose end may be in it) whose summary is there
/// and not stale.
async fn summarised_days(
    conn: &mut PgConnection,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar(
        "select d.day from evidence_day_done d
         where d.day >= $1 and d.day < $2
           and not exists (select from evidence_day_stale s where s.day = d.day)
         order by d.day",
    )
    .bind(floor_day(from))
    .bind(to)
    .fetch_all(conn)
    .await
}

/// The summaries of `days` (only `team`'s, when given).
pub(super) async fn day_rows(
    conn: &mut PgConnection,
    days: &[DateTime<Utc>],
    team: Option<&TeamId>,
) -> Result<Vec<DayRow>, sqlx::Error> {
    if days.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "select day, team_id, namespace, workload_kind, workload, model, kind, profile,
                compute_share, memory_share, memory_reserved_bytes, gpu_compute_slices,
                gpu_memory_bytes, held_seconds, known_seconds, compute_active_seconds, first_hour,
                last_hour, slice_ids, memory_peaks, compute_ratios
         from evidence_day
         where day = any($1) and ($2::text is null or team_id = $2)",
    )
    .bind(days)
    .bind(team)
    .fetch_all(conn)
    .await
}

/// A group's evidence of its merged figures.
fn evidence_of(g: &EvidenceGroup, f: super::merge::Figures) -> Evidence {
    Evidence {
        team: g.team_id.clone(),
        namespace: g.namespace.clone(),
        workload_kind: g.workload_kind.clone(),
        workload: g.workload.clone(),
        model: g.model.clone(),
        kind: g.kind,
        profile: g.profile.clone(),
        compute_share: g.compute_share,
        memory_share: g.memory_share,
        memory_reserved_bytes: g.memory_reserved_bytes,
        gpu_compute_slices: u8::try_from(g.gpu_compute_slices).unwrap_or(7),
        gpu_memory_bytes: g.gpu_memory_bytes,
        slices: f.slices,
        span_seconds: f.span_seconds,
        days: (f.span_seconds + 86_399) / 86_400,
        held_seconds: f.held_seconds,
        known_seconds: f.known_seconds,
        compute_active_seconds: f.compute_active_seconds,
        memory_p99_bytes: f.memory_p99_bytes,
        memory_max_bytes: f.memory_max_bytes,
        compute_p95: f.compute_p95,
    }
}

/// A group's hours of one stretch of a run.
#[derive(sqlx::FromRow)]
struct StretchRow {
    gid: i32,
    stretch: i32,
    #[sqlx(flatten)]
    partial: super::merge::Partial,
}

/// The settings of a transaction that reads evidence (the team's or a day's): room to sort and
/// hash the hours in memory, and a plan made for each read's bounds. Each read's hours are a part
/// of a day or many days, and a generic plan (made after five reads) took 6 s where 0.3 s did, at
/// 1,000 GPUs.
pub(crate) async fn evidence_settings(conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "select set_config('work_mem', '64MB', true),
                set_config('plan_cache_mode', 'force_custom_plan', true)",
    )
    .execute(conn)
    .await?;
    Ok(())
}
