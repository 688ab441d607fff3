//! Ingest's SQL, run inside the one transaction `group` owns per group of batches (or per batch
//! written alone): registering the batches' GPUs, slices and consumers, the GPUs' presence,
//! reading what a re-sent period already holds, the windows themselves (`COPY`, falling back to a
//! staged `INSERT ... ON CONFLICT DO NOTHING` only when a window is already stored) and the hourly
//! rollups of what was new. The rules that decide what these rows mean are `registry`'s and
//! `resent`'s.
//!
//! The file stays whole: these are the statements of one transaction, in the order `group` runs
//! them, each reading what the one before wrote, over the same tables and their row mappings.

use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use super::IngestError;
use super::registry::{RegisteredGpu, RegisteredSlice, StoredPeriod};
use super::resent::StoredWindow;
use super::rules::SliceUse;
use super::validate::{ValidBatch, ValidConsumer};
use crate::domain::batch::bounds;
use crate::domain::layout::{self, Stranded};
use crate::domain::ownership::{OwnerVersion, Ownership};
use crate::domain::slice::{Reservation, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::time::seconds_by_hour;
use crate::domain::window::{Rollup, Window};

pub(super) const UNIQUE_VIOLATION: &str = "23505";

/// Serialises batches that report the same GPU, so that the presence overlap check below cannot race.
/// Locks are taken in one global order (sorted keys, locked in array order) so batches never deadlock.
pub async fn lock_gpus(tx: &mut PgConnection, batches: &[&ValidBatch]) -> Result<(), sqlx::Error> {
    let mut keys: Vec<i64> = batches
        .iter()
        .flat_map(|b| &b.gpus)
        .map(|g| lock_key(&g.uuid))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    sqlx::query!(
        r#"select pg_advisory_xact_lock(k) as "locked"
           from unnest($1::int8[]) with ordinality as t(k, i) order by i"#,
        &keys
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(())
}

/// A GPU's advisory-lock key: the first eight bytes of the SHA-256 of its uuid.
fn lock_key(uuid: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(uuid.as_bytes());
    i64::from_be_bytes(digest[..8].try_into().expect("eight bytes"))
}

/// Registers the batches' new GPUs (each to its batch's node), unless `insert` is false because
/// every one is known to be registered, and reads the registration of every one.
pub async fn register_gpus(
    tx: &mut PgConnection,
    batches: &[&ValidBatch],
    insert: bool,
) -> Result<Vec<RegisteredGpu>, sqlx::Error> {
    let gpus = || {
        batches
            .iter()
            .flat_map(|b| b.gpus.iter().map(move |g| (*b, g)))
    };
    let uuids: Vec<String> = gpus().map(|(_, g)| g.uuid.clone()).collect();
    if insert {
        let nodes: Vec<String> = gpus().map(|(b, _)| b.node.clone()).collect();
        let models: Vec<String> = gpus().map(|(_, g)| g.model.clone()).collect();
        let memory: Vec<i64> = gpus()
            .map(|(_, g)| g.geometry.memory_bytes as i64)
            .collect();
        let compute: Vec<i16> = gpus()
            .map(|(_, g)| i16::from(g.geometry.compute_slices))
            .collect();
        let memory_slices: Vec<i16> = gpus()
            .map(|(_, g)| i16::from(g.geometry.memory_slices))
            .collect();
        let mig: Vec<bool> = gpus().map(|(_, g)| g.mig_enabled).collect();
        sqlx::query!(
            "insert into gpu (gpu_uuid, node, model, memory_bytes, compute_slices, memory_slices, mig_enabled)
             select u, n, m, b, c, s, g
             from unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int2[], $6::int2[], $7::bool[])
                 as x(u, n, m, b, c, s, g)
             order by u
             on conflict (gpu_uuid) do nothing",
            &uuids,
            &nodes,
            &models,
            &memory,
            &compute,
            &memory_slices,
            &mig
        )
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query_as!(
        RegisteredGpu,
        "select gpu_id, gpu_uuid, node, model, memory_bytes, compute_slices, memory_slices, mig_enabled
         from gpu where gpu_uuid = any($1)",
        &uuids
    )
    .fetch_all(&mut *tx)
    .await
}

pub async fn set_mig_mode(
    tx: &mut PgConnection,
    gpu_id: i32,
    mig: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "update gpu set mig_enabled = $2 where gpu_id = $1",
        gpu_id,
        mig
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The stored columns of a reservation, in the order of the `slice` table.
struct ReservationColumns {
    profile: Option<String>,
    profile_id: Option<i32>,
    compute_slices: Option<i16>,
    memory_slices: Option<i16>,
    memory_bytes: Option<i64>,
    active_thread_percentage: Option<i16>,
    pinned_memory_bytes: Option<i64>,
    fraction: Option<Decimal>,
    replicas: Option<i16>,
    replica: Option<i16>,
}

impl ReservationColumns {
    fn of(r: &Reservation) -> Self {
        let mut c = ReservationColumns {
            profile: None,
            profile_id: None,
            compute_slices: None,
            memory_slices: None,
            memory_bytes: None,
            active_thread_percentage: None,
            pinned_memory_bytes: None,
            fraction: None,
            replicas: None,
            replica: None,
        };
        match r {
            Reservation::Mig {
                profile,
                profile_id,
                compute_slices,
                memory_slices,
                memory_bytes,
            } => {
                c.profile = Some(profile.clone());
                c.profile_id = profile_id.map(|id| id as i32);
                c.compute_slices = Some(i16::from(*compute_slices));
                c.memory_slices = Some(i16::from(*memory_slices));
                c.memory_bytes = Some(*memory_bytes as i64);
            }
            Reservation::Mps {
                active_thread_percentage,
                pinned_memory_bytes,
            } => {
                c.active_thread_percentage = Some(i16::from(*active_thread_percentage));
                c.pinned_memory_bytes = Some(*pinned_memory_bytes as i64);
            }
            Reservation::Vgpu { fraction } => c.fraction = Some(*fraction),
            Reservation::Timeslice { replicas, replica } => {
                c.replicas = Some(*replicas as i16);
                c.replica = Some(*replica as i16);
            }
            Reservation::Whole => {}
        }
        c
    }
}

/// A reservation as stored in the `slice` table, back in its domain type.
#[allow(clippy::too_many_arguments)]
fn reservation_of(
    kind: SliceKind,
    profile: Option<String>,
    compute_slices: Option<i16>,
    memory_slices: Option<i16>,
    memory_bytes: Option<i64>,
    threads: Option<i16>,
    pinned: Option<i64>,
    fraction: Option<Decimal>,
    replicas: Option<i16>,
    replica: Option<i16>,
) -> Option<Reservation> {
    Some(match kind {
        SliceKind::Mig => Reservation::Mig {
            profile: profile?,
            profile_id: None,
            compute_slices: u8::try_from(compute_slices?).ok()?,
            memory_slices: u8::try_from(memory_slices?).ok()?,
            memory_bytes: u64::try_from(memory_bytes?).ok()?,
        },
        SliceKind::Mps => Reservation::Mps {
            active_thread_percentage: u8::try_from(threads?).ok()?,
            pinned_memory_bytes: u64::try_from(pinned?).ok()?,
        },
        SliceKind::Vgpu => Reservation::Vgpu {
            fraction: fraction?,
        },
        SliceKind::Timeslice => Reservation::Timeslice {
            replicas: u16::try_from(replicas?).ok()?,
            replica: u16::try_from(replica?).ok()?,
        },
        SliceKind::Whole => Reservation::Whole,
    })
}

/// Registers the batches' new slices (each batch with its GPUs' ids, in batch order) and reads the
/// registration of every one.
pub async fn register_slices(
    tx: &mut PgConnection,
    batches: &[(&ValidBatch, &[i32])],
) -> Result<Vec<RegisteredSlice>, sqlx::Error> {
    let n = batches.iter().map(|(b, _)| b.slices.len()).sum();
    let mut uuids = Vec::with_capacity(n);
    let mut gpus = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut cols: Vec<ReservationColumns> = Vec::with_capacity(n);
    let mut compute_share = Vec::with_capacity(n);
    let mut memory_share = Vec::with_capacity(n);
    let mut reserved_bytes = Vec::with_capacity(n);
    let mut reserved = Vec::with_capacity(n);
    let mut gpu_instance: Vec<Option<i16>> = Vec::with_capacity(n);
    for (s, gpu_ids) in batches
        .iter()
        .flat_map(|(b, ids)| b.slices.iter().map(move |s| (s, *ids)))
    {
        uuids.push(s.uuid.clone());
        gpus.push(gpu_ids[s.gpu]);
        kinds.push(s.reservation.kind().as_str().to_owned());
        cols.push(ReservationColumns::of(&s.reservation));
        compute_share.push(s.share.compute);
        memory_share.push(s.share.memory);
        reserved_bytes.push(s.share.memory_reserved_bytes as i64);
        reserved.push(s.share.kind.is_reserved());
        gpu_instance.push(s.gpu_instance_id);
    }
    let profile: Vec<Option<String>> = cols.iter().map(|c| c.profile.clone()).collect();
    let profile_id: Vec<Option<i32>> = cols.iter().map(|c| c.profile_id).collect();
    let compute_slices: Vec<Option<i16>> = cols.iter().map(|c| c.compute_slices).collect();
    let memory_slices: Vec<Option<i16>> = cols.iter().map(|c| c.memory_slices).collect();
    let memory_bytes: Vec<Option<i64>> = cols.iter().map(|c| c.memory_bytes).collect();
    let threads: Vec<Option<i16>> = cols.iter().map(|c| c.active_thread_percentage).collect();
    let pinned: Vec<Option<i64>> = cols.iter().map(|c| c.pinned_memory_bytes).collect();
    let fraction: Vec<Option<Decimal>> = cols.iter().map(|c| c.fraction).collect();
    let replicas: Vec<Option<i16>> = cols.iter().map(|c| c.replicas).collect();
    let replica: Vec<Option<i16>> = cols.iter().map(|c| c.replica).collect();
    sqlx::query!(
        "insert into slice (slice_uuid, gpu_id, kind, profile, profile_id, compute_slices, memory_slices,
                            memory_bytes, active_thread_percentage, pinned_memory_bytes, fraction, replicas,
                            replica, compute_share, memory_share, memory_reserved_bytes, reserved,
                            gpu_instance_id)
         select * from unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::int4[], $6::int2[],
                              $7::int2[], $8::int8[], $9::int2[], $10::int8[], $11::numeric[], $12::int2[],
                              $13::int2[], $14::numeric[], $15::numeric[], $16::int8[], $17::bool[],
                              $18::int2[])
         on conflict (slice_uuid) do nothing",
        &uuids,
        &gpus,
        &kinds,
        &profile as &[Option<String>],
        &profile_id as &[Option<i32>],
        &compute_slices as &[Option<i16>],
        &memory_slices as &[Option<i16>],
        &memory_bytes as &[Option<i64>],
        &threads as &[Option<i16>],
        &pinned as &[Option<i64>],
        &fraction as &[Option<Decimal>],
        &replicas as &[Option<i16>],
        &replica as &[Option<i16>],
        &compute_share,
        &memory_share,
        &reserved_bytes,
        &reserved,
        &gpu_instance as &[Option<i16>]
    )
    .execute(&mut *tx)
    .await?;
    let stored = sqlx::query!(
        r#"select slice_id, slice_uuid, gpu_id, kind as "kind: SliceKind", profile, compute_slices,
                memory_slices, memory_bytes,
                active_thread_percentage, pinned_memory_bytes, fraction, replicas, replica,
                gpu_instance_id
         from slice where slice_uuid = any($1)"#,
        &uuids
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(stored
        .into_iter()
        .map(|r| RegisteredSlice {
            reservation: reservation_of(
                r.kind,
                r.profile,
                r.compute_slices,
                r.memory_slices,
                r.memory_bytes,
                r.active_thread_percentage,
                r.pinned_memory_bytes,
                r.fraction,
                r.replicas,
                r.replica,
            ),
            slice_id: r.slice_id,
            slice_uuid: r.slice_uuid,
            gpu_id: r.gpu_id,
            gpu_instance_id: r.gpu_instance_id,
        })
        .collect())
}

/// Registers `consumers` where new (and the teams their `team` labels name) and returns the id of
/// each, by fingerprint. A consumer's team is decided for each window (`attribution`), not here.
pub async fn register_consumers(
    tx: &mut PgConnection,
    consumers: &[&ValidConsumer],
) -> Result<HashMap<[u8; 32], i64>, IngestError> {
    // Rows other batches may insert at the same time are inserted in sorted order, so that two
    // batches never wait on each other's rows in opposite orders.
    let mut labelled: Vec<String> = consumers
        .iter()
        .filter_map(|c| c.team_label.as_ref().map(|t| t.as_str().to_owned()))
        .collect();
    labelled.sort_unstable();
    labelled.dedup();
    if !labelled.is_empty() {
        sqlx::query!(
            "insert into team (team_id, display_name) select t, t from unnest($1::text[]) t
             on conflict (team_id) do nothing",
            &labelled
        )
        .execute(&mut *tx)
        .await?;
    }
    let mut order: Vec<&ValidConsumer> = consumers.to_vec();
    order.sort_unstable_by_key(|c| c.fingerprint);
    order.dedup_by_key(|c| c.fingerprint);
    let n = order.len();
    let mut fingerprints = Vec::with_capacity(n);
    let mut namespace = Vec::with_capacity(n);
    let mut pod = Vec::with_capacity(n);
    let mut container = Vec::with_capacity(n);
    let mut unix_user = Vec::with_capacity(n);
    let mut job_id = Vec::with_capacity(n);
    let mut claim = Vec::with_capacity(n);
    let mut labels = Vec::with_capacity(n);
    let mut team_label = Vec::with_capacity(n);
    for c in order {
        let r = &c.report;
        fingerprints.push(c.fingerprint.to_vec());
        namespace.push(r.namespace.clone());
        pod.push(r.pod.clone());
        container.push(r.container.clone());
        unix_user.push(r.unix_user.clone());
        job_id.push(r.job_id.clone());
        claim.push(
            r.dra_claim
                .as_ref()
                .map(|d| serde_json::to_value(d).expect("a claim serialises")),
        );
        labels.push(serde_json::to_value(&r.labels).expect("labels serialise"));
        team_label.push(c.team_label.as_ref().map(|t| t.as_str().to_owned()));
    }
    sqlx::query!(
        "insert into consumer (fingerprint, namespace, pod, container, unix_user, job_id, dra_claim,
                               labels, team_label)
         select f, ns, p, c, u, j, d, l, t
         from unnest($1::bytea[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::jsonb[], $8::jsonb[], $9::text[]) as x(f, ns, p, c, u, j, d, l, t)
         on conflict (fingerprint) do nothing",
        &fingerprints,
        &namespace as &[Option<String>],
        &pod as &[Option<String>],
        &container as &[Option<String>],
        &unix_user as &[Option<String>],
        &job_id as &[Option<String>],
        &claim as &[Option<serde_json::Value>],
        &labels,
        &team_label as &[Option<String>],
    )
    .execute(&mut *tx)
    .await?;
    let stored = sqlx::query!(
        "select consumer_id, fingerprint from consumer where fingerprint = any($1)",
        &fingerprints
    )
    .fetch_all(&mut *tx)
    .await?;
    stored
        .into_iter()
        .map(|r| {
            let fingerprint: [u8; 32] = r
                .fingerprint
                .as_slice()
                .try_into()
                .map_err(|_| IngestError::BadFingerprint(r.fingerprint.len()))?;
            Ok((fingerprint, r.consumer_id))
        })
        .collect()
}

/// The owners over time of `namespaces` (of the consumers without a `team` label). Read under a
/// share lock held until the batch commits: a change of ownership takes a lock that conflicts with
/// it before it writes (`teams::store::lock_ownership`), so it waits for the batches that read the
/// owners before it and the batches after it read the owners it wrote.
pub async fn read_ownership(
    tx: &mut PgConnection,
    namespaces: &[String],
) -> Result<Ownership, sqlx::Error> {
    if namespaces.is_empty() {
        return Ok(Ownership::default());
    }
    sqlx::query!("lock table namespace_owner in share mode")
        .execute(&mut *tx)
        .await?;
    let rows = sqlx::query!(
        "select namespace, effective_from, team_id from namespace_owner where namespace = any($1)",
        namespaces
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(Ownership::from_rows(rows.into_iter().map(|r| {
        (
            r.namespace,
            OwnerVersion {
                from: r.effective_from,
                team: r.team_id.and_then(|t| TeamId::parse(&t).ok()),
            },
        )
    })))
}

/// The latest stored period of each GPU that overlaps the period given with it, `[start, end)`.
pub async fn overlapping_periods(
    tx: &mut PgConnection,
    gpu_ids: &[i32],
    start: &[DateTime<Utc>],
    end: &[DateTime<Utc>],
) -> Result<Vec<StoredPeriod>, sqlx::Error> {
    sqlx::query_as!(
        StoredPeriod,
        r#"select n.gpu_id as "gpu_id!", p.period_start as start, p.period_end as end
           from unnest($1::int4[], $2::timestamptz[], $3::timestamptz[]) as n(gpu_id, s, e)
           cross join lateral (
               select period_start, period_end from gpu_presence g
               where g.gpu_id = n.gpu_id and g.period_start < n.e
               order by g.period_start desc limit 1) p
           where p.period_end > n.s"#,
        gpu_ids,
        start,
        end
    )
    .fetch_all(&mut *tx)
    .await
}

/// Each stored period of node `node`'s GPUs that overlaps `[from, to)`, by GPU uuid then start. A
/// period is at most `bounds::MAX_PERIOD_SECONDS` long, so the index on (GPU, start) finds them.
pub async fn stored_periods(
    pool: &PgPool,
    node: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>, sqlx::Error> {
    let earliest = from - chrono::Duration::seconds(bounds::MAX_PERIOD_SECONDS);
    let rows = sqlx::query!(
        r#"select g.gpu_uuid, p.period_start, p.period_end
           from gpu g
           join gpu_presence p on p.gpu_id = g.gpu_id
           where g.node = $1 and p.period_start > $2 and p.period_start < $4
             and p.period_end > $3
           order by g.gpu_uuid, p.period_start"#,
        node,
        earliest,
        from,
        to
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.gpu_uuid, r.period_start, r.period_end))
        .collect())
}

/// Records that each batch's `gpus` existed for its period: a presence row each, and their
/// seconds in each hour it touches.
pub async fn record_presence(
    tx: &mut PgConnection,
    batches: &[(&ValidBatch, &[i32])],
) -> Result<(), sqlx::Error> {
    let mut gpu = Vec::new();
    let mut start = Vec::new();
    let mut end = Vec::new();
    let mut node = Vec::new();
    let mut hours = Vec::new();
    let mut ids = Vec::new();
    let mut seconds = Vec::new();
    let mut stranded: [Vec<Decimal>; 4] = Default::default();
    for (b, gpus) in batches {
        for &g in *gpus {
            gpu.push(g);
            start.push(b.period_start);
            end.push(b.period_end);
            node.push(b.node.clone());
        }
        // What each GPU's layout strands, from the slices the batch says it has.
        let layouts: Vec<Stranded> = b
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let layout: Vec<&Reservation> = b
                    .slices
                    .iter()
                    .filter(|s| s.gpu == i)
                    .map(|s| &s.reservation)
                    .collect();
                layout::stranded(&g.geometry, &layout)
            })
            .collect();
        for (hour, s) in seconds_by_hour(b.period_start, b.period_end) {
            for (&g, l) in gpus.iter().zip(&layouts) {
                hours.push(hour);
                ids.push(g);
                seconds.push(s);
                stranded[0].push(Decimal::from(l.compute_slices) * s);
                stranded[1].push(Decimal::from(l.memory_slices) * s);
                stranded[2].push(Decimal::from(l.compute_percent) * s);
                stranded[3].push(Decimal::from(l.memory_bytes) * s);
            }
        }
    }
    if gpu.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "insert into gpu_presence (gpu_id, period_start, period_end, node)
         select * from unnest($1::int4[], $2::timestamptz[], $3::timestamptz[], $4::text[])",
        &gpu,
        &start,
        &end,
        &node
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "with input as (
             select hour, gpu_id, sum(s) as s, sum(sc) as sc, sum(sm) as sm, sum(st) as st,
                    sum(sb) as sb
             from unnest($1::timestamptz[], $2::int4[], $3::numeric[], $4::numeric[],
                         $5::numeric[], $6::numeric[], $7::numeric[])
                  as t (hour, gpu_id, s, sc, sm, st, sb)
             group by 1, 2),
         hourly as (
             insert into gpu_hourly (hour, gpu_id, present_seconds, stranded_compute_slice_seconds,
                                     stranded_memory_slice_seconds, stranded_thread_percent_seconds,
                                     stranded_memory_byte_seconds)
             select hour, gpu_id, s, sc, sm, st, sb from input
             on conflict (hour, gpu_id) do update
                 set present_seconds = gpu_hourly.present_seconds + excluded.present_seconds,
                     stranded_compute_slice_seconds = gpu_hourly.stranded_compute_slice_seconds
                         + excluded.stranded_compute_slice_seconds,
                     stranded_memory_slice_seconds = gpu_hourly.stranded_memory_slice_seconds
                         + excluded.stranded_memory_slice_seconds,
                     stranded_thread_percent_seconds = gpu_hourly.stranded_thread_percent_seconds
                         + excluded.stranded_thread_percent_seconds,
                     stranded_memory_byte_seconds = gpu_hourly.stranded_memory_byte_seconds
                         + excluded.stranded_memory_byte_seconds)
         insert into gpu_daily (day, gpu_id, present_seconds, stranded_compute_slice_seconds,
                                stranded_memory_slice_seconds, stranded_thread_percent_seconds,
                                stranded_memory_byte_seconds)
         select date_trunc('day', hour, 'UTC'), gpu_id, sum(s), sum(sc), sum(sm), sum(st), sum(sb)
         from input group by 1, 2
         on conflict (day, gpu_id) do update
             set present_seconds = gpu_daily.present_seconds + excluded.present_seconds,
                 stranded_compute_slice_seconds = gpu_daily.stranded_compute_slice_seconds
                     + excluded.stranded_compute_slice_seconds,
                 stranded_memory_slice_seconds = gpu_daily.stranded_memory_slice_seconds
                     + excluded.stranded_memory_slice_seconds,
                 stranded_thread_percent_seconds = gpu_daily.stranded_thread_percent_seconds
                     + excluded.stranded_thread_percent_seconds,
                 stranded_memory_byte_seconds = gpu_daily.stranded_memory_byte_seconds
                     + excluded.stranded_memory_byte_seconds",
        &hours,
        &ids,
        &seconds,
        &stranded[0],
        &stranded[1],
        &stranded[2],
        &stranded[3]
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The windows stored for `[start, end)` on `gpus`, with their slices.
pub async fn stored_windows(
    tx: &mut PgConnection,
    gpus: &[i32],
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<Vec<StoredWindow>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select o.slice_id, o.consumer_id, o.window_start, o.window_end, o.held_seconds,
                  o.memory_byte_seconds, o.memory_peak_bytes, o.compute_active_seconds,
                  s.slice_uuid, s.gpu_id, s.kind as "kind: SliceKind", s.compute_share, s.memory_share, s.reserved,
                  s.profile, s.compute_slices, s.memory_slices, s.memory_bytes as slice_memory_bytes,
                  s.active_thread_percentage, s.pinned_memory_bytes, s.fraction, s.replicas, s.replica,
                  g.memory_bytes as gpu_memory_bytes,
                  coalesce(c.namespace || '/' || c.pod, c.pod, c.namespace, c.unix_user, c.job_id,
                           'a DRA claim') as "consumer_name!"
           from slice s
           join gpu g on g.gpu_id = s.gpu_id
           join occupancy o on o.slice_id = s.slice_id and o.gpu_id = s.gpu_id
           join consumer c on c.consumer_id = o.consumer_id
           where s.gpu_id = any($1) and o.gpu_id = any($1) and o.window_start >= $2 and o.window_start < $3
           order by o.slice_id, o.window_start, o.consumer_id"#,
        gpus,
        start,
        end
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| StoredWindow {
            slice_id: r.slice_id,
            consumer_id: r.consumer_id,
            window: Window {
                slice: 0,
                consumer: 0,
                start: r.window_start,
                end: r.window_end,
                held_seconds: r.held_seconds,
                memory_byte_seconds: r.memory_byte_seconds,
                memory_peak_bytes: r.memory_peak_bytes,
                compute_active_seconds: r.compute_active_seconds,
                hours: Vec::new(),
            },
            slice: SliceUse {
                reserved: r.reserved,
                compute_share: r.compute_share,
                memory_share: r.memory_share,
                gpu_memory_bytes: u64::try_from(r.gpu_memory_bytes).unwrap_or(0),
            },
            reservation: reservation_of(
                r.kind,
                r.profile,
                r.compute_slices,
                r.memory_slices,
                r.slice_memory_bytes,
                r.active_thread_percentage,
                r.pinned_memory_bytes,
                r.fraction,
                r.replicas,
                r.replica,
            ),
            slice_uuid: r.slice_uuid,
            gpu_id: r.gpu_id,
            consumer_name: r.consumer_name,
        })
        .collect())
}

