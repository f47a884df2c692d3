//! `--anonymize`: a recording's addresses and names replaced by pseudonyms, consistent within
//! one file (each original gets the next pseudonym of its kind in order of first appearance),
//! so flows still group and compare; container ids become random-looking ids from a salt made
//! for each run, so one file's pseudonyms say nothing about another's.
//!
//! Done on the entries, before the replay: the verdicts and fixes the analysis writes then
//! quote the pseudonyms only. Addresses become 240.0.0.0/4 (IPv4, reserved: never a host's
//! address) or 100::/64 (IPv6 discard-only) ones, so a pseudonym is never an original address;
//! loopback and unspecified addresses, ports, kernel ids, cgroup ids and pids stay.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::analysis::container::{Container, Runtime};
use crate::analysis::environment::Environment;
use crate::analysis::sample::Sample;
use crate::recording::entry::{Entry, Header};

/// cgroup path components that name no one: kept so a path still shows its shape.
const STRUCTURAL: &[&str] = &[
    "system.slice",
    "user.slice",
    "init.scope",
    "machine.slice",
    "lxc",
    "lxc.payload",
    "lxc.monitor",
    "ns",
    "docker",
    "kubepods",
    "kubepods.slice",
    "burstable",
    "besteffort",
    "libpod_parent",
    ".lxc",
];

/// Engine scopes whose tail is a container id: `docker-<id>.scope` keeps its shape.
const ID_SCOPES: &[&str] = &["docker-", "libpod-", "cri-containerd-", "crio-", "libpod-conmon-", "crio-conmon-"];

#[derive(Debug)]
pub struct Anonymizer {
    salt: RandomState,
    /// Per kind, original -> pseudonym.
    maps: HashMap<&'static str, HashMap<String, String>>,
    v4: HashMap<Ipv4Addr, Ipv4Addr>,
    v6: HashMap<Ipv6Addr, Ipv6Addr>,
}

