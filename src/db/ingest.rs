//! Storing one validated batch in one transaction: the GPUs, slices and consumers it names, the
//! GPUs' presence, its windows (`COPY`, falling back to a staged `INSERT ... ON CONFLICT DO NOTHING`
//! only when a window is already stored) and the hourly rollups of what was new.
//!
//! A GPU's periods never overlap and a window lies inside its batch's period, so only a batch that
//! re-sends a period can meet stored windows: for those GPUs the stored windows of the period are
//! read and the one-holder and capacity rules are checked again with them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, SecondsFormat, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use crate::domain::batch::IngestOutcome;
use crate::domain::slice::{GpuGeometry, Reservation};
use crate::ingest::occupancy::{self, HolderClash, SliceUse, Span};
use crate::ingest::rollup::{Figures, Rollup, seconds_by_hour, split_by_hour};
use crate::ingest::validate::{FieldError, ValidBatch, ValidConsumer, ValidWindow};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The batch contradicts what is stored: a GPU or slice described differently, a period that
    /// overlaps one already reported, or windows that clash with stored ones.
    #[error("the batch contradicts stored data")]
    Conflict(Vec<FieldError>),
    /// The batch reports GPUs that belong to another node.
    #[error("the batch reports another node's GPUs")]
    Forbidden(Vec<FieldError>),
    /// Together with what is stored for the same period, the batch uses more of a card than it has.
    #[error("the batch over-commits a card")]
    Invalid(Vec<FieldError>),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

const UNIQUE_VIOLATION: &str = "23505";

pub async fn store(pool: &PgPool, b: &ValidBatch) -> Result<IngestOutcome, StoreError> {
    let mut tx = pool.begin().await?;
    lock_gpus(&mut tx, b).await?;
    let gpu_ids = upsert_gpus(&mut tx, b).await?;
    let slice_ids = upsert_slices(&mut tx, b, &gpu_ids).await?;
    let consumer_ids = upsert_consumers(&mut tx, b).await?;
    let resent = record_presence(&mut tx, b, &gpu_ids).await?;
    let fresh = if resent.is_empty() {
        b.windows.iter().collect()
    } else {
        check_resent(&mut tx, b, &resent, &gpu_ids, &slice_ids, &consumer_ids).await?
    };
    let new = insert_windows(&mut tx, &fresh, &slice_ids, &consumer_ids).await?;
    update_usage_rollup(&mut tx, &new, &slice_ids, &consumer_ids).await?;
    tx.commit().await?;
    let inserted = new.len() as u64;
    Ok(IngestOutcome {
        inserted,
        duplicates: b.windows.len() as u64 - inserted,
    })
}

