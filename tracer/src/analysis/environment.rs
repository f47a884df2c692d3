//! Facts about the host that the wording of verdicts and fixes depends on (its network
//! namespaces, processes, cgroups and congestion controls). Read by a host adapter outside the
//! core and handed in, so the diagnosis, the fix and the UDP notes all stand on it without
//! importing each other.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

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
    /// `net.ipv4.tcp_wmem` and `tcp_rmem` (min, default, max bytes) as each network namespace
    /// sees them (per namespace since Linux 4.15: a new one copies the host's), for the
    /// namespaces `netns_cc` covers: how far autotuning may grow a socket's buffers there.
    #[serde(default, deserialize_with = "string_keys")]
    pub netns_wmem: HashMap<u32, BufferLimits>,
    #[serde(default, deserialize_with = "string_keys")]
    pub netns_rmem: HashMap<u32, BufferLimits>,
    /// The host-wide caps on what an application may set with `SO_SNDBUF` / `SO_RCVBUF`
    /// (`net.core.wmem_max`, `rmem_max`; the kernel doubles the value asked, up to twice
    /// these), 0 when unknown.
    #[serde(default)]
    pub core_wmem_max: u32,
    #[serde(default)]
    pub core_rmem_max: u32,
    /// The host's `net.ipv4.tcp_mem` (pages: low, pressure, high), for every namespace.
    #[serde(default)]
    pub tcp_mem_pages: [u64; 3],
    /// The root qdisc of each device, by namespace and interface index (`fq`, `fq_codel`,
    /// `noqueue`, ...): what paces or queues a flow where it leaves the host.
    #[serde(default, deserialize_with = "nested_string_keys")]
    pub qdiscs: HashMap<u32, HashMap<u32, String>>,
}

/// A `tcp_wmem` / `tcp_rmem` triple: min, default and max bytes of a socket's buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferLimits {
    pub min: u32,
    pub default: u32,
    pub max: u32,
}

impl BufferLimits {
    /// From the sysctl's text (`"4096\t16384\t4194304"`).
    pub fn parse(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace().map(|w| w.parse::<u32>().ok());
        let (min, default, max) = (words.next()??, words.next()??, words.next()??);
        words.next().is_none().then_some(Self { min, default, max })
    }

    /// As the sysctl is written: three numbers separated by spaces.
    pub fn sysctl_value(&self) -> String {
        format!("{} {} {}", self.min, self.default, self.max)
    }

    /// The same with another maximum.
    pub fn with_max(self, max: u32) -> Self {
        Self { max, ..self }
    }
}

impl Environment {
    /// The root qdisc of device `ifindex` in namespace `netns`, when read.
    pub fn qdisc(&self, netns: u32, ifindex: u32) -> Option<&str> {
        self.qdiscs.get(&netns)?.get(&ifindex).map(String::as_str)
    }
}

/// What changed between two readings of the host facts, as the verdicts see it.
#[derive(Debug, PartialEq, Eq)]
pub enum FactsChanged {
    /// A host-wide fact: any flow's verdict may change.
    Everywhere,
    /// Only facts of these namespaces and cgroups: only their flows' verdicts may change. A
    /// process started in a namespace that had none (a server's first, say) changes that
    /// namespace's entry only; woken as a host-wide change, it had cctrace judge 20,000 idle
    /// flows again, 85-440 ms of its time, where one flow's namespace had changed.
    In { netns: HashSet<u32>, cgroups: HashSet<u64> },
}

