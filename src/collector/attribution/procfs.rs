//! Off Kubernetes, and for processes on shared GPUs: who a process is, read from `/proc`. Its cgroup
//! names a Kubernetes pod (by uid), a systemd unit or a container; its owner is a unix user; in a pod,
//! `HOSTNAME` is the pod's name.

use std::path::{Path, PathBuf};

/// What `/proc/<pid>` says about a process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The pod uid in a kubepods cgroup.
    pub pod_uid: Option<String>,
    /// A systemd unit (`train.service`, `slurm-job-42.scope`).
    pub unit: Option<String>,
    /// A container id outside Kubernetes (docker, podman).
    pub container: Option<String>,
    pub unix_user: Option<String>,
    /// `HOSTNAME` from the environment: the pod's name inside Kubernetes.
    pub hostname: Option<String>,
}

/// Reads identities under a `/proc` root (a folder of fakes in tests).
#[derive(Debug, Clone)]
pub struct Procfs {
    pub root: PathBuf,
}

impl Default for Procfs {
    fn default() -> Self {
        Procfs {
            root: PathBuf::from("/proc"),
        }
    }
}

impl Procfs {
    pub fn identity(&self, pid: u32) -> Option<ProcessIdentity> {
        let dir = self.root.join(pid.to_string());
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok()?;
        let mut id = parse_cgroup(&cgroup);
        id.unix_user = uid_of(&dir).and_then(user_name);
        id.hostname = std::fs::read(dir.join("environ")).ok().and_then(|env| {
            env.split(|b| *b == 0)
                .filter_map(|kv| std::str::from_utf8(kv).ok())
                .find_map(|kv| kv.strip_prefix("HOSTNAME=").map(str::to_owned))
        });
        Some(id)
    }
}

fn uid_of(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| Some(format!("uid-{uid}")))
}

/// Reads pod uids, systemd units and container ids out of `/proc/<pid>/cgroup` (v1 or v2).
pub fn parse_cgroup(text: &str) -> ProcessIdentity {
    let mut id = ProcessIdentity::default();
    for line in text.lines() {
        let path = line.rsplit(':').next().unwrap_or_default();
        for part in path.split('/') {
            // kubepods-burstable-pod<uid with _>.slice (systemd driver) or pod<uid> (cgroupfs driver).
            if let Some(pos) = part.rfind("pod")
                && (part.starts_with("kubepods") || part.starts_with("pod"))
            {
                let uid = part[pos + 3..].trim_end_matches(".slice").replace('_', "-");
                if uid.len() >= 32 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                    id.pod_uid = Some(uid);
                }
            }
            if (part.ends_with(".service") || part.ends_with(".scope"))
                && !part.starts_with("cri-containerd-")
                && !part.starts_with("docker-")
                && !part.starts_with("crio-")
                && !part.starts_with("libpod-")
                && !part.starts_with("session-")
                && !part.starts_with("user@")
            {
                id.unit = Some(part.to_owned());
            }
            for prefix in ["docker-", "libpod-", "cri-containerd-", "crio-"] {
                if let Some(rest) = part.strip_prefix(prefix) {
                    id.container = Some(rest.trim_end_matches(".scope").to_owned());
                }
            }
        }
    }
    if id.pod_uid.is_some() {
        // Inside a pod the unit and container are the runtime's, not who to bill.
        id.unit = None;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_uid_is_read_from_systemd_and_cgroupfs_layouts() {
        let systemd = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b5d1e6a_1c1d_4f3e_9a7b_0c1d2e3f4a5b.slice/cri-containerd-abc123.scope\n";
        assert_eq!(
            parse_cgroup(systemd).pod_uid.as_deref(),
            Some("6b5d1e6a-1c1d-4f3e-9a7b-0c1d2e3f4a5b")
        );
        let cgroupfs =
            "12:memory:/kubepods/besteffort/pod6b5d1e6a-1c1d-4f3e-9a7b-0c1d2e3f4a5b/0123abcd\n";
        assert_eq!(
            parse_cgroup(cgroupfs).pod_uid.as_deref(),
            Some("6b5d1e6a-1c1d-4f3e-9a7b-0c1d2e3f4a5b")
        );
    }

    #[test]
    fn off_kubernetes_a_process_is_its_unit_or_container() {
        let unit = parse_cgroup("0::/system.slice/train-llm.service\n");
        assert_eq!(unit.unit.as_deref(), Some("train-llm.service"));
        assert_eq!(unit.pod_uid, None);
        let docker = parse_cgroup("0::/system.slice/docker-4f2a9c.scope\n");
        assert_eq!(docker.container.as_deref(), Some("4f2a9c"));
        assert_eq!(docker.unit, None);
        let user = parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n");
        assert_eq!(
            (user.unit, user.container, user.pod_uid),
            (None, None, None)
        );
    }
}
