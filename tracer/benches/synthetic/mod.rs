//! The synthetic flow both benchmarks feed: a CUBIC bulk upload's sample, built as a wire
//! record and decoded, so the decoder's allocations are part of what is measured.

use tracer::analysis::sample::{from_raw, DecodeContext, Sample};
use tracer::test_support::wire::raw_sample_template;

const CTX: DecodeContext = DecodeContext { hz: 250 };

/// Flow `cookie`'s sample at `ts_ns`, after `bytes_acked` bytes (2 % retransmitted).
pub(crate) fn sample(cookie: u64, ts_ns: u64, bytes_acked: u64) -> Sample {
    let mut raw = raw_sample_template();
    raw.cookie = cookie;
    raw.ts_ns = ts_ns;
    raw.saddr[..4].copy_from_slice(&[198, 18, (cookie >> 8) as u8, cookie as u8]);
    raw.daddr[..4].copy_from_slice(&[198, 19, 0, 1]);
    raw.sport = 10_000 + (cookie % 50_000) as u16;
    raw.dport = 443;
    raw.cc_name[..5].copy_from_slice(b"cubic");
    raw.comm[..6].copy_from_slice(b"iperf3");
    raw.flags = tracer_common::flag::OWNER_KNOWN;
    raw.mss = 1448;
    raw.snd_cwnd = 10 + (cookie % 90) as u32;
    raw.snd_ssthresh = 64;
    raw.srtt_us = 30_000;
    raw.min_rtt_us = 29_000;
    raw.bytes_acked = bytes_acked;
    raw.bytes_sent = raw.bytes_acked + raw.bytes_acked / 50;
    raw.bytes_retrans = raw.bytes_acked / 50;
    raw.sndbuf = 87_040;
    raw.wmem_queued = 80_000;
    from_raw(&raw, &CTX).expect("valid sample")
}
