//! Synthetic flows for the diagnosis' tests: a bulk sender at a set loss, or a feed of samples
//! with loss episodes at a chosen queue, judged once a second as the pipeline does.

use std::collections::HashMap;

use crate::analysis::diagnosis::{Diagnoser, DiagnosisConfig, LimitedBy, Verdict};
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::tests::sample;
use crate::analysis::flow_table::{FlowTable, TableConfig};
use crate::analysis::sample::{CaState, Sample, SampleReason};

pub(super) fn test_env() -> Environment {
    Environment {
        bbr_available: true,
        host_netns: 1,
        netns_pids: HashMap::from([(4026531840, 77)]),
        netns_names: HashMap::new(),
        ..Environment::default()
    }
}

/// The words a flagged verdict says for each class it may be flagged under.
fn flagged_words(class: LimitedBy) -> Option<&'static str> {
    match class {
        LimitedBy::CongestionWindow => Some("is held back by loss-based congestion control"),
        LimitedBy::Policer => Some("is policed at"),
        LimitedBy::SendBuffer => Some(LimitedBy::SendBuffer.describe()),
        _ => None,
    }
}

/// `limited_by`, `flagged` and the words tell one story: a flagged verdict is of a class a flag
/// may name and says so; any other says its class and none of a flag's words.
pub(super) fn assert_agrees(v: &Verdict) {
    if v.flagged {
        let words = flagged_words(v.limited_by).unwrap_or_else(|| panic!("flagged as {:?}: {}", v.limited_by, v.text));
        assert!(v.text.contains(words), "flagged {:?} without its words: {}", v.limited_by, v.text);
    } else {
        for class in [LimitedBy::CongestionWindow, LimitedBy::Policer] {
            let words = flagged_words(class).expect("words");
            assert!(!v.text.contains(words), "not flagged, yet {words:?}: {}", v.text);
        }
        // Every verdict opens with its class's heading (a sender's, the whole description).
        let own = if v.limited_by == LimitedBy::Unknown { "not enough data" } else { v.limited_by.heading() };
        assert!(v.text.contains(own), "{:?} without its words: {}", v.limited_by, v.text);
    }
}

/// Feed `secs` seconds of a synthetic flow (one sample per 100 ms) and evaluate each second.
pub(super) fn run(cc: &str, secs: u64, step: impl Fn(u64, &mut Sample)) -> (Diagnoser, FlowTable) {
    run_in(&test_env(), cc, secs, step)
}

pub(super) fn run_in(
    env: &Environment,
    cc: &str,
    secs: u64,
    step: impl Fn(u64, &mut Sample),
) -> (Diagnoser, FlowTable) {
    let mut table = FlowTable::new(TableConfig::default());
    let mut d = Diagnoser::new(DiagnosisConfig::default());
    for tick in 0..=secs * 10 {
        let mut s = sample(1, tick * 100);
        s.cc = cc.into();
        step(tick, &mut s);
        table.ingest(&s);
        if tick % 10 == 0 {
            d.evaluate(&table, env, tick * 100_000_000);
            d.verdict(1).into_iter().for_each(assert_agrees);
        }
    }
    (d, table)
}

/// Bulk sender at `bps` with `loss` retransmitted share, busy all the time.
pub(super) fn bulk(bps: u64, loss: f64, srtt_us: u32) -> impl Fn(u64, &mut Sample) {
    move |tick, s| {
        let acked = bps / 8 * tick / 10;
        s.bytes_acked = acked;
        s.bytes_sent = (acked as f64 / (1.0 - loss)) as u64;
        s.bytes_retrans = s.bytes_sent - acked;
        s.total_retrans = (s.bytes_retrans / 1448) as u32;
        s.busy_us = tick * 100_000;
        s.srtt_us = srtt_us;
        s.min_rtt_us = 30_000;
        s.snd_cwnd = 60;
        s.snd_ssthresh = 40;
        s.packets_out = 60;
        s.cwnd_limited = true;
    }
}

/// Feed `secs` seconds of samples from `feed(tick)` (several per 100 ms tick allowed) and
/// evaluate each second; returns the flag and limited_by of every evaluation.
pub(super) fn run_feed(secs: u64, feed: impl Fn(u64) -> Vec<Sample>) -> (Diagnoser, Vec<(bool, LimitedBy)>) {
    let mut table = FlowTable::new(TableConfig::default());
    let mut d = Diagnoser::new(DiagnosisConfig::default());
    let mut seen = Vec::new();
    for tick in 0..=secs * 10 {
        for s in feed(tick) {
            table.ingest(&s);
        }
        if tick % 10 == 0 {
            d.evaluate(&table, &test_env(), tick * 100_000_000);
            let v = d.verdict(1).expect("verdict");
            assert_agrees(v);
            seen.push((v.flagged, v.limited_by));
        }
    }
    (d, seen)
}

