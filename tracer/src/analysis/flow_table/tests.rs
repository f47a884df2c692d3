//! The flow table's tests, and [`sample`], the synthetic sample every test of the core starts
//! from.

use std::collections::{BTreeSet, HashSet};

use tracer_common::{NS_PER_SEC, TCP_INFINITE_SSTHRESH};

use super::*;
use crate::analysis::flow_table::flow::EvictionKey;
use crate::analysis::sample::{CaState, Owner, Sample, SampleReason, TcpState};

pub(crate) fn sample(cookie: u64, ts_ms: u64) -> Sample {
    Sample {
        ts_ns: ts_ms * 1_000_000,
        cookie,
        netns: 4026531840,
        cgroup_id: 1,
        reason: SampleReason::Periodic,
        local: "198.18.0.1:40000".parse().expect("addr"),
        remote: "198.18.0.2:5201".parse().expect("addr"),
        tcp_state: TcpState::Established,
        old_tcp_state: TcpState::Unknown(0),
        ca_state: CaState::Open,
        cc: "cubic".into(),
        owner: None,
        snd_cwnd: 10,
        snd_ssthresh: u32::MAX >> 1,
        srtt_us: 30_000,
        rttvar_us: 1_000,
        min_rtt_us: 30_000,
        mss: 1448,
        packets_out: 0,
        lost_out: 0,
        sacked_out: 0,
        retrans_out: 0,
        total_retrans: 0,
        retrans_events: 0,
        bytes_sent: 0,
        bytes_acked: 0,
        bytes_received: 0,
        bytes_retrans: 0,
        delivered: 0,
        delivery_rate_bps: 0,
        app_limited: false,
        cwnd_limited: true,
        pacing_rate_bps: 0,
        snd_wnd: 65535,
        notsent_bytes: 0,
        sndbuf: 87040,
        // A backlogged sender: its send buffer is full.
        wmem_queued: 87040,
        busy_us: 0,
        rwnd_limited_us: 0,
        sndbuf_limited_us: 0,
        rcvbuf: 131072,
        sndbuf_locked: false,
        rcvbuf_locked: false,
        writer_blocked: false,
        window_unscaled: false,
        route: None,
        signals: Default::default(),
        rack_rtt_us: 0,
        receive: Default::default(),
        unknown: crate::analysis::sample::Unknown::default(),
    }
}

#[test]
fn throughput_and_retrans_ratio_over_window() {
    let mut t = FlowTable::new(TableConfig::default());
    let mut s = sample(1, 0);
    assert_eq!(t.ingest(&s), Ingested::NewFlow);
    // 10 samples, 100 ms apart, 125 kB acked each: 10 Mbit/s; 1 % of bytes retransmitted.
    for i in 1..=10u64 {
        s = sample(1, i * 100);
        s.bytes_acked = i * 125_000;
        s.bytes_sent = i * 126_262;
        s.bytes_retrans = i * 1_262;
        s.total_retrans = (i * 2) as u32;
        assert_eq!(t.ingest(&s), Ingested::Updated);
    }
    let f = t.get(1).expect("flow");
    assert!((f.rates.throughput_bps - 10_000_000.0).abs() < 1.0, "{}", f.rates.throughput_bps);
    assert!((f.rates.retrans_ratio - 0.009995).abs() < 1e-4, "{}", f.rates.retrans_ratio);
    assert!((f.rates.retrans_per_sec - 20.0).abs() < 1e-6);
    assert_eq!(f.samples, 11);
}

#[test]
fn window_slides() {
    let mut t = FlowTable::new(TableConfig::default());
    // 1 s at 8 Mbit/s then 1 s at 16 Mbit/s; the rate must show the second second only.
    let mut acked = 0;
    for i in 0..=20u64 {
        let mut s = sample(1, i * 100);
        acked += if i <= 10 { 100_000 } else { 200_000 };
        s.bytes_acked = acked;
        t.ingest(&s);
    }
    let r = t.get(1).expect("flow").rates.throughput_bps;
    assert!((r - 16_000_000.0).abs() < 1.0, "{r}");
}

