//! The flow table: every TCP flow seen, its latest sample, derived rates, time per CA state and
//! a bounded history for charts. Pure code: no aya, no terminal, no clock of its own (times come
//! from the samples and from the caller), so it runs the same on live data, recordings and tests.
//!
//! Memory is bounded by design: at most `max_flows` flows, each with a short chart history
//! (`short_history_len` compact points, allocated only once a flow reaches its second bucket);
//! only the `charted_flows` busiest flows (and the one a front end asks to keep) hold the full
//! `history_len`. A full table evicts the least recently updated flow through an ordered index,
//! in O(log n), not by scanning; the index is brought up to date when a flow is about to be
//! evicted, not on every sample.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use crate::analysis::event::{CaState, Sample, SampleReason};

use tracer_common::{NS_PER_SEC, TCP_INFINITE_SSTHRESH};

#[derive(Clone, Debug)]
pub struct TableConfig {
    /// Window over which throughput and retransmission rates are computed.
    pub rate_window_ns: u64,
    /// Width of one history bucket (one chart point).
    pub history_step_ns: u64,
    /// History buckets kept for the flows worth charting (see `charted_flows`).
    pub history_len: usize,
    /// History buckets kept for every other flow.
    pub short_history_len: usize,
    /// How many flows keep the full `history_len`: the busiest by throughput. A charted flow
    /// stays charted while it is among twice as many, so flows near the cut do not flap.
    pub charted_flows: usize,
    /// How long a closed flow stays visible.
    pub closed_linger_ns: u64,
    /// A flow with no sample for this long is dropped (it may still exist, but is idle).
    pub idle_timeout_ns: u64,
    /// Hard bound on flows kept; the least recently updated are evicted first.
    pub max_flows: usize,
    /// What counts as queueing in a sample (srtt above min_rtt by more than
    /// `min_rtt * queue_ratio + queue_slack_us`). The diagnosis judges loss episodes with the
    /// same rule; [`crate::analysis::Analysis`] copies it from [`DiagnosisConfig`] so there is
    /// one source of truth.
    ///
    /// [`DiagnosisConfig`]: crate::analysis::diagnosis::DiagnosisConfig
    pub queue_ratio: f64,
    pub queue_slack_us: f64,
}

impl Default for TableConfig {
    fn default() -> Self {
        Self {
            rate_window_ns: NS_PER_SEC,
            history_step_ns: NS_PER_SEC,
            history_len: 300,
            short_history_len: 30,
            charted_flows: 1_000,
            closed_linger_ns: 30 * NS_PER_SEC,
            idle_timeout_ns: 300 * NS_PER_SEC,
            max_flows: 50_000,
            queue_ratio: DEFAULT_QUEUE_RATIO,
            queue_slack_us: DEFAULT_QUEUE_SLACK_US,
        }
    }
}

/// Default of [`TableConfig::queue_ratio`] and the diagnosis' episode threshold: see
/// `DiagnosisConfig::queue_ratio` for why.
pub const DEFAULT_QUEUE_RATIO: f64 = 0.1;
pub const DEFAULT_QUEUE_SLACK_US: f64 = 2_000.0;

/// Queueing threshold in microseconds for a path of `min_rtt_us`.
pub fn queue_threshold_us(min_rtt_us: u32, ratio: f64, slack_us: f64) -> f64 {
    f64::from(min_rtt_us) * ratio + slack_us
}

/// Flows start tracking loss episodes once they sent this much: smaller flows are never heavy,
/// and most of a busy host's flows stay below it, so they allocate nothing.
const TRACK_MIN_BYTES: u64 = 64 * 1024;
/// Loss episodes kept per flow.
pub const MAX_EPISODES: usize = 16;
/// Periodic samples kept to describe the moments before a loss.
const RING_LEN: usize = 8;
/// How far before a loss the "before" figures look.
pub const LOSS_LOOKBACK_NS: u64 = 500_000_000;

