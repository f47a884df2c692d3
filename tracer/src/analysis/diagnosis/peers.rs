//! The receiving end of a flow on this host: its peer, the open flow whose addresses are the
//! flow's own swapped. The index of open flows by address follows the table's changes from the
//! first evaluation on, so that a flow held by a local receiver costs per flow that changed, not
//! per flow kept: 10,000 idle connections beside it were most of a second's work when the index
//! was made anew at every evaluation, and 20-70 ms of this process's time when it was made at
//! the first look-up (a transfer starting beside 10,000 idle connections: the observer bench's
//! process cost at 10,000 idle flows was 12-25 ms a second against 6.5-7 at none).

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::net::SocketAddr;

use crate::analysis::flow_table::{Flow, FlowTable, TableChanges};

/// The index's key for a flow's (local, remote) addresses: a 64-bit hash, a quarter of the
/// pair's size; a look-up checks the addresses of the flow it finds.
fn key(local: SocketAddr, remote: SocketAddr) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one((local, remote))
}

#[derive(Debug)]
pub(super) struct PeerIndex {
    /// Open flows by [`key`]; `None` once forgotten, until a flow asks for its peer and it is made
    /// from the table.
    by_ends: Option<HashMap<u64, u64>>,
    /// Each indexed flow's key, to take it out when the flow goes (its addresses are not known
    /// once it has left the table) or moves (a connecting socket's local port is 0 at first).
    key_of: HashMap<u64, u64>,
}

impl Default for PeerIndex {
    /// An index that follows the table from its first change: made with the table, both empty.
    fn default() -> Self {
        Self { by_ends: Some(HashMap::new()), key_of: HashMap::new() }
    }
}

impl PeerIndex {
    /// Drop the index (its changes will not be followed): the next look-up makes it from the
    /// table.
    pub(super) fn forget(&mut self) {
        self.by_ends = None;
        self.key_of = HashMap::new();
    }

    /// Follow the table's `changes` since the last evaluation: flows born or updated are put
    /// in (or taken out once closed), removed ones taken out.
    pub(super) fn follow(&mut self, table: &FlowTable, changes: &TableChanges) {
        if self.by_ends.is_none() {
            return;
        }
        for cookie in &changes.removed {
            self.take_out(*cookie);
        }
        for flow in changes.born.iter().chain(&changes.updated).filter_map(|c| table.get(*c)) {
            if flow.is_closed() {
                self.take_out(flow.cookie());
            } else {
                self.put_in(flow);
            }
        }
    }

    fn put_in(&mut self, flow: &Flow) {
        let k = key(flow.latest.local, flow.latest.remote);
        if self.key_of.get(&flow.cookie()) == Some(&k) {
            return;
        }
        self.take_out(flow.cookie());
        self.key_of.insert(flow.cookie(), k);
        if let Some(by_ends) = &mut self.by_ends {
            by_ends.insert(k, flow.cookie());
        }
    }

    fn take_out(&mut self, cookie: u64) {
        let Some(k) = self.key_of.remove(&cookie) else { return };
        if let Some(by_ends) = &mut self.by_ends {
            if by_ends.get(&k) == Some(&cookie) {
                by_ends.remove(&k);
            }
        }
    }

    /// The open flow at the other end of `flow` on this host, if cctrace sees it.
    pub(super) fn peer<'t>(&mut self, table: &'t FlowTable, flow: &Flow) -> Option<&'t Flow> {
        if self.by_ends.is_none() {
            self.by_ends = Some(HashMap::new());
            for f in table.open_flows() {
                self.put_in(f);
            }
        }
        let cookie = *self.by_ends.as_ref()?.get(&key(flow.latest.remote, flow.latest.local))?;
        table.get(cookie).filter(|p| {
            p.cookie() != flow.cookie()
                && !p.is_closed()
                && (p.latest.local, p.latest.remote) == (flow.latest.remote, flow.latest.local)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::flow_table::tests::sample;
    use crate::analysis::flow_table::TableConfig;
    use crate::analysis::sample::SampleReason;

    fn at(table: &mut FlowTable, cookie: u64, local: &str, remote: &str, ts_ms: u64) {
        let mut s = sample(cookie, ts_ms);
        s.local = local.parse().expect("addr");
        s.remote = remote.parse().expect("addr");
        table.ingest(&s);
    }

    fn follow(index: &mut PeerIndex, table: &mut FlowTable) {
        let changes = table.take_changes();
        index.follow(table, &changes);
    }

    fn peer_of(index: &mut PeerIndex, table: &FlowTable, cookie: u64) -> Option<u64> {
        index.peer(table, table.get(cookie).expect("flow")).map(Flow::cookie)
    }

    fn indexed(index: &PeerIndex) -> Option<usize> {
        index.by_ends.as_ref().map(HashMap::len)
    }

    #[test]
    fn the_index_follows_the_changes_from_the_start_and_is_made_anew_only_once_forgotten() {
        let mut table = FlowTable::new(TableConfig::default());
        let mut index = PeerIndex::default();
        at(&mut table, 1, "198.18.0.1:40000", "198.18.0.2:5201", 0);
        at(&mut table, 2, "198.18.0.2:5201", "198.18.0.1:40000", 0);
        for c in 10..110 {
            at(&mut table, c, &format!("127.0.0.1:{c}"), "127.0.0.1:9", 0);
        }
        follow(&mut index, &mut table);
        assert_eq!(indexed(&index), Some(102), "followed from the first change, before any look-up");
        assert_eq!(peer_of(&mut index, &table, 1), Some(2));
        assert_eq!(peer_of(&mut index, &table, 10), None);
        // A connecting socket's local port is 0 until the kernel picks one: it moves in the index.
        at(&mut table, 3, "198.18.0.1:0", "198.18.0.2:5201", 1);
        follow(&mut index, &mut table);
        at(&mut table, 3, "198.18.0.1:40001", "198.18.0.2:5201", 2);
        at(&mut table, 4, "198.18.0.2:5201", "198.18.0.1:40001", 2);
        follow(&mut index, &mut table);
        assert_eq!(indexed(&index), Some(104));
        assert_eq!(peer_of(&mut index, &table, 3), Some(4));
        assert_eq!(peer_of(&mut index, &table, 4), Some(3));
        // A peer that closed is no peer, and leaves the index.
        let mut close = sample(2, 3);
        (close.local, close.remote) =
            ("198.18.0.2:5201".parse().expect("addr"), "198.18.0.1:40000".parse().expect("addr"));
        close.reason = SampleReason::Destroy;
        table.ingest(&close);
        follow(&mut index, &mut table);
        assert_eq!(peer_of(&mut index, &table, 1), None);
        assert_eq!(indexed(&index), Some(103));
        // Flows that leave the table (the idle ones expire) leave the index, all of them.
        at(&mut table, 1, "198.18.0.1:40000", "198.18.0.2:5201", 300_000);
        at(&mut table, 3, "198.18.0.1:40001", "198.18.0.2:5201", 300_000);
        at(&mut table, 4, "198.18.0.2:5201", "198.18.0.1:40001", 300_000);
        table.expire(301_000_000_000);
        follow(&mut index, &mut table);
        assert_eq!(indexed(&index), Some(table.open_flows().count()));
        assert_eq!(peer_of(&mut index, &table, 3), Some(4));
        // Forgotten (an evaluation without the changes), it is made from the table when asked.
        index.forget();
        assert_eq!(indexed(&index), None);
        assert_eq!(peer_of(&mut index, &table, 4), Some(3));
        assert_eq!(indexed(&index), Some(table.open_flows().count()));
    }
}
