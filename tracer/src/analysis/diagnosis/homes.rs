//! Where each open flow lives, its network namespace and cgroup, so that the flows of a
//! namespace or cgroup whose host facts changed are found without a walk of the flow table.
//! That walk read every flow's boxed state, 30 ms for 20,000 open flows here, each time a
//! process started in a namespace that had none; this compact copy ([`PerOpenFlow`]) is read
//! in well under a millisecond.

use std::collections::HashSet;

use crate::analysis::diagnosis::open_flows::PerOpenFlow;
use crate::analysis::flow_table::{Flow, FlowTable, TableChanges};

/// A flow's home: its network namespace and cgroup id.
fn home(flow: &Flow) -> (u32, u64) {
    (flow.latest.netns, flow.latest.cgroup_id)
}

#[derive(Debug, Default)]
pub(super) struct Homes(PerOpenFlow<(u32, u64)>);

impl Homes {
    /// Drop the copy (its changes will not be followed): the next look makes it from the table.
    pub(super) fn forget(&mut self) {
        self.0.forget();
    }

    /// Follow the table's `changes` since the last evaluation.
    pub(super) fn follow(&mut self, table: &FlowTable, changes: &TableChanges) {
        self.0.follow(table, changes, home, |_, _, _| {});
    }

    /// The open flows living in one of `netns` or `cgroups`.
    pub(super) fn living_in(&mut self, table: &FlowTable, netns: &HashSet<u32>, cgroups: &HashSet<u64>) -> Vec<u64> {
        self.0
            .made(table, home, |_, _, _| {})
            .iter()
            .filter(|(_, (n, c))| netns.contains(n) || cgroups.contains(c))
            .map(|(cookie, _)| *cookie)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::flow_table::tests::sample;
    use crate::analysis::flow_table::TableConfig;
    use crate::analysis::sample::SampleReason;

    fn found(homes: &mut Homes, table: &FlowTable, netns: &[u32], cgroups: &[u64]) -> Vec<u64> {
        let mut v = homes.living_in(table, &netns.iter().copied().collect(), &cgroups.iter().copied().collect());
        v.sort_unstable();
        v
    }

    #[test]
    fn the_flows_of_a_namespace_or_cgroup_are_found_as_the_table_changes() {
        let mut table = FlowTable::new(TableConfig::default());
        let mut homes = Homes::default();
        for (cookie, netns, cgroup) in [(1, 10, 100), (2, 10, 200), (3, 20, 200), (4, 30, 300)] {
            let mut s = sample(cookie, 0);
            (s.netns, s.cgroup_id) = (netns, cgroup);
            table.ingest(&s);
        }
        let changes = table.take_changes();
        homes.follow(&table, &changes);
        assert_eq!(found(&mut homes, &table, &[10], &[]), [1, 2]);
        assert_eq!(found(&mut homes, &table, &[30], &[200]), [2, 3, 4]);
        // A flow that closes lives nowhere.
        let mut close = sample(2, 1);
        (close.netns, close.cgroup_id, close.reason) = (10, 200, SampleReason::Destroy);
        table.ingest(&close);
        let changes = table.take_changes();
        homes.follow(&table, &changes);
        assert_eq!(found(&mut homes, &table, &[10], &[200]), [1, 3]);
        // Forgotten, it is made from the table's open flows.
        homes.forget();
        assert_eq!(found(&mut homes, &table, &[10, 20, 30], &[]), [1, 3, 4]);
    }
}
