//! Naming the owner of accepted flows: a TCP socket's send call (`socket_call`) runs in the
//! sending process, which is remembered in the flow's state (BTF only). Once per call, not once
//! per buffer the call fills (`tcp:tcp_sendmsg_locked`, which this hook replaced, ran ten times
//! as often in a bulk transfer, and exists only since Linux 6.13).

use aya_ebpf::helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid};
use tracer_common::{counter, flag, FlowState, HookId};

use crate::due_memo::{self, OWNER_CHECK_DUE, OWNER_RECHECK_NS};
use crate::flow_key::{self, btf_key};
use crate::maps::{bump, enabled, FLOWS};

/// Remember who sends on a flow whose owner is unknown (accepted connections: the SYN_SENT
/// transition happened on the peer). Runs in the sending process's context; emits nothing.
#[inline(always)]
fn remember_owner(sk: *const u8, cookie: u64) {
    if sk.is_null() || cookie == 0 {
        return;
    }
    due_memo::remember(&OWNER_CHECK_DUE, sk, OWNER_RECHECK_NS);
    if let Some(p) = FLOWS.get_ptr_mut(cookie) {
        // SAFETY: pointer into the map value for this run. The send call has returned (the
        // tracepoint fires after it), so the socket's other hooks may run on another CPU at the
        // same time: one that copied the state before these writes and stores it back after
        // them undoes them, and a later send writes the owner again (the memo lets one through
        // every OWNER_RECHECK_NS).
        let state = unsafe { &mut *p };
        if state.flags & flag::OWNER_KNOWN == 0 {
            state.pid = (bpf_get_current_pid_tgid() >> 32) as u32;
            state.comm = bpf_get_current_comm().unwrap_or_default();
            state.flags |= flag::OWNER_KNOWN;
        }
        return;
    }
    let state = FlowState {
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        comm: bpf_get_current_comm().unwrap_or_default(),
        flags: flag::OWNER_KNOWN,
        ..flow_key::new_flow_state(cookie)
    };
    if FLOWS.insert(cookie, state, 0).is_err() {
        bump(counter::FLOW_MAP_FULL);
    }
}

/// A send call on TCP socket `sk`, in the calling process's context.
#[inline(always)]
pub(crate) fn on_send(sk: *const u8) {
    if !enabled(HookId::SendCall) || due_memo::not_due(&OWNER_CHECK_DUE, sk) {
        return;
    }
    remember_owner(sk, btf_key(sk));
}
