//! Everything known about one flow: its latest sample, rates over the rate window, time per CA
//! state, counts, loss episodes, what it receives and chart history, brought up to date by each
//! sample.

use std::collections::VecDeque;

use tracer_common::NS_PER_SEC;

use crate::analysis::flow_table::config::TableConfig;
use crate::analysis::flow_table::counts::SampleCounts;
use crate::analysis::flow_table::history::{History, HistoryPoint};
use crate::analysis::flow_table::loss::{LossEpisode, LossTracker, TRACK_MIN_BYTES};
use crate::analysis::flow_table::rates::{rates_between, RatePoint, Rates};
use crate::analysis::flow_table::receive::{ReceiveTracker, TRACK_MIN_BYTES as RECEIVE_MIN_BYTES};
use crate::analysis::sample::Sample;

/// Everything known about one flow.
#[derive(Clone, Debug)]
pub struct Flow {
    /// The first sample's counters (the whole sample is not kept: with 100,000 flows its 300
    /// bytes were an eighth of cctrace's memory).
    pub(super) first: RatePoint,
    pub latest: Sample,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// Changes (to a number never given before in this table) whenever the latest sample's
    /// text changes, its cc or owner: a copy of them made at one value still holds.
    pub text_generation: u64,
    pub samples: u64,
    /// Set when the kernel reported the socket closed.
    pub closed_at_ns: Option<u64>,
    /// The largest receive window the peer advertised (bytes): one that never passed 64 KiB on
    /// a flow held by it means the window was never scaled.
    pub max_snd_wnd: u32,
    /// Time spent in each CA state, indexed by `CaState::index()`.
    pub ca_time_ns: [u64; 5],
    pub rates: Rates,
    pub counts: SampleCounts,
    /// Loss episodes and the moments before them; `None` until the flow has sent enough to
    /// matter (see `TRACK_MIN_BYTES`).
    pub loss: Option<Box<LossTracker>>,
    /// What it receives shows of its peer's sender; `None` until it received enough to matter.
    pub receive: Option<Box<ReceiveTracker>>,
    window: VecDeque<RatePoint>,
    pub(super) history: History,
    /// Where the table's eviction index has it: its [`Flow::eviction_key`] as of some earlier
    /// sample, never after its current one (a flow only moves later, except when it closes,
    /// which is indexed at once).
    pub(super) indexed: EvictionKey,
    /// Counters at the start of the current history bucket.
    bucket_start: RatePoint,
    /// The table's set of changes this flow was last listed in (see `FlowTable::changes_epoch`).
    pub(super) updated_in: u64,
    /// The throughput (as [`Flow::rank_bits`]) the table's ranking index has it under, if it
    /// is ranked at all.
    pub(super) ranked_as: Option<u64>,
}

impl Flow {
    pub(super) fn new(sample: &Sample, history_cap: usize, text_generation: u64) -> Self {
        let point = RatePoint::of(sample);
        let mut counts = SampleCounts::default();
        counts.add(None, sample);
        let mut flow = Self {
            first: point,
            latest: sample.clone(),
            first_seen_ns: sample.ts_ns,
            last_seen_ns: sample.ts_ns,
            text_generation,
            samples: 1,
            closed_at_ns: sample.is_closing().then_some(sample.ts_ns),
            max_snd_wnd: sample.snd_wnd,
            ca_time_ns: [0; 5],
            rates: Rates::default(),
            counts,
            loss: None,
            receive: None,
            window: VecDeque::from([point]),
            history: History::new(history_cap),
            indexed: (false, 0, 0),
            bucket_start: point,
            updated_in: 0,
            ranked_as: None,
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
    pub(super) fn update(&mut self, sample: &Sample, cfg: &TableConfig) -> bool {
        // Samples of one flow can arrive out of order across CPUs; an older one adds nothing.
        if sample.ts_ns < self.latest.ts_ns {
            return false;
        }
        let dt = sample.ts_ns - self.latest.ts_ns;
        self.ca_time_ns[self.latest.ca_state.index()] += dt;
        self.samples += 1;
        self.counts.add(Some(&self.latest), sample);
        self.last_seen_ns = sample.ts_ns;
        self.max_snd_wnd = self.max_snd_wnd.max(sample.snd_wnd);
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
        if self.receive.is_none() && sample.bytes_received >= RECEIVE_MIN_BYTES {
            self.receive = Some(Box::default());
        }
        if let Some(receive) = self.receive.as_mut() {
            receive.update(&self.latest, sample);
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
    pub(super) fn eviction_key(&self) -> EvictionKey {
        match self.closed_at_ns {
            Some(closed) => (false, closed, self.cookie()),
            None => (true, self.last_seen_ns, self.cookie()),
        }
    }

    /// Its throughput as ordered bits, for ranking which flows keep full history: with the
    /// cookie, a total order (ties at 0 cannot put every flow "in the top k").
    pub(super) fn rank_bits(&self) -> u64 {
        self.rates.throughput_bps.max(0.0).to_bits()
    }
}

/// (still open, close time or last update, cookie): the smallest is evicted first.
pub(super) type EvictionKey = (bool, u64, u64);
