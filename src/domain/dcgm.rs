//! NVIDIA dcgm-exporter's attribution vocabulary: the label names its series carry for a GPU, a MIG
//! instance and the pod or DRA claim that holds it, e.g.
//! `DCGM_FI_DEV_GPU_UTIL{UUID="GPU-…",Hostname="node-1",modelName="NVIDIA H100 80GB HBM3",
//! GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",namespace="nlp",pod="trainer-0",container="main",
//! dra_claim_name="trainer-0-gpu",dra_claim_namespace="nlp",dra_driver_name="gpu.nvidia.com"}`.
//! slicemeter speaks it wherever a slice and its consumer are named (the fleet API's `dcgm` labels,
//! the usage report's dimensions of the same names, the FOCUS rows' tags), so that its answers join
//! with the DCGM dashboards users already run. This is the one home of those names.

use serde::Serialize;
use utoipa::ToSchema;

use super::batch::{ConsumerReport, DraClaim};
use super::slice::SliceKind;

/// A dcgm-exporter label slicemeter can fill. `pod`, `namespace` and `container` are slicemeter's
/// own names too (the usage report's dimensions of those names), so they are not repeated here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DcgmLabel {
    /// The GPU's uuid (for a MIG instance, its parent GPU's, as dcgm-exporter gives it).
    Uuid,
    /// The node.
    Hostname,
    /// The GPU model as NVML names it.
    ModelName,
    /// A MIG instance's profile; none for other slices.
    GpuIProfile,
    /// A MIG instance's GPU instance id; none for other slices.
    GpuIId,
    DraClaimName,
    DraClaimNamespace,
    DraDriverName,
    DraPoolName,
    DraDeviceName,
}

impl DcgmLabel {
    pub const ALL: [DcgmLabel; 10] = [
        DcgmLabel::Uuid,
        DcgmLabel::Hostname,
        DcgmLabel::ModelName,
        DcgmLabel::GpuIProfile,
        DcgmLabel::GpuIId,
        DcgmLabel::DraClaimName,
        DcgmLabel::DraClaimNamespace,
        DcgmLabel::DraDriverName,
        DcgmLabel::DraPoolName,
        DcgmLabel::DraDeviceName,
    ];

    /// The label's name, exactly as dcgm-exporter writes it.
    pub fn name(self) -> &'static str {
        match self {
            DcgmLabel::Uuid => "UUID",
            DcgmLabel::Hostname => "Hostname",
            DcgmLabel::ModelName => "modelName",
            DcgmLabel::GpuIProfile => "GPU_I_PROFILE",
            DcgmLabel::GpuIId => "GPU_I_ID",
            DcgmLabel::DraClaimName => "dra_claim_name",
            DcgmLabel::DraClaimNamespace => "dra_claim_namespace",
            DcgmLabel::DraDriverName => "dra_driver_name",
            DcgmLabel::DraPoolName => "dra_pool_name",
            DcgmLabel::DraDeviceName => "dra_device_name",
        }
    }

    pub fn of_name(name: &str) -> Option<DcgmLabel> {
        DcgmLabel::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether the consumer (not the device) gives its value.
    pub fn of_claim(self) -> bool {
        matches!(
            self,
            DcgmLabel::DraClaimName
                | DcgmLabel::DraClaimNamespace
                | DcgmLabel::DraDriverName
                | DcgmLabel::DraPoolName
                | DcgmLabel::DraDeviceName
        )
    }

    /// The value a DRA claim gives this label; none for the device's labels.
    pub fn of_dra(self, claim: &DraClaim) -> Option<&str> {
        match self {
            DcgmLabel::DraClaimName => Some(&claim.name),
            DcgmLabel::DraClaimNamespace => Some(&claim.namespace),
            DcgmLabel::DraDriverName => claim.driver.as_deref(),
            DcgmLabel::DraPoolName => claim.pool.as_deref(),
            DcgmLabel::DraDeviceName => claim.device.as_deref(),
            _ => None,
        }
    }
}

/// The slice a series is about, as dcgm-exporter labels it.
#[derive(Debug, Clone, Copy)]
pub struct Device<'a> {
    /// None where it was not read (a report not grouped by it).
    pub gpu_uuid: Option<&'a str>,
    pub node: Option<&'a str>,
    pub model: &'a str,
    pub kind: SliceKind,
    pub profile: Option<&'a str>,
    pub gpu_instance_id: Option<i16>,
}

impl Device<'_> {
    /// The value of a device label; none for a consumer's.
    pub fn value(&self, label: DcgmLabel) -> Option<String> {
        let mig = self.kind == SliceKind::Mig;
        match label {
            DcgmLabel::Uuid => self.gpu_uuid.map(str::to_owned),
            DcgmLabel::Hostname => self.node.map(str::to_owned),
            DcgmLabel::ModelName => Some(self.model.to_owned()),
            DcgmLabel::GpuIProfile => self.profile.filter(|_| mig).map(str::to_owned),
            DcgmLabel::GpuIId => self
                .gpu_instance_id
                .filter(|_| mig)
                .map(|id| id.to_string()),
            _ => None,
        }
    }

    /// Its labels, in dcgm-exporter's names: what the FOCUS rows' tags carry.
    pub fn labels(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        DcgmLabel::ALL
            .into_iter()
            .filter(|l| !l.of_claim())
            .filter_map(|l| self.value(l).map(|v| (l.name(), v)))
    }
}

