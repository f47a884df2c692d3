//! Deep mode's decision events: what the congestion-control twins (`cct_cubic`, `cct_reno`,
//! `cct_bbr`) report from inside each callback, decoded from the twins' ring buffer into typed
//! records, and kept per flow (bounded) for the timeline, the JSON output and the diagnosis.
//!
//! The wire layout is [`DecisionRecord`] in tracer-common (the C side, `struct cct_decision` in
//! tracer/src/kernel/deep/decision.h, is checked against it); [`decode`] casts the bytes to it
//! after checking their length and version, as the samples are decoded.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use tracer_common::deep::{decision_kind, twin_algo, DecisionRecord, DECISION_SIZE, DECISION_VERSION};

use crate::analysis::sample::CaState;

/// Decisions kept per flow: the newest ones, enough for a minute of a flow's loss episodes.
pub const KEPT_PER_FLOW: usize = 512;
/// Flows whose decisions are kept; beyond it the flow heard from least recently is dropped.
pub const KEPT_FLOWS: usize = 4096;
/// BBR's fixed-point unit for gains (`BBR_UNIT`) and the bandwidth scale (`BW_SCALE`).
const BBR_UNIT: f64 = 256.0;
const BW_SCALE: u32 = 24;

/// The kernel algorithm a twin runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TwinAlgo {
    Cubic,
    Reno,
    Bbr,
}

impl TwinAlgo {
    pub const ALL: [TwinAlgo; 3] = [Self::Cubic, Self::Reno, Self::Bbr];

    /// The kernel's name for the original.
    pub fn original(self) -> &'static str {
        match self {
            Self::Cubic => "cubic",
            Self::Reno => "reno",
            Self::Bbr => "bbr",
        }
    }

    /// The twin's registered name.
    pub fn twin(self) -> &'static str {
        match self {
            Self::Cubic => "cct_cubic",
            Self::Reno => "cct_reno",
            Self::Bbr => "cct_bbr",
        }
    }

    /// The algorithm a twin name stands for (`cct_cubic` -> cubic).
    pub fn of_twin(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.twin() == name)
    }

    fn from_raw(v: u8) -> Option<Self> {
        match v {
            twin_algo::CUBIC => Some(Self::Cubic),
            twin_algo::RENO => Some(Self::Reno),
            twin_algo::BBR => Some(Self::Bbr),
            _ => None,
        }
    }
}

/// The algorithm a flow running `cc` behaves as: a deep-mode twin runs its original's code, so
/// `cct_cubic` is judged as cubic; any other name is itself.
pub fn algorithm_of(cc: &str) -> &str {
    match TwinAlgo::of_twin(cc) {
        Some(algo) => algo.original(),
        None => cc,
    }
}

/// `enum tcp_ca_event`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CwndEvent {
    TxStart,
    CwndRestart,
    CompleteCwr,
    Loss,
    EcnNoCe,
    EcnIsCe,
    Other(u8),
}

impl CwndEvent {
    fn from_raw(v: u8) -> Self {
        match v {
            0 => Self::TxStart,
            1 => Self::CwndRestart,
            2 => Self::CompleteCwr,
            3 => Self::Loss,
            4 => Self::EcnNoCe,
            5 => Self::EcnIsCe,
            other => Self::Other(other),
        }
    }

    fn describe(self) -> String {
        match self {
            Self::TxStart => "sending starts after idle".into(),
            Self::CwndRestart => "window restarted after idle".into(),
            Self::CompleteCwr => "window reduction complete".into(),
            Self::Loss => "retransmission timeout".into(),
            Self::EcnNoCe => "ECN: no congestion mark".into(),
            Self::EcnIsCe => "ECN: congestion mark".into(),
            Self::Other(v) => format!("event {v}"),
        }
    }
}

/// BBR's mode (`enum bbr_mode` in tcp_bbr.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BbrMode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
    Other(u8),
}

impl BbrMode {
    fn from_raw(v: u8) -> Self {
        match v {
            0 => Self::Startup,
            1 => Self::Drain,
            2 => Self::ProbeBw,
            3 => Self::ProbeRtt,
            other => Self::Other(other),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Startup => "startup",
            Self::Drain => "drain",
            Self::ProbeBw => "probe_bw",
            Self::ProbeRtt => "probe_rtt",
            Self::Other(_) => "unknown",
        }
    }
}