#[test]
fn ca_time_accumulates_in_the_state_held() {
    let mut t = FlowTable::new(TableConfig::default());
    t.ingest(&sample(1, 0));
    let mut rec = sample(1, 1000);
    rec.ca_state = CaState::Recovery;
    t.ingest(&rec);
    let mut open = sample(1, 1300);
    open.ca_state = CaState::Open;
    t.ingest(&open);
    t.ingest(&sample(1, 1500));
    let f = t.get(1).expect("flow");
    assert_eq!(f.ca_time_ns[CaState::Open.index()], 1_200_000_000);
    assert_eq!(f.ca_time_ns[CaState::Recovery.index()], 300_000_000);
}

#[test]
fn closed_flows_linger_then_age_out_and_idle_flows_time_out() {
    let cfg = TableConfig { closed_linger_ns: 5 * NS_PER_SEC, idle_timeout_ns: 60 * NS_PER_SEC, ..Default::default() };
    let mut t = FlowTable::new(cfg);
    t.ingest(&sample(1, 0));
    t.ingest(&sample(2, 0));
    let mut close = sample(1, 1000);
    close.reason = SampleReason::Destroy;
    assert_eq!(t.ingest(&close), Ingested::Closed);
    assert!(t.get(1).expect("still visible").is_closed());
    assert_eq!(t.expire(5_999 * 1_000_000), 0);
    assert_eq!(t.expire(6_000 * 1_000_000), 1);
    assert!(t.get(1).is_none());
    assert_eq!(t.expire(60_000 * 1_000_000), 1);
    assert!(t.is_empty());
}

#[test]
fn memory_stays_bounded_under_churn() {
    let cfg = TableConfig { max_flows: 100, history_len: 10, ..Default::default() };
    let mut t = FlowTable::new(cfg);
    for cookie in 0..10_000u64 {
        t.ingest(&sample(cookie, cookie));
    }
    assert_eq!(t.len(), 100);
    assert_eq!(t.evicted(), 9_900);
    // One long-lived flow: history stays at its bound.
    for i in 0..1000u64 {
        t.ingest(&sample(1_000_000, 10_000 + i * 1000));
    }
    assert_eq!(t.get(1_000_000).expect("flow").history().len(), 10);
}

#[test]
fn a_full_table_evicts_the_least_recently_updated_flows() {
    let cfg = TableConfig { max_flows: 5, ..Default::default() };
    let mut t = FlowTable::new(cfg);
    for cookie in 1..=5u64 {
        t.ingest(&sample(cookie, cookie * 10));
    }
    // Flow 1 is the oldest by creation but updated last: it must survive.
    t.ingest(&sample(1, 100));
    // Three new flows push out the three least recently updated: 2, 3 and 4.
    for cookie in 6..=8u64 {
        assert_eq!(t.ingest(&sample(cookie, 100 + cookie)), Ingested::NewFlow);
    }
    assert_eq!(t.len(), 5);
    assert_eq!(t.evicted(), 3);
    let mut left: Vec<u64> = t.flows().map(Flow::cookie).collect();
    left.sort_unstable();
    assert_eq!(left, vec![1, 5, 6, 7, 8]);
    // A closed flow goes before any open one, however recent.
    let mut close = sample(8, 200);
    close.reason = SampleReason::Destroy;
    t.ingest(&close);
    t.ingest(&sample(9, 300));
    assert!(t.get(8).is_none(), "the closed flow was evicted first");
    assert!(t.get(5).is_some());
    assert_eq!((t.len(), t.evicted()), (5, 4));
    // The index stays in step with the table through expiry, too.
    assert_eq!(t.expire(300 * 1_000_000 + 300 * NS_PER_SEC), 5);
    assert!(t.is_empty() && t.eviction_order.is_empty());
}

