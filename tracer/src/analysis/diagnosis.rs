//! Why is each flow as fast as it is? A `limited_by` verdict per flow from what the kernel
//! reports, and a flag on heavy bulk flows held back by loss-based congestion control on a path
//! whose losses are not congestive, with the evidence in numbers and the fix.
//!
//! Pure code: it sees flows through [`FlowTable`] and the environment through [`Environment`],
//! so it judges live data, recordings and test feeds alike. Verdicts are computed over a sliding
//! window of snapshots and change only after they persist (hysteresis), so they do not flap.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::analysis::fix;
use crate::analysis::model::{Flow, FlowTable, SampleCounts};

use tracer_common::NS_PER_SEC;

/// Congestion controls that back off on packet loss alone.
pub const LOSS_BASED: &[&str] =
    &["reno", "cubic", "bic", "htcp", "highspeed", "scalable", "hybla", "westwood", "illinois", "veno", "yeah", "lp"];

pub fn is_loss_based(cc: &str) -> bool {
    LOSS_BASED.contains(&cc)
}

/// What limits a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitedBy {
    /// Not enough observations yet.
    Unknown,
    /// Nothing moved in the window.
    Idle,
    /// The local side only receives; the peer's sender decides the rate.
    Receiving,
    /// The sender had nothing to send much of the time.
    Application,
    /// Stalled by the peer's advertised receive window.
    #[serde(rename = "rwnd")]
    ReceiveWindow,
    /// Stalled by the local send buffer.
    #[serde(rename = "sndbuf")]
    SendBuffer,
    /// The congestion window was full.
    #[serde(rename = "cwnd")]
    CongestionWindow,
    /// Sending at the pacing rate with room left in cwnd (rate-based CC such as BBR).
    Pacing,
}

impl LimitedBy {
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Idle => "idle",
            Self::Receiving => "receiving",
            Self::Application => "application",
            Self::ReceiveWindow => "rwnd",
            Self::SendBuffer => "sndbuf",
            Self::CongestionWindow => "cwnd",
            Self::Pacing => "pacing",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Unknown => "not enough data yet",
            Self::Idle => "idle: nothing sent or received",
            Self::Receiving => "receiving: the peer's sender sets the pace",
            Self::Application => "application-limited: the sender often had nothing to send",
            Self::ReceiveWindow => "receive-window-limited: the peer's receive window is full",
            Self::SendBuffer => "send-buffer-limited: the local send buffer is too small",
            Self::CongestionWindow => "congestion-window-limited: cwnd is full",
            Self::Pacing => "pacing/bandwidth-limited: sending at the pacing rate",
        }
    }
}

/// Thresholds; the defaults suit a host doing media streaming and bulk transfers.
#[derive(Clone, Debug)]
pub struct DiagnosisConfig {
    /// Snapshots are taken at each evaluation; this many make the judging window.
    pub window: usize,
    /// Fewer observed seconds than this: "not enough data".
    pub min_observed_secs: f64,
    /// A flow is heavy once it moved this many bytes in total...
    pub heavy_min_bytes: u64,
    /// ...and moves at least this rate (bits/s) over the window, or keeps its cwnd full.
    pub heavy_min_bps: f64,
    /// Share of the window the sender must have been backlogged to count as bulk.
    pub min_busy_share: f64,
    /// Share of the window stalled by rwnd / sndbuf that decides those verdicts.
    pub stall_share: f64,
    /// Share of samples with a full cwnd that makes a flow cwnd-limited.
    pub cwnd_full_share: f64,
    /// Share of samples with nothing to send that makes a flow application-limited.
    pub no_backlog_share: f64,
    /// Share of samples the kernel marked application-limited that makes a flow so. Lower than
    /// the others: in loss recovery cwnd shrinks to what is in flight, hiding the idle time.
    pub app_limited_share: f64,
    /// Share of samples with a send buffer under 60 % full that makes a flow application-limited.
    pub sndbuf_low_share: f64,
    /// Retransmitted byte share over the window that counts as "sustained loss"...
    pub min_loss_ratio: f64,
    /// ...when it is spread over at least this share of the window's intervals (a slow-start
    /// overshoot or a queue overflow loses a lot, but all at once).
    pub min_lossy_interval_share: f64,
    /// srtt at most min_rtt * this + `queue_slack_us` means no queue is building.
    pub queue_ratio: f64,
    pub queue_slack_us: f64,
    /// Evaluations a new verdict must persist before it replaces the old one.
    pub confirm: u32,
    /// Evaluations the flag condition must fail before the flag is cleared.
    pub release: u32,
}

