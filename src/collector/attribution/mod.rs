//! Who holds a slice. On Kubernetes, the kubelet says which pod holds each device (refreshed in the
//! background, read without waiting); processes on shared GPUs are matched to pods through their
//! cgroup and the API server, or their `HOSTNAME`. Off Kubernetes, a process is its systemd unit,
//! container or unix user. A static file (slice or GPU uuid -> team) is the last resort.

pub mod kubeapi;
pub mod podresources;
pub mod procfs;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Deserialize;

use crate::domain::batch::{ConsumerReport, DraClaim};
use kubeapi::{KubeApi, PodMeta};
use podresources::PodResources;
use procfs::Procfs;

/// What the kubelet (and the API server) said last.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Device id (`GPU-…`, `MIG-…`, `GPU-…::N`) -> the container holding it.
    pub devices: HashMap<String, Arc<ConsumerReport>>,
    /// Pod uid -> the pod (known only with API server access).
    pub pods_by_uid: HashMap<String, Arc<ConsumerReport>>,
    /// Pod name -> the pods of that name on the node.
    pub pods_by_name: HashMap<String, Vec<Arc<ConsumerReport>>>,
}

/// Builds the snapshot from a PodResources listing and, when there is API access, the node's pods.
pub fn snapshot(listing: &[PodResources], pods: Option<&[PodMeta]>) -> Snapshot {
    let labels: HashMap<(&str, &str), &BTreeMap<String, String>> = pods
        .unwrap_or_default()
        .iter()
        .map(|p| ((p.namespace.as_str(), p.name.as_str()), &p.labels))
        .collect();
    let mut s = Snapshot::default();
    for pod in listing {
        let pod_labels = labels
            .get(&(pod.namespace.as_str(), pod.name.as_str()))
            .map(|l| (*l).clone())
            .unwrap_or_default();
        for c in &pod.containers {
            let base = ConsumerReport {
                namespace: Some(pod.namespace.clone()),
                pod: Some(pod.name.clone()),
                container: Some(c.name.clone()),
                labels: pod_labels.clone(),
                ..ConsumerReport::default()
            };
            let consumer = Arc::new(base.clone());
            for d in &c.devices {
                for id in &d.device_ids {
                    s.devices.insert(id.clone(), consumer.clone());
                }
            }
            for claim in &c.dynamic_resources {
                for r in &claim.claim_resources {
                    let consumer = Arc::new(ConsumerReport {
                        dra_claim: Some(DraClaim {
                            namespace: claim.claim_namespace.clone(),
                            name: claim.claim_name.clone(),
                            driver: Some(r.driver_name.clone()).filter(|d| !d.is_empty()),
                            pool: Some(r.pool_name.clone()).filter(|p| !p.is_empty()),
                            device: Some(r.device_name.clone()).filter(|d| !d.is_empty()),
                        }),
                        ..base.clone()
                    });
                    // A DRA device is found by its device name or a CDI name that carries the uuid.
                    let mut ids = vec![r.device_name.clone()];
                    ids.extend(
                        r.cdi_devices
                            .iter()
                            .filter_map(|d| d.name.rsplit('=').next().map(str::to_owned)),
                    );
                    for id in ids.into_iter().filter(|i| !i.is_empty()) {
                        s.devices.insert(id, consumer.clone());
                    }
                }
            }
        }
        let pod_consumer = Arc::new(ConsumerReport {
            namespace: Some(pod.namespace.clone()),
            pod: Some(pod.name.clone()),
            labels: pod_labels,
            ..ConsumerReport::default()
        });
        s.pods_by_name
            .entry(pod.name.clone())
            .or_default()
            .push(pod_consumer);
    }
    for p in pods.unwrap_or_default() {
        s.pods_by_uid.insert(
            p.uid.clone(),
            Arc::new(ConsumerReport {
                namespace: Some(p.namespace.clone()),
                pod: Some(p.name.clone()),
                labels: p.labels.clone(),
                ..ConsumerReport::default()
            }),
        );
    }
    s
}

/// The latest snapshot, refreshed by [`watch`].
pub type SharedSnapshot = Arc<RwLock<Option<Snapshot>>>;