#[test]
fn eviction_order_stays_in_step_with_the_table_under_churn() {
    let mut t = FlowTable::new(TableConfig { max_flows: 64, ..Default::default() });
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut evictions = 0;
    for ts in 1..20_000u64 {
        // A cheap deterministic shuffle of cookies, updates, closes and expiry.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut s = sample(x % 200, ts);
        if x.is_multiple_of(11) {
            s.reason = SampleReason::Destroy;
        }
        // A new flow in a full table pushes out the first of all flows in the order,
        // found here by looking at every one.
        let victim = (t.get(s.cookie).is_none() && t.len() == 64)
            .then(|| t.flows().map(Flow::eviction_key).min().expect("a full table").2);
        t.ingest(&s);
        if let Some(victim) = victim {
            assert!(t.get(victim).is_none(), "flow {victim} evicted at {ts}");
            evictions += 1;
        }
        if ts.is_multiple_of(1000) {
            t.expire(ts * 1_000_000 + 20 * NS_PER_SEC);
        }
        assert!(t.len() <= 64);
        // The index holds each flow once, where it stood at some sample, never after now.
        if ts.is_multiple_of(97) {
            let indexed: BTreeSet<EvictionKey> = t.flows().map(|f| f.indexed).collect();
            assert_eq!(indexed, t.eviction_order);
            assert!(t.flows().all(|f| f.indexed <= f.eviction_key()));
        }
    }
    assert!(evictions > 1_000, "{evictions} evictions");
}

/// The ranking index holds what a scan of the table would rank (the open flows and the charted
/// closed ones, at their throughput now), the fastest `charted_flows` of them are charted, and
/// every charted flow is among twice as many.
fn assert_ranked_as_a_scan_would(t: &FlowTable) {
    let scan: BTreeSet<(u64, u64)> = t
        .flows()
        .filter(|f| !f.is_closed() || t.charted.contains(&f.cookie()))
        .map(|f| (f.rank_bits(), f.cookie()))
        .collect();
    assert_eq!(scan, t.by_rate, "the ranking index is the table's");
    let k = t.config().charted_flows;
    let fastest = |n: usize| scan.iter().rev().take(n).map(|r| r.1).collect::<HashSet<u64>>();
    assert!(fastest(k).is_subset(&t.charted), "the fastest {k} are charted");
    assert!(t.charted.is_subset(&fastest(2 * k)), "the charted are among the fastest {}", 2 * k);
}

/// What a full scan of the table would expire at `now_ns`, the rule `expire` had before it
/// took the flows from the front of its index.
fn expired_by_scan(t: &FlowTable, now_ns: u64) -> BTreeSet<u64> {
    let cfg = t.config();
    t.flows()
        .filter(|f| match f.closed_at_ns {
            Some(closed) => now_ns.saturating_sub(closed) >= cfg.closed_linger_ns,
            None => now_ns.saturating_sub(f.last_seen_ns) >= cfg.idle_timeout_ns,
        })
        .map(Flow::cookie)
        .collect()
}

#[test]
fn expiry_drops_exactly_what_a_full_scan_would_and_reports_it() {
    let cfg = TableConfig {
        max_flows: 700,
        closed_linger_ns: 3 * NS_PER_SEC,
        idle_timeout_ns: 7 * NS_PER_SEC,
        history_len: 20,
        short_history_len: 5,
        charted_flows: 40,
        ..Default::default()
    };
    let mut t = FlowTable::new(cfg);
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut born = BTreeSet::new();
    let mut removed = BTreeSet::new();
    let mut expired_total = 0;
    for ms in (0..120_000u64).step_by(5) {
        let r = next();
        // Samples up to 40 ms late (several CPUs), some after their flow closed; cookies
        // come back after being dropped. Many flows at first (the table fills and evicts),
        // then few (the rest go idle and expire, closed ones linger and expire).
        let cookies = if ms < 60_000 { 2_000 } else { 400 };
        let mut s = sample(r % cookies, (ms + 40).saturating_sub(r % 41));
        // Flows of a few speeds, ranked for full history among many of the same.
        s.bytes_acked = ms * 1_000 * (s.cookie % 7);
        if r % 13 == 0 {
            s.reason = SampleReason::Destroy;
        }
        let was_there = t.get(s.cookie).is_some();
        t.ingest(&s);
        if !was_there {
            born.insert(s.cookie);
        }
        if ms % 1_000 == 0 {
            let now = ms * 1_000_000;
            let before = t.take_changes();
            assert_eq!(before.born.iter().copied().collect::<BTreeSet<_>>(), born, "every flow that appeared");
            removed.extend(before.removed);
            let expected = expired_by_scan(&t, now);
            assert_eq!(t.expire(now), expected.len());
            let changes = t.take_changes();
            assert!(changes.born.is_empty(), "born flows were taken just before");
            assert_eq!(changes.removed.iter().copied().collect::<BTreeSet<_>>(), expected, "at {ms} ms");
            assert!(expired_by_scan(&t, now).is_empty());
            expired_total += expected.len();
            // The index holds each flow once, where it stood at some sample, never after now.
            let indexed: BTreeSet<EvictionKey> = t.flows().map(|f| f.indexed).collect();
            assert_eq!(indexed, t.eviction_order, "the index stays the table's");
            assert!(t.flows().all(|f| f.indexed <= f.eviction_key()));
            let long = t.config().history_len;
            let charted: HashSet<u64> = t.flows().filter(|f| f.history_cap() == long).map(Flow::cookie).collect();
            assert_eq!(charted, t.charted, "the charted set is the flows with the full history");
            assert_ranked_as_a_scan_would(&t);
            born.clear();
        }
    }
    assert!(expired_total > 1_000 && t.evicted() > 1_000, "expired {expired_total}, evicted {}", t.evicted());
    assert!(!removed.is_empty());
}