impl Default for DiagnosisConfig {
    fn default() -> Self {
        Self {
            window: 5,
            min_observed_secs: 3.0,
            heavy_min_bytes: 500_000,
            heavy_min_bps: 1_000_000.0,
            min_busy_share: 0.7,
            stall_share: 0.3,
            cwnd_full_share: 0.5,
            no_backlog_share: 0.6,
            app_limited_share: 0.4,
            sndbuf_low_share: 0.5,
            min_loss_ratio: 0.005,
            min_lossy_interval_share: 0.6,
            queue_ratio: 1.5,
            queue_slack_us: 5_000.0,
            confirm: 2,
            release: 5,
        }
    }
}

impl DiagnosisConfig {
    /// A heavy flow: it moved at least `heavy_min_bytes` in total and moves at least
    /// `heavy_min_bps` (or keeps its congestion window full, which is what a flow crushed to a
    /// few Mbit/s by loss looks like). The one definition the flag, the UI's default view and
    /// its help use.
    pub fn is_heavy(&self, moved_bytes: u64, rate_bps: f64, keeps_cwnd_full: bool) -> bool {
        moved_bytes >= self.heavy_min_bytes && (rate_bps >= self.heavy_min_bps || keeps_cwnd_full)
    }

    /// [`Self::is_heavy`] in words, for help texts.
    pub fn heavy_rule(&self) -> String {
        format!(
            "heavy: ≥{} MB at ≥{} Mbit/s (or cwnd full)",
            self.heavy_min_bytes as f64 / 1e6,
            self.heavy_min_bps / 1e6
        )
    }
}

/// Facts about the host the fix depends on (side effects live with the caller).
#[derive(Clone, Debug, Default)]
pub struct Environment {
    /// `net.ipv4.tcp_available_congestion_control` contains bbr.
    pub bbr_available: bool,
    /// Inode of the host's own network namespace (the fix then needs no nsenter).
    pub host_netns: u32,
    /// A process living in each network namespace, for `nsenter --net=/proc/PID/ns/net`.
    pub netns_pids: HashMap<u32, u32>,
    /// Namespaces named by `ip netns add` (/run/netns/NAME), for `ip netns exec NAME`.
    pub netns_names: HashMap<u32, String>,
}

/// The numbers a flag rests on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Retransmitted share of bytes sent in the window.
    pub loss_ratio: f64,
    pub srtt_ms: f64,
    pub min_rtt_ms: f64,
    pub mean_cwnd: f64,
    pub goodput_bps: f64,
    /// Mathis et al.: MSS/RTT * 1.22/sqrt(p), the most a Reno-like flow gets at this loss.
    pub mathis_bps: f64,
    pub mss: u32,
    pub busy_share: f64,
    pub rwnd_share: f64,
    pub sndbuf_share: f64,
    /// Shares of periodic samples with a full cwnd / marked application-limited by the kernel.
    pub cwnd_full_share: f64,
    pub app_limited_share: f64,
    /// Share of periodic samples with the send buffer under 60 % full.
    pub sndbuf_low_share: f64,
    /// Share of the window's seconds with retransmissions.
    pub lossy_interval_share: f64,
}

/// The judgement on one flow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub limited_by: LimitedBy,
    pub flagged: bool,
    /// One paragraph a network engineer can act on.
    pub text: String,
    pub evidence: Option<Evidence>,
    /// Commands that apply the fix, make it persistent and roll it back.
    pub fix: Vec<String>,
}

impl Verdict {
    fn unknown(observed: f64) -> Self {
        Self {
            limited_by: LimitedBy::Unknown,
            flagged: false,
            text: format!("not enough data yet ({observed:.1} s observed)"),
            evidence: None,
            fix: Vec::new(),
        }
    }
}

