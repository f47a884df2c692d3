//! The live switch (`cctrace fix --live`, deep mode's moves): an `iter/tcp` program that sets
//! the congestion control of the sockets `SWITCH_CONFIG` selects and reports each one.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_getsockopt, bpf_seq_write, bpf_setsockopt, bpf_skc_to_tcp_sock},
    macros::map,
    maps::{Array, HashMap},
};
use tracer_common::{
    switch_mode, tcp_state, CcName, SwitchConfig, SwitchRecord, CC_NAME_LEN, SWITCH_MAX_COOKIES, SWITCH_MAX_NAMES,
    SWITCH_RECORD_SIZE,
};

use crate::maps::OFFSETS;
use crate::read::{btf_cookie, read};

/// What `cct_iter_switch` switches (one entry; zeroed: nothing).
#[map]
static SWITCH_CONFIG: Array<SwitchConfig> = Array::with_max_entries(1, 0);
/// For [`switch_mode::COOKIES`]: the sockets to switch and the algorithm each goes back to.
#[map]
static SWITCH_COOKIES: HashMap<u64, CcName> = HashMap::with_max_entries(SWITCH_MAX_COOKIES, 0);
/// For [`switch_mode::NAMES`]: algorithm -> algorithm to switch its sockets to.
#[map]
static SWITCH_NAMES: HashMap<CcName, CcName> = HashMap::with_max_entries(SWITCH_MAX_NAMES, 0);

const SOL_TCP: i32 = 6;
const TCP_CONGESTION: i32 = 13;

/// Two NUL-padded algorithm names are the same name.
#[inline(always)]
fn same_cc(a: &[u8; CC_NAME_LEN], b: &[u8; CC_NAME_LEN]) -> bool {
    let mut i = 0;
    while i < CC_NAME_LEN {
        if a[i] != b[i] {
            return false;
        }
        if a[i] == 0 {
            return true;
        }
        i += 1;
    }
    true
}

/// `iter/tcp`: switch the congestion control of the full TCP sockets of the iterating thread's
/// network namespace that `SWITCH_CONFIG` selects, with `bpf_setsockopt(TCP_CONGESTION)` (the
/// iterator holds the socket lock), and write one [`SwitchRecord`] per socket tried into the
/// iterator's output. The algorithm must be loaded already: from BPF the kernel loads no module.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/tcp")]
pub fn cct_iter_switch(ctx: *mut c_void) -> i32 {
    // SAFETY: `struct bpf_iter__tcp { struct bpf_iter_meta *meta; struct sock_common *sk_common;
    // uid_t uid; }` is the context the verifier gives; sk_common is NULL at the end.
    let (meta, sk) = unsafe { (*(ctx as *const *const u8), *(ctx as *const *const u8).add(1)) };
    if sk.is_null() || meta.is_null() {
        return 0;
    }
    let Some(config) = SWITCH_CONFIG.get(0) else { return 0 };
    let mode = config.mode;
    let state: u8 = read(sk, global!(OFFSETS.skc_state));
    if state == tcp_state::TIME_WAIT || state == tcp_state::NEW_SYN_RECV || state == tcp_state::LISTEN {
        return 0;
    }
    // SAFETY: `sk` is the iterator's typed sock_common; the helper returns NULL unless it is a
    // full TCP socket.
    let tp = unsafe { bpf_skc_to_tcp_sock(sk as *mut c_void) } as *mut c_void;
    if tp.is_null() {
        return 0;
    }
    let mut rec = SwitchRecord::default();
    // SAFETY: a full TCP socket, locked by the iterator; the buffer is ours and sized.
    let got = unsafe {
        bpf_getsockopt(tp, SOL_TCP, TCP_CONGESTION, rec.old_cc.as_mut_ptr() as *mut c_void, CC_NAME_LEN as i32)
    };
    if got != 0 {
        return 0;
    }
    rec.cookie = btf_cookie(sk);
    if mode == switch_mode::COOKIES {
        // SAFETY: a lookup in a hash map of plain values, copied at once.
        match unsafe { SWITCH_COOKIES.get(rec.cookie) } {
            Some(name) => rec.new_cc = name.name,
            None => return 0,
        }
    } else if mode == switch_mode::LIST {
        // Reported as it is: the same name on both sides is never set below.
        rec.new_cc = rec.old_cc;
    } else if mode == switch_mode::NAMES {
        let old = CcName { name: rec.old_cc };
        // SAFETY: as for SWITCH_COOKIES; the key is the NUL-padded name getsockopt wrote.
        match unsafe { SWITCH_NAMES.get(old) } {
            Some(name) => rec.new_cc = name.name,
            None => return 0,
        }
    } else {
        return 0;
    }
    rec.sport = read(sk, global!(OFFSETS.skc_num));
    rec.dport = u16::from_be(read(sk, global!(OFFSETS.skc_dport)));
    if !same_cc(&rec.old_cc, &rec.new_cc) {
        let mut name = rec.new_cc;
        // SAFETY: as for getsockopt; the name is a NUL-padded buffer of its full length.
        rec.result = unsafe {
            bpf_setsockopt(tp, SOL_TCP, TCP_CONGESTION, name.as_mut_ptr() as *mut c_void, CC_NAME_LEN as i32)
        } as i32;
    }
    // SAFETY: `meta->seq` is the iterator's seq_file (first field of bpf_iter_meta); the record
    // is a plain struct on the stack.
    unsafe {
        let seq = *(meta as *const *mut aya_ebpf::bindings::seq_file);
        bpf_seq_write(seq, &rec as *const SwitchRecord as *const c_void, SWITCH_RECORD_SIZE as u32);
    }
    0
}
