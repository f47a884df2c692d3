//! Reordering: a flow whose retransmissions the kernel mostly took back (DSACK reported them
//! duplicates) lost little or nothing; the path delivered its packets out of order and the
//! sender retransmitted before they arrived. Not flagged, and BBR is not the fix: the kernel
//! already widens its reordering window (`reordering`, RACK) once it has seen it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::losses::LossView;
use crate::analysis::diagnosis::verdict::Evidence;

/// A note on a flow's losses that is not a verdict on what limits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossNote {
    /// Most retransmissions were spurious: the path reorders packets.
    Reordering,
}

impl LossNote {
    pub fn name(self) -> &'static str {
        match self {
            Self::Reordering => "reordering",
        }
    }
}

/// Spurious (DSACKed) share of the segments the flow retransmitted.
pub(super) fn spurious_share(lv: &LossView) -> f64 {
    if lv.retrans_segments == 0 {
        0.0
    } else {
        f64::from(lv.dsack_dups.min(lv.retrans_segments)) / f64::from(lv.retrans_segments)
    }
}

/// The reordering note, when enough retransmissions were seen and most were spurious.
pub(super) fn note_of(lv: &LossView, cfg: &DiagnosisConfig) -> Option<LossNote> {
    (lv.retrans_segments >= cfg.reordering_min_retrans && spurious_share(lv) >= cfg.reordering_spurious_share)
        .then_some(LossNote::Reordering)
}

/// The note's sentence, after the verdict's.
pub(super) fn write_note(text: &mut String, ev: &Evidence) {
    if ev.note != Some(LossNote::Reordering) {
        return;
    }
    let _ = write!(
        text,
        ". Reordering: {:.0}% of its {} retransmissions were spurious (dsack_dups {}, {} cuts undone), \
         so the path delivered those packets out of order rather than losing them (multipath, Wi-Fi aggregation, \
         a jittery tunnel). Not flagged, and the fix is not BBR: the kernel already adapts (its reordering \
         estimate is now {} segments)",
        ev.spurious_share * 100.0,
        ev.retrans_segments,
        ev.dsack_dups,
        ev.undo_events,
        ev.reordering.map_or("unknown".to_string(), |r| r.to_string()),
    );
}
