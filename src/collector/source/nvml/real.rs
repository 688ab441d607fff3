//! [`NvmlApi`] through `nvml-wrapper`, which loads `libnvidia-ml.so.1` at run time: the binary builds
//! and runs on machines without the driver, and says so plainly when asked to measure.

use std::collections::HashMap;

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};

use super::api::{GpuDesc, GpuProcess, MigDesc, MigMode, NvmlApi, NvmlFailure};

fn failure(e: NvmlError) -> NvmlFailure {
    match e {
        NvmlError::LibloadingError(e) => NvmlFailure::Unavailable(e.to_string()),
        NvmlError::LibraryNotFound | NvmlError::DriverNotLoaded => {
            NvmlFailure::Unavailable(e.to_string())
        }
        NvmlError::NoPermission => NvmlFailure::Permission,
        NvmlError::GpuLost => NvmlFailure::GpuLost,
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => NvmlFailure::NotSupported,
        other => NvmlFailure::Other(other.to_string()),
    }
}

pub struct RealNvml {
    /// NVML lives as long as the collector: leaked once, so that device handles and GPM samples,
    /// which borrow it, can be kept between calls.
    nvml: &'static Nvml,
    /// The previous GPM sample per (GPU, GPU instance).
    gpm: HashMap<(u32, Option<u32>), GpmSample<'static>>,
    /// The newest process-utilisation timestamp seen per GPU.
    last_process_sample: HashMap<u32, u64>,
}

// SAFETY: GpmSample is Send; NVML handles may be used from any thread, one call at a time, which
// `&mut self` guarantees.
unsafe impl Send for RealNvml {}

impl RealNvml {
    pub fn init() -> Result<RealNvml, NvmlFailure> {
        let nvml = Nvml::init().map_err(failure)?;
        Ok(RealNvml {
            nvml: Box::leak(Box::new(nvml)),
            gpm: HashMap::new(),
            last_process_sample: HashMap::new(),
        })
    }

    fn device(&self, index: u32) -> Result<nvml_wrapper::Device<'static>, NvmlFailure> {
        self.nvml.device_by_index(index).map_err(failure)
    }

    /// `nvmlDeviceGetGpuInstanceId` of a MIG device handle, which nvml-wrapper does not wrap.
    fn gpu_instance_id(&self, mig: &nvml_wrapper::Device<'static>) -> Result<u32, NvmlFailure> {
        let f = self
            .nvml
            .lib()
            .nvmlDeviceGetGpuInstanceId
            .as_ref()
            .map_err(|_| NvmlFailure::NotSupported)?;
        let mut id: std::os::raw::c_uint = 0;
        // SAFETY: a valid MIG device handle and a pointer to a writable c_uint, as NVML asks.
        let rc = unsafe { f(mig.handle(), &mut id) };
        if rc == 0 {
            Ok(id)
        } else {
            Err(NvmlFailure::Other(format!(
                "nvmlDeviceGetGpuInstanceId returned {rc}"
            )))
        }
    }
}

impl NvmlApi for RealNvml {
    fn gpus(&mut self) -> Result<Vec<GpuDesc>, NvmlFailure> {
        let count = self.nvml.device_count().map_err(failure)?;
        let mut out = Vec::with_capacity(count as usize);
        for index in 0..count {
            let d = self.device(index)?;
            let mig = match d.mig_mode() {
                Ok(m) => Some(MigMode {
                    current: m.current == 1,
                    pending: m.pending == 1,
                }),
                Err(NvmlError::NotSupported) => None,
                Err(e) => return Err(failure(e)),
            };
            out.push(GpuDesc {
                index,
                uuid: d.uuid().map_err(failure)?,
                name: d.name().map_err(failure)?,
                memory_bytes: d.memory_info().map_err(failure)?.total,
                mig,
            });
        }
        Ok(out)
    }

