//! The ingest contract v1 (DESIGN.md, "Ingest contract"): what a collector sends in one batch. Fields
//! may be added, none renamed. Figures arrive as JSON numbers and stay loosely typed here so that the
//! server can name every bad one (`ingest::validate`) instead of stopping at the first.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::slice::SliceKind;

/// The contract's bounds (docs/ingest.md, Bounds at ingest): every figure a collector sends is bounded by the
/// card, and every bound is chosen so that no sum over a month, anywhere, can overflow an exact
/// decimal (`rust_decimal`'s 96-bit mantissa, about 7.9e28).
pub mod bounds {
    use super::*;

    /// The largest GPU memory accepted: 4 TiB, over twenty times the largest card shipping today.
    /// With it, one slice's memory byte-seconds in an hour stay under 1.6e16 and a month's under
    /// 1.2e19; fleet-wide sums are only ever of GiB-seconds (at most 3.2e9 per slice-month).
    pub const MAX_GPU_MEMORY_BYTES: i64 = 1 << 42;
    /// Kubernetes object names (pods, namespaces, nodes) and every other name in a batch.
    pub const MAX_NAME_CHARS: usize = 253;
    /// A label key: a 253-character DNS prefix, `/`, and a 63-character name.
    pub const MAX_LABEL_KEY_CHARS: usize = 317;
    /// A label value.
    pub const MAX_LABEL_VALUE_CHARS: usize = 63;
    /// Labels of one consumer.
    pub const MAX_LABELS: usize = 64;
    /// A GPU uuid (NVML's are 40 characters).
    pub const MAX_GPU_UUID_CHARS: usize = 128;
    /// A slice uuid (a MIG uuid, or a GPU uuid with a suffix such as `::3`).
    pub const MAX_SLICE_UUID_CHARS: usize = 160;
    /// A GPU model as NVML names it.
    pub const MAX_MODEL_CHARS: usize = 200;
    /// A MIG profile name such as `3g.40gb`.
    pub const MAX_PROFILE_CHARS: usize = 64;
    /// The largest MIG GPU instance id: NVML numbers a card's GPU instances with small integers
    /// (up to 14 on the cards of `shared/data`, seven instances at most at once).
    pub const MAX_GPU_INSTANCE_ID: i64 = 63;
    /// The longest batch period the server may be configured to take (`--max-period`): a window's
    /// held seconds are at most its period, so at most 604,800.
    pub const MAX_PERIOD_SECONDS: i64 = 7 * 86_400;
    /// Decimal places of a vGPU fraction (`0.125` has 3): shares are compared exactly.
    pub const MAX_FRACTION_DECIMALS: u32 = 9;

    /// No timestamp before this: older ones are a broken clock, not history.
    pub fn earliest() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
            .single()
            .expect("a valid instant")
    }
}

/// A node's name: 1 to 253 letters, digits, `.`, `-` or `_` (a host name, or a Kubernetes node).
pub fn is_node_name(node: &str) -> bool {
    (1..=bounds::MAX_NAME_CHARS).contains(&node.len())
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// One report of a node: the GPUs and slices that existed for all of `period`, and the occupancy
/// windows of the slices that someone held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Batch {
    /// The node's name; a collector token may only report for its own node.
    #[schema(example = "gpu-node-01")]
    pub node: String,
    pub period: Period,
    #[serde(default)]
    pub gpus: Vec<GpuReport>,
    #[serde(default)]
    pub slices: Vec<SliceReport>,
    #[serde(default)]
    pub windows: Vec<WindowReport>,
}

/// A half-open interval `[start, end)` in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Period {
    #[schema(example = "2026-10-01T00:00:00Z")]
    pub start: DateTime<Utc>,
    #[schema(example = "2026-10-01T00:01:00Z")]
    pub end: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GpuReport {
    #[schema(example = "GPU-5f0e1a2b-0000-4000-8000-000000000001")]
    pub uuid: String,
    /// The name NVML reports, e.g. `NVIDIA H100 80GB HBM3`.
    #[schema(example = "NVIDIA H100 80GB HBM3")]
    pub model: String,
    #[schema(example = 85520809984_i64)]
    pub memory_bytes: i64,
    /// Compute slices of the whole GPU: 7, or 4 on A30 and RTX PRO 6000.
    #[schema(example = 7)]
    pub compute_slices: i64,
    /// Memory slices of the whole GPU: 8, or 4 on A30 and RTX PRO 6000.
    #[schema(example = 8)]
    pub memory_slices: i64,
    pub mig_enabled: bool,
}