/// The start of one loss episode (a recovery: entering Recovery/Loss, or a retransmission
/// outside one), counted once however many segments it retransmits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossEpisode {
    pub ts_ns: u64,
    /// srtt when the loss was detected. The kernel updates srtt on every ACK (gain 1/8), so
    /// this is the RTT of the segments sent just before the drop: on a drop-tail bottleneck it
    /// includes the full queue (the queue drops exactly when full), on a random loss it does
    /// not. A median over the preceding half second smooths a shallow queue away (it fills in
    /// the last RTTs only: measured 2-6 ms against 6-12 ms at the loss on a quarter-BDP queue).
    pub srtt_at_us: u32,
    /// Median srtt of the periodic samples in the half second before (0: none).
    pub srtt_before_us: u32,
    pub min_rtt_us: u32,
    /// Largest cwnd in the half second before the cut, and at detection.
    pub cwnd_before: u32,
    /// Largest delivery rate in the half second before (not application-limited), bits/s.
    pub delivery_before_bps: u64,
    /// Counters at the episode's start, for loss rates over the episodes' span.
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    /// The sender was still in or leaving slow start (ssthresh unset in the lookback): an
    /// overshoot of its own making, which says nothing about the path's losses.
    pub slow_start: bool,
}

impl LossEpisode {
    /// Queueing delay when the loss was detected, µs.
    pub fn queue_us(&self) -> u32 {
        self.srtt_at_us.saturating_sub(self.min_rtt_us)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct RingPoint {
    ts_ns: u64,
    srtt_us: u32,
    cwnd: u32,
    delivery_bps: u64,
    app_limited: bool,
    slow_start: bool,
}

/// Per-flow loss memory, allocated once the flow has sent [`TRACK_MIN_BYTES`].
#[derive(Clone, Debug, Default)]
pub struct LossTracker {
    ring: [RingPoint; RING_LEN],
    ring_next: usize,
    ring_len: usize,
    /// The latest loss episodes, oldest first (at most [`MAX_EPISODES`]).
    pub episodes: VecDeque<LossEpisode>,
    in_loss: bool,
    /// The three highest delivery rates seen without queueing and not application-limited,
    /// highest first (bits/s): what the path has shown it can carry for this flow.
    pub best_clean_bps: [u64; 3],
}

impl LossTracker {
    fn update(&mut self, prev: &Sample, s: &Sample, cfg: &TableConfig) {
        let lossy = matches!(s.ca_state, CaState::Recovery | CaState::Loss);
        let retransmitted = s.total_retrans > prev.total_retrans;
        if !self.in_loss && (lossy || retransmitted) {
            self.record_episode(prev, s);
        }
        // One episode per recovery: it ends when the sender is back in Open (or Disorder/CWR).
        self.in_loss = lossy;
        let queue_thr = queue_threshold_us(s.min_rtt_us, cfg.queue_ratio, cfg.queue_slack_us);
        let clean = s.srtt_us > 0
            && s.min_rtt_us > 0
            && s.min_rtt_us != u32::MAX
            && f64::from(s.srtt_us.saturating_sub(s.min_rtt_us)) <= queue_thr;
        if clean && !s.app_limited && s.delivery_rate_bps > 0 && s.delivery_rate_bps != u64::MAX {
            let best = &mut self.best_clean_bps;
            if s.delivery_rate_bps > best[2] {
                best[2] = s.delivery_rate_bps;
                best.sort_unstable_by(|a, b| b.cmp(a));
            }
        }
        if s.reason == SampleReason::Periodic {
            self.ring[self.ring_next] = RingPoint {
                ts_ns: s.ts_ns,
                srtt_us: s.srtt_us,
                cwnd: s.snd_cwnd,
                delivery_bps: s.delivery_rate_bps,
                app_limited: s.app_limited,
                slow_start: s.snd_ssthresh >= TCP_INFINITE_SSTHRESH,
            };
            self.ring_next = (self.ring_next + 1) % RING_LEN;
            self.ring_len = (self.ring_len + 1).min(RING_LEN);
        }
    }

    fn record_episode(&mut self, prev: &Sample, s: &Sample) {
        let since = s.ts_ns.saturating_sub(LOSS_LOOKBACK_NS);
        let before: Vec<&RingPoint> = self.ring.iter().take(self.ring_len).filter(|p| p.ts_ns >= since).collect();
        let mut srtts: Vec<u32> = before.iter().map(|p| p.srtt_us).collect();
        srtts.sort_unstable();
        let cwnd_before = before.iter().map(|p| p.cwnd).max().unwrap_or(0).max(prev.snd_cwnd).max(s.snd_cwnd);
        let delivery_before_bps = before
            .iter()
            .filter(|p| !p.app_limited && p.delivery_bps != u64::MAX)
            .map(|p| p.delivery_bps)
            .max()
            .unwrap_or(0);
        let slow_start = prev.snd_ssthresh >= TCP_INFINITE_SSTHRESH || before.iter().any(|p| p.slow_start);
        if self.episodes.len() >= MAX_EPISODES {
            self.episodes.pop_front();
        }
        self.episodes.push_back(LossEpisode {
            ts_ns: s.ts_ns,
            srtt_at_us: s.srtt_us,
            srtt_before_us: srtts.get(srtts.len() / 2).copied().unwrap_or(0),
            min_rtt_us: s.min_rtt_us,
            cwnd_before,
            delivery_before_bps,
            bytes_sent: s.bytes_sent,
            bytes_retrans: s.bytes_retrans,
            slow_start,
        });
    }
}

/// Counters at one instant, kept for the rate window.
#[derive(Clone, Copy, Debug, PartialEq)]
struct RatePoint {
    ts_ns: u64,
    bytes_acked: u64,
    bytes_received: u64,
    bytes_sent: u64,
    bytes_retrans: u64,
    total_retrans: u32,
}

impl RatePoint {
    fn of(s: &Sample) -> Self {
        Self {
            ts_ns: s.ts_ns,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_received,
            bytes_sent: s.bytes_sent,
            bytes_retrans: s.bytes_retrans,
            total_retrans: s.total_retrans,
        }
    }
}

/// Rates derived from two counter snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Payload the peer acknowledged plus payload received, bits/s: what the flow delivered.
    pub throughput_bps: f64,
    /// Everything put on the wire, retransmissions included, bits/s.
    pub send_rate_bps: f64,
    /// Retransmitted share of bytes sent in the window (0..=1).
    pub retrans_ratio: f64,
    /// Retransmitted segments per second.
    pub retrans_per_sec: f64,
}

fn rates_between(a: &RatePoint, b: &RatePoint) -> Option<Rates> {
    let dt_ns = b.ts_ns.checked_sub(a.ts_ns)?;
    if dt_ns == 0 {
        return None;
    }
    let secs = dt_ns as f64 / NS_PER_SEC as f64;
    let acked = b.bytes_acked.saturating_sub(a.bytes_acked);
    let received = b.bytes_received.saturating_sub(a.bytes_received);
    let sent = b.bytes_sent.saturating_sub(a.bytes_sent);
    let retrans_bytes = b.bytes_retrans.saturating_sub(a.bytes_retrans);
    let retrans_segs = b.total_retrans.saturating_sub(a.total_retrans);
    Some(Rates {
        throughput_bps: (acked + received) as f64 * 8.0 / secs,
        send_rate_bps: sent as f64 * 8.0 / secs,
        retrans_ratio: if sent > 0 { retrans_bytes as f64 / sent as f64 } else { 0.0 },
        retrans_per_sec: f64::from(retrans_segs) / secs,
    })
}

/// One chart point: the state of the flow over one history step. Compact (32 bytes): a chart
/// needs no more precision than f32, and there are many of these.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistoryPoint {
    /// Start of the bucket (monotonic ns, aligned to the step).
    pub ts_ns: u64,
    pub throughput_bps: f32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_us: u32,
    pub min_rtt_us: u32,
    /// Segments retransmitted during the bucket (saturates at 65,535).
    pub retrans: u16,
    /// CA state at the end of the bucket and the worst one seen in it.
    pub ca_state: CaState,
    pub worst_ca_state: CaState,
}

