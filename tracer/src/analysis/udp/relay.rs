//! TCP flows that are a local hop to a relay: a process on this host that carries their traffic
//! on over a heavy UDP flow with its own congestion control, so the flow's verdict is the
//! relay's, not the path's.

use std::collections::HashMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::analysis::flow_table::{Flow, FlowTable};
use crate::analysis::udp::flows::{UdpFlow, UdpTable};
use crate::analysis::udp::shape::AppProto;

/// A TCP flow's peer socket on this host belongs to a process that carries the traffic on over
/// a heavy UDP flow: that process's congestion control, not this flow's, meets the path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RelayedBy {
    pub pid: u32,
    pub comm: String,
    /// The UDP flow it sends on, and what that carries.
    pub udp_cookie: u64,
    pub app_proto: Option<AppProto>,
    /// The TCP socket of the relay's end of this hop (this flow's own cookie when the flow is
    /// the relay's end; 0 when that socket is not traced and the relay's fd table told).
    pub peer_cookie: u64,
}

impl RelayedBy {
    /// Process `pid` relays the hop over its heavy UDP flow `udp`; `peer_cookie` as the field
    /// says.
    fn over(pid: u32, comm: &str, udp: &UdpFlow, peer_cookie: u64) -> Self {
        Self { pid, comm: comm.to_string(), udp_cookie: udp.cookie(), app_proto: udp.app_proto, peer_cookie }
    }

    /// The sentence that goes before the flow's own verdict.
    pub fn note(&self) -> String {
        let carried = self.app_proto.map_or("UDP", |p| match p {
            AppProto::Quic => "QUIC",
            AppProto::WireGuard => "WireGuard",
        });
        format!(
            "relayed by {} (pid {}): this is the local hop to a process that carries the traffic on as {carried} \
             over UDP with its own congestion control; this flow's rate is what that relay takes, so its \
             verdict says nothing about the path.",
            self.comm, self.pid
        )
    }
}

/// TCP flows whose peer socket is on this host (loopback, or another network namespace of this
/// host: the mirrored endpoints are both in the table) and whose pair has an end owned by a
/// process with a heavy UDP flow. Both ends of such a hop get the note.
pub fn find_relays(table: &FlowTable, udp: &UdpTable, min_bps: f64) -> HashMap<u64, RelayedBy> {
    let mut out = HashMap::new();
    if udp.is_empty() {
        return out;
    }
    let mut by_ends: HashMap<(SocketAddr, SocketAddr), Vec<&Flow>> = HashMap::new();
    for f in table.flows() {
        by_ends.entry((f.latest.local, f.latest.remote)).or_default().push(f);
    }
    for f in table.flows() {
        let s = &f.latest;
        // On loopback the same endpoints exist in every namespace: the peer must share this one.
        let peer = by_ends
            .get(&(s.remote, s.local))
            .into_iter()
            .flatten()
            .find(|p| p.cookie() != f.cookie() && (!s.remote.ip().is_loopback() || p.latest.netns == s.netns));
        if let Some(peer) = peer {
            for end in [peer, &f] {
                let Some(owner) = end.latest.owner.as_ref() else { continue };
                if let Some(u) = udp.sending_of_pid(owner.pid, min_bps) {
                    out.insert(f.cookie(), RelayedBy::over(owner.pid, &owner.comm, u, end.cookie()));
                    break;
                }
            }
        }
        if out.contains_key(&f.cookie()) {
            continue;
        }
        // The peer socket is not in the table (a kernel filter left it out): a process sending
        // heavy UDP that holds the mirrored connection is the relay all the same.
        let holder = udp.flows.values().find(|u| {
            u.tx_bps >= min_bps
                && (!s.remote.ip().is_loopback() || u.latest.netns == s.netns)
                && u.latest.owner.as_ref().is_some_and(|o| o.tcp.contains(&(s.remote, s.local)))
        });
        if let Some(u) = holder {
            let owner = u.latest.owner.as_ref().expect("checked above");
            out.insert(f.cookie(), RelayedBy::over(owner.pid, &owner.comm, u, 0));
        }
    }
    out
}
