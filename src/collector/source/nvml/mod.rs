//! `--source nvml`: real GPUs through NVML, behind the same [`Source`] trait as the simulator.
//!
//! Inventory: every GPU (uuid, name, memory, MIG mode now and pending); on a GPU in MIG mode, each MIG
//! device with its GPU-instance id, slice counts, memory and profile name (from the device name, else
//! NVIDIA's profile tables, else its slice counts: an unknown profile is named, never dropped); other
//! GPUs are whole, or cut into time-slicing or MPS replicas as the node's device plugin is configured.
//! Occupancy: memory per MIG device or GPU; SM activity from GPM on Hopper and newer (per GPU instance
//! on MIG) or `utilization_rates` on whole GPUs; per-process memory and SM use on replicas. A figure
//! the GPU cannot give is sent as unknown, said once in the log, and never invented.

pub mod api;
pub mod real;
pub mod replay;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{Inventory, Reading, Source, SourceError};
use crate::collector::attribution::{Attribution, same_consumer};
use crate::domain::batch::{ConsumerReport, GpuReport, SliceReport};
use crate::domain::profiles;
use crate::domain::slice::SliceKind;
use api::{GpuDesc, GpuProcess, MigDesc, NvmlApi, NvmlFailure};

/// How the node's device plugin shares GPUs that are not in MIG mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Each GPU is handed out whole.
    None,
    /// Time-slicing with this many replicas per GPU (`GPU-…::0` to `::N-1`).
    Timeslice(u16),
    /// MPS with this many clients per GPU, each with an equal share of threads and memory.
    Mps(u16),
}

