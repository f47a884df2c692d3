//! The loader-set configuration (read-only globals userspace fills before load) and the maps
//! every TCP program shares: the samples ring, the per-flow state and the counters.

use aya_ebpf::{
    macros::map,
    maps::{LruHashMap, PerCpuArray, RingBuf},
};
use tracer_common::{counter, ClassicTracepointOffsets, Config, FlowState, HookId, Offsets, DEFAULT_RING_BYTES};

use crate::count;

/// Filled in by userspace from BTF before load (read-only data).
#[no_mangle]
pub(crate) static OFFSETS: Offsets = Offsets::unresolved();
/// Filled in by userspace from tracefs `format` files before load.
#[no_mangle]
pub(crate) static CLASSIC: ClassicTracepointOffsets = ClassicTracepointOffsets::unresolved();
#[no_mangle]
pub(crate) static CONFIG: Config = Config::default_config();

#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);
#[map]
pub(crate) static FLOWS: LruHashMap<u64, FlowState> = LruHashMap::with_max_entries(65_536, 0);
#[map]
pub(crate) static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Whether userspace enabled `hook` in `CONFIG.hooks`; a disabled hook's programs do nothing.
#[inline(always)]
pub(crate) fn enabled(hook: HookId) -> bool {
    global!(CONFIG.hooks) & hook.bit() != 0
}

/// Add one to counter `index` with a plain add, for counts that may be approximate: cheaper than
/// [`bump`]'s atomic one on a path that runs on every segment.
#[inline(always)]
pub(crate) fn bump_roughly(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: this CPU's slot of the map, valid for this program run; a nested run's add
        // between the load and the store is lost, which a rough count allows.
        unsafe { core::ptr::write_volatile(slot, core::ptr::read_volatile(slot).wrapping_add(1)) };
    }
}

#[inline(always)]
pub(crate) fn bump(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        count::add(slot, 1);
    }
}