/// What the algorithm decided in one callback.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DecisionKind {
    /// The twin took the flow over (its state starts afresh, as after any switch).
    Init,
    /// The loss response: the new slow-start threshold the window is brought down to.
    SsthreshCut {
        cwnd_before: u32,
        cwnd_after: u32,
        ssthresh_before: u32,
        ssthresh_after: u32,
    },
    /// One round trip that changed the window (congestion avoidance or slow start); rounds
    /// that leave it as it was are not reported.
    Growth {
        cwnd_before: u32,
        cwnd_after: u32,
        acked: u32,
        slow_start: bool,
    },
    CwndEvent {
        event: CwndEvent,
    },
    /// The CA state machine moved; `reason` says what usually moves it there.
    StateChange {
        from: CaState,
        to: CaState,
        reason: String,
    },
    /// A loss judged spurious: the window goes back.
    Undo {
        cwnd_before: u32,
        cwnd_after: u32,
    },
    /// BBR after its `cong_control`: a round trip ended, or its mode or gain phase changed.
    Bbr {
        mode: BbrMode,
        /// probe_bw gain-cycle phase, 0..7.
        cycle: u8,
        pacing_gain: f64,
        cwnd_gain: f64,
        /// Bandwidth estimate (windowed max), bits/s.
        bw_bps: u64,
        min_rtt_us: u32,
        pacing_rate_bps: u64,
        cwnd_before: u32,
        cwnd_after: u32,
    },
}

/// One decision event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    pub cookie: u64,
    pub algo: TwinAlgo,
    /// The CA state when the callback ran.
    pub ca_state: CaState,
    pub srtt_us: u32,
    pub mss: u32,
    #[serde(flatten)]
    pub kind: DecisionKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecisionDecodeError {
    #[error("decision record of {0} bytes, expected {DECISION_SIZE}")]
    Length(usize),
    #[error("decision record version {0}, expected {DECISION_VERSION}")]
    Version(u8),
    #[error("decision record with unknown {0} {1}")]
    BadField(&'static str, u8),
}

/// Why the state machine enters `to` (from `from`), in words.
fn state_reason(from: CaState, to: CaState) -> &'static str {
    match (from, to) {
        (_, CaState::Loss) => "retransmission timeout",
        (_, CaState::Recovery) => "fast retransmit: duplicate ACKs or SACKed data past a hole",
        (_, CaState::Cwr) => "congestion signal without loss (ECN or local queue)",
        (_, CaState::Disorder) => "duplicate ACKs or SACKs: reordering or loss suspected",
        (CaState::Recovery | CaState::Loss, CaState::Open) => "recovered: everything outstanding acked",
        (CaState::Cwr, CaState::Open) => "window reduction complete",
        _ => "in order again",
    }
}

/// Decode one `struct cct_decision`.
pub fn decode(b: &[u8]) -> Result<Decision, DecisionDecodeError> {
    if b.len() < DECISION_SIZE {
        return Err(DecisionDecodeError::Length(b.len()));
    }
    let r: DecisionRecord = bytemuck::pod_read_unaligned(&b[..DECISION_SIZE]);
    if r.version != DECISION_VERSION {
        return Err(DecisionDecodeError::Version(r.version));
    }
    let algo = TwinAlgo::from_raw(r.algo).ok_or(DecisionDecodeError::BadField("algorithm", r.algo))?;
    let ca_state = CaState::from_raw(r.ca_state);
    let (cwnd_before, cwnd_after) = (r.cwnd_before, r.cwnd_after);
    let kind = match r.kind {
        decision_kind::INIT => DecisionKind::Init,
        decision_kind::SSTHRESH => {
            DecisionKind::SsthreshCut { cwnd_before, cwnd_after, ssthresh_before: r.value, ssthresh_after: r.ssthresh }
        }
        decision_kind::GROWTH => {
            DecisionKind::Growth { cwnd_before, cwnd_after, acked: r.value, slow_start: r.arg != 0 }
        }
        decision_kind::CWND_EVENT => DecisionKind::CwndEvent { event: CwndEvent::from_raw(r.arg) },
        decision_kind::STATE => {
            let to = CaState::from_raw(r.arg);
            DecisionKind::StateChange { from: ca_state, to, reason: state_reason(ca_state, to).to_string() }
        }
        decision_kind::UNDO => DecisionKind::Undo { cwnd_before, cwnd_after },
        decision_kind::BBR => DecisionKind::Bbr {
            mode: BbrMode::from_raw(r.arg),
            cycle: r.bbr_cycle,
            pacing_gain: f64::from(r.bbr_pacing_gain) / BBR_UNIT,
            cwnd_gain: f64::from(r.bbr_cwnd_gain) / BBR_UNIT,
            // packets/µs << BW_SCALE -> bits/s
            bw_bps: ((u128::from(r.bw) * u128::from(r.mss) * 8 * 1_000_000) >> BW_SCALE) as u64,
            min_rtt_us: r.min_rtt_us,
            pacing_rate_bps: r.pacing_rate.saturating_mul(8),
            cwnd_before,
            cwnd_after,
        },
        other => return Err(DecisionDecodeError::BadField("kind", other)),
    };
    Ok(Decision { ts_ns: r.ts_ns, cookie: r.cookie, algo, ca_state, srtt_us: r.srtt_us, mss: r.mss, kind })
}

