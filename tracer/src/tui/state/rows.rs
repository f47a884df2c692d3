//! The table's rows: a copy of what is shown of each flow (and of each heavy UDP flow), made
//! from the analysis and refilled in place from frame to frame, so a frame's cost follows the
//! flows' numbers, not their text.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::analysis::diagnosis::{LimitedBy, Verdict};
use crate::analysis::flow_table::Flow;
use crate::analysis::sample::{CaState, Sample, TcpState};
use crate::analysis::udp::{process_label, AppProto, Process, UdpFlow};
use crate::analysis::Analysis;
use crate::tui::origin::Origin;

/// One table row: a copy of what is shown of a flow, so a paused display stays frozen while the
/// table underneath moves on, and sorting never touches the live flows.
#[derive(Clone, Debug)]
pub(crate) struct FlowRow {
    pub cookie: u64,
    /// The flow's container or cgroup, shared by the rows of one cgroup.
    pub origin: Arc<Origin>,
    pub comm: Option<String>,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Its network namespace (inode): what `f` fixes.
    pub netns: u32,
    /// Shared by the rows of one congestion control.
    pub cc: Arc<str>,
    pub ca_state: CaState,
    pub closed: bool,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_us: u32,
    pub min_rtt_us: u32,
    pub delivery_bps: u64,
    pub throughput_bps: f64,
    /// Bytes put on the wire, retransmissions included, bits/s (weighs `retrans_ratio`).
    pub send_bps: f64,
    pub retrans_ratio: f64,
    pub limited_by: LimitedBy,
    pub flagged: bool,
    pub heavy: bool,
    /// For a flagged flow: the loss it is held back on and what the path showed it can carry.
    pub finding: Option<Finding>,
    /// The process that relays this local hop over UDP (its command name).
    pub relayed_by: Option<String>,
    /// The lower-case text the filter searches, once written ("" until then).
    hay: String,
    /// The flow's text generation `comm` and `cc` were copied at.
    text_generation: u64,
}

/// One heavy UDP flow, for the UDP strip under the table.
#[derive(Clone, Debug)]
pub(crate) struct UdpRow {
    pub cookie: u64,
    /// `quic`, `wireguard` or `udp`.
    pub carries: &'static str,
    /// `comm (pid N)`.
    pub owner: String,
    pub origin: Arc<Origin>,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub tx_bps: f64,
    pub rx_bps: f64,
    /// tailscaled in userspace-networking mode: the TUN advice applies.
    pub userspace_vpn: bool,
    /// A tunnel engine's flow: how many of the kernel's TCP flows it carries (they decide its
    /// rate); `None` for any other.
    pub carried: Option<usize>,
    /// The TCP hops this process relays: (local, remote, the hop's process), listed with it.
    pub relays: Vec<(SocketAddr, SocketAddr, Option<String>)>,
}

impl UdpRow {
    pub(crate) fn of(flow: &UdpFlow, analysis: &Analysis, origin: Arc<Origin>) -> Self {
        let s = &flow.latest;
        // From the relays known, not from every TCP flow: a UDP row costs no more with 100,000.
        let mut relays: Vec<(SocketAddr, SocketAddr, Option<String>)> = analysis
            .relays()
            .filter(|(_, r)| r.udp_cookie == flow.cookie())
            .filter_map(|(&cookie, _)| analysis.table.get(cookie))
            .map(|f| (f.latest.local, f.latest.remote, f.latest.owner.as_ref().map(|o| o.comm.to_string())))
            .collect();
        relays.sort();
        Self {
            cookie: flow.cookie(),
            carries: flow.app_proto.map_or("udp", AppProto::name),
            owner: process_label(s.owner.as_ref()),
            origin,
            local: s.local,
            remote: s.remote,
            tx_bps: flow.tx_bps,
            rx_bps: flow.rx_bps,
            userspace_vpn: s.owner.as_ref().is_some_and(Process::is_tailscaled_userspace),
            carried: analysis.udp_verdict(flow).filter(|v| v.tunnel).map(|v| v.carries.len()),
            relays,
        }
    }
}

