//! The kernel's own verdicts on a flow's retransmissions, carried with every sample: which were
//! spurious (DSACK), whether the path reorders, how many timeouts, and the cuts it undid. A
//! retransmission is not a loss until the kernel stops taking it back; these say when it did.

use serde::{Deserialize, Serialize};
use tracer_common::{FlowSample, ABSENT};

/// Named as `ss -tni` names them. `None`: the kernel that produced the sample lacks the field
/// (`total_rto*` came in Linux 6.7), or the sample predates cctrace reading it (an older
/// recording).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossSignals {
    /// Retransmissions the receiver reported as duplicates by DSACK: spurious ones.
    #[serde(default)]
    pub dsack_dups: Option<u32>,
    /// Times the sender saw reordering.
    #[serde(default)]
    pub reord_seen: Option<u32>,
    /// The sender's estimate of how far the path reorders, segments (3 until it reorders).
    #[serde(default)]
    pub reordering: Option<u32>,
    /// Retransmission timeouts, and the recoveries they started.
    #[serde(default)]
    pub total_rto: Option<u32>,
    #[serde(default)]
    pub total_rto_recoveries: Option<u32>,
    /// Cuts the kernel undid on leaving Recovery or Loss (counted by cctrace's CA-state hook:
    /// the kernel keeps no count per socket; a DSACK undo after the flow is back in Open is not
    /// in it). `None` before the hook counted them.
    #[serde(default)]
    pub undo_events: Option<u32>,
}

impl LossSignals {
    /// Every signal present (as zero): a shape, not a reading.
    pub fn with_every_part() -> Self {
        let zero = Some(0);
        Self {
            dsack_dups: zero,
            reord_seen: zero,
            reordering: zero,
            total_rto: zero,
            total_rto_recoveries: zero,
            undo_events: zero,
        }
    }
}

fn present(v: u32) -> Option<u32> {
    (v != ABSENT).then_some(v)
}

impl LossSignals {
    pub fn from_raw(raw: &FlowSample) -> Self {
        Self {
            dsack_dups: present(raw.dsack_dups),
            reord_seen: present(raw.reord_seen),
            reordering: present(raw.reordering),
            total_rto: present(raw.total_rto),
            total_rto_recoveries: present(raw.total_rto_recoveries),
            undo_events: Some(raw.undo_events),
        }
    }

    /// Spurious retransmissions, 0 when unknown.
    pub fn spurious(&self) -> u32 {
        self.dsack_dups.unwrap_or(0)
    }

    /// Undone cuts, 0 when unknown.
    pub fn undone(&self) -> u32 {
        self.undo_events.unwrap_or(0)
    }
}
