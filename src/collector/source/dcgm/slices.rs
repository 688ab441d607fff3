//! One node's scrape as slicemeter's inventory and readings: GPUs with their geometry and memory
//! from NVIDIA's tables, MIG instances as `mig` slices named from their GPU, instance id and
//! profile, other GPUs whole or cut into the replicas the device plugin makes, and each slice's
//! consumer and figures.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::page::Metric;
use super::read::{GpuSeen, NodeScrape, describe_consumer};
use super::refusal::{Refusal, Refused};
use crate::collector::source::nvml::Sharing;
use crate::collector::source::{Inventory, Reading};
use crate::domain::batch::{ConsumerReport, GpuReport, SliceReport, bounds};
use crate::domain::profiles;
use crate::domain::slice::SliceKind;

/// Where an inventory slice's figures come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceAt {
    /// A whole GPU, or a MIG instance (`Some(GPU_I_ID)`).
    Device { gpu: String, instance: Option<u32> },
    /// Replica `replica` of `replicas` of a time-sliced or MPS-shared GPU.
    Replica {
        gpu: String,
        replica: u32,
        replicas: u32,
    },
}

/// The MIG slice's name: dcgm-exporter gives no MIG uuid, so the parent's, the GPU instance id and
/// the profile (an instance made anew with another profile is another slice).
pub fn mig_slice_uuid(gpu: &str, instance: u32, profile: &str) -> String {
    format!("{gpu}::gi{instance}/{profile}")
}

/// The memory of a GPU of `model`: NVML's figure for the models of NVIDIA's MIG tables (so that a
/// GPU reads the same through `--source nvml` and `dcgm`), else the frame buffer's used, free and
/// reserved together as the GPU's own series say (a whole GPU only).
fn gpu_memory_bytes(model: &str, gpu: &GpuSeen) -> Option<i64> {
    if let Some(table) = profiles::table_model(model) {
        return Some(profiles::memory_bytes(table) as i64);
    }
    let d = gpu.devices.get(&None)?;
    let figure = |m: Metric| d.figure(m);
    let mib = figure(Metric::FbUsed)?
        + figure(Metric::FbFree)?
        + figure(Metric::FbReserved).unwrap_or(0.0);
    let bytes = (mib as i64).checked_mul(1 << 20)?;
    (bytes > 0 && bytes <= bounds::MAX_GPU_MEMORY_BYTES).then_some(bytes)
}

