//! Tunnels: a TCP flow whose packets leave by a TUN device a process holds (wireguard-go,
//! tailscaled in TUN mode, OpenVPN) crosses the path inside that process's UDP flow. The loss a
//! flagged flow suffers is then in the tunnel's underlay, outside this host, while the flow
//! itself is the kernel's TCP: the kernel's fix applies to it, in its own namespace.
//!
//! The host facts ([`TunnelFacts`], read by the host layer into the [`Environment`]) say which
//! TUN devices exist, who holds them, which namespaces forward, and, for flows that leave by
//! another device, the routes that lead them into a tunnel of another namespace (a subnet
//! router), found by [`follow`] over the namespaces' own routing. [`find_tunnels`] joins them
//! with the flows and the UDP view; [`tunnel_verdict`] is the verdict on the tunnel process's
//! UDP flow, which carries the flows and decides nothing itself.

pub mod facts;
mod follow;
pub mod place;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::analysis::diagnosis::Verdict;
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::{Flow, FlowTable};
pub use crate::analysis::tunnel::facts::{Forwarded, NetnsRouting, TunDevice, TunHolder, TunnelFacts, TunnelRoute};
pub use crate::analysis::tunnel::follow::{follow, route_queries, Hop, RouteQuery, Routing};
pub use crate::analysis::tunnel::place::{tunnel_note, Tunnel, TunnelUdp};
use crate::analysis::udp::{AppProto, UdpFlow, UdpTable, UdpVerdict};
use crate::analysis::units::rate;

/// A UDP flow must move this much either way to count as a tunnel's underlay.
pub const UNDERLAY_MIN_BPS: f64 = 1_000_000.0;

/// The tunnel of every open flow that leaves by a held TUN device, in its own namespace or,
/// through a router, in another: named once its process's UDP flow shows in the UDP view (a
/// TUN device whose holder sends no UDP, such as a path emulator's, is no tunnel). Costs a
/// look-up or two per open flow, and nothing while no tunnel carries anything.
pub fn find_tunnels(table: &FlowTable, env: &Environment, udp: &UdpTable) -> HashMap<u64, Tunnel> {
    let mut out = HashMap::new();
    let tunnels = live_tunnels(&env.tunnels, udp);
    if tunnels.is_empty() {
        return out;
    }
    let routes: HashMap<(u32, SocketAddr, SocketAddr), &TunnelRoute> =
        env.tunnels.routes.iter().map(|r| ((r.netns, r.local, r.remote), r)).collect();
    for f in table.open_flows() {
        let s = &f.latest;
        let Some(route) = s.route else { continue };
        let tunnel = match tunnels.get(&(s.netns, route.ifindex)) {
            Some(t) => t.clone(),
            None => {
                let Some(r) = routes.get(&(s.netns, s.local, s.remote)) else { continue };
                let Some(t) = tunnels.get(&(r.tun_netns, r.tun_ifindex)) else { continue };
                Tunnel { via: Some(r.via.clone()), ..t.clone() }
            }
        };
        out.insert(f.cookie(), tunnel);
    }
    out
}

/// The tunnels that carry something now, by their device's (namespace, ifindex): each held
/// TUN device whose holder moves UDP (its busiest holder's busiest flow is the underlay).
fn live_tunnels(facts: &TunnelFacts, udp: &UdpTable) -> HashMap<(u32, u32), Tunnel> {
    if udp.is_empty() {
        return HashMap::new();
    }
    let rate = |u: &UdpFlow| u.tx_bps.max(u.rx_bps);
    facts
        .devices
        .iter()
        .filter_map(|d| {
            let (holder, underlay) = d
                .holders
                .iter()
                .filter_map(|h| udp.busiest_of_pid(h.pid, UNDERLAY_MIN_BPS).map(|u| (h, u)))
                .max_by(|a, b| rate(a.1).total_cmp(&rate(b.1)))?;
            let tunnel = Tunnel {
                dev: d.name.clone(),
                mtu: d.mtu,
                netns: d.netns,
                process: holder.clone(),
                via: None,
                udp: TunnelUdp::of(underlay),
            };
            Some(((d.netns, d.ifindex), tunnel))
        })
        .collect()
}

