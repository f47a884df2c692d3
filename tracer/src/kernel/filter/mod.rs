//! The kernel side of `--cgroup`, `--container` and `--netns`: writes a [`ResolvedFilter`] into
//! the programs' filter maps, so flows outside it never reach the ring buffer. In the mode
//! without BTF the programs cannot read a socket's cgroup or namespace: the filter is then
//! shared with that source, which applies it in user space ([`SharedFilter`]).

pub mod live;

use std::collections::BTreeSet;

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{Array, HashMap, MapData};
use aya::Ebpf;
use tracer_common::{filter_mode, FilterState, Offsets, ABSENT, FILTER_MAX_CGROUPS, FILTER_MAX_NETNS};

use crate::analysis::filter::ResolvedFilter;

/// The filter in force where it is applied in user space, and its generation (bumped on every
/// change, so what was decided under an older one is decided again).
pub type SharedFilter = std::sync::Arc<std::sync::Mutex<(ResolvedFilter, u64)>>;

/// The filter maps of a loaded object.
struct FilterMaps {
    state: Array<MapData, FilterState>,
    cgroups: HashMap<MapData, u64, u8>,
    netns: HashMap<MapData, u32, u8>,
}

/// Where a filter is applied: the programs' maps, or a source that filters in user space.
enum Backing {
    Maps(Box<FilterMaps>),
    UserSpace(SharedFilter),
}

/// The filter in force, where the source applies it.
pub struct KernelFilter {
    backing: Backing,
    generation: u32,
    applied: ResolvedFilter,
    /// Why this kernel cannot filter by cgroup or by namespace (a field its BTF lacks).
    no_cgroup_filter: Option<&'static str>,
    no_netns_filter: Option<&'static str>,
}

impl KernelFilter {
    /// Take the filter maps out of `ebpf` (loaded, not yet attached).
    pub fn take(ebpf: &mut Ebpf, offsets: &Offsets) -> Result<Self> {
        let mut take = |name: &str| ebpf.take_map(name).ok_or_else(|| anyhow!("{name} map missing"));
        let state = Array::try_from(take("FILTER")?).context("opening the FILTER map")?;
        let cgroups = HashMap::try_from(take("FILTER_CGROUPS")?).context("opening the FILTER_CGROUPS map")?;
        let netns = HashMap::try_from(take("FILTER_NETNS")?).context("opening the FILTER_NETNS map")?;
        let absent = |fields: &[(u32, &'static str)]| fields.iter().find(|(off, _)| *off == ABSENT).map(|(_, n)| *n);
        Ok(Self {
            backing: Backing::Maps(Box::new(FilterMaps { state, cgroups, netns })),
            generation: 0,
            applied: ResolvedFilter::default(),
            no_cgroup_filter: absent(&[
                (offsets.sk_cgrp_cgroup, "sock.sk_cgrp_data"),
                (offsets.cgroup_kn, "cgroup.kn"),
                (offsets.kernfs_node_id, "kernfs_node.id"),
                (offsets.kernfs_node_parent, "kernfs_node.parent"),
            ]),
            no_netns_filter: absent(&[(offsets.skc_net, "sock.skc_net"), (offsets.net_ns_inum, "net.ns.inum")]),
        })
    }

    /// A filter the source applies in user space: every dimension can be filtered on.
    pub fn user_space(shared: SharedFilter) -> Self {
        Self {
            backing: Backing::UserSpace(shared),
            generation: 0,
            applied: ResolvedFilter::default(),
            no_cgroup_filter: None,
            no_netns_filter: None,
        }
    }

    pub fn applied(&self) -> &ResolvedFilter {
        &self.applied
    }

    /// Make `filter` the one in force. Entries go in before the generation moves, so no flow
    /// is judged against a half-written filter and then kept under the new generation.
    pub fn apply(&mut self, filter: &ResolvedFilter) -> Result<()> {
        if filter == &self.applied && self.generation != 0 {
            return Ok(());
        }
        if !filter.cgroup_ids.is_empty() {
            if let Some(field) = self.no_cgroup_filter {
                bail!("this kernel cannot filter by cgroup: its BTF has no {field}");
            }
        }
        if !filter.netns.is_empty() {
            if let Some(field) = self.no_netns_filter {
                bail!("this kernel cannot filter by network namespace: its BTF has no {field}");
            }
        }
        if filter.cgroup_ids.len() > FILTER_MAX_CGROUPS as usize {
            bail!("the filter names {} cgroups; at most {FILTER_MAX_CGROUPS} fit", filter.cgroup_ids.len());
        }
        if filter.netns.len() > FILTER_MAX_NETNS as usize {
            bail!("the filter names {} network namespaces; at most {FILTER_MAX_NETNS} fit", filter.netns.len());
        }
        // 0 is what a new flow's cache holds: never a filter's generation.
        self.generation = self.generation.wrapping_add(1).max(1);
        let maps = match &mut self.backing {
            Backing::Maps(maps) => maps,
            Backing::UserSpace(shared) => {
                let mut inner = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                *inner = (filter.clone(), u64::from(self.generation));
                self.applied = filter.clone();
                return Ok(());
            }
        };
        sync_set(&mut maps.cgroups, &self.applied.cgroup_ids, &filter.cgroup_ids).context("writing FILTER_CGROUPS")?;
        sync_set(&mut maps.netns, &self.applied.netns, &filter.netns).context("writing FILTER_NETNS")?;
        let mut mode = 0;
        if !filter.cgroup_ids.is_empty() {
            mode |= filter_mode::CGROUP;
        }
        if !filter.netns.is_empty() {
            mode |= filter_mode::NETNS;
        }
        maps.state.set(0, FilterState { generation: self.generation, mode }, 0).context("writing FILTER")?;
        self.applied = filter.clone();
        Ok(())
    }
}

/// Make the map's keys `want`, given they are `have` now.
fn sync_set<K>(map: &mut HashMap<MapData, K, u8>, have: &BTreeSet<K>, want: &BTreeSet<K>) -> Result<()>
where
    K: aya::Pod + Ord,
{
    for key in want.difference(have) {
        map.insert(key, 1, 0)?;
    }
    for key in have.difference(want) {
        map.remove(key)?;
    }
    Ok(())
}
