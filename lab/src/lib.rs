//! cctrace-lab: a local lossy-WAN lab built from network namespaces.
//!
//! Used by the integration tests, the benchmarks and `cctrace demo` to
//! produce real TCP flows with known path properties:
//!
//! - [`Netns`]: a namespace owned by this process, deleted on drop.
//! - [`VethPair`]: two namespaces on a veth link, optional random TCP loss
//!   through nftables.
//! - [`EmulatedPath`]: two namespaces joined by an in-process forwarder over
//!   TUN devices that adds, per direction, delay, random or bursty loss, a
//!   token-bucket [`Policer`], a rate-limited queue and per-packet jitter
//!   that reorders; IPv4, and IPv6 on request ([`EmulatedPathSpec::ipv6`]).
//! - [`WireGuardLab`]: a wireguard-go tunnel across an emulated path (loss and delay on its
//!   UDP underlay only), with LAN namespaces behind one end that it routes (and masquerades).
//! - [`Sink`] / [`Sender`]: TCP traffic; [`UdpEcho`], [`udp_ping`],
//!   [`UdpCounter`], [`udp_blast`]: UDP measurement probes.
//! - [`child`]: waiting for child processes with a deadline; [`skip`]: the one rule for a test
//!   that cannot run on this machine; [`serial`]: one test at a time on this machine;
//!   [`figures`]: the figures page every command that measures writes its rows to.
//!
//! Safety of the surroundings: every address the lab configures or sends to
//! is in 198.18.0.0/15 (RFC 2544 benchmarking space) or, for IPv6,
//! 2001:db8::/32 (RFC 3849 documentation space), inside namespaces it
//! created; generators refuse any other destination and the forwarder drops
//! anything else. All operations need root (CAP_NET_ADMIN, CAP_SYS_ADMIN);
//! [`check_privileges`] tells up front.
//!
//! ```no_run
//! use std::time::Duration;
//! use cctrace_lab::{
//!     EmulatedPath, EmulatedPathSpec, PathSpec, Sender, SenderOptions, Sink, SinkOptions,
//! };
//!
//! # fn main() -> anyhow::Result<()> {
//! // 40 ms RTT, 1 % loss and a 50 Mbit/s bottleneck with a 250 kB queue.
//! let path = EmulatedPath::create(EmulatedPathSpec::new(
//!     PathSpec::delay(Duration::from_millis(20))
//!         .with_loss(0.01)
//!         .with_rate(50_000_000, 250_000),
//! ))?;
//! let sink = Sink::start(path.receiver(), path.receiver_addr(), 0, SinkOptions::default())?;
//! let sender = Sender::start(
//!     path.sender(),
//!     path.receiver_addr(),
//!     sink.port(),
//!     SenderOptions {
//!         congestion: Some("bbr".into()),
//!         duration: Duration::from_secs(5),
//!         ..SenderOptions::default()
//!     },
//! )?;
//! // The flow is (sender_addr, sender.local_port()) -> (receiver_addr, sink.port())
//! // in namespace path.sender().inode().
//! let report = sender.wait()?;
//! println!("{:.1} Mbit/s, {:?}", report.goodput_bps / 1e6, path.stats().forward);
//! # Ok(())
//! # }
//! ```

mod addr;
mod attach;
mod cgroup;
pub mod child;
mod cmd;
mod error;
pub mod figures;
mod forwarder;
mod jitter;
mod link;
mod netns;
mod nft_loss;
mod probe;
pub mod relay;
mod rng;
pub mod serial;
pub mod skip;
mod sys;

/// The port a lab's data sink listens on unless a test needs a second one: iperf3's, so a
/// capture or `ss` listing of a lab reads as the familiar bulk transfer.
pub const SINK_PORT: u16 = 5201;
mod topology;
mod traffic;
mod tun;
mod wireguard;

pub use addr::{ensure_lab_addr, ensure_lab_ip, is_lab_addr, is_lab_addr_v6, is_lab_ip};
pub use attach::AttachedNetns;
pub use cgroup::{cgroup2_mount, create_sockets_in, hierarchy_roots, Cgroup};
pub use error::LabError;
pub use forwarder::{DirectionStats, PathStats};
pub use jitter::{host_timer_jitter, TimerJitter};
pub use link::{GilbertElliott, PathSpec, Policer};
pub use netns::{check_privileges, cleanup_stale, list_namespaces, Netns, NetnsGuard, NsThread};
pub use probe::{udp_blast, udp_ping, BlastOptions, PingOptions, PingReport, UdpCounter, UdpCounterStats, UdpEcho};
pub use topology::{EmulatedPath, EmulatedPathSpec, Topology, VethOptions, VethPair};
pub use traffic::{SendMode, Sender, SenderOptions, SenderReport, Sink, SinkConnection, SinkOptions, MAX_DURATION};
pub use wireguard::{Lan, LanSpec, WireGuardLab, WireGuardSpec, WIREGUARD_MTU};