impl FactsChanged {
    /// How `now` differs from `before`; `None` when it does not.
    pub fn between(before: &Environment, now: &Environment) -> Option<Self> {
        // Destructured whole: a fact added to `Environment` must be placed here.
        let Environment {
            bbr_available,
            host_netns,
            netns_pids,
            netns_names,
            cgroups,
            netns_cc,
            available_cc,
            allowed_cc,
            tunnels,
            netns_wmem,
            netns_rmem,
            core_wmem_max,
            core_rmem_max,
            tcp_mem_pages,
            qdiscs,
        } = now;
        let host_wide = (bbr_available, host_netns, available_cc, allowed_cc, tunnels)
            != (&before.bbr_available, &before.host_netns, &before.available_cc, &before.allowed_cc, &before.tunnels)
            || (core_wmem_max, core_rmem_max, tcp_mem_pages)
                != (&before.core_wmem_max, &before.core_rmem_max, &before.tcp_mem_pages);
        if host_wide {
            return Some(Self::Everywhere);
        }
        let mut netns = HashSet::new();
        keys_differing(&before.netns_pids, netns_pids, &mut netns);
        keys_differing(&before.netns_names, netns_names, &mut netns);
        keys_differing(&before.netns_cc, netns_cc, &mut netns);
        keys_differing(&before.netns_wmem, netns_wmem, &mut netns);
        keys_differing(&before.netns_rmem, netns_rmem, &mut netns);
        keys_differing(&before.qdiscs, qdiscs, &mut netns);
        let mut in_cgroups = HashSet::new();
        keys_differing(&before.cgroups, cgroups, &mut in_cgroups);
        (!netns.is_empty() || !in_cgroups.is_empty()).then_some(Self::In { netns, cgroups: in_cgroups })
    }
}

/// Add to `out` the keys whose values differ between `a` and `b`, or that only one has.
fn keys_differing<K: Copy + Eq + Hash, V: PartialEq>(a: &HashMap<K, V>, b: &HashMap<K, V>, out: &mut HashSet<K>) {
    out.extend(a.iter().filter(|(k, v)| b.get(*k) != Some(*v)).map(|(k, _)| *k));
    out.extend(b.keys().filter(|k| !a.contains_key(*k)).copied());
}

/// [`string_keys`] one level down.
fn nested_string_keys<'de, D>(d: D) -> Result<HashMap<u32, HashMap<u32, String>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let map = HashMap::<String, HashMap<String, String>>::deserialize(d)?;
    let key = |k: String| k.parse::<u32>().map_err(|_| serde::de::Error::custom(format!("{k:?} is not a number")));
    map.into_iter()
        .map(|(k, inner)| {
            let inner = inner.into_iter().map(|(i, v)| Ok((key(i)?, v))).collect::<Result<_, _>>()?;
            Ok((key(k)?, inner))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_changed_names_the_namespaces_and_cgroups_or_says_everywhere() {
        let before = Environment { netns_pids: HashMap::from([(1, 10)]), ..Environment::default() };
        assert_eq!(FactsChanged::between(&before, &before.clone()), None);
        let mut now = before.clone();
        now.netns_pids.insert(2, 20);
        now.netns_pids.remove(&1);
        now.cgroups.insert(7, CgroupInfo::default());
        let touched = FactsChanged::In { netns: HashSet::from([1, 2]), cgroups: HashSet::from([7]) };
        assert_eq!(FactsChanged::between(&before, &now), Some(touched));
        now.allowed_cc = vec!["reno".into(), "bbr".into(), "cubic".into()];
        assert_eq!(FactsChanged::between(&before, &now), Some(FactsChanged::Everywhere));
    }

    #[test]
    fn buffer_limits_read_as_the_kernel_writes_them() {
        let l = BufferLimits::parse("4096\t16384\t4194304\n").expect("parses");
        assert_eq!(l, BufferLimits { min: 4096, default: 16384, max: 4194304 });
        assert_eq!(l.with_max(67108864).sysctl_value(), "4096 16384 67108864");
        assert_eq!(BufferLimits::parse("4096 16384"), None);
        assert_eq!(BufferLimits::parse("4096 16384 x"), None);
        assert_eq!(BufferLimits::parse("1 2 3 4"), None);
    }

    #[test]
    fn the_new_facts_read_back_from_a_recording_and_are_absent_in_an_old_one() {
        let mut env = Environment::default();
        env.netns_wmem.insert(7, BufferLimits { min: 4096, default: 16384, max: 4194304 });
        env.qdiscs.entry(7).or_default().insert(2, "fq".into());
        env.core_wmem_max = 212_992;
        let back: Environment = serde_json::from_str(&serde_json::to_string(&env).expect("json")).expect("reads");
        assert_eq!(back, env);
        assert_eq!(back.qdisc(7, 2), Some("fq"));
        let old = r#"{"bbr_available":true,"host_netns":1,"netns_pids":{},"netns_names":{},"cgroups":{},"netns_cc":{},"available_cc":[],"allowed_cc":[]}"#;
        let old: Environment = serde_json::from_str(old).expect("an older recording's facts");
        assert!(old.netns_wmem.is_empty() && old.qdiscs.is_empty());
    }
}
