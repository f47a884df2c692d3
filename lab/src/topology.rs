//! The two lab topologies: a plain veth pair (optionally lossy via
//! nftables) and an emulated WAN path (delay, loss, rate, queue) through the
//! userspace forwarder. Both are a sender and a receiver namespace; all
//! resources are released on drop, including when creation fails halfway
//! (each step's resources are owned by a value dropped on `?`).

use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::{bail, Context, Result};

use crate::addr::{self, net24};
use crate::cmd;
use crate::forwarder::{Forwarder, PathStats};
use crate::link::PathSpec;
use crate::netns::Netns;
use crate::nft_loss::{self, NftLoss};
use crate::sys;
use crate::tun;

/// What every topology offers to traffic generators and tests.
pub trait Topology {
    fn sender(&self) -> &Netns;
    fn receiver(&self) -> &Netns;
    fn sender_addr(&self) -> Ipv4Addr;
    fn receiver_addr(&self) -> Ipv4Addr;
}

/// Inherent accessors (usable without importing [`Topology`]) plus the
/// trait impl forwarding to them.
macro_rules! impl_topology {
    ($t:ty) => {
        impl $t {
            /// The namespace the traffic generators send from.
            pub fn sender(&self) -> &Netns {
                &self.sender
            }
            /// The namespace the sinks listen in.
            pub fn receiver(&self) -> &Netns {
                &self.receiver
            }
            pub fn sender_addr(&self) -> Ipv4Addr {
                self.sender_addr
            }
            pub fn receiver_addr(&self) -> Ipv4Addr {
                self.receiver_addr
            }
        }

        impl Topology for $t {
            fn sender(&self) -> &Netns {
                <$t>::sender(self)
            }
            fn receiver(&self) -> &Netns {
                <$t>::receiver(self)
            }
            fn sender_addr(&self) -> Ipv4Addr {
                <$t>::sender_addr(self)
            }
            fn receiver_addr(&self) -> Ipv4Addr {
                <$t>::receiver_addr(self)
            }
        }
    };
}

const MTU: u32 = 1500;
/// Offloads that would make packets on the wire differ from what a real
/// 1500-byte path carries (super-packets on transmit or after GRO).
const OFFLOADS: [(&str, &str); 4] = [
    ("tso", "tcp-segmentation-offload"),
    ("gso", "generic-segmentation-offload"),
    ("gro", "generic-receive-offload"),
    ("lro", "large-receive-offload"),
];

/// Namespace-wide settings every lab namespace gets.
fn prepare_namespace(ns: &Netns) -> Result<()> {
    // No IPv6: router solicitations, MLD and DAD would otherwise cross the
    // links and pollute packet counters.
    for key in ["net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"] {
        if ns.sysctl_get(key).is_ok() {
            ns.sysctl_set(key, "1")?;
        }
    }
    // Each run starts from the same TCP state: no cached ssthresh/RTT from an
    // earlier connection between the same addresses.
    ns.sysctl_set("net.ipv4.tcp_no_metrics_save", "1")?;
    Ok(())
}

/// Lets a single flow fill a long fat pipe: autotuning may grow buffers to
/// 32 MiB (enough for ~1 Gbit/s at 250 ms RTT). Only the maxima change, so
/// small flows behave as with the defaults.
fn allow_large_tcp_windows(ns: &Netns) -> Result<()> {
    ns.sysctl_set("net.ipv4.tcp_rmem", "4096 131072 33554432")?;
    ns.sysctl_set("net.ipv4.tcp_wmem", "4096 16384 33554432")?;
    Ok(())
}

/// Turns segmentation/receive offloads off on `dev` and verifies it.
pub(crate) fn disable_offloads(ns: &Netns, dev: &str) -> Result<()> {
    let mut set = ns.command("ethtool");
    set.args(["-K", dev]);
    for (short, _) in OFFLOADS {
        set.args([short, "off"]);
    }
    // ethtool exits non-zero when a feature is fixed (e.g. "lro off [fixed]"),
    // even though the end state is what we want: judge by the read-back.
    let set_result = cmd::run(&mut set);
    let features =
        cmd::run(ns.command("ethtool").args(["-k", dev])).with_context(|| format!("reading offloads of {dev}"))?;
    for (_, long) in OFFLOADS {
        let on = features.lines().any(|l| {
            l.trim()
                .strip_prefix(long)
                .and_then(|r| r.strip_prefix(':'))
                .is_some_and(|v| v.trim_start().starts_with("on"))
        });
        if on {
            let why = set_result.as_ref().err().map(|e| format!("{e:#}")).unwrap_or_default();
            bail!("{long} still on for {dev} in {}: {why}", ns.name());
        }
    }
    Ok(())
}

fn configure_interface(ns: &Netns, dev: &str, addr: Ipv4Addr) -> Result<()> {
    ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev])?;
    ns.ip(&["link", "set", "dev", dev, "mtu", &MTU.to_string(), "up"])?;
    disable_offloads(ns, dev)
}