#[test]
fn changes_say_which_flows_came_went_and_got_samples_and_are_dropped_when_nobody_takes_them() {
    let mut t = FlowTable::new(TableConfig { max_flows: 2, ..Default::default() });
    t.ingest(&sample(1, 0));
    t.ingest(&sample(2, 1));
    t.ingest(&sample(1, 2));
    t.ingest(&sample(1, 3));
    t.ingest(&sample(3, 4));
    // Flow 1's later samples are not news: it was born in this set of changes.
    assert_eq!(t.take_changes(), TableChanges { born: vec![1, 2, 3], removed: vec![2], updated: vec![] });
    t.ingest(&sample(3, 5));
    t.ingest(&sample(1, 6));
    t.ingest(&sample(3, 7));
    assert_eq!(t.take_changes().updated, vec![3, 1], "each once, in order of their first sample");
    t.ingest(&sample(3, 8));
    t.ingest(&sample(4, 9));
    t.expire(5_000_000);
    t.expire(6_000_000);
    assert_eq!(t.take_changes(), TableChanges::default(), "not taken by the next expire: dropped");
    let open: Vec<u64> = t.open_flows().map(Flow::cookie).collect();
    assert_eq!(open, vec![3, 4], "least recently updated first");
    t.ingest(&sample(4, 7_000_000));
    t.ingest(&sample(3, 7_000_001));
    assert_eq!(t.take_changes().updated, vec![4, 3], "listed anew after the dropped changes");
}

/// A flow at `bps` for `secs` seconds (one sample every 100 ms), starting at `from_s`.
fn run_flow(t: &mut FlowTable, cookie: u64, bps: u64, from_s: u64, secs: u64) {
    for tick in from_s * 10..=(from_s + secs) * 10 {
        let mut s = sample(cookie, tick * 100);
        s.bytes_acked = bps / 8 * tick / 10;
        t.ingest(&s);
    }
}

