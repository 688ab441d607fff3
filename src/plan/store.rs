//! Today's MIG layouts, as the rollups show them.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use sqlx::PgPool;

use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;

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
struct EvidenceGroup {
    team_id: TeamId,
    namespace: Option<String>,
    workload: String,
    model: String,
    kind: SliceKind,
    profile: Option<String>,
    workload_kind: String,
    compute_share: Decimal,
    memory_share: Decimal,
    memory_reserved_bytes: i64,
    gpu_compute_slices: i16,
    gpu_memory_bytes: i64,
}

#[derive(sqlx::FromRow)]
struct EvidencePair {
    consumer_id: i64,
    slice_id: i32,
    #[sqlx(flatten)]
    group: EvidenceGroup,
}

#[derive(sqlx::FromRow)]
struct EvidenceFigures {
    gid: i32,
    slices: i64,
    span_seconds: i64,
    held_seconds: Decimal,
    known_seconds: Decimal,
    compute_active_seconds: Decimal,
    memory_p99_bytes: i64,
    memory_max_bytes: i64,
    compute_p95: Option<f64>,
}

/// Every workload's evidence over each of `ranges` (`[from, to)`; only `team`'s, when given), from
/// the hourly rollups, a list per range in the order of team, namespace, workload, model, kind and
/// profile. Ranges that overlap are read together, in one scan of the hourly rows they cover (the
/// team page asks for its month and for right-sizing's last days, which share a month's
/// partition, and that scan is most of the time); ranges apart are read apart, so that no scan
/// covers the months between them.
pub async fn evidence(
    pool: &PgPool,
    ranges: &[(DateTime<Utc>, DateTime<Utc>)],
    team: Option<&TeamId>,
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
            for (j, read) in together
                .drain(..)
                .zip(evidence_together(pool, &asked, team).await?)
            {
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

/// [`evidence`] of ranges read in one scan of the hours from the first's start to the last's end.
///
/// Two steps, so that the hourly rows (a month of a 10,000-GPU fleet is 40 million) are neither
/// joined to consumers nor sorted on text: first the (consumer, slice) pairs that held anything,
/// from the day rollups, each with its workload and slice class, numbered here by range and group;
/// then the hourly rows of those pairs summed and their percentiles taken per number.
async fn evidence_together(
    pool: &PgPool,
    ranges: &[(DateTime<Utc>, DateTime<Utc>)],
    team: Option<&TeamId>,
) -> Result<Vec<Vec<Evidence>>, sqlx::Error> {
    let (Some(first), Some(last)) = (
        ranges.iter().map(|r| r.0).min(),
        ranges.iter().map(|r| r.1).max(),
    ) else {
        return Ok(Vec::new());
    };
    // The day rollups of the days the ranges touch hold every pair their hours hold (a pair whose
    // hours in a range held nothing finds no hourly row below, and so no group of that range).
    let pairs: Vec<EvidencePair> = sqlx::query_as(
        "select p.consumer_id, p.slice_id, p.team_id, c.namespace,
                w.w[1] as workload_kind, w.w[2] as workload, g.model, s.kind, s.profile,
                s.compute_share, s.memory_share, s.memory_reserved_bytes,
                g.compute_slices as gpu_compute_slices, g.memory_bytes as gpu_memory_bytes
         from (select distinct d.consumer_id, d.slice_id, d.team_id from usage_daily d
               where d.day >= date_trunc('day', $1::timestamptz, 'UTC') and d.day < $2
                 and d.held_seconds > 0) p
         join consumer c using (consumer_id)
         join slice s using (slice_id)
         join gpu g using (gpu_id)
         cross join lateral (
             select coalesce(workload_of(c.pod, c.labels, c.job_id, c.unix_user),
                             array['Consumer', c.consumer_id::text]) as w) w
         where $3::text is null or p.team_id = $3",
    )
    .bind(first)
    .bind(last)
    .bind(team)
    .fetch_all(pool)
    .await?;
    // The groups in order, each pair's found once; range r's number of group g is r x groups + g.
    let mut groups: std::collections::BTreeMap<&EvidenceGroup, usize> = Default::default();
    for p in &pairs {
        groups.entry(&p.group).or_insert(0);
    }
    for (g, n) in groups.values_mut().enumerate() {
        *n = g;
    }
    let group_of: Vec<usize> = pairs.iter().map(|p| groups[&p.group]).collect();
    let gid = |r: usize, g: usize| i32::try_from(r * groups.len() + g).unwrap_or(i32::MAX);
    let n = pairs.len() * ranges.len();
    let (mut consumers, mut slices, mut gids, mut teams) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut froms, mut tos) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for (r, &(from, to)) in ranges.iter().enumerate() {
        for (p, &g) in pairs.iter().zip(&group_of) {
            consumers.push(p.consumer_id);
            slices.push(p.slice_id);
            teams.push(p.group.team_id.clone());
            gids.push(gid(r, g));
            froms.push(from);
            tos.push(to);
        }
    }
    let mut tx = pool.begin().await?;
    // Each group's rows are sorted for its percentiles: in memory, not on disk.
    sqlx::query("set local work_mem = '64MB'")
        .execute(&mut *tx)
        .await?;
    let figures: Vec<EvidenceFigures> = sqlx::query_as(
        "select k.gid, count(distinct u.slice_id) as slices,
                (extract(epoch from max(u.hour) - min(u.hour)) + 3600)::int8 as span_seconds,
                sum(u.held_seconds) as held_seconds,
                sum(u.compute_known_seconds) as known_seconds,
                sum(u.compute_active_seconds) as compute_active_seconds,
                percentile_disc(0.99) within group (order by u.memory_peak_bytes)
                    as memory_p99_bytes,
                max(u.memory_peak_bytes) as memory_max_bytes,
                percentile_cont(0.95) within group (
                    order by (u.compute_active_seconds / nullif(u.compute_known_seconds, 0))::float8)
                    as compute_p95
         from usage_hourly u
         join unnest($3::int8[], $4::int4[], $5::int4[], $6::timestamptz[], $7::timestamptz[],
                     $8::text[])
              as k(consumer_id, slice_id, gid, from_hour, to_hour, team_id)
           on k.consumer_id = u.consumer_id and k.slice_id = u.slice_id
          and k.team_id = u.team_id and u.hour >= k.from_hour and u.hour < k.to_hour
         where u.hour >= $1 and u.hour < $2 and u.held_seconds > 0
         group by k.gid",
    )
    .bind(first)
    .bind(last)
    .bind(&consumers)
    .bind(&slices)
    .bind(&gids)
    .bind(&froms)
    .bind(&tos)
    .bind(&teams)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut figures: std::collections::HashMap<i32, EvidenceFigures> =
        figures.into_iter().map(|f| (f.gid, f)).collect();
    let mut out: Vec<Vec<Evidence>> = ranges.iter().map(|_| Vec::new()).collect();
    for (r, (g, &i)) in (0..ranges.len()).flat_map(|r| groups.iter().map(move |e| (r, e))) {
        let Some(f) = figures.remove(&gid(r, i)) else {
            continue;
        };
        out[r].push(Evidence {
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
        });
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
