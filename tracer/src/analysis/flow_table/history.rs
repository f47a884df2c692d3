//! A flow's chart points: one compact point per history step, in a ring bounded by the flow's
//! cap.

use std::collections::VecDeque;

use crate::analysis::sample::CaState;

/// One chart point: the state of the flow over one history step. Compact (32 bytes): a chart
/// needs no more precision than f32, and there are many of these.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistoryPoint {
    /// Start of the bucket (monotonic ns, aligned to the step).
    pub ts_ns: u64,
    pub throughput_bps: f32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_us: u32,
    pub min_rtt_us: u32,
    /// Segments retransmitted during the bucket (saturates at 65,535).
    pub retrans: u16,
    /// CA state at the end of the bucket and the worst one seen in it.
    pub ca_state: CaState,
    pub worst_ca_state: CaState,
}

const _: () = assert!(std::mem::size_of::<HistoryPoint>() == 32);

/// A flow's chart points: completed buckets in a ring that grows only as far as the flow's cap,
/// and the bucket still filling held inline, so a flow that never leaves its first bucket
/// allocates nothing.
#[derive(Clone, Debug, Default)]
pub(super) struct History {
    pub(super) done: VecDeque<HistoryPoint>,
    pub(super) current: Option<HistoryPoint>,
    /// Points kept, the current one included.
    pub(super) cap: usize,
}

impl History {
    pub(super) fn new(cap: usize) -> Self {
        Self { done: VecDeque::new(), current: None, cap: cap.max(1) }
    }

    /// Close the current bucket and open `next`.
    pub(super) fn start(&mut self, next: HistoryPoint) {
        if let Some(finished) = self.current.replace(next) {
            let keep = self.cap - 1;
            if keep == 0 {
                return;
            }
            if self.done.len() >= keep {
                self.done.pop_front();
            } else if self.done.len() == self.done.capacity() {
                // Grow by doubling, but never past the cap (VecDeque alone would round 300 up
                // to 512).
                let target = (self.done.capacity() * 2).clamp(4, keep);
                self.done.reserve_exact(target - self.done.len());
            }
            self.done.push_back(finished);
        }
    }

    /// Keep at most `cap` points from now on, dropping the oldest beyond it (and their memory).
    pub(super) fn set_cap(&mut self, cap: usize) {
        let cap = cap.max(1);
        if cap == self.cap {
            return;
        }
        self.cap = cap;
        let keep = cap - 1;
        if self.done.len() > keep {
            self.done.drain(..self.done.len() - keep);
        }
        if self.done.capacity() > keep {
            self.done.shrink_to(keep);
        }
    }

    pub(super) fn iter(&self) -> HistoryIter<'_> {
        HistoryIter { done: self.done.iter(), current: self.current.as_ref() }
    }
}

/// Oldest to newest over a flow's history.
pub struct HistoryIter<'a> {
    done: std::collections::vec_deque::Iter<'a, HistoryPoint>,
    current: Option<&'a HistoryPoint>,
}

impl<'a> Iterator for HistoryIter<'a> {
    type Item = &'a HistoryPoint;

    fn next(&mut self) -> Option<Self::Item> {
        self.done.next().or_else(|| self.current.take())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.done.len() + usize::from(self.current.is_some());
        (n, Some(n))
    }
}

impl DoubleEndedIterator for HistoryIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.current.take().or_else(|| self.done.next_back())
    }
}

impl ExactSizeIterator for HistoryIter<'_> {}
