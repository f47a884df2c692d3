//! The per-flow sample path: `tcp_probe` (a flow's periodic sample, once an interval) and
//! `tcp_retransmit_skb`, as BTF tracepoints and as classic ones.

use aya_ebpf::{
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use tracer_common::{counter, reason, HookId};

use crate::due_memo::{self, PERIODIC_DUE};
use crate::flow_key::{btf_key, classic_key};
use crate::maps::{bump_roughly, enabled};
use crate::observe::{observe, Hit, CA_FROM_SOCKET};
use crate::read::classic_sk;

#[btf_tracepoint(function = "tcp_probe")]
pub fn cct_probe(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::TcpProbe) {
        return 0;
    }
    bump_roughly(counter::PROBE_RUNS);
    let sk: *const u8 = ctx.arg(0);
    if due_memo::not_due(&PERIODIC_DUE, sk) {
        return 0;
    }
    let hit = Hit {
        sk,
        cookie: btf_key(sk),
        reason: reason::PERIODIC,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: false,
        undone: false,
    };
    match observe(hit) {
        Ok(v) | Err(v) => v,
    }
}

#[btf_tracepoint(function = "tcp_retransmit_skb")]
pub fn cct_retrans(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::Retransmit) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    let hit = Hit {
        sk,
        cookie: btf_key(sk),
        reason: reason::RETRANSMIT,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: false,
        undone: false,
    };
    match observe(hit) {
        Ok(v) | Err(v) => v,
    }
}

#[tracepoint(category = "tcp", name = "tcp_probe")]
pub fn cct_tp_probe(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::TcpProbe) {
        return 0;
    }
    bump_roughly(counter::PROBE_RUNS);
    let sk = classic_sk(&ctx, HookId::TcpProbe);
    if due_memo::not_due(&PERIODIC_DUE, sk) {
        return 0;
    }
    let hit = Hit {
        sk,
        cookie: classic_key(sk),
        reason: reason::PERIODIC,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: true,
        undone: false,
    };
    match observe(hit) {
        Ok(v) | Err(v) => v,
    }
}

#[tracepoint(category = "tcp", name = "tcp_retransmit_skb")]
pub fn cct_tp_retrans(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::Retransmit) {
        return 0;
    }
    let sk = classic_sk(&ctx, HookId::Retransmit);
    let hit = Hit {
        sk,
        cookie: classic_key(sk),
        reason: reason::RETRANSMIT,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: true,
        undone: false,
    };
    match observe(hit) {
        Ok(v) | Err(v) => v,
    }
}