const _: () = assert!(std::mem::size_of::<HistoryPoint>() == 32);

/// A flow's chart points: completed buckets in a ring that grows only as far as the flow's cap,
/// and the bucket still filling held inline, so a flow that never leaves its first bucket
/// allocates nothing.
#[derive(Clone, Debug, Default)]
struct History {
    done: VecDeque<HistoryPoint>,
    current: Option<HistoryPoint>,
    /// Points kept, the current one included.
    cap: usize,
}

impl History {
    fn new(cap: usize) -> Self {
        Self { done: VecDeque::new(), current: None, cap: cap.max(1) }
    }

    /// Close the current bucket and open `next`.
    fn start(&mut self, next: HistoryPoint) {
        if let Some(finished) = self.current.replace(next) {
            let keep = self.cap - 1;
            if keep == 0 {
                return;
            }
            if self.done.len() >= keep {
                self.done.pop_front();
            } else if self.done.len() == self.done.capacity() {
                // Grow by doubling, but never past the cap (VecDeque alone would round 300 up
                // to 512).
                let target = (self.done.capacity() * 2).clamp(4, keep);
                self.done.reserve_exact(target - self.done.len());
            }
            self.done.push_back(finished);
        }
    }

    /// Keep at most `cap` points from now on, dropping the oldest beyond it (and their memory).
    fn set_cap(&mut self, cap: usize) {
        let cap = cap.max(1);
        if cap == self.cap {
            return;
        }
        self.cap = cap;
        let keep = cap - 1;
        if self.done.len() > keep {
            self.done.drain(..self.done.len() - keep);
        }
        if self.done.capacity() > keep {
            self.done.shrink_to(keep);
        }
    }

