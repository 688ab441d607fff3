//! What a GPU's layout leaves over (DESIGN.md, "Stranded capacity and the per-card ledger"): the
//! capacity no slice reserves splits into **placeable** (a valid MIG instance, MPS share or vGPU
//! fraction could still be given out of it) and **stranded** (none fits: compute without memory, or
//! memory without compute). Stranded capacity is the price of a layout, and only a new layout frees
//! it; slices that exist but nobody holds are placeable as they are.
//!
//! Per kind:
//! - MIG: the free compute and memory slices, packed with as many more of NVIDIA's profiles as the
//!   placement table lets sit beside the instances there (most compute first, then most memory);
//!   what no profile can take is stranded. NVML and dcgm-exporter report an instance's slice counts,
//!   not its place, so the instances are taken where they leave the most room: the stranded figure
//!   is the least a layout of those instances strands.
//! - MPS: threads and pinned memory left. A client needs both: with threads left and no memory, the
//!   threads are stranded; with memory left and no threads (100 % given out), the memory is.
//! - vGPU: a fraction left can host a smaller vGPU profile: placeable.
//! - Time-slicing: nothing is stranded. A time-sliced card reserves nothing; the device plugin hands
//!   it to one more pod by configuration, so what its pods leave is placeable.
//! - A whole GPU, or one with no slices: placeable.

use std::collections::{BTreeMap, HashMap};
use std::sync::{LazyLock, Mutex};

use super::profiles::{self, Instance};
use super::slice::{GpuGeometry, Reservation};

/// The stranded part of a GPU under a layout, in the units each kind is counted in (so that it is
/// priced exactly, with the share weights of the rate card in force).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stranded {
    /// MIG compute slices no instance can take (of the GPU's compute slices).
    pub compute_slices: u8,
    /// MIG memory slices no instance can take (of the GPU's memory slices).
    pub memory_slices: u8,
    /// MPS thread percentage no client can take (of 100).
    pub compute_percent: u8,
    /// MPS pinned memory no client can take (of the GPU's memory).
    pub memory_bytes: u64,
}

impl Stranded {
    pub fn is_none(&self) -> bool {
        *self == Stranded::default()
    }
}

/// The shapes of NVIDIA's profiles for a geometry, by slice counts.
fn shapes(total_compute: u8, total_memory: u8) -> Vec<Instance> {
    let mut out: Vec<Instance> = profiles::all()
        .iter()
        .filter(|p| {
            p.total_compute_slices == total_compute && p.total_memory_slices == total_memory
        })
        .map(|p| Instance {
            compute_slices: p.compute_slices,
            memory_slices: p.memory_slices,
        })
        .collect();
    out.sort_by_key(|i| (i.compute_slices, i.memory_slices));
    out.dedup();
    out
}

type Key = (u8, u8, Vec<(u8, u8)>);

/// The most compute, then memory, that more instances could take beside `instances`.
fn most_placeable(
    instances: &mut Vec<Instance>,
    shapes: &[Instance],
    geometry: (u8, u8),
    seen: &mut BTreeMap<Vec<(u8, u8)>, (u8, u8)>,
) -> (u8, u8) {
    let mut key: Vec<(u8, u8)> = instances
        .iter()
        .map(|i| (i.compute_slices, i.memory_slices))
        .collect();
    key.sort();
    if let Some(&v) = seen.get(&key) {
        return v;
    }
    let mut best = (0, 0);
    for s in shapes {
        instances.push(*s);
        if profiles::check_layout(instances, geometry.0, geometry.1).is_ok() {
            let (c, m) = most_placeable(instances, shapes, geometry, seen);
            best = best.max((c + s.compute_slices, m + s.memory_slices));
        }
        instances.pop();
    }
    seen.insert(key, best);
    best
}

static MIG: LazyLock<Mutex<HashMap<Key, Stranded>>> = LazyLock::new(Default::default);

/// What MIG `instances` strand on a GPU of `total_compute` compute and `total_memory` memory slices
/// (remembered: a fleet has few layouts). [`stranded`] for a layout of MIG instances; the
/// consolidation plan asks it of the layouts it weighs.
pub fn stranded_mig(instances: &[Instance], total_compute: u8, total_memory: u8) -> Stranded {
    let mut shape: Vec<(u8, u8)> = instances
        .iter()
        .map(|i| (i.compute_slices, i.memory_slices))
        .collect();
    shape.sort();
    let key = (total_compute, total_memory, shape);
    if let Some(s) = MIG.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return *s;
    }
    let used_c: u32 = instances.iter().map(|i| u32::from(i.compute_slices)).sum();
    let used_m: u32 = instances.iter().map(|i| u32::from(i.memory_slices)).sum();
    let free_c = u32::from(total_compute).saturating_sub(used_c) as u8;
    let free_m = u32::from(total_memory).saturating_sub(used_m) as u8;
    let (c, m) = most_placeable(
        &mut instances.to_vec(),
        &shapes(total_compute, total_memory),
        (total_compute, total_memory),
        &mut BTreeMap::new(),
    );
    let stranded = Stranded {
        compute_slices: free_c.saturating_sub(c),
        memory_slices: free_m.saturating_sub(m),
        ..Stranded::default()
    };
    MIG.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, stranded);
    stranded
}