/// Counters of one flow at one evaluation.
#[derive(Clone, Copy, Debug)]
struct Snapshot {
    ts_ns: u64,
    busy_us: u64,
    rwnd_us: u64,
    sndbuf_us: u64,
    bytes_acked: u64,
    bytes_received: u64,
    bytes_sent: u64,
    bytes_retrans: u64,
    total_retrans: u32,
    srtt_us: u32,
    min_rtt_us: u32,
    cwnd: u32,
    counts: SampleCounts,
}

impl Snapshot {
    fn of(flow: &Flow) -> Self {
        let s = &flow.latest;
        Self {
            ts_ns: s.ts_ns,
            busy_us: s.busy_us,
            rwnd_us: s.rwnd_limited_us,
            sndbuf_us: s.sndbuf_limited_us,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_received,
            bytes_sent: s.bytes_sent,
            bytes_retrans: s.bytes_retrans,
            total_retrans: s.total_retrans,
            srtt_us: s.srtt_us,
            min_rtt_us: s.min_rtt_us,
            cwnd: s.snd_cwnd,
            counts: flow.counts,
        }
    }
}

/// Per-flow memory of the diagnoser: snapshots and hysteresis counters.
#[derive(Debug, Default)]
struct FlowMemory {
    snapshots: VecDeque<Snapshot>,
    shown: Option<Verdict>,
    candidate: Option<LimitedBy>,
    candidate_runs: u32,
    flag_runs: u32,
    unflag_runs: u32,
    flagged: bool,
}

/// What the window shows, before hysteresis.
#[derive(Clone, Debug)]
struct Window {
    secs: f64,
    goodput_bps: f64,
    sent_bytes: u64,
    received_bytes: u64,
    acked_bytes: u64,
    loss_ratio: f64,
    busy_share: f64,
    rwnd_share: f64,
    sndbuf_share: f64,
    mean_cwnd: f64,
    mean_srtt_us: f64,
    min_rtt_us: f64,
    /// Share of samples in the window with a full congestion window.
    cwnd_full_share: f64,
    /// Share of samples in the window where the sender had nothing to send.
    no_backlog_share: f64,
    /// Share of samples the kernel marked application-limited.
    app_limited_share: f64,
    /// Share of samples with the send buffer under 60 % full.
    sndbuf_low_share: f64,
    /// Share of the window's intervals (between snapshots) with at least one retransmission:
    /// random loss shows up in nearly every interval, a congestion episode in one or two.
    lossy_interval_share: f64,
}

fn window_of(snaps: &VecDeque<Snapshot>) -> Option<Window> {
    let (first, last) = (snaps.front()?, snaps.back()?);
    let dt_ns = last.ts_ns.checked_sub(first.ts_ns)?;
    if dt_ns == 0 {
        return None;
    }
    let secs = dt_ns as f64 / NS_PER_SEC as f64;
    let span_us = dt_ns as f64 / 1000.0;
    let share = |a: u64, b: u64| (b.saturating_sub(a) as f64 / span_us).clamp(0.0, 1.0);
    let acked = last.bytes_acked.saturating_sub(first.bytes_acked);
    let received = last.bytes_received.saturating_sub(first.bytes_received);
    let sent = last.bytes_sent.saturating_sub(first.bytes_sent);
    let retrans = last.bytes_retrans.saturating_sub(first.bytes_retrans);
    // The first snapshot only anchors the deltas; means are over the rest.
    let tail: Vec<&Snapshot> = snaps.iter().skip(1).collect();
    let n = tail.len().max(1) as f64;
    let mean = |f: &dyn Fn(&Snapshot) -> f64| tail.iter().map(|s| f(s)).sum::<f64>() / n;
    let min_rtt = tail.iter().map(|s| s.min_rtt_us).filter(|&v| v > 0).min().unwrap_or(0);
    let samples = last.counts.samples.saturating_sub(first.counts.samples);
    let count_share =
        |a: u64, b: u64| if samples == 0 { 0.0 } else { (b.saturating_sub(a) as f64 / samples as f64).clamp(0.0, 1.0) };
    Some(Window {
        secs,
        goodput_bps: (acked + received) as f64 * 8.0 / secs,
        sent_bytes: sent,
        received_bytes: received,
        acked_bytes: acked,
        loss_ratio: if sent > 0 { retrans as f64 / sent as f64 } else { 0.0 },
        busy_share: share(first.busy_us, last.busy_us),
        rwnd_share: share(first.rwnd_us, last.rwnd_us),
        sndbuf_share: share(first.sndbuf_us, last.sndbuf_us),
        mean_cwnd: mean(&|s| f64::from(s.cwnd)),
        mean_srtt_us: mean(&|s| f64::from(s.srtt_us)),
        min_rtt_us: f64::from(min_rtt),
        cwnd_full_share: count_share(first.counts.cwnd_full, last.counts.cwnd_full),
        no_backlog_share: count_share(first.counts.no_backlog, last.counts.no_backlog),
        app_limited_share: count_share(first.counts.app_limited, last.counts.app_limited),
        sndbuf_low_share: count_share(first.counts.sndbuf_low, last.counts.sndbuf_low),
        lossy_interval_share: {
            let intervals = snaps.len().saturating_sub(1).max(1) as f64;
            let lossy =
                snaps.iter().zip(snaps.iter().skip(1)).filter(|(a, b)| b.total_retrans > a.total_retrans).count();
            lossy as f64 / intervals
        },
    })
}

