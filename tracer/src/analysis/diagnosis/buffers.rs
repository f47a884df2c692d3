//! What the send and receive buffers allow: the rate a flow's send buffer lets it carry at its
//! RTT and who set that buffer (the kernel's autotuning up to the namespace's `tcp_wmem` max,
//! or the application with `SO_SNDBUF`); the receiver's advertised window against the
//! bandwidth-delay product, and where the receiver is; what BBR would be held by once a
//! loss-based flow is switched; and the maxima the fix sets, sized from the bandwidth-delay
//! product with headroom.
//!
//! The kernel facts it rests on (Linux 4.15 and later, where the sysctls are per namespace):
//! autotuning grows a socket's send buffer to `sndbuf_expand x cwnd x per-segment size`
//! (2 for CUBIC, 3 for BBR; `tcp_sndbuf_expand`), never past `tcp_wmem`'s max, and its receive
//! buffer with what the application reads per round trip (`tcp_rcv_space_adjust`), never past
//! `tcp_rmem`'s max; either is left alone once the application set it (`SOCK_SNDBUF_LOCK`,
//! `SOCK_RCVBUF_LOCK` in `sk_userlocks`), and `SO_SNDBUF` / `SO_RCVBUF` get twice what they
//! ask, at most twice `net.core.wmem_max` / `rmem_max`. A running socket grows into a raised
//! maximum at its next expansion: the fix needs no restart.

use std::fmt::Write as _;

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::losses::LossView;
use crate::analysis::diagnosis::response::is_loss_based;
use crate::analysis::diagnosis::verdict::{BufferEvidence, ReceiverEvidence, SetBy};
use crate::analysis::diagnosis::window::rate_of;
use crate::analysis::diagnosis::window::Window;
use crate::analysis::environment::Environment;
use crate::analysis::fix_plan::commands::netns_words;
use crate::analysis::flow_table::Flow;
use crate::analysis::units::{bytes, pct, rate};

/// The most a window can be without scaling (RFC 7323).
const UNSCALED_WINDOW: u32 = 65_535;

/// Rounded up to a whole power of two of MiB, as people write these sizes.
fn round_up_mib(b: f64) -> u64 {
    let mib = (b / f64::from(1u32 << 20)).ceil().max(1.0) as u64;
    mib.next_power_of_two() << 20
}

/// The buffer a flow that needs `need_bps` at `rtt_s` should be able to grow to, keeping
/// `share` of a full buffer in flight: `headroom` times that rate's buffer, rounded up to a
/// power of two of MiB, no higher than the cap (256 MiB, and a quarter of the host's TCP
/// memory pressure level).
fn sized(need_bps: f64, rtt_s: f64, share: f64, cfg: &DiagnosisConfig, env: &Environment) -> u32 {
    let want = round_up_mib(cfg.buffer_headroom * need_bps * rtt_s / 8.0 / share);
    want.min(cap_bytes(cfg, env)).min(u64::from(u32::MAX >> 1)) as u32
}

/// Which buffer: the send buffer (what a full one keeps in flight) or the receive buffer (what
/// the kernel offers of it as window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Send,
    Receive,
}

impl Side {
    fn share(self, cfg: &DiagnosisConfig) -> f64 {
        match self {
            Side::Send => cfg.sndbuf_carried_share,
            Side::Receive => cfg.rcvbuf_window_share,
        }
    }
}

/// The rate a `side` buffer of `buffer` bytes allows at `rtt_s` (for the fix's plan).
pub fn buffer_rate(side: Side, buffer: u32, rtt_s: f64, cfg: &DiagnosisConfig) -> f64 {
    rate_of(f64::from(buffer), side.share(cfg), rtt_s)
}

/// The `side` buffer maximum a flow that needs `need_bps` at `rtt_s` should have (for the
/// fix's plan; the same sizing as the verdicts').
pub fn buffer_size_for(side: Side, need_bps: f64, rtt_s: f64, cfg: &DiagnosisConfig, env: &Environment) -> u32 {
    sized(need_bps, rtt_s, side.share(cfg), cfg, env)
}

/// How [`buffer_size_for`] sizes, in words, for the plan.
pub fn sizing_words(side: Side, need_bps: f64, rtt_s: f64, cfg: &DiagnosisConfig, env: &Environment) -> String {
    format!(
        "{:.0}x {} at min_rtt {:.0} ms, for a buffer {} of which carries data, rounded up to a power of two (at most {})",
        cfg.buffer_headroom,
        rate(need_bps),
        rtt_s * 1e3,
        pct(side.share(cfg)),
        bytes(cap_bytes(cfg, env)),
    )
}

