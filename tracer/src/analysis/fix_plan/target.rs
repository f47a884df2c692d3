//! The network namespace a fix is for, as every part of the fix names it.

use serde::{Deserialize, Serialize};

/// The network namespace a fix is for, and how the user named it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// Its inode.
    pub netns: u32,
    /// The path it is entered through (`/run/netns/NAME`, `/proc/PID/ns/net`).
    pub path: String,
    /// How it was reached, for people: `ip netns cct-1`, `container jellyfin (pid 4242)`,
    /// `the host's own namespace`.
    pub reached: String,
    /// The initial (host) namespace: its default is every host connection's.
    pub host: bool,
    /// Made by `ip netns add` (no process keeps it, it does not survive a reboot).
    pub ip_netns: bool,
    /// The runtime option that sets the sysctl when the container is created (`docker run
    /// --sysctl ...`), for a container's namespace.
    pub runtime_sysctl: Option<String>,
}