/// Refreshes the snapshot from the kubelet (and the API server) every `every`, in the background.
/// A failed refresh keeps the previous snapshot and says so in the log.
pub fn watch(
    socket: PathBuf,
    api: Option<KubeApi>,
    every: Duration,
) -> (SharedSnapshot, tokio::task::JoinHandle<()>) {
    let shared: SharedSnapshot = Arc::default();
    let out = shared.clone();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        let mut failing = false;
        loop {
            tick.tick().await;
            let listing = podresources::list(&socket).await;
            let pods = match &api {
                Some(api) => match api.pods().await {
                    Ok(p) => Some(p),
                    Err(e) => {
                        tracing::warn!(error = %e, "Pod labels are unavailable; teams come from namespaces.");
                        None
                    }
                },
                None => None,
            };
            match listing {
                Ok(listing) => {
                    if failing {
                        tracing::info!("The kubelet's PodResources API answers again.");
                        failing = false;
                    }
                    *shared.write().expect("not poisoned") =
                        Some(snapshot(&listing, pods.as_deref()));
                }
                Err(e) if !failing => {
                    tracing::error!(error = %e, "The kubelet's PodResources API does not answer; holders are as last seen.");
                    failing = true;
                }
                Err(_) => {}
            }
        }
    });
    (out, task)
}

/// A static mapping file: slice or GPU uuid -> team, for GPUs no scheduler hands out.
#[derive(Debug, Deserialize)]
struct StaticFile {
    teams: BTreeMap<String, String>,
}

pub fn load_static_map(path: &Path) -> Result<HashMap<String, Arc<ConsumerReport>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: StaticFile = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(file
        .teams
        .into_iter()
        .map(|(uuid, team)| {
            let consumer = ConsumerReport {
                job_id: Some(format!("static:{uuid}")),
                labels: BTreeMap::from([(ConsumerReport::TEAM_LABEL.to_owned(), team)]),
                ..ConsumerReport::default()
            };
            (uuid, Arc::new(consumer))
        })
        .collect())
}

/// Finds consumers: of devices through the kubelet or the static map, of processes through `/proc`.
#[derive(Default)]
pub struct Attribution {
    pub kubelet: Option<SharedSnapshot>,
    pub procfs: Procfs,
    pub static_map: HashMap<String, Arc<ConsumerReport>>,
}

impl Attribution {
    /// Whether there is a scheduler to say who holds devices.
    pub fn on_kubernetes(&self) -> bool {
        self.kubelet.is_some()
    }

    /// The consumer of a device, as the kubelet or (the last resort) the static map says.
    pub fn consumer_of_device(&self, id: &str) -> Option<Arc<ConsumerReport>> {
        if let Some(k) = &self.kubelet
            && let Some(h) = k
                .read()
                .expect("not poisoned")
                .as_ref()
                .and_then(|s| s.devices.get(id).cloned())
        {
            return Some(h);
        }
        self.static_map.get(id).cloned()
    }

    /// Who a process is: its pod (by cgroup uid with API access, else by `HOSTNAME` when that names
    /// one pod on the node), else its systemd unit or container, else its unix user.
    pub fn consumer_of_process(&self, pid: u32) -> Option<Arc<ConsumerReport>> {
        let id = self.procfs.identity(pid)?;
        if let Some(k) = &self.kubelet {
            let guard = k.read().expect("not poisoned");
            if let Some(s) = guard.as_ref() {
                if let Some(pod) = id.pod_uid.as_ref().and_then(|u| s.pods_by_uid.get(u)) {
                    return Some(pod.clone());
                }
                if let Some([only]) = id
                    .hostname
                    .as_ref()
                    .and_then(|h| s.pods_by_name.get(h))
                    .map(Vec::as_slice)
                {
                    return Some(only.clone());
                }
            }
        }
        let job = id
            .unit
            .clone()
            .or_else(|| id.container.as_ref().map(|c| format!("container:{c}")));
        (job.is_some() || id.unix_user.is_some()).then(|| {
            Arc::new(ConsumerReport {
                unix_user: id.unix_user,
                job_id: job,
                ..ConsumerReport::default()
            })
        })
    }
}

