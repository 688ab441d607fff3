//! An [`NvmlApi`] that answers from recorded shapes of real GPUs (names, uuids, MIG layouts,
//! GPU-instance ids, memory sizes as the driver reports them, GPM support), with steady readings: the
//! collector's tests run on machines without a GPU, against the same code paths.

use std::collections::HashSet;

use super::api::{GpuDesc, GpuProcess, MigDesc, MigMode, NvmlApi, NvmlFailure};
use crate::domain::profiles;

/// One recorded GPU and what it reads.
#[derive(Debug, Clone)]
pub struct ReplayGpu {
    pub desc: GpuDesc,
    pub migs: Vec<MigDesc>,
    /// Hopper and newer have GPM: SM activity per GPU instance.
    pub gpm: bool,
    pub memory_used: u64,
    /// Memory used per MIG device, in `migs` order.
    pub mig_memory_used: Vec<u64>,
    /// SM activity of the whole GPU, and per MIG device.
    pub activity: f64,
    pub mig_activity: Vec<f64>,
    pub processes: Vec<GpuProcess>,
    pub process_activity: Vec<(u32, f64)>,
    /// Falls off the bus once more than this many `memory_used` calls were made on it.
    pub lost_after: Option<u32>,
}

fn mig(
    table: &str,
    gpu: &str,
    name: &str,
    profile: &str,
    index: u32,
    gpu_instance_id: u32,
) -> MigDesc {
    let p = profiles::by_name(table, profile).expect("a profile of the table");
    MigDesc {
        index,
        uuid: format!("MIG-{gpu}-{index:02}"),
        name: format!("{name} MIG {profile}"),
        gpu_instance_id,
        gpu_instance_slices: u32::from(p.compute_slices),
        memory_bytes: p.memory_bytes(),
        multiprocessors: p.sm,
    }
}

impl ReplayGpu {
    fn gpu(index: u32, uuid: &str, name: &str, memory_bytes: u64, mig: Option<bool>) -> GpuDesc {
        GpuDesc {
            index,
            uuid: uuid.to_owned(),
            name: name.to_owned(),
            memory_bytes,
            mig: mig.map(|on| MigMode {
                current: on,
                pending: on,
            }),
        }
    }

    /// An H100 SXM5 80GB cut with `nvidia-smi mig -cgi 9,19,19`: a 3g.40gb (GPU instance 2) and two
    /// 1g.10gb (instances 9 and 10), as `nvidia-smi mig -lgi` lists them; GPM per instance.
    pub fn h100_cgi_9_19_19(index: u32, uuid: &str) -> ReplayGpu {
        let name = "NVIDIA H100 80GB HBM3";
        let t = "H100-SXM5-80GB";
        ReplayGpu {
            desc: Self::gpu(index, uuid, name, 85_520_809_984, Some(true)),
            migs: vec![
                mig(t, uuid, name, "3g.40gb", 0, 2),
                mig(t, uuid, name, "1g.10gb", 1, 9),
                mig(t, uuid, name, "1g.10gb", 2, 10),
            ],
            gpm: true,
            memory_used: 0,
            mig_memory_used: vec![20 << 30, 4 << 30, 1 << 30],
            activity: 0.0,
            mig_activity: vec![0.25, 0.5, 0.0],
            processes: Vec::new(),
            process_activity: Vec::new(),
            lost_after: None,
        }
    }

    /// An H200 141GB cut into seven 1g.18gb (instances 7 to 13).
    pub fn h200_7x1g(index: u32, uuid: &str) -> ReplayGpu {
        let name = "NVIDIA H200";
        let t = "H200-141GB";
        ReplayGpu {
            desc: Self::gpu(index, uuid, name, 150_754_820_096, Some(true)),
            migs: (0..7)
                .map(|i| mig(t, uuid, name, "1g.18gb", i, 7 + i))
                .collect(),
            gpm: true,
            memory_used: 0,
            mig_memory_used: vec![8 << 30; 7],
            activity: 0.0,
            mig_activity: vec![0.6; 7],
            processes: Vec::new(),
            process_activity: Vec::new(),
            lost_after: None,
        }
    }

    /// An A100 SXM4 80GB in MIG mode with a 4g.40gb and a 3g.40gb: Ampere has no GPM, so compute
    /// activity per instance cannot be measured.
    pub fn a100_mig_no_gpm(index: u32, uuid: &str) -> ReplayGpu {
        let name = "NVIDIA A100-SXM4-80GB";
        let t = "A100-SXM4-80GB";
        ReplayGpu {
            desc: Self::gpu(index, uuid, name, 85_899_345_920, Some(true)),
            migs: vec![
                mig(t, uuid, name, "4g.40gb", 0, 1),
                mig(t, uuid, name, "3g.40gb", 1, 2),
            ],
            gpm: false,
            memory_used: 0,
            mig_memory_used: vec![30 << 30, 10 << 30],
            activity: 0.0,
            mig_activity: vec![0.0, 0.0],
            processes: Vec::new(),
            process_activity: Vec::new(),
            lost_after: None,
        }
    }

