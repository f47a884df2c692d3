//! The table's lines when flows are grouped by container: a group's header with its totals,
//! then its flows.

use std::sync::Arc;

use super::rows::FlowRow;
use crate::tui::origin::Origin;

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
    pub(crate) fn new(origin: Arc<Origin>) -> Self {
        Self { origin, flows: 0, heavy: 0, flagged: 0, throughput_bps: 0.0, send_bps: 0.0, retrans_bps: 0.0 }
    }

    pub(crate) fn add(&mut self, row: &FlowRow) {
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
