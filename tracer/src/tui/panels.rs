//! What the panels show, worked out from the state without drawing: the flows the findings
//! strip lists, and a flow's fix history (the marks on its charts, its latest fix with the
//! numbers either side). Pure functions of the state, below the views that draw them.

use super::state::{AppState, FlowRow};
use crate::analysis::compare::{before_after, BeforeAfter, WINDOW_NS};
use crate::analysis::flow_table::HistoryPoint;
use crate::analysis::schema::{ActionKind, ActionRecord, SwitchedFlow};
use tracer_common::NS_PER_SEC;

/// The findings strip under the table: every flagged flow with a finding, most held back
/// first, so the answer is on screen without opening anything.
pub(crate) fn findings(state: &AppState) -> Vec<&FlowRow> {
    let mut flagged: Vec<&FlowRow> = state.snapshot.iter().filter(|r| r.flagged && r.finding.is_some()).collect();
    flagged.sort_by(|a, b| b.throughput_bps.total_cmp(&a.throughput_bps).then(a.cookie.cmp(&b.cookie)));
    flagged
}

/// The actions that switched `cookie`, oldest first.
fn actions_on(actions: &[ActionRecord], cookie: u64) -> impl Iterator<Item = &ActionRecord> {
    actions.iter().filter(move |a| a.switched.iter().any(|s| s.cookie == cookie))
}

/// A vertical mark on the charts: where (ns) and what.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Mark {
    pub ts_ns: u64,
    pub undo: bool,
}

/// Where fixes and undos switched `cookie`, oldest first.
pub(crate) fn marks(actions: &[ActionRecord], cookie: u64) -> Vec<Mark> {
    actions_on(actions, cookie).map(|a| Mark { ts_ns: a.ts_ns, undo: a.action == ActionKind::Undo }).collect()
}

/// The latest fix that switched a flow, and its numbers before and after.
pub(crate) struct FixComparison<'a> {
    /// What it switched the flow from and to.
    pub switched: &'a SwitchedFlow,
    /// Whole seconds between the fix and the newest point of the history.
    pub ago_secs: u64,
    /// Undone since.
    pub undone: bool,
    pub windows: BeforeAfter,
}

/// The latest fix that switched `cookie`, compared over its `history` (points `step_ns`
/// apart); `None` when nothing switched it.
pub(crate) fn fix_comparison<'a>(
    actions: &'a [ActionRecord],
    cookie: u64,
    history: &[&HistoryPoint],
    step_ns: u64,
) -> Option<FixComparison<'a>> {
    let fix = actions_on(actions, cookie).filter(|a| a.action == ActionKind::Fix).last()?;
    let switched = fix.switched.iter().find(|s| s.cookie == cookie).expect("filtered on it");
    let newest = history.last().map_or(fix.ts_ns, |h| h.ts_ns + step_ns);
    Some(FixComparison {
        switched,
        ago_secs: newest.saturating_sub(fix.ts_ns) / NS_PER_SEC,
        undone: actions_on(actions, cookie).any(|a| a.action == ActionKind::Undo && a.ts_ns > fix.ts_ns),
        windows: before_after(history, fix.ts_ns, step_ns, WINDOW_NS),
    })
}
