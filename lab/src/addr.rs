//! The lab's address plan. Everything lives in 198.18.0.0/15 (RFC 2544,
//! reserved for benchmarking), so lab traffic can never be mistaken for, or
//! routed to, a real network.
//!
//! Veth labs take 198.18.N.0/24, emulated paths take two /24s in 198.19.0.0/16.
//! Each lab in a process gets its own N, so flows from several labs stay
//! distinguishable by address in one trace (the namespaces alone would keep
//! them apart on the wire, but not in a human's reading of the output).
//!
//! IPv6, where a path asks for it, lives in 2001:db8::/32 (RFC 3849,
//! documentation only, never routed): emulated path k gets 2001:db8:0:2k::1
//! and 2001:db8:0:2k+1::1, one /64 per side, mirroring its IPv4 pair; the inside of a
//! tunnel whose IPv4 pair is 198.18.N.1 and .2 gets 2001:db8:1:N::1 and ::2.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::error::LabError;

/// True if `ip` is inside 198.18.0.0/15.
pub fn is_lab_addr(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 198 && (o[1] & 0xFE) == 18
}

/// True if `ip` is inside 2001:db8::/32, the lab's IPv6 range.
pub fn is_lab_addr_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    s[0] == 0x2001 && s[1] == 0x0db8
}

/// True if `ip` is in the lab's IPv4 or IPv6 range.
pub fn is_lab_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_lab_addr(v4),
        IpAddr::V6(v6) => is_lab_addr_v6(v6),
    }
}

/// Errors unless `ip` is a lab address of either family.
pub fn ensure_lab_ip(ip: IpAddr) -> Result<(), LabError> {
    match ip {
        IpAddr::V4(v4) => ensure_lab_addr(v4),
        IpAddr::V6(v6) if is_lab_addr_v6(v6) => Ok(()),
        IpAddr::V6(v6) => Err(LabError::AddressOutsideLabV6(v6)),
    }
}

/// Errors unless `ip` is a lab address: the guard every traffic generator
/// passes before it sends a byte.
pub fn ensure_lab_addr(ip: Ipv4Addr) -> Result<(), LabError> {
    if is_lab_addr(ip) {
        Ok(())
    } else {
        Err(LabError::AddressOutsideLab(ip))
    }
}

/// Next per-process lab index. It starts at a pid-derived offset so two test
/// binaries running back to back rarely reuse the same subnets, which keeps
/// their flows apart in a trace of the whole machine.
fn next_index() -> u32 {
    static START: OnceLock<u32> = OnceLock::new();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let start = *START.get_or_init(|| std::process::id().wrapping_mul(37));
    start.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// (sender, receiver) for a veth lab: 198.18.N.1 and 198.18.N.2 in one /24.
pub(crate) fn next_veth_pair() -> (Ipv4Addr, Ipv4Addr) {
    let n = (next_index() % 256) as u8;
    (Ipv4Addr::new(198, 18, n, 1), Ipv4Addr::new(198, 18, n, 2))
}

/// (sender, receiver) for an emulated path: 198.19.2k.1 and 198.19.2k+1.1,
/// one /24 per side because the two ends are routed, not bridged.
pub(crate) fn next_routed_pair() -> (Ipv4Addr, Ipv4Addr) {
    let k = (next_index() % 128) as u8;
    (Ipv4Addr::new(198, 19, 2 * k, 1), Ipv4Addr::new(198, 19, 2 * k + 1, 1))
}

/// The IPv6 twin of an emulated path's IPv4 address from [`next_routed_pair`]:
/// 198.19.n.1 becomes 2001:db8:0:n::1.
pub(crate) fn routed_v6(v4: Ipv4Addr) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0x0db8, 0, u16::from(v4.octets()[2]), 0, 0, 0, 1)
}

/// The IPv6 twin of a tunnel's inner IPv4 address from [`next_veth_pair`]: 198.18.n.h becomes
/// 2001:db8:1:n::h, in a block of its own (the emulated paths' addresses are 2001:db8:0::/48).
pub(crate) fn tunnel_v6(v4: Ipv4Addr) -> Ipv6Addr {
    let o = v4.octets();
    Ipv6Addr::new(0x2001, 0x0db8, 1, u16::from(o[2]), 0, 0, 0, u16::from(o[3]))
}

/// Network address of the /64 containing `ip`.
pub(crate) fn net64(ip: Ipv6Addr) -> Ipv6Addr {
    let s = ip.segments();
    Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0)
}

/// Network address of the /24 containing `ip`.
pub(crate) fn net24(ip: Ipv4Addr) -> Ipv4Addr {
    let o = ip.octets();
    Ipv4Addr::new(o[0], o[1], o[2], 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_range() {
        assert!(is_lab_addr(Ipv4Addr::new(198, 18, 0, 1)));
        assert!(is_lab_addr(Ipv4Addr::new(198, 19, 255, 254)));
        assert!(!is_lab_addr(Ipv4Addr::new(198, 20, 0, 1)));
        assert!(!is_lab_addr(Ipv4Addr::new(198, 17, 0, 1)));
        assert!(!is_lab_addr(Ipv4Addr::new(10, 0, 0, 1)));
        assert!(ensure_lab_addr(Ipv4Addr::new(8, 8, 8, 8)).is_err());
    }

    #[test]
    fn allocations_stay_in_range_and_differ() {
        let (a, b) = next_veth_pair();
        let (c, d) = next_veth_pair();
        assert!(is_lab_addr(a) && is_lab_addr(b) && is_lab_addr(c) && is_lab_addr(d));
        assert_eq!(net24(a), net24(b));
        assert_ne!(net24(a), net24(c));
        let (s, r) = next_routed_pair();
        assert!(is_lab_addr(s) && is_lab_addr(r));
        assert_ne!(net24(s), net24(r));
        assert_eq!(s.octets()[1], 19);
        let (s6, r6) = (routed_v6(s), routed_v6(r));
        assert!(is_lab_addr_v6(s6) && is_lab_addr_v6(r6));
        assert_ne!(net64(s6), net64(r6));
        assert_eq!(routed_v6(Ipv4Addr::new(198, 19, 6, 1)), "2001:db8:0:6::1".parse::<Ipv6Addr>().expect("addr"));
        assert_eq!(tunnel_v6(Ipv4Addr::new(198, 18, 7, 2)), "2001:db8:1:7::2".parse::<Ipv6Addr>().expect("addr"));
        assert!(!is_lab_ip("2001:db9::1".parse().expect("addr")));
        assert!(!is_lab_ip("fe80::1".parse().expect("addr")));
        assert!(ensure_lab_ip("2001:db8::1".parse().expect("addr")).is_ok());
    }
}