/// Mathis et al. (1997) steady-state bound for a Reno-like flow, bits/s.
pub fn mathis_bps(mss: u32, rtt_s: f64, loss: f64) -> f64 {
    if rtt_s <= 0.0 || loss <= 0.0 {
        return f64::INFINITY;
    }
    f64::from(mss) * 8.0 / rtt_s * 1.22 / loss.sqrt()
}

fn classify(w: &Window, cfg: &DiagnosisConfig, cc: &str) -> LimitedBy {
    let moved = w.sent_bytes + w.received_bytes;
    if moved == 0 {
        return LimitedBy::Idle;
    }
    if w.received_bytes > w.acked_bytes.saturating_mul(4) && w.sent_bytes < w.received_bytes / 4 {
        return LimitedBy::Receiving;
    }
    if w.rwnd_share >= cfg.stall_share {
        return LimitedBy::ReceiveWindow;
    }
    // The kernel marks delivery-rate samples application-limited only while packets in flight
    // are below cwnd and nothing is left to send: a stream that keeps up with its application.
    // A sender that never fills its send buffer is paced by its application, even when loss
    // recovery keeps its small cwnd full.
    if w.app_limited_share >= cfg.app_limited_share
        || w.no_backlog_share >= cfg.no_backlog_share
        || w.sndbuf_low_share >= cfg.sndbuf_low_share
    {
        return LimitedBy::Application;
    }
    // A full cwnd is the root cause even when the application then blocks on its send buffer.
    if w.cwnd_full_share >= cfg.cwnd_full_share {
        return LimitedBy::CongestionWindow;
    }
    if w.sndbuf_share >= cfg.stall_share {
        return LimitedBy::SendBuffer;
    }
    // The write queue ran dry much of the time. (Chrono "busy" runs until the retransmit queue
    // empties too, so on a lossy long path this alone would miss streams that keep up.)
    if w.busy_share + w.rwnd_share + w.sndbuf_share < cfg.min_busy_share {
        return LimitedBy::Application;
    }
    if is_loss_based(cc) {
        LimitedBy::CongestionWindow
    } else {
        LimitedBy::Pacing
    }
}

fn mbit(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else {
        format!("{:.1} Mbit/s", bps / 1e6)
    }
}

fn evidence_of(w: &Window, mss: u32) -> Evidence {
    let rtt_s = w.mean_srtt_us / 1e6;
    Evidence {
        loss_ratio: w.loss_ratio,
        srtt_ms: w.mean_srtt_us / 1000.0,
        min_rtt_ms: w.min_rtt_us / 1000.0,
        mean_cwnd: w.mean_cwnd,
        goodput_bps: w.goodput_bps,
        mathis_bps: mathis_bps(mss, rtt_s, w.loss_ratio),
        mss,
        busy_share: w.busy_share,
        rwnd_share: w.rwnd_share,
        sndbuf_share: w.sndbuf_share,
        cwnd_full_share: w.cwnd_full_share,
        app_limited_share: w.app_limited_share,
        sndbuf_low_share: w.sndbuf_low_share,
        lossy_interval_share: w.lossy_interval_share,
    }
}