/// A batch's registered ids, by the batch's own indexes: each slice's id and its GPU's id, each
/// consumer's id.
#[derive(Debug, Clone, Copy)]
pub struct WindowIds<'a> {
    pub slices: &'a [i32],
    pub slice_gpus: &'a [i32],
    pub consumers: &'a [i64],
}

impl WindowIds<'_> {
    /// The window's key in the rollups: (slice id, GPU id, consumer id).
    pub fn rollup_key(&self, w: &Window) -> (i32, i32, i64) {
        (
            self.slices[w.slice],
            self.slice_gpus[w.slice],
            self.consumers[w.consumer],
        )
    }
}

/// Appends the windows to `out` as `COPY` text rows.
pub fn copy_rows(out: &mut String, windows: &[&Window], ids: WindowIds<'_>) {
    use std::fmt::Write;
    out.reserve(windows.len() * 120);
    for w in windows {
        write!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t",
            ids.slices[w.slice],
            ids.slice_gpus[w.slice],
            ids.consumers[w.consumer],
            CopyTime(w.start),
            CopyTime(w.end),
            w.held_seconds,
            w.memory_byte_seconds,
            w.memory_peak_bytes,
        )
        .expect("writing to a String");
        match w.compute_active_seconds {
            Some(c) => writeln!(out, "{c}").expect("writing to a String"),
            None => out.push_str("\\N\n"),
        }
    }
}