/// A TCP flow inside a tunnel, as the tunnel process's verdict lists it.
#[derive(Clone, Copy, Debug)]
pub struct Carried<'a> {
    pub flow: &'a Flow,
    pub tunnel: &'a Tunnel,
    pub verdict: Option<&'a Verdict>,
}

/// The verdict on the UDP flow a tunnel process carries kernel TCP flows over (`carried`, with
/// `tunnel` theirs): it decides no rate itself (no congestion control: it encrypts and sends
/// what the flows inside give it); the flows do, and their fix is the kernel's. Lists them, and
/// the flagged ones' fixes as advice.
pub fn tunnel_verdict(flow: &UdpFlow, tunnel: &Tunnel, carried: &[Carried<'_>]) -> UdpVerdict {
    let what = match flow.app_proto {
        Some(AppProto::WireGuard) => "WireGuard",
        Some(AppProto::Quic) => "QUIC",
        None => "UDP",
    };
    let list: Vec<String> = carried.iter().map(carried_line).collect();
    let text = format!(
        "tunnel: {} (pid {}) carries tunnel {} (MTU {}) as {what} over this flow ({} out, {} in). It runs no \
         congestion control of its own: the kernel's TCP flows inside the tunnel decide the rate, and \
         cctrace's verdicts and fix apply to them, not to this process. Carried: {}.",
        tunnel.process.comm,
        tunnel.process.pid,
        tunnel.dev,
        tunnel.mtu,
        rate(flow.tx_bps),
        rate(flow.rx_bps),
        list.join("; ")
    );
    let mut advice: Vec<String> = Vec::new();
    for c in carried {
        let Some(fix) = c.verdict.filter(|v| v.flagged).and_then(|v| v.fix.iter().find(|l| !l.starts_with('#'))) else {
            continue;
        };
        if !advice.iter().any(|a| a.ends_with(fix.as_str())) {
            advice.push(format!("for {}: {fix}", flow_label(c.flow)));
        }
    }
    if advice.is_empty() {
        advice.push("nothing to change in the tunnel process: see the verdicts of the flows it carries".to_string());
    }
    let mut carries: Vec<u64> = carried.iter().map(|c| c.flow.cookie()).collect();
    carries.sort_unstable();
    UdpVerdict { text, advice, tunnel: true, carries }
}

/// `sshd 198.18.3.1:22 -> 198.18.3.2:40112`.
fn flow_label(f: &Flow) -> String {
    let s = &f.latest;
    let who = s.owner.as_ref().map_or(String::new(), |o| format!("{} ", o.comm));
    format!("{who}{} -> {}", s.local, s.remote)
}

fn carried_line(c: &Carried<'_>) -> String {
    let mut line = flow_label(c.flow);
    if let Some(via) = &c.tunnel.via {
        line.push_str(&format!(" (netns {}, {})", c.flow.latest.netns, via.describe()));
    }
    if c.verdict.is_some_and(|v| v.flagged) {
        line.push_str(", flagged");
    }
    line
}

/// The verdicts of the UDP flows of tunnel processes that carry some of `tunnels`' flows, by
/// UDP cookie; `verdict_of` gives a TCP flow's verdict.
pub fn tunnel_verdicts<'a>(
    table: &FlowTable,
    tunnels: &HashMap<u64, Tunnel>,
    udp: &UdpTable,
    verdict_of: impl Fn(u64) -> Option<&'a Verdict>,
) -> HashMap<u64, UdpVerdict> {
    let mut by_udp: HashMap<u64, Vec<(u64, &Tunnel)>> = HashMap::new();
    for (cookie, t) in tunnels {
        by_udp.entry(t.udp.cookie).or_default().push((*cookie, t));
    }
    let mut out = HashMap::new();
    for (udp_cookie, mut flows) in by_udp {
        let Some(u) = udp.get(udp_cookie) else { continue };
        flows.sort_unstable_by_key(|(c, _)| *c);
        let carried: Vec<Carried<'_>> = flows
            .iter()
            .filter_map(|(c, t)| {
                let flow = table.get(*c).filter(|f| !f.is_closed())?;
                Some(Carried { flow, tunnel: t, verdict: verdict_of(*c) })
            })
            .collect();
        if let Some(first) = carried.first() {
            out.insert(udp_cookie, tunnel_verdict(u, first.tunnel, &carried));
        }
    }
    out
}
