//! What the UI knows and remembers: the rows it shows (a snapshot of the pipeline's analysis
//! taken once per frame, filtered and ordered then, never per event), a copy of the flow the
//! detail view shows, the selection, the view and the header facts. No terminal, no clock and
//! no analysis of its own here: [`AppState::sync`] copies what it needs from the analysis the
//! pipeline lends it, keys come in through [`super::update`], and [`super::view`] only reads.
//!
//! A frame's cost follows the flows' numbers, not their text: rows are refilled in place, a
//! flow's strings are copied only when its text changed, its verdict only after an evaluation,
//! and the order is worked out only where looked at ([`super::order`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::analysis::container::CgroupInfo;
use crate::analysis::diagnosis::{LimitedBy, Verdict};
use crate::analysis::environment::Environment;
use crate::analysis::event::{CaState, Sample, TcpState};
use crate::analysis::filter::FilterSpec;
use crate::analysis::live_fix::Plan;
use crate::analysis::model::Flow;
use crate::analysis::route::Route;
use crate::analysis::schema::{ActionKind, ActionRecord};
use crate::analysis::udp::{process_label, AppProto, Process, UdpFlow};
use crate::analysis::Analysis;
use crate::pipeline::Status;
use crate::source::SourceCounters;

use super::order::{self, DisplayOrder};
use super::origin::{Origin, Origins};

use tracer_common::NS_PER_SEC;

/// Facts for the header that the UI cannot know by itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderInfo {
    /// Host name.
    pub host: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// What the samples come from ([`crate::source::EventSource::describe`]).
    pub source: String,
    /// Recording status ("recording to x.cctrace"), `None` when not recording.
    pub recording: Option<String>,
    /// Filters applied before the UI (the kernel filter: command-line options, or what the
    /// filter prompt set), one short phrase each.
    pub filters: Vec<String>,
}

impl HeaderInfo {
    /// Header for samples taken on this machine: its host name and kernel release ("?" when
    /// unreadable: the header informs, it is never a reason to fail).
    pub fn this_host(source: impl Into<String>) -> Self {
        let known = |s: String| if s.is_empty() { "?".to_string() } else { s };
        Self {
            host: known(crate::host::hostname()),
            kernel: known(crate::host::kernel_release()),
            source: source.into(),
            recording: None,
            filters: Vec::new(),
        }
    }
}

/// Table columns, in display order. Sorting works on every one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Column {
    Flag,
    Container,
    Process,
    Local,
    Remote,
    Cc,
    CaState,
    Cwnd,
    Ssthresh,
    Rtt,
    MinRtt,
    Delivery,
    Throughput,
    Retrans,
    LimitedBy,
}

impl Column {
    pub const ALL: [Column; 15] = [
        Self::Flag,
        Self::Container,
        Self::Process,
        Self::Local,
        Self::Remote,
        Self::Cc,
        Self::CaState,
        Self::Cwnd,
        Self::Ssthresh,
        Self::Rtt,
        Self::MinRtt,
        Self::Delivery,
        Self::Throughput,
        Self::Retrans,
        Self::LimitedBy,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Self::Flag => "!",
            Self::Container => "container",
            Self::Process => "proc",
            Self::Local => "local",
            Self::Remote => "remote",
            Self::Cc => "cc",
            Self::CaState => "ca",
            Self::Cwnd => "cwnd",
            Self::Ssthresh => "ssth",
            Self::Rtt => "rtt",
            Self::MinRtt => "min",
            Self::Delivery => "deliv",
            Self::Throughput => "thpt",
            Self::Retrans => "retr",
            Self::LimitedBy => "limited",
        }
    }

    /// Numbers read best largest first, names alphabetically.
    pub fn natural_dir(self) -> SortDir {
        match self {
            Self::Container | Self::Process | Self::Local | Self::Remote | Self::Cc | Self::LimitedBy => SortDir::Asc,
            _ => SortDir::Desc,
        }
    }

    pub fn next(self) -> Self {
        let i = Self::ALL.iter().position(|c| *c == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortDir {
    Asc,
    Desc,
}

impl SortDir {
    pub fn reversed(self) -> Self {
        match self {
            Self::Asc => Self::Desc,
            Self::Desc => Self::Asc,
        }
    }

    pub fn arrow(self) -> &'static str {
        match self {
            Self::Asc => "▲",
            Self::Desc => "▼",
        }
    }
}

/// What fills the screen; help is drawn over either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Table,
    Detail,
    Help,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Screen {
    Table,
    Detail,
}

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
    /// The TCP hops this process relays: (local, remote, the hop's process), listed with it.
    pub relays: Vec<(SocketAddr, SocketAddr, Option<String>)>,
}