/// The largest maximum the fix sets: the configured cap, and a quarter of the host's TCP
/// memory pressure level (one socket at the maximum then cannot push the host into it).
fn cap_bytes(cfg: &DiagnosisConfig, env: &Environment) -> u64 {
    let pressure = env.tcp_mem_pages[1].saturating_mul(4096) / 4;
    if pressure > 0 {
        cfg.buffer_cap_bytes.min(pressure)
    } else {
        cfg.buffer_cap_bytes
    }
}

/// The send buffer's own limit: the namespace's maximum for an autotuned buffer, the
/// application's setting for a locked one.
fn sndbuf_limit(set_by: SetBy, sndbuf: u32, namespace_max: Option<u32>) -> Option<u32> {
    match (set_by, namespace_max) {
        (SetBy::Autotuning, Some(max)) => Some(max),
        (SetBy::Application, _) => Some(sndbuf),
        _ => None,
    }
}

/// The receiving socket on this host: its namespace, its buffer and what set it.
fn receiver_evidence(peer: &Flow, env: &Environment) -> ReceiverEvidence {
    let r = &peer.latest;
    ReceiverEvidence {
        netns: r.netns,
        rcvbuf: r.rcvbuf,
        rcvbuf_set_by: if r.rcvbuf_locked { SetBy::Application } else { SetBy::Autotuning },
        tcp_rmem: env.netns_rmem.get(&r.netns).copied(),
        core_rmem_max: (env.core_rmem_max > 0).then_some(env.core_rmem_max),
    }
}

/// The numbers behind a flow's buffers, for a flow held by one of them and for a loss-based
/// flow whose next limit they may be; `None` for any other. `peer` is the receiving socket
/// when it is on this host. Long for its one struct literal: every figure is named where it is
/// taken.
pub(super) fn buffer_evidence(
    flow: &Flow,
    w: &Window,
    lv: &LossView,
    cfg: &DiagnosisConfig,
    env: &Environment,
    peer: Option<&Flow>,
    limited: LimitedBy,
) -> Option<BufferEvidence> {
    let s = &flow.latest;
    let loss_based = is_loss_based(&s.cc);
    let judged = matches!(limited, LimitedBy::SendBuffer | LimitedBy::ReceiveWindow)
        || (loss_based && matches!(limited, LimitedBy::CongestionWindow | LimitedBy::Policer));
    if !judged || w.min_rtt_us <= 0.0 {
        return None;
    }
    let min_rtt_s = w.min_rtt_us / 1e6;
    let srtt_s = (w.mean_srtt_us / 1e6).max(min_rtt_s);
    let tcp_wmem = env.netns_wmem.get(&s.netns).copied();
    let set_by = if s.sndbuf_locked { SetBy::Application } else { SetBy::Autotuning };
    let path_shown = lv.clean_delivery_bps;
    let sndbuf_limit = sndbuf_limit(set_by, s.sndbuf, tcp_wmem.map(|l| l.max));
    let at_limit = sndbuf_limit.is_some_and(|l| s.sndbuf >= l);
    let bbr_sndbuf_bps = sndbuf_limit.map(|l| rate_of(f64::from(l), cfg.sndbuf_carried_share, min_rtt_s));
    // What the flow needs: what it gets, what the path showed, and, once its buffer reached its
    // limit, at least what that limit allows (the path's ceiling above that is unknown).
    let reached = if at_limit { bbr_sndbuf_bps.unwrap_or(0.0) } else { 0.0 };
    let need = w.goodput_bps.max(path_shown).max(reached);
    let want_sndbuf = sized(need, min_rtt_s, cfg.sndbuf_carried_share, cfg, env);
    let want_rcvbuf = sized(need, min_rtt_s, cfg.rcvbuf_window_share, cfg, env);
    // Raised only where autotuning reached the namespace's maximum: below it, the maximum is
    // not what holds the flow.
    let raise_wmem = match (set_by, tcp_wmem) {
        (SetBy::Autotuning, Some(l)) if at_limit && want_sndbuf > l.max => Some(l.with_max(want_sndbuf)),
        _ => None,
    };
    let receiver = peer.map(|p| receiver_evidence(p, env));
    let raise_rmem = match &receiver {
        Some(r) if limited == LimitedBy::ReceiveWindow && r.rcvbuf_set_by == SetBy::Autotuning => {
            r.tcp_rmem.filter(|l| r.rcvbuf >= l.max && want_rcvbuf > l.max).map(|l| l.with_max(want_rcvbuf))
        }
        _ => None,
    };
    // A loss-based flow meets its send buffer next when that buffer is at its limit and short
    // of what the flow needs: the fix raises the namespace's maximum, or names the application.
    let next_limit_sndbuf =
        loss_based && limited != LimitedBy::SendBuffer && at_limit && sndbuf_limit.is_some_and(|l| want_sndbuf > l);
    // How the raised maximum is sized, in words (its size is said beside it).
    let sizing = match (raise_wmem, raise_rmem) {
        (Some(_), _) => sizing_words(Side::Send, need, min_rtt_s, cfg, env),
        (None, Some(_)) => sizing_words(Side::Receive, need, min_rtt_s, cfg, env),
        (None, None) => String::new(),
    };
    Some(BufferEvidence {
        sndbuf: s.sndbuf,
        sndbuf_set_by: set_by,
        tcp_wmem,
        core_wmem_max: (env.core_wmem_max > 0).then_some(env.core_wmem_max),
        in_flight_bytes: w.mean_in_flight,
        writer_blocked_share: w.writer_blocked_share,
        sndbuf_bound_share: w.sndbuf_bound_share,
        // Held by it, the flow itself shows what its buffer carries per round trip.
        sndbuf_allows_bps: if limited == LimitedBy::SendBuffer && w.mean_in_flight > 0.0 {
            w.mean_in_flight * 8.0 / srtt_s
        } else {
            rate_of(w.mean_sndbuf, cfg.sndbuf_carried_share, srtt_s)
        },
        path_shown_bps: path_shown,
        snd_wnd: w.mean_snd_wnd,
        max_snd_wnd: flow.max_snd_wnd,
        bdp_bytes: w.goodput_bps.max(path_shown) * min_rtt_s / 8.0,
        // The kernel's own word (a window that never passed 64 KiB may be a small buffer's).
        window_scaling_off: limited == LimitedBy::ReceiveWindow && s.window_unscaled,
        receiver,
        bbr_sndbuf_bps: if loss_based { bbr_sndbuf_bps } else { None },
        next_limit_sndbuf,
        raise_wmem,
        raise_rmem,
        want_sndbuf,
        want_rcvbuf,
        sizing,
    })
}

