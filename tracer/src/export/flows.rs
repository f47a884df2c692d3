//! Each flow's life over a whole recording, gathered during the replay: the flow table keeps a
//! bounded history and forgets closed flows after a while, a report needs all of it.

use std::collections::HashMap;

use serde::Serialize;
use tracer_common::TCP_INFINITE_SSTHRESH;

use crate::analysis::diagnosis::{LimitedBy, Verdict};
use crate::analysis::loss_signals::LossSignals;
use crate::analysis::sample::{CaState, Owner, Sample};
use crate::analysis::schema::{Placement, SummaryRecord, UdpRecord};
use crate::analysis::time::WallClock;
use crate::analysis::Analysis;
use crate::export::replay::Step;
use crate::recording::entry::Header;
use crate::source::SourceCounters;

/// One point per evaluation (about once a second) while the flow is in the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub ts_ns: u64,
    /// Goodput over the last second, bits/s.
    pub throughput_bps: f64,
    pub cwnd: u32,
    /// `None` while unset.
    pub ssthresh: Option<u32>,
    pub srtt_ms: f64,
    pub min_rtt_ms: f64,
    /// Segments retransmitted since the previous point.
    pub retrans: u32,
    pub ca_state: CaState,
}

/// When a flow's verdict changed (limited_by or the flag).
#[derive(Clone, Debug, PartialEq)]
pub struct VerdictChange {
    pub ts_ns: u64,
    pub limited_by: LimitedBy,
    pub flagged: bool,
    pub text: String,
}

/// One flow over the recording.
#[derive(Clone, Debug)]
pub struct FlowTrack {
    pub cookie: u64,
    pub first: Sample,
    /// The latest sample, with the last complete endpoints and owner seen.
    pub latest: Sample,
    pub placement: Placement,
    pub samples: u64,
    srtt_sum_ms: f64,
    srtt_n: u64,
    pub min_srtt_ms: Option<f64>,
    pub min_rtt_ms: Option<f64>,
    cwnd_sum: f64,
    pub max_cwnd: u32,
    pub points: Vec<Point>,
    last_retrans: u32,
    /// Heavy at any evaluation (the live UI's rule).
    pub heavy: bool,
    pub ever_flagged: bool,
    /// The latest verdict, and the latest one that flagged the flow.
    pub verdict: Option<Verdict>,
    pub flagged_verdict: Option<Verdict>,
    pub changes: Vec<VerdictChange>,
}

impl FlowTrack {
    fn new(s: &Sample, placement: Placement) -> Self {
        Self {
            cookie: s.cookie,
            first: s.clone(),
            latest: s.clone(),
            placement,
            samples: 0,
            srtt_sum_ms: 0.0,
            srtt_n: 0,
            min_srtt_ms: None,
            min_rtt_ms: None,
            cwnd_sum: 0.0,
            max_cwnd: 0,
            points: Vec::new(),
            last_retrans: s.total_retrans,
            heavy: false,
            ever_flagged: false,
            verdict: None,
            flagged_verdict: None,
            changes: Vec::new(),
        }
    }

    fn add(&mut self, s: &Sample) {
        self.samples += 1;
        if s.srtt_us > 0 {
            let ms = f64::from(s.srtt_us) / 1000.0;
            self.srtt_sum_ms += ms;
            self.srtt_n += 1;
            self.min_srtt_ms = Some(self.min_srtt_ms.map_or(ms, |m| m.min(ms)));
        }
        if s.min_rtt_us > 0 && s.min_rtt_us != u32::MAX {
            let ms = f64::from(s.min_rtt_us) / 1000.0;
            self.min_rtt_ms = Some(self.min_rtt_ms.map_or(ms, |m| m.min(ms)));
        }
        self.cwnd_sum += f64::from(s.snd_cwnd);
        self.max_cwnd = self.max_cwnd.max(s.snd_cwnd);
        if s.ts_ns < self.latest.ts_ns {
            return;
        }
        let mut latest = s.clone();
        latest.carry_identity_from(&self.latest);
        self.latest = latest;
    }

    pub fn mean_srtt_ms(&self) -> Option<f64> {
        (self.srtt_n > 0).then(|| self.srtt_sum_ms / self.srtt_n as f64)
    }

    pub fn mean_cwnd(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            self.cwnd_sum / self.samples as f64
        }
    }

    pub fn duration_s(&self) -> f64 {
        self.latest.ts_ns.saturating_sub(self.first.ts_ns) as f64 / 1e9
    }

    /// Bytes acked plus received over the flow's observed life, bits/s.
    pub fn mean_throughput_bps(&self) -> f64 {
        let secs = self.duration_s();
        if secs <= 0.0 {
            return 0.0;
        }
        let moved = |s: &Sample| s.bytes_acked.saturating_add(s.bytes_received);
        moved(&self.latest).saturating_sub(moved(&self.first)) as f64 * 8.0 / secs
    }

    pub fn max_throughput_bps(&self) -> f64 {
        self.points.iter().map(|p| p.throughput_bps).fold(0.0, f64::max)
    }

    /// `src:sport -> dst:dport`.
    pub fn endpoints(&self) -> String {
        format!("{} -> {}", self.latest.local, self.latest.remote)
    }

    pub fn flagged(&self) -> bool {
        self.verdict.as_ref().is_some_and(|v| v.flagged)
    }
}

