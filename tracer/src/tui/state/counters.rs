//! The source's counters as the header shows them, with the event rate derived from them.

use crate::source::SourceCounters;

use tracer_common::NS_PER_SEC;

/// The source's counters as last reported, and the event rate derived from their deltas.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub source: SourceCounters,
    /// Samples per second over the last measured interval (at least one second long).
    pub events_per_sec: f64,
    last: Option<(u64, u64)>,
}

impl Counters {
    /// Take the source's counters at `now_ns`; the event rate is measured over at least a
    /// second.
    pub(crate) fn observe(&mut self, c: SourceCounters, now_ns: u64) {
        self.source = c;
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