/// A time as `COPY` text reads it, in UTC, written without a `String` of its own.
struct CopyTime(DateTime<Utc>);

impl std::fmt::Display for CopyTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use chrono::{Datelike, Timelike};
        let t = self.0;
        if t.nanosecond() >= 1_000_000_000 {
            // A leap second: RFC 3339 writes it as second 60, which PostgreSQL reads too.
            return f.write_str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true));
        }
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )?;
        match t.nanosecond() {
            0 => {}
            n if n % 1_000 == 0 => write!(f, ".{:06}", n / 1_000)?,
            n => write!(f, ".{n:09}")?,
        }
        f.write_str("+00")
    }
}

const COPY_COLUMNS: &str = "(slice_id, gpu_id, consumer_id, window_start, window_end, held_seconds, \
                            memory_byte_seconds, memory_peak_bytes, compute_active_seconds)";

/// Stores the windows and returns those that were new. The fast path `COPY`s straight into the
/// table; only when that meets a stored window does it stage the rows and insert the new ones.
pub async fn insert_windows<'b>(
    tx: &mut PgConnection,
    windows: &[&'b Window],
    ids: WindowIds<'_>,
) -> Result<Vec<&'b Window>, sqlx::Error> {
    if windows.is_empty() {
        return Ok(Vec::new());
    }
    let mut rows = String::new();
    copy_rows(&mut rows, windows, ids);
    let rows = rows.into_bytes();
    sqlx::query("savepoint copy_windows")
        .execute(&mut *tx)
        .await?;
    match copy_windows(tx, &rows).await {
        Ok(_) => {
            sqlx::query("release savepoint copy_windows")
                .execute(&mut *tx)
                .await?;
            return Ok(windows.to_vec());
        }
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(UNIQUE_VIOLATION) => {
            sqlx::query("rollback to savepoint copy_windows")
                .execute(&mut *tx)
                .await?;
        }
        Err(e) => return Err(e),
    }
    // The staging table exists only in this transaction, so these two statements are not checked
    // at compile time.
    sqlx::query(
        "create temp table occupancy_stage (like occupancy including defaults) on commit drop",
    )
    .execute(&mut *tx)
    .await?;
    copy_in(
        tx,
        &format!("copy occupancy_stage {COPY_COLUMNS} from stdin"),
        &rows,
    )
    .await?;
    let new: Vec<(i32, i64, DateTime<Utc>)> = sqlx::query_as(
        "insert into occupancy select * from occupancy_stage on conflict do nothing
         returning slice_id, consumer_id, window_start",
    )
    .fetch_all(&mut *tx)
    .await?;
    let index: HashMap<(i32, i64, DateTime<Utc>), &Window> = windows
        .iter()
        .map(|w| {
            (
                (ids.slices[w.slice], ids.consumers[w.consumer], w.start),
                *w,
            )
        })
        .collect();
    Ok(new
        .iter()
        .filter_map(|key| index.get(key).copied())
        .collect())
}

