//! What runs on a simulated slice: each week a slice is free, idle-held by a forgotten notebook,
//! training, serving with a daily cycle, or serving in bursts; pods restart and leave gaps, so slices
//! change hands. Everything is a function of (seed, slice, time).

use std::collections::BTreeMap;
use std::f64::consts::PI;
use std::sync::Arc;

use super::{SCRATCH_NAMESPACE, SHARED_NAMESPACE, SimFleet, SimSlice, hash, unit};
use crate::domain::batch::ConsumerReport;

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
}

impl Workload {
    fn app(self) -> &'static str {
        match self {
            Workload::Training => "trainer",
            Workload::DailyInference => "chat-api",
            Workload::BurstyInference => "embedder",
            Workload::IdleHeld => "notebook",
        }
    }
}

const BLOCK_MS: i64 = 4 * 3_600_000;
const BLOCKS_PER_WEEK: i64 = 42;

/// Who holds a slice during one 4-hour block, and doing what.
#[derive(Debug, Clone)]
pub struct Plan {
    pub block: i64,
    pub holder: Option<Arc<ConsumerReport>>,
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

    pub fn plan(&self, slice: &SimSlice, block: i64) -> Plan {
        let (seed, id) = (self.seed, slice.id);
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
                holder: None,
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
        let holder = self.consumer(key, || {
            let mut labels = BTreeMap::from([("app".to_owned(), workload.app().to_owned())]);
            if label {
                labels.insert(ConsumerReport::TEAM_LABEL.to_owned(), team.id.clone());
            }
            ConsumerReport {
                namespace: Some(namespace),
                pod: Some(format!("{}-{:05x}", workload.app(), pod_hash & 0xf_ffff)),
                container: Some("main".to_owned()),
                labels,
                ..ConsumerReport::default()
            }
        });
        Plan {
            block,
            holder: Some(holder),
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
        let mut holders = std::collections::BTreeSet::new();
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
                match &p.holder {
                    Some(h) => {
                        holders.insert(h.pod.clone());
                        idle_blocks += usize::from(p.workload == Workload::IdleHeld);
                    }
                    None => free_blocks += 1,
                }
            }
        }
        assert!(
            holders.len() > slices.len() * 3,
            "{} pods on {} slices",
            holders.len(),
            slices.len()
        );
        assert!(idle_blocks > 0 && free_blocks > 0);
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
