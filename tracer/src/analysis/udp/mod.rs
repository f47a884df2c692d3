//! UDP flows whose congestion control is not the kernel's: what a heavy UDP socket carries
//! (QUIC, WireGuard, plain UDP, from its datagrams' first bytes), its rates, and the verdict
//! `limited_by: userspace` with advice that fits the process owning it.
//!
//! Pure like the rest of the analysis: samples come in with the owner's command line and
//! whether it holds a TUN device already read (by the kernel source), time as arguments.
//!
//! One file per job: `shape` (what the datagrams are), `flows` (the heavy flows and their
//! rates), `verdict` (who runs the congestion control, and the advice) and `relay` (TCP hops
//! that a UDP relay carries on).

mod flows;
mod relay;
mod shape;
#[cfg(test)]
mod tests;
mod verdict;

pub use crate::analysis::udp::flows::{Process, SocketReadings, UdpFlow, UdpSample, UdpTable};
pub use crate::analysis::udp::relay::{find_relays, RelayedBy};
pub use crate::analysis::udp::shape::{shape, AppProto, Head, Shape, ShapeCounts, HEAD_LEN};
pub use crate::analysis::udp::verdict::{judge, process_label, UdpVerdict};