/// The flag condition on one window; returns why not, for the verdict text.
fn flag_condition(flow: &Flow, w: &Window, limited: LimitedBy, cfg: &DiagnosisConfig) -> Result<(), &'static str> {
    let total = flow.latest.bytes_acked + flow.latest.bytes_received;
    if !is_loss_based(&flow.latest.cc) {
        return Err("congestion control is not loss-based");
    }
    if limited != LimitedBy::CongestionWindow {
        return Err("not congestion-window-limited");
    }
    // Heavy: it moved real data and either moves it fast or wants to (its cwnd is always full,
    // which is exactly what a flow crushed to a few Mbit/s by loss looks like).
    let wants_more = w.cwnd_full_share >= 0.9;
    if !cfg.is_heavy(total, w.goodput_bps, wants_more) {
        return Err("not a heavy flow");
    }
    if w.loss_ratio < cfg.min_loss_ratio || w.lossy_interval_share < cfg.min_lossy_interval_share {
        return Err("no sustained loss");
    }
    if w.min_rtt_us <= 0.0 || w.mean_srtt_us > w.min_rtt_us * cfg.queue_ratio + cfg.queue_slack_us {
        return Err("RTT is inflated above min_rtt: a queue is building, so the losses look congestive");
    }
    Ok(())
}

#[derive(Debug, Default)]
pub struct Diagnoser {
    cfg: DiagnosisConfig,
    flows: HashMap<u64, FlowMemory>,
}

impl Diagnoser {
    pub fn new(cfg: DiagnosisConfig) -> Self {
        Self { cfg, flows: HashMap::new() }
    }

    /// Take a snapshot of every flow and re-judge it. Call at a steady rate (e.g. once a second);
    /// `now_ns` is the samples' clock (monotonic), so a flow without new samples is seen idle.
    pub fn evaluate(&mut self, table: &FlowTable, env: &Environment, now_ns: u64) {
        self.flows.retain(|cookie, _| table.get(*cookie).is_some());
        for flow in table.flows() {
            let mem = self.flows.entry(flow.cookie()).or_default();
            if flow.is_closed() && mem.shown.is_some() {
                // Keep the last verdict of a closed flow as it was.
                continue;
            }
            let mut snap = Snapshot::of(flow);
            snap.ts_ns = snap.ts_ns.max(now_ns);
            if mem.snapshots.back().is_some_and(|s| s.ts_ns >= snap.ts_ns) {
                continue;
            }
            mem.snapshots.push_back(snap);
            while mem.snapshots.len() > self.cfg.window + 1 {
                mem.snapshots.pop_front();
            }
            let verdict = judge(flow, mem, &self.cfg, env);
            mem.shown = Some(verdict);
        }
    }

    pub fn config(&self) -> &DiagnosisConfig {
        &self.cfg
    }

    pub fn verdict(&self, cookie: u64) -> Option<&Verdict> {
        self.flows.get(&cookie).and_then(|m| m.shown.as_ref())
    }

    pub fn flagged(&self) -> impl Iterator<Item = u64> + '_ {
        self.flows.iter().filter(|(_, m)| m.flagged).map(|(c, _)| *c)
    }
}

