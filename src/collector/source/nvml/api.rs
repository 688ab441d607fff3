//! The NVML calls the collector makes, behind a trait: [`super::real::RealNvml`] makes them through
//! `nvml-wrapper` on a machine with the NVIDIA driver; [`super::replay::ReplayNvml`] answers them from
//! recorded shapes of real GPUs, so that everything above is tested without one.

/// A GPU as NVML describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuDesc {
    pub index: u32,
    pub uuid: String,
    /// As NVML names it, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    pub memory_bytes: u64,
    /// MIG mode now, and after the next reset; `None` on GPUs without MIG.
    pub mig: Option<MigMode>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigMode {
    pub current: bool,
    pub pending: bool,
}

/// A MIG device (a compute instance of a GPU instance) as NVML describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct MigDesc {
    /// Its index under the parent GPU.
    pub index: u32,
    pub uuid: String,
    /// As NVML names the MIG device, e.g. `NVIDIA H100 80GB HBM3 MIG 3g.40gb`.
    pub name: String,
    pub gpu_instance_id: u32,
    /// `attributes()`: the GPU instance's slices (compute slices of the profile).
    pub gpu_instance_slices: u32,
    pub memory_bytes: u64,
    pub multiprocessors: u32,
}

/// A process using a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuProcess {
    pub pid: u32,
    pub used_memory_bytes: u64,
    /// On a MIG GPU, the GPU instance the process runs in.
    pub gpu_instance_id: Option<u32>,
}

/// Why an NVML call failed, in the terms the collector acts on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NvmlFailure {
    #[error("NVML is not available: install the NVIDIA driver, or run with --source sim ({0})")]
    Unavailable(String),
    #[error(
        "NVML refused access (permission denied): run the collector as root or with access to /dev/nvidia*"
    )]
    Permission,
    #[error("the GPU has fallen off the bus")]
    GpuLost,
    /// The GPU or driver cannot give this figure.
    #[error("not supported by this GPU or driver")]
    NotSupported,
    #[error("NVML error: {0}")]
    Other(String),
}

/// What the collector asks NVML. Indexes are NVML device indexes.
pub trait NvmlApi: Send {
    fn gpus(&mut self) -> Result<Vec<GpuDesc>, NvmlFailure>;
    /// The MIG devices of a GPU in MIG mode.
    fn mig_devices(&mut self, gpu: u32) -> Result<Vec<MigDesc>, NvmlFailure>;
    /// Memory used, of the GPU or of one of its MIG devices.
    fn memory_used(&mut self, gpu: u32, mig: Option<u32>) -> Result<u64, NvmlFailure>;
    /// SM activity since the previous call for the same GPU (or GPU instance), 0 to 1: GPM on Hopper
    /// and newer (per GPU instance on MIG), `utilization_rates` on whole GPUs. `Ok(None)` on the first
    /// call, before there is an interval; `Err(NotSupported)` where it cannot be measured.
    fn sm_activity(
        &mut self,
        gpu: u32,
        gpu_instance: Option<u32>,
    ) -> Result<Option<f64>, NvmlFailure>;
    /// Compute and MPS processes on a GPU.
    fn processes(&mut self, gpu: u32) -> Result<Vec<GpuProcess>, NvmlFailure>;
    /// SM use per process since the previous call, 0 to 1; empty when there were no samples.
    fn process_activity(&mut self, gpu: u32) -> Result<Vec<(u32, f64)>, NvmlFailure>;
}