#[test]
fn only_the_busiest_flows_keep_the_full_history() {
    let cfg = TableConfig { history_len: 20, short_history_len: 5, charted_flows: 2, ..Default::default() };
    let mut t = FlowTable::new(cfg);
    // Throughputs 1..=6 Mbit/s for flows 1..=6.
    for cookie in 1..=6u64 {
        run_flow(&mut t, cookie, cookie * 1_000_000, 0, 30);
    }
    for cookie in 1..=6u64 {
        assert_eq!(t.get(cookie).expect("flow").history().len(), 5, "short until ranked");
    }
    t.expire(30 * NS_PER_SEC);
    let caps = |t: &FlowTable| (1..=6u64).map(|c| t.get(c).expect("flow").history_cap()).collect::<Vec<_>>();
    assert_eq!(caps(&t), vec![5, 5, 5, 5, 20, 20]);
    for cookie in 31..=50u64 {
        // Charted flows grow to the full length; the rest stay short.
        run_flow(&mut t, 6, 6_000_000, cookie, 0);
        run_flow(&mut t, 1, 1_000_000, cookie, 0);
    }
    assert_eq!(t.get(6).expect("flow").history().len(), 20);
    assert_eq!(t.get(1).expect("flow").history().len(), 5);
    // Flow 6 slows to rank 3: still among twice as many, so it keeps its history.
    run_flow(&mut t, 6, 6_000_000, 51, 0);
    let mut slow = sample(6, 52_000);
    slow.bytes_acked = t.get(6).expect("flow").latest.bytes_acked + 3_500_000 / 8;
    t.ingest(&slow);
    t.expire(52 * NS_PER_SEC);
    assert_eq!(t.get(6).expect("flow").history_cap(), 20);
    // Down to rank 6: out, and its memory trimmed.
    let mut stopped = sample(6, 53_000);
    stopped.bytes_acked = slow.bytes_acked;
    t.ingest(&stopped);
    t.expire(53 * NS_PER_SEC);
    let f = t.get(6).expect("flow");
    assert_eq!((f.history_cap(), f.history().len()), (5, 5));
    assert!(f.history.done.capacity() <= 4, "{}", f.history.done.capacity());
    // The flow a front end shows keeps the full length whatever its rank.
    t.keep_history(Some(1));
    assert_eq!(t.get(1).expect("flow").history_cap(), 20);
    t.expire(54 * NS_PER_SEC);
    assert_eq!(t.get(1).expect("flow").history_cap(), 20);
    t.keep_history(None);
    assert_eq!(t.get(1).expect("flow").history_cap(), 5);
}

#[test]
fn a_closed_flow_is_not_ranked_into_a_full_history_but_a_charted_one_can_lose_it() {
    let cfg = TableConfig { history_len: 20, short_history_len: 5, charted_flows: 1, ..Default::default() };
    let mut t = FlowTable::new(cfg);
    run_flow(&mut t, 1, 1_000_000, 0, 3);
    run_flow(&mut t, 2, 9_000_000, 0, 3);
    let mut close = sample(2, 3_100);
    close.bytes_acked = t.get(2).expect("flow").latest.bytes_acked;
    close.reason = SampleReason::Destroy;
    t.ingest(&close);
    t.expire(4 * NS_PER_SEC);
    // The faster flow closed before it was ranked: its history no longer grows.
    assert_eq!((t.get(1).expect("flow").history_cap(), t.get(2).expect("flow").history_cap()), (20, 5));
    // A charted flow that closes keeps its rank among the open ones, and loses it to faster ones.
    run_flow(&mut t, 3, 2_000_000, 4, 3);
    let mut close = sample(1, 7_050);
    close.bytes_acked = t.get(1).expect("flow").latest.bytes_acked;
    close.reason = SampleReason::Destroy;
    t.ingest(&close);
    t.expire(8 * NS_PER_SEC);
    let caps: Vec<usize> = (1..=3u64).map(|c| t.get(c).expect("flow").history_cap()).collect();
    assert_eq!(caps, vec![20, 5, 20], "flow 1 stays among twice as many, flow 3 enters");
    run_flow(&mut t, 4, 3_000_000, 8, 3);
    t.expire(12 * NS_PER_SEC);
    let caps: Vec<usize> = (1..=4u64).map(|c| t.get(c).expect("flow").history_cap()).collect();
    assert_eq!(caps, vec![5, 5, 20, 20], "flow 1 dropped out of the top two: trimmed");
}

#[test]
fn with_no_charted_flows_every_flow_stays_short() {
    let cfg = TableConfig { history_len: 20, short_history_len: 5, charted_flows: 0, ..Default::default() };
    let mut t = FlowTable::new(cfg);
    run_flow(&mut t, 1, 1_000_000, 0, 30);
    t.expire(30 * NS_PER_SEC);
    assert_eq!(t.get(1).expect("flow").history_cap(), 5);
}