impl Decision {
    /// Is this the algorithm's response to a loss (what a retransmission episode triggers)?
    pub fn is_loss_response(&self) -> bool {
        matches!(self.kind, DecisionKind::SsthreshCut { .. })
    }

    /// One line for the timeline, without the time: "loss: ssthresh 46, cwnd 68 → 46".
    pub fn describe(&self) -> String {
        match &self.kind {
            DecisionKind::Init => format!("{} took the flow over", self.algo.twin()),
            DecisionKind::SsthreshCut { cwnd_before, cwnd_after, ssthresh_after, .. } => {
                let why = if self.ca_state == CaState::Loss { "timeout" } else { "loss" };
                format!("{why}: ssthresh {ssthresh_after}, cwnd {cwnd_before} → {cwnd_after}")
            }
            DecisionKind::Growth { cwnd_before, cwnd_after, acked, slow_start } => {
                let phase = if *slow_start { "slow start" } else { "congestion avoidance" };
                let delta = i64::from(*cwnd_after) - i64::from(*cwnd_before);
                format!("{phase}: cwnd {cwnd_before} → {cwnd_after} ({delta:+}) over one RTT, {acked} acked")
            }
            DecisionKind::CwndEvent { event } => event.describe(),
            DecisionKind::StateChange { from, to, reason } => format!("{} → {}: {reason}", from.name(), to.name()),
            DecisionKind::Undo { cwnd_before, cwnd_after } => {
                format!("spurious loss undone: cwnd {cwnd_before} → {cwnd_after}")
            }
            DecisionKind::Bbr { mode, cycle, pacing_gain, bw_bps, min_rtt_us, pacing_rate_bps, cwnd_after, .. } => {
                let phase = if *mode == BbrMode::ProbeBw { format!(" phase {cycle}") } else { String::new() };
                format!(
                    "{}{phase}: bw {:.1} Mbit/s, min_rtt {:.1} ms, pacing {:.1} Mbit/s (gain {pacing_gain:.2}), cwnd {cwnd_after}",
                    mode.name(),
                    *bw_bps as f64 / 1e6,
                    f64::from(*min_rtt_us) / 1000.0,
                    *pacing_rate_bps as f64 / 1e6,
                )
            }
        }
    }
}

/// Decisions per flow, newest last, bounded per flow and in flows.
#[derive(Clone, Debug, Default)]
pub struct DecisionLog {
    flows: HashMap<u64, VecDeque<Decision>>,
    /// Last time each flow was heard from, to drop the stalest beyond [`KEPT_FLOWS`].
    heard: HashMap<u64, u64>,
    total: u64,
    loss_responses: HashMap<u64, u64>,
}

impl DecisionLog {
    pub fn push(&mut self, d: &Decision) {
        if d.cookie == 0 {
            // Before anything asked for the socket's cookie: no flow to file it under.
            return;
        }
        if !self.flows.contains_key(&d.cookie) && self.flows.len() >= KEPT_FLOWS {
            if let Some((&stalest, _)) = self.heard.iter().min_by_key(|(_, &t)| t) {
                self.forget(stalest);
            }
        }
        let log = self.flows.entry(d.cookie).or_default();
        if log.len() == KEPT_PER_FLOW {
            log.pop_front();
        }
        log.push_back(d.clone());
        self.heard.insert(d.cookie, d.ts_ns);
        self.total += 1;
        if d.is_loss_response() {
            *self.loss_responses.entry(d.cookie).or_default() += 1;
        }
    }

    pub fn forget(&mut self, cookie: u64) {
        self.flows.remove(&cookie);
        self.heard.remove(&cookie);
        self.loss_responses.remove(&cookie);
    }

