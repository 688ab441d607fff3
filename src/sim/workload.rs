//! What runs on a simulated slice: each week a slice is free, idle-held by a forgotten notebook,
//! training, serving with a daily cycle, or serving in bursts; pods restart and leave gaps, so slices
//! change hands. Some large slices are held all month by a service that needs a fraction of them
//! (6 GiB and a few percent of compute on a large MIG instance, 10 GiB on a whole GPU), some
//! slices, and every instance of a forgotten card, by a notebook forgotten all month: what
//! right-sizing and consolidation are for. Pods carry their owners as Kubernetes labels them: Jobs
//! train, Deployments serve, notebooks are bare pods. Everything is a function of (seed, slice,
//! time).

use std::collections::BTreeMap;
use std::f64::consts::PI;
use std::sync::Arc;

use super::{SCRATCH_NAMESPACE, SHARED_NAMESPACE, SimFleet, SimSlice, hash, unit};
use crate::domain::batch::{ConsumerReport, DraClaim};
use crate::domain::slice::SliceKind;

/// The DRA driver of NVIDIA's GPUs, as its DeviceClass names it.
const DRA_DRIVER: &str = "gpu.nvidia.com";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Fills memory, keeps the SMs busy.
    Training,
    /// Serves with a daily cycle that peaks at noon UTC.
    DailyInference,
    /// Mostly idle, with bursts.
    BurstyInference,
    /// Held but idle for days: the case chargeback exists to show.
    IdleHeld,
    /// A service on a slice far larger than it needs, all month.
    Oversized,
}

impl Workload {
    fn app(self) -> &'static str {
        match self {
            Workload::Training => "trainer",
            Workload::DailyInference => "chat-api",
            Workload::BurstyInference => "embedder",
            Workload::IdleHeld => "notebook",
            Workload::Oversized => "reranker",
        }
    }
}

/// The characters Kubernetes draws generated name suffixes from.
const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn suffix(h: u64, len: usize) -> String {
    (0..len)
        .map(|i| NAME_CHARS[((h >> (i * 5)) % NAME_CHARS.len() as u64) as usize] as char)
        .collect()
}

/// A pod of `workload` with the owner labels Kubernetes gives it: a Job's for training, a
/// Deployment's (`pod-template-hash`, changing with each week's rollout) for serving, none for a
/// notebook.
fn pod_of(
    workload: Workload,
    generation: u64,
    template: u64,
) -> (String, BTreeMap<String, String>) {
    let app = workload.app();
    let mut labels = BTreeMap::from([("app".to_owned(), app.to_owned())]);
    let pod = match workload {
        Workload::Training => {
            let job = format!("{app}-{}", suffix(generation, 5));
            labels.insert("batch.kubernetes.io/job-name".to_owned(), job.clone());
            format!("{job}-{}", suffix(generation >> 25, 5))
        }
        Workload::DailyInference | Workload::BurstyInference | Workload::Oversized => {
            let hash = suffix(template, 9);
            labels.insert("pod-template-hash".to_owned(), hash.clone());
            format!("{app}-{hash}-{}", suffix(generation, 5))
        }
        Workload::IdleHeld => format!("{app}-{}", suffix(generation, 5)),
    };
    (pod, labels)
}

/// A block: what holds a slice changes only at its boundaries.
pub(crate) const BLOCK_MS: i64 = 4 * 3_600_000;
const BLOCKS_PER_WEEK: i64 = 42;

/// Who holds a slice during one 4-hour block, and doing what.
#[derive(Debug, Clone)]
pub struct Plan {
    pub block: i64,
    pub consumer: Option<Arc<ConsumerReport>>,
    pub workload: Workload,
    /// A per-pod constant in `[0, 1)`: how much of its reservation this pod's model fills.
    level: f64,
}

/// What a slice reads at one instant: memory used and SM activity in parts per million.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimReading {
    pub memory_used_bytes: u64,
    pub compute_active_ppm: u32,
}

impl SimFleet {
    /// The 4-hour block that holds `t_ms`.
    pub fn block_of(t_ms: i64) -> i64 {
        t_ms.div_euclid(BLOCK_MS)
    }

    /// What holds `slice` all month, if anything does: a forgotten notebook on every instance of
    /// a forgotten card; an oversized service on half the other MIG instances of four memory
    /// slices or more and of the whole GPUs; a forgotten notebook on a tenth of the other
    /// reserved slices.
    fn all_month(&self, slice: &SimSlice) -> Option<Workload> {
        if slice.forgotten {
            return Some(Workload::IdleHeld);
        }
        let large = match slice.kind {
            SliceKind::Mig => slice.report.memory_slices.unwrap_or(0) >= 4,
            SliceKind::Whole => true,
            _ => false,
        };
        let r = unit(hash(&[self.seed, slice.id, 21]));
        if large && r < 0.5 {
            Some(Workload::Oversized)
        } else if slice.kind != SliceKind::Timeslice && r > 0.9 {
            Some(Workload::IdleHeld)
        } else {
            None
        }
    }

