//! A batch's GPUs, slices and period against their registrations (pure: the store reads the rows,
//! these rules decide). A GPU belongs to the node that first reported it (moving it is an admin's
//! act: `PUT /v1/gpus/{uuid}`); its model and geometry never change, its MIG mode may. A slice's GPU
//! and reservation are part of its identity. A GPU's periods never overlap: a period re-sent exactly
//! is recognised, one that overlaps another would count hours twice.

use chrono::{DateTime, Utc};

use super::IngestError;
use super::validate::ValidBatch;
use crate::domain::fields::FieldError;
use crate::domain::slice::Reservation;

/// A GPU's registration as stored.
#[derive(Debug, Clone)]
pub struct RegisteredGpu {
    pub gpu_id: i32,
    pub gpu_uuid: String,
    pub node: String,
    pub model: String,
    pub memory_bytes: i64,
    pub compute_slices: i16,
    pub memory_slices: i16,
    pub mig_enabled: bool,
}

/// The batch's GPUs, registered.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuIds {
    /// Each batch GPU's id, in batch order.
    pub ids: Vec<i32>,
    /// GPUs whose MIG mode changed, with their new mode.
    pub mig_changed: Vec<(i32, bool)>,
}

/// Checks the batch's GPUs against their registrations (`stored`, any order): 403 for another
/// node's GPU, 409 for a changed model or geometry.
pub fn check_gpus(b: &ValidBatch, stored: &[RegisteredGpu]) -> Result<GpuIds, IngestError> {
    let mut ids = Vec::with_capacity(b.gpus.len());
    let mut mig_changed = Vec::new();
    let mut conflicts = Vec::new();
    let mut foreign = Vec::new();
    for (i, g) in b.gpus.iter().enumerate() {
        let Some(r) = stored.iter().find(|r| r.gpu_uuid == g.uuid) else {
            // Inserted or found by the store: not reachable, but never a panic.
            return Err(IngestError::Db(sqlx::Error::RowNotFound));
        };
        ids.push(r.gpu_id);
        if r.node != b.node {
            foreign.push(FieldError::new(
                format!("gpus[{i}].uuid"),
                format!(
                    "{} belongs to node {:?}, not {:?}; moving a GPU to another node is an admin's act (PUT /v1/gpus/{{uuid}})",
                    g.uuid, r.node, b.node
                ),
            ));
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
            mig_changed.push((r.gpu_id, g.mig_enabled));
        }
    }
    if !foreign.is_empty() {
        return Err(IngestError::Forbidden(foreign));
    }
    if conflicts.is_empty() {
        Ok(GpuIds { ids, mig_changed })
    } else {
        Err(IngestError::Conflict(conflicts))
    }
}

/// A slice's registration as stored; `reservation` is `None` when its columns do not make one.
#[derive(Debug, Clone)]
pub struct RegisteredSlice {
    pub slice_id: i32,
    pub slice_uuid: String,
    pub gpu_id: i32,
    pub reservation: Option<Reservation>,
    /// Its MIG GPU instance id as first registered: none where the collector that first reported
    /// it sent none (it stays none: a slice's registration never changes).
    pub gpu_instance_id: Option<i16>,
}

/// A reservation as its identity: the profile id is NVML's number for the profile name, and a
/// fraction's trailing zeros say nothing.
fn identity(r: &Reservation) -> Reservation {
    match r {
        Reservation::Mig {
            profile,
            compute_slices,
            memory_slices,
            memory_bytes,
            ..
        } => Reservation::Mig {
            profile: profile.clone(),
            profile_id: None,
            compute_slices: *compute_slices,
            memory_slices: *memory_slices,
            memory_bytes: *memory_bytes,
        },
        Reservation::Vgpu { fraction } => Reservation::Vgpu {
            fraction: fraction.normalize(),
        },
        other => other.clone(),
    }
}

/// Each of the batch's slices' GPU id, by the batch's slice index (validation checked each index).
pub fn slice_gpus(b: &ValidBatch, gpu_ids: &[i32]) -> Vec<i32> {
    b.slices.iter().map(|s| gpu_ids[s.gpu]).collect()
}

/// Each batch slice's id, in batch order, or 409 naming every slice whose GPU or reservation differ
/// from its registration.
pub fn check_slices(
    b: &ValidBatch,
    gpu_ids: &[i32],
    stored: &[RegisteredSlice],
) -> Result<Vec<i32>, IngestError> {
    let mut ids = Vec::with_capacity(b.slices.len());
    let mut conflicts = Vec::new();
    for (i, s) in b.slices.iter().enumerate() {
        let Some(r) = stored.iter().find(|r| r.slice_uuid == s.uuid) else {
            return Err(IngestError::Db(sqlx::Error::RowNotFound));
        };
        let same = r.gpu_id == gpu_ids[s.gpu]
            && r.reservation.as_ref().map(identity) == Some(identity(&s.reservation));
        if let (Some(stored), Some(sent)) = (r.gpu_instance_id, s.gpu_instance_id)
            && stored != sent
        {
            conflicts.push(FieldError::new(
                format!("slices[{i}].gpu_instance_id"),
                format!(
                    "{} is registered as GPU instance {stored}, not {sent}; a MIG instance keeps its GPU instance id, so report a new instance under a new uuid",
                    s.uuid,
                ),
            ));
        }
        if !same {
            let (kind, profile) = match &r.reservation {
                Some(stored @ Reservation::Mig { profile, .. }) => {
                    (stored.kind().as_str(), profile.as_str())
                }
                Some(other) => (other.kind().as_str(), ""),
                None => ("an unreadable reservation", ""),
            };
            conflicts.push(FieldError::new(
                format!("slices[{i}]"),
                format!(
                    "{} is registered with another GPU or reservation ({kind} {profile}); a slice's reservation never changes, so report a changed slice under a new uuid",
                    s.uuid,
                ),
            ));
        }
        ids.push(r.slice_id);
    }
    if conflicts.is_empty() {
        Ok(ids)
    } else {
        Err(IngestError::Conflict(conflicts))
    }
}

/// The latest stored period of a GPU that starts before the batch's period ends.
#[derive(Debug, Clone, Copy)]
pub struct StoredPeriod {
    pub gpu_id: i32,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// Which GPUs' period the batch re-sends (`overlapping` are the stored periods that overlap it), or
/// 409 for a GPU whose stored period overlaps the batch's without being the same.
pub fn resent_gpus(
    b: &ValidBatch,
    gpu_ids: &[i32],
    overlapping: &[StoredPeriod],
) -> Result<Vec<i32>, IngestError> {
    let mut resent = Vec::new();
    let mut conflicts = Vec::new();
    for p in overlapping {
        let Some(i) = gpu_ids.iter().position(|&g| g == p.gpu_id) else {
            continue;
        };
        if (p.start, p.end) == (b.period_start, b.period_end) {
            resent.push(p.gpu_id);
        } else {
            conflicts.push(FieldError::new(
                format!("gpus[{i}]"),
                format!(
                    "{} was already reported for [{}, {}), which overlaps this batch's period [{}, {}); a GPU's periods must not overlap",
                    b.gpus[i].uuid, p.start, p.end, b.period_start, b.period_end
                ),
            ));
        }
    }
    if conflicts.is_empty() {
        Ok(resent)
    } else {
        Err(IngestError::Conflict(conflicts))
    }
}
