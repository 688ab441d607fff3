//! A seeded, deterministic simulated fleet: nodes of H100, H200 and A100 GPUs cut into valid MIG
//! layouts, time-sliced, MPS-shared, vGPU-split or whole; teams over namespaces; and workloads with
//! daily cycles, bursts, training that fills memory and slices held idle for days. Every figure is a
//! pure function of (seed, slice, time), so fast-forward and live sampling agree and the same seed
//! gives the same bytes. `source` is one node of it as a collector `Source`; `generate` drives the
//! collector's parts over it in fast-forward (`simulate`, `demo`'s back-fill, the benchmarks).

pub mod dcgm;
pub mod generate;
pub mod prometheus;
pub mod source;
pub mod vllm;
pub mod workload;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::domain::batch::{ConsumerReport, GpuReport, SliceReport};
use crate::domain::profiles;
use crate::domain::slice::SliceKind;

/// SplitMix64's finaliser: a fast, well-mixed hash of one word.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hash of several words.
pub fn hash(words: &[u64]) -> u64 {
    words.iter().fold(0x5eed_5111_ce5e_ed00, |h, &w| mix(h ^ w))
}

/// A hash as a number in `[0, 1)`.
pub fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A deterministic generator for building the fleet.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        hash(&[self.0])
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, p: f64) -> bool {
        unit(self.next()) < p
    }

    fn uuid(&mut self, prefix: &str) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{prefix}-{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        )
    }
}

/// A team of the simulated company and the namespaces its pods run in.
#[derive(Debug, Clone, PartialEq)]
pub struct SimTeam {
    pub id: String,
    pub display_name: String,
    pub cost_center: String,
    pub namespaces: Vec<String>,
    /// Whether its pods carry an explicit `team` label (the others are attributed by namespace).
    pub labels_pods: bool,
}

/// A namespace no team owns: its pods stay unattributed, as in a real cluster.
pub const SCRATCH_NAMESPACE: &str = "scratch";
/// A namespace shared by several teams, whose pods say their team by label.
pub const SHARED_NAMESPACE: &str = "shared-inference";

#[derive(Debug, Clone)]
pub struct SimSlice {
    pub report: SliceReport,
    /// Its kind, the enum of the text the report carries.
    pub kind: SliceKind,
    /// The slice's number in the fleet, the seed of its workloads.
    pub id: u64,
    /// Bytes its memory readings are relative to.
    pub memory_reserved_bytes: u64,
    /// A time-sliced replica's readings are relative to the whole GPU: it gets 1/replicas of it.
    pub scale: f64,
    /// The team that holds it most weeks.
    pub home_team: usize,
    /// On a card set up for an experiment and forgotten: an idle notebook holds it all month.
    pub forgotten: bool,
}

#[derive(Debug, Clone)]
pub struct SimGpu {
    pub report: GpuReport,
    pub slices: Vec<SimSlice>,
}

#[derive(Debug, Clone)]
pub struct SimNode {
    pub name: String,
    pub gpus: Vec<SimGpu>,
}

#[derive(Debug, Clone)]
pub struct SimFleet {
    pub seed: u64,
    pub teams: Vec<SimTeam>,
    pub nodes: Vec<SimNode>,
    /// One consumer per pod, made once and shared by every sample that names it.
    consumers: Arc<std::sync::Mutex<BTreeMap<u64, Arc<ConsumerReport>>>>,
}

/// A GPU model of the simulator: NVML's name and the profile table's key (its memory is the
/// table's, `profiles::memory_bytes`).
struct Model {
    nvml_name: &'static str,
    table: &'static str,
}

const MODELS: [Model; 3] = [
    Model {
        nvml_name: "NVIDIA H100 80GB HBM3",
        table: "H100-SXM5-80GB",
    },
    Model {
        nvml_name: "NVIDIA H200",
        table: "H200-141GB",
    },
    Model {
        nvml_name: "NVIDIA A100-SXM4-80GB",
        table: "A100-SXM4-80GB",
    },
];

/// MIG layouts by profile id (the same ids on every 7/8 model), from NVIDIA's guide.
pub const MIG_LAYOUTS: [&[u32]; 9] = [
    &[9, 14, 19, 19],              // 3g + 2g + 1g + 1g
    &[19, 19, 19, 19, 19, 19, 19], // 7 x 1g
    &[5, 9],                       // 4g + 3g
    &[9, 19, 19],                  // `nvidia-smi mig -cgi 9,19,19`
    &[9, 9],                       // 2 x 3g
    &[0],                          // 7g
    &[14, 14, 14],                 // 3 x 2g
    &[15, 15, 15, 15],             // 4 x 1g with double memory
    &[14, 19, 19, 19, 19, 19],     // 2g + 5 x 1g
];

const TEAM_NAMES: [(&str, &str); 12] = [
    ("nlp", "Natural Language"),
    ("vision", "Computer Vision"),
    ("search", "Search Ranking"),
    ("ads-ranking", "Ads Ranking"),
    ("speech", "Speech"),
    ("recsys", "Recommendations"),
    ("fraud", "Fraud Detection"),
    ("genai", "Generative AI"),
    ("robotics", "Robotics"),
    ("forecasting", "Forecasting"),
    ("platform-ml", "ML Platform"),
    ("bio", "Computational Biology"),
];