impl Default for Anonymizer {
    fn default() -> Self {
        Self { salt: RandomState::new(), maps: HashMap::new(), v4: HashMap::new(), v6: HashMap::new() }
    }
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Anonymizer {
    /// `kind-N` for the N-th distinct original of `kind`.
    fn name(&mut self, kind: &'static str, original: &str) -> String {
        let map = self.maps.entry(kind).or_default();
        let n = map.len() + 1;
        map.entry(original.to_string()).or_insert_with(|| format!("{kind}-{n}")).clone()
    }

    /// A 64-hex-digit id that looks like a container id, from the salt.
    fn hex_id(&mut self, original: &str) -> String {
        let salt = &self.salt;
        let map = self.maps.entry("id").or_default();
        let n = map.len() as u64;
        map.entry(original.to_string())
            .or_insert_with(|| (0..4u64).map(|i| format!("{:016x}", salt.hash_one((n, i)))).collect())
            .clone()
    }

    fn ip(&mut self, ip: IpAddr) -> IpAddr {
        if ip.is_loopback() || ip.is_unspecified() {
            return ip;
        }
        match ip {
            IpAddr::V4(a) => {
                let n = self.v4.len() as u32 + 1;
                IpAddr::V4(*self.v4.entry(a).or_insert_with(|| Ipv4Addr::from(0xf000_0000 | (n & 0x0fff_ffff))))
            }
            IpAddr::V6(a) => {
                // An IPv4-mapped address takes its IPv4 pseudonym, so both spellings agree.
                if let Some(v4) = a.to_ipv4_mapped() {
                    let IpAddr::V4(p) = self.ip(IpAddr::V4(v4)) else { unreachable!() };
                    return IpAddr::V6(p.to_ipv6_mapped());
                }
                let n = self.v6.len() as u128 + 1;
                IpAddr::V6(*self.v6.entry(a).or_insert_with(|| Ipv6Addr::from((0x0100u128 << 112) | n)))
            }
        }
    }

    fn addr(&mut self, a: SocketAddr) -> SocketAddr {
        SocketAddr::new(self.ip(a.ip()), a.port())
    }

    fn sample(&mut self, s: &mut Sample) {
        s.local = self.addr(s.local);
        s.remote = self.addr(s.remote);
        if let Some(o) = s.owner.as_mut() {
            o.comm = self.name("proc", &o.comm).into();
        }
    }

    /// UDP readings lose addresses, process names and command-line arguments (which can hold
    /// secrets), except what the verdict rests on: tailscaled's name and its
    /// `--tun=userspace-networking`, which name software, not the user's data. Routes keep
    /// their device names, which say what kind of path a flow takes.
    fn sockets(&mut self, r: &mut crate::analysis::udp::SocketReadings) {
        for u in &mut r.udp {
            u.local = self.addr(u.local);
            u.remote = self.addr(u.remote);
            if let Some(o) = u.owner.as_mut() {
                o.comm = self.process_word(&o.comm);
                o.cmdline = o.cmdline.iter().map(|a| self.process_word(a)).collect();
                for (local, remote) in &mut o.tcp {
                    (*local, *remote) = (self.addr(*local), self.addr(*remote));
                }
            }
        }
    }

    /// A process name or argument: renamed, but for what a verdict rests on (tailscaled and its
    /// `--tun=userspace-networking`, which name software, not the user's data).
    fn process_word(&mut self, s: &str) -> String {
        const KEPT: [&str; 3] = ["tailscaled", "--tun=userspace-networking", "-tun=userspace-networking"];
        let base = s.rsplit('/').next().unwrap_or(s);
        if KEPT.contains(&base) {
            base.to_string()
        } else {
            self.name("proc", s)
        }
    }

    /// Tunnel facts lose their holders' names and every address; devices keep their names, as
    /// routes do.
    fn tunnels(&mut self, t: &mut crate::analysis::tunnel::TunnelFacts) {
        for h in t.devices.iter_mut().flat_map(|d| d.holders.iter_mut()) {
            h.comm = self.process_word(&h.comm);
        }
        for r in &mut t.routing {
            r.addrs = r.addrs.iter().map(|a| self.ip(*a)).collect();
        }
        for r in &mut t.routes {
            (r.local, r.remote) = (self.addr(r.local), self.addr(r.remote));
            r.via.addr = self.ip(r.via.addr);
            r.via.name = r.via.name.as_ref().map(|n| self.name("netns", n));
        }
    }

    /// A systemd unit keeps its type suffix: `nginx.service` -> `unit-1.service`.
    fn unit(&mut self, unit: &str) -> String {
        match unit.rfind('.') {
            Some(dot) if dot > 0 => format!("{}{}", self.name("unit", &unit[..dot]), &unit[dot..]),
            _ => self.name("unit", unit),
        }
    }

    fn container_id(&mut self, c: &Container) -> String {
        if is_hex64(&c.id) {
            self.hex_id(&c.id)
        } else if c.runtime == Runtime::Systemd {
            self.unit(&c.id)
        } else if c.runtime == Runtime::Proxmox && c.id.bytes().all(|b| b.is_ascii_digit()) {
            // A vmid is a number the admin picked, not a name.
            c.id.clone()
        } else {
            self.name("container", &c.id)
        }
    }

    fn container(&mut self, c: &mut Container) {
        c.id = self.container_id(c);
        if let Some(name) = c.name.as_mut() {
            *name = self.name("container", name);
        }
        if let Some(pod) = c.pod.as_mut() {
            pod.namespace = self.name("namespace", &pod.namespace);
            pod.name = self.name("pod", &pod.name);
            pod.uid = self.name("uid", &pod.uid);
        }
        // A directory of this host: the fix it serves cannot be run elsewhere anyway.
        c.lxc_path = None;
    }

    /// Each component of a cgroup path: structural ones kept, engine scopes keep their shape
    /// with the id replaced, units keep their suffix, numbers stay, the rest become `cg-N`.
    pub fn cgroup_path(&mut self, path: &str) -> String {
        let parts: Vec<String> = path
            .split('/')
            .map(|part| {
                if part.is_empty() || STRUCTURAL.contains(&part) || part.bytes().all(|b| b.is_ascii_digit()) {
                    return part.to_string();
                }
                for prefix in ID_SCOPES {
                    if let Some(id) = part.strip_prefix(prefix).and_then(|r| r.strip_suffix(".scope")) {
                        if is_hex64(id) {
                            return format!("{prefix}{}.scope", self.hex_id(id));
                        }
                    }
                }
                if is_hex64(part) {
                    return self.hex_id(part);
                }
                if part.starts_with("kubepods") {
                    return self.name("cg", part);
                }
                if [".service", ".scope", ".slice", ".socket", ".mount"].iter().any(|s| part.ends_with(s)) {
                    return self.unit(part);
                }
                self.name("cg", part)
            })
            .collect();
        parts.join("/")
    }

    fn env(&mut self, env: &mut Environment) {
        // Sorted, so pseudonyms follow the ids and not a hash map's order.
        let mut ids: Vec<u64> = env.cgroups.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(info) = env.cgroups.get_mut(&id) else { continue };
            let mut info_new = std::mem::take(info);
            if let Some(c) = info_new.container.as_mut() {
                self.container(c);
            }
            info_new.path = self.cgroup_path(&info_new.path);
            env.cgroups.insert(id, info_new);
        }
        let mut names: Vec<(u32, String)> = env.netns_names.drain().collect();
        names.sort_unstable();
        env.netns_names = names.into_iter().map(|(k, v)| (k, self.name("netns", &v))).collect();
        self.tunnels(&mut env.tunnels);
    }