/// The numbers the findings strip quotes for a flagged flow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Finding {
    /// Retransmitted share of bytes over the loss episodes.
    pub loss_ratio: f64,
    pub goodput_bps: f64,
    /// What the path delivered to it without queueing, when well above its goodput.
    pub available_bps: Option<f64>,
    /// The rate a policer on the path passes, when the losses show one.
    pub policed_bps: Option<f64>,
    /// Judged from the receiving end: the sender, and its fix, are on another host.
    pub remote: bool,
}

/// A row's text: its strings (their memory handed on from what the row showed before) and
/// the filter's text (kept if it still holds, else empty, to be written again if needed).
struct RowText {
    comm: Option<String>,
    cc: Arc<str>,
    hay: String,
}

/// The congestion controls' names, one copy each, shared by the rows: a handful, so a list.
#[derive(Debug, Default)]
pub(crate) struct CcNames(Vec<Arc<str>>);

impl CcNames {
    fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.0.iter().find(|n| ***n == *name) {
            return Arc::clone(known);
        }
        let new: Arc<str> = Arc::from(name);
        self.0.push(Arc::clone(&new));
        new
    }
}

/// What a row shows of its flow's verdict.
struct Judgement {
    flagged: bool,
    limited_by: LimitedBy,
    finding: Option<Finding>,
    relayed_by: Option<String>,
}

impl Judgement {
    /// What `verdict` says, written into `relayed_by`'s memory.
    fn of(verdict: Option<&Verdict>, mut relayed_by: Option<String>) -> Self {
        let finding = verdict.filter(|v| v.flagged).and_then(|v| v.evidence.as_ref()).map(|e| Finding {
            loss_ratio: if e.episode_loss_ratio > 0.0 { e.episode_loss_ratio } else { e.loss_ratio },
            goodput_bps: e.goodput_bps,
            available_bps: e.available_bps.map(|a| a + e.goodput_bps),
            policed_bps: e.policer.as_ref().map(|p| p.rate_bps),
            remote: e.remote_sender.is_some(),
        });
        assign(&mut relayed_by, verdict.and_then(|v| v.relayed_by.as_ref()).map(|r| r.comm.as_str()));
        Self {
            flagged: verdict.is_some_and(|v| v.flagged),
            limited_by: verdict.map_or(LimitedBy::Unknown, |v| v.limited_by),
            finding,
            relayed_by,
        }
    }
}

/// The verdict a refilled row shows.
#[derive(Clone, Copy)]
pub(crate) enum Judged<'a> {
    /// Its flow's verdict, as the analysis has it now.
    Now(Option<&'a Verdict>),
    /// The one it shows already: the row showed this flow, and no verdict changed since.
    Unchanged,
}

/// `to` holding `from`, its memory reused.
fn assign(to: &mut Option<String>, from: Option<&str>) {
    match (to.as_mut(), from) {
        (Some(old), Some(new)) => {
            old.clear();
            old.push_str(new);
        }
        (_, new) => *to = new.map(str::to_string),
    }
}

impl FlowRow {
    /// Heavy (shown by default) as the diagnosis defines it, or flagged.
    pub(crate) fn of(
        flow: &Flow,
        verdict: Option<&Verdict>,
        analysis: &Analysis,
        origin: Arc<Origin>,
        names: &mut CcNames,
    ) -> Self {
        let s = &flow.latest;
        let text =
            RowText { comm: s.owner.as_ref().map(|o| o.comm.to_string()), cc: names.get(&s.cc), hay: String::new() };
        Self::build(flow, Judgement::of(verdict, None), analysis, origin, text)
    }