/// Serialises batches that report the same GPU, so that the presence overlap check below cannot race.
/// Locks are taken in one global order (sorted keys, locked in array order) so batches never deadlock.
async fn lock_gpus(tx: &mut PgConnection, b: &ValidBatch) -> Result<(), sqlx::Error> {
    let mut keys: Vec<i64> = b.gpus.iter().map(|g| lock_key(&g.uuid)).collect();
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

/// Registers new GPUs and returns every batch GPU's id, in batch order. A GPU belongs to the node
/// that first reported it (moving it is an admin's act: `PUT /v1/gpus/{uuid}`); its model and
/// geometry never change; its MIG mode may.
async fn upsert_gpus(tx: &mut PgConnection, b: &ValidBatch) -> Result<Vec<i32>, StoreError> {
    let uuids: Vec<String> = b.gpus.iter().map(|g| g.uuid.clone()).collect();
    let models: Vec<String> = b.gpus.iter().map(|g| g.model.clone()).collect();
    let memory: Vec<i64> = b
        .gpus
        .iter()
        .map(|g| g.geometry.memory_bytes as i64)
        .collect();
    let compute: Vec<i16> = b
        .gpus
        .iter()
        .map(|g| i16::from(g.geometry.compute_slices))
        .collect();
    let memory_slices: Vec<i16> = b
        .gpus
        .iter()
        .map(|g| i16::from(g.geometry.memory_slices))
        .collect();
    let mig: Vec<bool> = b.gpus.iter().map(|g| g.mig_enabled).collect();
    sqlx::query!(
        "insert into gpu (gpu_uuid, node, model, memory_bytes, compute_slices, memory_slices, mig_enabled)
         select u, $2, m, b, c, s, g
         from unnest($1::text[], $3::text[], $4::int8[], $5::int2[], $6::int2[], $7::bool[]) as x(u, m, b, c, s, g)
         on conflict (gpu_uuid) do nothing",
        &uuids,
        b.node,
        &models,
        &memory,
        &compute,
        &memory_slices,
        &mig
    )
    .execute(&mut *tx)
    .await?;
    let stored = sqlx::query!(
        "select gpu_id, gpu_uuid, node, model, memory_bytes, compute_slices, memory_slices, mig_enabled
         from gpu where gpu_uuid = any($1)",
        &uuids
    )
    .fetch_all(&mut *tx)
    .await?;
    let by_uuid: HashMap<&str, _> = stored.iter().map(|r| (r.gpu_uuid.as_str(), r)).collect();
    let mut ids = Vec::with_capacity(b.gpus.len());
    let mut conflicts = Vec::new();
    let mut foreign = Vec::new();
    for (i, g) in b.gpus.iter().enumerate() {
        let Some(r) = by_uuid.get(g.uuid.as_str()) else {
            // Inserted above or found: not reachable, but never a panic.
            return Err(StoreError::Db(sqlx::Error::RowNotFound));
        };
        if r.node != b.node {
            foreign.push(FieldError::new(
                format!("gpus[{i}].uuid"),
                format!(
                    "{} belongs to node {:?}, not {:?}; moving a GPU to another node is an admin's act (PUT /v1/gpus/{{uuid}})",
                    g.uuid, r.node, b.node
                ),
            ));
            ids.push(r.gpu_id);
            continue;
        }
        if (
            r.model.as_str(),
            r.memory_bytes,
            r.compute_slices,
            r.memory_slices,
        ) != (
            g.model.as_str(),
            g.geometry.memory_bytes as i64,
            i16::from(g.geometry.compute_slices),
            i16::from(g.geometry.memory_slices),
        ) {
            conflicts.push(FieldError::new(
                format!("gpus[{i}]"),
                format!(
                    "{} is registered as {:?} with {} bytes, {} compute and {} memory slices; a GPU's model and geometry do not change",
                    g.uuid, r.model, r.memory_bytes, r.compute_slices, r.memory_slices
                ),
            ));
        } else if r.mig_enabled != g.mig_enabled {
            sqlx::query!(
                "update gpu set mig_enabled = $2 where gpu_id = $1",
                r.gpu_id,
                g.mig_enabled
            )
            .execute(&mut *tx)
            .await?;
        }
        ids.push(r.gpu_id);
    }
    if !foreign.is_empty() {
        tracing::warn!(node = %b.node, gpus = foreign.len(), "A batch reported GPUs of another node; it was refused.");
        return Err(StoreError::Forbidden(foreign));
    }
    if conflicts.is_empty() {
        Ok(ids)
    } else {
        Err(StoreError::Conflict(conflicts))
    }
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

/// Registers new slices and returns every batch slice's id, in batch order. A slice's GPU and
/// reservation are part of its identity and never change.
async fn upsert_slices(
    tx: &mut PgConnection,
    b: &ValidBatch,
    gpu_ids: &[i32],
) -> Result<Vec<i32>, StoreError> {
    let n = b.slices.len();
    let mut uuids = Vec::with_capacity(n);
    let mut gpus = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut cols: Vec<ReservationColumns> = Vec::with_capacity(n);
    let mut compute_share = Vec::with_capacity(n);
    let mut memory_share = Vec::with_capacity(n);
    let mut reserved_bytes = Vec::with_capacity(n);
    let mut reserved = Vec::with_capacity(n);
    for s in &b.slices {
        uuids.push(s.uuid.clone());
        gpus.push(gpu_ids[s.gpu]);
        kinds.push(s.reservation.kind().as_str().to_owned());
        cols.push(ReservationColumns::of(&s.reservation));
        compute_share.push(s.share.compute);
        memory_share.push(s.share.memory);
        reserved_bytes.push(s.share.memory_reserved_bytes as i64);
        reserved.push(s.share.kind.is_reserved());
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
                            replica, compute_share, memory_share, memory_reserved_bytes, reserved)
         select * from unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::int4[], $6::int2[],
                              $7::int2[], $8::int8[], $9::int2[], $10::int8[], $11::numeric[], $12::int2[],
                              $13::int2[], $14::numeric[], $15::numeric[], $16::int8[], $17::bool[])
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
        &reserved
    )
    .execute(&mut *tx)
    .await?;
    let stored = sqlx::query!(
        "select slice_id, slice_uuid, gpu_id, kind, profile, compute_slices, memory_slices, memory_bytes,
                active_thread_percentage, pinned_memory_bytes, fraction, replicas, replica
         from slice where slice_uuid = any($1)",
        &uuids
    )
    .fetch_all(&mut *tx)
    .await?;
    let by_uuid: HashMap<&str, _> = stored.iter().map(|r| (r.slice_uuid.as_str(), r)).collect();
    let mut ids = Vec::with_capacity(n);
    let mut conflicts = Vec::new();
    for (i, s) in b.slices.iter().enumerate() {
        let Some(r) = by_uuid.get(s.uuid.as_str()) else {
            return Err(StoreError::Db(sqlx::Error::RowNotFound));
        };
        let c = &cols[i];
        let same = r.gpu_id == gpus[i]
            && r.kind == kinds[i]
            && (
                &r.profile,
                r.compute_slices,
                r.memory_slices,
                r.memory_bytes,
                r.active_thread_percentage,
                r.pinned_memory_bytes,
                r.fraction.map(|f| f.normalize()),
                r.replicas,
                r.replica,
            ) == (
                &c.profile,
                c.compute_slices,
                c.memory_slices,
                c.memory_bytes,
                c.active_thread_percentage,
                c.pinned_memory_bytes,
                c.fraction.map(|f| f.normalize()),
                c.replicas,
                c.replica,
            );
        if !same {
            conflicts.push(FieldError::new(
                format!("slices[{i}]"),
                format!(
                    "{} is registered with another GPU or reservation ({} {}); a slice's reservation never changes, so report a changed slice under a new uuid",
                    s.uuid,
                    r.kind,
                    r.profile.as_deref().unwrap_or("")
                ),
            ));
        }
        ids.push(r.slice_id);
    }
    if conflicts.is_empty() {
        Ok(ids)
    } else {
        Err(StoreError::Conflict(conflicts))
    }
}

