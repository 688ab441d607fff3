//! NVIDIA dcgm-exporter's page, written as the exporter writes it (its `render_metrics.go` template
//! and `transformation/kubernetes.go`, read at 4.5.3-4.8.2 and after the `hostname` rename of
//! 4.6.0): per family a `# HELP` and `# TYPE` line, then a series per GPU (or, on a MIG GPU, per
//! GPU instance) with the labels `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, then
//! `GPU_I_PROFILE` and `GPU_I_ID` on a MIG instance, `Hostname` (or `hostname`),
//! `DCGM_FI_DRIVER_VERSION`, and the consumer's `container`, `namespace`, `pod`, `pod_uid`, `vgpu` in
//! that order; integers as integers, ratios with six decimals, no timestamps.
//!
//! A held device's series carry its consumer. With `--kubernetes-virtual-gpus`, every series of a
//! shared GPU is copied once per consumer with the device's figure and the consumer's `vgpu`, except
//! `DCGM_FI_DEV_FB_USED` and `DCGM_FI_DEV_GPU_UTIL`, which keep the device's series without a
//! consumer and add one per consumer with its own figure (and `pod_uid`).
//!
//! The tests serve these pages to the `dcgm` source and to a real Prometheus; the benchmarks parse
//! them at fleet size.

use std::fmt::Write;

use crate::collector::source::{Inventory, Reading};

/// A pod holding a device.
#[derive(Debug, Clone, PartialEq)]
pub struct ExporterPod {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub uid: String,
    /// The replica of a time-shared GPU it holds.
    pub vgpu: Option<u32>,
    /// Its own memory (MiB) and SM utilisation (%), from NVML's per-process data: only with
    /// virtual GPUs, and only on a shared GPU (on a MIG instance, memory only).
    pub own: Option<(u64, u32)>,
}

/// A whole GPU's or a MIG instance's figures and consumers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExporterDevice {
    pub fb_used_mib: u64,
    pub fb_free_mib: u64,
    pub engine_active: f64,
    pub consumers: Vec<ExporterPod>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExporterInstance {
    pub gpu_instance_id: u32,
    pub profile: String,
    pub device: ExporterDevice,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExporterGpu {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    /// The GPU's own figures (a GPU not in MIG mode).
    pub device: ExporterDevice,
    /// Its GPU instances, when in MIG mode: then only they have series.
    pub instances: Vec<ExporterInstance>,
}

/// One node's page.
#[derive(Debug, Clone, PartialEq)]
pub struct ExporterPage {
    /// `Hostname` (up to 4.5.x) or `hostname` (4.6.0 and later).
    pub hostname_label: &'static str,
    pub hostname: String,
    /// `--kubernetes-virtual-gpus`.
    pub virtual_gpus: bool,
    pub gpus: Vec<ExporterGpu>,
}

/// The families a default dcgm-exporter serves, with their help text, type and a figure for a
/// device that is not one slicemeter reads (the page's bulk, which the reader skips).
const OTHER_FAMILIES: [(&str, &str, &str, &str); 14] = [
    (
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        "gauge",
        "1980",
    ),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock frequency (in MHz).",
        "gauge",
        "2619",
    ),
    (
        "DCGM_FI_DEV_MEMORY_TEMP",
        "Memory temperature (in C).",
        "gauge",
        "41",
    ),
    (
        "DCGM_FI_DEV_GPU_TEMP",
        "GPU temperature (in C).",
        "gauge",
        "37",
    ),
    (
        "DCGM_FI_DEV_POWER_USAGE",
        "Power draw (in W).",
        "gauge",
        "312.449000",
    ),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        "counter",
        "8735212993",
    ),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Total number of PCIe retries.",
        "counter",
        "0",
    ),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        "gauge",
        "12",
    ),
    (
        "DCGM_FI_DEV_ENC_UTIL",
        "Encoder utilization (in %).",
        "gauge",
        "0",
    ),
    (
        "DCGM_FI_DEV_DEC_UTIL",
        "Decoder utilization (in %).",
        "gauge",
        "0",
    ),
    (
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered.",
        "gauge",
        "0",
    ),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "Total number of NVLink bandwidth counters for all lanes.",
        "counter",
        "0",
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "gauge",
        "0.081532",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "gauge",
        "0.190412",
    ),
];

/// The families slicemeter reads.
const FB_FREE: (&str, &str) = ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).");
const FB_USED: (&str, &str) = ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).");
const GPU_UTIL: (&str, &str) = ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).");
const ENGINE: (&str, &str) = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "Ratio of time the graphics engine is active.",
);