    fn mig_devices(&mut self, gpu: u32) -> Result<Vec<MigDesc>, NvmlFailure> {
        let d = self.device(gpu)?;
        let max = d.mig_device_count().map_err(failure)?;
        let mut out = Vec::new();
        for index in 0..max {
            let m = match d.mig_device_by_index(index) {
                Ok(m) => m,
                // Indexes without an instance behind them.
                Err(NvmlError::NotFound) | Err(NvmlError::InvalidArg) => continue,
                Err(e) => return Err(failure(e)),
            };
            let attributes = m.attributes().map_err(failure)?;
            out.push(MigDesc {
                index,
                uuid: m.uuid().map_err(failure)?,
                name: m.name().map_err(failure)?,
                gpu_instance_id: self.gpu_instance_id(&m)?,
                gpu_instance_slices: attributes.gpu_instance_slice_count,
                memory_bytes: m.memory_info().map_err(failure)?.total,
                multiprocessors: attributes.multiprocessor_count,
            });
        }
        Ok(out)
    }

    fn memory_used(&mut self, gpu: u32, mig: Option<u32>) -> Result<u64, NvmlFailure> {
        let d = self.device(gpu)?;
        let d = match mig {
            Some(i) => d.mig_device_by_index(i).map_err(failure)?,
            None => d,
        };
        Ok(d.memory_info().map_err(failure)?.used)
    }

    fn sm_activity(
        &mut self,
        gpu: u32,
        gpu_instance: Option<u32>,
    ) -> Result<Option<f64>, NvmlFailure> {
        let d = self.device(gpu)?;
        let gpm = d.gpm_support().unwrap_or(false);
        if !gpm {
            // Without GPM there is no per-instance figure; a whole GPU has utilization_rates.
            return match gpu_instance {
                Some(_) => Err(NvmlFailure::NotSupported),
                None => Ok(Some(
                    f64::from(d.utilization_rates().map_err(failure)?.gpu) / 100.0,
                )),
            };
        }
        let sample = match gpu_instance {
            Some(gi) => d.gpm_mig_sample(gi),
            None => d.gpm_sample(),
        }
        .map_err(failure)?;
        let Some(previous) = self.gpm.insert((gpu, gpu_instance), sample) else {
            return Ok(None);
        };
        let current = &self.gpm[&(gpu, gpu_instance)];
        let results = gpm_metrics_get(self.nvml, &previous, current, &[GpmMetricId::SmUtil])
            .map_err(failure)?;
        match results.into_iter().next() {
            Some(Ok(r)) => Ok(Some((r.value / 100.0).clamp(0.0, 1.0))),
            Some(Err(e)) => Err(failure(e)),
            None => Err(NvmlFailure::NotSupported),
        }
    }

    fn processes(&mut self, gpu: u32) -> Result<Vec<GpuProcess>, NvmlFailure> {
        let d = self.device(gpu)?;
        let mut all = d.running_compute_processes().map_err(failure)?;
        match d.mps_running_compute_processes() {
            Ok(mps) => all.extend(mps),
            Err(NvmlError::NotSupported) | Err(NvmlError::FunctionNotFound) => {}
            Err(e) => return Err(failure(e)),
        }
        Ok(all
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => b,
                    UsedGpuMemory::Unavailable => 0,
                },
                gpu_instance_id: p.gpu_instance_id,
            })
            .collect())
    }

    fn process_activity(&mut self, gpu: u32) -> Result<Vec<(u32, f64)>, NvmlFailure> {
        let d = self.device(gpu)?;
        let since = self.last_process_sample.get(&gpu).copied();
        let samples = match d.process_utilization_stats(since) {
            Ok(s) => s,
            // "No samples since then" is an empty answer, not an error.
            Err(NvmlError::NotFound) => Vec::new(),
            Err(e) => return Err(failure(e)),
        };
        if let Some(newest) = samples.iter().map(|s| s.timestamp).max() {
            self.last_process_sample.insert(gpu, newest);
        }
        let mut by_pid: HashMap<u32, (u64, u32)> = HashMap::new();
        for s in samples {
            let e = by_pid.entry(s.pid).or_default();
            e.0 += u64::from(s.sm_util);
            e.1 += 1;
        }
        Ok(by_pid
            .into_iter()
            .map(|(pid, (sum, n))| (pid, (sum as f64 / f64::from(n) / 100.0).clamp(0.0, 1.0)))
            .collect())
    }
}