    /// A filter term as `Header::filters` has it (`container=NAME`, `cgroup=PATH`, `netns=NAME`).
    fn filter(&mut self, term: &str) -> String {
        let (kind, value) = term.split_once('=').unwrap_or(("", term));
        let value = match kind {
            "cgroup" => self.cgroup_path(value),
            // A name or an id seen in the host facts gets the same pseudonym as there.
            "container" => {
                if let Some(p) = self.maps.get("container").and_then(|m| m.get(value)) {
                    p.clone()
                } else if let Some(p) = self.maps.get("id").and_then(|m| m.get(value)) {
                    p.clone()
                } else {
                    self.name("container", value)
                }
            }
            "netns" if value.bytes().all(|b| b.is_ascii_digit()) => value.to_string(),
            "netns" => self.name("netns", value),
            _ => self.name("filter", value),
        };
        if kind.is_empty() {
            value
        } else {
            format!("{kind}={value}")
        }
    }

    fn header(&mut self, h: &mut Header) {
        h.host = self.name("host", &h.host);
        h.filters = std::mem::take(&mut h.filters).iter().map(|f| self.filter(f)).collect();
        h.anonymized = true;
    }

    /// Free text (an action's words): every original seen so far replaced, longest first.
    fn text(&self, text: &str) -> String {
        let mut pairs: Vec<(String, String)> =
            self.maps.values().flat_map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone()))).collect();
        pairs.extend(self.v4.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        pairs.extend(self.v6.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        pairs.retain(|(k, _)| !k.is_empty());
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        let mut out = text.to_string();
        for (k, v) in pairs {
            out = out.replace(&k, &v);
        }
        out
    }

    pub fn entry(&mut self, mut entry: Entry) -> Entry {
        match &mut entry {
            Entry::Header(h) => self.header(h),
            Entry::Samples { samples } => samples.iter_mut().for_each(|s| self.sample(s)),
            Entry::Host { env } => self.env(env),
            Entry::Sockets { readings } => self.sockets(readings),
            Entry::Action(record) => {
                record.target = self.text(&record.target);
                record.messages.iter_mut().for_each(|m| *m = self.text(m));
            }
            Entry::Tick { .. } | Entry::End { .. } | Entry::Decisions { .. } => {}
        }
        entry
    }
}

