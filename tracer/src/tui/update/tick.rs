//! A frame: the state brought up to date with the analysis (the rows, their order, the detail
//! copy) and the source's status.

use crate::analysis::Analysis;
use crate::pipeline::Status;
use crate::tui::state::AppState;

impl AppState {
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

    /// Re-derive the rows from the flow table (unless paused), then filter, sort and keep the
    /// selection on its flow; copy the detail view's flow.
    pub fn refresh(&mut self, analysis: &Analysis) {
        if !self.paused {
            self.rebuild_snapshot(analysis);
        }
        self.apply_view();
        self.sync_detail(analysis);
    }
}