#[test]
fn history_allocates_nothing_in_the_first_bucket_and_never_past_its_cap() {
    let mut t = FlowTable::new(TableConfig { history_len: 300, charted_flows: 10, ..Default::default() });
    for i in 0..10u64 {
        t.ingest(&sample(1, i * 100));
    }
    let f = t.get(1).expect("flow");
    assert_eq!(f.history().len(), 1);
    assert_eq!(f.history.done.capacity(), 0, "one bucket: held inline");
    t.expire(1_000_000_000);
    for i in 10..4_000u64 {
        t.ingest(&sample(1, i * 100));
    }
    let f = t.get(1).expect("flow");
    assert_eq!(f.history().len(), 300);
    assert_eq!(f.history.done.capacity(), 299, "grown to the cap, not to a power of two");
    let ts: Vec<u64> = f.history().map(|h| h.ts_ns).collect();
    assert!(ts.windows(2).all(|w| w[1] == w[0] + NS_PER_SEC), "oldest to newest, one per second");
    assert_eq!(f.history().next_back().map(|h| h.ts_ns), ts.last().copied());
}

#[test]
fn history_buckets_hold_per_second_values() {
    let mut t = FlowTable::new(TableConfig::default());
    for i in 0..=30u64 {
        let mut s = sample(1, i * 100);
        s.bytes_acked = i * 100_000; // 8 Mbit/s
        s.total_retrans = (i / 10) as u32;
        s.snd_cwnd = 10 + i as u32;
        if i == 15 {
            s.ca_state = CaState::Recovery;
        }
        t.ingest(&s);
    }
    let f = t.get(1).expect("flow");
    let h: Vec<_> = f.history().collect();
    assert_eq!(h.len(), 4);
    assert!((h[1].throughput_bps - 8_000_000.0).abs() < 1.0, "{:?}", h[1]);
    assert_eq!(h[1].retrans, 1);
    assert_eq!(h[1].worst_ca_state, CaState::Recovery);
    assert_eq!(h[1].ca_state, CaState::Open);
    assert_eq!(h[2].cwnd, 39);
}

