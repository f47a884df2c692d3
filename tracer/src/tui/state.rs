//! What the UI knows and remembers: the rows it shows (a snapshot of the pipeline's analysis
//! taken once per frame, filtered and sorted then, never per event), a copy of the flow the
//! detail view shows, the selection, the view and the header facts. No terminal, no clock and
//! no analysis of its own here: [`AppState::sync`] copies what it needs from the analysis the
//! pipeline lends it, keys come in through [`super::update`], and [`super::view`] only reads.

use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

use crate::analysis::diagnosis::{LimitedBy, Verdict};
use crate::analysis::event::{CaState, TcpState};
use crate::analysis::model::Flow;
use crate::analysis::Analysis;
use crate::pipeline::Status;
use crate::source::SourceCounters;

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
    /// Filters applied before the UI (command-line options), one short phrase each.
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
    Cgroup,
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
        Self::Cgroup,
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
            Self::Cgroup => "cgroup",
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
            Self::Cgroup | Self::Process | Self::Local | Self::Remote | Self::Cc | Self::LimitedBy => SortDir::Asc,
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
    pub cgroup_id: u64,
    pub comm: Option<String>,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub cc: String,
    pub ca_state: CaState,
    pub closed: bool,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_us: u32,
    pub min_rtt_us: u32,
    pub delivery_bps: u64,
    pub throughput_bps: f64,
    pub retrans_ratio: f64,
    pub limited_by: LimitedBy,
    pub flagged: bool,
    pub heavy: bool,
}

impl FlowRow {
    /// Heavy (shown by default) as the diagnosis defines it, or flagged.
    fn of(flow: &Flow, verdict: Option<&Verdict>, analysis: &Analysis) -> Self {
        let s = &flow.latest;
        let flagged = verdict.is_some_and(|v| v.flagged);
        let closed = flow.is_closed() || matches!(s.tcp_state, TcpState::Close | TcpState::TimeWait);
        Self {
            cookie: s.cookie,
            cgroup_id: s.cgroup_id,
            comm: s.owner.as_ref().map(|o| o.comm.clone()),
            local: s.local,
            remote: s.remote,
            cc: s.cc.clone(),
            ca_state: s.ca_state,
            closed,
            cwnd: s.snd_cwnd,
            ssthresh: s.snd_ssthresh,
            srtt_us: s.srtt_us,
            min_rtt_us: s.min_rtt_us,
            delivery_bps: s.delivery_rate_bps,
            throughput_bps: flow.rates.throughput_bps,
            retrans_ratio: flow.rates.retrans_ratio,
            limited_by: verdict.map_or(LimitedBy::Unknown, |v| v.limited_by),
            flagged,
            heavy: flagged || {
                let moved = s.bytes_acked.saturating_add(s.bytes_received);
                let cwnd_full = verdict.is_some_and(|v| v.limited_by == LimitedBy::CongestionWindow);
                analysis.diagnoser.config().is_heavy(moved, flow.rates.throughput_bps, cwnd_full)
            },
        }
    }

    /// Lower-case text the filter searches: addresses with ports, cc, comm, limited_by, cgroup.
    fn haystack(&self, buf: &mut String) {
        buf.clear();
        let _ = write!(
            buf,
            "{} {} {} {} {} cgroup={} {}",
            self.local,
            self.remote,
            self.cc,
            self.comm.as_deref().unwrap_or(""),
            self.limited_by.name(),
            self.cgroup_id,
            if self.flagged { "flagged" } else { "" },
        );
        buf.make_ascii_lowercase();
    }
}