    /// The flow's kept decisions, oldest first.
    pub fn of(&self, cookie: u64) -> impl Iterator<Item = &Decision> {
        self.flows.get(&cookie).into_iter().flatten()
    }

    /// Loss responses (ssthresh cuts) the flow's algorithm made, all of them, not only those kept.
    pub fn loss_responses(&self, cookie: u64) -> u64 {
        self.loss_responses.get(&cookie).copied().unwrap_or(0)
    }

    pub fn is_deep(&self, cookie: u64) -> bool {
        self.flows.contains_key(&cookie)
    }

    /// The flows with decisions kept.
    pub fn cookies(&self) -> impl Iterator<Item = u64> + '_ {
        self.flows.keys().copied()
    }

    /// Decisions received in all.
    pub fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(kind: u8, algo: u8, ca_state: u8, arg: u8) -> DecisionRecord {
        DecisionRecord {
            ts_ns: 5_000_000_000,
            cookie: 77,
            pacing_rate: 1_250_000,
            // 1 packet per µs << 24
            bw: 1 << 24,
            cwnd_before: 68,
            cwnd_after: 46,
            ssthresh: 46,
            min_rtt_us: 30_000,
            srtt_us: 31_000,
            mss: 1448,
            value: 2_147_483_647,
            version: DECISION_VERSION,
            kind,
            algo,
            ca_state,
            arg,
            bbr_cycle: 2,
            bbr_pacing_gain: 320,
            bbr_cwnd_gain: 512,
            _pad: 0,
        }
    }

    fn record(kind: u8, algo: u8, ca: u8, arg: u8) -> Vec<u8> {
        bytemuck::bytes_of(&raw(kind, algo, ca, arg)).to_vec()
    }

    #[test]
    fn a_loss_response_reads_as_the_timeline_says() {
        let d = decode(&record(2, 1, 1, 0)).unwrap();
        assert_eq!(d.cookie, 77);
        assert_eq!(d.algo, TwinAlgo::Cubic);
        assert!(d.is_loss_response());
        assert_eq!(d.describe(), "loss: ssthresh 46, cwnd 68 → 46");
    }

    #[test]
    fn bbr_records_convert_units() {
        let d = decode(&record(7, 3, 0, 2)).unwrap();
        let DecisionKind::Bbr { mode, cycle, pacing_gain, cwnd_gain, bw_bps, pacing_rate_bps, .. } = d.kind else {
            panic!("not a BBR record: {d:?}")
        };
        assert_eq!((mode, cycle), (BbrMode::ProbeBw, 2));
        assert_eq!((pacing_gain, cwnd_gain), (1.25, 2.0));
        // one 1448-byte packet per µs
        assert_eq!(bw_bps, 1448 * 8 * 1_000_000);
        assert_eq!(pacing_rate_bps, 10_000_000);
    }

    #[test]
    fn short_foreign_and_unknown_records_are_errors() {
        assert_eq!(decode(&[0; 10]), Err(DecisionDecodeError::Length(10)));
        let foreign = DecisionRecord { version: 9, ..raw(2, 1, 0, 0) };
        assert_eq!(decode(bytemuck::bytes_of(&foreign)), Err(DecisionDecodeError::Version(9)));
        assert_eq!(decode(&record(42, 1, 0, 0)), Err(DecisionDecodeError::BadField("kind", 42)));
        assert_eq!(decode(&record(2, 9, 0, 0)), Err(DecisionDecodeError::BadField("algorithm", 9)));
    }

    #[test]
    fn state_changes_say_why() {
        let d = decode(&record(5, 1, 0, 3)).unwrap();
        assert_eq!(d.describe(), "Open → Recovery: fast retransmit: duplicate ACKs or SACKed data past a hole");
    }

    #[test]
    fn the_log_is_bounded_per_flow_and_counts_every_cut() {
        let mut log = DecisionLog::default();
        let cut = decode(&record(2, 1, 1, 0)).unwrap();
        for _ in 0..KEPT_PER_FLOW + 10 {
            log.push(&cut);
        }
        assert_eq!(log.of(77).count(), KEPT_PER_FLOW);
        assert_eq!(log.loss_responses(77), (KEPT_PER_FLOW + 10) as u64);
        log.push(&Decision { cookie: 0, ..cut });
        assert_eq!(log.total(), (KEPT_PER_FLOW + 10) as u64, "no cookie, no flow");
    }
}