    pub fn plan(&self, slice: &SimSlice, block: i64) -> Plan {
        let (seed, id) = (self.seed, slice.id);
        if let Some(workload) = self.all_month(slice) {
            let team = &self.teams[slice.home_team];
            let generation = hash(&[seed, id, 22]);
            let key = hash(&[generation, slice.home_team as u64, 23]);
            let consumer = self.consumer(key, || {
                let (pod, mut labels) = pod_of(workload, generation, hash(&[seed, 24]));
                if team.labels_pods {
                    labels.insert(ConsumerReport::TEAM_LABEL.to_owned(), team.id.clone());
                }
                ConsumerReport {
                    namespace: Some(team.namespaces[0].clone()),
                    pod: Some(pod),
                    container: Some("main".to_owned()),
                    labels,
                    ..ConsumerReport::default()
                }
            });
            return Plan {
                block,
                consumer: Some(consumer),
                workload,
                level: unit(hash(&[generation, 10])),
            };
        }
        let week = block.div_euclid(BLOCKS_PER_WEEK);
        let w = week as u64;
        let r = unit(hash(&[seed, id, w, 1]));
        let workload = match r {
            r if r < 0.25 => Workload::IdleHeld,
            r if r < 0.50 => Workload::Training,
            r if r < 0.80 => Workload::DailyInference,
            _ => Workload::BurstyInference,
        };
        let free_week = unit(hash(&[seed, id, w, 9])) < 0.10;
        let gap = workload != Workload::IdleHeld && unit(hash(&[seed, id, block as u64, 4])) < 0.08;
        if free_week || gap {
            return Plan {
                block,
                consumer: None,
                workload,
                level: 0.0,
            };
        }
        // The pod generation: the block its pod started in. Idle notebooks live all week.
        let week_start = week * BLOCKS_PER_WEEK;
        let mut start = block;
        if workload == Workload::IdleHeld {
            start = week_start;
        } else {
            while start > week_start && unit(hash(&[seed, id, start as u64, 5])) >= 0.25 {
                start -= 1;
            }
        }
        let team_idx = if unit(hash(&[seed, id, w, 2])) < 0.8 {
            slice.home_team
        } else {
            (hash(&[seed, id, w, 3]) % self.teams.len() as u64) as usize
        };
        let team = &self.teams[team_idx];
        let where_ = unit(hash(&[seed, id, w, 6]));
        let (namespace, label) = if where_ < 0.06 {
            (SCRATCH_NAMESPACE.to_owned(), false)
        } else if where_ < 0.16 {
            (SHARED_NAMESPACE.to_owned(), true)
        } else {
            let ns =
                &team.namespaces[(hash(&[seed, id, w, 7]) % team.namespaces.len() as u64) as usize];
            (ns.clone(), team.labels_pods)
        };
        let pod_hash = hash(&[seed, id, start as u64, 8]);
        let key = hash(&[
            pod_hash,
            team_idx as u64,
            namespace.len() as u64,
            label as u64,
            where_.to_bits(),
        ]);
        let consumer = self.consumer(key, || {
            let (pod, mut labels) =
                pod_of(workload, pod_hash, hash(&[seed, w, team_idx as u64, 24]));
            if label {
                labels.insert(ConsumerReport::TEAM_LABEL.to_owned(), team.id.clone());
            }
            // A third of the pods on MIG instances and whole GPUs get theirs through a DRA claim
            // made from the pod's ResourceClaimTemplate (named after the pod, as Kubernetes does).
            let dra_claim = (matches!(slice.kind, SliceKind::Mig | SliceKind::Whole)
                && unit(hash(&[pod_hash, 12])) < 0.33)
                .then(|| DraClaim {
                    namespace: namespace.clone(),
                    name: format!("{pod}-gpu"),
                    driver: Some(DRA_DRIVER.to_owned()),
                    pool: None,
                    device: None,
                });
            ConsumerReport {
                namespace: Some(namespace),
                pod: Some(pod),
                container: Some("main".to_owned()),
                labels,
                dra_claim,
                ..ConsumerReport::default()
            }
        });
        Plan {
            block,
            consumer: Some(consumer),
            workload,
            level: unit(hash(&[pod_hash, 10])),
        }
    }