/// The session as a whole.
#[derive(Clone, Debug, Default)]
pub struct Session {
    pub header: Option<Header>,
    pub first_ns: Option<u64>,
    pub last_ns: u64,
    pub samples: u64,
    /// The source's counters at the last tick.
    pub counters: SourceCounters,
    pub summary: Option<SummaryRecord>,
    pub actions: Vec<(u64, String)>,
}

impl Session {
    /// Monotonic nanoseconds the recording started at: the header's, else the first sample's.
    pub fn start_ns(&self) -> u64 {
        self.header.as_ref().map_or(self.first_ns.unwrap_or(0), |h| h.start_monotonic_ns)
    }

    pub fn clock(&self) -> WallClock {
        wall_clock(self.header.as_ref())
    }

    pub fn duration_s(&self) -> f64 {
        self.last_ns.saturating_sub(self.start_ns()) as f64 / 1e9
    }

    /// Samples the kernel could not queue, from the summary when the recording ended cleanly.
    pub fn lost(&self) -> u64 {
        self.summary.as_ref().map_or(self.counters.lost, |s| s.events_lost)
    }
}

/// Maps the recording's monotonic times to dates, from its header (the epoch when there is none).
pub fn wall_clock(header: Option<&Header>) -> WallClock {
    WallClock::fixed(header.map_or(0, |h| i128::from(h.start_unix_ns) - i128::from(h.start_monotonic_ns)))
}

/// Every flow of a recording, in order of first appearance, and the session.
#[derive(Clone, Debug, Default)]
pub struct FlowLog {
    pub session: Session,
    pub flows: Vec<FlowTrack>,
    index: HashMap<u64, usize>,
    /// Heavy UDP flows as last judged, in order of first appearance.
    pub udp: Vec<UdpRecord>,
}

impl FlowLog {
    /// Take in one replay step.
    pub fn on_step(&mut self, a: &Analysis, step: &Step<'_>) {
        match *step {
            Step::Header(h) => self.session.header = Some(h.clone()),
            Step::Sample(s) => {
                let session = &mut self.session;
                session.samples += 1;
                session.first_ns.get_or_insert(s.ts_ns);
                session.last_ns = session.last_ns.max(s.ts_ns);
                let i = *self.index.entry(s.cookie).or_insert_with(|| {
                    self.flows.push(FlowTrack::new(s, Placement::of(s, &a.env)));
                    self.flows.len() - 1
                });
                self.flows[i].add(s);
            }
            Step::Tick { now_ns, counters, evaluated } => {
                self.session.counters = *counters;
                self.session.last_ns = self.session.last_ns.max(now_ns);
                if evaluated {
                    self.evaluate(a, now_ns);
                }
            }
            Step::Action(record) => self.session.actions.push((record.ts_ns, record.headline())),
            Step::End(summary) => self.session.summary = Some(summary.clone()),
        }
    }

    fn evaluate(&mut self, a: &Analysis, now_ns: u64) {
        let clock = self.session.clock();
        for flow in a.udp.flows() {
            let record = UdpRecord::of(flow, a.udp_verdict(flow), &clock, &a.env);
            match self.udp.iter_mut().find(|r| r.cookie == record.cookie) {
                Some(r) => *r = record,
                None => self.udp.push(record),
            }
        }
        let cfg = a.diagnoser.config();
        for flow in a.table.flows() {
            let Some(&i) = self.index.get(&flow.cookie()) else { continue };
            let track = &mut self.flows[i];
            let s = &flow.latest;
            let verdict = a.verdict(flow);
            track.placement = Placement::of(s, &a.env);
            track.points.push(Point {
                ts_ns: now_ns,
                throughput_bps: flow.rates.throughput_bps,
                cwnd: s.snd_cwnd,
                ssthresh: (s.snd_ssthresh < TCP_INFINITE_SSTHRESH).then_some(s.snd_ssthresh),
                srtt_ms: f64::from(s.srtt_us) / 1000.0,
                min_rtt_ms: f64::from(s.min_rtt_us) / 1000.0,
                retrans: s.total_retrans.saturating_sub(track.last_retrans),
                ca_state: s.ca_state,
            });
            track.last_retrans = s.total_retrans;
            let flagged = verdict.is_some_and(|v| v.flagged);
            // The live UI's rule for a heavy flow.
            track.heavy |= cfg.flow_is_heavy(flow, verdict);
            track.ever_flagged |= flagged;
            let Some(v) = verdict else { continue };
            let changed = track.changes.last().is_none_or(|c| c.limited_by != v.limited_by || c.flagged != v.flagged);
            if changed {
                track.changes.push(VerdictChange {
                    ts_ns: now_ns,
                    limited_by: v.limited_by,
                    flagged: v.flagged,
                    text: v.text.clone(),
                });
            }
            if v.flagged {
                track.flagged_verdict = Some(v.clone());
            }
            track.verdict = Some(v.clone());
        }
    }