/// A slice and its holder as dcgm-exporter labels their series: what the fleet API's `dcgm` object
/// holds, absent labels left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct DcgmLabels {
    #[serde(rename = "UUID")]
    #[schema(example = "GPU-1b2c3d4e-0000-4000-8000-000000000001")]
    pub uuid: String,
    #[serde(rename = "Hostname")]
    #[schema(example = "gpu-node-01")]
    pub hostname: String,
    #[serde(rename = "modelName")]
    #[schema(example = "NVIDIA H100 80GB HBM3")]
    pub model_name: String,
    #[serde(rename = "GPU_I_PROFILE", skip_serializing_if = "Option::is_none")]
    #[schema(example = "3g.40gb")]
    pub gpu_i_profile: Option<String>,
    /// A string, as Prometheus label values are.
    #[serde(rename = "GPU_I_ID", skip_serializing_if = "Option::is_none")]
    #[schema(example = "2")]
    pub gpu_i_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dra_claim_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dra_claim_namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dra_driver_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dra_pool_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dra_device_name: Option<String>,
}

impl DcgmLabels {
    /// The labels of `device` held by `consumer`, if anyone holds it.
    pub fn of(device: &Device<'_>, consumer: Option<&ConsumerReport>) -> DcgmLabels {
        let claim = consumer.and_then(|h| h.dra_claim.as_ref());
        let dra = |l: DcgmLabel| claim.and_then(|c| l.of_dra(c)).map(str::to_owned);
        DcgmLabels {
            uuid: device.value(DcgmLabel::Uuid).unwrap_or_default(),
            hostname: device.value(DcgmLabel::Hostname).unwrap_or_default(),
            model_name: device.model.to_owned(),
            gpu_i_profile: device.value(DcgmLabel::GpuIProfile),
            gpu_i_id: device.value(DcgmLabel::GpuIId),
            pod: consumer.and_then(|h| h.pod.clone()),
            namespace: consumer.and_then(|h| h.namespace.clone()),
            container: consumer.and_then(|h| h.container.clone()),
            dra_claim_name: dra(DcgmLabel::DraClaimName),
            dra_claim_namespace: dra(DcgmLabel::DraClaimNamespace),
            dra_driver_name: dra(DcgmLabel::DraDriverName),
            dra_pool_name: dra(DcgmLabel::DraPoolName),
            dra_device_name: dra(DcgmLabel::DraDeviceName),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mig() -> Device<'static> {
        Device {
            gpu_uuid: Some("GPU-1"),
            node: Some("node-1"),
            model: "NVIDIA H100 80GB HBM3",
            kind: SliceKind::Mig,
            profile: Some("3g.40gb"),
            gpu_instance_id: Some(2),
        }
    }

    #[test]
    fn a_mig_instance_held_through_a_dra_claim_is_labelled_as_dcgm_exporter_labels_it() {
        let consumer = ConsumerReport {
            namespace: Some("nlp".into()),
            pod: Some("trainer-0".into()),
            container: Some("main".into()),
            dra_claim: Some(DraClaim {
                namespace: "nlp".into(),
                name: "trainer-0-gpu".into(),
                driver: Some("gpu.nvidia.com".into()),
                pool: Some("node-1".into()),
                device: Some("gpu-0-mig-3g40gb-2".into()),
            }),
            ..ConsumerReport::default()
        };
        let json = serde_json::to_value(DcgmLabels::of(&mig(), Some(&consumer))).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "UUID": "GPU-1", "Hostname": "node-1", "modelName": "NVIDIA H100 80GB HBM3",
                "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "2",
                "pod": "trainer-0", "namespace": "nlp", "container": "main",
                "dra_claim_name": "trainer-0-gpu", "dra_claim_namespace": "nlp",
                "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": "node-1",
                "dra_device_name": "gpu-0-mig-3g40gb-2"
            })
        );
    }

    #[test]
    fn only_a_mig_instance_has_gpu_instance_labels() {
        let whole = Device {
            kind: SliceKind::Whole,
            profile: None,
            gpu_instance_id: None,
            ..mig()
        };
        let tags: Vec<_> = whole.labels().collect();
        assert_eq!(
            tags,
            [
                ("UUID", "GPU-1".to_owned()),
                ("Hostname", "node-1".to_owned()),
                ("modelName", "NVIDIA H100 80GB HBM3".to_owned())
            ]
        );
        let mps_with_stray_profile = Device {
            kind: SliceKind::Mps,
            gpu_instance_id: Some(3),
            ..mig()
        };
        assert_eq!(mps_with_stray_profile.value(DcgmLabel::GpuIProfile), None);
        assert_eq!(mps_with_stray_profile.value(DcgmLabel::GpuIId), None);
        assert_eq!(mig().value(DcgmLabel::GpuIId).as_deref(), Some("2"));
    }

    #[test]
    fn every_label_is_found_by_its_own_name_and_no_other() {
        for l in DcgmLabel::ALL {
            assert_eq!(DcgmLabel::of_name(l.name()), Some(l));
        }
        assert_eq!(DcgmLabel::of_name("uuid"), None);
        assert_eq!(DcgmLabel::of_name("gpu_i_id"), None);
    }
}