/// The most the buffers the fix leaves in place let the flow carry (bits/s): its send buffer
/// (raised, or as it is), a receiver on this host (raised, or as it is), an unscaled window.
pub(super) fn buffers_allow(b: &BufferEvidence, min_rtt_s: f64, cfg: &DiagnosisConfig) -> f64 {
    let send = match (b.raise_wmem, b.sndbuf_set_by, b.tcp_wmem) {
        (Some(l), _, _) => Some(l.max),
        (None, SetBy::Application, _) => Some(b.sndbuf),
        (None, SetBy::Autotuning, Some(l)) => Some(l.max),
        _ => None,
    };
    let mut allow = send.map_or(f64::INFINITY, |l| rate_of(f64::from(l), cfg.sndbuf_carried_share, min_rtt_s));
    if let Some(r) = &b.receiver {
        let limit = match (b.raise_rmem, r.rcvbuf_set_by, r.tcp_rmem) {
            (Some(l), _, _) => Some(l.max),
            (None, SetBy::Application, _) => Some(r.rcvbuf),
            (None, SetBy::Autotuning, Some(l)) => Some(l.max),
            _ => None,
        };
        if let Some(l) = limit {
            allow = allow.min(rate_of(f64::from(l), cfg.rcvbuf_window_share, min_rtt_s));
        }
    }
    if b.window_scaling_off {
        allow = allow.min(rate_of(f64::from(UNSCALED_WINDOW), 1.0, min_rtt_s));
    }
    allow
}

