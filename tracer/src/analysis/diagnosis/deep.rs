//! Deep mode's citations: when a flow runs on a traced twin of its algorithm, the loss
//! responses the algorithm itself made, for the verdict's evidence and text.

use crate::analysis::deep_decisions::{DecisionKind, DecisionLog};
use crate::analysis::diagnosis::verdict::DeepEvidence;

/// What a deep-traced flow's algorithm decided: its twin, its loss responses and their cuts.
pub(super) fn deep_evidence(cookie: u64, first_seen_ns: u64, decisions: &DecisionLog) -> Option<DeepEvidence> {
    let mut twin = None;
    let mut ratios = Vec::new();
    let mut last_cut = None;
    for d in decisions.of(cookie) {
        twin = Some(d.algo.twin());
        if let DecisionKind::SsthreshCut { cwnd_before, ssthresh_after, .. } = d.kind {
            if cwnd_before > 0 {
                ratios.push(f64::from(ssthresh_after) / f64::from(cwnd_before));
            }
            let at = d.ts_ns.saturating_sub(first_seen_ns) as f64 / 1e9;
            let text = d.describe();
            // "loss: ssthresh 46, ..." -> "loss at 12.4 s: ssthresh 46, ..."
            last_cut = Some(match text.split_once(": ") {
                Some((what, rest)) => format!("{what} at {at:.1} s: {rest}"),
                None => text,
            });
        }
    }
    ratios.sort_by(f64::total_cmp);
    Some(DeepEvidence {
        twin: twin?.to_string(),
        loss_responses: decisions.loss_responses(cookie),
        median_cut: ratios.get(ratios.len() / 2).copied(),
        last_cut,
    })
}