/// What the slices `layout` (every slice of one GPU, held or not) strand on a GPU of `gpu`'s
/// geometry.
pub fn stranded(gpu: &GpuGeometry, layout: &[&Reservation]) -> Stranded {
    let mut instances = Vec::new();
    let (mut threads, mut pinned, mut mps) = (0u32, 0u64, false);
    for r in layout {
        match r {
            Reservation::Mig {
                compute_slices,
                memory_slices,
                ..
            } => instances.push(Instance {
                compute_slices: *compute_slices,
                memory_slices: *memory_slices,
            }),
            Reservation::Mps {
                active_thread_percentage,
                pinned_memory_bytes,
            } => {
                mps = true;
                threads += u32::from(*active_thread_percentage);
                pinned = pinned.saturating_add(*pinned_memory_bytes);
            }
            Reservation::Vgpu { .. } | Reservation::Timeslice { .. } | Reservation::Whole => {}
        }
    }
    let mut out = if instances.is_empty() {
        Stranded::default()
    } else {
        stranded_mig(&instances, gpu.compute_slices, gpu.memory_slices)
    };
    if mps {
        let free_threads = 100u32.saturating_sub(threads) as u8;
        let free_bytes = gpu.memory_bytes.saturating_sub(pinned);
        match (free_threads, free_bytes) {
            (0, bytes) => out.memory_bytes = bytes,
            (threads, 0) => out.compute_percent = threads,
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: GpuGeometry = GpuGeometry {
        memory_bytes: 85_520_809_984,
        compute_slices: 7,
        memory_slices: 8,
    };

    fn instance(profile: &str) -> Reservation {
        let p = profiles::by_name("H100-SXM5-80GB", profile).unwrap();
        Reservation::Mig {
            profile: profile.into(),
            profile_id: Some(p.profile_id),
            compute_slices: p.compute_slices,
            memory_slices: p.memory_slices,
            memory_bytes: p.memory_bytes(),
        }
    }

    fn of(layout: &[Reservation]) -> Stranded {
        stranded(&H100, &layout.iter().collect::<Vec<_>>())
    }

    #[test]
    fn the_layouts_of_the_issue_strand_what_no_profile_can_take() {
        // 3g.40gb at 0 and at 4: one compute slice and no memory slice left.
        assert_eq!(
            of(&[instance("3g.40gb"), instance("3g.40gb")]),
            Stranded {
                compute_slices: 1,
                ..Stranded::default()
            }
        );
        // Four 1g.20gb take every memory slice: three compute slices left with none.
        assert_eq!(
            of(&[
                instance("1g.20gb"),
                instance("1g.20gb"),
                instance("1g.20gb"),
                instance("1g.20gb")
            ]),
            Stranded {
                compute_slices: 3,
                ..Stranded::default()
            }
        );
        // Seven 1g.10gb take every compute slice: the eighth memory slice has none.
        assert_eq!(
            of(&vec![instance("1g.10gb"); 7]),
            Stranded {
                memory_slices: 1,
                ..Stranded::default()
            }
        );
        // An empty MIG card, and `-cgi 9,19,19` (a 2g.20gb still fits beside it): nothing stranded.
        assert!(of(&[]).is_none());
        assert!(
            of(&[
                instance("3g.40gb"),
                instance("1g.10gb"),
                instance("1g.10gb")
            ])
            .is_none()
        );
        // A 4g.40gb and a 2g.20gb: the seventh compute slice fits only a 1g, whose memory slice is
        // there (the 4g takes four, the 2g two): nothing stranded either.
        assert!(of(&[instance("4g.40gb"), instance("2g.20gb")]).is_none());
    }

    #[test]
    fn mps_strands_the_memory_its_threads_leave_no_client_for_and_the_other_way_round() {
        let mps = |threads, pinned| Reservation::Mps {
            active_thread_percentage: threads,
            pinned_memory_bytes: pinned,
        };
        let gib = 1u64 << 30;
        // Every thread given out, 20 GiB of memory left: the memory is stranded.
        assert_eq!(
            of(&[mps(50, 30 * gib), mps(50, 30 * gib)]),
            Stranded {
                memory_bytes: H100.memory_bytes - 60 * gib,
                ..Stranded::default()
            }
        );
        // Memory all pinned, a fifth of the threads left: the threads are.
        assert_eq!(
            of(&[
                mps(40, H100.memory_bytes / 2),
                mps(40, H100.memory_bytes / 2)
            ]),
            Stranded {
                compute_percent: 20,
                ..Stranded::default()
            }
        );
        // Both left: a third client fits.
        assert!(of(&[mps(30, 10 * gib)]).is_none());
        // A time-sliced card strands nothing, a whole one neither.
        let replica = |r| Reservation::Timeslice {
            replicas: 4,
            replica: r,
        };
        assert!(of(&[replica(0), replica(1), replica(2), replica(3)]).is_none());
        assert!(of(&[Reservation::Whole]).is_none());
    }
}
