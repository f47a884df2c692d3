//! Which container a socket belongs to, from its cgroup v2 path.
//!
//! Pure: the path comes from the host adapter (`crate::cgroups`), which walks the cgroup v2
//! hierarchy and reads names from the runtimes' own files; here the path's shape alone says the
//! runtime and the id, and the names the host adapter found are carried along.

use serde::{Deserialize, Serialize};

/// The software that made the cgroup a socket lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Docker,
    Podman,
    /// containerd's CRI plugin (Kubernetes pods) or plain containerd.
    Containerd,
    /// CRI-O (Kubernetes pods).
    Crio,
    /// LXC / LXD / Incus containers, not under Proxmox.
    Lxc,
    /// Proxmox VE containers (`lxc/<vmid>`).
    Proxmox,
    /// A systemd service or scope that is not one of the above.
    Systemd,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Podman => "podman",
            Self::Containerd => "containerd",
            Self::Crio => "crio",
            Self::Lxc => "lxc",
            Self::Proxmox => "proxmox",
            Self::Systemd => "systemd",
        }
    }
}

/// A Kubernetes pod, named from the kubelet's log directories.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// A container (or service) a cgroup belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Container {
    pub runtime: Runtime,
    /// The runtime's id: 64 hex digits for Docker/Podman/containerd/CRI-O, the vmid for Proxmox,
    /// the container name for LXC, the unit name for systemd.
    pub id: String,
    /// The name a user knows it by, when the host's files say it.
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pod: Option<Pod>,
}

/// What the host knows about one cgroup v2 id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupInfo {
    /// Path below the cgroup v2 mount, starting with `/` (`/` itself is the root).
    pub path: String,
    pub container: Option<Container>,
}
