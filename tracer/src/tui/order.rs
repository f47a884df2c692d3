//! The table's order and grouping, worked out from the state: heavy flows first, then the sort
//! column in its direction, then throughput (largest first) and cookie, so it is total and rows
//! do not jitter between frames; grouped, each container's flows together under its header.
//!
//! Each row's place is one compact key ([`RowKey`]) that [`DisplayOrder`] sorts only where
//! looked at.

use std::collections::HashMap;
use std::net::SocketAddr;

use super::state::{AppState, Column, DisplayOrder, FlowRow, Group, RowKey, SortDir, TableLine};

/// The rows `shown` (indices into `rows`) with their keys for the order by `col` in `dir`,
/// written into `out`.
fn keys(rows: &[FlowRow], shown: &[usize], col: Column, dir: SortDir, out: &mut Vec<(RowKey, usize)>) {
    let column = column_values(rows, shown, col);
    out.clear();
    out.extend(shown.iter().zip(column).map(|(&i, value)| {
        let row = &rows[i];
        let column = if dir == SortDir::Desc { !value } else { value };
        (RowKey { light: !row.heavy, column, slower: !f64_key(row.throughput_bps), cookie: row.cookie }, i)
    }));
}

impl AppState {
    /// Filter and order the snapshot into `visible`, with the grouped view's lines; runs on
    /// frames and on keys that change the order, never per sample.
    pub(crate) fn apply_view(&mut self) {
        let terms: Vec<String> = self.row_filter.split_whitespace().map(str::to_ascii_lowercase).collect();
        // Every flow that matches the typed filter first: grouped, it counts in its group's
        // totals, listed or not.
        let mut shown: Vec<usize> = if terms.is_empty() {
            (0..self.snapshot.len()).collect()
        } else {
            let rows = self.snapshot.iter_mut().enumerate();
            rows.filter_map(|(i, row)| row.matches(&terms).then_some(i)).collect()
        };
        let rows = &self.snapshot;
        let mut groups: HashMap<&str, Group> = HashMap::new();
        if self.grouped {
            for &i in &shown {
                let row = &rows[i];
                groups.entry(row.origin.group.as_str()).or_insert_with(|| Group::new(row.origin.clone())).add(row);
            }
        }
        if !self.show_all {
            shown.retain(|&i| rows[i].heavy);
        }
        let mut entries = std::mem::take(&mut self.visible).into_entries();
        keys(rows, &shown, self.sort, self.sort_dir, &mut entries);
        self.groups.clear();
        self.lines.clear();
        if self.grouped {
            // Groups in the order of their first flow, each group's flows in the sort's order:
            // every line is looked at to place the groups, so all are sorted.
            entries.sort_unstable_by_key(|&(key, _)| key);
            let mut rank: HashMap<&str, usize> = HashMap::new();
            for &(_, i) in &entries {
                let key = rows[i].origin.group.as_str();
                let n = rank.len();
                rank.entry(key).or_insert(n);
            }
            // Stable: within a group, the sort's order stays.
            entries.sort_by_cached_key(|&(_, i)| rank[rows[i].origin.group.as_str()]);
            let mut current = None;
            for (pos, &(_, i)) in entries.iter().enumerate() {
                let key = rows[i].origin.group.as_str();
                if current != Some(key) {
                    current = Some(key);
                    self.lines.push(TableLine::Group(self.groups.len()));
                    self.groups.push(groups.remove(key).unwrap_or_else(|| Group::new(rows[i].origin.clone())));
                }
                self.lines.push(TableLine::Flow(pos));
            }
            self.visible = DisplayOrder::arranged(entries);
        } else {
            self.lines.extend((0..entries.len()).map(TableLine::Flow));
            self.visible = DisplayOrder::by_key(entries);
        }
        self.fix_selection();
    }

    pub(crate) fn toggle_grouping(&mut self) {
        self.grouped = !self.grouped;
        self.apply_view();
    }
}

/// Each shown row's value in column `col` as an integer that orders as the column does.
fn column_values(rows: &[FlowRow], shown: &[usize], col: Column) -> Vec<u64> {
    let row = |i: usize| &rows[i];
    let numbers = |f: fn(&FlowRow) -> u64| shown.iter().map(|&i| f(row(i))).collect();
    match col {
        Column::Flag => numbers(|r| u64::from(r.flagged) << 1 | u64::from(!r.closed)),
        Column::CaState => numbers(|r| r.ca_state.index() as u64),
        Column::Cwnd => numbers(|r| u64::from(r.cwnd)),
        Column::Ssthresh => numbers(|r| u64::from(r.ssthresh)),
        Column::Rtt => numbers(|r| u64::from(r.srtt_us)),
        Column::MinRtt => numbers(|r| u64::from(r.min_rtt_us)),
        Column::Delivery => numbers(|r| r.delivery_bps),
        Column::Throughput => numbers(|r| f64_key(r.throughput_bps)),
        Column::Retrans => numbers(|r| f64_key(r.retrans_ratio)),
        Column::Container => ranks(shown, |i| (row(i).origin.name.as_str(), row(i).origin.runtime)),
        Column::Process => ranks(shown, |i| row(i).comm.as_deref()),
        Column::Local => ranks::<SocketAddr>(shown, |i| row(i).local),
        Column::Remote => ranks::<SocketAddr>(shown, |i| row(i).remote),
        Column::Cc => ranks(shown, |i| &*row(i).cc),
        Column::LimitedBy => ranks(shown, |i| row(i).limited_by.name()),
    }
}

/// Each shown row's rank by `value` (equal values share a rank): a text column becomes
/// numbers with one sort of its values.
fn ranks<T: Ord>(shown: &[usize], value: impl Fn(usize) -> T) -> Vec<u64> {
    let mut by_value: Vec<(T, usize)> = shown.iter().enumerate().map(|(pos, &i)| (value(i), pos)).collect();
    by_value.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut out = vec![0; shown.len()];
    let mut rank = 0;
    for (k, (v, pos)) in by_value.iter().enumerate() {
        if k > 0 && by_value[k - 1].0 != *v {
            rank += 1;
        }
        out[*pos] = rank;
    }
    out
}

/// `x` as an integer in the order of [`f64::total_cmp`].
fn f64_key(x: f64) -> u64 {
    let bits = x.to_bits() as i64;
    // As `total_cmp` does: flip the magnitude bits of negatives, then compare as signed...
    let ordered = bits ^ (((bits >> 63) as u64) >> 1) as i64;
    // ... which is comparing as unsigned once the sign bit is flipped.
    (ordered as u64) ^ (1 << 63)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_keys_order_as_total_cmp() {
        let xs = [f64::NEG_INFINITY, -1e9, -1.5, -0.0, 0.0, 1e-300, 0.5, 2.0, 1e12, f64::INFINITY, f64::NAN, -f64::NAN];
        for a in xs {
            for b in xs {
                assert_eq!(f64_key(a).cmp(&f64_key(b)), a.total_cmp(&b), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn equal_values_share_a_rank_in_value_order() {
        let values = ["cubic", "bbr", "reno", "bbr", "cubic"];
        assert_eq!(ranks(&[0, 1, 2, 3, 4], |i| values[i]), vec![1, 0, 2, 0, 1]);
        assert!(ranks(&[], |i: usize| values[i]).is_empty());
    }
}