    fn iter(&self) -> HistoryIter<'_> {
        HistoryIter { done: self.done.iter(), current: self.current.as_ref() }
    }
}

/// Oldest to newest over a flow's history.
pub struct HistoryIter<'a> {
    done: std::collections::vec_deque::Iter<'a, HistoryPoint>,
    current: Option<&'a HistoryPoint>,
}

impl<'a> Iterator for HistoryIter<'a> {
    type Item = &'a HistoryPoint;

    fn next(&mut self) -> Option<Self::Item> {
        self.done.next().or_else(|| self.current.take())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.done.len() + usize::from(self.current.is_some());
        (n, Some(n))
    }
}

impl DoubleEndedIterator for HistoryIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.current.take().or_else(|| self.done.next_back())
    }
}

impl ExactSizeIterator for HistoryIter<'_> {}

/// Running counts over every sample of a flow, for shares over any window (deltas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleCounts {
    pub samples: u64,
    /// Samples where the congestion window was full (packets out >= cwnd, or the kernel's
    /// is_cwnd_limited).
    pub cwnd_full: u64,
    /// Samples where the sender had nothing queued: no unsent bytes and room in cwnd.
    pub no_backlog: u64,
    /// Samples whose delivery rate the kernel marked application-limited (`rate_app_limited`).
    pub app_limited: u64,
    /// Samples with the send buffer under 60 % full: the application is not keeping it
    /// stocked, so it, not the network, sets the pace. (Backlogged senders sit at 70-100 %.)
    pub sndbuf_low: u64,
}

impl SampleCounts {
    fn add(&mut self, s: &Sample) {
        // Event-triggered samples are taken at moments of loss or state change; only the
        // periodic ones are an unbiased view of the flow's time.
        if s.reason != SampleReason::Periodic {
            return;
        }
        let cwnd_full = s.cwnd_limited || (s.snd_cwnd > 0 && s.packets_out >= s.snd_cwnd);
        self.samples += 1;
        self.cwnd_full += u64::from(cwnd_full);
        self.no_backlog += u64::from(!cwnd_full && s.notsent_bytes == 0);
        self.app_limited += u64::from(s.app_limited);
        self.sndbuf_low += u64::from(s.sndbuf > 0 && u64::from(s.wmem_queued) * 10 < u64::from(s.sndbuf) * 6);
    }
}

/// Everything known about one flow.
#[derive(Clone, Debug)]
pub struct Flow {
    /// The first sample's counters (the whole sample is not kept: with 100,000 flows its 300
    /// bytes were an eighth of cctrace's memory).
    first: RatePoint,
    pub latest: Sample,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// Changes (to a number never given before in this table) whenever the latest sample's
    /// text changes, its cc or owner: a copy of them made at one value still holds.
    pub text_generation: u64,
    pub samples: u64,
    /// Set when the kernel reported the socket closed.
    pub closed_at_ns: Option<u64>,
    /// Time spent in each CA state, indexed by `CaState::index()`.
    pub ca_time_ns: [u64; 5],
    pub rates: Rates,
    pub counts: SampleCounts,
    /// Loss episodes and the moments before them; `None` until the flow has sent enough to
    /// matter (see [`TRACK_MIN_BYTES`]).
    pub loss: Option<Box<LossTracker>>,
    window: VecDeque<RatePoint>,
    history: History,
    /// Where the table's eviction index has it: its [`Flow::eviction_key`] as of some earlier
    /// sample, never after its current one (a flow only moves later, except when it closes,
    /// which is indexed at once).
    indexed: EvictionKey,
    /// Counters at the start of the current history bucket.
    bucket_start: RatePoint,
}

