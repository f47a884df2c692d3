//! The receiving end of a flow on this host: its peer, the open flow whose addresses are the
//! flow's own swapped. The index of open flows by address is made the first time a flow needs
//! its peer and then kept up to date from the table's changes, so that a flow held by a local
//! receiver costs per flow that changed, not per flow kept (10,000 idle connections beside it
//! were most of a second's work when the index was made anew at every evaluation).

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::analysis::flow_table::{Flow, FlowTable, TableChanges};

#[derive(Debug, Default)]
pub(super) struct PeerIndex {
    /// Open flows by (local, remote) address; `None` until a flow asks for its peer.
    by_ends: Option<HashMap<(SocketAddr, SocketAddr), u64>>,
    /// Entries that may name a flow gone from the table (its addresses are not known once it
    /// has gone, so its entry stays until the index is made again): a look-up checks what it
    /// finds, and past half the index the index is dropped, to be made anew when asked.
    stale: usize,
}

impl PeerIndex {
    /// Drop the index: the next look-up makes it from the table.
    pub(super) fn forget(&mut self) {
        *self = Self::default();
    }

    /// Follow the table's `changes` since the last evaluation: flows born or updated are put
    /// in (or taken out once closed); removed ones count as stale.
    pub(super) fn follow(&mut self, table: &FlowTable, changes: &TableChanges) {
        let Some(by_ends) = &mut self.by_ends else { return };
        self.stale += changes.removed.len();
        if self.stale > by_ends.len() / 2 {
            self.forget();
            return;
        }
        for flow in changes.born.iter().chain(&changes.updated).filter_map(|c| table.get(*c)) {
            let ends = (flow.latest.local, flow.latest.remote);
            if !flow.is_closed() {
                by_ends.insert(ends, flow.cookie());
            } else if by_ends.get(&ends) == Some(&flow.cookie()) {
                by_ends.remove(&ends);
            }
        }
    }

    /// The open flow at the other end of `flow` on this host, if cctrace sees it.
    pub(super) fn peer<'t>(&mut self, table: &'t FlowTable, flow: &Flow) -> Option<&'t Flow> {
        let by_ends = self.by_ends.get_or_insert_with(|| {
            table.open_flows().map(|f| ((f.latest.local, f.latest.remote), f.cookie())).collect()
        });
        let cookie = *by_ends.get(&(flow.latest.remote, flow.latest.local))?;
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

    #[test]
    fn the_index_follows_the_changes_and_is_made_anew_only_when_half_of_it_went() {
        let mut table = FlowTable::new(TableConfig::default());
        let mut index = PeerIndex::default();
        at(&mut table, 1, "198.18.0.1:40000", "198.18.0.2:5201", 0);
        at(&mut table, 2, "198.18.0.2:5201", "198.18.0.1:40000", 0);
        for c in 10..110 {
            at(&mut table, c, &format!("127.0.0.1:{c}"), "127.0.0.1:9", 0);
        }
        follow(&mut index, &mut table);
        assert!(index.by_ends.is_none(), "nothing made until a flow asks");
        assert_eq!(peer_of(&mut index, &table, 1), Some(2));
        assert_eq!(peer_of(&mut index, &table, 10), None);
        // A pair born later is found without making the index again.
        at(&mut table, 3, "198.18.0.1:40001", "198.18.0.2:5201", 1);
        at(&mut table, 4, "198.18.0.2:5201", "198.18.0.1:40001", 1);
        follow(&mut index, &mut table);
        assert_eq!(index.by_ends.as_ref().map(HashMap::len), Some(104));
        assert_eq!(peer_of(&mut index, &table, 3), Some(4));
        // A peer that closed is no peer.
        let mut close = sample(2, 2);
        (close.local, close.remote) =
            ("198.18.0.2:5201".parse().expect("addr"), "198.18.0.1:40000".parse().expect("addr"));
        close.reason = SampleReason::Destroy;
        table.ingest(&close);
        follow(&mut index, &mut table);
        assert_eq!(peer_of(&mut index, &table, 1), None);
        assert_eq!(index.by_ends.as_ref().map(HashMap::len), Some(103));
        // The idle flows expire: past half the index stale, it goes, and is made from the
        // flows still there when asked.
        at(&mut table, 1, "198.18.0.1:40000", "198.18.0.2:5201", 300_000);
        at(&mut table, 3, "198.18.0.1:40001", "198.18.0.2:5201", 300_000);
        at(&mut table, 4, "198.18.0.2:5201", "198.18.0.1:40001", 300_000);
        table.expire(301_000_000_000);
        let changes = table.take_changes();
        assert!(changes.removed.len() > 52, "{:?}", changes.removed.len());
        index.follow(&table, &changes);
        assert!(index.by_ends.is_none());
        assert_eq!(peer_of(&mut index, &table, 3), Some(4));
        assert_eq!(index.by_ends.as_ref().map(HashMap::len), Some(table.open_flows().count()));
    }
}