impl NodeScrape {
    /// The node's inventory, and where each slice's figures come from. A GPU or MIG instance that
    /// cannot be placed in NVIDIA's tables is refused into `refused` and left out.
    pub fn inventory(
        &self,
        sharing: Sharing,
        refused: &mut Vec<Refusal>,
    ) -> (Inventory, Vec<SliceAt>) {
        let mut inventory = Inventory {
            gpus: Vec::new(),
            slices: Vec::new(),
        };
        let mut at = Vec::new();
        for (uuid, gpu) in &self.gpus {
            let table = profiles::table_model(&gpu.model);
            let geometry = table
                .and_then(|t| profiles::of_model(t).next())
                .map_or((7, 8), |p| (p.total_compute_slices, p.total_memory_slices));
            let Some(memory_bytes) = gpu_memory_bytes(&gpu.model, gpu) else {
                refused.push(Refusal {
                    reason: Refused::UnknownModel,
                    series: format!("{uuid} ({})", gpu.model),
                    detail: "a model not in NVIDIA's MIG tables, without DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE of the GPU to tell its memory".into(),
                });
                continue;
            };
            let mig = gpu.devices.keys().any(Option::is_some);
            let mut slices = Vec::new();
            for (instance, device) in &gpu.devices {
                let Some(id) = instance else { continue };
                let name = device.profile.as_deref().unwrap_or_default();
                let Some(p) = table.and_then(|t| profiles::by_name(t, name)) else {
                    refused.push(Refusal {
                        reason: Refused::UnknownProfile,
                        series: format!("{uuid} GPU_I_ID={id} GPU_I_PROFILE={name}"),
                        detail: format!(
                            "profile {name:?} is not in NVIDIA's MIG tables for {:?}",
                            gpu.model
                        ),
                    });
                    continue;
                };
                slices.push((
                    SliceReport {
                        uuid: mig_slice_uuid(uuid, *id, name),
                        gpu_uuid: uuid.clone(),
                        kind: SliceKind::Mig.to_string(),
                        profile: Some(p.profile.clone()),
                        profile_id: Some(i64::from(p.profile_id)),
                        gpu_instance_id: Some(i64::from(*id)),
                        compute_slices: Some(i64::from(p.compute_slices)),
                        memory_slices: Some(i64::from(p.memory_slices)),
                        memory_bytes: Some(p.memory_bytes() as i64),
                        ..SliceReport::default()
                    },
                    SliceAt::Device {
                        gpu: uuid.clone(),
                        instance: Some(*id),
                    },
                ));
            }
            if !mig {
                match sharing {
                    Sharing::None => slices.push((
                        SliceReport {
                            uuid: uuid.clone(),
                            gpu_uuid: uuid.clone(),
                            kind: SliceKind::Whole.to_string(),
                            ..SliceReport::default()
                        },
                        SliceAt::Device {
                            gpu: uuid.clone(),
                            instance: None,
                        },
                    )),
                    Sharing::Timeslice(n) | Sharing::Mps(n) => {
                        let pinned = (memory_bytes / i64::from(n)) >> 20 << 20;
                        for r in 0..u32::from(n) {
                            let mut s = SliceReport {
                                uuid: format!("{uuid}::{r}"),
                                gpu_uuid: uuid.clone(),
                                ..SliceReport::default()
                            };
                            if matches!(sharing, Sharing::Mps(_)) {
                                s.kind = SliceKind::Mps.to_string();
                                s.active_thread_percentage = Some(i64::from(100 / n));
                                s.pinned_memory_bytes = Some(pinned);
                            } else {
                                s.kind = SliceKind::Timeslice.to_string();
                                s.replicas = Some(i64::from(n));
                                s.replica = Some(i64::from(r));
                            }
                            slices.push((
                                s,
                                SliceAt::Replica {
                                    gpu: uuid.clone(),
                                    replica: r,
                                    replicas: u32::from(n),
                                },
                            ));
                        }
                    }
                }
            }
            inventory.gpus.push(GpuReport {
                uuid: uuid.clone(),
                model: gpu.model.clone(),
                memory_bytes,
                compute_slices: i64::from(geometry.0),
                memory_slices: i64::from(geometry.1),
                mig_enabled: mig,
            });
            for (s, a) in slices {
                inventory.slices.push(s);
                at.push(a);
            }
        }
        (inventory, at)
    }

    /// The readings of each slice of `at` (an inventory's), in that order: who holds it and what
    /// it occupies. Consumers that cannot all be placed are refused into `refused`.
    pub fn readings(&self, at: &[SliceAt], refused: &mut Vec<Refusal>) -> Vec<Reading> {
        let mut out = Vec::with_capacity(at.len());
        let mut replicas: BTreeMap<&str, Vec<Option<OnReplica>>> = BTreeMap::new();
        for (i, a) in at.iter().enumerate() {
            let mut reading = Reading {
                slice: i,
                consumer: None,
                memory_used_bytes: 0,
                compute_active_ppm: None,
            };
            match a {
                SliceAt::Device { gpu, instance } => {
                    if let Some(d) = self.gpus.get(gpu).and_then(|g| g.devices.get(instance)) {
                        reading.memory_used_bytes = mib_bytes(d.figure(Metric::FbUsed));
                        reading.compute_active_ppm = d
                            .figure(Metric::EngineActive)
                            .or_else(|| {
                                instance
                                    .is_none()
                                    .then(|| d.figure(Metric::GpuUtil).map(|u| u / 100.0))
                                    .flatten()
                            })
                            .map(ppm);
                        let mut consumers = d.held.keys();
                        if let Some(h) = consumers.next() {
                            reading.consumer = Some(Arc::new(h.consumer.clone()));
                            let others: Vec<_> = consumers
                                .filter(|o| o.consumer != h.consumer)
                                .map(|o| describe_consumer(&o.consumer))
                                .collect();
                            if !others.is_empty() {
                                refused.push(Refusal {
                                    reason: Refused::SharedDevice,
                                    series: format!("{gpu} GPU_I_ID={instance:?}"),
                                    detail: format!(
                                        "held by {} and also {}: a slice has one holder at a time (with time-slicing, start the collector with --gpu-sharing timeslice:N); billed to the first",
                                        describe_consumer(&h.consumer),
                                        others.join(", ")
                                    ),
                                });
                            }
                        }
                    }
                }
                SliceAt::Replica {
                    gpu,
                    replica,
                    replicas: n,
                } => {
                    let placed = replicas
                        .entry(gpu)
                        .or_insert_with(|| self.place_replicas(gpu, *n, refused));
                    if let Some(Some(on)) = placed.get(*replica as usize) {
                        reading.consumer = Some(on.consumer.clone());
                        reading.memory_used_bytes = on.memory_bytes;
                        reading.compute_active_ppm = on.compute_ppm;
                    }
                }
            }
            out.push(reading);
        }
        out
    }