/// GPUs per simulated node.
pub const GPUS_PER_NODE: usize = 4;

impl SimFleet {
    /// The fleet of `gpus` GPUs for `seed`.
    pub fn generate(seed: u64, gpus: usize) -> SimFleet {
        let mut rng = Rng(hash(&[seed, 0xf1ee7]));
        let team_count = 6 + rng.below(7);
        let mut names: Vec<usize> = (0..TEAM_NAMES.len()).collect();
        for i in (1..names.len()).rev() {
            let j = rng.below(i + 1);
            names.swap(i, j);
        }
        let teams: Vec<SimTeam> = names[..team_count]
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let (id, display) = TEAM_NAMES[i];
                let mut namespaces = vec![id.to_owned()];
                if rng.chance(0.5) {
                    namespaces.push(format!("{id}-batch"));
                }
                SimTeam {
                    id: id.to_owned(),
                    display_name: display.to_owned(),
                    cost_center: format!("CC-{}", 4100 + 10 * k),
                    namespaces,
                    labels_pods: rng.chance(0.3),
                }
            })
            .collect();

        let mut nodes = Vec::new();
        let mut slice_id = 0u64;
        let mut remaining = gpus;
        while remaining > 0 {
            let n = remaining.min(GPUS_PER_NODE);
            remaining -= n;
            let model = &MODELS[if nodes.len() < MODELS.len() {
                nodes.len()
            } else {
                rng.below(MODELS.len())
            }];
            let name = format!("gpu-node-{:02}", nodes.len() + 1);
            let mut node_gpus = Vec::with_capacity(n);
            for _ in 0..n {
                node_gpus.push(Self::gpu(&mut rng, model, team_count, &mut slice_id));
            }
            nodes.push(SimNode {
                name,
                gpus: node_gpus,
            });
        }
        // A tenth of the MIG cards, and always the fleet's first, were set up for an experiment
        // and forgotten: whatever hour the consolidation plan reads, it frees at least that card.
        let mut first = true;
        for gpu in nodes
            .iter_mut()
            .flat_map(|n| &mut n.gpus)
            .filter(|g| g.report.mig_enabled)
        {
            let chosen = gpu
                .slices
                .first()
                .is_some_and(|s| unit(hash(&[seed, s.id, 31])) < 0.1);
            if std::mem::take(&mut first) || chosen {
                for s in &mut gpu.slices {
                    s.forgotten = true;
                }
            }
        }
        SimFleet {
            seed,
            teams,
            nodes,
            consumers: Arc::default(),
        }
    }

    fn gpu(rng: &mut Rng, model: &Model, teams: usize, slice_id: &mut u64) -> SimGpu {
        let uuid = rng.uuid("GPU");
        let roll = rng.below(100);
        let mig_enabled = roll < 45;
        let report = GpuReport {
            uuid: uuid.clone(),
            model: model.nvml_name.to_owned(),
            memory_bytes: profiles::memory_bytes(model.table) as i64,
            compute_slices: 7,
            memory_slices: 8,
            mig_enabled,
        };
        let gpu_memory = profiles::memory_bytes(model.table);
        let mut slices = Vec::new();
        let mut push =
            |kind: SliceKind, report: SliceReport, reserved: u64, scale: f64, rng: &mut Rng| {
                *slice_id += 1;
                slices.push(SimSlice {
                    report: SliceReport {
                        kind: kind.to_string(),
                        ..report
                    },
                    kind,
                    id: *slice_id,
                    memory_reserved_bytes: reserved,
                    scale,
                    home_team: rng.below(teams),
                    forgotten: false,
                });
            };
        let base = SliceReport {
            gpu_uuid: uuid.clone(),
            ..SliceReport::default()
        };
        match roll {
            0..45 => {
                let layout = MIG_LAYOUTS[rng.below(MIG_LAYOUTS.len())];
                // GPU instances numbered in creation order, as on a card just reset.
                for (gi, &id) in (1..).zip(layout) {
                    let p = profiles::by_id(model.table, id).expect("layout profiles exist");
                    let s = SliceReport {
                        uuid: rng.uuid("MIG"),
                        profile: Some(p.profile.clone()),
                        profile_id: Some(i64::from(p.profile_id)),
                        compute_slices: Some(i64::from(p.compute_slices)),
                        memory_slices: Some(i64::from(p.memory_slices)),
                        memory_bytes: Some(p.memory_bytes() as i64),
                        gpu_instance_id: Some(gi),
                        ..base.clone()
                    };
                    push(SliceKind::Mig, s, p.memory_bytes(), 1.0, rng);
                }
            }
            45..60 => {
                let replicas = 2 + rng.below(7);
                for r in 0..replicas {
                    let s = SliceReport {
                        uuid: format!("{uuid}::{r}"),
                        replicas: Some(replicas as i64),
                        replica: Some(r as i64),
                        ..base.clone()
                    };
                    push(
                        SliceKind::Timeslice,
                        s,
                        gpu_memory,
                        1.0 / replicas as f64,
                        rng,
                    );
                }
            }
            60..75 => {
                let clients = 2 + rng.below(3);
                let pinned = (gpu_memory / clients as u64) >> 20 << 20;
                for c in 0..clients {
                    let s = SliceReport {
                        uuid: format!("{uuid}::mps{c}"),
                        active_thread_percentage: Some((100 / clients) as i64),
                        pinned_memory_bytes: Some(pinned as i64),
                        ..base.clone()
                    };
                    push(SliceKind::Mps, s, pinned, 1.0, rng);
                }
            }
            75..80 => {
                let parts = if rng.chance(0.5) { 2 } else { 4 };
                for v in 0..parts {
                    let s = SliceReport {
                        uuid: format!("{uuid}::vgpu{v}"),
                        fraction: Some(1.0 / parts as f64),
                        ..base.clone()
                    };
                    push(SliceKind::Vgpu, s, gpu_memory / parts as u64, 1.0, rng);
                }
            }
            _ => {
                let s = SliceReport {
                    uuid: uuid.clone(),
                    ..base.clone()
                };
                push(SliceKind::Whole, s, gpu_memory, 1.0, rng);
            }
        }
        SimGpu { report, slices }
    }

    pub fn node(&self, name: &str) -> Option<&SimNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The same fleet with its nodes named `<prefix>-01`, `<prefix>-02`, ...: fleets of other seeds
    /// under other prefixes can share a database and still be told apart per node.
    pub fn with_node_prefix(mut self, prefix: &str) -> SimFleet {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            n.name = format!("{prefix}-{:02}", i + 1);
        }
        self
    }

    /// One node of the fleet, as that node's source holds it: the teams, its own GPUs and a
    /// consumer cache of its own, so a fleet's sources together hold the fleet once.
    pub fn for_node(&self, name: &str) -> Option<SimFleet> {
        Some(SimFleet {
            seed: self.seed,
            teams: self.teams.clone(),
            nodes: vec![self.node(name)?.clone()],
            consumers: Arc::default(),
        })
    }

    /// Forgets the consumers no plan or open window holds any more: pods come and go, and the
    /// cache stays the size of what is running, however many days go by. A consumer met again is
    /// made again, equal to the one forgotten (it is a function of its key).
    pub fn forget_idle_consumers(&self) {
        self.consumers
            .lock()
            .expect("not poisoned")
            .retain(|_, c| Arc::strong_count(c) > 1);
    }

    /// The consumer for a key, made once and shared.
    fn consumer(&self, key: u64, make: impl FnOnce() -> ConsumerReport) -> Arc<ConsumerReport> {
        self.consumers
            .lock()
            .expect("not poisoned")
            .entry(key)
            .or_insert_with(|| Arc::new(make()))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::profiles::{Instance, check_layout};

    #[test]
    fn every_layout_of_the_simulator_has_a_placement_on_every_model() {
        for model in &MODELS {
            for layout in MIG_LAYOUTS {
                let instances: Vec<Instance> = layout
                    .iter()
                    .map(|&id| {
                        let p = profiles::by_id(model.table, id).unwrap();
                        Instance {
                            compute_slices: p.compute_slices,
                            memory_slices: p.memory_slices,
                        }
                    })
                    .collect();
                check_layout(&instances, 7, 8)
                    .unwrap_or_else(|e| panic!("{} {layout:?}: {e}", model.table));
            }
        }
    }

    #[test]
    fn a_fleet_has_6_to_12_teams_and_the_requested_gpus_in_nodes_of_four() {
        for seed in 0..20 {
            let f = SimFleet::generate(seed, 18);
            assert!((6..=12).contains(&f.teams.len()));
            assert_eq!(f.nodes.iter().map(|n| n.gpus.len()).sum::<usize>(), 18);
            assert_eq!(f.nodes.len(), 5);
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_fleet_and_another_seed_another() {
        let a = SimFleet::generate(7, 40);
        let b = SimFleet::generate(7, 40);
        let c = SimFleet::generate(8, 40);
        let uuids = |f: &SimFleet| {
            f.nodes
                .iter()
                .flat_map(|n| {
                    n.gpus
                        .iter()
                        .flat_map(|g| g.slices.iter().map(|s| s.report.uuid.clone()))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(uuids(&a), uuids(&b));
        assert_ne!(uuids(&a), uuids(&c));
    }

    #[test]
    fn a_large_fleet_mixes_every_slice_kind_and_model() {
        let f = SimFleet::generate(1, 200);
        let mut kinds = std::collections::BTreeSet::new();
        let mut models = std::collections::BTreeSet::new();
        for g in f.nodes.iter().flat_map(|n| &n.gpus) {
            models.insert(g.report.model.clone());
            for s in &g.slices {
                kinds.insert(s.report.kind.clone());
            }
        }
        assert_eq!(kinds.len(), 5, "{kinds:?}");
        assert_eq!(models.len(), 3, "{models:?}");
    }
}
