//! The simulated exporter's pages read back by the `dcgm` source's reader.
use super::*;
use crate::collector::source::dcgm::Refused;
use crate::collector::source::dcgm::page;
use crate::collector::source::dcgm::read::{self, ConsumerLabels, ReadOptions};
use crate::collector::source::nvml::Sharing;

fn pod(ns: &str, name: &str, vgpu: Option<u32>, own: Option<(u64, u32)>) -> ExporterPod {
    ExporterPod {
        namespace: ns.into(),
        pod: name.into(),
        container: "main".into(),
        uid: format!("uid-{name}"),
        vgpu,
        own,
    }
}

fn instance(
    id: u32,
    profile: &str,
    used: u64,
    engine: f64,
    consumer: Option<ExporterPod>,
) -> ExporterInstance {
    ExporterInstance {
        gpu_instance_id: id,
        profile: profile.into(),
        device: ExporterDevice {
            fb_used_mib: used,
            fb_free_mib: 1000,
            engine_active: engine,
            consumers: consumer.into_iter().collect(),
        },
    }
}

/// An H100 cut with `nvidia-smi mig -cgi 9,19,19` (GPU instances 2, 9 and 10) held by two
/// teams' pods, and a whole A100, on a node whose exporter writes `Hostname`.
fn h100_and_a100(label: &'static str) -> ExporterPage {
    ExporterPage {
        hostname_label: label,
        hostname: "gpu-node-1".into(),
        virtual_gpus: false,
        gpus: vec![
            ExporterGpu {
                index: 0,
                uuid: "GPU-h100".into(),
                model: "NVIDIA H100 80GB HBM3".into(),
                device: ExporterDevice::default(),
                instances: vec![
                    instance(
                        2,
                        "3g.40gb",
                        20_480,
                        0.25,
                        Some(pod("nlp", "trainer-0", None, None)),
                    ),
                    instance(
                        9,
                        "1g.10gb",
                        4_096,
                        0.5,
                        Some(pod("cv", "infer-0", None, None)),
                    ),
                    instance(10, "1g.10gb", 0, 0.0, None),
                ],
            },
            ExporterGpu {
                index: 1,
                uuid: "GPU-a100".into(),
                model: "NVIDIA A100-SXM4-80GB".into(),
                device: ExporterDevice {
                    fb_used_mib: 40_536,
                    fb_free_mib: 41_384,
                    engine_active: 0.731245,
                    consumers: vec![pod("nlp", "notebook", None, None)],
                },
                instances: Vec::new(),
            },
        ],
    }
}

fn read_page(
    text: &str,
    sharing: Sharing,
) -> (
    Inventory,
    Vec<Reading>,
    Vec<crate::collector::source::dcgm::Refusal>,
) {
    let (mut series, mut refused) = (Vec::new(), Vec::new());
    page::read(text, &mut series, &mut refused);
    let options = ReadOptions {
        consumers: ConsumerLabels::Plain,
        sharing,
    };
    let mut nodes = read::page_nodes(&series, &options, Some("gpu-node-1"), &mut refused);
    let node = nodes.remove("gpu-node-1").unwrap_or_default();
    assert!(nodes.is_empty(), "{nodes:?}");
    let (inventory, at) = node.inventory(sharing, &mut refused);
    let readings = node.readings(&at, &mut refused);
    (inventory, readings, refused)
}

#[test]
fn a_mig_card_and_a_whole_gpu_read_as_slices_of_nvidias_tables_held_by_their_pods() {
    for label in ["Hostname", "hostname"] {
        let text = h100_and_a100(label).render();
        let (inventory, readings, refused) = read_page(&text, Sharing::None);
        assert!(refused.is_empty(), "{refused:?}");
        let gpus: Vec<_> = inventory
            .gpus
            .iter()
            .map(|g| (g.uuid.as_str(), g.memory_bytes, g.mig_enabled))
            .collect();
        assert_eq!(
            gpus,
            [
                ("GPU-a100", 85_899_345_920, false),
                ("GPU-h100", 85_520_809_984, true)
            ]
        );
        let slices: Vec<_> = inventory
            .slices
            .iter()
            .map(|s| {
                (
                    s.uuid.as_str(),
                    s.kind.as_str(),
                    s.profile.as_deref(),
                    s.profile_id,
                    s.compute_slices,
                    s.memory_slices,
                    s.gpu_instance_id,
                )
            })
            .collect();
        assert_eq!(
            slices,
            [
                ("GPU-a100", "whole", None, None, None, None, None),
                (
                    "GPU-h100::gi2/3g.40gb",
                    "mig",
                    Some("3g.40gb"),
                    Some(9),
                    Some(3),
                    Some(4),
                    Some(2)
                ),
                (
                    "GPU-h100::gi9/1g.10gb",
                    "mig",
                    Some("1g.10gb"),
                    Some(19),
                    Some(1),
                    Some(1),
                    Some(9)
                ),
                (
                    "GPU-h100::gi10/1g.10gb",
                    "mig",
                    Some("1g.10gb"),
                    Some(19),
                    Some(1),
                    Some(1),
                    Some(10)
                ),
            ]
        );
        let held: Vec<_> = readings
            .iter()
            .map(|r| {
                (
                    r.consumer.as_ref().and_then(|h| h.pod.clone()),
                    r.memory_used_bytes >> 20,
                    r.compute_active_ppm,
                )
            })
            .collect();
        assert_eq!(
            held,
            [
                (Some("notebook".into()), 40_536, Some(731_245)),
                (Some("trainer-0".into()), 20_480, Some(250_000)),
                (Some("infer-0".into()), 4_096, Some(500_000)),
                (None, 0, Some(0)),
            ],
            "{label}"
        );
        assert_eq!(
            readings[1].consumer.as_ref().unwrap().namespace.as_deref(),
            Some("nlp")
        );
    }
}

