//! Where a TCP flow's packets leave the host: its route's device and the path MTU the socket
//! uses, as the kernel's cached route says. A flow through a tunnel (tailscale0, wg0, a TUN
//! device) shows the tunnel, whose outer UDP is what crosses the path.

use serde::{Deserialize, Serialize};

/// One socket's route, as read from the kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub cookie: u64,
    /// Device name, as in its network namespace.
    pub dev: String,
    pub ifindex: u32,
    /// The device's MTU, bytes.
    pub dev_mtu: u32,
    /// The socket's path MTU (`icsk_pmtu_cookie`), bytes; 0 when not set yet.
    pub pmtu: u32,
}

impl Route {
    /// The path MTU: the socket's own when set, else the device's.
    pub fn mtu(&self) -> u32 {
        if self.pmtu != 0 {
            self.pmtu
        } else {
            self.dev_mtu
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sockets_path_mtu_wins_over_the_devices() {
        let r = Route { cookie: 1, dev: "wg0".into(), ifindex: 4, dev_mtu: 1420, pmtu: 0 };
        assert_eq!(r.mtu(), 1420);
        assert_eq!(Route { pmtu: 1280, ..r }.mtu(), 1280);
    }
}