impl UdpRow {
    fn of(flow: &UdpFlow, analysis: &Analysis, origin: Arc<Origin>) -> Self {
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
struct CcNames(Vec<Arc<str>>);

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
enum Judged<'a> {
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
    fn of(
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
    fn refill(
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
    fn matches(&mut self, terms: &[String]) -> bool {
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

/// Source counters and the event rate derived from their deltas.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub received: u64,
    pub lost: u64,
    pub decode_errors: u64,
    pub kernel_read_errors: u64,
    pub flow_map_full: u64,
    /// Samples the kernel filter kept out of the ring.
    pub filtered: u64,
    /// Samples per second over the last measured interval (at least one second long).
    pub events_per_sec: f64,
    last: Option<(u64, u64)>,
}

impl Counters {
    fn observe(&mut self, c: SourceCounters, now_ns: u64) {
        self.received = c.received;
        self.lost = c.lost;
        self.decode_errors = c.decode_errors;
        self.kernel_read_errors = c.kernel_read_errors;
        self.flow_map_full = c.flow_map_full;
        self.filtered = c.filtered;
        match self.last {
            None => self.last = Some((now_ns, c.received)),
            Some((t0, r0)) if now_ns.saturating_sub(t0) >= NS_PER_SEC => {
                let secs = (now_ns - t0) as f64 / NS_PER_SEC as f64;
                self.events_per_sec = c.received.saturating_sub(r0) as f64 / secs;
                self.last = Some((now_ns, c.received));
            }
            // A clock that went backwards (another time base) restarts the measurement.
            Some((t0, _)) if now_ns < t0 => self.last = Some((now_ns, c.received)),
            Some(_) => {}
        }
    }
}

/// One container's (or cgroup's) flows in the grouped view, with their totals over every flow
/// of the group that passes the typed filter (light ones too, as the header counts them); the
/// rates are those of its open flows.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub origin: Arc<Origin>,
    pub flows: usize,
    pub heavy: usize,
    pub flagged: usize,
    pub throughput_bps: f64,
    send_bps: f64,
    retrans_bps: f64,
}

impl Group {
    fn new(origin: Arc<Origin>) -> Self {
        Self { origin, flows: 0, heavy: 0, flagged: 0, throughput_bps: 0.0, send_bps: 0.0, retrans_bps: 0.0 }
    }

    fn add(&mut self, row: &FlowRow) {
        self.flows += 1;
        self.heavy += usize::from(row.heavy);
        self.flagged += usize::from(row.flagged);
        // A closed flow moves nothing now, whatever its last rate was.
        if row.closed {
            return;
        }
        self.throughput_bps += row.throughput_bps;
        self.send_bps += row.send_bps;
        self.retrans_bps += row.send_bps * row.retrans_ratio;
    }

    /// Retransmitted share of what the group's flows sent over the last second.
    pub(crate) fn retrans_ratio(&self) -> f64 {
        if self.send_bps > 0.0 {
            self.retrans_bps / self.send_bps
        } else {
            0.0
        }
    }
}

/// A line of the table: a group's header (grouped view only) or a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableLine {
    /// Index into `groups`.
    Group(usize),
    /// Index into `visible`.
    Flow(usize),
}

/// What the detail view shows of where its flow lives: copied with the flow.
#[derive(Clone, Debug, Default)]
pub(crate) struct Whereabouts {
    pub cgroup: Option<CgroupInfo>,
    /// The flow's namespace's default congestion control, as that namespace sees it.
    pub netns_cc: Option<String>,
    pub host_netns: bool,
    pub available_cc: Vec<String>,
    pub allowed_cc: Vec<String>,
    /// The device its packets leave by and the path MTU, once known.
    pub route: Option<Route>,
}

impl Whereabouts {
    fn of(flow: &Flow, env: &Environment) -> Self {
        let s = &flow.latest;
        Self {
            cgroup: env.cgroups.get(&s.cgroup_id).cloned(),
            netns_cc: env.netns_cc.get(&s.netns).cloned(),
            host_netns: env.host_netns != 0 && env.host_netns == s.netns,
            available_cc: env.available_cc.clone(),
            allowed_cc: env.allowed_cc.clone(),
            route: s.route,
        }
    }
}

/// The flow the detail view shows and its verdict: copied on every frame, held while paused.
#[derive(Debug)]
pub(crate) struct DetailFlow {
    pub flow: Flow,
    pub verdict: Option<Verdict>,
    pub whereabouts: Whereabouts,
    /// Deep mode's decision timeline (newest [`DETAIL_DECISIONS`]): seconds since the flow was
    /// first seen, and the decision in words.
    pub decisions: Vec<(f64, String)>,
}

/// Decisions the detail view lists, at most.
pub(crate) const DETAIL_DECISIONS: usize = 200;

/// Everything the UI shows. See the module docs for who changes what.
pub struct AppState {
    pub header: HeaderInfo,
    pub(crate) counters: Counters,
    source_ended: bool,
    /// What counts as heavy, in words (from the diagnosis' configuration), for the help.
    pub(crate) heavy_rule: String,
    /// Width of one chart point of the flows' history.
    pub(crate) history_step_ns: u64,

    /// Every flow, as of the last refresh (frozen while paused), in no particular order; rows
    /// are refilled in place from frame to frame.
    pub(crate) snapshot: Vec<FlowRow>,
    /// The last refresh's origins by cgroup, kept so unchanged ones are recognised.
    origins: HashMap<u64, Arc<Origin>>,
    /// The verdicts' generation the rows were last copied from.
    verdicts_copied: Option<u64>,
    cc_names: CcNames,
    /// Heavy UDP flows, as of the last refresh, busiest first; listed under the table unless
    /// hidden (`u`).
    pub(crate) udp_rows: Vec<UdpRow>,
    pub(crate) show_udp: bool,
    /// Indices into `snapshot` that pass the filters, in display order (grouped: group by
    /// group, each group's flows together), worked out where looked at.
    pub(crate) visible: DisplayOrder,
    /// Flows per container or cgroup, when `grouped`.
    pub(crate) grouped: bool,
    pub(crate) groups: Vec<Group>,
    /// The table's lines: the flows, with each group's header before its flows when grouped.
    pub(crate) lines: Vec<TableLine>,
    /// Congestion controls in the snapshot with their flow counts, by name.
    pub(crate) cc_seen: Vec<(String, usize)>,
    pub(crate) heavy_count: usize,
    pub(crate) flagged_count: usize,

    /// Selection by cookie, so it follows the flow while rows move.
    pub(crate) selected: Option<u64>,
    /// Position of the selection in `visible`; where the selection lands if its flow goes.
    pub(crate) sel_pos: usize,
    pub(crate) sort: Column,
    pub(crate) sort_dir: SortDir,
    /// The applied filter, and the text being typed while `typing_filter`.
    pub(crate) filter: String,
    pub(crate) filter_input: String,
    pub(crate) typing_filter: bool,
    /// The kernel filter in force, and the prompt's text (kept after a rejected attempt so it
    /// can be corrected).
    pub(crate) kernel_filter: FilterSpec,
    pub(crate) kernel_filter_input: String,
    pub(crate) typing_kernel_filter: bool,
    /// Playing back a recording: space, n, +/-, ←/→ and t move the playback.
    pub(crate) replay: bool,
    /// Where the playback is, as of the last tick.
    pub(crate) playback: Option<crate::source::Playback>,
    /// The `t` prompt: a time to seek to.
    pub(crate) typing_seek: bool,
    pub(crate) seek_input: String,
    /// A one-line message for the status line (an error), until the next key.
    pub(crate) status: Option<String>,
    /// The fix's confirmation panel, while open.
    pub(crate) fix_panel: Option<super::fixing::FixPanel>,
    /// Fixes applied and undone (here or, in a replay, as recorded), oldest first: the detail
    /// view compares before and after and marks them on the charts.
    pub(crate) actions: Vec<ActionRecord>,
    /// Actions taken here that a recorder has not taken yet.
    unrecorded: Vec<ActionRecord>,
    /// The front end can fix (a live source with a host side): `f` and `u` are offered.
    pub(crate) can_fix: bool,
    pub(crate) show_all: bool,
    pub(crate) paused: bool,
    pub(crate) detail: Option<Box<DetailFlow>>,
    pub(crate) screen: Screen,
    pub(crate) help: bool,
    /// The flow the detail view shows (fixed on Enter, even if it leaves the table's filter).
    pub(crate) detail_cookie: Option<u64>,
    pub(crate) detail_scroll: u16,

    // Written by the view while drawing (it only has `&self`): the layout decides these.
    pub(crate) table_offset: Cell<usize>,
    pub(crate) page_rows: Cell<usize>,
    pub(crate) detail_max_scroll: Cell<u16>,
}

impl AppState {
    pub fn new(header: HeaderInfo) -> Self {
        Self {
            header,
            counters: Counters::default(),
            source_ended: false,
            heavy_rule: String::new(),
            history_step_ns: NS_PER_SEC,
            snapshot: Vec::new(),
            origins: HashMap::new(),
            verdicts_copied: None,
            cc_names: CcNames::default(),
            udp_rows: Vec::new(),
            show_udp: true,
            visible: DisplayOrder::default(),
            grouped: false,
            groups: Vec::new(),
            lines: Vec::new(),
            cc_seen: Vec::new(),
            heavy_count: 0,
            flagged_count: 0,
            selected: None,
            sel_pos: 0,
            sort: Column::Throughput,
            sort_dir: SortDir::Desc,
            filter: String::new(),
            filter_input: String::new(),
            typing_filter: false,
            kernel_filter: FilterSpec::default(),
            kernel_filter_input: String::new(),
            typing_kernel_filter: false,
            replay: false,
            playback: None,
            typing_seek: false,
            seek_input: String::new(),
            status: None,
            fix_panel: None,
            actions: Vec::new(),
            unrecorded: Vec::new(),
            can_fix: false,
            show_all: false,
            paused: false,
            detail: None,
            screen: Screen::Table,
            help: false,
            detail_cookie: None,
            detail_scroll: 0,
            table_offset: Cell::new(0),
            page_rows: Cell::new(10),
            detail_max_scroll: Cell::new(0),
        }
    }

    /// The kernel filter in force when the UI starts (the prompt starts from it).
    pub fn with_kernel_filter(mut self, spec: FilterSpec) -> Self {
        self.kernel_filter_input = spec.describe().join(" ");
        self.kernel_filter = spec;
        self
    }

    /// What became of applying `spec` as the kernel filter: in force, shown in the header as
    /// the phrases returned; or refused, with the previous filter still in force and the error
    /// on the status line (the prompt keeps the text to correct).
    pub fn kernel_filter_applied(&mut self, spec: FilterSpec, result: Result<Vec<String>, String>) {
        match result {
            Ok(shown) => {
                self.kernel_filter_input = spec.describe().join(" ");
                self.kernel_filter = spec;
                self.header.filters = shown;
            }
            Err(e) => self.status = Some(format!("kernel filter unchanged: {e}")),
        }
    }

    /// The plan the host side made for `f` on flow `cookie`: the confirmation panel opens on
    /// it, or the status line says why there is none.
    pub fn fix_planned(&mut self, cookie: u64, flagged: bool, plan: Result<Plan, String>) {
        match plan {
            Ok(plan) => self.fix_panel = Some(super::fixing::FixPanel::new(cookie, plan, flagged)),
            Err(e) => self.status = Some(format!("cannot fix: {e}")),
        }
    }

    /// The panel's plan, as confirmed (`None` when no panel is open).
    pub(crate) fn confirmed_plan(&mut self) -> Option<(u64, Plan)> {
        self.fix_panel.take().map(|p| (p.cookie, p.plan))
    }

    /// What applying or undoing a fix did: kept for the charts and the recorder, summed up on
    /// the status line; after a fix the detail view opens on the flow `f` was pressed on.
    pub fn fix_done(&mut self, cookie: Option<u64>, result: Result<ActionRecord, String>) {
        match result {
            Ok(action) => {
                log::info!("{}", action.headline());
                self.status = Some(action.headline());
                if let (Some(cookie), ActionKind::Fix) = (cookie, action.action) {
                    self.detail_cookie = Some(cookie);
                    self.detail_scroll = 0;
                    self.screen = Screen::Detail;
                }
                self.unrecorded.push(action.clone());
                self.actions.push(action);
            }
            Err(e) => self.status = Some(format!("nothing changed: {e}")),
        }
    }

    /// An action a recording played back says was taken at this point.
    pub fn action_replayed(&mut self, action: ActionRecord) {
        self.actions.push(action);
    }

    /// Actions taken since last asked, for a recorder.
    pub fn take_actions(&mut self) -> Vec<ActionRecord> {
        std::mem::take(&mut self.unrecorded)
    }

    /// A fix was applied here (so `u` has something to undo, unless it was undone).
    pub(crate) fn fixed_any(&self) -> bool {
        self.actions.iter().any(|a| a.action == ActionKind::Fix)
    }

    /// Offer `f` and `u` (the front end holds a host side that can fix).
    pub fn with_fixing(mut self, can_fix: bool) -> Self {
        self.can_fix = can_fix;
        self
    }

    /// The kernel filter in force, as last applied through the UI (or given at start).
    pub fn kernel_filter(&self) -> &FilterSpec {
        &self.kernel_filter
    }

    /// The status line's message, if any.
    pub fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }

    pub fn is_grouped(&self) -> bool {
        self.grouped
    }

    /// Start with every flow shown instead of heavy flows only.
    /// A replay: the playback keys are on.
    pub fn with_replay(mut self, replay: bool) -> Self {
        self.replay = replay;
        self
    }

    pub fn with_show_all(mut self, all: bool) -> Self {
        self.show_all = all;
        self
    }

    /// Once per frame: take the counters and re-derive the rows and the detail copy from the
    /// analysis (unless paused).
    pub fn sync(&mut self, analysis: &Analysis, status: &Status) {
        self.playback = status.playback;
        self.counters.observe(status.counters, status.now_ns);
        self.source_ended |= status.source_ended;
        self.heavy_rule = analysis.diagnoser.config().heavy_rule();
        self.history_step_ns = analysis.table.config().history_step_ns;
        self.refresh(analysis);
    }

    /// The source said it has no more samples (a recording or feed ran out).
    pub fn set_source_ended(&mut self) {
        self.source_ended = true;
    }

    pub fn source_ended(&self) -> bool {
        self.source_ended
    }

    pub fn view(&self) -> View {
        match (self.help, self.screen) {
            (true, _) => View::Help,
            (false, Screen::Table) => View::Table,
            (false, Screen::Detail) => View::Detail,
        }
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    pub fn shows_all(&self) -> bool {
        self.show_all
    }

    pub fn selected(&self) -> Option<u64> {
        self.selected
    }

    pub fn sort(&self) -> (Column, SortDir) {
        (self.sort, self.sort_dir)
    }

    /// The applied filter text ("" when none).
    pub fn filter(&self) -> &str {
        &self.filter
    }

    pub fn is_typing_filter(&self) -> bool {
        self.typing_filter
    }

    /// Cookies of the rows shown, in display order.
    pub fn visible_cookies(&self) -> impl Iterator<Item = u64> + '_ {
        self.visible.all().into_iter().map(|i| self.snapshot[i].cookie)
    }

    /// Re-derive the rows from the flow table (unless paused), then filter, sort and keep the
    /// selection on its flow; copy the detail view's flow.
    pub fn refresh(&mut self, analysis: &Analysis) {
        if !self.paused {
            self.rebuild_snapshot(analysis);
        }
        self.apply_view();
        self.sync_detail(analysis);
    }

    fn rebuild_snapshot(&mut self, analysis: &Analysis) {
        let mut origins = Origins::new(std::mem::take(&mut self.origins), &analysis.env);
        // Verdicts change once a second: between evaluations a row showing the same flow keeps
        // its copy, which spares a lookup (a cache miss) per flow per frame.
        let verdicts = analysis.diagnoser.generation();
        let verdicts_unchanged = self.verdicts_copied == Some(verdicts);
        let mut rows = 0;
        let (mut heavy, mut flagged) = (0, 0);
        // Flows per congestion control, told apart by their shared name (no string is read).
        let mut cc: Vec<(Arc<str>, usize)> = Vec::new();
        for f in analysis.table.flows() {
            let origin = origins.of(f.latest.cgroup_id);
            match self.snapshot.get_mut(rows) {
                Some(row) => {
                    let judged = if verdicts_unchanged && row.cookie == f.cookie() {
                        Judged::Unchanged
                    } else {
                        Judged::Now(analysis.verdict(f))
                    };
                    row.refill(f, judged, analysis, origin, &mut self.cc_names);
                }
                None => self.snapshot.push(FlowRow::of(f, analysis.verdict(f), analysis, origin, &mut self.cc_names)),
            }
            let row = &self.snapshot[rows];
            rows += 1;
            heavy += usize::from(row.heavy);
            flagged += usize::from(row.flagged);
            match cc.iter_mut().find(|(name, _)| Arc::ptr_eq(name, &row.cc)) {
                Some((_, n)) => *n += 1,
                None => cc.push((Arc::clone(&row.cc), 1)),
            }
        }
        self.snapshot.truncate(rows);
        self.udp_rows =
            analysis.udp.flows().into_iter().map(|f| UdpRow::of(f, analysis, origins.of(f.latest.cgroup_id))).collect();
        self.udp_rows
            .sort_by(|a, b| (b.tx_bps + b.rx_bps).total_cmp(&(a.tx_bps + a.rx_bps)).then(a.cookie.cmp(&b.cookie)));
        cc.sort_unstable();
        if !self.cc_seen.iter().map(|(k, v)| (k.as_str(), *v)).eq(cc.iter().map(|(k, v)| (&**k, *v))) {
            self.cc_seen = cc.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        }
        self.heavy_count = heavy;
        self.flagged_count = flagged;
        self.origins = origins.into_current();
        self.verdicts_copied = Some(verdicts);
    }

    /// Filter and order the snapshot into `visible`; runs on frames and on keys that change
    /// the order, never per sample.
    pub(crate) fn apply_view(&mut self) {
        let terms: Vec<String> = self.filter.split_whitespace().map(str::to_ascii_lowercase).collect();
        // Every flow that matches the typed filter first: grouped, it counts in its group's
        // totals, listed or not.
        let mut shown: Vec<usize> = if terms.is_empty() {
            (0..self.snapshot.len()).collect()
        } else {
            let rows = self.snapshot.iter_mut().enumerate();
            rows.filter_map(|(i, row)| row.matches(&terms).then_some(i)).collect()
        };
        let rows = &self.snapshot;
        let mut groups: HashMap<&str, Group> = HashMap::new();
        if self.grouped {
            for &i in &shown {
                let row = &rows[i];
                groups.entry(row.origin.group.as_str()).or_insert_with(|| Group::new(row.origin.clone())).add(row);
            }
        }
        if !self.show_all {
            shown.retain(|&i| rows[i].heavy);
        }
        let mut entries = std::mem::take(&mut self.visible).into_entries();
        order::keys(rows, &shown, self.sort, self.sort_dir, &mut entries);
        self.groups.clear();
        self.lines.clear();
        if self.grouped {
            // Groups in the order of their first flow, each group's flows in the sort's order:
            // every line is looked at to place the groups, so all are sorted.
            entries.sort_unstable_by_key(|&(key, _)| key);
            let mut rank: HashMap<&str, usize> = HashMap::new();
            for &(_, i) in &entries {
                let key = rows[i].origin.group.as_str();
                let n = rank.len();
                rank.entry(key).or_insert(n);
            }
            // Stable: within a group, the sort's order stays.
            entries.sort_by_cached_key(|&(_, i)| rank[rows[i].origin.group.as_str()]);
            let mut current = None;
            for (pos, &(_, i)) in entries.iter().enumerate() {
                let key = rows[i].origin.group.as_str();
                if current != Some(key) {
                    current = Some(key);
                    self.lines.push(TableLine::Group(self.groups.len()));
                    self.groups.push(groups.remove(key).unwrap_or_else(|| Group::new(rows[i].origin.clone())));
                }
                self.lines.push(TableLine::Flow(pos));
            }
            self.visible = DisplayOrder::arranged(entries);
        } else {
            self.lines.extend((0..entries.len()).map(TableLine::Flow));
            self.visible = DisplayOrder::by_key(entries);
        }
        self.fix_selection();
    }

    pub(crate) fn toggle_grouping(&mut self) {
        self.grouped = !self.grouped;
        self.apply_view();
    }

    /// The table line the selection is on.
    pub(crate) fn selected_line(&self) -> usize {
        self.lines.iter().position(|l| *l == TableLine::Flow(self.sel_pos)).unwrap_or(0)
    }

    fn fix_selection(&mut self) {
        if self.visible.is_empty() {
            // Keep the cookie: when a filter is cleared the selection comes back.
            self.sel_pos = 0;
            return;
        }
        match self.selected.and_then(|c| self.visible.position_of(c)) {
            Some(p) => self.sel_pos = p,
            None => {
                self.sel_pos = self.sel_pos.min(self.visible.len() - 1);
                self.selected = Some(self.snapshot[self.visible.get(self.sel_pos)].cookie);
            }
        }
    }

    /// Select the visible row at `pos` (clamped).
    pub(crate) fn select_pos(&mut self, pos: usize) {
        if self.visible.is_empty() {
            return;
        }
        self.sel_pos = pos.min(self.visible.len() - 1);
        self.selected = Some(self.snapshot[self.visible.get(self.sel_pos)].cookie);
    }

    pub(crate) fn move_selection(&mut self, delta: isize) {
        let pos = self.sel_pos.saturating_add_signed(delta);
        self.select_pos(pos);
    }

    pub(crate) fn selected_row(&self) -> Option<&FlowRow> {
        let pos = self.sel_pos;
        (pos < self.visible.len())
            .then(|| &self.snapshot[self.visible.get(pos)])
            .filter(|r| Some(r.cookie) == self.selected)
    }

    pub(crate) fn open_detail(&mut self) {
        if let Some(cookie) = self.selected_row().map(|r| r.cookie) {
            self.detail_cookie = Some(cookie);
            self.detail_scroll = 0;
            self.screen = Screen::Detail;
        }
    }

    pub(crate) fn close_detail(&mut self) {
        self.screen = Screen::Table;
        if let Some(c) = self.detail_cookie.take() {
            // Back on the table, the flow just looked at stays selected if it is still listed.
            if self.visible.position_of(c).is_some() {
                self.selected = Some(c);
                self.fix_selection();
            }
        }
    }

    pub(crate) fn toggle_pause(&mut self) {
        self.paused = !self.paused;
    }

    /// Copy the flow the detail view shows (or would show for the selection) from the analysis:
    /// on every frame while live; while paused only when the copy is of another flow (a paused
    /// view's charts stand still).
    pub fn sync_detail(&mut self, analysis: &Analysis) {
        let Some(cookie) = self.detail_cookie.or(self.selected) else {
            self.detail = None;
            return;
        };
        let have = self.detail.as_ref().is_some_and(|d| d.flow.cookie() == cookie);
        if self.paused && have {
            return;
        }
        match analysis.table.get(cookie) {
            Some(f) => {
                self.detail = Some(Box::new(DetailFlow {
                    verdict: analysis.verdict(f).cloned(),
                    whereabouts: Whereabouts::of(f, &analysis.env),
                    decisions: {
                        let all: Vec<_> = analysis.decisions.of(cookie).collect();
                        let skip = all.len().saturating_sub(DETAIL_DECISIONS);
                        all[skip..]
                            .iter()
                            .map(|d| (d.ts_ns.saturating_sub(f.first_seen_ns) as f64 / 1e9, d.describe()))
                            .collect()
                    },
                    flow: f.clone(),
                }));
            }
            // Gone (closed and expired): the view says so, unless paused on its copy.
            None if !self.paused => self.detail = None,
            None => {}
        }
    }

    /// The flow the detail view is open on, if it is.
    pub fn detail_cookie(&self) -> Option<u64> {
        (self.screen == Screen::Detail).then_some(self.detail_cookie).flatten()
    }

    /// The flow the detail view shows, as last copied.
    #[cfg(test)]
    pub(crate) fn detail_flow(&self) -> Option<(&Flow, Option<&Verdict>)> {
        let d = self.detail_copy()?;
        Some((&d.flow, d.verdict.as_ref()))
    }

    pub(crate) fn detail_copy(&self) -> Option<&DetailFlow> {
        let cookie = self.detail_cookie?;
        self.detail.as_deref().filter(|d| d.flow.cookie() == cookie)
    }

    /// Filters in force, for the header: the kernel's and the typed one. (Heavy-only is a view
    /// mode, named in the table's title.)
    pub(crate) fn active_filters(&self) -> Vec<String> {
        let mut out = self.header.filters.clone();
        if !self.filter.is_empty() {
            out.push(format!("/{}", self.filter));
        }
        out
    }
}