/// `COPY`s rows made by [`copy_rows`] into the windows; a stored window fails it whole (unique
/// violation), as a group of batches wants: its batches are then stored one by one.
pub async fn copy_windows(tx: &mut PgConnection, rows: &[u8]) -> Result<u64, sqlx::Error> {
    copy_in(
        tx,
        &format!("copy occupancy {COPY_COLUMNS} from stdin"),
        rows,
    )
    .await
}

async fn copy_in(tx: &mut PgConnection, statement: &str, rows: &[u8]) -> Result<u64, sqlx::Error> {
    let mut copy = tx.copy_in_raw(statement).await?;
    if let Err(e) = copy.send(rows).await {
        copy.abort("slicemeter: sending rows failed").await.ok();
        return Err(e);
    }
    copy.finish().await
}

/// Marks the closed UTC days (before `now`'s) among `hours` as written since right-sizing's day
/// summaries were made of them (`evidence_day_stale`, migration 0029), so that they are read from
/// the hourly rollups until summarised again. Each day's advisory lock (`db::evidence_day_lock`) is
/// taken shared first, in the days' order, and held to the commit: the summariser takes it
/// exclusively, so it never reads a day while a write to it is on its way. Live batches write
/// today's hours only and cost nothing here.
pub async fn mark_closed_days(
    tx: &mut PgConnection,
    hours: impl Iterator<Item = DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    let today = crate::domain::time::floor_day(now);
    let days: std::collections::BTreeSet<DateTime<Utc>> = hours
        .map(crate::domain::time::floor_day)
        .filter(|d| *d < today)
        .collect();
    if days.is_empty() {
        return Ok(());
    }
    let keys: Vec<i32> = days
        .iter()
        .map(|d| crate::db::evidence_day_lock(*d))
        .collect();
    let days: Vec<DateTime<Utc>> = days.into_iter().collect();
    sqlx::query(
        "with locked as materialized (
             select d.day, pg_advisory_xact_lock_shared($1, d.key)
             from unnest($2::timestamptz[], $3::int4[]) as d(day, key)
             order by d.day)
         insert into evidence_day_stale (day) select day from locked
         on conflict do nothing",
    )
    .bind(crate::db::EVIDENCE_DAY_LOCK)
    .bind(&days)
    .bind(&keys)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A rollup row's key: slice id, GPU id, consumer id ([`WindowIds::rollup_key`]) and the team, as