impl std::str::FromStr for Sharing {
    type Err = String;
    fn from_str(s: &str) -> Result<Sharing, String> {
        let bad =
            || format!("{s:?} is not a sharing: use none, timeslice:N or mps:N (N from 2 to 48)");
        if s == "none" {
            return Ok(Sharing::None);
        }
        let (kind, n) = s.split_once(':').ok_or_else(bad)?;
        let n: u16 = n.parse().map_err(|_| bad())?;
        if !(2..=48).contains(&n) {
            return Err(bad());
        }
        match kind.parse() {
            Ok(SliceKind::Timeslice) => Ok(Sharing::Timeslice(n)),
            Ok(SliceKind::Mps) => Ok(Sharing::Mps(n)),
            _ => Err(bad()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Place {
    Mig { mig: u32, gpu_instance: u32 },
    Whole,
    Replica { n: u16, mps_fraction: Option<f64> },
}

#[derive(Debug, Clone)]
struct SliceAt {
    gpu: u32,
    gpu_uuid: String,
    uuid: String,
    place: Place,
}

pub struct NvmlSource<A: NvmlApi> {
    api: A,
    attribution: Attribution,
    node: String,
    sharing: Sharing,
    inventory: Option<Inventory>,
    slices: Vec<SliceAt>,
    /// Things already said once in the log.
    said: HashSet<String>,
    lost: HashSet<u32>,
}

/// The profile name in a MIG device's NVML name: `NVIDIA H100 80GB HBM3 MIG 3g.40gb` -> `3g.40gb`.
fn profile_in_name(name: &str) -> Option<&str> {
    name.rsplit_once(" MIG ")
        .map(|(_, p)| p.trim())
        .filter(|p| p.contains('g') && !p.is_empty())
}

impl<A: NvmlApi> NvmlSource<A> {
    pub fn new(api: A, attribution: Attribution, node: &str, sharing: Sharing) -> Self {
        NvmlSource {
            api,
            attribution,
            node: node.to_owned(),
            sharing,
            inventory: None,
            slices: Vec::new(),
            said: HashSet::new(),
            lost: HashSet::new(),
        }
    }

    fn say_once(&mut self, key: String, say: impl FnOnce()) {
        if self.said.insert(key) {
            say();
        }
    }

    fn mig_slice(&mut self, g: &GpuDesc, m: &MigDesc, geometry: (u8, u8)) -> SliceReport {
        let table = profiles::table_model(&g.name);
        let by_name =
            profile_in_name(&m.name).and_then(|p| table.and_then(|t| profiles::by_name(t, p)));
        let by_counts = || {
            table.and_then(|t| {
                profiles::of_model(t)
                    .filter(|p| {
                        u32::from(p.compute_slices) == m.gpu_instance_slices
                            && !p.profile.ends_with("+me")
                    })
                    .min_by_key(|p| {
                        (p.memory_bytes() as i64 - m.memory_bytes as i64).unsigned_abs()
                    })
            })
        };
        let known = by_name.or_else(by_counts);
        let (profile, profile_id, memory_slices) = match known {
            Some(p) => (
                profile_in_name(&m.name).map_or_else(|| p.profile.clone(), str::to_owned),
                Some(i64::from(p.profile_id)),
                i64::from(p.memory_slices),
            ),
            None => {
                // Not in the tables: named by its slice counts, memory slices by its share of memory.
                let share = m.memory_bytes as f64 / g.memory_bytes.max(1) as f64;
                let memory_slices = ((share * f64::from(geometry.1)).round() as i64)
                    .clamp(1, i64::from(geometry.1));
                let name = profile_in_name(&m.name)
                    .map(str::to_owned)
                    .unwrap_or_else(|| {
                        format!(
                            "{}g.{}gb",
                            m.gpu_instance_slices,
                            (m.memory_bytes as f64 / 1e9).round()
                        )
                    });
                let gpu = g.uuid.clone();
                self.say_once(format!("profile:{name}"), || {
                    tracing::warn!(gpu = %gpu, profile = %name, "A MIG profile is not in NVIDIA's tables; it is named by its slice counts.");
                });
                (name, None, memory_slices)
            }
        };
        SliceReport {
            uuid: m.uuid.clone(),
            gpu_uuid: g.uuid.clone(),
            kind: SliceKind::Mig.to_string(),
            profile: Some(profile),
            profile_id,
            compute_slices: Some(i64::from(m.gpu_instance_slices)),
            memory_slices: Some(memory_slices),
            memory_bytes: Some(m.memory_bytes as i64),
            gpu_instance_id: Some(i64::from(m.gpu_instance_id)),
            ..SliceReport::default()
        }
    }

    fn build_inventory(&mut self) -> Result<Inventory, SourceError> {
        let gpus = self
            .api
            .gpus()
            .map_err(|e| SourceError::Unavailable(e.to_string()))?;
        let mut inventory = Inventory {
            gpus: Vec::new(),
            slices: Vec::new(),
        };
        let mut slices = Vec::new();
        for g in &gpus {
            let table = profiles::table_model(&g.name);
            let geometry = table
                .and_then(|t| profiles::of_model(t).next())
                .map_or((7, 8), |p| (p.total_compute_slices, p.total_memory_slices));
            let mig_on = g.mig.is_some_and(|m| m.current);
            if let Some(m) = g.mig
                && m.current != m.pending
            {
                tracing::warn!(gpu = %g.uuid, current = m.current, pending = m.pending, "A MIG mode change is pending on this GPU; it applies after a GPU reset.");
            }
            inventory.gpus.push(GpuReport {
                uuid: g.uuid.clone(),
                model: g.name.clone(),
                memory_bytes: g.memory_bytes as i64,
                compute_slices: i64::from(geometry.0),
                memory_slices: i64::from(geometry.1),
                mig_enabled: mig_on,
            });
            let at = |uuid: String, place| SliceAt {
                gpu: g.index,
                gpu_uuid: g.uuid.clone(),
                uuid,
                place,
            };
            if mig_on {
                for m in self
                    .api
                    .mig_devices(g.index)
                    .map_err(|e| SourceError::Unavailable(e.to_string()))?
                {
                    inventory.slices.push(self.mig_slice(g, &m, geometry));
                    slices.push(at(
                        m.uuid.clone(),
                        Place::Mig {
                            mig: m.index,
                            gpu_instance: m.gpu_instance_id,
                        },
                    ));
                }
                continue;
            }
            match self.sharing {
                Sharing::None => {
                    inventory.slices.push(SliceReport {
                        uuid: g.uuid.clone(),
                        gpu_uuid: g.uuid.clone(),
                        kind: SliceKind::Whole.to_string(),
                        ..SliceReport::default()
                    });
                    slices.push(at(g.uuid.clone(), Place::Whole));
                }
                Sharing::Timeslice(n) | Sharing::Mps(n) => {
                    let mps = matches!(self.sharing, Sharing::Mps(_));
                    let pinned = (g.memory_bytes / u64::from(n)) >> 20 << 20;
                    for r in 0..n {
                        let uuid = format!("{}::{r}", g.uuid);
                        inventory.slices.push(if mps {
                            SliceReport {
                                uuid: uuid.clone(),
                                gpu_uuid: g.uuid.clone(),
                                kind: SliceKind::Mps.to_string(),
                                active_thread_percentage: Some(i64::from(100 / n)),
                                pinned_memory_bytes: Some(pinned as i64),
                                ..SliceReport::default()
                            }
                        } else {
                            SliceReport {
                                uuid: uuid.clone(),
                                gpu_uuid: g.uuid.clone(),
                                kind: SliceKind::Timeslice.to_string(),
                                replicas: Some(i64::from(n)),
                                replica: Some(i64::from(r)),
                                ..SliceReport::default()
                            }
                        });
                        slices.push(at(
                            uuid,
                            Place::Replica {
                                n: r,
                                mps_fraction: mps.then(|| f64::from(100 / n) / 100.0),
                            },
                        ));
                    }
                }
            }
        }
        // The first GPM sample of each GPU and GPU instance, so that the first reading has an interval.
        let mut primed = HashSet::new();
        for s in &slices {
            let key = match s.place {
                Place::Mig { gpu_instance, .. } => (s.gpu, Some(gpu_instance)),
                Place::Whole => (s.gpu, None),
                Place::Replica { .. } => continue,
            };
            if primed.insert(key) {
                let _ = self.api.sm_activity(key.0, key.1);
            }
        }
        self.slices = slices;
        Ok(inventory)
    }

    /// The consumer of a MIG device or whole GPU: as the kubelet says; with no scheduler, whoever has
    /// the most memory on it (its processes on `gpu_instance`, or on the GPU for `None`); as a last
    /// resort, the static map.
    fn consumer(
        &self,
        uuid: &str,
        processes: &[GpuProcess],
        gpu_instance: Option<u32>,
    ) -> Option<Arc<ConsumerReport>> {
        if self.attribution.on_kubernetes() {
            return self.attribution.consumer_of_device(uuid);
        }
        processes
            .iter()
            .filter(|p| gpu_instance.is_none() || p.gpu_instance_id == gpu_instance)
            .max_by_key(|p| p.used_memory_bytes)
            .and_then(|p| self.attribution.consumer_of_process(p.pid))
            .or_else(|| self.attribution.consumer_of_device(uuid))
    }

    fn lose(&mut self, gpu: u32, uuid: &str) {
        if self.lost.insert(gpu) {
            tracing::error!(gpu = %uuid, "A GPU fell off the bus; its slices are no longer measured, the others are.");
            metrics::counter!("slicemeter_collector_gpus_lost_total").increment(1);
        }
    }
}

impl<A: NvmlApi> Source for NvmlSource<A> {
    fn node(&self) -> &str {
        &self.node
    }

    fn inventory(&mut self) -> Result<Inventory, SourceError> {
        if self.inventory.is_none() {
            let inventory = self.build_inventory()?;
            self.inventory = Some(inventory);
        }
        Ok(self.inventory.clone().expect("built above"))
    }

    fn sample(&mut self, _at: DateTime<Utc>) -> Result<Vec<Reading>, SourceError> {
        self.inventory()?;
        let mut processes: HashMap<u32, Vec<GpuProcess>> = HashMap::new();
        let mut activity: HashMap<u32, HashMap<u32, f64>> = HashMap::new();
        let mut out = Vec::with_capacity(self.slices.len());
        for (i, s) in self.slices.clone().into_iter().enumerate() {
            let free = Reading {
                slice: i,
                consumer: None,
                memory_used_bytes: 0,
                compute_active_ppm: None,
            };
            if self.lost.contains(&s.gpu) {
                out.push(free);
                continue;
            }
            let needs_processes =
                matches!(s.place, Place::Replica { .. }) || !self.attribution.on_kubernetes();
            if needs_processes && !processes.contains_key(&s.gpu) {
                match self.api.processes(s.gpu) {
                    Ok(p) => {
                        processes.insert(s.gpu, p);
                    }
                    Err(NvmlFailure::GpuLost) => {
                        self.lose(s.gpu, &s.gpu_uuid);
                        out.push(free);
                        continue;
                    }
                    Err(e) => {
                        self.say_once(format!("processes:{}", s.gpu), || {
                            tracing::warn!(gpu = %s.gpu_uuid, error = %e, "Processes on this GPU cannot be listed.");
                        });
                        processes.insert(s.gpu, Vec::new());
                    }
                }
            }
            let procs = processes.get(&s.gpu).cloned().unwrap_or_default();
            let result: Result<Reading, NvmlFailure> = (|| {
                match s.place {
                    Place::Mig { mig, gpu_instance } => {
                        let consumer = self.consumer(&s.uuid, &procs, Some(gpu_instance));
                        let memory = self.api.memory_used(s.gpu, Some(mig))?;
                        let compute = self.compute(s.gpu, Some(gpu_instance), &s.uuid)?;
                        Ok(Reading {
                            slice: i,
                            consumer,
                            memory_used_bytes: memory,
                            compute_active_ppm: compute,
                        })
                    }
                    Place::Whole => {
                        let consumer = self.consumer(&s.uuid, &procs, None);
                        let memory = self.api.memory_used(s.gpu, None)?;
                        let compute = self.compute(s.gpu, None, &s.uuid)?;
                        Ok(Reading {
                            slice: i,
                            consumer,
                            memory_used_bytes: memory,
                            compute_active_ppm: compute,
                        })
                    }
                    Place::Replica { mps_fraction, .. } => {
                        let Some(consumer) = self.attribution.consumer_of_device(&s.uuid) else {
                            return Ok(Reading {
                                slice: i,
                                consumer: None,
                                memory_used_bytes: 0,
                                compute_active_ppm: None,
                            });
                        };
                        if let std::collections::hash_map::Entry::Vacant(e) = activity.entry(s.gpu)
                        {
                            e.insert(self.api.process_activity(s.gpu)?.into_iter().collect());
                        }
                        let mine: Vec<&GpuProcess> = procs
                            .iter()
                            .filter(|p| {
                                self.attribution
                                    .consumer_of_process(p.pid)
                                    .is_some_and(|h| same_consumer(&h, &consumer))
                            })
                            .collect();
                        let memory = mine.iter().map(|p| p.used_memory_bytes).sum();
                        let busy: f64 = mine
                            .iter()
                            .map(|p| activity[&s.gpu].get(&p.pid).copied().unwrap_or(0.0))
                            .sum();
                        // A time-sliced replica's activity is relative to the whole GPU; an MPS
                        // client's to its share of the threads.
                        let busy = match mps_fraction {
                            Some(f) => busy / f,
                            None => busy,
                        }
                        .clamp(0.0, 1.0);
                        Ok(Reading {
                            slice: i,
                            consumer: Some(consumer),
                            memory_used_bytes: memory,
                            compute_active_ppm: Some((busy * 1e6) as u32),
                        })
                    }
                }
            })();
            match result {
                Ok(r) => out.push(r),
                Err(NvmlFailure::GpuLost) => {
                    self.lose(s.gpu, &s.gpu_uuid);
                    out.push(free);
                }
                Err(e) => {
                    self.say_once(format!("read:{}", s.uuid), || {
                        tracing::warn!(slice = %s.uuid, error = %e, "A slice could not be read; it is skipped until it can.");
                    });
                    out.push(free);
                }
            }
        }
        Ok(out)
    }
}

impl<A: NvmlApi> NvmlSource<A> {
    /// SM activity in parts per million; `None` where it cannot be measured (said once).
    fn compute(
        &mut self,
        gpu: u32,
        gpu_instance: Option<u32>,
        uuid: &str,
    ) -> Result<Option<u32>, NvmlFailure> {
        match self.api.sm_activity(gpu, gpu_instance) {
            Ok(Some(x)) => Ok(Some((x.clamp(0.0, 1.0) * 1e6) as u32)),
            Ok(None) => Ok(None),
            Err(NvmlFailure::NotSupported) => {
                let uuid = uuid.to_owned();
                self.say_once(format!("compute:{uuid}"), || {
                    tracing::warn!(slice = %uuid, "Compute activity cannot be measured here (GPM needs Hopper or newer); its windows carry it as unknown.");
                });
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_come_from_mig_device_names() {
        assert_eq!(
            profile_in_name("NVIDIA H100 80GB HBM3 MIG 3g.40gb"),
            Some("3g.40gb")
        );
        assert_eq!(profile_in_name("NVIDIA H100 80GB HBM3"), None);
    }

    #[test]
    fn sharing_parses_and_bad_values_are_named() {
        assert_eq!("timeslice:4".parse::<Sharing>(), Ok(Sharing::Timeslice(4)));
        assert_eq!("mps:2".parse::<Sharing>(), Ok(Sharing::Mps(2)));
        assert_eq!("none".parse::<Sharing>(), Ok(Sharing::None));
        assert!(
            "timeslice:1"
                .parse::<Sharing>()
                .unwrap_err()
                .contains("timeslice:N")
        );
    }
}
