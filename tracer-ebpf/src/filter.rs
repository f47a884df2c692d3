//! The user's flow filter in the kernel: the filter maps userspace rewrites while the programs
//! run, and whether a flow passes, remembered per flow and filter generation.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap},
};
use tracer_common::{
    filter_mode, FilterState, FlowState, FILTER_MAX_CGROUPS, FILTER_MAX_CGROUP_DEPTH, FILTER_MAX_NETNS,
};

use crate::maps::OFFSETS;
use crate::read::{read, read_ptr};

/// The flow filter (one entry) and the cgroups and network namespaces it keeps; userspace
/// rewrites them while the programs run.
#[map]
static FILTER: Array<FilterState> = Array::with_max_entries(1, 0);
#[map]
static FILTER_CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(FILTER_MAX_CGROUPS, 0);
#[map]
static FILTER_NETNS: HashMap<u32, u8> = HashMap::with_max_entries(FILTER_MAX_NETNS, 0);

/// Whether the flow is inside the user's filter. The answer is kept in the flow's state for the
/// filter's generation, so the namespace read and the cgroup walk run once per flow and filter
/// change, not on every `tcp_probe`.
#[inline(always)]
pub(crate) fn passes_filter(sk: *const u8, state: &mut FlowState) -> bool {
    let Some(filter) = FILTER.get(0) else { return true };
    let filter = *filter;
    if filter.mode == 0 {
        return true;
    }
    if state.filter_generation != filter.generation {
        state.filter_generation = filter.generation;
        state.filter_pass = u8::from(matches_filter(sk, filter.mode));
    }
    state.filter_pass != 0
}

#[inline(always)]
fn matches_filter(sk: *const u8, mode: u32) -> bool {
    if mode & filter_mode::NETNS != 0 {
        let net = read_ptr(sk, global!(OFFSETS.skc_net));
        let inum: u32 = read(net, global!(OFFSETS.net_ns_inum));
        // SAFETY: a lookup in a hash map of plain integers; the value is not used.
        if unsafe { FILTER_NETNS.get(inum) }.is_none() {
            return false;
        }
    }
    if mode & filter_mode::CGROUP != 0 {
        // The socket's cgroup and its ancestors, by their kernfs ids (the cgroup ids userspace
        // sees as directory inodes): a filter on a cgroup keeps everything below it.
        let cgroup = read_ptr(sk, global!(OFFSETS.sk_cgrp_cgroup));
        let mut kn = read_ptr(cgroup, global!(OFFSETS.cgroup_kn));
        let mut level = 0;
        while level < FILTER_MAX_CGROUP_DEPTH {
            if kn.is_null() {
                return false;
            }
            let id: u64 = read(kn, global!(OFFSETS.kernfs_node_id));
            // SAFETY: as above.
            if unsafe { FILTER_CGROUPS.get(id) }.is_some() {
                return true;
            }
            kn = read_ptr(kn, global!(OFFSETS.kernfs_node_parent));
            level += 1;
        }
        return false;
    }
    true
}