    /// Places the consumers of time-shared GPU `gpu` on its `n` replicas: each on its `vgpu` where
    /// the exporter says it, the others on the first free ones. Figures are each pod's own where
    /// the exporter gives them (its per-process series), else the device's split evenly.
    fn place_replicas(
        &self,
        gpu: &str,
        n: u32,
        refused: &mut Vec<Refusal>,
    ) -> Vec<Option<OnReplica>> {
        let mut placed = vec![None; n as usize];
        let Some(d) = self.gpus.get(gpu).and_then(|g| g.devices.get(&None)) else {
            return placed;
        };
        // One entry per pod and container (a copy per vgpu of one pod is still one consumer).
        let mut consumers: BTreeMap<&ConsumerReport, (Option<u32>, [Option<f64>; 5])> =
            BTreeMap::new();
        for (h, f) in &d.held {
            let e = consumers.entry(&h.consumer).or_default();
            e.0 = e.0.or(h.vgpu);
            for (m, v) in f.iter().enumerate() {
                e.1[m] = e.1[m].or(*v);
            }
        }
        let k = consumers.len().max(1) as f64;
        let own = |m: Metric, f: &[Option<f64>; 5]| {
            // A pod's own figure only when the device's series without a pod stands beside it.
            d.plain[m as usize].and(f[m as usize])
        };
        let mut unplaced = Vec::new();
        let mut figures = Vec::new();
        for (c, (vgpu, f)) in &consumers {
            let memory = own(Metric::FbUsed, f)
                .or_else(|| d.figure(Metric::FbUsed).map(|v| v / k))
                .map_or(0, |v| mib_bytes(Some(v)));
            let compute = own(Metric::GpuUtil, f)
                .map(|u| u / 100.0)
                .or_else(|| {
                    d.figure(Metric::EngineActive)
                        .or_else(|| d.figure(Metric::GpuUtil).map(|u| u / 100.0))
                        .map(|v| v / k)
                })
                .map(ppm);
            let entry = OnReplica {
                consumer: Arc::new((*c).clone()),
                memory_bytes: memory,
                compute_ppm: compute,
            };
            match vgpu.filter(|&r| r < n) {
                Some(r) if placed[r as usize].is_none() => placed[r as usize] = Some(entry),
                _ => figures.push(entry),
            }
        }
        for entry in figures {
            match placed.iter_mut().find(|p| p.is_none()) {
                Some(free) => *free = Some(entry),
                None => unplaced.push(describe_consumer(&entry.consumer)),
            }
        }
        if !unplaced.is_empty() {
            refused.push(Refusal {
                reason: Refused::SharedDevice,
                series: gpu.to_owned(),
                detail: format!(
                    "more holders than its {n} replicas: {} not billed (is --gpu-sharing right?)",
                    unplaced.join(", ")
                ),
            });
        }
        placed
    }
}

/// A time-shared GPU's replica's consumer and its figures.
#[derive(Debug, Clone)]
struct OnReplica {
    consumer: Arc<ConsumerReport>,
    memory_bytes: u64,
    compute_ppm: Option<u32>,
}

fn mib_bytes(mib: Option<f64>) -> u64 {
    mib.map_or(0, |v| (v * (1u64 << 20) as f64) as u64)
}

fn ppm(ratio: f64) -> u32 {
    (ratio.clamp(0.0, 1.0) * 1e6).round() as u32
}