/// Two consumers are the same pod (containers aside), or the same consumer off Kubernetes.
pub fn same_consumer(a: &ConsumerReport, b: &ConsumerReport) -> bool {
    match (&a.pod, &b.pod) {
        (Some(_), Some(_)) => (&a.namespace, &a.pod) == (&b.namespace, &b.pod),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podresources::{ClaimResource, ContainerDevices, ContainerResources, DynamicResource};

    fn pod(ns: &str, name: &str, devices: &[&str]) -> PodResources {
        PodResources {
            name: name.into(),
            namespace: ns.into(),
            containers: vec![ContainerResources {
                name: "main".into(),
                devices: vec![ContainerDevices {
                    resource_name: "nvidia.com/gpu".into(),
                    device_ids: devices.iter().map(|d| (*d).to_owned()).collect(),
                }],
                dynamic_resources: vec![],
            }],
        }
    }

    #[test]
    fn devices_map_to_their_pods_with_labels_from_the_api_server() {
        let listing = [pod("nlp", "trainer-0", &["MIG-a", "GPU-b::2"])];
        let pods = [PodMeta {
            uid: "u-1".into(),
            namespace: "nlp".into(),
            name: "trainer-0".into(),
            labels: BTreeMap::from([("team".into(), "search".into())]),
        }];
        let s = snapshot(&listing, Some(&pods));
        let h = &s.devices["GPU-b::2"];
        assert_eq!(
            (
                h.namespace.as_deref(),
                h.pod.as_deref(),
                h.container.as_deref()
            ),
            (Some("nlp"), Some("trainer-0"), Some("main"))
        );
        assert_eq!(h.team_label(), Some("search"));
        assert!(s.devices.contains_key("MIG-a"));
        assert_eq!(s.pods_by_uid["u-1"].pod.as_deref(), Some("trainer-0"));
    }

    #[test]
    fn a_dra_claim_names_its_device_and_the_claim() {
        let mut p = pod("vision", "detector-0", &[]);
        p.containers[0].dynamic_resources.push(DynamicResource {
            claim_name: "gpu-claim".into(),
            claim_namespace: "vision".into(),
            claim_resources: vec![ClaimResource {
                cdi_devices: vec![podresources::CdiDevice {
                    name: "k8s.gpu.nvidia.com/device=MIG-c".into(),
                }],
                driver_name: "gpu.nvidia.com".into(),
                pool_name: "node-1".into(),
                device_name: "mig-3g-0".into(),
            }],
        });
        let s = snapshot(&[p], None);
        let h = &s.devices["MIG-c"];
        let claim = h.dra_claim.as_ref().unwrap();
        assert_eq!(
            (
                claim.name.as_str(),
                claim.driver.as_deref(),
                claim.device.as_deref()
            ),
            ("gpu-claim", Some("gpu.nvidia.com"), Some("mig-3g-0"))
        );
        assert!(s.devices.contains_key("mig-3g-0"));
    }

    #[test]
    fn processes_are_their_pod_by_uid_or_hostname_else_their_unit_or_user() {
        let dir = tempfile::tempdir().unwrap();
        let proc = |pid: u32, cgroup: &str, env: &str| {
            let d = dir.path().join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cgroup"), cgroup).unwrap();
            std::fs::write(d.join("status"), "Name:\tpython\nUid:\t0\t0\t0\t0\n").unwrap();
            std::fs::write(d.join("environ"), env.replace(' ', "\0")).unwrap();
        };
        proc(
            10,
            "0::/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice/cri-containerd-x.scope\n",
            "PATH=/bin HOSTNAME=trainer-0",
        );
        proc(
            11,
            "0::/kubepods.slice/kubepods-pod99999999_2222_3333_4444_555555555555.slice/cri-containerd-y.scope\n",
            "HOSTNAME=embedder-1",
        );
        proc(12, "0::/system.slice/train-llm.service\n", "PATH=/bin");
        let listing = [
            pod("nlp", "trainer-0", &[]),
            pod("search", "embedder-1", &[]),
        ];
        let pods = [PodMeta {
            uid: "11111111-2222-3333-4444-555555555555".into(),
            namespace: "nlp".into(),
            name: "trainer-0".into(),
            labels: BTreeMap::new(),
        }];
        let a = Attribution {
            kubelet: Some(Arc::new(RwLock::new(Some(snapshot(&listing, Some(&pods)))))),
            procfs: Procfs {
                root: dir.path().to_owned(),
            },
            static_map: HashMap::new(),
        };
        assert_eq!(
            a.consumer_of_process(10).unwrap().pod.as_deref(),
            Some("trainer-0")
        );
        assert_eq!(
            a.consumer_of_process(11).unwrap().namespace.as_deref(),
            Some("search")
        );
        let unit = a.consumer_of_process(12).unwrap();
        assert_eq!(
            (unit.job_id.as_deref(), unit.unix_user.as_deref()),
            (Some("train-llm.service"), Some("root"))
        );
        assert!(a.consumer_of_process(99).is_none());
    }

    #[test]
    fn a_static_map_names_teams_for_unscheduled_gpus() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("teams.toml");
        std::fs::write(&f, "[teams]\n\"GPU-abc\" = \"research\"\n").unwrap();
        let a = Attribution {
            static_map: load_static_map(&f).unwrap(),
            ..Attribution::default()
        };
        assert_eq!(
            a.consumer_of_device("GPU-abc").unwrap().team_label(),
            Some("research")
        );
        assert!(load_static_map(&dir.path().join("missing.toml")).is_err());
    }
}
