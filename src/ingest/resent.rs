//! A batch that re-sends a period, against the windows already stored for it (pure: the store reads
//! them, these rules decide). GPUs' periods never overlap and a window lies inside its batch's
//! period, so only a re-sent period can meet stored windows. A new window that repeats a stored one
//! exactly is a duplicate (left out); one that repeats a stored window's slice, consumer and start
//! with other figures, or that breaks the one-consumer rule together with stored windows, makes the
//! batch a conflict naming the stored window (409); one that, with them, uses or reserves more of a
//! card than it has is invalid like an over-committed batch alone (422).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use super::IngestError;
use super::rules::{self, ConsumerClash, SliceUse};
use super::validate::ValidBatch;
use crate::domain::fields::FieldError;
use crate::domain::slice::{GpuGeometry, Reservation};
use crate::domain::window::Window;

/// A window stored for a re-sent period, with what the rules need of its slice.
#[derive(Debug, Clone)]
pub struct StoredWindow {
    pub slice_id: i32,
    pub consumer_id: i64,
    /// The window as stored (its `slice` and `consumer` indexes are set by [`check`]).
    pub window: Window,
    pub slice_uuid: String,
    pub gpu_id: i32,
    pub slice: SliceUse,
    /// `None` when the stored columns do not make a reservation.
    pub reservation: Option<Reservation>,
    /// Who held it, for messages: `namespace/pod`, a user, a job.
    pub consumer_name: String,
}

/// Where a window comes from: this batch, or the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Batch(usize),
    Stored(usize),
}

/// The batch's ids: GPUs, slices and consumers, each in batch order.
#[derive(Debug, Clone, Copy)]
pub struct BatchIds<'a> {
    pub gpus: &'a [i32],
    pub slices: &'a [i32],
    pub consumers: &'a [i64],
}

/// The windows of `b` to store, given the windows `stored` for the period of the GPUs `resent`.
// long: the rules for a re-sent period against the stored windows, in the order of the contract's
// table, sharing the indexes built at the start
pub fn check<'b>(
    b: &'b ValidBatch,
    ids: BatchIds<'_>,
    resent: &[i32],
    stored: &[StoredWindow],
) -> Result<Vec<&'b Window>, IngestError> {
    let on_resent = |w: &Window| resent.contains(&ids.gpus[b.slices[w.slice].gpu]);
    let mut conflicts = Vec::new();
    let mut invalid = Vec::new();
    let describe = |k: usize| {
        let r = &stored[k];
        format!(
            "the window stored for {} [{}, {}) held by {}",
            r.slice_uuid, r.window.start, r.window.end, r.consumer_name
        )
    };

    // One slice table and one consumer table for both: the batch's by index, then the stored ones
    // the batch lacks.
    let mut uses: Vec<SliceUse> = b.slices.iter().map(|s| s.usage(&b.gpus[s.gpu])).collect();
    let mut slice_at: HashMap<i32, usize> = ids
        .slices
        .iter()
        .enumerate()
        .map(|(k, &id)| (id, k))
        .collect();
    let mut consumer_at: HashMap<i64, usize> = ids
        .consumers
        .iter()
        .enumerate()
        .map(|(k, &id)| (id, k))
        .collect();
    let mut stored_only: BTreeMap<i32, (i32, &str, Option<&Reservation>)> = BTreeMap::new();
    let mut as_windows = Vec::with_capacity(stored.len());
    for r in stored {
        let slice = *slice_at.entry(r.slice_id).or_insert_with(|| {
            uses.push(r.slice);
            stored_only.insert(
                r.slice_id,
                (r.gpu_id, r.slice_uuid.as_str(), r.reservation.as_ref()),
            );
            uses.len() - 1
        });
        let next = consumer_at.len();
        let consumer = *consumer_at.entry(r.consumer_id).or_insert(next);
        let w = Window {
            slice,
            consumer,
            ..r.window.clone()
        };
        // A stored window was split once already; were it not to split now, it weighs nothing.
        as_windows.push(w.clone().hourly().unwrap_or(w));
    }

    // Exact repeats are duplicates; the same key with other figures is a contradiction.
    let by_key: HashMap<(usize, usize, DateTime<Utc>), usize> = as_windows
        .iter()
        .enumerate()
        .map(|(k, w)| ((w.slice, w.consumer, w.start), k))
        .collect();
    let mut fresh = Vec::new();
    for (i, w) in b.windows.iter().enumerate() {
        match by_key.get(&(w.slice, w.consumer, w.start)) {
            None => fresh.push((i, w)),
            Some(&k) if as_windows[k].same_figures(w) => {}
            Some(&k) => {
                let r = &stored[k];
                conflicts.push(FieldError::new(
                    format!("windows[{i}]"),
                    format!(
                        "repeats the slice, consumer and start of {} with other figures (held {} s, memory {} byte-seconds); a stored window never changes",
                        describe(k),
                        r.window.held_seconds,
                        r.window.memory_byte_seconds
                    ),
                ));
            }
        }
    }

    let mut placed: Vec<(i32, (Origin, &Window))> = Vec::new();
    for (k, r) in stored.iter().enumerate() {
        placed.push((r.gpu_id, (Origin::Stored(k), &as_windows[k])));
    }
    for &(i, w) in fresh.iter().filter(|(_, w)| on_resent(w)) {
        placed.push((ids.gpus[b.slices[w.slice].gpu], (Origin::Batch(i), w)));
    }
    let all: Vec<(Origin, &Window)> = placed.iter().map(|(_, p)| *p).collect();
    for clash in rules::consumer_clashes(&all) {
        let involved: Vec<Origin> = match clash {
            ConsumerClash::Overlap { earlier, later } => vec![earlier, later],
            ConsumerClash::OverHeld { windows, .. } => windows,
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
        let on_gpu: Vec<(Origin, &Window)> = placed
            .iter()
            .filter(|(g, _)| *g == gpu)
            .map(|(_, p)| *p)
            .collect();
        for o in rules::hourly_overruns(b.period_start, b.period_end, &uses, &on_gpu) {
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
        let Some(g) = ids.gpus.iter().position(|&id| id == gpu) else {
            continue;
        };
        let theirs: Vec<&(i32, &str, Option<&Reservation>)> = stored_only
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
            .chain(theirs.iter().map(|(_, _, r)| *r))
            .collect();
        let over = match reservations {
            Some(rs) => rules::reserved(&geometry, rs).is_none_or(|r| r.exceeds_the_card()),
            None => false,
        };
        if over {
            let names: BTreeSet<&str> = theirs.iter().map(|(_, u, _)| *u).collect();
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
        Err(IngestError::Conflict(conflicts))
    } else if !invalid.is_empty() {
        Err(IngestError::Invalid(invalid))
    } else {
        Ok(fresh.into_iter().map(|(_, w)| w).collect())
    }
}