impl Flow {
    fn new(sample: &Sample, history_cap: usize, text_generation: u64) -> Self {
        let point = RatePoint::of(sample);
        let mut counts = SampleCounts::default();
        counts.add(sample);
        let mut flow = Self {
            first: point,
            latest: sample.clone(),
            first_seen_ns: sample.ts_ns,
            last_seen_ns: sample.ts_ns,
            text_generation,
            samples: 1,
            closed_at_ns: sample.is_closing().then_some(sample.ts_ns),
            ca_time_ns: [0; 5],
            rates: Rates::default(),
            counts,
            loss: None,
            window: VecDeque::from([point]),
            history: History::new(history_cap),
            indexed: (false, 0, 0),
            bucket_start: point,
        };
        flow.indexed = flow.eviction_key();
        flow
    }

    pub fn cookie(&self) -> u64 {
        self.latest.cookie
    }

    pub fn is_closed(&self) -> bool {
        self.closed_at_ns.is_some()
    }

    /// The flow's recorded loss episodes, oldest first.
    pub fn loss_episodes(&self) -> impl DoubleEndedIterator<Item = &LossEpisode> {
        self.loss.iter().flat_map(|l| l.episodes.iter())
    }

    pub fn history(&self) -> impl ExactSizeIterator<Item = &HistoryPoint> + DoubleEndedIterator {
        self.history.iter()
    }

    /// Chart points this flow keeps (the full length only for flows worth charting).
    pub fn history_cap(&self) -> usize {
        self.history.cap
    }

    /// Seconds the flow has been observed.
    pub fn age_secs(&self) -> f64 {
        self.last_seen_ns.saturating_sub(self.first_seen_ns) as f64 / NS_PER_SEC as f64
    }

    /// Rates over the whole observed life of the flow.
    pub fn lifetime_rates(&self) -> Rates {
        rates_between(&self.first, &RatePoint::of(&self.latest)).unwrap_or_default()
    }

    /// Take in a newer sample; returns whether the latest sample's text changed.
    fn update(&mut self, sample: &Sample, cfg: &TableConfig) -> bool {
        // Samples of one flow can arrive out of order across CPUs; an older one adds nothing.
        if sample.ts_ns < self.latest.ts_ns {
            return false;
        }
        let dt = sample.ts_ns - self.latest.ts_ns;
        self.ca_time_ns[self.latest.ca_state.index()] += dt;
        self.samples += 1;
        self.counts.add(sample);
        self.last_seen_ns = sample.ts_ns;
        if sample.is_closing() && self.closed_at_ns.is_none() {
            self.closed_at_ns = Some(sample.ts_ns);
        }

        let point = RatePoint::of(sample);
        self.window.push_back(point);
        // Keep one point at or before the window start so the window is always fully covered.
        while self.window.len() > 2 && sample.ts_ns - self.window[1].ts_ns >= cfg.rate_window_ns {
            self.window.pop_front();
        }
        if let (Some(first), Some(last)) = (self.window.front(), self.window.back()) {
            if let Some(r) = rates_between(first, last) {
                self.rates = r;
            }
        }
        self.record_history(sample, point, cfg);
        if self.loss.is_none() && sample.bytes_sent >= TRACK_MIN_BYTES {
            self.loss = Some(Box::default());
        }
        if let Some(loss) = self.loss.as_mut() {
            loss.update(&self.latest, sample, cfg);
        }
        self.latest.follow(sample)
    }

    fn record_history(&mut self, sample: &Sample, point: RatePoint, cfg: &TableConfig) {
        let step = cfg.history_step_ns.max(1);
        let bucket = sample.ts_ns - sample.ts_ns % step;
        let same_bucket = self.history.current.as_ref().is_some_and(|h| h.ts_ns == bucket);
        if !same_bucket {
            self.bucket_start = RatePoint::of(&self.latest);
            self.history.start(HistoryPoint {
                ts_ns: bucket,
                throughput_bps: 0.0,
                cwnd: sample.snd_cwnd,
                ssthresh: sample.snd_ssthresh,
                srtt_us: sample.srtt_us,
                min_rtt_us: sample.min_rtt_us,
                retrans: 0,
                ca_state: sample.ca_state,
                worst_ca_state: sample.ca_state,
            });
        }
        let start = self.bucket_start;
        if let Some(h) = self.history.current.as_mut() {
            let rates = rates_between(&start, &point).unwrap_or_default();
            if rates.throughput_bps > 0.0 || point.ts_ns > start.ts_ns {
                h.throughput_bps = rates.throughput_bps as f32;
            }
            h.cwnd = sample.snd_cwnd;
            h.ssthresh = sample.snd_ssthresh;
            h.srtt_us = sample.srtt_us;
            h.min_rtt_us = sample.min_rtt_us;
            h.retrans = u16::try_from(point.total_retrans.saturating_sub(start.total_retrans)).unwrap_or(u16::MAX);
            h.ca_state = sample.ca_state;
            if sample.ca_state.index() > h.worst_ca_state.index() {
                h.worst_ca_state = sample.ca_state;
            }
        }
    }