/// A family's series lines: its name, the figure they show, and what follows each value (a
/// timestamp, in an OpenMetrics file).
struct Line<'a> {
    name: &'a str,
    figure: Figure,
    suffix: &'a str,
}

/// Which figure of a device a family shows.
#[derive(Clone, Copy, PartialEq)]
enum Figure {
    Used,
    Free,
    Util,
    Engine,
    Fixed(&'static str),
}

impl ExporterPage {
    /// The families, with their help text, type and figure.
    fn families() -> Vec<(&'static str, &'static str, &'static str, Figure)> {
        [
            (FB_FREE.0, FB_FREE.1, "gauge", Figure::Free),
            (FB_USED.0, FB_USED.1, "gauge", Figure::Used),
            (GPU_UTIL.0, GPU_UTIL.1, "gauge", Figure::Util),
            (ENGINE.0, ENGINE.1, "gauge", Figure::Engine),
        ]
        .into_iter()
        .chain(
            OTHER_FAMILIES
                .iter()
                .map(|&(n, h, t, v)| (n, h, t, Figure::Fixed(v))),
        )
        .collect()
    }

    /// The page's text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(1024 + 9_000 * self.gpus.len());
        for (name, help, kind, figure) in Self::families() {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            self.family(&mut out, name, figure, "");
        }
        out
    }

    /// The `# HELP` and `# TYPE` lines of family `name`, for an OpenMetrics file (`promtool tsdb
    /// create-blocks-from openmetrics`) that holds its samples over time.
    pub fn openmetrics_head(out: &mut String, name: &str) {
        if let Some((name, help, kind, _)) = Self::families().into_iter().find(|f| f.0 == name) {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
        }
    }

    /// Family `name`'s series lines, each stamped `unix_seconds` (OpenMetrics' unit).
    pub fn openmetrics_samples(&self, out: &mut String, name: &str, unix_seconds: i64) {
        if let Some((name, _, _, figure)) = Self::families().into_iter().find(|f| f.0 == name) {
            self.family(out, name, figure, &format!(" {unix_seconds}"));
        }
    }

    fn family(&self, out: &mut String, name: &str, figure: Figure, suffix: &str) {
        let line = Line {
            name,
            figure,
            suffix,
        };
        for g in &self.gpus {
            if g.instances.is_empty() {
                self.device(out, &line, g, None, &g.device);
            } else if figure != Figure::Util {
                // Utilisation is not measured per GPU instance: no MIG series.
                for i in &g.instances {
                    self.device(out, &line, g, Some(i), &i.device);
                }
            }
        }
    }

    fn device(
        &self,
        out: &mut String,
        &Line {
            name,
            figure,
            suffix,
        }: &Line<'_>,
        g: &ExporterGpu,
        instance: Option<&ExporterInstance>,
        d: &ExporterDevice,
    ) {
        let value = |d: &ExporterDevice| match figure {
            Figure::Used => d.fb_used_mib.to_string(),
            Figure::Free => d.fb_free_mib.to_string(),
            Figure::Util => ((d.engine_active * 100.0).round() as u32).to_string(),
            Figure::Engine => format!("{:.6}", d.engine_active),
            Figure::Fixed(v) => v.to_owned(),
        };
        let base = |out: &mut String| {
            let _ = write!(
                out,
                "{name}{{gpu=\"{}\",UUID=\"{}\",pci_bus_id=\"00000000:{:02X}:00.0\",device=\"nvidia{}\",modelName=\"{}\",",
                g.index,
                g.uuid,
                0x18 + g.index * 0x10,
                g.index,
                g.model
            );
            if let Some(i) = instance {
                let _ = write!(
                    out,
                    "GPU_I_PROFILE=\"{}\",GPU_I_ID=\"{}\",",
                    i.profile, i.gpu_instance_id
                );
            }
            let _ = write!(
                out,
                "{}=\"{}\",DCGM_FI_DRIVER_VERSION=\"570.133.20\"",
                self.hostname_label, self.hostname
            );
        };
        let per_process = self.virtual_gpus
            && match figure {
                Figure::Used => d.consumers.iter().any(|h| h.own.is_some()),
                Figure::Util => instance.is_none() && d.consumers.iter().any(|h| h.own.is_some()),
                _ => false,
            };
        let consumers: &[ExporterPod] = if self.virtual_gpus {
            &d.consumers
        } else {
            // Without virtual GPUs the exporter maps a device to one pod.
            &d.consumers[..d.consumers.len().min(1)]
        };
        if consumers.is_empty() || per_process {
            base(out);
            let _ = writeln!(out, "}} {}{suffix}", value(d));
        }
        for h in consumers {
            base(out);
            let own = if per_process {
                let (memory, util) = h.own.unwrap_or((0, 0));
                Some(match figure {
                    Figure::Used => memory.to_string(),
                    _ => util.to_string(),
                })
            } else {
                None
            };
            let _ = write!(
                out,
                ",container=\"{}\",namespace=\"{}\",pod=\"{}\"",
                h.container, h.namespace, h.pod
            );
            if per_process {
                let _ = write!(out, ",pod_uid=\"{}\"", h.uid);
            }
            if let Some(v) = h.vgpu.filter(|_| self.virtual_gpus) {
                let _ = write!(out, ",vgpu=\"{v}\"");
            }
            let _ = writeln!(out, "}} {}{suffix}", own.unwrap_or_else(|| value(d)));
        }
    }

