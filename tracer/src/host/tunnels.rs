//! The host's tunnels, for [`crate::analysis::tunnel`]: the TUN devices of every network
//! namespace (rtnetlink, from inside each), the processes holding them (a `/dev/net/tun` fd
//! whose `/proc/PID/fdinfo` says `iff: NAME`), the namespaces that forward (their
//! `ip_forward` and addresses), and the answers to [`follow`]'s questions: how a namespace
//! routes to an address (the kernel's own lookup) and whom a router's connection tracking says
//! a masqueraded connection really comes from (`nf_conntrack`).
//!
//! Everything inside a namespace is read in the same visit as its congestion-control default and
//! buffers ([`crate::host::environment`]: a short-lived thread enters each namespace in turn,
//! `setns` moving only that thread, and asks one rtnetlink socket there); the rest of the
//! process stays where it is. The reading costs about 0.1 ms per namespace each time the host facts are read (10 ms
//! for 100 namespaces, every 5 s), and the walk of `/proc` for holders runs only while some
//! namespace has a TUN device.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use crate::analysis::environment::Environment;
use crate::analysis::tunnel::{
    follow, Hop, NetnsRouting, RouteQuery, Routing, TunDevice, TunHolder, TunnelFacts, TunnelRoute,
};
use crate::host::netlink::{Link, Rtnl};
use crate::host::procs;

/// Most descriptors read per process while looking for TUN files.
const MAX_FDS: usize = 65_536;

/// What one namespace showed: its TUN devices, whether it forwards, and (when it forwards and
/// has a TUN device: a router) its addresses.
pub(super) struct NetnsView {
    netns: u32,
    tuns: Vec<Link>,
    forwarding: bool,
    addrs: Vec<IpAddr>,
}

impl NetnsView {
    /// The view of namespace `netns`, read by a thread inside it through `rtnl`, a socket of it
    /// (see [`crate::host::environment`], which visits each namespace once for all its facts);
    /// `None` when its links cannot be listed.
    pub(super) fn read_here(netns: u32, rtnl: &mut Rtnl) -> Option<Self> {
        let tuns: Vec<Link> = rtnl.links().ok()?.into_iter().filter(|l| l.tun).collect();
        let forwarding = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").is_ok_and(|v| v.trim() == "1");
        let addrs = if forwarding && !tuns.is_empty() { rtnl.addresses().unwrap_or_default() } else { Vec::new() };
        Some(Self { netns, tuns, forwarding, addrs })
    }
}

/// The TUN devices of the namespaces `views` show, with the processes holding them, and the
/// namespaces that could route into them. Nothing is walked in `/proc` while no TUN exists.
pub(super) fn tunnel_facts(views: Vec<NetnsView>) -> TunnelFacts {
    let with_tuns: HashSet<u32> = views.iter().filter(|v| !v.tuns.is_empty()).map(|v| v.netns).collect();
    if with_tuns.is_empty() {
        return TunnelFacts::default();
    }
    let held = tun_holders(&with_tuns);
    let mut facts = TunnelFacts::default();
    for v in views {
        for l in &v.tuns {
            let holders = held.get(&(v.netns, l.name.clone())).cloned().unwrap_or_default();
            facts.devices.push(TunDevice {
                netns: v.netns,
                ifindex: l.ifindex,
                name: l.name.clone(),
                mtu: l.mtu,
                holders,
            });
        }
        if v.forwarding && !v.tuns.is_empty() {
            facts.routing.push(NetnsRouting { netns: v.netns, addrs: v.addrs, forwarding: true });
        }
    }
    facts
}

/// The processes of the namespaces in `netns` holding a TUN file, by (namespace, device name):
/// each `/dev/net/tun` fd's fdinfo names its device (`iff:`). cctrace itself is left out: a
/// TUN it holds is the demo's emulated path, not a tunnel.
fn tun_holders(netns: &HashSet<u32>) -> HashMap<(u32, String), Vec<TunHolder>> {
    let mut out: HashMap<(u32, String), Vec<TunHolder>> = HashMap::new();
    let own = std::process::id();
    let proc = Path::new(procs::PROC);
    for pid in procs::pids(proc) {
        let Some(ns) = crate::host::netns_inode(&proc.join(pid.to_string()).join("ns/net")) else { continue };
        if pid == own || !netns.contains(&ns) {
            continue;
        }
        let devices = tun_files(proc, pid);
        if devices.is_empty() {
            continue;
        }
        let comm = procs::comm(proc, pid);
        for dev in devices {
            let holders = out.entry((ns, dev)).or_default();
            if !holders.iter().any(|h| h.pid == pid) {
                holders.push(TunHolder { pid, comm: comm.clone() });
            }
        }
    }
    out
}

/// The TUN devices process `pid` holds files of.
fn tun_files(proc: &Path, pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for (fd, target) in procs::fd_targets(proc, pid, MAX_FDS) {
        if target.as_os_str() == "/dev/net/tun" {
            let info = std::fs::read_to_string(proc.join(pid.to_string()).join("fdinfo").join(fd.to_string()));
            if let Some(dev) = info.ok().as_deref().and_then(tun_of_fdinfo) {
                out.push(dev.to_string());
            }
        }
    }
    out
}