#[test]
fn a_sample_taken_in_place_is_the_next_one_with_the_identity_it_lacks() {
    let mut prev = sample(1, 0);
    prev.owner = Some(Owner { pid: 7, comm: "iperf3".into() });
    /// What the next sample changes, and whether that is a change of text.
    type Case = (&'static str, fn(&mut Sample), bool);
    let cases: [Case; 5] = [
        ("numbers only", |s| s.snd_cwnd += 5, false),
        (
            "unhashed, owner unknown",
            |s| {
                s.local.set_port(0);
                s.remote.set_port(0);
                s.owner = None;
            },
            false,
        ),
        ("new cc", |s| s.cc = "bbr".into(), true),
        ("new owner", |s| s.owner = Some(Owner { pid: 8, comm: "curl".into() }), true),
        ("same owner again", |s| s.owner = Some(Owner { pid: 7, comm: "iperf3".into() }), false),
    ];
    for (what, change, text_changed) in cases {
        let mut next = sample(1, 100);
        next.owner.clone_from(&prev.owner);
        change(&mut next);
        let mut want = next.clone();
        want.carry_identity_from(&prev);
        let mut latest = prev.clone();
        assert_eq!(latest.follow(&next), text_changed, "{what}");
        assert_eq!(latest, want, "{what}");
    }
}

#[test]
fn the_text_generation_moves_when_cc_or_owner_change_and_never_comes_back() {
    let mut t = FlowTable::new(TableConfig::default());
    t.ingest(&sample(1, 0));
    t.ingest(&sample(2, 0));
    let generation = |t: &FlowTable, c: u64| t.get(c).expect("flow").text_generation;
    let (one, two) = (generation(&t, 1), generation(&t, 2));
    assert_ne!(one, two);
    let mut s = sample(1, 100);
    t.ingest(&s);
    assert_eq!(generation(&t, 1), one, "numbers changed, not the text");
    s.ts_ns += 1;
    s.cc = "bbr".into();
    t.ingest(&s);
    let switched = generation(&t, 1);
    assert!(switched > one.max(two));
    s.ts_ns += 1;
    s.owner = Some(Owner { pid: 9, comm: "curl".into() });
    t.ingest(&s);
    assert!(generation(&t, 1) > switched);
    // Emptied (a replay going back), the numbering goes on.
    let last = generation(&t, 1);
    let mut t = t.emptied();
    assert!(t.is_empty());
    t.ingest(&sample(1, 0));
    assert!(generation(&t, 1) > last);
}

#[test]
fn identity_survives_unhashing_at_close() {
    let mut t = FlowTable::new(TableConfig::default());
    t.ingest(&sample(1, 0));
    let mut close = sample(1, 10);
    close.reason = SampleReason::Destroy;
    close.local.set_port(0);
    t.ingest(&close);
    assert_eq!(t.get(1).expect("flow").latest.local.port(), 40000);
}

/// A bulk sender at cwnd ~`cwnd` on a 30 ms path losing once at each tick in `losses`;
/// `queue_ms(tick)` adds queueing to srtt.
fn lossy_feed(t: &mut FlowTable, losses: &[u64], queue_ms: impl Fn(u64) -> u32) {
    let mut retrans = 0;
    for tick in 0..=100u64 {
        let mut s = sample(1, tick * 100);
        s.bytes_sent = 200_000 + tick * 250_000;
        s.bytes_acked = s.bytes_sent;
        s.snd_cwnd = 40 + (tick % 10) as u32;
        s.snd_ssthresh = if tick < 10 { TCP_INFINITE_SSTHRESH } else { 30 };
        s.srtt_us = 30_000 + queue_ms(tick) * 1000;
        s.delivery_rate_bps = 20_000_000;
        t.ingest(&s);
        if losses.contains(&tick) {
            // Detection (CA state change), then a burst of retransmissions in Recovery.
            for (i, reason) in
                [SampleReason::CaState, SampleReason::Retransmit, SampleReason::Retransmit].into_iter().enumerate()
            {
                let mut l = s.clone();
                l.ts_ns += 1_000_000 * (i as u64 + 1);
                l.reason = reason;
                l.ca_state = CaState::Recovery;
                retrans += u32::from(i > 0);
                l.total_retrans = retrans;
                t.ingest(&l);
            }
            let mut open = s.clone();
            open.ts_ns += 40_000_000;
            open.reason = SampleReason::CaState;
            open.total_retrans = retrans;
            t.ingest(&open);
        }
    }
}

#[test]
fn one_episode_per_recovery_with_the_moments_before() {
    let mut t = FlowTable::new(TableConfig::default());
    lossy_feed(&mut t, &[5, 30, 60], |tick| if tick == 60 { 8 } else { 0 });
    let f = t.get(1).expect("flow");
    let eps: Vec<_> = f.loss_episodes().copied().collect();
    assert_eq!(eps.len(), 3, "{eps:?}");
    assert!(eps[0].slow_start, "the first loss ends slow start");
    assert!(!eps[1].slow_start && !eps[2].slow_start);
    assert_eq!(eps[1].queue_us(), 0);
    assert_eq!(eps[2].queue_us(), 8_000);
    assert_eq!(eps[1].srtt_before_us, 30_000);
    assert_eq!(eps[1].cwnd_before, 49);
    assert_eq!(eps[1].delivery_before_bps, 20_000_000);
    assert_eq!(f.loss.as_ref().expect("tracked").best_clean_bps, [20_000_000; 3]);
}

/// A bulk sender on a 240 ms path whose slow start ends at 1 s, losing once at each tick in
/// `losses`, with `queue_ms(tick)` of queue in srtt.
fn long_path_feed(losses: &[u64], queue_ms: impl Fn(u64) -> u32) -> Vec<bool> {
    long_path_feed_recovering(losses, queue_ms, 0)
}

/// [`long_path_feed`] with srtt `recovery_ms` higher in the samples of each recovery.
fn long_path_feed_recovering(losses: &[u64], queue_ms: impl Fn(u64) -> u32, recovery_ms: u32) -> Vec<bool> {
    let mut t = FlowTable::new(TableConfig::default());
    for tick in 0..=60u64 {
        let mut s = sample(1, tick * 100);
        s.bytes_sent = 200_000 + tick * 250_000;
        s.snd_ssthresh = if tick < 10 { TCP_INFINITE_SSTHRESH } else { 600 };
        (s.min_rtt_us, s.srtt_us) = (240_000, 240_000 + queue_ms(tick) * 1000);
        t.ingest(&s);
        if losses.contains(&tick) {
            let mut l = s.clone();
            (l.ts_ns, l.reason, l.ca_state, l.total_retrans) =
                (l.ts_ns + 1_000_000, SampleReason::CaState, CaState::Recovery, tick as u32);
            l.srtt_us += recovery_ms * 1000;
            t.ingest(&l);
            (l.ts_ns, l.ca_state, l.srtt_us) = (l.ts_ns + 40_000_000, CaState::Open, s.srtt_us);
            t.ingest(&l);
        }
    }
    t.get(1).expect("flow").loss_episodes().map(|e| e.slow_start).collect()
}

#[test]
fn losses_before_slow_starts_overshoot_drained_are_the_overshoots() {
    // Slow start overshoots into 60 ms of queue, which drains by 2.5 s: a loss at 1.8 s is still
    // the overshoot's (past the half second the episodes' lookback sees), one at 4 s is judged
    // on its own.
    assert_eq!(
        long_path_feed(&[10, 18, 40], |tick| if (10..25).contains(&tick) { 60 } else { 0 }),
        [true, true, false]
    );
    // Without a queue after slow start, its aftermath ends a min_rtt on.
    assert_eq!(long_path_feed(&[10, 18, 40], |_| 0), [true, false, false]);
    assert_eq!(long_path_feed(&[10, 12, 40], |_| 0), [true, true, false]);
    // The queue gone for a sample, then refilled by the first flight after the cut (measured
    // at 240 ms): losses to it are still the overshoot's.
    let refilled = |tick| if (10..14).contains(&tick) || (15..20).contains(&tick) { 60 } else { 0 };
    assert_eq!(long_path_feed(&[10, 17, 40], refilled), [true, true, false]);
    // srtt moving within a recovery (on the few segments acknowledged while holes are
    // repaired) neither keeps the aftermath going nor ends it.
    assert_eq!(long_path_feed_recovering(&[10, 12, 14], |_| 0, 49), [true, true, false]);
    // A queue that never drains (one the standing-queue test names) ends it after 16 min_rtts.
    assert_eq!(long_path_feed(&[10, 18, 50], |tick| if tick >= 10 { 60 } else { 0 }), [true, true, false]);
}

#[test]
fn a_loss_while_the_peer_leaves_data_unread_is_marked() {
    let mut t = FlowTable::new(TableConfig::default());
    let mut s = sample(1, 0);
    (s.bytes_sent, s.snd_wnd, s.mss) = (100_000, 1_000_000, 1448);
    t.ingest(&s);
    for tick in 1..=10u64 {
        s.ts_ns = tick * 100_000_000;
        s.bytes_sent += 100_000;
        s.snd_wnd -= 30_000;
        t.ingest(&s);
    }
    let mut l = s.clone();
    (l.ts_ns, l.reason, l.ca_state, l.total_retrans) =
        (l.ts_ns + 1_000_000, SampleReason::CaState, CaState::Recovery, 1);
    t.ingest(&l);
    let f = t.get(1).expect("flow");
    assert!(f.loss_episodes().next().is_some_and(|e| e.receiver_held));
    // Ten samples, the first counting as read (nothing to compare with), the rest not.
    assert_eq!((f.counts.samples, f.counts.peer_reading), (11, 1));
}

#[test]
fn episodes_are_bounded_and_small_flows_allocate_nothing() {
    let mut t = FlowTable::new(TableConfig::default());
    lossy_feed(&mut t, &(0..100).step_by(3).collect::<Vec<_>>(), |_| 0);
    assert_eq!(t.get(1).expect("flow").loss_episodes().count(), MAX_EPISODES);
    // A flow that sent little: no loss memory at all.
    let mut small = sample(2, 0);
    t.ingest(&small);
    small.ts_ns += 100_000_000;
    small.bytes_sent = 10_000;
    small.total_retrans = 1;
    t.ingest(&small);
    assert!(t.get(2).expect("flow").loss.is_none());
}

#[test]
fn out_of_order_samples_are_ignored() {
    let mut t = FlowTable::new(TableConfig::default());
    let mut a = sample(1, 1000);
    a.snd_cwnd = 50;
    t.ingest(&a);
    let mut old = sample(1, 900);
    old.snd_cwnd = 5;
    t.ingest(&old);
    assert_eq!(t.get(1).expect("flow").latest.snd_cwnd, 50);
}
