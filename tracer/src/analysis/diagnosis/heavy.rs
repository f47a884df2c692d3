//! Which flows are heavy: the one rule the flag, the UI's default view, its help and the
//! exports share.

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::verdict::Verdict;
use crate::analysis::flow_table::Flow;

impl DiagnosisConfig {
    /// A heavy flow: it moved at least `heavy_min_bytes` in total and moves at least
    /// `heavy_min_bps` (or keeps its congestion window full, which is what a flow crushed to a
    /// few Mbit/s by loss looks like). The one definition the flag, the UI's default view and
    /// its help use.
    pub fn is_heavy(&self, moved_bytes: u64, rate_bps: f64, keeps_cwnd_full: bool) -> bool {
        moved_bytes >= self.heavy_min_bytes && (rate_bps >= self.heavy_min_bps || keeps_cwnd_full)
    }

    /// [`Self::is_heavy`] for one flow of the table and its verdict: what it moved (acked plus
    /// received), its goodput, and whether its verdict says the congestion window held it. A
    /// flagged flow is always heavy. The rule the UI, the exports and the exporter share.
    pub fn flow_is_heavy(&self, flow: &Flow, verdict: Option<&Verdict>) -> bool {
        let limited_by = verdict.map_or(LimitedBy::Unknown, |v| v.limited_by);
        self.flow_is_heavy_as(flow, limited_by, verdict.is_some_and(|v| v.flagged))
    }

    /// [`Self::flow_is_heavy`] from the verdict's class and flag, for a front end that keeps
    /// those rather than the verdict.
    pub fn flow_is_heavy_as(&self, flow: &Flow, limited_by: LimitedBy, flagged: bool) -> bool {
        let s = &flow.latest;
        let moved = s.bytes_acked.saturating_add(s.bytes_received);
        flagged || self.is_heavy(moved, flow.rates.throughput_bps, limited_by == LimitedBy::CongestionWindow)
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