/// Registers new consumers (and the teams their `team` labels name) and returns every batch
/// consumer's id, in batch order. A new consumer is attributed to its labelled team, else to the team
/// that owns its namespace, else to `unattributed`.
async fn upsert_consumers(tx: &mut PgConnection, b: &ValidBatch) -> Result<Vec<i64>, sqlx::Error> {
    // Rows other batches may insert at the same time are inserted in sorted order, so that two
    // batches never wait on each other's rows in opposite orders.
    let mut labelled: Vec<String> = b
        .consumers
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
    let n = b.consumers.len();
    let mut order: Vec<&ValidConsumer> = b.consumers.iter().collect();
    order.sort_unstable_by_key(|c| c.fingerprint);
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
                               labels, team_label, team_id)
         select f, ns, p, c, u, j, d, l, t,
                coalesce(t, (select tn.team_id from team_namespace tn where tn.namespace = x.ns),
                         'unattributed')
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
    let by_fingerprint: HashMap<&[u8], i64> = stored
        .iter()
        .map(|r| (r.fingerprint.as_slice(), r.consumer_id))
        .collect();
    b.consumers
        .iter()
        .map(|c| {
            by_fingerprint
                .get(&c.fingerprint[..])
                .copied()
                .ok_or(sqlx::Error::RowNotFound)
        })
        .collect()
}

