//! Where readings come from, behind [`Source`]: NVML on real GPUs (`nvml`), the node's
//! dcgm-exporter (`dcgm`), or the simulator (`sim::source`, which implements the same trait).

pub mod dcgm;
pub mod nvml;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::domain::batch::{ConsumerReport, GpuReport, SliceReport};
use crate::domain::slice::SliceKind;

/// The GPUs and slices of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    pub gpus: Vec<GpuReport>,
    pub slices: Vec<SliceReport>,
}

/// One slice's state at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Index into the inventory's slices.
    pub slice: usize,
    /// Who holds it; `None` when it is free.
    pub consumer: Option<Arc<ConsumerReport>>,
    pub memory_used_bytes: u64,
    /// SM activity in parts per million, relative to the slice (to the whole GPU for a time-sliced
    /// replica); `None` where the GPU cannot measure it.
    pub compute_active_ppm: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source cannot be read at all: the collector stops.
    #[error("{0}")]
    Unavailable(String),
    /// This sample could not be taken (a scrape that failed or timed out): the time it would have
    /// covered is not observed, and the collector goes on.
    #[error("a sample was missed: {0}")]
    Missed(String),
}

/// How a source's samples become time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Read when the collector samples: a sample holds until the next, at most two intervals
    /// (`Hold::up_to`).
    Sampled,
    /// Scrapes of another process's page: each stands for the slot of the sample interval it falls
    /// in (slots since the Unix epoch), held from the first slot to the last plus one (a skipped
    /// slot is time not observed: `Hold::scraped`), as Prometheus holds a scraped series. The
    /// collector samples mid-slot. `import prometheus` reads Prometheus' samples the same way, so
    /// that the same scrapes make the same windows.
    Slotted,
}

/// A node's GPUs, read at an instant.
pub trait Source: Send {
    /// The node this source reads.
    fn node(&self) -> &str;
    fn inventory(&mut self) -> Result<Inventory, SourceError>;
    /// Readings of every slice of the inventory at `at`.
    fn sample(&mut self, at: DateTime<Utc>) -> Result<Vec<Reading>, SourceError>;
    fn timing(&self) -> Timing {
        Timing::Sampled
    }
    /// Whether the last sample found the inventory changed (a MIG instance made or destroyed); the
    /// sample's readings are of the new one. Asking clears it.
    fn inventory_changed(&mut self) -> bool {
        false
    }
}

impl Source for Box<dyn Source> {
    fn node(&self) -> &str {
        (**self).node()
    }

    fn inventory(&mut self) -> Result<Inventory, SourceError> {
        (**self).inventory()
    }

    fn sample(&mut self, at: DateTime<Utc>) -> Result<Vec<Reading>, SourceError> {
        (**self).sample(at)
    }

    fn timing(&self) -> Timing {
        (**self).timing()
    }

    fn inventory_changed(&mut self) -> bool {
        (**self).inventory_changed()
    }
}

/// Keeps readings within what the contract lets a batch say (DESIGN.md, Ingest contract: figures
/// bounded by the card), so that a driver's rounding never gets a whole batch refused: memory at
/// most what the slice can use, time-sliced replicas of one GPU together at most the whole of it,
/// and consumers' labels within Kubernetes' limits.
#[derive(Debug, Clone)]
pub struct CardFit {
    /// Per inventory slice: the bytes it can use, and for a time-sliced replica its GPU's index.
    slices: Vec<(u64, Option<usize>)>,
    gpu_memory: Vec<u64>,
}

impl CardFit {
    pub fn of(inventory: &Inventory) -> CardFit {
        let gpu_memory: Vec<u64> = inventory
            .gpus
            .iter()
            .map(|g| u64::try_from(g.memory_bytes).unwrap_or(0))
            .collect();
        let slices = inventory
            .slices
            .iter()
            .map(|s| {
                let g = inventory.gpus.iter().position(|g| g.uuid == s.gpu_uuid);
                let whole = g.map_or(0, |g| gpu_memory[g]);
                let bytes = |v: Option<i64>| v.and_then(|b| u64::try_from(b).ok()).unwrap_or(whole);
                match s.slice_kind() {
                    Some(SliceKind::Mig) => (bytes(s.memory_bytes), None),
                    Some(SliceKind::Mps) => (bytes(s.pinned_memory_bytes), None),
                    Some(SliceKind::Vgpu) => (
                        s.fraction
                            .map_or(whole, |f| (whole as f64 * f.clamp(0.0, 1.0)) as u64),
                        None,
                    ),
                    Some(SliceKind::Timeslice) => (whole, g),
                    Some(SliceKind::Whole) | None => (whole, None),
                }
            })
            .collect();
        CardFit { slices, gpu_memory }
    }

