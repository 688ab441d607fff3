//! One scrape's series read into what slicemeter bills: per node, its GPUs and their devices (the
//! whole GPU, or each MIG instance), who holds each and what it occupies. The same reading serves a
//! live page (`collect --source dcgm`) and Prometheus' samples of one instant (`import
//! prometheus`), so that both make the same inventory and the same readings of the same samples.
//!
//! How dcgm-exporter labels its series (its `render_metrics.go` and `transformation/`): a GPU by
//! `UUID` and `modelName`; a MIG instance by its parent GPU's `UUID` plus `GPU_I_ID` and
//! `GPU_I_PROFILE` (no MIG uuid, so slicemeter names it `<UUID>::gi<GPU_I_ID>/<GPU_I_PROFILE>`); the
//! node by `Hostname` (`hostname` since 4.6.0); a consumer by `namespace`, `pod`, `container` (and
//! `pod_uid`, `dra_claim_*`); a time-shared GPU's consumers (with `--kubernetes-virtual-gpus`) by a
//! copy of each series per pod with `vgpu`, whose value is the device's, not the pod's. Since
//! 4.5.3 `DCGM_FI_DEV_FB_USED` and `DCGM_FI_DEV_GPU_UTIL` of a held device are the device's series
//! without a pod plus one per pod with the pod's own figure (from NVML's per-process data).

use std::collections::BTreeMap;

use super::page::{Metric, Series};
use super::refusal::{Refusal, Refused};
use crate::collector::source::nvml::Sharing;
use crate::domain::batch::{ConsumerReport, DraClaim, bounds};

/// Which labels name a series' consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerLabels {
    /// `namespace`, `pod`, `container` (a page read directly; `pod_namespace`, `pod_name`,
    /// `container_name` in the exporter's `-o` mode).
    Plain,
    /// `exported_namespace`, `exported_pod`, `exported_container`: a Prometheus that scraped the
    /// exporter without `honor_labels` renamed them, and its own `namespace` and `pod` name the
    /// exporter's pod, not a consumer.
    Exported,
}

/// How a scrape is read.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    pub consumers: ConsumerLabels,
    /// How the device plugin shares GPUs not in MIG mode.
    pub sharing: Sharing,
}

/// The figures of one device (a whole GPU or a MIG instance), per metric: the value of its series
/// without a consumer, and each consumer's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceSeen {
    /// The MIG profile (`GPU_I_PROFILE`); none for a whole GPU.
    pub profile: Option<String>,
    /// Per metric (in `Metric` order), its series without a consumer.
    pub plain: [Option<f64>; 5],
    /// Per consumer, per metric, its series.
    pub held: BTreeMap<SeriesConsumer, [Option<f64>; 5]>,
}

/// Who holds a device, as the labels say.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesConsumer {
    pub consumer: ConsumerReport,
    /// The replica of a time-shared GPU (`vgpu`), when the exporter knows it.
    pub vgpu: Option<u32>,
}

/// A GPU of a node and its devices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSeen {
    pub model: String,
    /// Its devices: `None` is the GPU itself (its series without `GPU_I_ID`), `Some(id)` a MIG
    /// instance.
    pub devices: BTreeMap<Option<u32>, DeviceSeen>,
}

/// One node's GPUs in one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeScrape {
    pub gpus: BTreeMap<String, GpuSeen>,
}

/// What a series names, read once from its labels: where its figure belongs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    pub metric: Metric,
    pub node: String,
    pub gpu: String,
    pub model: String,
    /// A MIG instance's GPU instance id and profile.
    pub instance: Option<(u32, String)>,
    pub consumer: Option<SeriesConsumer>,
}

impl SeriesKey {
    /// The series as a log line names it.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}{{node={},UUID={}",
            self.metric.name(),
            self.node,
            self.gpu
        );
        if let Some((id, profile)) = &self.instance {
            s.push_str(&format!(",GPU_I_ID={id},GPU_I_PROFILE={profile}"));
        }
        if let Some(h) = &self.consumer {
            s.push_str(&format!(",holder={}", describe_consumer(&h.consumer)));
        }
        s.push('}');
        s
    }
}

/// Reads what a series names from its labels. A series without a node label is `default_node`'s
/// (a page read on the node itself), or refused when there is none.
pub fn key(
    metric: Metric,
    labels: &[(String, String)],
    options: &ReadOptions,
    default_node: Option<&str>,
) -> Result<SeriesKey, Refusal> {
    let s = Labelled { metric, labels };
    read_key(&s, options, default_node).map_err(|(reason, detail)| Refusal {
        reason,
        series: super::page::describe(metric.name(), labels),
        detail,
    })
}