/// an index into the teams [`add_to_rollup`] is given (`attribution::Teams`).
pub type RollupKey = (i32, i32, i64, u32);

/// Adds the hourly sums of new windows, keyed by [`RollupKey`] (`teams` names their teams), to the
/// hourly rollup, the day rollup and the team's day rollup (with the days each slice was held in
/// its month), in one statement.
pub async fn add_to_rollup(
    tx: &mut PgConnection,
    rollup: Rollup<RollupKey>,
    teams: &[TeamId],
) -> Result<(), sqlx::Error> {
    if rollup.rows.is_empty() {
        return Ok(());
    }
    let n = rollup.rows.len();
    let mut hour = Vec::with_capacity(n);
    let mut slice = Vec::with_capacity(n);
    let mut gpu = Vec::with_capacity(n);
    let mut consumer = Vec::with_capacity(n);
    let mut held = Vec::with_capacity(n);
    let mut memory = Vec::with_capacity(n);
    let mut peak = Vec::with_capacity(n);
    let mut active = Vec::with_capacity(n);
    let mut known = Vec::with_capacity(n);
    let mut count = Vec::with_capacity(n);
    let mut team = Vec::with_capacity(n);
    for ((h, (s, g, c, t)), f) in rollup.rows {
        hour.push(h);
        slice.push(s);
        gpu.push(g);
        consumer.push(c);
        // The index is one `teams` gave out: every key names a team, never a default.
        team.push(teams[t as usize].as_str().to_owned());
        held.push(f.held_seconds);
        memory.push(f.memory_byte_seconds);
        peak.push(f.memory_peak_bytes);
        active.push(f.compute_active_seconds);
        known.push(f.compute_known_seconds);
        count.push(f.window_count);
    }
    sqlx::query!(
        "with input as (
             select * from unnest($1::timestamptz[], $2::int4[], $3::int8[], $4::numeric[],
                                  $5::numeric[], $6::int8[], $7::numeric[], $8::numeric[], $9::int4[],
                                  $10::int4[], $11::text[])
                 as t (hour, slice_id, consumer_id, held, memory, peak, active, known, windows,
                       gpu_id, team_id)),
         hourly as (
             insert into usage_hourly (hour, slice_id, consumer_id, held_seconds, memory_byte_seconds,
                                       memory_peak_bytes, compute_active_seconds, compute_known_seconds,
                                       window_count, gpu_id, team_id)
             select * from input
             on conflict (hour, slice_id, gpu_id, consumer_id, team_id) do update set
                 held_seconds = usage_hourly.held_seconds + excluded.held_seconds,
                 memory_byte_seconds = usage_hourly.memory_byte_seconds + excluded.memory_byte_seconds,
                 memory_peak_bytes = greatest(usage_hourly.memory_peak_bytes, excluded.memory_peak_bytes),
                 compute_active_seconds = usage_hourly.compute_active_seconds + excluded.compute_active_seconds,
                 compute_known_seconds = usage_hourly.compute_known_seconds + excluded.compute_known_seconds,
                 window_count = usage_hourly.window_count + excluded.window_count),
         by_day as (
             select date_trunc('day', hour, 'UTC') as day, slice_id, consumer_id, sum(held) as held,
                    sum(memory) as memory, max(peak) as peak, sum(active) as active,
                    sum(known) as known, sum(windows) as windows, gpu_id, team_id
             from input group by 1, 2, 3, gpu_id, team_id),
         daily as (
             insert into usage_daily (day, slice_id, consumer_id, held_seconds, memory_byte_seconds,
                                      memory_peak_bytes, compute_active_seconds, compute_known_seconds,
                                      window_count, gpu_id, team_id)
             select * from by_day
             on conflict (day, slice_id, gpu_id, consumer_id, team_id) do update set
                 held_seconds = usage_daily.held_seconds + excluded.held_seconds,
                 memory_byte_seconds = usage_daily.memory_byte_seconds + excluded.memory_byte_seconds,
                 memory_peak_bytes = greatest(usage_daily.memory_peak_bytes, excluded.memory_peak_bytes),
                 compute_active_seconds = usage_daily.compute_active_seconds + excluded.compute_active_seconds,
                 compute_known_seconds = usage_daily.compute_known_seconds + excluded.compute_known_seconds,
                 window_count = usage_daily.window_count + excluded.window_count
             returning day, slice_id, gpu_id, consumer_id, team_id, held_seconds, window_count),
         -- A row that holds no more than this group added was made now (or held nothing before):
         -- the first time the consumer held the slice that day for that team.
         days as (
             insert into usage_month_days (month, gpu_id, slice_id, consumer_id, team_id, days)
             select date_trunc('month', d.day, 'UTC'), d.gpu_id, d.slice_id, d.consumer_id,
                    d.team_id, bit_or(day_bit(d.day))
             from daily d
             join by_day b using (day, slice_id, gpu_id, consumer_id, team_id)
             where d.held_seconds = b.held and d.window_count = b.windows
             group by 1, 2, 3, 4, 5
             on conflict (month, slice_id, gpu_id, consumer_id, team_id) do update set
                 days = usage_month_days.days | excluded.days)
         -- The team's day rows, in their key's order: two groups adding to the same rows lock
         -- them in the same order, and never wait on each other in a cycle.
         insert into usage_team_daily (day, team_id, model, kind, profile, compute_share,
                                       memory_share, memory_reserved_bytes, held_seconds,
                                       memory_byte_seconds, compute_active_seconds,
                                       compute_known_seconds, window_count)
         select date_trunc('day', i.hour, 'UTC'), i.team_id, g.model, s.kind, s.profile,
                s.compute_share, s.memory_share, s.memory_reserved_bytes, sum(i.held),
                sum(i.memory), sum(i.active), sum(i.known), sum(i.windows)
         from input i
         join slice s on s.slice_id = i.slice_id
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
        &hour,
        &slice,
        &consumer,
        &held,
        &memory,
        &peak,
        &active,
        &known,
        &count,
        &gpu,
        &team
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::CopyTime;
    use chrono::{DateTime, TimeZone, Timelike, Utc};

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn times_are_written_as_copy_reads_them_with_only_the_fraction_they_have() {
        for (t, text) in [
            (at("2026-12-04T20:00:00Z"), "2026-12-04 20:00:00+00"),
            (
                at("2026-01-09T03:04:05.25Z"),
                "2026-01-09 03:04:05.250000+00",
            ),
            (
                at("2026-01-09T03:04:05.000001Z"),
                "2026-01-09 03:04:05.000001+00",
            ),
            (at("0999-12-31T23:59:59Z"), "0999-12-31 23:59:59+00"),
        ] {
            assert_eq!(CopyTime(t).to_string(), text);
        }
        let leap = Utc
            .with_ymd_and_hms(2016, 12, 31, 23, 59, 59)
            .unwrap()
            .with_nanosecond(1_500_000_000)
            .unwrap();
        assert_eq!(CopyTime(leap).to_string(), "2016-12-31T23:59:60.500Z");
    }
}
