//! Following a flow that leaves by a device of its own namespace to the namespace that forwards
//! it into a tunnel: which flows to follow ([`route_queries`]) and how ([`follow`]), over the
//! namespaces' routing as the host layer answers it ([`Routing`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use crate::analysis::flow_table::{Flow, FlowTable};
use crate::analysis::tunnel::facts::{Forwarded, TunnelFacts, TunnelRoute};

/// A flow the host is asked to follow into another namespace: its namespace and endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RouteQuery {
    pub netns: u32,
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

/// Flows worth following per host read, at most (the busiest).
const MAX_QUERIES: usize = 64;
/// A flow must move this much to be followed: a bulk flow, not a keep-alive.
const QUERY_MIN_BPS: f64 = 1_000_000.0;

/// The open flows the host should follow into a router's tunnel: those that leave by a device
/// that is no TUN, to an address that is not loopback, moving at least [`QUERY_MIN_BPS`] or
/// followed before (`known`: a flow slowing down keeps its tunnel), the busiest first; none
/// unless some namespace forwards and holds a TUN device.
pub fn route_queries(table: &FlowTable, facts: &TunnelFacts, known: &[TunnelRoute]) -> Vec<RouteQuery> {
    if !facts.has_router() {
        return Vec::new();
    }
    let known = |s: &crate::analysis::sample::Sample| {
        known.iter().any(|r| r.netns == s.netns && r.local == s.local && r.remote == s.remote)
    };
    let mut busy: Vec<(&Flow, f64)> = table
        .open_flows()
        .filter_map(|f| {
            let s = &f.latest;
            let route = s.route?;
            let bps = f.rates.send_rate_bps.max(f.rates.throughput_bps);
            let candidate = (bps >= QUERY_MIN_BPS || known(s))
                && !s.remote.ip().is_loopback()
                && facts.device(s.netns, route.ifindex).is_none();
            candidate.then_some((f, bps))
        })
        .collect();
    busy.sort_by(|a, b| b.1.total_cmp(&a.1));
    busy.into_iter()
        .take(MAX_QUERIES)
        .map(|(f, _)| RouteQuery { netns: f.latest.netns, local: f.latest.local, remote: f.latest.remote })
        .collect()
}

/// One route lookup's answer: the device a namespace sends to an address by, and its gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub oif: u32,
    pub gateway: Option<IpAddr>,
}

/// The namespaces' routing, asked by [`follow`] (the host layer answers from the kernel).
pub trait Routing {
    /// How `netns` routes packets to `dst`.
    fn route(&mut self, netns: u32, dst: IpAddr) -> Option<Hop>;
    /// The original source of the connection `netns` masquerades whose replies go from `from`
    /// to `to` (its connection tracking), if `netns` rewrote it.
    fn unmasquerade(&mut self, netns: u32, from: SocketAddr, to: SocketAddr) -> Option<IpAddr>;
}

/// Follow a flow to the namespace that forwards it (its peer or next hop is an address of a
/// forwarding namespace of this host) and on to that namespace's TUN device. `names` gives the
/// namespaces' `ip netns` names.
pub fn follow(
    q: &RouteQuery,
    facts: &TunnelFacts,
    names: &HashMap<u32, String>,
    routing: &mut dyn Routing,
) -> Option<TunnelRoute> {
    let first = routing.route(q.netns, q.remote.ip())?;
    let next = first.gateway.unwrap_or(q.remote.ip());
    let router = facts.router_with(next, q.netns)?.netns;
    // The peer itself is the router's address: the router masquerades what it forwards to
    // this namespace, and its connection tracking knows who the far end really is.
    let masquerade = next == q.remote.ip();
    let via = Forwarded { netns: router, name: names.get(&router).cloned(), addr: next, masquerade };
    let route = |tun_ifindex| TunnelRoute {
        netns: q.netns,
        local: q.local,
        remote: q.remote,
        tun_netns: router,
        tun_ifindex,
        via: via.clone(),
    };
    let far = if masquerade { routing.unmasquerade(router, q.local, q.remote) } else { Some(q.remote.ip()) };
    match far {
        Some(far) if far != q.remote.ip() || !masquerade => {
            let hop = routing.route(router, far)?;
            facts.device(router, hop.oif).map(|d| route(d.ifindex))
        }
        // No connection tracking to read: a router with one held TUN device forwards into it.
        None => {
            let mut held = facts.devices.iter().filter(|d| d.netns == router && !d.holders.is_empty());
            match (held.next(), held.next()) {
                (Some(only), None) => Some(route(only.ifindex)),
                _ => None,
            }
        }
        // Not rewritten: a connection of the router's own.
        Some(_) => None,
    }
}