    /// A whole H100 shared by time-slicing, with four processes (pids 4101 to 4104).
    pub fn timesliced_4_processes(index: u32, uuid: &str) -> ReplayGpu {
        ReplayGpu {
            desc: Self::gpu(
                index,
                uuid,
                "NVIDIA H100 80GB HBM3",
                85_520_809_984,
                Some(false),
            ),
            migs: Vec::new(),
            gpm: true,
            memory_used: (6 + 10 + 3 + 1) << 30,
            mig_memory_used: Vec::new(),
            activity: 0.7,
            mig_activity: Vec::new(),
            processes: [(4101, 6u64), (4102, 10), (4103, 3), (4104, 1)]
                .into_iter()
                .map(|(pid, gib)| GpuProcess {
                    pid,
                    used_memory_bytes: gib << 30,
                    gpu_instance_id: None,
                })
                .collect(),
            process_activity: vec![(4101, 0.30), (4102, 0.25), (4103, 0.10), (4104, 0.05)],
            lost_after: None,
        }
    }

    /// A whole GPU used by one process.
    pub fn whole(index: u32, uuid: &str, pid: u32) -> ReplayGpu {
        ReplayGpu {
            desc: Self::gpu(
                index,
                uuid,
                "NVIDIA H100 80GB HBM3",
                85_520_809_984,
                Some(false),
            ),
            migs: Vec::new(),
            gpm: true,
            memory_used: 40 << 30,
            mig_memory_used: Vec::new(),
            activity: 0.9,
            mig_activity: Vec::new(),
            processes: vec![GpuProcess {
                pid,
                used_memory_bytes: 40 << 30,
                gpu_instance_id: None,
            }],
            process_activity: vec![(pid, 0.9)],
            lost_after: None,
        }
    }
}

/// Recorded GPUs behind [`NvmlApi`].
#[derive(Debug, Clone)]
pub struct ReplayNvml {
    gpus: Vec<ReplayGpu>,
    /// No driver: every call fails as `libnvidia-ml.so.1` missing would.
    driver: bool,
    primed: HashSet<(u32, Option<u32>)>,
    reads: Vec<u32>,
}

impl ReplayNvml {
    pub fn new(gpus: Vec<ReplayGpu>) -> ReplayNvml {
        let reads = vec![0; gpus.len()];
        ReplayNvml {
            gpus,
            driver: true,
            primed: HashSet::new(),
            reads,
        }
    }

    /// A machine without the NVIDIA driver.
    pub fn without_driver() -> ReplayNvml {
        ReplayNvml {
            driver: false,
            ..ReplayNvml::new(Vec::new())
        }
    }

    fn gpu(&mut self, index: u32) -> Result<&mut ReplayGpu, NvmlFailure> {
        if !self.driver {
            return Err(NvmlFailure::Unavailable(
                "libnvidia-ml.so.1: cannot open shared object file".into(),
            ));
        }
        let i = self
            .gpus
            .iter()
            .position(|g| g.desc.index == index)
            .ok_or_else(|| NvmlFailure::Other(format!("no GPU {index}")))?;
        let lost = self.gpus[i].lost_after.is_some_and(|n| self.reads[i] > n);
        if lost {
            return Err(NvmlFailure::GpuLost);
        }
        Ok(&mut self.gpus[i])
    }
}

impl NvmlApi for ReplayNvml {
    fn gpus(&mut self) -> Result<Vec<GpuDesc>, NvmlFailure> {
        if !self.driver {
            return Err(NvmlFailure::Unavailable(
                "libnvidia-ml.so.1: cannot open shared object file".into(),
            ));
        }
        Ok(self.gpus.iter().map(|g| g.desc.clone()).collect())
    }

    fn mig_devices(&mut self, gpu: u32) -> Result<Vec<MigDesc>, NvmlFailure> {
        Ok(self.gpu(gpu)?.migs.clone())
    }

    fn memory_used(&mut self, gpu: u32, mig: Option<u32>) -> Result<u64, NvmlFailure> {
        let g = self.gpu(gpu)?;
        let used = match mig {
            Some(m) => g.mig_memory_used[m as usize],
            None => g.memory_used,
        };
        if let Some(i) = self.gpus.iter().position(|g| g.desc.index == gpu) {
            self.reads[i] += 1;
        }
        Ok(used)
    }

    fn sm_activity(
        &mut self,
        gpu: u32,
        gpu_instance: Option<u32>,
    ) -> Result<Option<f64>, NvmlFailure> {
        let g = self.gpu(gpu)?.clone();
        let value = match gpu_instance {
            Some(_) if !g.gpm => return Err(NvmlFailure::NotSupported),
            Some(gi) => g
                .migs
                .iter()
                .position(|m| m.gpu_instance_id == gi)
                .map(|i| g.mig_activity[i])
                .ok_or(NvmlFailure::NotSupported)?,
            None => g.activity,
        };
        // GPM needs two samples: the first call only takes one.
        if g.gpm && self.primed.insert((gpu, gpu_instance)) {
            return Ok(None);
        }
        Ok(Some(value))
    }

    fn processes(&mut self, gpu: u32) -> Result<Vec<GpuProcess>, NvmlFailure> {
        Ok(self.gpu(gpu)?.processes.clone())
    }

    fn process_activity(&mut self, gpu: u32) -> Result<Vec<(u32, f64)>, NvmlFailure> {
        Ok(self.gpu(gpu)?.process_activity.clone())
    }
}
