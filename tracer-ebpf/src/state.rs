//! State changes and destroy: `tcp_cong_state_set` (the CA state), `inet_sock_set_state` (opens
//! and closes) and `tcp_destroy_sock`, as BTF tracepoints and as classic ones.

use aya_ebpf::{
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use tracer_common::{
    ca_state::{CA_DISORDER, CA_LOSS, CA_OPEN, CA_RECOVERY},
    reason, tcp_state, HookId, ABSENT, IPPROTO_TCP,
};

use crate::flow_key::{btf_key, classic_key};
use crate::maps::{enabled, CLASSIC, OFFSETS};
use crate::observe::{observe, Hit, CA_FROM_SOCKET};
use crate::read::{classic_sk, classic_u32, is_flow_socket, read, read_bits};

#[btf_tracepoint(function = "tcp_cong_state_set")]
pub fn cct_cong_state(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::CongState) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    let new_ca: u8 = ctx.arg(1);
    match try_cong_state(sk, btf_key(sk), new_ca, false) {
        Ok(v) | Err(v) => v,
    }
}

#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn cct_set_state(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::SetState) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    let old: i32 = ctx.arg(1);
    let new: i32 = ctx.arg(2);
    match try_set_state(sk, old as u8, new as u8, false) {
        Ok(v) | Err(v) => v,
    }
}

#[btf_tracepoint(function = "tcp_destroy_sock")]
pub fn cct_destroy(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::Destroy) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    match try_destroy(sk, btf_key(sk), false) {
        Ok(v) | Err(v) => v,
    }
}

#[inline(always)]
fn try_cong_state(sk: *const u8, cookie: u64, new_ca: u8, classic: bool) -> Result<u32, u32> {
    // tcp_set_ca_state() fires the tracepoint before storing the state; many callers set the
    // state it already has, which is no event worth a sample.
    let old_ca = read_bits(sk, global!(OFFSETS.icsk_ca_state));
    if old_ca == new_ca {
        return Ok(0);
    }
    let undone = left_recovery_undone(sk, old_ca, new_ca);
    observe(Hit {
        sk,
        cookie,
        reason: reason::CA_STATE,
        ca_state: new_ca,
        old_state: 0,
        new_state: 0,
        classic,
        undone,
        skb: core::ptr::null(),
    })
}

/// Whether this move out of Recovery or Loss comes with the cut undone: the undo paths
/// (`tcp_try_undo_recovery`, `_loss`, `_partial`) restore cwnd and ssthresh and zero
/// `undo_marker` before they set Open or Disorder; a recovery that ends for real leaves
/// `undo_marker` where recovery set it. False where the kernel lacks the field.
#[inline(always)]
fn left_recovery_undone(sk: *const u8, old_ca: u8, new_ca: u8) -> bool {
    let leaving = old_ca == CA_RECOVERY || old_ca == CA_LOSS;
    let reopened = new_ca == CA_OPEN || new_ca == CA_DISORDER;
    let off = global!(OFFSETS.undo_marker);
    leaving && reopened && off != ABSENT && read::<u32>(sk, off) == 0
}

#[inline(always)]
fn try_set_state(sk: *const u8, old: u8, new: u8, classic: bool) -> Result<u32, u32> {
    if old == tcp_state::LISTEN || new == tcp_state::LISTEN {
        return Ok(0);
    }
    let proto_off = global!(OFFSETS.sk_protocol);
    if proto_off != ABSENT && read::<u16>(sk, proto_off) != IPPROTO_TCP {
        return Ok(0);
    }
    let cookie = if classic { classic_key(sk) } else { btf_key(sk) };
    observe(Hit {
        sk,
        cookie,
        reason: reason::STATE_CHANGE,
        ca_state: CA_FROM_SOCKET,
        old_state: old,
        new_state: new,
        classic,
        undone: false,
        skb: core::ptr::null(),
    })
}

#[inline(always)]
fn try_destroy(sk: *const u8, cookie: u64, classic: bool) -> Result<u32, u32> {
    if !is_flow_socket(sk) {
        return Ok(0);
    }
    observe(Hit {
        sk,
        cookie,
        reason: reason::DESTROY,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic,
        undone: false,
        skb: core::ptr::null(),
    })
}

#[tracepoint(category = "tcp", name = "tcp_cong_state_set")]
pub fn cct_tp_cong(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::CongState) {
        return 0;
    }
    let sk = classic_sk(&ctx, HookId::CongState);
    let new_ca = classic_u32(&ctx, global!(CLASSIC.cong_state)) as u8;
    match try_cong_state(sk, classic_key(sk), new_ca, true) {
        Ok(v) | Err(v) => v,
    }
}

#[tracepoint(category = "sock", name = "inet_sock_set_state")]
pub fn cct_tp_setstate(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::SetState) {
        return 0;
    }
    let sk = classic_sk(&ctx, HookId::SetState);
    let protocol = classic_u32(&ctx, global!(CLASSIC.set_state_protocol)) as u16;
    if protocol != IPPROTO_TCP {
        return 0;
    }
    let old = classic_u32(&ctx, global!(CLASSIC.set_state_oldstate)) as u8;
    let new = classic_u32(&ctx, global!(CLASSIC.set_state_newstate)) as u8;
    match try_set_state(sk, old, new, true) {
        Ok(v) | Err(v) => v,
    }
}

#[tracepoint(category = "tcp", name = "tcp_destroy_sock")]
pub fn cct_tp_destroy(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::Destroy) {
        return 0;
    }
    let sk = classic_sk(&ctx, HookId::Destroy);
    match try_destroy(sk, classic_key(sk), true) {
        Ok(v) | Err(v) => v,
    }
}