/// A flow held by its send buffer: what its buffer is, who set it, what it allows at this RTT
/// and what the path has shown, and what to change.
pub(super) fn write_sndbuf(text: &mut String, flow: &Flow, w: &Window, b: &BufferEvidence, env: &Environment) {
    let s = &flow.latest;
    let srtt_ms = w.mean_srtt_us / 1e3;
    let _ = write!(
        text,
        "{} ({} over {:.0} s): its send buffer, {}, ",
        LimitedBy::SendBuffer.describe(),
        rate(w.goodput_bps),
        w.secs,
        bytes(u64::from(b.sndbuf)),
    );
    match (b.sndbuf_set_by, b.tcp_wmem) {
        (SetBy::Application, _) => text.push_str("set by the application itself (SO_SNDBUF, which stops autotuning)"),
        (SetBy::Autotuning, Some(l)) if b.sndbuf >= l.max => {
            let _ = write!(text, "grown by autotuning to the namespace's tcp_wmem max ({})", bytes(u64::from(l.max)));
        }
        (SetBy::Autotuning, Some(l)) => {
            let _ = write!(text, "autotuned, below the namespace's tcp_wmem max ({})", bytes(u64::from(l.max)));
        }
        (SetBy::Autotuning, None) => text.push_str("autotuned"),
    }
    let _ = write!(
        text,
        ", kept {} in flight per {srtt_ms:.0} ms round trip: {}, what a buffer that size allows at this RTT. \
         In {} of samples the writer waited for room while the congestion window had more.",
        bytes(b.in_flight_bytes as u64),
        rate(b.sndbuf_allows_bps),
        pct(b.sndbuf_bound_share),
    );
    // (Held by its buffer, its rate samples are application-limited and do not count as what
    // the path showed: only more than it gets is worth saying.)
    if b.path_shown_bps > w.goodput_bps {
        let _ = write!(text, " The path delivered {} to this flow without queueing.", rate(b.path_shown_bps));
    }
    match (b.sndbuf_set_by, b.raise_wmem) {
        (SetBy::Application, _) => write_app_sndbuf(text, s.sndbuf, b, env),
        (SetBy::Autotuning, Some(l)) => {
            let _ = write!(
                text,
                " Raise the namespace's tcp_wmem max to {} ({}): running connections grow into it.",
                bytes(u64::from(l.max)),
                b.sizing
            );
        }
        (SetBy::Autotuning, None) => {
            text.push_str(" Autotuning has not grown it to the namespace's maximum yet.");
        }
    }
}

/// What to change in an application that set its own send buffer; cctrace changes nothing.
fn write_app_sndbuf(text: &mut String, sndbuf: u32, b: &BufferEvidence, env: &Environment) {
    let need = u64::from(b.want_sndbuf);
    let _ = write!(
        text,
        " The application fixed it: set SO_SNDBUF to at least {} there, or leave it unset so autotuning can grow it \
         (to the namespace's tcp_wmem max); cctrace changes nothing for it.",
        bytes(need),
    );
    // The kernel gives twice what was asked, at most twice wmem_max: a buffer at that cap
    // means the host-wide limit, not the application, stopped it.
    if env.core_wmem_max > 0 && u64::from(sndbuf) >= 2 * u64::from(env.core_wmem_max) {
        let _ = write!(
            text,
            " It got the most net.core.wmem_max ({}) lets it ask for: that host-wide limit must be raised too, to at \
             least {} (`sysctl -w net.core.wmem_max={}`; it binds every namespace, so cctrace leaves it to you).",
            bytes(u64::from(env.core_wmem_max)),
            bytes(need.div_ceil(2)),
            need.div_ceil(2)
        );
    }
}

/// A flow held by the peer's receive window: the window against the bandwidth-delay product,
/// an unscaled window, and the receiver: on this host (its namespace, its buffer and what set
/// it) or elsewhere.
pub(super) fn write_rwnd(text: &mut String, flow: &Flow, w: &Window, b: &BufferEvidence, env: &Environment) {
    let min_rtt_s = w.min_rtt_us / 1e6;
    let carries = rate_of(b.snd_wnd, 1.0, min_rtt_s);
    let _ = write!(
        text,
        "{} ({} over {:.0} s): the peer advertised {} (at most {} so far), which carries at most {} at min_rtt {:.0} ms",
        LimitedBy::ReceiveWindow.describe(),
        rate(w.goodput_bps),
        w.secs,
        bytes(b.snd_wnd as u64),
        bytes(u64::from(b.max_snd_wnd)),
        rate(carries),
        min_rtt_s * 1e3,
    );
    // The bandwidth-delay product is known only as far as the path showed more than the window.
    if b.path_shown_bps > 1.2 * carries {
        let _ = write!(
            text,
            ", against a bandwidth-delay product of {} at the {} the path delivered without queueing",
            bytes(b.bdp_bytes as u64),
            rate(b.path_shown_bps)
        );
    }
    text.push('.');
    if b.window_scaling_off {
        text.push_str(
            " The window never passed 64 KiB: window scaling is off at the receiver (net.ipv4.tcp_window_scaling), \
             or a middlebox strips the option.",
        );
    }
    write_receiver(text, flow, b, env);
}

