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

use crate::analysis::diagnosis::open_flows::PerOpenFlow;
use crate::analysis::flow_table::{Flow, FlowTable, TableChanges};

/// The index's key for a flow's (local, remote) addresses: a 64-bit hash, a quarter of the
/// pair's size; a look-up checks the addresses of the flow it finds.
fn key(local: SocketAddr, remote: SocketAddr) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one((local, remote))
}

fn key_of(flow: &Flow) -> u64 {
    key(flow.latest.local, flow.latest.remote)
}

#[derive(Debug, Default)]
pub(super) struct PeerIndex {
    /// Each open flow's key, to take it out when the flow goes (its addresses are not known
    /// once it has left the table) or moves (a connecting socket's local port is 0 at first).
    keys: PerOpenFlow<u64>,
    /// Open flows by key, while `keys` is followed.
    by_ends: HashMap<u64, u64>,
}

/// Move `cookie` in `by_ends` from key `old` to `new`.
fn moved(by_ends: &mut HashMap<u64, u64>, cookie: u64, old: Option<u64>, new: Option<u64>) {
    if let Some(k) = old {
        if by_ends.get(&k) == Some(&cookie) {
            by_ends.remove(&k);
        }
    }
    if let Some(k) = new {
        by_ends.insert(k, cookie);
    }
}

impl PeerIndex {
    /// Drop the index (its changes will not be followed): the next look-up makes it from the
    /// table.
    pub(super) fn forget(&mut self) {
        self.keys.forget();
        self.by_ends = HashMap::new();
    }

    /// Follow the table's `changes` since the last evaluation: flows born or updated are put
    /// in (or taken out once closed), removed ones taken out.
    pub(super) fn follow(&mut self, table: &FlowTable, changes: &TableChanges) {
        let by_ends = &mut self.by_ends;
        self.keys.follow(table, changes, key_of, |c, old, new| moved(by_ends, c, old, new));
    }

    /// The open flow at the other end of `flow` on this host, if cctrace sees it.
    pub(super) fn peer<'t>(&mut self, table: &'t FlowTable, flow: &Flow) -> Option<&'t Flow> {
        let by_ends = &mut self.by_ends;
        self.keys.made(table, key_of, |c, old, new| moved(by_ends, c, old, new));
        let cookie = *self.by_ends.get(&key(flow.latest.remote, flow.latest.local))?;
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
        index.keys.followed().then_some(index.by_ends.len())
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