    /// Where the flow stands in the eviction order: closed flows first, by the time they
    /// closed, then open flows by last update. The same order is the order they expire in
    /// (closed flows after `closed_linger_ns`, open ones after `idle_timeout_ns`), so expiry
    /// takes them from the front and never scans the table. A closed flow's key no longer
    /// changes, so its late samples leave the index alone.
    fn eviction_key(&self) -> EvictionKey {
        match self.closed_at_ns {
            Some(closed) => (false, closed, self.cookie()),
            None => (true, self.last_seen_ns, self.cookie()),
        }
    }
}

/// (still open, close time or last update, cookie): the smallest is evicted first.
type EvictionKey = (bool, u64, u64);

/// What changed in the table since the last [`FlowTable::take_changes`]: the front ends' and
/// the diagnosis' work per tick follows these, not the table's size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableChanges {
    /// Flows that appeared, in arrival order (some may be gone again: see `removed`).
    pub born: Vec<u64>,
    /// Flows dropped: expired or evicted.
    pub removed: Vec<u64>,
}

/// Summary of what the table did with a sample; lets callers react to opens and closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ingested {
    NewFlow,
    Updated,
    Closed,
}

#[derive(Debug, Default)]
pub struct FlowTable {
    cfg: TableConfig,
    flows: HashMap<u64, Flow>,
    /// Every flow's [`Flow::indexed`] key: the first one is the victim, once checked current.
    eviction_order: BTreeSet<EvictionKey>,
    /// The flow a front end is showing: it keeps its full history whatever its rank.
    kept: Option<u64>,
    evicted: u64,
    changes: TableChanges,
    /// `changes` were not taken since the last expire: a table nobody asks keeps one interval
    /// of them, not all.
    changes_untaken: bool,
    /// The flows holding the full `history_len`.
    charted: HashSet<u64>,
    /// The last [`Flow::text_generation`] given.
    text_generations: u64,
    /// Flows that left the table (evicted or expired), ever.
    departed: u64,
}

impl FlowTable {
    pub fn new(cfg: TableConfig) -> Self {
        Self {
            cfg,
            flows: HashMap::new(),
            eviction_order: BTreeSet::new(),
            kept: None,
            evicted: 0,
            changes: TableChanges::default(),
            changes_untaken: false,
            charted: HashSet::new(),
            text_generations: 0,
            departed: 0,
        }
    }

    pub fn config(&self) -> &TableConfig {
        &self.cfg
    }

    /// The same table emptied, as new but for the text generations and the departures, which
    /// go on: a copy made from a flow before cannot pass for one of a flow after, and its flows
    /// count as departed.
    pub fn emptied(&self) -> Self {
        Self {
            text_generations: self.text_generations,
            departed: self.departed + self.flows.len() as u64,
            ..Self::new(self.cfg.clone())
        }
    }

    /// How many flows ever left the table (evicted, expired, emptied out): while it stays the
    /// same, every flow seen before is still there.
    pub fn departed(&self) -> u64 {
        self.departed
    }