/// `entries` with stable pseudonyms, fresh for this run (one per file).
pub fn anonymize(entries: impl IntoIterator<Item = Entry>) -> impl Iterator<Item = Entry> {
    let mut a = Anonymizer::default();
    entries.into_iter().map(move |e| a.entry(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::fixture;

    #[test]
    fn pseudonyms_are_stable_within_a_file_and_fresh_per_file() {
        let a: Vec<Entry> = anonymize(fixture::entries()).collect();
        let flows = |entries: &[Entry]| -> Vec<(u64, String, String)> {
            entries
                .iter()
                .filter_map(|e| match e {
                    Entry::Samples { samples } => Some(samples.clone()),
                    _ => None,
                })
                .flatten()
                .map(|s| (s.cookie, s.local.to_string(), s.owner.map(|o| o.comm.to_string()).unwrap_or_default()))
                .collect()
        };
        let fa = flows(&a);
        for (cookie, local, comm) in &fa {
            let first = fa.iter().find(|f| f.0 == *cookie).expect("flow");
            assert_eq!((&first.1, &first.2), (local, comm), "one pseudonym per original");
        }
        assert_eq!(fa.iter().find(|f| f.0 == fixture::CUBIC).expect("cubic").1, "240.0.0.1:41234");
        // Order of appearance makes the numbers the same; the salted ids differ between runs.
        let b: Vec<Entry> = anonymize(fixture::entries()).collect();
        assert_eq!(flows(&b), fa);
        let id = |entries: &[Entry]| match &entries[1] {
            Entry::Host { env } => {
                env.cgroups[&crate::test_support::feed::JELLYFIN_CGROUP].container.clone().expect("c").id
            }
            _ => panic!("host second"),
        };
        assert_eq!(id(&a).len(), 64);
        assert_ne!(id(&a), id(&b));
    }

    #[test]
    fn tunnel_facts_lose_their_holders_and_addresses_and_keep_their_devices() {
        use crate::analysis::tunnel::{Forwarded, NetnsRouting, TunDevice, TunHolder, TunnelRoute};
        let mut env = Environment::default();
        env.netns_names.insert(9, "router".into());
        let holder = TunHolder { pid: 812, comm: "wireguard-go".into() };
        env.tunnels.devices.push(TunDevice {
            netns: 9,
            ifindex: 7,
            name: "wg0".into(),
            mtu: 1420,
            holders: vec![holder],
        });
        env.tunnels.routing.push(NetnsRouting {
            netns: 9,
            addrs: vec!["198.18.9.1".parse().expect("ip")],
            forwarding: true,
        });
        env.tunnels.routes.push(TunnelRoute {
            netns: 5,
            local: "198.18.9.2:80".parse().expect("addr"),
            remote: "198.18.9.1:40000".parse().expect("addr"),
            tun_netns: 9,
            tun_ifindex: 7,
            via: Forwarded {
                netns: 9,
                name: Some("router".into()),
                addr: "198.18.9.1".parse().expect("ip"),
                masquerade: true,
            },
        });
        let mut a = Anonymizer::default();
        a.env(&mut env);
        let json = serde_json::to_string(&env).expect("json");
        for original in ["wireguard-go", "198.18.9", "router"] {
            assert!(!json.contains(original), "{original} left in {json}");
        }
        let t = &env.tunnels;
        assert_eq!((t.devices[0].name.as_str(), t.devices[0].holders[0].pid), ("wg0", 812), "devices and pids stay");
        assert_eq!(t.routing[0].addrs[0], t.routes[0].via.addr, "one pseudonym per address");
        assert_eq!(t.routes[0].via.name, env.netns_names.get(&9).cloned(), "the namespace's pseudonym");
    }

    #[test]
    fn cgroup_paths_keep_their_shape() {
        let mut a = Anonymizer::default();
        let id = "4c1f0e9a7b2d83c5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9";
        let p = a.cgroup_path(&format!("/system.slice/docker-{id}.scope"));
        assert!(p.starts_with("/system.slice/docker-") && p.ends_with(".scope") && !p.contains(id), "{p}");
        assert_eq!(a.cgroup_path("/lxc/102/ns/system.slice/cron.service"), "/lxc/102/ns/system.slice/unit-1.service");
        assert_eq!(a.cgroup_path("/"), "/");
        assert_eq!(a.cgroup_path("/home/secret"), "/cg-1/cg-2");
    }
}
