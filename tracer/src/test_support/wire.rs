//! Wire records as the kernel writes them, for tests and benches: a record to fill in
//! ([`raw_sample_template`]) and its bytes as the ring buffer carries them ([`raw_bytes`]). The
//! decoder's own tests live here too, since they start from such a record; the core
//! (`analysis/sample.rs`) may not import this layer, not even in its tests.

use tracer_common::{reason, record_kind, FlowSample, RecordHeader, FLOW_SAMPLE_SIZE, WIRE_VERSION};

/// A wire record of the current version with every field at rest (an IPv4 flow, a periodic
/// sample, established): tests and the synthetic feed set the fields they need and decode it.
pub fn raw_sample_template() -> FlowSample {
    FlowSample {
        header: RecordHeader { version: WIRE_VERSION, kind: record_kind::FLOW_SAMPLE, size: FLOW_SAMPLE_SIZE as u32 },
        family: tracer_common::family::AF_INET,
        reason: reason::PERIODIC,
        tcp_state: 1,
        // Every other field at zero: a new wire field needs no line here.
        ..bytemuck::Zeroable::zeroed()
    }
}

/// The bytes of a raw record, as the ring buffer would carry them.
pub fn raw_bytes(raw: &FlowSample) -> Vec<u8> {
    bytemuck::bytes_of(raw).to_vec()
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use tracer_common::family::AF_INET6;
    use tracer_common::{flag, userlock, FlowSample};

    use super::*;
    use crate::analysis::sample::{decode, DecodeContext, DecodeError, Owner};

    const CTX: DecodeContext = DecodeContext { hz: 250 };

    fn sample() -> FlowSample {
        let mut raw = raw_sample_template();
        raw.cookie = 42;
        raw.saddr[..4].copy_from_slice(&[198, 18, 0, 1]);
        raw.daddr[..4].copy_from_slice(&[198, 18, 0, 2]);
        raw.sport = 40000;
        raw.dport = 5201;
        raw.cc_name[..5].copy_from_slice(b"cubic");
        raw.mss = 1448;
        raw.rate_delivered = 100;
        raw.rate_interval_us = 10_000;
        raw.pacing_rate = 1_000_000;
        raw.chrono_type = 1;
        raw.chrono_stat = [10, 20, 30];
        raw.jiffies = 105;
        raw.chrono_start = 100;
        raw
    }

    #[test]
    fn decodes_a_full_record() {
        let s = decode(&raw_bytes(&sample()), &CTX).expect("decodes");
        assert_eq!(s.cookie, 42);
        assert_eq!(s.local.to_string(), "198.18.0.1:40000");
        assert_eq!(s.remote.to_string(), "198.18.0.2:5201");
        assert_eq!(s.cc, "cubic");
        // 100 segments * 1448 B in 10 ms = 115.84 Mbit/s
        assert_eq!(s.delivery_rate_bps, 115_840_000);
        assert_eq!(s.pacing_rate_bps, 8_000_000);
        // busy: 10 finished + 5 running jiffies at 4 ms each.
        assert_eq!(s.busy_us, 60_000);
        assert_eq!(s.rwnd_limited_us, 80_000);
        assert_eq!(s.sndbuf_limited_us, 120_000);
        assert_eq!(s.owner, None);
        assert!(!s.sndbuf_locked && !s.rcvbuf_locked && !s.writer_blocked && !s.window_unscaled);
    }

    #[test]
    fn decodes_the_buffer_locks_and_a_blocked_writer() {
        let mut raw = sample();
        raw.rcvbuf = 212_992;
        raw.userlocks = userlock::SNDBUF;
        raw.flags = flag::WRITER_BLOCKED | flag::WINDOW_UNSCALED;
        let s = decode(&raw_bytes(&raw), &CTX).expect("decodes");
        assert_eq!(s.rcvbuf, 212_992);
        assert!(s.sndbuf_locked && !s.rcvbuf_locked && s.writer_blocked && s.window_unscaled);
        raw.userlocks = userlock::RCVBUF | 4; // SOCK_BINDADDR_LOCK beside it
        let s = decode(&raw_bytes(&raw), &CTX).expect("decodes");
        assert!(!s.sndbuf_locked && s.rcvbuf_locked);
    }

    #[test]
    fn decodes_ipv6_and_owner() {
        let mut raw = sample();
        raw.family = AF_INET6;
        raw.saddr = Ipv6Addr::LOCALHOST.octets();
        raw.flags = flag::OWNER_KNOWN | flag::APP_LIMITED;
        raw.pid = 7;
        raw.comm[..4].copy_from_slice(b"curl");
        let s = decode(&raw_bytes(&raw), &CTX).expect("decodes");
        assert_eq!(s.local.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(s.owner, Some(Owner { pid: 7, comm: "curl".into() }));
        assert!(s.app_limited);
        assert!(!s.cwnd_limited);
    }

    #[test]
    fn an_ipv4_peer_of_a_dual_stack_socket_is_shown_as_ipv4() {
        let mut raw = sample();
        raw.family = AF_INET6;
        raw.saddr = Ipv4Addr::new(198, 18, 0, 1).to_ipv6_mapped().octets();
        raw.daddr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).octets();
        let s = decode(&raw_bytes(&raw), &CTX).expect("decodes");
        assert_eq!(s.local.to_string(), format!("198.18.0.1:{}", raw.sport));
        assert_eq!(s.remote.ip().to_string(), "2001:db8::1", "a real IPv6 address stays one");
    }

    #[test]
    fn rejects_truncated_and_foreign_records() {
        let bytes = raw_bytes(&sample());
        assert_eq!(decode(&bytes[..4], &CTX), Err(DecodeError::TooShort(4)));
        assert!(matches!(decode(&bytes[..100], &CTX), Err(DecodeError::Length { .. })));
        let mut v2 = sample();
        v2.header.version = 99;
        assert_eq!(decode(&raw_bytes(&v2), &CTX), Err(DecodeError::Version(99)));
        let mut kind = sample();
        kind.header.kind = 7;
        assert_eq!(decode(&raw_bytes(&kind), &CTX), Err(DecodeError::Kind(7)));
        let mut bad_reason = sample();
        bad_reason.reason = 0;
        assert!(matches!(decode(&raw_bytes(&bad_reason), &CTX), Err(DecodeError::BadField("reason", 0))));
    }

    #[test]
    fn loss_signals_decode_and_an_absent_field_stays_absent() {
        let mut raw = sample();
        raw.dsack_dups = 12;
        raw.reord_seen = 3;
        raw.reordering = 40;
        raw.total_rto = tracer_common::ABSENT;
        raw.total_rto_recoveries = tracer_common::ABSENT;
        raw.undo_events = 2;
        let s = decode(&raw_bytes(&raw), &CTX).expect("decodes");
        assert_eq!(s.signals.dsack_dups, Some(12));
        assert_eq!(s.signals.reord_seen, Some(3));
        assert_eq!(s.signals.reordering, Some(40));
        assert_eq!(s.signals.total_rto, None, "a kernel without total_rto says so, not 0");
        assert_eq!(s.signals.undo_events, Some(2));
    }

    #[test]
    fn zero_interval_gives_zero_delivery_rate() {
        let mut raw = sample();
        raw.rate_interval_us = 0;
        assert_eq!(decode(&raw_bytes(&raw), &CTX).map(|s| s.delivery_rate_bps), Ok(0));
    }
}
