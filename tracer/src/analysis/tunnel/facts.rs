//! The host's facts about tunnels, as the host layer reads them into the environment: TUN
//! devices and the processes holding them, the namespaces that forward, and the flows another
//! namespace forwards into its tunnel.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

/// A process holding a TUN device's file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunHolder {
    pub pid: u32,
    pub comm: String,
}

/// A TUN device of some network namespace of this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunDevice {
    pub netns: u32,
    pub ifindex: u32,
    pub name: String,
    pub mtu: u32,
    /// Processes of its namespace with its file open (`iff:` in their fdinfo).
    pub holders: Vec<TunHolder>,
}

/// A namespace's own addresses, and whether it forwards (`net.ipv4.ip_forward`): what makes it
/// a router for the other namespaces of the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetnsRouting {
    pub netns: u32,
    pub addrs: Vec<IpAddr>,
    pub forwarding: bool,
}

/// How a flow reaches a tunnel of another namespace: that namespace forwards it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forwarded {
    /// The forwarding namespace (inode) and its `ip netns` name, if it has one.
    pub netns: u32,
    pub name: Option<String>,
    /// Its address the flow goes to: the flow's peer (masquerading) or next hop.
    pub addr: IpAddr,
    /// The router rewrites the far end to its own address, so the flow's peer is the router.
    pub masquerade: bool,
}

/// A flow (by its namespace and endpoints) that another namespace forwards into its TUN device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelRoute {
    pub netns: u32,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub tun_netns: u32,
    pub tun_ifindex: u32,
    pub via: Forwarded,
}

/// What the host says about its tunnels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelFacts {
    #[serde(default)]
    pub devices: Vec<TunDevice>,
    /// Namespaces that forward (only read while a held TUN device exists).
    #[serde(default)]
    pub routing: Vec<NetnsRouting>,
    #[serde(default)]
    pub routes: Vec<TunnelRoute>,
}

impl TunnelFacts {
    pub fn device(&self, netns: u32, ifindex: u32) -> Option<&TunDevice> {
        self.devices.iter().find(|d| d.netns == netns && d.ifindex == ifindex)
    }

    /// Whether some namespace forwards and holds a TUN device: a router another namespace's
    /// flows may go through.
    pub fn has_router(&self) -> bool {
        self.routing.iter().any(|r| r.forwarding && self.devices.iter().any(|d| d.netns == r.netns))
    }

    /// The namespace other than `except` that has address `addr` and forwards.
    pub(super) fn router_with(&self, addr: IpAddr, except: u32) -> Option<&NetnsRouting> {
        self.routing.iter().find(|r| r.netns != except && r.forwarding && r.addrs.contains(&addr))
    }
}

impl Forwarded {
    /// `forwarded by netns router (it masquerades: the peer 198.18.3.1 is its address)`.
    pub fn describe(&self) -> String {
        let ns = self.name.as_ref().map_or_else(|| format!("netns {}", self.netns), |n| format!("netns {n}"));
        if self.masquerade {
            format!("forwarded by {ns} (masquerading: the peer {} is its address)", self.addr)
        } else {
            format!("forwarded by {ns} (next hop {})", self.addr)
        }
    }
}