/// Reads samples (each a series' key and its figure) into nodes. A figure out of its metric's
/// range is refused into `refused`.
pub fn nodes<'a>(
    samples: impl IntoIterator<Item = (&'a SeriesKey, f64)>,
    refused: &mut Vec<Refusal>,
) -> BTreeMap<String, NodeScrape> {
    let mut out: BTreeMap<String, NodeScrape> = BTreeMap::new();
    for (k, v) in samples {
        if let Err((reason, detail)) = add(&mut out, k, v) {
            refused.push(Refusal {
                reason,
                series: k.describe(),
                detail,
            });
        }
    }
    out
}

/// Reads a page's series into nodes: [`key`] then [`nodes`].
pub fn page_nodes(
    series: &[Series],
    options: &ReadOptions,
    default_node: Option<&str>,
    refused: &mut Vec<Refusal>,
) -> BTreeMap<String, NodeScrape> {
    let mut keyed = Vec::with_capacity(series.len());
    for s in series {
        match key(s.metric, &s.labels, options, default_node) {
            Ok(k) => keyed.push((k, s.value)),
            Err(r) => refused.push(r),
        }
    }
    nodes(keyed.iter().map(|(k, v)| (k, *v)), refused)
}

/// A series' labels, as [`key`] reads them.
struct Labelled<'a> {
    metric: Metric,
    labels: &'a [(String, String)],
}

impl Labelled<'_> {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
}

/// The largest figure a memory series may have, in MiB: the contract's largest GPU.
const MAX_MIB: f64 = (bounds::MAX_GPU_MEMORY_BYTES >> 20) as f64;

fn check_value(metric: Metric, v: f64) -> Result<f64, (Refused, String)> {
    let (low, high) = match metric {
        Metric::FbUsed | Metric::FbFree | Metric::FbReserved => (0.0, MAX_MIB),
        // Six decimals of a ratio can round a hair past 1.
        Metric::EngineActive => (0.0, 1.000_001),
        Metric::GpuUtil => (0.0, 100.0),
    };
    if v.is_finite() && v >= low && v <= high {
        Ok(v.min(if metric == Metric::EngineActive {
            1.0
        } else {
            high
        }))
    } else {
        Err((
            Refused::BadValue,
            format!(
                "{v} is outside {low} to {high}, what {} can be",
                metric.name()
            ),
        ))
    }
}

/// The first of `names` the series has.
fn first<'s>(s: &'s Labelled<'_>, names: &[&str]) -> Option<&'s str> {
    names.iter().find_map(|n| s.label(n))
}

fn name_label(
    s: &Labelled<'_>,
    names: &[&str],
    what: &str,
) -> Result<Option<String>, (Refused, String)> {
    match first(s, names) {
        None => Ok(None),
        Some(v) => match crate::domain::text::check(v, bounds::MAX_NAME_CHARS) {
            Ok(()) => Ok(Some(v.to_owned())),
            Err(e) => Err((Refused::BadLabel, format!("its {what}: {e}"))),
        },
    }
}

fn consumer(
    s: &Labelled<'_>,
    options: &ReadOptions,
) -> Result<Option<SeriesConsumer>, (Refused, String)> {
    let (pod, namespace, container): (&[&str], &[&str], &[&str]) = match options.consumers {
        ConsumerLabels::Plain => (
            &["pod", "pod_name"],
            &["namespace", "pod_namespace"],
            &["container", "container_name"],
        ),
        ConsumerLabels::Exported => (
            &["exported_pod"],
            &["exported_namespace"],
            &["exported_container"],
        ),
    };
    let Some(pod) = name_label(s, pod, "pod")? else {
        return Ok(None);
    };
    let dra = match (
        name_label(s, &["dra_claim_namespace"], "DRA claim's namespace")?,
        name_label(s, &["dra_claim_name"], "DRA claim")?,
    ) {
        (Some(namespace), Some(name)) => Some(DraClaim {
            namespace,
            name,
            driver: name_label(s, &["dra_driver_name"], "DRA driver")?,
            pool: name_label(s, &["dra_pool_name"], "DRA pool")?,
            device: name_label(s, &["dra_device_name"], "DRA device")?,
        }),
        _ => None,
    };
    let vgpu = match s.label("vgpu") {
        None => None,
        Some(v) => Some(v.parse::<u32>().map_err(|_| {
            (
                Refused::BadLabel,
                format!("vgpu {:?} is not a replica number", super::page::cut(v, 40)),
            )
        })?),
    };
    Ok(Some(SeriesConsumer {
        consumer: ConsumerReport {
            namespace: name_label(s, namespace, "namespace")?,
            pod: Some(pod),
            container: name_label(s, container, "container")?,
            dra_claim: dra,
            ..ConsumerReport::default()
        },
        vgpu,
    }))
}

