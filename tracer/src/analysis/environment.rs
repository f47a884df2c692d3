//! Facts about the host that the wording of verdicts and fixes depends on (its network
//! namespaces, processes, cgroups and congestion controls). Read by a host adapter outside the
//! core and handed in, so the diagnosis, the fix and the UDP notes all stand on it without
//! importing each other.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::analysis::container::CgroupInfo;
use crate::analysis::tunnel::facts::TunnelFacts;

/// Maps with number keys, which JSON writes as strings: read back from strings also where serde
/// buffers the input first (inside a recording's internally tagged `Entry`), which would
/// otherwise refuse a string where it expects a number.
fn string_keys<'de, D, K, V>(d: D) -> Result<HashMap<K, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: std::str::FromStr + Eq + std::hash::Hash,
    V: Deserialize<'de>,
{
    let map = HashMap::<String, V>::deserialize(d)?;
    map.into_iter()
        .map(|(k, v)| match k.parse() {
            Ok(key) => Ok((key, v)),
            Err(_) => Err(serde::de::Error::custom(format!("{k:?} is not a number"))),
        })
        .collect()
}

/// Facts about the host the fix depends on (side effects live with the caller).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// `net.ipv4.tcp_available_congestion_control` contains bbr.
    pub bbr_available: bool,
    /// Inode of the host's own network namespace (the fix then needs no nsenter).
    pub host_netns: u32,
    /// A process living in each network namespace, for `nsenter --net=/proc/PID/ns/net`.
    #[serde(deserialize_with = "string_keys")]
    pub netns_pids: HashMap<u32, u32>,
    /// Namespaces named by `ip netns add` (/run/netns/NAME), for `ip netns exec NAME`.
    #[serde(deserialize_with = "string_keys")]
    pub netns_names: HashMap<u32, String>,
    /// Every cgroup v2 id seen on the host: its path and container.
    #[serde(deserialize_with = "string_keys")]
    pub cgroups: HashMap<u64, CgroupInfo>,
    /// `net.ipv4.tcp_congestion_control` as each network namespace sees it (its default for
    /// new connections), for the namespaces flows were seen in.
    #[serde(deserialize_with = "string_keys")]
    pub netns_cc: HashMap<u32, String>,
    /// The host's `net.ipv4.tcp_available_congestion_control` and
    /// `tcp_allowed_congestion_control` (what a non-initial namespace may choose).
    pub available_cc: Vec<String>,
    pub allowed_cc: Vec<String>,
    /// TUN devices and who holds them, the namespaces that forward, and the flows they
    /// forward into a tunnel (see [`crate::analysis::tunnel`]).
    #[serde(default)]
    pub tunnels: TunnelFacts,
}