/// A window-limited bulk sender on a 30 ms path: `bps` of goodput, a loss every
/// `loss_every` ticks after slow start (the first second), srtt at each loss `queue_ms`
/// above min_rtt, srtt between losses `base_queue_ms` above it.
pub(super) fn episodic(
    cc: &'static str,
    bps: u64,
    loss_every: u64,
    queue_ms: u32,
    base_queue_ms: u32,
) -> impl Fn(u64) -> Vec<Sample> {
    move |tick| {
        let mut s = sample(1, tick * 100);
        s.cc = cc.into();
        // Losses before this tick; the one at this tick follows the periodic sample.
        let losses = if tick > 10 { (tick - 11) / loss_every + 1 } else { 0 };
        s.bytes_acked = bps / 8 * tick / 10;
        s.bytes_retrans = losses * 1448;
        s.bytes_sent = s.bytes_acked + s.bytes_retrans;
        s.total_retrans = losses as u32;
        s.busy_us = tick * 100_000;
        s.srtt_us = 30_000 + base_queue_ms * 1000;
        s.min_rtt_us = 30_000;
        // Slow start first, at 100 Mbit/s without a queue.
        s.snd_ssthresh = if tick < 10 { u32::MAX >> 1 } else { 40 };
        s.delivery_rate_bps = if tick < 10 { 100_000_000 } else { bps };
        s.snd_cwnd = (bps as f64 * 0.03 / 8.0 / 1448.0) as u32;
        s.packets_out = s.snd_cwnd;
        s.cwnd_limited = true;
        let mut out = vec![s.clone()];
        if tick >= 10 && (tick - 10) % loss_every == 0 {
            let mut l = s.clone();
            l.ts_ns += 5_000_000;
            l.reason = SampleReason::CaState;
            l.ca_state = CaState::Recovery;
            l.srtt_us = 30_000 + queue_ms * 1000;
            out.push(l.clone());
            l.ts_ns += 1_000_000;
            l.reason = SampleReason::Retransmit;
            l.total_retrans += 1;
            l.bytes_retrans += 1448;
            l.bytes_sent += 1448;
            out.push(l.clone());
            l.ts_ns += 40_000_000;
            l.ca_state = CaState::Open;
            l.srtt_us = s.srtt_us;
            out.push(l);
        }
        out
    }
}

/// BBR on a 200 ms path held by its 4 MiB send buffer, as measured: the writer waits in every
/// sample, everything queued is in flight, the congestion window has room, its rate samples
/// mostly application-limited.
pub(super) fn held_by_sndbuf(tick: u64, s: &mut Sample) {
    s.bytes_acked = 105_000_000 / 8 * tick / 10;
    s.bytes_sent = s.bytes_acked;
    s.busy_us = tick * 100_000;
    s.min_rtt_us = 200_000;
    s.srtt_us = 208_000;
    s.mss = 1448;
    s.sndbuf = 4_194_304;
    s.writer_blocked = true;
    s.cwnd_limited = false;
    s.snd_cwnd = 6700;
    s.packets_out = 1900;
    s.wmem_queued = 3_400_000;
    s.notsent_bytes = 0;
    s.snd_wnd = 18_000_000;
    s.delivery_rate_bps = 120_000_000;
    s.app_limited = !tick.is_multiple_of(2);
}

/// The samples of a loss of `lost` segments just after `s`: into Recovery, the retransmission,
/// back to Open 40 ms later.
pub(super) fn loss_after(s: &Sample, lost: u64) -> [Sample; 3] {
    let mut l = s.clone();
    l.ts_ns += 5_000_000;
    l.reason = SampleReason::CaState;
    l.ca_state = CaState::Recovery;
    let into = l.clone();
    l.ts_ns += 1_000_000;
    l.reason = SampleReason::Retransmit;
    l.total_retrans += lost as u32;
    l.bytes_retrans += lost * 1448;
    l.bytes_sent += lost * 1448;
    let retransmitted = l.clone();
    l.ts_ns += 40_000_000;
    l.ca_state = CaState::Open;
    [into, retransmitted, l]
}