/// Records that the batch's GPUs existed for its period, once: a re-sent period is not counted again,
/// and a period that overlaps another one of the same GPU is refused, since it would count hours
/// twice. Returns the GPUs whose period this batch re-sends.
async fn record_presence(
    tx: &mut PgConnection,
    b: &ValidBatch,
    gpu_ids: &[i32],
) -> Result<Vec<i32>, StoreError> {
    let overlapping = sqlx::query!(
        r#"select n.gpu_id as "gpu_id!", p.period_start, p.period_end
           from unnest($1::int4[]) as n(gpu_id)
           cross join lateral (
               select period_start, period_end from gpu_presence g
               where g.gpu_id = n.gpu_id and g.period_start < $3
               order by g.period_start desc limit 1) p
           where p.period_end > $2"#,
        gpu_ids,
        b.period_start,
        b.period_end
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut already = Vec::new();
    let mut conflicts = Vec::new();
    for row in &overlapping {
        let Some(i) = gpu_ids.iter().position(|&g| g == row.gpu_id) else {
            continue;
        };
        if (row.period_start, row.period_end) == (b.period_start, b.period_end) {
            already.push(row.gpu_id);
        } else {
            conflicts.push(FieldError::new(
                format!("gpus[{i}]"),
                format!(
                    "{} was already reported for [{}, {}), which overlaps this batch's period [{}, {}); a GPU's periods must not overlap",
                    b.gpus[i].uuid, row.period_start, row.period_end, b.period_start, b.period_end
                ),
            ));
        }
    }
    if !conflicts.is_empty() {
        return Err(StoreError::Conflict(conflicts));
    }
    let new: Vec<i32> = gpu_ids
        .iter()
        .copied()
        .filter(|g| !already.contains(g))
        .collect();
    if new.is_empty() {
        return Ok(already);
    }
    sqlx::query!(
        "insert into gpu_presence (gpu_id, period_start, period_end, node)
         select g, $2, $3, $4 from unnest($1::int4[]) g",
        &new,
        b.period_start,
        b.period_end,
        b.node
    )
    .execute(&mut *tx)
    .await?;
    let mut hours = Vec::new();
    let mut gpus = Vec::new();
    let mut seconds = Vec::new();
    for (hour, s) in seconds_by_hour(b.period_start, b.period_end) {
        for &g in &new {
            hours.push(hour);
            gpus.push(g);
            seconds.push(s);
        }
    }
    sqlx::query!(
        "insert into gpu_hourly (hour, gpu_id, present_seconds)
         select * from unnest($1::timestamptz[], $2::int4[], $3::numeric[])
         on conflict (hour, gpu_id) do update
             set present_seconds = gpu_hourly.present_seconds + excluded.present_seconds",
        &hours,
        &gpus,
        &seconds
    )
    .execute(&mut *tx)
    .await?;
    Ok(already)
}

/// Where a window of a re-sent period comes from: this batch, or the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Batch(usize),
    Stored(usize),
}