/// The device a TUN file is attached to, from its fdinfo (`iff:\twg0`).
fn tun_of_fdinfo(info: &str) -> Option<&str> {
    info.lines().find_map(|l| l.strip_prefix("iff:")).map(str::trim).filter(|d| !d.is_empty())
}

/// The flows of `queries` that another namespace forwards into its tunnel, found by following
/// them through the namespaces' routing (a thread enters each namespace it asks).
pub fn read_routes(env: &Environment, queries: &[RouteQuery]) -> Vec<TunnelRoute> {
    if queries.is_empty() || !env.tunnels.has_router() {
        return Vec::new();
    }
    let (env, queries) = (env.clone(), queries.to_vec());
    let reader = std::thread::Builder::new().name("cct-netns-route".into()).spawn(move || {
        let mut routing = HostRouting { env: &env, inside: None };
        let mut routes: Vec<TunnelRoute> =
            queries.iter().filter_map(|q| follow(q, &env.tunnels, &env.netns_names, &mut routing)).collect();
        // In one order whatever the flows' rates: host facts that did not change compare equal.
        routes.sort_unstable_by_key(|r| (r.netns, r.local, r.remote));
        routes
    });
    reader.ok().and_then(|t| t.join().ok()).unwrap_or_default()
}

/// [`Routing`] answered from the kernel, on the thread that moves between namespaces (by the
/// paths the host facts know into each).
struct HostRouting<'a> {
    env: &'a Environment,
    /// The namespace the thread is in and a socket of it.
    inside: Option<(u32, Rtnl)>,
}

impl HostRouting<'_> {
    /// The thread in namespace `netns`, with an rtnetlink socket of it.
    fn inside_netns(&mut self, netns: u32) -> Option<&mut Rtnl> {
        if self.inside.as_ref().is_none_or(|(n, _)| *n != netns) {
            self.inside = None;
            let path = crate::host::path_into_netns(self.env, netns)?;
            if crate::host::enter_netns(netns, Path::new(&path)).is_err() {
                return None;
            }
            self.inside = Some((netns, Rtnl::open().ok()?));
        }
        self.inside.as_mut().map(|(_, r)| r)
    }
}

impl Routing for HostRouting<'_> {
    fn route(&mut self, netns: u32, dst: IpAddr) -> Option<Hop> {
        self.inside_netns(netns)?.route_to(dst).ok().flatten()
    }

    fn unmasquerade(&mut self, netns: u32, from: SocketAddr, to: SocketAddr) -> Option<IpAddr> {
        self.inside_netns(netns)?;
        // The thread's own view of /proc/net: the namespace it is in now.
        let table = std::fs::read_to_string("/proc/thread-self/net/nf_conntrack").ok()?;
        original_source(&table, from, to)
    }
}

/// In a `nf_conntrack` table, the original source of the connection whose replies go from
/// `from` to `to` (a reply tuple `src=FROM dst=TO sport dport`).
fn original_source(table: &str, from: SocketAddr, to: SocketAddr) -> Option<IpAddr> {
    table.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let values = |key: &str| -> Vec<&str> { words.iter().filter_map(|w| w.strip_prefix(key)).collect() };
        let (src, dst, sport, dport) = (values("src="), values("dst="), values("sport="), values("dport="));
        // The original tuple first, the reply tuple second.
        if src.len() < 2 || dst.len() < 2 || sport.len() < 2 || dport.len() < 2 {
            return None;
        }
        let reply_from: SocketAddr = format!("{}:{}", src[1], sport[1]).parse().ok()?;
        let reply_to: SocketAddr = format!("{}:{}", dst[1], dport[1]).parse().ok()?;
        (reply_from == from && reply_to == to).then(|| src[0].parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tun_files_device_is_read_from_its_fdinfo() {
        let info = "pos:\t0\nflags:\t0104002\nmnt_id:\t25\nino:\t1061\niff:\twg4242s\n";
        assert_eq!(tun_of_fdinfo(info), Some("wg4242s"));
        assert_eq!(tun_of_fdinfo("pos:\t0\nflags:\t02\n"), None, "a TUN file not attached yet");
    }

    #[test]
    fn the_routers_connection_tracking_names_who_a_masqueraded_flow_comes_from() {
        let table = "ipv4     2 tcp      6 431999 ESTABLISHED src=198.18.7.2 dst=198.18.9.2 sport=51234 \
                     dport=80 src=198.18.9.2 dst=198.18.9.1 sport=80 dport=38112 [ASSURED] mark=0 zone=0 use=2\n\
                     ipv4     2 udp      17 29 src=198.19.0.1 dst=198.19.1.1 sport=51820 dport=51820 \
                     src=198.19.1.1 dst=198.19.0.1 sport=51820 dport=51820 mark=0 zone=0 use=2\n";
        let from: SocketAddr = "198.18.9.2:80".parse().expect("addr");
        let to: SocketAddr = "198.18.9.1:38112".parse().expect("addr");
        assert_eq!(original_source(table, from, to), "198.18.7.2".parse().ok());
        assert_eq!(original_source(table, to, from), None, "the reply tuple, not the original");
        assert_eq!(original_source("", from, to), None);
    }
}