/// Options for [`VethPair::create`].
#[derive(Debug, Clone, PartialEq)]
pub struct VethOptions {
    /// Random loss probability for TCP packets from sender to receiver.
    pub loss: f64,
}

impl Default for VethOptions {
    fn default() -> Self {
        Self { loss: 0.0 }
    }
}

/// Sender and receiver namespaces joined by a veth pair (no added delay).
#[derive(Debug)]
pub struct VethPair {
    loss: NftLoss,
    sender_addr: Ipv4Addr,
    receiver_addr: Ipv4Addr,
    // Namespaces last: they are deleted after everything above is gone.
    sender: Netns,
    receiver: Netns,
}

impl VethPair {
    pub const SENDER_DEV: &'static str = "veth-snd";
    pub const RECEIVER_DEV: &'static str = "veth-rcv";

    pub fn create(opts: VethOptions) -> Result<VethPair> {
        nft_loss::threshold(opts.loss)?;
        let (sender_addr, receiver_addr) = addr::next_veth_pair();
        let sender = Netns::create("vsnd")?;
        let receiver = Netns::create("vrcv")?;
        prepare_namespace(&sender)?;
        prepare_namespace(&receiver)?;
        sender
            .ip(&[
                "link",
                "add",
                Self::SENDER_DEV,
                "type",
                "veth",
                "peer",
                "name",
                Self::RECEIVER_DEV,
                "netns",
                receiver.name(),
            ])
            .context("creating veth pair")?;
        configure_interface(&sender, Self::SENDER_DEV, sender_addr)?;
        configure_interface(&receiver, Self::RECEIVER_DEV, receiver_addr)?;
        let loss = NftLoss::install(&receiver, receiver_addr, opts.loss)?;
        Ok(VethPair { loss, sender_addr, receiver_addr, sender, receiver })
    }

    /// Changes the loss probability (rewrites the nft rule atomically; the
    /// counters keep counting).
    pub fn set_loss(&self, p: f64) -> Result<()> {
        self.loss.set_loss(&self.receiver, p)
    }

    /// TCP packets to the receiver dropped by the loss rule so far.
    pub fn loss_drops(&self) -> Result<u64> {
        self.loss.counter(&self.receiver, "drops")
    }

    /// TCP packets to the receiver that reached the loss rule so far
    /// (dropped or not): the denominator for the realised loss rate.
    pub fn loss_seen(&self) -> Result<u64> {
        self.loss.counter(&self.receiver, "seen")
    }
}

impl_topology!(VethPair);

/// Both directions of an [`EmulatedPath`].
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatedPathSpec {
    /// Sender to receiver (data direction of the generators).
    pub forward: PathSpec,
    /// Receiver to sender (ACK direction). Any [`PathSpec`]: e.g. loss of
    /// ACKs only is `PathSpec::delay(d).with_loss(p)` here with a lossless
    /// `forward`.
    pub reverse: PathSpec,
    /// Seeds the loss decisions of both directions (distinct streams).
    pub seed: u64,
    /// Also give both ends IPv6 addresses in 2001:db8::/32 (see
    /// [`EmulatedPath::sender_addr_v6`]); the same link model applies to both
    /// families. Off by default: IPv6 stays disabled in lab namespaces.
    pub ipv6: bool,
}

impl EmulatedPathSpec {
    /// `forward` as given; the reverse path gets the same delay, no loss and
    /// no rate cap.
    pub fn new(forward: PathSpec) -> Self {
        Self { reverse: PathSpec::delay(forward.one_way_delay), forward, seed: 1, ipv6: false }
    }

    /// Symmetric pure delay: `rtt / 2` each way.
    pub fn with_rtt(rtt: std::time::Duration) -> Self {
        Self::new(PathSpec::delay(rtt / 2))
    }
}

impl Default for EmulatedPathSpec {
    fn default() -> Self {
        Self::new(PathSpec::default())
    }
}

/// Sender and receiver namespaces joined through the in-process path
/// emulator over a TUN device in each namespace.
#[derive(Debug)]
pub struct EmulatedPath {
    // Field order is drop order: stop and join the forwarder (closing the
    // TUN fds, which deletes the devices) before deleting the namespaces.
    forwarder: Forwarder,
    spec: EmulatedPathSpec,
    sender_addr: Ipv4Addr,
    receiver_addr: Ipv4Addr,
    v6: Option<(Ipv6Addr, Ipv6Addr)>,
    sender: Netns,
    receiver: Netns,
    /// Held while the path exists: see [`sys::ZeroWakeLatency`].
    _wake_latency: sys::ZeroWakeLatency,
}

impl EmulatedPath {
    pub const SENDER_DEV: &'static str = "tun-snd";
    pub const RECEIVER_DEV: &'static str = "tun-rcv";
    /// Kernel queue in front of each TUN fd. The default 500 packets is only
    /// ~6 ms at 1 Gbit/s; a brief forwarder preemption must not turn into
    /// local drops the sender's TCP would see as send failures.
    const TUN_TXQUEUELEN: &'static str = "4096";