    pub fn ingest(&mut self, sample: &Sample) -> Ingested {
        if let Some(flow) = self.flows.get_mut(&sample.cookie) {
            let was_closed = flow.is_closed();
            if flow.update(sample, &self.cfg) {
                self.text_generations += 1;
                flow.text_generation = self.text_generations;
            }
            let closed = flow.is_closed() && !was_closed;
            // An update moves the flow later in the order, which the index may learn when the
            // flow comes up for eviction; closing moves it first, which it must learn now.
            if closed {
                self.eviction_order.remove(&flow.indexed);
                flow.indexed = flow.eviction_key();
                self.eviction_order.insert(flow.indexed);
            }
            return if closed { Ingested::Closed } else { Ingested::Updated };
        }
        if self.flows.len() >= self.cfg.max_flows {
            self.evict_one();
        }
        // Short until ranked (the next expire), unless it is the flow being shown.
        let cap = if self.kept == Some(sample.cookie) {
            self.cfg.history_len
        } else {
            self.cfg.short_history_len.min(self.cfg.history_len)
        };
        self.text_generations += 1;
        let flow = Flow::new(sample, cap, self.text_generations);
        let closed = flow.is_closed();
        self.eviction_order.insert(flow.indexed);
        self.flows.insert(sample.cookie, flow);
        self.changes.born.push(sample.cookie);
        if cap > self.cfg.short_history_len {
            self.charted.insert(sample.cookie);
        }
        if closed {
            Ingested::Closed
        } else {
            Ingested::NewFlow
        }
    }

    /// Drop flows closed for longer than the linger time and flows idle past the timeout, and
    /// re-pick the flows that keep full history. Meant to run about once per second. The
    /// expired flows are the front of the eviction order (closed ones by close time, then open
    /// ones by last update), so the work is per flow dropped, not per flow kept.
    pub fn expire(&mut self, now_ns: u64) -> usize {
        let before = self.flows.len();
        if std::mem::replace(&mut self.changes_untaken, true) {
            self.changes = TableChanges::default();
        }
        let (linger, idle) = (self.cfg.closed_linger_ns, self.cfg.idle_timeout_ns);
        // A closed flow is indexed when it closes, and its key no longer changes.
        while let Some(&(open, at, cookie)) = self.eviction_order.first() {
            if open || now_ns.saturating_sub(at) < linger {
                break;
            }
            self.eviction_order.pop_first();
            self.remove(cookie);
        }
        // An open flow is indexed where some earlier sample put it: one that looks idle by
        // its key is checked against where it stands now, and indexed there if it moved on.
        while let Some(&key) = self.eviction_order.range((true, 0, 0)..).next() {
            let (_, at, cookie) = key;
            if now_ns.saturating_sub(at) < idle {
                break;
            }
            self.eviction_order.remove(&key);
            match self.flows.get_mut(&cookie) {
                Some(flow) if flow.eviction_key() != key => {
                    flow.indexed = flow.eviction_key();
                    self.eviction_order.insert(flow.indexed);
                }
                _ => self.remove(cookie),
            }
        }
        self.rank_history();
        let expired = before - self.flows.len();
        self.departed += expired as u64;
        expired
    }

    /// Drop a flow whose index entry is already gone.
    fn remove(&mut self, cookie: u64) {
        if self.flows.remove(&cookie).is_some() {
            self.charted.remove(&cookie);
            self.changes.removed.push(cookie);
        }
    }

    /// Flows born and removed since the last call. Meant to be called after each
    /// [`FlowTable::expire`]: what was not taken by the next one is dropped.
    pub fn take_changes(&mut self) -> TableChanges {
        self.changes_untaken = false;
        std::mem::take(&mut self.changes)
    }

    /// The flows still open, least recently updated first as far as the index knows (it learns
    /// a flow's later place when the flow comes up for eviction or expiry).
    pub fn open_flows(&self) -> impl Iterator<Item = &Flow> {
        self.eviction_order.range((true, 0, 0)..).filter_map(|(_, _, cookie)| self.flows.get(cookie))
    }

    /// Keep the full history for `cookie` (the flow a front end shows), whatever its rank;
    /// `None` returns it to the ranking.
    pub fn keep_history(&mut self, cookie: Option<u64>) {
        let previous = std::mem::replace(&mut self.kept, cookie);
        if let Some(c) = cookie {
            self.set_history_cap(c, self.cfg.history_len);
        }
        if previous != cookie {
            // The previous one goes back to its rank at the next expire.
            self.rank_history();
        }
    }

    fn set_history_cap(&mut self, cookie: u64, cap: usize) {
        let Some(flow) = self.flows.get_mut(&cookie) else { return };
        flow.history.set_cap(cap);
        if flow.history.cap >= self.cfg.history_len && self.cfg.history_len > self.cfg.short_history_len {
            self.charted.insert(cookie);
        } else {
            self.charted.remove(&cookie);
        }
    }

