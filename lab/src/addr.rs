//! The lab's address plan. Everything lives in 198.18.0.0/15 (RFC 2544,
//! reserved for benchmarking), so lab traffic can never be mistaken for, or
//! routed to, a real network.
//!
//! Veth labs take 198.18.N.0/24, emulated paths take two /24s in 198.19.0.0/16.
//! Each lab in a process gets its own N, so flows from several labs stay
//! distinguishable by address in one trace (the namespaces alone would keep
//! them apart on the wire, but not in a human's reading of the output).

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::error::LabError;

/// True if `ip` is inside 198.18.0.0/15.
pub fn is_lab_addr(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 198 && (o[1] & 0xFE) == 18
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
    }
}
