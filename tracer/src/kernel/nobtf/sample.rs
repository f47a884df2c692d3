//! A sample from what sock_diag says of a socket: the same [`Sample`] the programs of the other
//! modes write, with `tcp_info`'s fields where theirs come from `tcp_sock`, and the fields
//! sock_diag cannot say marked unknown.

use tracer_common::tcp_state;

use crate::analysis::loss_signals::LossSignals;
use crate::analysis::receive::ReceiveSide;
use crate::analysis::sample::{CaState, Sample, SampleReason, TcpState, Unknown};
use crate::host::sock_diag::{tcp_info_end, SocketInfo, TcpInfo, TCPI_OPT_WSCALE};

/// The sample of `info`, a socket of network namespace `netns`, taken at `ts_ns`.
pub(super) fn sample_of(info: &SocketInfo, netns: u32, ts_ns: u64, reason: SampleReason) -> Sample {
    let t = info.tcp_info.unwrap_or_default();
    let mem = info.memory.unwrap_or_default();
    let has = |end: usize| info.tcp_info.is_some() && info.tcp_info_len >= end;
    let established = info.state == tcp_state::ESTABLISHED;
    Sample {
        ts_ns,
        cookie: info.cookie,
        netns,
        cgroup_id: info.cgroup_id.unwrap_or(0),
        reason,
        local: info.local,
        remote: info.remote,
        tcp_state: TcpState::from_raw(info.state),
        old_tcp_state: TcpState::from_raw(0),
        ca_state: CaState::from_raw(t.ca_state),
        cc: info.cc.clone().unwrap_or_default(),
        owner: None,
        snd_cwnd: t.snd_cwnd,
        snd_ssthresh: t.snd_ssthresh,
        srtt_us: t.rtt,
        rttvar_us: t.rttvar,
        min_rtt_us: t.min_rtt,
        mss: t.snd_mss,
        packets_out: t.unacked,
        lost_out: t.lost,
        sacked_out: t.sacked,
        retrans_out: t.retrans,
        total_retrans: t.total_retrans,
        retrans_events: 0,
        bytes_sent: t.bytes_sent,
        bytes_acked: t.bytes_acked,
        bytes_received: t.bytes_received,
        bytes_retrans: t.bytes_retrans,
        delivered: t.delivered,
        delivery_rate_bps: t.delivery_rate.saturating_mul(8),
        app_limited: t.delivery_rate_app_limited(),
        cwnd_limited: false,
        pacing_rate_bps: t.pacing_rate.saturating_mul(8),
        snd_wnd: if has(tcp_info_end::SND_WND) { t.snd_wnd } else { 0 },
        notsent_bytes: t.notsent_bytes,
        sndbuf: mem.sndbuf,
        wmem_queued: mem.wmem_queued,
        busy_us: t.busy_time,
        rwnd_limited_us: t.rwnd_limited,
        sndbuf_limited_us: t.sndbuf_limited,
        rcvbuf: mem.rcvbuf,
        sndbuf_locked: false,
        rcvbuf_locked: false,
        writer_blocked: false,
        window_unscaled: established && info.tcp_info.is_some() && t.options & TCPI_OPT_WSCALE == 0,
        route: None,
        signals: signals(&t, &has),
        rack_rtt_us: 0,
        receive: ReceiveSide::default(),
        unknown: Unknown::SOCK_DIAG,
    }
}

fn signals(t: &TcpInfo, has: &impl Fn(usize) -> bool) -> LossSignals {
    let since = |end: usize, v: u32| has(end).then_some(v);
    LossSignals {
        dsack_dups: since(tcp_info_end::REORD_SEEN, t.dsack_dups),
        reord_seen: since(tcp_info_end::REORD_SEEN, t.reord_seen),
        reordering: since(1, t.reordering),
        total_rto: since(tcp_info_end::TOTAL_RTO, u32::from(t.total_rto)),
        total_rto_recoveries: since(tcp_info_end::TOTAL_RTO, u32::from(t.total_rto_recoveries)),
        // Counting undone cuts needs `undo_marker`, a field of the socket.
        undo_events: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::sock_diag::SocketMemory;

    fn info(len: usize) -> SocketInfo {
        let t = TcpInfo {
            state: tcp_state::ESTABLISHED,
            ca_state: 3,
            snd_cwnd: 68,
            snd_ssthresh: 40,
            rtt: 30_000,
            min_rtt: 29_000,
            snd_mss: 1448,
            total_retrans: 12,
            delivery_rate: 2_750_000,
            app_limited_bits: 1,
            pacing_rate: 3_000_000,
            options: TCPI_OPT_WSCALE,
            snd_wnd: 3_000_000,
            dsack_dups: 2,
            total_rto: 1,
            ..TcpInfo::default()
        };
        SocketInfo {
            family: 2,
            state: tcp_state::ESTABLISHED,
            local: "198.18.0.1:5201".parse().unwrap(),
            remote: "198.18.0.2:40000".parse().unwrap(),
            cookie: 42,
            inode: 1234,
            cc: Some("cubic".into()),
            tcp_info: Some(t),
            tcp_info_len: len,
            memory: Some(SocketMemory { rcvbuf: 131_072, sndbuf: 4_194_304, wmem_queued: 3_000_000 }),
            cgroup_id: Some(99),
        }
    }

    #[test]
    fn tcp_info_fills_the_sample_in_the_units_of_the_other_modes() {
        let s = sample_of(&info(248), 4_026_531_840, 5, SampleReason::Periodic);
        assert_eq!((s.cookie, s.netns, s.cgroup_id, s.ts_ns), (42, 4_026_531_840, 99, 5));
        assert_eq!((s.snd_cwnd, s.snd_ssthresh, s.srtt_us, s.mss), (68, 40, 30_000, 1448));
        assert_eq!((s.ca_state, s.cc.as_str(), s.total_retrans), (CaState::Recovery, "cubic", 12));
        assert_eq!((s.delivery_rate_bps, s.pacing_rate_bps), (22_000_000, 24_000_000));
        assert!(s.app_limited && !s.window_unscaled);
        assert_eq!((s.sndbuf, s.wmem_queued, s.rcvbuf, s.snd_wnd), (4_194_304, 3_000_000, 131_072, 3_000_000));
        assert_eq!((s.signals.dsack_dups, s.signals.total_rto, s.signals.undo_events), (Some(2), Some(1), None));
        assert_eq!(s.unknown, Unknown::SOCK_DIAG);
        assert!(s.writer_waits(), "a buffer at least two thirds full has its writer waiting");
    }

    #[test]
    fn what_an_older_kernels_shorter_tcp_info_lacks_is_absent_not_zero() {
        let s = sample_of(&info(tcp_info_end::REORD_SEEN), 1, 5, SampleReason::Periodic);
        assert_eq!((s.snd_wnd, s.signals.total_rto), (0, None));
        assert_eq!(s.signals.dsack_dups, Some(2));
    }
}