fn judge(flow: &Flow, mem: &mut FlowMemory, cfg: &DiagnosisConfig, env: &Environment) -> Verdict {
    let observed = flow.age_secs();
    let Some(w) = window_of(&mem.snapshots) else { return Verdict::unknown(observed) };
    if observed < cfg.min_observed_secs || mem.snapshots.len() < 3 {
        return Verdict::unknown(observed);
    }
    let raw = classify(&w, cfg, &flow.latest.cc);

    // Hysteresis on limited_by: a new class must hold `confirm` evaluations in a row.
    let previous = mem.shown.as_ref().map(|v| v.limited_by).filter(|l| *l != LimitedBy::Unknown);
    let limited = match previous {
        None => raw,
        Some(prev) if prev == raw => {
            mem.candidate = None;
            prev
        }
        Some(prev) => {
            if mem.candidate == Some(raw) {
                mem.candidate_runs += 1;
            } else {
                mem.candidate = Some(raw);
                mem.candidate_runs = 1;
            }
            if mem.candidate_runs >= cfg.confirm {
                mem.candidate = None;
                raw
            } else {
                prev
            }
        }
    };

    // Hysteresis on the flag: on after `confirm` windows in a row, off after `release`.
    let condition = flag_condition(flow, &w, limited, cfg);
    if condition.is_ok() {
        mem.flag_runs += 1;
        mem.unflag_runs = 0;
        if mem.flag_runs >= cfg.confirm {
            mem.flagged = true;
        }
    } else {
        mem.flag_runs = 0;
        mem.unflag_runs += 1;
        if mem.unflag_runs >= cfg.release {
            mem.flagged = false;
        }
    }

    let s = &flow.latest;
    let ev = evidence_of(&w, s.mss);
    let mut text = String::new();
    if mem.flagged {
        let _ = write!(
            text,
            "{} is held back by loss-based congestion control: {} loses {:.2}% of what it sends while srtt {:.1} ms stays near min_rtt {:.1} ms (no queue: the losses are not congestion). \
             Mean cwnd {:.0} x {} B per {:.1} ms gives {}; the Mathis bound at this loss is {}. A model-based algorithm (BBR) does not treat random loss as congestion.",
            flow_name(flow),
            s.cc,
            ev.loss_ratio * 100.0,
            ev.srtt_ms,
            ev.min_rtt_ms,
            ev.mean_cwnd,
            s.mss,
            ev.srtt_ms,
            mbit(ev.goodput_bps),
            mbit(ev.mathis_bps),
        );
    } else {
        let _ = write!(text, "{} ({} over {:.0} s", limited.describe(), mbit(w.goodput_bps), w.secs);
        if w.loss_ratio > 0.0 {
            let _ = write!(text, ", {:.2}% retransmitted", w.loss_ratio * 100.0);
        }
        text.push(')');
        if let Err(why) = condition {
            if is_loss_based(&s.cc) && w.loss_ratio >= cfg.min_loss_ratio && limited == LimitedBy::CongestionWindow {
                let _ = write!(text, "; not flagged: {why}");
            }
        }
    }
    Verdict {
        limited_by: limited,
        flagged: mem.flagged,
        text,
        evidence: Some(ev),
        fix: if mem.flagged { fix::fix_commands(flow, env) } else { Vec::new() },
    }
}