    /// This row, now showing `flow`: refilled in place with its strings' memory reused, so a
    /// frame of 10,000 flows allocates nothing for them. The filter's text is kept while what
    /// it is made of does not change.
    pub(crate) fn refill(
        &mut self,
        flow: &Flow,
        judged: Judged<'_>,
        analysis: &Analysis,
        origin: Arc<Origin>,
        names: &mut CcNames,
    ) {
        // The same flow with the same text: its strings are not even read (a cache miss each).
        let same_text = self.cookie == flow.cookie() && self.text_generation == flow.text_generation;
        let judgement = match judged {
            Judged::Now(verdict) => Judgement::of(verdict, self.relayed_by.take()),
            Judged::Unchanged => Judgement {
                flagged: self.flagged,
                limited_by: self.limited_by,
                finding: self.finding,
                relayed_by: self.relayed_by.take(),
            },
        };
        let mut hay = std::mem::take(&mut self.hay);
        if !self.searched_as(&flow.latest, same_text, &judgement, &origin) {
            hay.clear();
        }
        let s = &flow.latest;
        let mut comm = self.comm.take();
        let cc = if same_text {
            Arc::clone(&self.cc)
        } else {
            assign(&mut comm, s.owner.as_ref().map(|o| o.comm.as_str()));
            names.get(&s.cc)
        };
        *self = Self::build(flow, judgement, analysis, origin, RowText { comm, cc, hay });
    }

    fn build(flow: &Flow, judgement: Judgement, analysis: &Analysis, origin: Arc<Origin>, text: RowText) -> Self {
        let RowText { comm, cc, hay } = text;
        let Judgement { flagged, limited_by, finding, relayed_by } = judgement;
        let s = &flow.latest;
        let closed = flow.is_closed() || matches!(s.tcp_state, TcpState::Close | TcpState::TimeWait);
        Self {
            cookie: s.cookie,
            origin,
            comm,
            local: s.local,
            remote: s.remote,
            netns: s.netns,
            cc,
            ca_state: s.ca_state,
            closed,
            cwnd: s.snd_cwnd,
            ssthresh: s.snd_ssthresh,
            srtt_us: s.srtt_us,
            min_rtt_us: s.min_rtt_us,
            delivery_bps: s.delivery_rate_bps,
            throughput_bps: flow.rates.throughput_bps,
            send_bps: flow.rates.send_rate_bps,
            retrans_ratio: flow.rates.retrans_ratio,
            limited_by,
            flagged,
            finding,
            relayed_by,
            heavy: analysis.diagnoser.config().flow_is_heavy_as(flow, limited_by, flagged),
            hay,
            text_generation: flow.text_generation,
        }
    }

    /// Whether what the filter searches in this row is the same for sample `s` (with the same
    /// text, if `same_text`) judged so, in `origin`.
    fn searched_as(&self, s: &Sample, same_text: bool, judgement: &Judgement, origin: &Arc<Origin>) -> bool {
        self.local == s.local
            && self.remote == s.remote
            && (same_text || (*self.cc == *s.cc && self.comm.as_deref() == s.owner.as_ref().map(|o| o.comm.as_str())))
            && self.limited_by == judgement.limited_by
            && self.flagged == judgement.flagged
            && (Arc::ptr_eq(&self.origin, origin) || self.origin.search == origin.search)
    }

    /// Whether the filter's lower-case `terms` are all in the text it searches: addresses
    /// with ports, cc, comm, limited_by, and the container (name, id, runtime, pod, cgroup path
    /// and `cgroup=ID`). The text is written on the first search and kept while it holds.
    pub(crate) fn matches(&mut self, terms: &[String]) -> bool {
        if self.hay.is_empty() {
            let mut hay = std::mem::take(&mut self.hay);
            let _ = write!(
                hay,
                "{} {} {} {} {} {}",
                self.local,
                self.remote,
                self.cc,
                self.comm.as_deref().unwrap_or(""),
                self.limited_by.name(),
                if self.flagged { "flagged" } else { "" },
            );
            hay.make_ascii_lowercase();
            hay.push(' ');
            hay.push_str(&self.origin.search);
            self.hay = hay;
        }
        terms.iter().all(|t| self.hay.contains(t.as_str()))
    }
}