/// A reservation as stored in the `slice` table, back in its domain type.
#[allow(clippy::too_many_arguments)]
fn reservation_of(
    kind: &str,
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
        "mig" => Reservation::Mig {
            profile: profile?,
            profile_id: None,
            compute_slices: u8::try_from(compute_slices?).ok()?,
            memory_slices: u8::try_from(memory_slices?).ok()?,
            memory_bytes: u64::try_from(memory_bytes?).ok()?,
        },
        "mps" => Reservation::Mps {
            active_thread_percentage: u8::try_from(threads?).ok()?,
            pinned_memory_bytes: u64::try_from(pinned?).ok()?,
        },
        "vgpu" => Reservation::Vgpu {
            fraction: fraction?,
        },
        "timeslice" => Reservation::Timeslice {
            replicas: u16::try_from(replicas?).ok()?,
            replica: u16::try_from(replica?).ok()?,
        },
        "whole" => Reservation::Whole,
        _ => return None,
    })
}

/// The windows to store of a batch that re-sends the period of the GPUs `resent`. The period's
/// stored windows are read: a new window that repeats a stored one exactly is a duplicate (left
/// out); one that repeats a stored window's slice, consumer and start with other figures, or that
/// breaks the one-holder rule together with stored windows, makes the batch a conflict naming the
/// stored window (409); one that, with them, uses or reserves more of a card than it has is invalid
/// like an over-committed batch alone (422).
async fn check_resent<'b>(
    tx: &mut PgConnection,
    b: &'b ValidBatch,
    resent: &[i32],
    gpu_ids: &[i32],
    slice_ids: &[i32],
    consumer_ids: &[i64],
) -> Result<Vec<&'b ValidWindow>, StoreError> {
    let stored = sqlx::query!(
        r#"select o.slice_id, o.consumer_id, o.window_start, o.window_end, o.held_seconds,
                  o.memory_byte_seconds, o.memory_peak_bytes, o.compute_active_seconds,
                  s.slice_uuid, s.gpu_id, s.kind, s.compute_share, s.memory_share, s.reserved,
                  s.profile, s.compute_slices, s.memory_slices, s.memory_bytes as slice_memory_bytes,
                  s.active_thread_percentage, s.pinned_memory_bytes, s.fraction, s.replicas, s.replica,
                  g.memory_bytes as gpu_memory_bytes,
                  coalesce(c.namespace || '/' || c.pod, c.pod, c.namespace, c.unix_user, c.job_id,
                           'a DRA claim') as "holder!"
           from slice s
           join gpu g on g.gpu_id = s.gpu_id
           join occupancy o on o.slice_id = s.slice_id
           join consumer c on c.consumer_id = o.consumer_id
           where s.gpu_id = any($1) and o.window_start >= $2 and o.window_start < $3
           order by o.slice_id, o.window_start, o.consumer_id"#,
        resent,
        b.period_start,
        b.period_end
    )
    .fetch_all(&mut *tx)
    .await?;
    let on_resent = |w: &ValidWindow| resent.contains(&gpu_ids[b.slices[w.slice].gpu]);
    let mut conflicts = Vec::new();
    let mut invalid = Vec::new();
    let describe = |k: usize| {
        let r = &stored[k];
        format!(
            "the window stored for {} [{}, {}) held by {}",
            r.slice_uuid, r.window_start, r.window_end, r.holder
        )
    };

    // Exact repeats are duplicates; the same key with other figures is a contradiction.
    let by_key: HashMap<(i32, i64, DateTime<Utc>), usize> = stored
        .iter()
        .enumerate()
        .map(|(k, r)| ((r.slice_id, r.consumer_id, r.window_start), k))
        .collect();
    let mut fresh = Vec::new();
    for (i, w) in b.windows.iter().enumerate() {
        let key = (slice_ids[w.slice], consumer_ids[w.consumer], w.start);
        match by_key.get(&key) {
            None => fresh.push((i, w)),
            Some(&k) => {
                let r = &stored[k];
                let same = (
                    r.window_end,
                    r.held_seconds,
                    r.memory_byte_seconds,
                    r.memory_peak_bytes,
                    r.compute_active_seconds,
                ) == (
                    w.end,
                    w.held_seconds,
                    w.memory_byte_seconds,
                    w.memory_peak_bytes,
                    w.compute_active_seconds,
                );
                if !same {
                    conflicts.push(FieldError::new(
                        format!("windows[{i}]"),
                        format!(
                            "repeats the slice, consumer and start of {} with other figures (held {} s, memory {} byte-seconds); a stored window never changes",
                            describe(k),
                            r.held_seconds,
                            r.memory_byte_seconds
                        ),
                    ));
                }
            }
        }
    }

    // One slice table for both: the batch's slices by index, then stored slices the batch lacks.
    let mut uses: Vec<SliceUse> = b.slices.iter().map(|s| s.usage(&b.gpus[s.gpu])).collect();
    let mut table: HashMap<i32, usize> = slice_ids
        .iter()
        .enumerate()
        .map(|(k, &id)| (id, k))
        .collect();
    let mut stored_only: BTreeMap<i32, (i32, String, Option<Reservation>)> = BTreeMap::new();
    for r in &stored {
        if table.contains_key(&r.slice_id) {
            continue;
        }
        table.insert(r.slice_id, uses.len());
        uses.push(SliceUse {
            reserved: r.reserved,
            compute_share: r.compute_share,
            memory_share: r.memory_share,
            gpu_memory_bytes: u64::try_from(r.gpu_memory_bytes).unwrap_or(0),
        });
        stored_only.insert(
            r.slice_id,
            (
                r.gpu_id,
                r.slice_uuid.clone(),
                reservation_of(
                    &r.kind,
                    r.profile.clone(),
                    r.compute_slices,
                    r.memory_slices,
                    r.slice_memory_bytes,
                    r.active_thread_percentage,
                    r.pinned_memory_bytes,
                    r.fraction,
                    r.replicas,
                    r.replica,
                ),
            ),
        );
    }
    let stored_pieces: Vec<Vec<(DateTime<Utc>, Figures)>> = stored
        .iter()
        .map(|r| {
            split_by_hour(
                r.window_start,
                r.window_end,
                Figures::of_window(
                    r.held_seconds,
                    r.memory_byte_seconds,
                    r.memory_peak_bytes,
                    r.compute_active_seconds,
                ),
            )
            .unwrap_or_default()
        })
        .collect();
    let mut spans: Vec<(i32, Span<'_, Origin>)> = Vec::new();
    for (k, r) in stored.iter().enumerate() {
        spans.push((
            r.gpu_id,
            Span {
                origin: Origin::Stored(k),
                slice: table[&r.slice_id],
                start: r.window_start,
                end: r.window_end,
                held_seconds: r.held_seconds,
                pieces: &stored_pieces[k],
            },
        ));
    }
    for &(i, w) in fresh.iter().filter(|(_, w)| on_resent(w)) {
        spans.push((
            gpu_ids[b.slices[w.slice].gpu],
            Span {
                origin: Origin::Batch(i),
                slice: w.slice,
                start: w.start,
                end: w.end,
                held_seconds: w.held_seconds,
                pieces: &w.pieces,
            },
        ));
    }
    let all: Vec<Span<'_, Origin>> = spans.iter().map(|(_, s)| *s).collect();
    for clash in occupancy::holder_clashes(&all) {
        let involved: Vec<Origin> = match clash {
            HolderClash::Overlap { earlier, later } => vec![earlier, later],
            HolderClash::OverHeld { windows, .. } => windows,
        };
        let stored_ones: Vec<String> = involved
            .iter()
            .filter_map(|o| match o {
                Origin::Stored(k) => Some(describe(*k)),
                Origin::Batch(_) => None,
            })
            .collect();
        for o in &involved {
            if let Origin::Batch(i) = o {
                conflicts.push(FieldError::new(
                    format!("windows[{i}]"),
                    format!(
                        "holds its slice at the same time as {}: a slice has one holder at a time",
                        stored_ones.join(" and ")
                    ),
                ));
            }
        }
    }
    for &gpu in resent {
        let on_gpu: Vec<Span<'_, Origin>> = spans
            .iter()
            .filter(|(g, _)| *g == gpu)
            .map(|(_, s)| *s)
            .collect();
        for o in occupancy::hourly_overruns(b.period_start, b.period_end, &uses, &on_gpu) {
            for w in &o.windows {
                if let Origin::Batch(i) = w {
                    invalid.push(FieldError::new(
                        format!("windows[{i}]"),
                        format!(
                            "with the windows stored for the same period, they use {} s of the GPU's {} in the hour from {}, which had {} s of it",
                            o.used_seconds.round_dp(6).normalize(),
                            o.what,
                            o.hour,
                            o.available_seconds
                        ),
                    ));
                }
            }
        }
        // The card's reservations, in this batch and in what the period already holds.
        let Some(g) = gpu_ids.iter().position(|&id| id == gpu) else {
            continue;
        };
        let theirs: Vec<&(i32, String, Option<Reservation>)> = stored_only
            .values()
            .filter(|(sg, _, _)| *sg == gpu)
            .collect();
        if theirs.is_empty() {
            continue;
        }
        let geometry: GpuGeometry = b.gpus[g].geometry;
        let mine: Vec<usize> = (0..b.slices.len())
            .filter(|&k| b.slices[k].gpu == g)
            .collect();
        let reservations: Option<Vec<&Reservation>> = mine
            .iter()
            .map(|&k| Some(&b.slices[k].reservation))
            .chain(theirs.iter().map(|(_, _, r)| r.as_ref()))
            .collect();
        let over = match reservations {
            Some(rs) => occupancy::reserved(&geometry, rs).is_none_or(|r| r.exceeds_the_card()),
            None => false,
        };
        if over {
            let names: BTreeSet<&str> = theirs.iter().map(|(_, u, _)| u.as_str()).collect();
            let names = names.into_iter().collect::<Vec<_>>().join(", ");
            for &k in &mine {
                invalid.push(FieldError::new(
                    format!("slices[{k}]"),
                    format!(
                        "with the slices stored for the same period ({names}), the reserved slices of {} take more than the card",
                        b.gpus[g].uuid
                    ),
                ));
            }
        }
    }
    if !conflicts.is_empty() {
        Err(StoreError::Conflict(conflicts))
    } else if !invalid.is_empty() {
        Err(StoreError::Invalid(invalid))
    } else {
        Ok(fresh.into_iter().map(|(_, w)| w).collect())
    }
}

fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// The windows as `COPY` text rows.
fn copy_rows(windows: &[&ValidWindow], slice_ids: &[i32], consumer_ids: &[i64]) -> Vec<u8> {
    use std::fmt::Write;
    let mut out = String::with_capacity(windows.len() * 120);
    for w in windows {
        let compute = w
            .compute_active_seconds
            .map_or_else(|| "\\N".to_owned(), |c| c.to_string());
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            slice_ids[w.slice],
            consumer_ids[w.consumer],
            timestamp(w.start),
            timestamp(w.end),
            w.held_seconds,
            w.memory_byte_seconds,
            w.memory_peak_bytes,
            compute
        )
        .expect("writing to a String");
    }
    out.into_bytes()
}

const COPY_COLUMNS: &str = "(slice_id, consumer_id, window_start, window_end, held_seconds, \
                            memory_byte_seconds, memory_peak_bytes, compute_active_seconds)";

/// Stores the windows and returns those that were new. The fast path `COPY`s straight into the
/// table; only when that meets a stored window does it stage the rows and insert the new ones.
async fn insert_windows<'b>(
    tx: &mut PgConnection,
    windows: &[&'b ValidWindow],
    slice_ids: &[i32],
    consumer_ids: &[i64],
) -> Result<Vec<&'b ValidWindow>, sqlx::Error> {
    if windows.is_empty() {
        return Ok(Vec::new());
    }
    let rows = copy_rows(windows, slice_ids, consumer_ids);
    sqlx::query("savepoint copy_windows")
        .execute(&mut *tx)
        .await?;
    let fast = copy_in(
        tx,
        &format!("copy occupancy {COPY_COLUMNS} from stdin"),
        &rows,
    )
    .await;
    match fast {
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
    let index: HashMap<(i32, i64, DateTime<Utc>), &ValidWindow> = windows
        .iter()
        .map(|w| ((slice_ids[w.slice], consumer_ids[w.consumer], w.start), *w))
        .collect();
    Ok(new
        .iter()
        .filter_map(|key| index.get(key).copied())
        .collect())
}