    pub fn heavy(&self) -> impl Iterator<Item = &FlowTrack> {
        self.flows.iter().filter(|f| f.heavy)
    }

    pub fn get(&self, cookie: u64) -> Option<&FlowTrack> {
        self.index.get(&cookie).map(|&i| &self.flows[i])
    }
}

/// One row of `--summary`: a flow over the whole recording, in the spirit of tcptrace's.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FlowSummary {
    pub cookie: u64,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
    pub owner: Option<Owner>,
    #[serde(flatten)]
    pub placement: Placement,
    pub cc: String,
    /// Unix seconds of the first and latest sample; seconds between them.
    pub first_time: f64,
    pub last_time: f64,
    pub duration_s: f64,
    /// Bytes, at the latest sample.
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_retrans: u64,
    /// Segments retransmitted over the flow's life.
    pub retrans: u32,
    /// bytes_retrans / bytes_sent, 0..1.
    pub retrans_ratio: f64,
    /// The kernel's loss signals at the latest sample (`dsack_dups`, `reord_seen`, ...).
    #[serde(flatten)]
    pub signals: LossSignals,
    /// Goodput over the observed life, and the highest one-second goodput, bits/s.
    pub mean_throughput_bps: u64,
    pub max_throughput_bps: u64,
    /// Milliseconds: smallest and mean smoothed RTT, smallest min_rtt.
    pub min_srtt_ms: Option<f64>,
    pub mean_srtt_ms: Option<f64>,
    pub min_rtt_ms: Option<f64>,
    /// Segments, over the samples.
    pub mean_cwnd: f64,
    pub max_cwnd: u32,
    pub samples: u64,
    pub heavy: bool,
    /// The final verdict; whether the flow was flagged at the end, and at any time.
    pub limited_by: LimitedBy,
    pub flagged: bool,
    pub ever_flagged: bool,
    pub verdict: String,
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

impl FlowSummary {
    /// Every optional part present, the values empty: the shape the CSV export's columns are
    /// read from (no row is written from it).
    pub fn with_every_part() -> Self {
        Self {
            owner: Some(Owner { pid: 0, comm: Default::default() }),
            placement: Placement::with_every_part(),
            signals: LossSignals::with_every_part(),
            min_srtt_ms: Some(0.0),
            mean_srtt_ms: Some(0.0),
            min_rtt_ms: Some(0.0),
            ..Default::default()
        }
    }

    pub fn of(t: &FlowTrack, clock: &WallClock) -> Self {
        let s = &t.latest;
        Self {
            cookie: t.cookie,
            src: s.local.ip().to_string(),
            sport: s.local.port(),
            dst: s.remote.ip().to_string(),
            dport: s.remote.port(),
            owner: s.owner.clone(),
            placement: t.placement.clone(),
            cc: s.cc.to_string(),
            first_time: clock.unix_secs(t.first.ts_ns),
            last_time: clock.unix_secs(s.ts_ns),
            duration_s: round3(t.duration_s()),
            bytes_sent: s.bytes_sent,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_received,
            bytes_retrans: s.bytes_retrans,
            retrans: s.total_retrans,
            retrans_ratio: if s.bytes_sent > 0 { s.bytes_retrans as f64 / s.bytes_sent as f64 } else { 0.0 },
            signals: s.signals,
            mean_throughput_bps: t.mean_throughput_bps().round() as u64,
            max_throughput_bps: t.max_throughput_bps().round() as u64,
            min_srtt_ms: t.min_srtt_ms.map(round3),
            mean_srtt_ms: t.mean_srtt_ms().map(round3),
            min_rtt_ms: t.min_rtt_ms.map(round3),
            mean_cwnd: round3(t.mean_cwnd()),
            max_cwnd: t.max_cwnd,
            samples: t.samples,
            heavy: t.heavy,
            limited_by: t.verdict.as_ref().map_or(LimitedBy::Unknown, |v| v.limited_by),
            flagged: t.flagged(),
            ever_flagged: t.ever_flagged,
            verdict: t.verdict.as_ref().map_or_else(|| LimitedBy::Unknown.describe().to_string(), |v| v.text.clone()),
        }
    }
}