    /// Full history for the `charted_flows` busiest flows by throughput (a flow already charted
    /// keeps it while among twice as many), short history for the rest. Ranked are the open
    /// flows and those that hold a full history: a closed flow's history no longer grows, so
    /// one that is not charted stays so (under churn the closed flows are most of the table,
    /// and ranking them every second was most of a tick). O(open + charted), once a second.
    fn rank_history(&mut self) {
        let (long, short) = (self.cfg.history_len, self.cfg.short_history_len.min(self.cfg.history_len));
        let k = self.cfg.charted_flows;
        let mut ranked: Vec<u64> = self.eviction_order.range((true, 0, 0)..).map(|&(_, _, cookie)| cookie).collect();
        ranked.extend(self.charted.iter().copied().filter(|c| self.flows.get(c).is_some_and(Flow::is_closed)));
        if (k > 0 && ranked.len() <= k) || long <= short {
            for cookie in ranked {
                self.set_history_cap(cookie, long);
            }
            return;
        }
        // Ranks by (throughput, cookie): a total order, so ties at 0 cannot make every flow
        // "in the top k".
        let rank_key = |f: &Flow| (f.rates.throughput_bps.max(0.0).to_bits(), f.cookie());
        let mut keys: Vec<(u64, u64)> = ranked.iter().filter_map(|c| self.flows.get(c)).map(rank_key).collect();
        // The smallest key among the `n` largest; None when n is 0 (nobody is in).
        let mut lowest_of_top = |n: usize| -> Option<(u64, u64)> {
            let n = n.min(keys.len());
            let at = keys.len().checked_sub(n).filter(|_| n > 0)?;
            Some(*keys.select_nth_unstable(at).1)
        };
        let enter = lowest_of_top(k);
        let stay = lowest_of_top(k.saturating_mul(2));
        for cookie in ranked {
            let Some(f) = self.flows.get(&cookie) else { continue };
            let key = rank_key(f);
            let charted = f.history.cap == long;
            let keeps = Some(cookie) == self.kept
                || enter.is_some_and(|e| key >= e)
                || (charted && stay.is_some_and(|s| key >= s));
            self.set_history_cap(cookie, if keeps { long } else { short });
        }
    }

    fn evict_one(&mut self) {
        // Prefer a closed flow; otherwise the one updated longest ago. The first key indexed
        // is the victim if it is still its flow's place; a flow updated since is indexed anew
        // where it stands now, and the next first key is tried.
        while let Some(key) = self.eviction_order.pop_first() {
            let cookie = key.2;
            let Some(flow) = self.flows.get_mut(&cookie) else { continue };
            let now = flow.eviction_key();
            if now != key {
                flow.indexed = now;
                self.eviction_order.insert(now);
                continue;
            }
            self.remove(cookie);
            self.evicted += 1;
            self.departed += 1;
            return;
        }
    }

    pub fn get(&self, cookie: u64) -> Option<&Flow> {
        self.flows.get(&cookie)
    }

    pub fn flows(&self) -> impl Iterator<Item = &Flow> {
        self.flows.values()
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Flows dropped because the table was full.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::event::{Owner, SampleReason, TcpState};

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
            route: None,
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
        let cfg =
            TableConfig { closed_linger_ns: 5 * NS_PER_SEC, idle_timeout_ns: 60 * NS_PER_SEC, ..Default::default() };
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
                born.clear();
            }
        }
        assert!(expired_total > 1_000 && t.evicted() > 1_000, "expired {expired_total}, evicted {}", t.evicted());
        assert!(!removed.is_empty());
    }

    #[test]
    fn changes_say_which_flows_came_and_went_and_are_dropped_when_nobody_takes_them() {
        let mut t = FlowTable::new(TableConfig { max_flows: 2, ..Default::default() });
        t.ingest(&sample(1, 0));
        t.ingest(&sample(2, 1));
        t.ingest(&sample(1, 2));
        t.ingest(&sample(3, 3));
        assert_eq!(t.take_changes(), TableChanges { born: vec![1, 2, 3], removed: vec![2] });
        t.ingest(&sample(4, 4));
        t.expire(5_000_000);
        t.expire(6_000_000);
        assert_eq!(t.take_changes(), TableChanges::default(), "not taken by the next expire: dropped");
        let open: Vec<u64> = t.open_flows().map(Flow::cookie).collect();
        assert_eq!(open, vec![3, 4], "least recently updated first");
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
}