    /// The page a node of the simulated fleet would serve at one sample: its MIG instances as GPU
    /// instances, its other GPUs as whole GPUs, their slices' consumers as pods (a time-sliced,
    /// MPS or vGPU GPU's as consumers of virtual GPUs with their own figures).
    pub fn of_sim(
        hostname_label: &'static str,
        node: &str,
        inventory: &Inventory,
        readings: &[Reading],
    ) -> ExporterPage {
        let mib = |b: u64| b >> 20;
        let pod = |r: &Reading, vgpu: Option<u32>| {
            r.consumer.as_ref().map(|h| ExporterPod {
                namespace: h.namespace.clone().unwrap_or_else(|| "default".into()),
                pod: h
                    .pod
                    .clone()
                    .or_else(|| h.job_id.clone())
                    .unwrap_or_else(|| "job".into()),
                container: h.container.clone().unwrap_or_else(|| "main".into()),
                uid: format!("uid-{}", h.pod.as_deref().unwrap_or("job")),
                vgpu,
                own: Some((
                    mib(r.memory_used_bytes),
                    (r.compute_active_ppm.unwrap_or(0) / 10_000).min(100),
                )),
            })
        };
        let mut gpus = Vec::new();
        for (index, g) in inventory.gpus.iter().enumerate() {
            let total = mib(g.memory_bytes.max(0) as u64);
            let slices: Vec<(usize, &crate::domain::batch::SliceReport)> = inventory
                .slices
                .iter()
                .enumerate()
                .filter(|(_, s)| s.gpu_uuid == g.uuid)
                .collect();
            let reading = |i: usize| readings.iter().find(|r| r.slice == i);
            let mut gpu = ExporterGpu {
                index: index as u32,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                device: ExporterDevice::default(),
                instances: Vec::new(),
            };
            if g.mig_enabled {
                for (i, s) in &slices {
                    let r = reading(*i);
                    let used = r.map_or(0, |r| mib(r.memory_used_bytes));
                    let size = mib(s.memory_bytes.unwrap_or(0).max(0) as u64);
                    gpu.instances.push(ExporterInstance {
                        gpu_instance_id: s.gpu_instance_id.unwrap_or(0) as u32,
                        profile: s.profile.clone().unwrap_or_default(),
                        device: ExporterDevice {
                            fb_used_mib: used,
                            fb_free_mib: size.saturating_sub(used),
                            engine_active: r
                                .and_then(|r| r.compute_active_ppm)
                                .map_or(0.0, |p| f64::from(p) / 1e6),
                            consumers: r
                                .and_then(|r| pod(r, None))
                                .map(|mut p| {
                                    p.own = None;
                                    vec![p]
                                })
                                .unwrap_or_default(),
                        },
                    });
                }
            } else {
                let mut d = ExporterDevice::default();
                let shared = slices.len() > 1;
                for (k, (i, _)) in slices.iter().enumerate() {
                    let Some(r) = reading(*i) else { continue };
                    d.fb_used_mib += mib(r.memory_used_bytes);
                    d.engine_active += r.compute_active_ppm.map_or(0.0, |p| f64::from(p) / 1e6);
                    if let Some(mut p) = pod(r, shared.then_some(k as u32)) {
                        if !shared {
                            p.own = None;
                        }
                        d.consumers.push(p);
                    }
                }
                d.fb_used_mib = d.fb_used_mib.min(total);
                d.fb_free_mib = total - d.fb_used_mib;
                d.engine_active = d.engine_active.min(1.0);
                gpu.device = d;
            }
            gpus.push(gpu);
        }
        ExporterPage {
            hostname_label,
            hostname: node.to_owned(),
            virtual_gpus: true,
            gpus,
        }
    }
}

#[cfg(test)]
mod tests;