fn compare(col: Column, a: &FlowRow, b: &FlowRow) -> Ordering {
    match col {
        Column::Flag => (a.flagged, !a.closed).cmp(&(b.flagged, !b.closed)),
        Column::Cgroup => a.cgroup_id.cmp(&b.cgroup_id),
        Column::Process => a.comm.cmp(&b.comm),
        Column::Local => a.local.cmp(&b.local),
        Column::Remote => a.remote.cmp(&b.remote),
        Column::Cc => a.cc.cmp(&b.cc),
        Column::CaState => a.ca_state.index().cmp(&b.ca_state.index()),
        Column::Cwnd => a.cwnd.cmp(&b.cwnd),
        Column::Ssthresh => a.ssthresh.cmp(&b.ssthresh),
        Column::Rtt => a.srtt_us.cmp(&b.srtt_us),
        Column::MinRtt => a.min_rtt_us.cmp(&b.min_rtt_us),
        Column::Delivery => a.delivery_bps.cmp(&b.delivery_bps),
        Column::Throughput => a.throughput_bps.total_cmp(&b.throughput_bps),
        Column::Retrans => a.retrans_ratio.total_cmp(&b.retrans_ratio),
        Column::LimitedBy => a.limited_by.name().cmp(b.limited_by.name()),
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

/// The flow the detail view shows and its verdict: copied on every frame, held while paused.
#[derive(Debug)]
pub(crate) struct DetailFlow {
    pub flow: Flow,
    pub verdict: Option<Verdict>,
}

/// Everything the UI shows. See the module docs for who changes what.
pub struct AppState {
    pub header: HeaderInfo,
    pub(crate) counters: Counters,
    source_ended: bool,
    /// What counts as heavy, in words (from the diagnosis' configuration), for the help.
    pub(crate) heavy_rule: String,
    /// Width of one chart point of the flows' history.
    pub(crate) history_step_ns: u64,

    /// Every flow, as of the last refresh (frozen while paused).
    pub(crate) snapshot: Vec<FlowRow>,
    /// Indices into `snapshot` that pass the filters, in display order.
    pub(crate) visible: Vec<usize>,
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
            visible: Vec::new(),
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

    /// Start with every flow shown instead of heavy flows only.
    pub fn with_show_all(mut self, all: bool) -> Self {
        self.show_all = all;
        self
    }

    /// Once per frame: take the counters and re-derive the rows and the detail copy from the
    /// analysis (unless paused).
    pub fn sync(&mut self, analysis: &Analysis, status: &Status) {
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
        self.visible.iter().map(|&i| self.snapshot[i].cookie)
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
        self.snapshot.clear();
        self.snapshot.extend(analysis.table.flows().map(|f| FlowRow::of(f, analysis.verdict(f), analysis)));
        let mut cc: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &self.snapshot {
            *cc.entry(r.cc.as_str()).or_default() += 1;
        }
        self.cc_seen = cc.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        self.heavy_count = self.snapshot.iter().filter(|r| r.heavy).count();
        self.flagged_count = self.snapshot.iter().filter(|r| r.flagged).count();
    }

    /// Filter and sort the snapshot into `visible`; runs on frames and on keys that change the
    /// order, never per sample.
    pub(crate) fn apply_view(&mut self) {
        let terms: Vec<String> = self.filter.split_whitespace().map(str::to_ascii_lowercase).collect();
        let mut hay = String::new();
        self.visible.clear();
        for (i, row) in self.snapshot.iter().enumerate() {
            if !self.show_all && !row.heavy {
                continue;
            }
            if !terms.is_empty() {
                row.haystack(&mut hay);
                if !terms.iter().all(|t| hay.contains(t.as_str())) {
                    continue;
                }
            }
            self.visible.push(i);
        }
        let (col, dir, rows) = (self.sort, self.sort_dir, &self.snapshot);
        // Heavy flows first (only matters when all are shown), then the chosen column; ties by
        // throughput and cookie so the order is total and rows do not jitter between frames.
        self.visible.sort_unstable_by(|&a, &b| {
            let (a, b) = (&rows[a], &rows[b]);
            b.heavy
                .cmp(&a.heavy)
                .then_with(|| {
                    let o = compare(col, a, b);
                    if dir == SortDir::Desc {
                        o.reverse()
                    } else {
                        o
                    }
                })
                .then_with(|| b.throughput_bps.total_cmp(&a.throughput_bps))
                .then_with(|| a.cookie.cmp(&b.cookie))
        });
        self.fix_selection();
    }

    fn fix_selection(&mut self) {
        if self.visible.is_empty() {
            // Keep the cookie: when a filter is cleared the selection comes back.
            self.sel_pos = 0;
            return;
        }
        let found = self.selected.and_then(|c| self.visible.iter().position(|&i| self.snapshot[i].cookie == c));
        match found {
            Some(p) => self.sel_pos = p,
            None => {
                self.sel_pos = self.sel_pos.min(self.visible.len() - 1);
                self.selected = Some(self.snapshot[self.visible[self.sel_pos]].cookie);
            }
        }
    }

    /// Select the visible row at `pos` (clamped).
    pub(crate) fn select_pos(&mut self, pos: usize) {
        if self.visible.is_empty() {
            return;
        }
        self.sel_pos = pos.min(self.visible.len() - 1);
        self.selected = Some(self.snapshot[self.visible[self.sel_pos]].cookie);
    }

    pub(crate) fn move_selection(&mut self, delta: isize) {
        let pos = self.sel_pos.saturating_add_signed(delta);
        self.select_pos(pos);
    }

    pub(crate) fn selected_row(&self) -> Option<&FlowRow> {
        self.visible.get(self.sel_pos).map(|&i| &self.snapshot[i]).filter(|r| Some(r.cookie) == self.selected)
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
            if self.visible.iter().any(|&i| self.snapshot[i].cookie == c) {
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
                self.detail = Some(Box::new(DetailFlow { verdict: analysis.verdict(f).cloned(), flow: f.clone() }));
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
    pub(crate) fn detail_flow(&self) -> Option<(&Flow, Option<&Verdict>)> {
        let cookie = self.detail_cookie?;
        let d = self.detail.as_deref().filter(|d| d.flow.cookie() == cookie)?;
        Some((&d.flow, d.verdict.as_ref()))
    }

    /// Filters in force, for the header: the command line's and the typed one. (Heavy-only is
    /// a view mode, named in the table's title.)
    pub(crate) fn active_filters(&self) -> Vec<String> {
        let mut out = self.header.filters.clone();
        if !self.filter.is_empty() {
            out.push(format!("/{}", self.filter));
        }
        out
    }
}
