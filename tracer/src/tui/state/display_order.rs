//! The rows a table lists, in display order, worked out only where looked at.
//!
//! Each row's place is one compact key, so ordering compares small integers in a contiguous
//! array instead of chasing each row's fields and strings; and only the stretch of the order
//! that is looked at (the screen, the selection) is sorted, found by selection in O(n): with
//! 100,000 flows a frame sorts the 40 rows it shows, not all of them. What the keys are made of
//! is [`crate::tui::order`]'s business.

use std::cell::{Cell, RefCell};

/// A row's place in the order: smaller sorts first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RowKey {
    pub(crate) light: bool,
    /// The sort column's value (or, for text, its rank among the rows), in the chosen direction.
    pub(crate) column: u64,
    /// Throughput, largest first.
    pub(crate) slower: u64,
    pub(crate) cookie: u64,
}

/// The rows a table lists, in display order, put in order only where looked at. Positions in
/// `sorted` hold their rows in order; the rows before it all sort before them, the rows after
/// it after them, each side in no particular order until a position there is asked for.
#[derive(Debug, Default)]
pub(crate) struct DisplayOrder {
    /// (key, index into the rows). Behind a `RefCell` because reading a position may sort it:
    /// the order it gives never changes, only how much of it is worked out.
    entries: RefCell<Vec<(RowKey, usize)>>,
    sorted: Cell<(usize, usize)>,
}

impl DisplayOrder {
    /// `entries` in key order, to be sorted where looked at.
    pub(crate) fn by_key(entries: Vec<(RowKey, usize)>) -> Self {
        Self { entries: RefCell::new(entries), sorted: Cell::new((0, 0)) }
    }

    /// `entries` already in display order (another order than the keys': grouped).
    pub(crate) fn arranged(entries: Vec<(RowKey, usize)>) -> Self {
        let len = entries.len();
        Self { entries: RefCell::new(entries), sorted: Cell::new((0, len)) }
    }

    /// The entries' memory, for the next order to reuse.
    pub(crate) fn into_entries(self) -> Vec<(RowKey, usize)> {
        self.entries.into_inner()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The row at display position `pos` (`pos < len`).
    pub(crate) fn get(&self, pos: usize) -> usize {
        self.ensure_sorted(pos, pos + 1);
        self.entries.borrow()[pos].1
    }

    /// The rows at display positions `from..to`, in order.
    pub(crate) fn slice(&self, from: usize, to: usize) -> Vec<usize> {
        let to = to.min(self.len());
        let from = from.min(to);
        self.ensure_sorted(from, to);
        self.entries.borrow()[from..to].iter().map(|&(_, i)| i).collect()
    }

    /// Every row, in display order.
    pub(crate) fn all(&self) -> Vec<usize> {
        self.slice(0, self.len())
    }

    /// The display position of the row of flow `cookie`, if listed: counted, not sorted for.
    pub(crate) fn position_of(&self, cookie: u64) -> Option<usize> {
        let entries = self.entries.borrow();
        let at = entries.iter().position(|(k, _)| k.cookie == cookie)?;
        let (from, to) = self.sorted.get();
        if (from..to).contains(&at) {
            return Some(at);
        }
        // Outside the sorted stretch rows are in key order only as sides of it.
        let key = entries[at].0;
        Some(entries.iter().filter(|(k, _)| *k < key).count())
    }

    /// Put positions `from..to` in order, widening the sorted stretch to cover them.
    fn ensure_sorted(&self, from: usize, to: usize) {
        let (start, end) = self.sorted.get();
        if from >= to || (start <= from && to <= end) {
            return;
        }
        let mut entries = self.entries.borrow_mut();
        let len = entries.len();
        let key = |e: &(RowKey, usize)| e.0;
        if start == end {
            // Nothing sorted yet: the rows before `from`, then those up to `to`, by selection.
            if from > 0 {
                entries.select_nth_unstable_by_key(from, key);
            }
            if to < len {
                entries[from..].select_nth_unstable_by_key(to - from, key);
            }
            entries[from..to].sort_unstable_by_key(key);
            self.sorted.set((from, to));
            return;
        }
        let (new_start, new_end) = (from.min(start), to.max(end));
        if new_start < start {
            // The largest of the rows before the stretch, in order, join it.
            if new_start > 0 {
                entries[..start].select_nth_unstable_by_key(new_start, key);
            }
            entries[new_start..start].sort_unstable_by_key(key);
        }
        if new_end > end {
            if new_end < len {
                entries[end..].select_nth_unstable_by_key(new_end - end, key);
            }
            entries[end..new_end].sort_unstable_by_key(key);
        }
        self.sorted.set((new_start, new_end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cookie: u64, column: u64) -> RowKey {
        RowKey { light: cookie.is_multiple_of(3), column, slower: cookie % 7, cookie }
    }

    /// A shuffled list of `n` distinct keys, the same for the same `seed`.
    fn shuffled(n: usize, seed: u64) -> Vec<(RowKey, usize)> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut entries: Vec<(RowKey, usize)> = (0..n).map(|i| (key(i as u64, next() % 50), i)).collect();
        for i in (1..n).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            entries.swap(i, j);
        }
        entries
    }

    #[test]
    fn any_sequence_of_lookups_reads_the_full_sort() {
        for (n, seed) in [(0, 1), (1, 2), (2, 3), (17, 4), (500, 5), (2_000, 6)] {
            let mut full = shuffled(n, seed);
            full.sort_unstable();
            let want: Vec<usize> = full.iter().map(|&(_, i)| i).collect();
            // Windows here and there, growing the sorted stretch both ways, one position at a
            // time and in jumps, then everything.
            let order = DisplayOrder::by_key(shuffled(n, seed));
            let mut probe = seed;
            for _ in 0..40 {
                probe = probe.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if n == 0 {
                    break;
                }
                let from = (probe >> 33) as usize % n;
                let to = (from + (probe >> 20) as usize % 45).min(n);
                assert_eq!(order.slice(from, to), want[from..to], "n {n} window {from}..{to}");
                let pos = (probe >> 40) as usize % n;
                assert_eq!(order.get(pos), want[pos]);
                let cookie = full[pos].0.cookie;
                assert_eq!(order.position_of(cookie), Some(pos), "cookie {cookie}");
            }
            assert_eq!(order.position_of(u64::MAX), None);
            assert_eq!(order.all(), want);
            // Positions are found without sorting for them, too.
            let fresh = DisplayOrder::by_key(shuffled(n, seed));
            for (pos, &(k, _)) in full.iter().enumerate() {
                assert_eq!(fresh.position_of(k.cookie), Some(pos));
            }
            assert_eq!(fresh.sorted.get(), (0, 0), "counting sorted nothing");
        }
    }

    #[test]
    fn a_window_sorts_the_window_only() {
        let order = DisplayOrder::by_key(shuffled(10_000, 9));
        order.slice(5_000, 5_040);
        assert_eq!(order.sorted.get(), (5_000, 5_040));
        order.get(4_990);
        assert_eq!(order.sorted.get(), (4_990, 5_040));
    }

    #[test]
    fn an_arranged_order_is_kept_as_given() {
        let entries = shuffled(100, 11);
        let given: Vec<usize> = entries.iter().map(|&(_, i)| i).collect();
        let cookie = entries[42].0.cookie;
        let order = DisplayOrder::arranged(entries);
        assert_eq!(order.all(), given);
        assert_eq!(order.get(42), given[42]);
        assert_eq!(order.position_of(cookie), Some(42));
    }
}
