//! Naming the owner of accepted flows: `tcp_sendmsg_locked` runs in the sending process, which
//! is remembered in the flow's state (BTF only).

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use tracer_common::{counter, flag, FlowState, HookId};

use crate::due_memo::{self, OWNER_CHECK_DUE, OWNER_RECHECK_NS};
use crate::flow_key::{self, btf_key};
use crate::maps::{bump, enabled, FLOWS};

/// Remember who sends on a flow whose owner is unknown (accepted connections: the SYN_SENT
/// transition happened on the peer). Runs in the sending process's context; emits nothing.
#[inline(always)]
fn try_sendmsg(sk: *const u8, cookie: u64) -> Result<u32, u32> {
    if sk.is_null() || cookie == 0 {
        return Ok(0);
    }
    due_memo::remember(&OWNER_CHECK_DUE, sk, OWNER_RECHECK_NS);
    if let Some(p) = FLOWS.get_ptr_mut(cookie) {
        // SAFETY: pointer into the map value for this run; sendmsg holds the socket lock, so the
        // other hooks of this socket do not run concurrently.
        let state = unsafe { &mut *p };
        if state.flags & flag::OWNER_KNOWN == 0 {
            state.pid = (bpf_get_current_pid_tgid() >> 32) as u32;
            state.comm = bpf_get_current_comm().unwrap_or_default();
            state.flags |= flag::OWNER_KNOWN;
        }
        return Ok(0);
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
    Ok(0)
}

#[btf_tracepoint(function = "tcp_sendmsg_locked")]
pub fn cct_sendmsg(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::SendMsg) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    if due_memo::not_due(&OWNER_CHECK_DUE, sk) {
        return 0;
    }
    match try_sendmsg(sk, btf_key(sk)) {
        Ok(v) | Err(v) => v,
    }
}

// tcp:tcp_sendmsg_locked has no skaddr in its tracefs record, so it has no classic twin.