/// Where the receiver is and what its buffer is: on this host (its namespace, its buffer and
/// what set it, what to raise) or elsewhere (what to let its buffer grow to).
fn write_receiver(text: &mut String, flow: &Flow, b: &BufferEvidence, env: &Environment) {
    let need = u64::from(b.want_rcvbuf);
    match &b.receiver {
        Some(r) => {
            let _ = write!(
                text,
                " The receiver is on this host, in {}: its receive buffer is {}",
                netns_words(r.netns, env),
                bytes(u64::from(r.rcvbuf))
            );
            match (r.rcvbuf_set_by, b.raise_rmem, r.tcp_rmem) {
                (SetBy::Application, ..) => {
                    let _ = write!(
                        text,
                        ", set by the receiving application (SO_RCVBUF, which stops autotuning): set at least {} there, \
                         or leave it unset; cctrace changes nothing for it.",
                        bytes(need)
                    );
                    if r.core_rmem_max.is_some_and(|m| u64::from(r.rcvbuf) >= 2 * u64::from(m)) {
                        let _ = write!(
                            text,
                            " It got the most net.core.rmem_max lets it ask for: that host-wide limit must be raised too, \
                             to at least {} (`sysctl -w net.core.rmem_max={}`; it binds every namespace, so cctrace \
                             leaves it to you).",
                            bytes(need.div_ceil(2)),
                            need.div_ceil(2)
                        );
                    }
                }
                (SetBy::Autotuning, Some(l), Some(now)) => {
                    let _ = write!(
                        text,
                        ", grown by autotuning to that namespace's tcp_rmem max ({}): raise it to {} ({}).",
                        bytes(u64::from(now.max)),
                        bytes(u64::from(l.max)),
                        b.sizing
                    );
                }
                (SetBy::Autotuning, ..) => text.push_str(
                    ", autotuned and below its namespace's tcp_rmem max: the receiving application reads slower than \
                     the path delivers, or autotuning has not grown it yet.",
                ),
            }
        }
        None => {
            let _ = write!(
                text,
                " The receiver, {}, is not a socket cctrace sees on this host: on it, let the receive buffer grow to at \
                 least {} (on Linux the max of net.ipv4.tcp_rmem, and no SO_RCVBUF in the application).",
                flow.latest.remote.ip(),
                bytes(need)
            );
        }
    }
}