async fn copy_in(tx: &mut PgConnection, statement: &str, rows: &[u8]) -> Result<u64, sqlx::Error> {
    let mut copy = tx.copy_in_raw(statement).await?;
    if let Err(e) = copy.send(rows).await {
        copy.abort("slicemeter: sending rows failed").await.ok();
        return Err(e);
    }
    copy.finish().await
}

/// Adds the new windows to the hourly rollup, split at hour boundaries.
async fn update_usage_rollup(
    tx: &mut PgConnection,
    new: &[&ValidWindow],
    slice_ids: &[i32],
    consumer_ids: &[i64],
) -> Result<(), sqlx::Error> {
    if new.is_empty() {
        return Ok(());
    }
    let mut rollup = Rollup::new();
    for w in new {
        // Validation bounds every figure, so these sums fit; were one not to, the batch fails whole.
        rollup
            .add((slice_ids[w.slice], consumer_ids[w.consumer]), &w.pieces)
            .ok_or_else(|| sqlx::Error::Protocol("an hourly rollup sum overflowed".into()))?;
    }
    let n = rollup.rows.len();
    let mut hour = Vec::with_capacity(n);
    let mut slice = Vec::with_capacity(n);
    let mut consumer = Vec::with_capacity(n);
    let mut held = Vec::with_capacity(n);
    let mut memory = Vec::with_capacity(n);
    let mut peak = Vec::with_capacity(n);
    let mut active = Vec::with_capacity(n);
    let mut known = Vec::with_capacity(n);
    let mut count = Vec::with_capacity(n);
    for ((h, (s, c)), f) in rollup.rows {
        hour.push(h);
        slice.push(s);
        consumer.push(c);
        held.push(f.held_seconds);
        memory.push(f.memory_byte_seconds);
        peak.push(f.memory_peak_bytes);
        active.push(f.compute_active_seconds);
        known.push(f.compute_known_seconds);
        count.push(f.window_count);
    }
    sqlx::query!(
        "insert into usage_hourly (hour, slice_id, consumer_id, held_seconds, memory_byte_seconds,
                                   memory_peak_bytes, compute_active_seconds, compute_known_seconds,
                                   window_count)
         select * from unnest($1::timestamptz[], $2::int4[], $3::int8[], $4::numeric[], $5::numeric[],
                              $6::int8[], $7::numeric[], $8::numeric[], $9::int4[])
         on conflict (hour, slice_id, consumer_id) do update set
             held_seconds = usage_hourly.held_seconds + excluded.held_seconds,
             memory_byte_seconds = usage_hourly.memory_byte_seconds + excluded.memory_byte_seconds,
             memory_peak_bytes = greatest(usage_hourly.memory_peak_bytes, excluded.memory_peak_bytes),
             compute_active_seconds = usage_hourly.compute_active_seconds + excluded.compute_active_seconds,
             compute_known_seconds = usage_hourly.compute_known_seconds + excluded.compute_known_seconds,
             window_count = usage_hourly.window_count + excluded.window_count",
        &hour,
        &slice,
        &consumer,
        &held,
        &memory,
        &peak,
        &active,
        &known,
        &count
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