    pub fn create(spec: EmulatedPathSpec) -> Result<EmulatedPath> {
        spec.forward.validate().context("forward path spec")?;
        spec.reverse.validate().context("reverse path spec")?;
        let (sender_addr, receiver_addr) = addr::next_routed_pair();
        let sender = Netns::create("esnd")?;
        let receiver = Netns::create("ercv")?;
        let s_tun = Self::build_end(&sender, Self::SENDER_DEV, sender_addr, receiver_addr)?;
        let r_tun = Self::build_end(&receiver, Self::RECEIVER_DEV, receiver_addr, sender_addr)?;
        let v6 = if spec.ipv6 {
            let (s6, r6) = (addr::routed_v6(sender_addr), addr::routed_v6(receiver_addr));
            Self::add_ipv6(&sender, &s_tun.name, s6, r6)?;
            Self::add_ipv6(&receiver, &r_tun.name, r6, s6)?;
            Some((s6, r6))
        } else {
            None
        };
        let forwarder = Forwarder::start(s_tun.fd, r_tun.fd, &spec.forward, &spec.reverse, spec.seed)?;
        Ok(EmulatedPath {
            forwarder,
            spec,
            sender_addr,
            receiver_addr,
            v6,
            sender,
            receiver,
            _wake_latency: sys::ZeroWakeLatency::request(),
        })
    }

    /// One end: namespace settings, TUN device, address, route to the peer.
    fn build_end(ns: &Netns, dev: &str, local: Ipv4Addr, peer: Ipv4Addr) -> Result<tun::Tun> {
        prepare_namespace(ns)?;
        allow_large_tcp_windows(ns)?;
        let tun = tun::create_in(ns, dev)?;
        ns.ip(&["link", "set", "dev", &tun.name, "txqueuelen", Self::TUN_TXQUEUELEN])?;
        configure_interface(ns, &tun.name, local)?;
        // TUN is point-to-point at layer 3: routing the peer's /24 to the
        // device is all it takes (no ARP, no gateway).
        ns.ip(&["route", "add", &format!("{}/24", net24(peer)), "dev", &tun.name])?;
        Ok(tun)
    }

    /// Enables IPv6 on the TUN device only, with nothing that would send on
    /// its own: no link-local address (so no router solicitations, and MLD has
    /// no source to report from), no duplicate address detection, no router
    /// advertisements accepted. Anything else would cross the emulator as
    /// non-lab traffic and be counted in `dropped_other`.
    fn add_ipv6(ns: &Netns, dev: &str, local: Ipv6Addr, peer: Ipv6Addr) -> Result<()> {
        for (key, value) in [("addr_gen_mode", "1"), ("accept_ra", "0"), ("dad_transmits", "0"), ("disable_ipv6", "0")]
        {
            ns.sysctl_set(&format!("net.ipv6.conf.{dev}.{key}"), value)?;
        }
        ns.ip(&["-6", "addr", "add", &format!("{local}/64"), "dev", dev, "nodad"])?;
        ns.ip(&["-6", "route", "add", &format!("{}/64", addr::net64(peer)), "dev", dev])?;
        Ok(())
    }

    /// The sender's IPv6 address, if the path was built with `ipv6`.
    pub fn sender_addr_v6(&self) -> Option<Ipv6Addr> {
        self.v6.map(|(s, _)| s)
    }

    /// The receiver's IPv6 address, if the path was built with `ipv6`.
    pub fn receiver_addr_v6(&self) -> Option<Ipv6Addr> {
        self.v6.map(|(_, r)| r)
    }

    pub fn spec(&self) -> &EmulatedPathSpec {
        &self.spec
    }

    /// Forwarder counters for both directions.
    pub fn stats(&self) -> PathStats {
        self.forwarder.stats()
    }

    /// Packets the kernel dropped at the TUN devices before the forwarder
    /// could read them, as (forward, reverse). Non-zero only when the
    /// forwarder is CPU-bound, typically a bulk flow without a rate cap:
    /// then the host, not the emulated path, is the bottleneck and these
    /// drops are real losses for TCP. Set `rate_bps` to keep experiments
    /// under control.
    pub fn overload_drops(&self) -> Result<(u64, u64)> {
        let read = |ns: &Netns, dev: &str| -> Result<u64> {
            // `ip netns exec` mounts a sysfs of that namespace.
            let out = cmd::run(ns.command("cat").arg(format!("/sys/class/net/{dev}/statistics/tx_dropped")))?;
            out.trim().parse().with_context(|| format!("tx_dropped of {dev}: {out:?}"))
        };
        Ok((read(&self.sender, Self::SENDER_DEV)?, read(&self.receiver, Self::RECEIVER_DEV)?))
    }
}

impl_topology!(EmulatedPath);
