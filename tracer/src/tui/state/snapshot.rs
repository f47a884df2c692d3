//! Copying what the UI shows from the analysis the pipeline lends it: the rows (refilled in
//! place, verdicts copied only after an evaluation) and the detail view's flow.

use std::sync::Arc;

use super::detail_copy::{DetailFlow, Whereabouts, DETAIL_DECISIONS};
use super::rows::{FlowRow, Judged, UdpRow};
use super::AppState;
use crate::analysis::Analysis;
use crate::tui::origin::Origins;

impl AppState {
    /// Copy every flow into `snapshot` (rows refilled in place), the heavy UDP flows into
    /// `udp_rows`, and the counts the header shows.
    pub(crate) fn rebuild_snapshot(&mut self, analysis: &Analysis) {
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
                    whereabouts: Whereabouts::of(f, &analysis.env, analysis.verdict(f)),
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
}