/// The sentence a flagged loss-based flow's text gains when BBR would be held by its send
/// buffer next.
pub(super) fn write_next_limit(text: &mut String, b: &BufferEvidence, min_rtt_s: f64) {
    let Some(held) = b.bbr_sndbuf_bps.filter(|_| b.next_limit_sndbuf) else { return };
    let which = match (b.sndbuf_set_by, b.tcp_wmem) {
        (SetBy::Application, _) => format!("the application's own send buffer ({})", bytes(u64::from(b.sndbuf))),
        (SetBy::Autotuning, Some(l)) => format!("the namespace's tcp_wmem max ({})", bytes(u64::from(l.max))),
        (SetBy::Autotuning, None) => "its send buffer".to_string(),
    };
    let _ = write!(
        text,
        " Switched alone, BBR would be held next by its send buffer: {which} lets it carry about {} at min_rtt {:.0} ms",
        rate(held),
        min_rtt_s * 1e3
    );
    if b.path_shown_bps > 0.0 {
        let _ = write!(text, "; the path delivered {} without queueing", rate(b.path_shown_bps));
    }
    match b.raise_wmem {
        Some(l) => {
            let _ = write!(
                text,
                ". The fix raises the max to {} in the same step ({}).",
                bytes(u64::from(l.max)),
                b.sizing
            );
        }
        None => text.push_str(": change it in the application."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnosis::test_feed::{held_by_sndbuf, run_in, test_env};
    use crate::analysis::diagnosis::{Diagnoser, Verdict};
    use crate::analysis::environment::BufferLimits;
    use crate::analysis::flow_table::tests::sample;
    use crate::analysis::flow_table::{FlowTable, TableConfig};
    use crate::analysis::sample::Sample;

    const DEFAULT_WMEM: BufferLimits = BufferLimits { min: 4096, default: 16384, max: 4_194_304 };

    fn env_with_wmem() -> Environment {
        let mut env = test_env();
        env.netns_wmem.insert(4026531840, DEFAULT_WMEM);
        env.core_wmem_max = 212_992;
        env
    }

    fn last(d: &Diagnoser) -> Verdict {
        d.verdict(1).expect("verdict").clone()
    }

    #[test]
    fn a_loss_based_flow_flagged_for_its_buffer_keeps_the_flag_while_its_first_losses_gather() {
        // CUBIC on a 200 ms path: held by its send buffer in slow start for 8 s, then by its
        // losses at 10 Mbit/s, one every 4 s, too few to judge for a while: the flag stays
        // through the change of class, and ends under cwnd.
        use crate::analysis::diagnosis::test_feed::{assert_agrees, loss_after};
        let env = env_with_wmem();
        let mut table = FlowTable::new(TableConfig::default());
        let mut d = Diagnoser::new(crate::analysis::diagnosis::DiagnosisConfig::default());
        let (mut seen, mut retrans) = (Vec::new(), 0u64);
        for tick in 0..=400u64 {
            let mut s = sample(1, tick * 100);
            s.cc = "cubic".into();
            held_by_sndbuf(tick.min(80), &mut s);
            if tick > 80 {
                s.bytes_acked += 10_000_000 / 8 * (tick - 80) / 10;
                s.bytes_retrans = retrans * 1448;
                s.bytes_sent = s.bytes_acked + s.bytes_retrans;
                s.total_retrans = retrans as u32;
                s.busy_us = tick * 100_000;
                // Its writer waits on a full buffer that the congestion window drains slowly.
                (s.writer_blocked, s.app_limited, s.cwnd_limited) = (true, false, true);
                (s.snd_cwnd, s.packets_out, s.snd_ssthresh) = (170, 170, 170);
                (s.wmem_queued, s.notsent_bytes) = (4_000_000, 3_700_000);
                (s.srtt_us, s.delivery_rate_bps) = (201_000, 10_000_000);
            } else {
                s.snd_ssthresh = u32::MAX >> 1;
            }
            table.ingest(&s);
            if tick > 80 && tick % 40 == 0 {
                retrans += 1;
                for l in loss_after(&s, 1) {
                    table.ingest(&l);
                }
            }
            if tick % 10 == 0 {
                d.evaluate(&table, &env, tick * 100_000_000);
                let v = d.verdict(1).expect("verdict");
                assert_agrees(v);
                seen.push((v.flagged, v.limited_by));
            }
        }
        let first = seen.iter().position(|(f, _)| *f).unwrap_or_else(|| panic!("flagged: {seen:?}"));
        assert_eq!(seen[first].1, LimitedBy::SendBuffer, "{seen:?}");
        assert!(seen[first..].iter().all(|(f, _)| *f), "the flag never drops: {seen:?}");
        assert_eq!(seen.last().map(|s| s.1), Some(LimitedBy::CongestionWindow), "{seen:?}");
    }

    #[test]
    fn a_flow_held_by_its_autotuned_send_buffer_gets_its_numbers_and_the_raise() {
        let (d, _) = run_in(&env_with_wmem(), "bbr", 12, held_by_sndbuf);
        let v = last(&d);
        assert_eq!(v.limited_by, LimitedBy::SendBuffer, "{}", v.text);
        assert!(v.flagged, "{}", v.text);
        let b = v.evidence.as_ref().and_then(|e| e.buffers.clone()).expect("buffer evidence");
        assert_eq!((b.sndbuf, b.sndbuf_set_by, b.tcp_wmem), (4_194_304, SetBy::Autotuning, Some(DEFAULT_WMEM)));
        assert!((b.in_flight_bytes - 1900.0 * 1448.0).abs() < 1.0, "{b:?}");
        // Held by it, what it keeps in flight per round trip: 1900 segments per 208 ms.
        assert!((b.sndbuf_allows_bps / 1e6 - 105.8).abs() < 0.5, "{b:?}");
        assert_eq!(b.raise_wmem, Some(DEFAULT_WMEM.with_max(32 << 20)), "{b:?}");
        for words in [
            "grown by autotuning to the namespace's tcp_wmem max (4.0 MiB)",
            "kept 2.6 MiB in flight per 208 ms round trip: 105.8 Mbit/s, what a buffer that size allows at this RTT",
            "The path delivered 120.0 Mbit/s to this flow without queueing",
            "Raise the namespace's tcp_wmem max to 32.0 MiB (4x 120.0 Mbit/s at min_rtt 200 ms, for a buffer 60.00% of which",
        ] {
            assert!(v.text.contains(words), "{words:?} in {}", v.text);
        }
        let set = "nsenter --net=/proc/77/ns/net sysctl -w 'net.ipv4.tcp_wmem=4096 16384 33554432'";
        assert!(v.fix.iter().any(|c| c.starts_with(set)), "{:#?}", v.fix);
        assert!(
            v.fix
                .iter()
                .any(|c| c
                    == "# roll back: nsenter --net=/proc/77/ns/net sysctl -w 'net.ipv4.tcp_wmem=4096 16384 4194304'"),
            "the exact triple comes back: {:#?}",
            v.fix
        );
        assert!(!v.fix.iter().any(|c| c.contains("tcp_congestion_control")), "BBR already: {:#?}", v.fix);
    }

    #[test]
    fn an_application_that_set_its_own_send_buffer_is_named_and_nothing_is_changed() {
        let (d, _) = run_in(&env_with_wmem(), "bbr", 12, |tick, s| {
            held_by_sndbuf(tick, s);
            // SO_SNDBUF of 1 MiB asked, capped at twice net.core.wmem_max.
            s.sndbuf_locked = true;
            s.sndbuf = 425_984;
            s.wmem_queued = 400_000;
            s.packets_out = 200;
            s.bytes_acked = 12_000_000 / 8 * tick / 10;
            s.bytes_sent = s.bytes_acked;
        });
        let v = last(&d);
        assert_eq!(v.limited_by, LimitedBy::SendBuffer, "{}", v.text);
        assert!(!v.flagged, "{}", v.text);
        assert!(v.fix.is_empty(), "{:#?}", v.fix);
        for words in [
            "set by the application itself (SO_SNDBUF",
            "The application fixed it: set SO_SNDBUF to at least",
            "cctrace changes nothing for it",
            "It got the most net.core.wmem_max (208.0 KiB) lets it ask for",
            "it binds every namespace, so cctrace leaves it to you",
        ] {
            assert!(v.text.contains(words), "{words:?} in {}", v.text);
        }
        // Asked for half of what it should get (the kernel doubles SO_SNDBUF), as a command.
        let b = v.evidence.as_ref().and_then(|e| e.buffers.as_ref()).expect("buffers");
        let half = u64::from(b.want_sndbuf).div_ceil(2);
        assert!(half > 212_992, "{half}");
        assert!(v.text.contains(&format!("`sysctl -w net.core.wmem_max={half}`")), "{}", v.text);
    }

    #[test]
    fn a_flagged_cubic_flow_at_its_buffer_limit_gets_the_raise_with_the_switch() {
        // CUBIC at 0.05 % loss on the 200 ms path: 13 Mbit/s, its buffer at the namespace's
        // 4 MiB max since slow start, which delivered 110 Mbit/s without a queue.
        let feed = crate::analysis::diagnosis::test_feed::episodic("cubic", 13_000_000, 8, 0, 0);
        let env = env_with_wmem();
        let mut table = FlowTable::new(TableConfig::default());
        let mut d = Diagnoser::default();
        for tick in 0..=300u64 {
            for mut s in feed(tick) {
                s.min_rtt_us = 200_000;
                s.srtt_us = s.srtt_us.saturating_sub(30_000) + 200_000;
                s.sndbuf = 4_194_304;
                s.wmem_queued = 3_900_000;
                s.notsent_bytes = 3_500_000;
                s.writer_blocked = true;
                if tick < 10 {
                    s.delivery_rate_bps = 110_000_000;
                }
                table.ingest(&s);
            }
            if tick % 10 == 0 {
                d.evaluate(&table, &env, tick * 100_000_000);
            }
        }
        let v = last(&d);
        assert!(v.flagged, "{}", v.text);
        let b = v.evidence.as_ref().and_then(|e| e.buffers.clone()).expect("buffers");
        assert!(b.next_limit_sndbuf, "{b:?}");
        // 4 MiB keeping 60 % in flight per 200 ms: about 100.7 Mbit/s.
        assert!(b.bbr_sndbuf_bps.is_some_and(|r| (r / 1e6 - 100.7).abs() < 0.2), "{b:?}");
        assert!(v.text.contains("Switched alone, BBR would be held next by its send buffer"), "{}", v.text);
        assert!(v.text.contains("The fix raises the max to 32.0 MiB in the same step"), "{}", v.text);
        let cc = v.fix.iter().position(|c| c.ends_with("net.ipv4.tcp_congestion_control=bbr")).expect("switch");
        let wmem = v.fix.iter().position(|c| c.contains("'net.ipv4.tcp_wmem=4096 16384 33554432'")).expect("raise");
        assert!(cc < wmem, "{:#?}", v.fix);
        // What it says is available stays within what the raised buffer allows.
        let e = v.evidence.as_ref().expect("evidence");
        let said = e.goodput_bps + e.available_bps.unwrap_or(0.0);
        assert!(said <= rate_of(f64::from(32u32 << 20), 0.6, 0.2), "{e:?}");
    }

    /// A sender (cookie 1) held by the window of a receiver (cookie 2) in another namespace of
    /// this host, `rcv` changing the receiver's samples.
    fn windowed(env: &Environment, rcv: impl Fn(&mut Sample)) -> Verdict {
        let mut table = FlowTable::new(TableConfig::default());
        let mut d = Diagnoser::default();
        for tick in 0..=120u64 {
            let mut s = sample(1, tick * 100);
            s.cc = "bbr".into();
            s.bytes_acked = 20_000_000 / 8 * tick / 10;
            s.bytes_sent = s.bytes_acked;
            s.busy_us = tick * 100_000;
            s.rwnd_limited_us = tick * 80_000;
            s.min_rtt_us = 200_000;
            s.srtt_us = 201_000;
            s.snd_wnd = 500_000;
            s.delivery_rate_bps = 20_000_000;
            table.ingest(&s);
            let mut r = sample(2, tick * 100 + 1);
            r.netns = 4026532999;
            (r.local, r.remote) = (s.remote, s.local);
            r.bytes_received = s.bytes_acked;
            r.bytes_acked = 0;
            r.bytes_sent = 0;
            r.rcvbuf = 1_048_576;
            rcv(&mut r);
            table.ingest(&r);
            if tick % 10 == 0 {
                d.evaluate(&table, env, tick * 100_000_000);
            }
        }
        d.verdict(1).expect("verdict").clone()
    }

    #[test]
    fn a_receiver_on_this_host_is_named_with_its_namespace_and_its_fix() {
        let mut env = test_env();
        env.netns_names.insert(4026532999, "rcv".into());
        env.netns_rmem.insert(4026532999, BufferLimits { min: 4096, default: 131_072, max: 1_048_576 });
        let v = windowed(&env, |_| {});
        assert_eq!(v.limited_by, LimitedBy::ReceiveWindow, "{}", v.text);
        assert!(!v.flagged);
        for words in [
            "the peer advertised 488.3 KiB (at most 488.3 KiB so far), which carries at most 20.0 Mbit/s at min_rtt 200 ms.",
            "The receiver is on this host, in ip netns rcv: its receive buffer is 1.0 MiB",
            "grown by autotuning to that namespace's tcp_rmem max (1.0 MiB): raise it to 4.0 MiB",
        ] {
            assert!(v.text.contains(words), "{words:?} in {}", v.text);
        }
        assert!(
            v.fix.iter().any(|c| c.starts_with("ip netns exec rcv sysctl -w 'net.ipv4.tcp_rmem=4096 131072 4194304'")),
            "{:#?}",
            v.fix
        );
        assert!(v
            .fix
            .iter()
            .any(|c| c == "# roll back: ip netns exec rcv sysctl -w 'net.ipv4.tcp_rmem=4096 131072 1048576'"));
        // Its own SO_RCVBUF: named, nothing to run.
        let v = windowed(&env, |r| r.rcvbuf_locked = true);
        assert!(v.text.contains("set by the receiving application (SO_RCVBUF"), "{}", v.text);
        assert!(v.fix.is_empty(), "{:#?}", v.fix);
    }

    #[test]
    fn a_remote_receiver_gets_words_and_an_unscaled_window_is_named() {
        let windowed = |unscaled: bool| {
            run_in(&test_env(), "bbr", 12, move |tick, s| {
                s.bytes_acked = 2_600_000 / 8 * tick / 10;
                s.bytes_sent = s.bytes_acked;
                s.busy_us = tick * 100_000;
                s.rwnd_limited_us = tick * 90_000;
                s.min_rtt_us = 200_000;
                s.srtt_us = 200_000;
                s.snd_wnd = 65_535;
                s.window_unscaled = unscaled;
            })
            .0
        };
        let v = last(&windowed(true));
        assert_eq!(v.limited_by, LimitedBy::ReceiveWindow, "{}", v.text);
        assert!(v.text.contains("window scaling is off at the receiver"), "{}", v.text);
        assert!(v.text.contains("The receiver, 198.18.0.2, is not a socket cctrace sees on this host"), "{}", v.text);
        assert!(v.fix.is_empty());
        // A scaled window held under 64 KiB by a small buffer is not called unscaled.
        let v = last(&windowed(false));
        assert!(!v.text.contains("window scaling"), "{}", v.text);
    }

    #[test]
    fn sizes_round_up_to_powers_of_two_and_stop_at_the_cap() {
        let cfg = DiagnosisConfig::default();
        let env = Environment::default();
        // 110 Mbit/s at 200 ms, 60 % carrying data, 4x headroom: 18.3 MB, 32 MiB.
        assert_eq!(sized(110e6, 0.2, 0.6, &cfg, &env), 32 << 20);
        // 15 Mbit/s at 30 ms: 375 kB, 1 MiB.
        assert_eq!(sized(15e6, 0.03, 0.6, &cfg, &env), 1 << 20);
        // 10 Gbit/s at 300 ms would want 2 GiB: 256 MiB at most.
        assert_eq!(sized(10e9, 0.3, 0.6, &cfg, &env), 256 << 20);
        // A host whose TCP memory pressure starts at 256 MiB: a quarter of it.
        let small = Environment { tcp_mem_pages: [0, 65_536, 0], ..Environment::default() };
        assert_eq!(sized(10e9, 0.3, 0.6, &cfg, &small), 64 << 20);
        assert_eq!(round_up_mib(1.0), 1 << 20);
        assert!((rate_of(4_194_304.0, 0.6, 0.2) / 1e6 - 100.7).abs() < 0.1);
    }
}
