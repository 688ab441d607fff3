//! What a usage report groups by and steps over: the `group_by` and `step` grammar, each wrong
//! dimension named.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::dcgm::DcgmLabel;

/// One thing rows are grouped by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dimension {
    Team,
    GpuModel,
    Kind,
    Profile,
    Node,
    Namespace,
    /// The pod's owner where its labels say it (Deployment, StatefulSet, Job), else the pod; off
    /// Kubernetes the job, else the unix user (SQL `workload_of`).
    Workload,
    Pod,
    Container,
    /// A pod label's value (`label:<key>`).
    Label(String),
    /// A label of NVIDIA's dcgm-exporter, under its name there (`UUID`, `Hostname`, `modelName`,
    /// `GPU_I_PROFILE`, `GPU_I_ID`, `dra_claim_name`, ...), so rows join with DCGM series.
    /// `Hostname` is the node and `modelName` the GPU model; `GPU_I_PROFILE` and `GPU_I_ID` are
    /// null for slices that are not MIG instances.
    Dcgm(DcgmLabel),
}

/// The names `group_by` takes, in the order error messages list them.
const NAMES: &str = "team, gpu_model, kind, profile, node, namespace, workload, pod, container, \
     label:<key>, UUID, Hostname, modelName, GPU_I_PROFILE, GPU_I_ID, dra_claim_name, \
     dra_claim_namespace, dra_driver_name, dra_pool_name, dra_device_name";

/// At most this many dimensions in one `group_by`.
pub const MAX_DIMENSIONS: usize = 6;

impl Dimension {
    pub fn name(&self) -> String {
        match self {
            Dimension::Team => "team".into(),
            Dimension::GpuModel => "gpu_model".into(),
            Dimension::Kind => "kind".into(),
            Dimension::Profile => "profile".into(),
            Dimension::Node => "node".into(),
            Dimension::Namespace => "namespace".into(),
            Dimension::Workload => "workload".into(),
            Dimension::Pod => "pod".into(),
            Dimension::Container => "container".into(),
            Dimension::Label(key) => format!("label:{key}"),
            Dimension::Dcgm(l) => l.name().into(),
        }
    }
}

impl FromStr for Dimension {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "team" => Dimension::Team,
            "gpu_model" => Dimension::GpuModel,
            "kind" => Dimension::Kind,
            "profile" => Dimension::Profile,
            "node" => Dimension::Node,
            "namespace" => Dimension::Namespace,
            "workload" => Dimension::Workload,
            "pod" => Dimension::Pod,
            "container" => Dimension::Container,
            _ => match s.strip_prefix("label:") {
                // A Kubernetes label key: an optional DNS prefix and `/`, then a name of up to 63.
                Some(key)
                    if !key.is_empty()
                        && key.len() <= 317
                        && key
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-._/".contains(&b)) =>
                {
                    Dimension::Label(key.to_owned())
                }
                Some(key) => {
                    return Err(format!(
                        "{key:?} is not a label key (letters, digits, '-', '_', '.', '/', up to 317 characters)"
                    ));
                }
                None => match DcgmLabel::of_name(s) {
                    Some(l) => Dimension::Dcgm(l),
                    None => return Err(format!("{s:?} is not one of {NAMES}")),
                },
            },
        })
    }
}

/// The dimensions of a report, in the order asked for (`group_by=team,namespace`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupBy(Vec<Dimension>);

impl GroupBy {
    pub fn of(dimensions: Vec<Dimension>) -> GroupBy {
        GroupBy(dimensions)
    }

    pub fn dimensions(&self) -> &[Dimension] {
        &self.0
    }

    pub fn has(&self, d: &Dimension) -> bool {
        self.0.contains(d)
    }

    /// Whether it groups by the node (`node` or dcgm-exporter's `Hostname`).
    pub fn has_node(&self) -> bool {
        self.has(&Dimension::Node) || self.has(&Dimension::Dcgm(DcgmLabel::Hostname))
    }

    /// Whether it groups by a label of the consumer's DRA claim.
    pub fn has_dra_claim(&self) -> bool {
        self.0
            .iter()
            .any(|d| matches!(d, Dimension::Dcgm(l) if l.of_claim()))
    }

    /// Whether a dimension is one of the consumer's (namespace, workload, pod, container, a label,
    /// the DRA claim): rows then fall into about as many groups as there are consumers.
    pub fn has_consumer_field(&self) -> bool {
        self.0.iter().any(|d| match d {
            Dimension::Namespace
            | Dimension::Workload
            | Dimension::Pod
            | Dimension::Container
            | Dimension::Label(_) => true,
            Dimension::Dcgm(l) => l.of_claim(),
            Dimension::Team
            | Dimension::GpuModel
            | Dimension::Kind
            | Dimension::Profile
            | Dimension::Node => false,
        })
    }

    /// Whether every dimension is one of the team's day rollup (team, GPU model, kind, profile),
    /// so that whole days can be read from it rather than per slice.
    pub fn fits_team_days(&self) -> bool {
        self.0.iter().all(|d| match d {
            Dimension::Team | Dimension::GpuModel | Dimension::Kind | Dimension::Profile => true,
            Dimension::Dcgm(l) => matches!(l, DcgmLabel::ModelName | DcgmLabel::GpuIProfile),
            Dimension::Node
            | Dimension::Namespace
            | Dimension::Workload
            | Dimension::Pod
            | Dimension::Container
            | Dimension::Label(_) => false,
        })
    }

    /// The label keys asked for, in order.
    pub fn label_keys(&self) -> Vec<String> {
        self.0
            .iter()
            .filter_map(|d| match d {
                Dimension::Label(k) => Some(k.clone()),
                _ => None,
            })
            .collect()
    }
}

impl FromStr for GroupBy {
    type Err = String;
    /// Comma-separated dimensions, each once; every wrong one is named.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut dims = Vec::new();
        let mut errors = Vec::new();
        for part in s.split(',') {
            match part.parse::<Dimension>() {
                Ok(d) if dims.contains(&d) => errors.push(format!("{part:?} is given twice")),
                Ok(d) => dims.push(d),
                Err(e) => errors.push(e),
            }
        }
        if dims.len() > MAX_DIMENSIONS {
            errors.push(format!(
                "{} dimensions; a report groups by at most {MAX_DIMENSIONS}",
                dims.len()
            ));
        }
        if errors.is_empty() {
            Ok(GroupBy(dims))
        } else {
            Err(errors.join("; "))
        }
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(Dimension::name).collect();
        f.write_str(&names.join(","))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Hour,
    Day,
    Month,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Hour => "hour",
            Step::Day => "day",
            Step::Month => "month",
        }
    }

    /// The longest range one report covers at this step.
    pub fn max_range(self) -> chrono::Duration {
        match self {
            Step::Hour => chrono::Duration::days(31),
            Step::Day => chrono::Duration::days(366),
            Step::Month => chrono::Duration::days(366 * 5),
        }
    }
}

impl FromStr for Step {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hour" => Ok(Step::Hour),
            "day" => Ok(Step::Day),
            "month" => Ok(Step::Month),
            _ => Err(format!("step {s:?} is not one of hour, day, month")),
        }
    }
}