fn read_key(
    s: &Labelled<'_>,
    options: &ReadOptions,
    default_node: Option<&str>,
) -> Result<SeriesKey, (Refused, String)> {
    let uuid =
        first(s, &["UUID", "uuid"]).ok_or((Refused::NoUuid, "it has no UUID label".to_owned()))?;
    crate::domain::text::check(uuid, bounds::MAX_GPU_UUID_CHARS)
        .map_err(|e| (Refused::BadLabel, format!("its UUID: {e}")))?;
    let node = match first(s, &["Hostname", "hostname"]) {
        Some(n) if crate::domain::batch::is_node_name(n) => n,
        Some(n) => {
            return Err((
                Refused::BadLabel,
                format!("hostname {:?} is not a node name", super::page::cut(n, 80)),
            ));
        }
        None => default_node.ok_or((
            Refused::NoNode,
            "it has no Hostname or hostname label".to_owned(),
        ))?,
    };
    let model = s.label("modelName").ok_or((
        Refused::NoModel,
        "it has no modelName label: the GPU's geometry is unknown".to_owned(),
    ))?;
    crate::domain::text::check(model, bounds::MAX_MODEL_CHARS)
        .map_err(|e| (Refused::BadLabel, format!("its modelName: {e}")))?;
    let instance = match (s.label("GPU_I_ID"), s.label("GPU_I_PROFILE")) {
        (None, _) => None,
        (Some(id), Some(profile)) => {
            let id = id
                .parse::<u32>()
                .ok()
                .filter(|&i| i64::from(i) <= bounds::MAX_GPU_INSTANCE_ID)
                .ok_or((
                    Refused::BadLabel,
                    format!(
                        "GPU_I_ID {:?} is not a GPU instance id (0 to {})",
                        super::page::cut(id, 40),
                        bounds::MAX_GPU_INSTANCE_ID
                    ),
                ))?;
            crate::domain::text::check(profile, bounds::MAX_PROFILE_CHARS)
                .map_err(|e| (Refused::BadLabel, format!("its GPU_I_PROFILE: {e}")))?;
            Some((id, profile.to_owned()))
        }
        (Some(_), None) => {
            return Err((
                Refused::UnknownProfile,
                "it has a GPU_I_ID but no GPU_I_PROFILE".to_owned(),
            ));
        }
    };
    Ok(SeriesKey {
        metric: s.metric,
        node: node.to_owned(),
        gpu: uuid.to_owned(),
        model: model.to_owned(),
        instance,
        consumer: consumer(s, options)?,
    })
}

fn add(
    out: &mut BTreeMap<String, NodeScrape>,
    k: &SeriesKey,
    value: f64,
) -> Result<(), (Refused, String)> {
    let value = check_value(k.metric, value)?;
    let gpu = out
        .entry(k.node.clone())
        .or_default()
        .gpus
        .entry(k.gpu.clone())
        .or_default();
    if gpu.model.is_empty() {
        gpu.model = k.model.clone();
    } else if gpu.model != k.model {
        return Err((
            Refused::BadLabel,
            format!("{} is also labelled {:?}", k.gpu, gpu.model),
        ));
    }
    let device = gpu
        .devices
        .entry(k.instance.as_ref().map(|(id, _)| *id))
        .or_default();
    if let Some((id, profile)) = &k.instance {
        match &device.profile {
            None => device.profile = Some(profile.clone()),
            Some(p) if p == profile => {}
            Some(p) => {
                return Err((
                    Refused::BadLabel,
                    format!("GPU instance {id} is also labelled {p:?}"),
                ));
            }
        }
    }
    let slot = k.metric as usize;
    match &k.consumer {
        None => device.plain[slot] = Some(value),
        Some(h) => {
            device.held.entry(h.clone()).or_default()[slot] = Some(value);
        }
    }
    Ok(())
}

impl DeviceSeen {
    /// The device's own figure of `m`: its series without a consumer, else a consumer's copy (the
    /// exporter copies the device's value onto each consumer's series).
    pub(super) fn figure(&self, m: Metric) -> Option<f64> {
        self.plain[m as usize].or_else(|| self.held.values().find_map(|f| f[m as usize]))
    }
}

pub(super) fn describe_consumer(c: &ConsumerReport) -> String {
    format!(
        "{}/{}",
        c.namespace.as_deref().unwrap_or("-"),
        c.pod.as_deref().unwrap_or("-")
    )
}