fn flow_name(flow: &Flow) -> String {
    let s = &flow.latest;
    format!("{} -> {}", s.local, s.remote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::model::tests::sample;
    use crate::analysis::model::TableConfig;

    use crate::analysis::event::Sample;

    fn test_env() -> Environment {
        Environment {
            bbr_available: true,
            host_netns: 1,
            netns_pids: HashMap::from([(4026531840, 77)]),
            netns_names: HashMap::new(),
        }
    }

    /// Feed `secs` seconds of a synthetic flow (one sample per 100 ms) and evaluate each second.
    fn run(cc: &str, secs: u64, step: impl Fn(u64, &mut Sample)) -> (Diagnoser, FlowTable) {
        run_in(&test_env(), cc, secs, step)
    }

    fn run_in(env: &Environment, cc: &str, secs: u64, step: impl Fn(u64, &mut Sample)) -> (Diagnoser, FlowTable) {
        let mut table = FlowTable::new(TableConfig::default());
        let mut d = Diagnoser::new(DiagnosisConfig::default());
        for tick in 0..=secs * 10 {
            let mut s = sample(1, tick * 100);
            s.cc = cc.into();
            step(tick, &mut s);
            table.ingest(&s);
            if tick % 10 == 0 {
                d.evaluate(&table, env, tick * 100_000_000);
            }
        }
        (d, table)
    }

    /// Bulk sender at `bps` with `loss` retransmitted share, busy all the time.
    fn bulk(bps: u64, loss: f64, srtt_us: u32) -> impl Fn(u64, &mut Sample) {
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
            s.packets_out = 60;
            s.cwnd_limited = true;
        }
    }

    #[test]
    fn mathis_bound() {
        // 1448 B, 30 ms, 2 %: 386 kbit/s * 8.63 = 3.33 Mbit/s.
        let b = mathis_bps(1448, 0.030, 0.02);
        assert!((b - 3.331e6).abs() < 5e3, "{b}");
        assert!(mathis_bps(1448, 0.03, 0.0).is_infinite());
    }

    #[test]
    fn not_enough_data_at_first() {
        let (d, _) = run("cubic", 2, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::Unknown);
        assert!(v.text.contains("not enough data"), "{}", v.text);
        assert!(!v.flagged);
    }

    #[test]
    fn cubic_bulk_on_random_loss_is_flagged_with_evidence_and_fix() {
        let (d, _) = run("cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert!(v.flagged, "{v:?}");
        assert_eq!(v.limited_by, LimitedBy::CongestionWindow);
        let e = v.evidence.as_ref().expect("evidence");
        assert!((e.loss_ratio - 0.02).abs() < 0.001);
        assert!((e.mathis_bps - mathis_bps(1448, 0.031, e.loss_ratio)).abs() < 1.0);
        assert!(v.text.contains("Mathis bound"), "{}", v.text);
        assert!(
            v.fix.iter().any(|c| c == "nsenter --net=/proc/77/ns/net sysctl -w net.ipv4.tcp_congestion_control=bbr"),
            "{:?}",
            v.fix
        );
        assert!(v.fix.iter().any(|c| c.contains("roll back") && c.contains("tcp_congestion_control=cubic")));
        assert!(v.fix.iter().any(|c| c.contains("/etc/sysctl.d/")));
    }

    #[test]
    fn fix_loads_bbr_when_missing_and_names_the_netns() {
        let mut env = test_env();
        env.bbr_available = false;
        env.netns_names.insert(4026531840, "video".into());
        let (d, _) = run_in(&env, "cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert!(v.flagged);
        assert!(v.fix[0].starts_with("modprobe tcp_bbr"), "{:?}", v.fix);
        assert_eq!(v.fix[1], "ip netns exec video sysctl -w net.ipv4.tcp_congestion_control=bbr");
        // The host's own namespace needs no prefix.
        env.host_netns = 4026531840;
        let (d, _) = run_in(&env, "cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.fix[1], "sysctl -w net.ipv4.tcp_congestion_control=bbr");
    }

    #[test]
    fn bbr_is_never_flagged() {
        let (d, _) = run("bbr", 10, bulk(40_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert!(!v.flagged);
    }

    #[test]
    fn queue_building_means_congestive_loss_and_no_flag() {
        let (d, _) = run("cubic", 10, bulk(100_000_000, 0.01, 80_000));
        let v = d.verdict(1).expect("verdict");
        assert!(!v.flagged);
        assert!(v.text.contains("queue is building"), "{}", v.text);
    }

    #[test]
    fn one_loss_burst_is_not_sustained_loss() {
        // A slow-start overshoot: 3 % of the first second's bytes retransmitted, then none.
        let (d, _) = run("cubic", 10, |tick, s| {
            bulk(40_000_000, 0.0, 31_000)(tick, s);
            s.bytes_retrans = if tick >= 40 { 150_000 } else { 0 };
            s.total_retrans = if tick >= 40 { 100 } else { 0 };
        });
        let v = d.verdict(1).expect("verdict");
        assert!(!v.flagged, "{v:?}");
    }

    #[test]
    fn no_loss_no_flag() {
        let (d, _) = run("cubic", 10, bulk(100_000_000, 0.0, 31_000));
        assert!(!d.verdict(1).expect("verdict").flagged);
    }

    #[test]
    fn paced_app_is_application_limited() {
        // 0.5 Mbit/s in small writes: busy 10 % of the time, no backlog.
        let (d, _) = run("cubic", 10, |tick, s| {
            s.bytes_acked = 500_000 / 8 * tick / 10;
            s.bytes_sent = s.bytes_acked + s.bytes_acked / 50;
            s.bytes_retrans = s.bytes_acked / 50;
            s.busy_us = tick * 10_000;
            s.app_limited = true;
            s.cwnd_limited = false;
            s.wmem_queued = 2_000;
            s.min_rtt_us = 30_000;
            s.srtt_us = 30_500;
        });
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::Application);
        assert!(!v.flagged);
    }

    #[test]
    fn stream_that_keeps_its_send_buffer_low_is_application_limited_even_in_recovery() {
        // BBR under random loss: cwnd shrinks to what is in flight (full), busy never stops,
        // rate samples only sometimes app-limited, but the send buffer stays mostly empty.
        let (d, _) = run("bbr", 10, |tick, s| {
            s.bytes_acked = 25_000_000 / 8 * tick / 10;
            s.bytes_sent = s.bytes_acked + s.bytes_acked / 40;
            s.bytes_retrans = s.bytes_acked / 40;
            s.busy_us = tick * 100_000;
            s.app_limited = tick % 3 == 0;
            s.cwnd_limited = tick % 2 == 0;
            s.notsent_bytes = 30_000;
            s.wmem_queued = 20_000;
            s.sndbuf = 200_000;
        });
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::Application);
        assert!(!v.flagged);
    }

    #[test]
    fn receive_window_limited() {
        let (d, _) = run("cubic", 10, |tick, s| {
            s.bytes_acked = 1_000_000 * tick;
            s.bytes_sent = s.bytes_acked;
            s.busy_us = tick * 40_000;
            s.rwnd_limited_us = tick * 60_000;
            s.min_rtt_us = 30_000;
            s.srtt_us = 30_000;
        });
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::ReceiveWindow);
        assert!(!v.flagged);
    }

    #[test]
    fn idle_and_receiving() {
        let (d, _) = run("cubic", 6, |_, _| {});
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Idle);
        let (d, _) = run("cubic", 6, |tick, s| s.bytes_received = tick * 100_000);
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Receiving);
    }

    #[test]
    fn verdict_does_not_flap_on_one_odd_window() {
        // Application-limited throughout except one backlogged second.
        let (d, _) = run("cubic", 12, |tick, s| {
            s.bytes_acked = 100_000 * tick;
            s.bytes_sent = s.bytes_acked;
            s.busy_us = (0..tick).map(|t| if (60..70).contains(&t) { 100_000 } else { 10_000 }).sum::<u64>();
            s.cwnd_limited = false;
            s.wmem_queued = if (60..70).contains(&tick) { 87_040 } else { 0 };
            s.min_rtt_us = 30_000;
            s.srtt_us = 30_000;
        });
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Application);
    }

    #[test]
    fn flag_needs_confirmation_and_releases_slowly() {
        // Flagged regime for 10 s, then loss stops: the flag holds for `release` windows.
        let mut table = FlowTable::new(TableConfig::default());
        let mut d = Diagnoser::new(DiagnosisConfig::default());
        let env = Environment::default();
        let lossy = bulk(4_000_000, 0.02, 31_000);
        let mut flags = Vec::new();
        let mut retrans_at_switch = 0;
        for tick in 0..=200u64 {
            let mut s = sample(1, tick * 100);
            lossy(tick, &mut s);
            if tick > 100 {
                if retrans_at_switch == 0 {
                    retrans_at_switch = s.bytes_retrans;
                }
                s.bytes_retrans = retrans_at_switch; // no more loss
                s.total_retrans = (retrans_at_switch / 1448) as u32;
            }
            table.ingest(&s);
            if tick % 10 == 0 {
                d.evaluate(&table, &env, tick * 100_000_000);
                flags.push(d.verdict(1).map(|v| v.flagged).unwrap_or(false));
            }
        }
        let first_flag = flags.iter().position(|f| *f).expect("flagged at some point");
        assert!(first_flag <= 10, "{flags:?}");
        let last_flag = flags.iter().rposition(|f| *f).expect("flag");
        // Loss stops at 10 s; the window needs ~5 s to forget it and then 5 evaluations.
        assert!(last_flag > 11 && last_flag < 20, "{flags:?}");
        assert!(!flags[20]);
    }
}