    /// The slice's reading at `t_ms` under `plan`.
    pub fn reading(&self, slice: &SimSlice, plan: &Plan, t_ms: i64) -> SimReading {
        let (seed, id) = (self.seed, slice.id);
        let noise = unit(hash(&[seed, id, t_ms.div_euclid(5_000) as u64, 11]));
        let level = plan.level;
        let (memory, compute) = match plan.workload {
            Workload::Training => (0.88 + 0.08 * level, 0.85 + 0.14 * noise),
            Workload::DailyInference => {
                let hour = t_ms.rem_euclid(86_400_000) as f64 / 3_600_000.0;
                let cycle = (2.0 * PI * (hour - 6.0) / 24.0).sin().max(0.0);
                (
                    0.35 + 0.25 * level,
                    (0.05 + 0.6 * cycle + 0.1 * noise).min(1.0),
                )
            }
            Workload::BurstyInference => {
                let burst = unit(hash(&[seed, id, t_ms.div_euclid(30_000) as u64, 12])) < 0.15;
                let compute = if burst {
                    0.6 + 0.4 * noise
                } else {
                    0.02 * noise
                };
                (0.3 + 0.2 * level, compute)
            }
            Workload::IdleHeld => (0.03 + 0.07 * level, 0.005 * noise),
            Workload::Oversized => {
                let need = if slice.kind == SliceKind::Whole {
                    10.0
                } else {
                    6.0
                };
                let bytes = need * (0.9 + 0.1 * noise) * f64::from(1u32 << 30);
                (
                    (bytes / slice.memory_reserved_bytes as f64).min(1.0),
                    0.015 + 0.02 * noise,
                )
            }
        };
        let bytes = memory * slice.scale * slice.memory_reserved_bytes as f64;
        SimReading {
            memory_used_bytes: (bytes as u64) >> 20 << 20,
            compute_active_ppm: (compute * slice.scale * 1e6) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_a_month_slices_change_hands_and_some_are_held_idle() {
        let f = SimFleet::generate(3, 16);
        let mut consumers = std::collections::BTreeSet::new();
        let mut idle_blocks = 0;
        let mut free_blocks = 0;
        let slices: Vec<_> = f
            .nodes
            .iter()
            .flat_map(|n| &n.gpus)
            .flat_map(|g| &g.slices)
            .collect();
        for s in &slices {
            for block in 0..180 {
                let p = f.plan(s, 120_000 + block);
                match &p.consumer {
                    Some(h) => {
                        consumers.insert(h.pod.clone());
                        idle_blocks += usize::from(p.workload == Workload::IdleHeld);
                    }
                    None => free_blocks += 1,
                }
            }
        }
        assert!(
            consumers.len() > slices.len() * 3,
            "{} pods on {} slices",
            consumers.len(),
            slices.len()
        );
        assert!(idle_blocks > 0 && free_blocks > 0);
    }

    #[test]
    fn some_large_slices_are_held_all_month_by_one_deployment_pod_at_a_fraction_of_them() {
        let f = SimFleet::generate(7, 24);
        let mut oversized = 0;
        for s in f.nodes.iter().flat_map(|n| &n.gpus).flat_map(|g| &g.slices) {
            let first = f.plan(s, 120_000);
            if f.all_month(s) != Some(Workload::Oversized) {
                continue;
            }
            oversized += 1;
            let pod = first.consumer.as_ref().unwrap();
            assert!(pod.labels.contains_key("pod-template-hash"), "{pod:?}");
            for block in 120_000..120_000 + 180 {
                let p = f.plan(s, block);
                assert_eq!(
                    p.consumer.as_ref().unwrap().pod,
                    pod.pod,
                    "one pod all month"
                );
                let r = f.reading(s, &p, block * 4 * 3_600_000);
                assert!(r.memory_used_bytes <= 10 << 30, "{r:?}");
                assert!(r.compute_active_ppm < 40_000, "{r:?}");
            }
            // It holds at least twice what it needs.
            let need: u64 = if s.kind == SliceKind::Whole {
                10 << 30
            } else {
                6 << 30
            };
            assert!(s.memory_reserved_bytes >= 2 * need, "{:?}", s.report);
        }
        assert!(oversized > 0, "no oversized slice in the fleet");
    }

    #[test]
    fn every_fleet_has_a_forgotten_card_whose_instances_idle_all_month() {
        // 42: the demo's fleet.
        for seed in (0..20).chain([42]) {
            let f = SimFleet::generate(seed, 16);
            let forgotten: Vec<_> = f
                .nodes
                .iter()
                .flat_map(|n| &n.gpus)
                .filter(|g| g.slices.iter().all(|s| s.forgotten))
                .collect();
            assert!(!forgotten.is_empty(), "seed {seed}: no forgotten card");
            for g in forgotten {
                assert!(g.report.mig_enabled, "seed {seed}: {:?}", g.report);
                for s in &g.slices {
                    let pod = f.plan(s, 120_000).consumer.unwrap().pod.clone();
                    for block in 120_000..120_000 + 180 {
                        let p = f.plan(s, block);
                        assert_eq!(p.workload, Workload::IdleHeld);
                        assert_eq!(
                            p.consumer.as_ref().unwrap().pod,
                            pod,
                            "one notebook all month"
                        );
                        let r = f.reading(s, &p, block * 4 * 3_600_000 + 1_234_567);
                        assert!(r.compute_active_ppm < 10_000, "{r:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn readings_stay_within_the_reservation() {
        let f = SimFleet::generate(5, 24);
        for s in f.nodes.iter().flat_map(|n| &n.gpus).flat_map(|g| &g.slices) {
            for t in (0..86_400_000i64).step_by(600_000) {
                let t = 1_790_000_000_000 + t;
                let p = f.plan(s, SimFleet::block_of(t));
                let r = f.reading(s, &p, t);
                assert!(r.memory_used_bytes <= s.memory_reserved_bytes);
                assert!(r.compute_active_ppm <= 1_000_000);
            }
        }
    }
}