    /// Fits `readings` in place; returns how many figures it had to cut.
    pub fn apply(&self, readings: &mut [Reading]) -> usize {
        use crate::domain::batch::bounds;
        let mut cut = 0;
        let mut shared: std::collections::BTreeMap<usize, (u64, u64, Vec<usize>)> =
            std::collections::BTreeMap::new();
        for (k, r) in readings.iter_mut().enumerate() {
            let Some(&(limit, gpu)) = self.slices.get(r.slice) else {
                continue;
            };
            if r.memory_used_bytes > limit {
                r.memory_used_bytes = limit;
                cut += 1;
            }
            if let Some(ppm) = r.compute_active_ppm
                && ppm > 1_000_000
            {
                r.compute_active_ppm = Some(1_000_000);
                cut += 1;
            }
            if let (Some(g), Some(_)) = (gpu, &r.consumer) {
                let e = shared.entry(g).or_default();
                e.0 += r.memory_used_bytes;
                e.1 += u64::from(r.compute_active_ppm.unwrap_or(0));
                e.2.push(k);
            }
            if let Some(h) = &r.consumer {
                let long = h.labels.len() > bounds::MAX_LABELS
                    || h.labels.iter().any(|(k, v)| {
                        k.len() > bounds::MAX_LABEL_KEY_CHARS
                            || v.len() > bounds::MAX_LABEL_VALUE_CHARS
                    });
                if long {
                    let mut fitted = (**h).clone();
                    cut += fitted.fit_labels_to_contract();
                    r.consumer = Some(Arc::new(fitted));
                }
            }
        }
        // Replicas of one GPU share it: their memory and activity add up to at most the card.
        for (g, (memory, ppm, members)) in shared {
            let card = self.gpu_memory.get(g).copied().unwrap_or(0);
            if memory > card && memory > 0 {
                for &k in &members {
                    let r = &mut readings[k];
                    r.memory_used_bytes = (u128::from(r.memory_used_bytes) * u128::from(card)
                        / u128::from(memory)) as u64;
                }
                cut += 1;
            }
            if ppm > 1_000_000 {
                for &k in &members {
                    if let Some(p) = &mut readings[k].compute_active_ppm {
                        *p = (u64::from(*p) * 1_000_000 / ppm) as u32;
                    }
                }
                cut += 1;
            }
        }
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory() -> Inventory {
        let gpu = GpuReport {
            uuid: "GPU-1".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            memory_bytes: 1000,
            compute_slices: 7,
            memory_slices: 8,
            mig_enabled: false,
        };
        let replica = |r: i64| SliceReport {
            uuid: format!("GPU-1::{r}"),
            gpu_uuid: "GPU-1".into(),
            kind: SliceKind::Timeslice.to_string(),
            replicas: Some(2),
            replica: Some(r),
            ..SliceReport::default()
        };
        Inventory {
            gpus: vec![gpu],
            slices: vec![replica(0), replica(1)],
        }
    }

    #[test]
    fn replicas_of_one_gpu_are_fitted_to_the_whole_card_together() {
        let consumer = Arc::new(ConsumerReport {
            pod: Some("p".into()),
            ..ConsumerReport::default()
        });
        let reading = |slice, memory, ppm| Reading {
            slice,
            consumer: Some(consumer.clone()),
            memory_used_bytes: memory,
            compute_active_ppm: Some(ppm),
        };
        let mut readings = vec![reading(0, 800, 700_000), reading(1, 1200, 600_000)];
        let cut = CardFit::of(&inventory()).apply(&mut readings);
        assert!(cut > 0);
        let memory: u64 = readings.iter().map(|r| r.memory_used_bytes).sum();
        let ppm: u32 = readings.iter().filter_map(|r| r.compute_active_ppm).sum();
        assert!(memory <= 1000, "{readings:?}");
        assert!(ppm <= 1_000_000, "{readings:?}");
        // What fits is left alone.
        let mut fine = vec![reading(0, 400, 400_000), reading(1, 500, 500_000)];
        assert_eq!(CardFit::of(&inventory()).apply(&mut fine), 0);
        assert_eq!(fine[1].memory_used_bytes, 500);
    }
}
