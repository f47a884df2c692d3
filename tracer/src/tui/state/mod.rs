//! What the UI knows and remembers: the rows it shows (a snapshot of the pipeline's analysis
//! taken once per frame, filtered and ordered then, never per event), a copy of the flow the
//! detail view shows, the selection, the view and the header facts. The bottom of the UI's
//! layers: no terminal, no clock, no analysis of its own, and nothing from the layers above
//! (the order, the update step, the views); it copies what it needs from the analysis the
//! pipeline lends it (`snapshot`).
//!
//! A frame's cost follows the flows' numbers, not their text: rows are refilled in place, a
//! flow's strings are copied only when its text changed, its verdict only after an evaluation,
//! and the order is worked out only where looked at (`DisplayOrder`).

mod columns;
mod counters;
mod detail_copy;
mod display_order;
mod fixes;
mod grouping;
mod header;
mod rows;
mod selection;
mod snapshot;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::analysis::filter::FilterSpec;
use crate::analysis::schema::ActionRecord;

use super::origin::Origin;

pub use columns::{Column, SortDir};
pub use counters::Counters;
pub(crate) use detail_copy::{DetailFlow, Whereabouts};
pub(crate) use display_order::{DisplayOrder, RowKey};
pub(crate) use fixes::FixPanel;
pub(crate) use grouping::{Group, TableLine};
pub use header::HeaderInfo;
use rows::CcNames;
pub(crate) use rows::{FlowRow, UdpRow};

use tracer_common::NS_PER_SEC;

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

/// Everything the UI shows. Its methods live with the job they do: here and in this folder
/// what the state does to itself (selection, outcomes of fixes and filters, copying from the
/// analysis); the order and grouping in `tui::order`; a frame and a key in `tui::update`.
pub struct AppState {
    pub header: HeaderInfo,
    pub(crate) counters: Counters,
    pub(crate) source_ended: bool,
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
    /// The applied filter, and the text being typed while `typing_row_filter`.
    pub(crate) row_filter: String,
    pub(crate) row_filter_input: String,
    pub(crate) typing_row_filter: bool,
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
    pub(crate) fix_panel: Option<FixPanel>,
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

    // The view's memory, written while drawing (it only has `&self`): the layout decides these.
    /// The table's line at the top of the screen.
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
            row_filter: String::new(),
            row_filter_input: String::new(),
            typing_row_filter: false,
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

    /// A replay: the playback keys are on.
    pub fn with_replay(mut self, replay: bool) -> Self {
        self.replay = replay;
        self
    }

    /// Start with every flow shown instead of heavy flows only.
    pub fn with_show_all(mut self, all: bool) -> Self {
        self.show_all = all;
        self
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
    pub fn row_filter(&self) -> &str {
        &self.row_filter
    }

    pub fn is_typing_row_filter(&self) -> bool {
        self.typing_row_filter
    }

    /// Cookies of the rows shown, in display order.
    pub fn visible_cookies(&self) -> impl Iterator<Item = u64> + '_ {
        self.visible.all().into_iter().map(|i| self.snapshot[i].cookie)
    }

    pub(crate) fn toggle_pause(&mut self) {
        self.paused = !self.paused;
    }
    /// The flow the detail view is open on, if it is.
    pub fn detail_cookie(&self) -> Option<u64> {
        (self.screen == Screen::Detail).then_some(self.detail_cookie).flatten()
    }

    /// The flow the detail view shows, as last copied.
    #[cfg(test)]
    pub(crate) fn detail_flow(
        &self,
    ) -> Option<(&crate::analysis::flow_table::Flow, Option<&crate::analysis::diagnosis::Verdict>)> {
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
        if !self.row_filter.is_empty() {
            out.push(format!("/{}", self.row_filter));
        }
        out
    }
}