/// A slice and what it reserves. Which fields are required depends on `kind`: `mig` needs `profile`,
/// `compute_slices`, `memory_slices` and `memory_bytes` (`profile_id` optional); `mps` needs
/// `active_thread_percentage` and `pinned_memory_bytes`; `vgpu` needs `fraction`; `timeslice` needs
/// `replicas` and `replica`; `whole` needs nothing more.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct SliceReport {
    #[schema(example = "MIG-1b2c3d4e-0000-4000-8000-000000000001")]
    pub uuid: String,
    pub gpu_uuid: String,
    /// `mig`, `mps`, `timeslice`, `vgpu` or `whole`.
    #[schema(example = "mig")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "3g.40gb")]
    pub profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<i64>,
    /// A MIG slice's GPU instance id as NVML numbers it (what dcgm-exporter labels `GPU_I_ID`),
    /// unique among the instances of its GPU; only a `mig` slice has one. Stored when the slice is
    /// first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = 2)]
    pub gpu_instance_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_slices: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_slices: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_thread_percentage: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_memory_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<i64>,
}

impl SliceReport {
    /// Its kind, where the text names one. `kind` stays text on the wire so that ingest's
    /// validation can refuse an unknown one in its own words, naming the field; a collector's own
    /// records always name one.
    pub fn slice_kind(&self) -> Option<SliceKind> {
        self.kind.parse().ok()
    }
}

/// Who held a slice and how much of it they occupied over `[start, end)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WindowReport {
    pub slice_uuid: String,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub consumer: ConsumerReport,
    /// Seconds someone held the slice, at most `end - start`.
    pub held_seconds: f64,
    /// Integral of memory used over the held seconds.
    pub memory_byte_seconds: f64,
    pub memory_peak_bytes: i64,
    /// Seconds of SM activity relative to the slice (to the whole GPU for a time-sliced replica), at
    /// most `held_seconds`; `null` where the GPU or driver cannot measure it.
    #[serde(default)]
    pub compute_active_seconds: Option<f64>,
}

/// The holder of a slice: a Kubernetes pod (namespace, pod, container, labels, DRA claim) or, off
/// Kubernetes, a unix user and job id. A `team` label names the team outright.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize, ToSchema,
)]
pub struct ConsumerReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dra_claim: Option<DraClaim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

/// A Kubernetes DRA resource claim that allocated the slice.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub struct DraClaim {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

impl ConsumerReport {
    /// The label that names a team outright.
    pub const TEAM_LABEL: &'static str = "team";

    pub fn team_label(&self) -> Option<&str> {
        self.labels.get(Self::TEAM_LABEL).map(String::as_str)
    }

    /// Drops the labels the contract would refuse (too many, too long, or with control
    /// characters), keeping `team` and then the others in key order. A pod may carry any labels;
    /// the batch must fit the contract, or all of it would be refused. Returns how many were dropped.
    pub fn fit_labels_to_contract(&mut self) -> usize {
        use crate::domain::text::{check, check_optional};
        let before = self.labels.len();
        self.labels.retain(|k, v| {
            check(k, bounds::MAX_LABEL_KEY_CHARS).is_ok()
                && check_optional(v, bounds::MAX_LABEL_VALUE_CHARS).is_ok()
        });
        if self.labels.len() > bounds::MAX_LABELS {
            let team = self.labels.remove(Self::TEAM_LABEL);
            let keep = bounds::MAX_LABELS - usize::from(team.is_some());
            self.labels = std::mem::take(&mut self.labels)
                .into_iter()
                .take(keep)
                .collect();
            if let Some(t) = team {
                self.labels.insert(Self::TEAM_LABEL.to_owned(), t);
            }
        }
        before - self.labels.len()
    }

    /// Names someone: a namespace or pod, a unix user, a job or a claim.
    pub fn names_someone(&self) -> bool {
        self.namespace.is_some()
            || self.pod.is_some()
            || self.unix_user.is_some()
            || self.job_id.is_some()
            || self.dra_claim.is_some()
    }
}

/// The answer to an accepted batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IngestOutcome {
    /// Windows stored by this request.
    pub inserted: u64,
    /// Windows that were already stored (a collector's retry) and changed nothing.
    pub duplicates: u64,
}

/// The periods stored for a node's GPUs in an interval (`GET /v1/ingest/coverage`): what a
/// back-fill need not send again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Coverage {
    pub node: String,
    /// Each GPU of the node with a stored period in the interval.
    pub gpus: Vec<GpuCoverage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GpuCoverage {
    pub uuid: String,
    /// Stored time within the interval, in order, adjacent periods joined.
    pub periods: Vec<Period>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_fitted_to_the_contract_keeping_the_team() {
        let mut c = ConsumerReport {
            pod: Some("p".into()),
            ..Default::default()
        };
        for i in 0..80 {
            c.labels.insert(format!("k{i:02}"), "v".into());
        }
        c.labels.insert("team".into(), "nlp".into());
        c.labels.insert("long".into(), "x".repeat(64));
        c.labels.insert("bad".into(), "a\nb".into());
        assert_eq!(c.fit_labels_to_contract(), 83 - 64);
        assert_eq!(c.labels.len(), bounds::MAX_LABELS);
        assert_eq!(c.team_label(), Some("nlp"));
        assert!(c.labels.contains_key("k00") && !c.labels.contains_key("long"));
    }
}
