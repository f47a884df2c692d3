//! The per-flow sample path: `tcp_probe` (every segment a socket receives counted, see
//! `receive`; a flow's periodic sample, once an interval) and `tcp_retransmit_skb`, as BTF
//! tracepoints and as classic ones (whose records carry no `sk_buff`: nothing is counted).

use aya_ebpf::{
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use tracer_common::{counter, reason, HookId};

use crate::due_memo::{self, PERIODIC_DUE};
use crate::flow_key::{address_of, btf_key, classic_key};
use crate::maps::{bump_roughly, enabled};
use crate::observe::{observe, Hit, CA_FROM_SOCKET};
use crate::read::classic_sk;
use crate::receive;

#[btf_tracepoint(function = "tcp_probe")]
pub fn cct_probe(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::TcpProbe) {
        return 0;
    }
    bump_roughly(counter::PROBE_RUNS);
    let sk: *const u8 = ctx.arg(0);
    let skb: *const u8 = ctx.arg(1);
    if sk.is_null() {
        return 0;
    }
    // The socket's address, once: the receive counts and the due memo are both keyed by it.
    let address = address_of(sk);
    // Every segment is counted; a sample follows only when one is due, or at once when the
    // segment ended an episode's measurement.
    let episode = receive::count_segment(sk, address, skb);
    if !episode && due_memo::not_due_key(&PERIODIC_DUE, address) {
        return 0;
    }
    let hit = Hit {
        sk,
        cookie: btf_key(sk),
        reason: if episode { reason::RECV_EPISODE } else { reason::PERIODIC },
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: false,
        undone: false,
        skb,
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
        skb: core::ptr::null(),
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
        skb: core::ptr::null(),
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
        skb: core::ptr::null(),
    };
    match observe(hit) {
        Ok(v) | Err(v) => v,
    }
}