#[test]
fn a_time_shared_gpus_pods_hold_their_replicas_with_their_own_figures_never_the_copies() {
    let page = ExporterPage {
        hostname_label: "hostname",
        hostname: "gpu-node-1".into(),
        virtual_gpus: true,
        gpus: vec![ExporterGpu {
            index: 0,
            uuid: "GPU-h200".into(),
            model: "NVIDIA H200".into(),
            device: ExporterDevice {
                fb_used_mib: 30_000,
                fb_free_mib: 113_771,
                engine_active: 0.9,
                consumers: vec![
                    pod("chat", "vllm-0", Some(1), Some((20_000, 60))),
                    pod("cv", "embed-0", Some(3), Some((10_000, 25))),
                ],
            },
            instances: Vec::new(),
        }],
    };
    let text = page.render();
    // The copies of the device's figure carry the pods too, with `vgpu`.
    assert!(
        text.contains("DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-h200\"")
            && text.contains("pod=\"embed-0\",vgpu=\"3\"} 0.900000"),
        "{text}"
    );
    let (inventory, readings, refused) = read_page(&text, Sharing::Timeslice(4));
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(inventory.slices.len(), 4);
    assert_eq!(inventory.slices[3].uuid, "GPU-h200::3");
    let held: Vec<_> = readings
        .iter()
        .map(|r| {
            (
                r.consumer.as_ref().and_then(|h| h.pod.clone()),
                r.memory_used_bytes >> 20,
                r.compute_active_ppm,
            )
        })
        .collect();
    assert_eq!(
        held,
        [
            (None, 0, None),
            (Some("vllm-0".into()), 20_000, Some(600_000)),
            (None, 0, None),
            (Some("embed-0".into()), 10_000, Some(250_000)),
        ]
    );
}

#[test]
fn hostile_figures_and_labels_are_refused_each_with_its_reason_and_the_rest_is_read() {
    let mut text = h100_and_a100("Hostname").render();
    let long = "p".repeat(100 * 1024);
    text.push_str(&format!(
        "DCGM_FI_DEV_FB_USED{{gpu=\"2\",UUID=\"GPU-neg\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node-1\"}} -5\n\
DCGM_FI_DEV_FB_USED{{gpu=\"3\",UUID=\"GPU-nan\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node-1\"}} NaN\n\
DCGM_FI_DEV_FB_USED{{gpu=\"4\",UUID=\"GPU-huge\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node-1\"}} 1e18\n\
DCGM_FI_DEV_FB_USED{{gpu=\"5\",UUID=\"GPU-long\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node-1\",pod=\"{long}\"}} 1\n\
DCGM_FI_DEV_FB_USED{{gpu=\"6\",UUID=\"GPU-nomodel\",Hostname=\"gpu-node-1\"}} 1\n\
DCGM_FI_DEV_FB_USED{{gpu=\"7\",UUID=\"GPU-mig\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"5g.60gb\",GPU_I_ID=\"1\",Hostname=\"gpu-node-1\"}} 1\n\
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu=\"8\",UUID=\"GPU-busy\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node-1\"}} 7.5\n\
this is not a metric at all\n\
DCGM_FI_DEV_FB_USED{{gpu=\"9\",UUID=\"GPU-x\" 5\n"
    ));
    let (inventory, readings, refused) = read_page(&text, Sharing::None);
    let mut reasons: Vec<&str> = refused.iter().map(|r| r.reason.as_str()).collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "bad_label",
            "bad_value",
            "bad_value",
            "bad_value",
            "bad_value",
            "no_model",
            "unknown_profile",
            "unparsable"
        ],
        "{refused:#?}"
    );
    assert!(
        refused
            .iter()
            .any(|r| r.reason == Refused::BadValue && r.series.contains("GPU-huge"))
    );
    // The good GPUs are all there, with their figures; none of a refused series' figures is.
    let uuids: Vec<_> = inventory.gpus.iter().map(|g| g.uuid.as_str()).collect();
    assert_eq!(uuids, ["GPU-a100", "GPU-h100", "GPU-mig"]);
    assert_eq!(readings[0].memory_used_bytes >> 20, 40_536);
    assert!(
        inventory.slices.iter().all(|s| s.gpu_uuid != "GPU-mig"),
        "an instance of an unknown profile is left out"
    );
}
