// SPDX-License-Identifier: GPL-2.0
/* Instrumented twins of the kernel's CUBIC, Reno and BBR for `cctrace --deep`.
 *
 * Each twin is a BPF tcp_congestion_ops whose callbacks call the kernel's own implementation
 * through its kfuncs (cubictcp_*, tcp_reno_*, bbr_*), so a flow on a twin behaves as on the
 * original; around each call the twin writes a decision record (decision.h) into `decisions`.
 * The algorithm's private state lives where the original keeps it (icsk_ca_priv), which the
 * kfuncs read and write; the twin's own bookkeeping (the current RTT round, BBR's last mode)
 * lives in socket storage.
 *
 * Why C and libbpf: aya 0.14 can neither load struct_ops maps nor aya-ebpf emit them (see
 * tracer/src/kernel/deep/mod.rs). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "decision.h"

char LICENSE[] SEC("license") = "GPL";

#define TCP_CONG_NON_RESTRICTED 0x1

/* The kernel's algorithms, as kfuncs (net/ipv4/tcp_cubic.c, tcp_bbr.c, tcp_cong.c). */
extern void cubictcp_init(struct sock *sk) __ksym;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;
extern void bbr_init(struct sock *sk) __ksym;
extern void bbr_main(struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs) __ksym;
extern __u32 bbr_sndbuf_expand(struct sock *sk) __ksym;
extern __u32 bbr_undo_cwnd(struct sock *sk) __ksym;
extern void bbr_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern __u32 bbr_ssthresh(struct sock *sk) __ksym;
extern __u32 bbr_min_tso_segs(struct sock *sk) __ksym;
extern void bbr_set_state(struct sock *sk, __u8 new_state) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} decisions SEC(".maps");

/* [0] records written, [1] records lost (ring buffer full). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} decision_counters SEC(".maps");

/* Per socket: the RTT round growth is measured over, and BBR's last reported phase. */
struct cct_round {
	__u64 start_ns;
	__u32 start_cwnd;
	__u32 acked;
	__u8 in_slow_start;
	__u8 bbr_mode;
	__u8 bbr_cycle;
	__u8 tx_start_reported; /* one "sending starts after idle" per round is enough */
	__u8 _pad[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct cct_round);
} rounds SEC(".maps");

static __always_inline void count(__u32 index)
{
	__u64 *c = bpf_map_lookup_elem(&decision_counters, &index);

	if (c)
		*c += 1;
}

static __always_inline struct tcp_sock *tcp(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

/* A record with the socket's common fields filled in; NULL when the ring buffer is full. */
static __always_inline struct cct_decision *start(struct sock *sk, __u8 kind, __u8 algo)
{
	struct cct_decision *d = bpf_ringbuf_reserve(&decisions, sizeof(*d), 0);
	struct tcp_sock *tp = tcp(sk);
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;

	if (!d) {
		count(1);
		return NULL;
	}
	__builtin_memset(d, 0, sizeof(*d));
	d->ts_ns = bpf_ktime_get_ns();
	d->cookie = sk->__sk_common.skc_cookie.counter;
	d->pacing_rate = sk->sk_pacing_rate;
	d->cwnd_before = tp->snd_cwnd;
	d->cwnd_after = tp->snd_cwnd;
	d->ssthresh = tp->snd_ssthresh;
	d->min_rtt_us = tp->rtt_min.s[0].v;
	d->srtt_us = tp->srtt_us >> 3;
	d->mss = tp->mss_cache;
	d->version = CCT_DECISION_VERSION;
	d->kind = kind;
	d->algo = algo;
	d->ca_state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
	return d;
}

static __always_inline void submit(struct cct_decision *d)
{
	bpf_ringbuf_submit(d, 0);
	count(0);
}

static __always_inline void emit_simple(struct sock *sk, __u8 kind, __u8 algo, __u8 arg)
{
	struct cct_decision *d = start(sk, kind, algo);

	if (!d)
		return;
	d->arg = arg;
	submit(d);
}

static __always_inline struct cct_round *round_of(struct sock *sk)
{
	return bpf_sk_storage_get(&rounds, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
}

static __always_inline void on_init(struct sock *sk, __u8 algo)
{
	struct cct_round *r = round_of(sk);

	if (r) {
		r->start_ns = bpf_ktime_get_ns();
		r->start_cwnd = tcp(sk)->snd_cwnd;
		r->acked = 0;
		r->bbr_mode = 0xff;
		r->bbr_cycle = 0xff;
	}
	emit_simple(sk, CCT_D_INIT, algo, 0);
}

static __always_inline __u32 on_ssthresh(struct sock *sk, __u8 algo, __u32 new_ssthresh)
{
	struct cct_decision *d = start(sk, CCT_D_SSTHRESH, algo);

	if (d) {
		d->value = d->ssthresh;
		d->ssthresh = new_ssthresh;
		/* The reduction (PRR in recovery, 1 after a timeout) converges on the new ssthresh. */
		d->cwnd_after = new_ssthresh;
		submit(d);
	}
	return new_ssthresh;
}

/* Before the algorithm's cong_avoid: remember where this RTT round began. */
static __always_inline struct cct_round *growth_before(struct sock *sk, __u32 acked)
{
	struct cct_round *r = round_of(sk);

	if (r)
		r->acked += acked;
	return r;
}

/* After it: once a smoothed RTT has passed since the round began, report the round's growth. */
static __always_inline void growth_after(struct sock *sk, struct cct_round *r, __u8 algo)
{
	struct tcp_sock *tp = tcp(sk);
	__u64 now = bpf_ktime_get_ns();
	__u64 rtt_ns = (__u64)(tp->srtt_us >> 3) * 1000;
	struct cct_decision *d;

	if (!r || now - r->start_ns < rtt_ns)
		return;
	/* A round without growth (application-limited, or cwnd held) says nothing new. */
	d = r->start_cwnd != tp->snd_cwnd ? start(sk, CCT_D_GROWTH, algo) : NULL;
	if (d) {
		d->cwnd_before = r->start_cwnd;
		d->value = r->acked;
		d->arg = r->in_slow_start;
		submit(d);
	}
	r->start_ns = now;
	r->start_cwnd = tp->snd_cwnd;
	r->acked = 0;
	r->in_slow_start = tp->snd_cwnd < tp->snd_ssthresh;
	r->tx_start_reported = 0;
}

/* cwnd events, but an application that stops and starts on every write gets one
 * "sending starts after idle" per RTT round, not one per write. */
static __always_inline void on_cwnd_event(struct sock *sk, __u8 algo, enum tcp_ca_event event)
{
	struct cct_round *r;

	if (event == CA_EVENT_TX_START) {
		r = round_of(sk);
		if (!r || r->tx_start_reported)
			return;
		r->tx_start_reported = 1;
	}
	emit_simple(sk, CCT_D_CWND_EVENT, algo, event);
}

static __always_inline void on_state(struct sock *sk, __u8 algo, __u8 new_state)
{
	emit_simple(sk, CCT_D_STATE, algo, new_state);
}

static __always_inline __u32 on_undo(struct sock *sk, __u8 algo, __u32 cwnd)
{
	struct cct_decision *d = start(sk, CCT_D_UNDO, algo);

	if (d) {
		d->cwnd_after = cwnd;
		submit(d);
	}
	return cwnd;
}

/* ---------------------------------------------------------------- cct_cubic */

SEC("struct_ops")
void BPF_PROG(cct_cubic_init, struct sock *sk)
{
	cubictcp_init(sk);
	on_init(sk, CCT_ALGO_CUBIC);
}

SEC("struct_ops")
__u32 BPF_PROG(cct_cubic_ssthresh, struct sock *sk)
{
	return on_ssthresh(sk, CCT_ALGO_CUBIC, cubictcp_recalc_ssthresh(sk));
}

SEC("struct_ops")
void BPF_PROG(cct_cubic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct cct_round *r = growth_before(sk, acked);

	cubictcp_cong_avoid(sk, ack, acked);
	growth_after(sk, r, CCT_ALGO_CUBIC);
}

SEC("struct_ops")
void BPF_PROG(cct_cubic_state, struct sock *sk, __u8 new_state)
{
	on_state(sk, CCT_ALGO_CUBIC, new_state);
	cubictcp_state(sk, new_state);
}

SEC("struct_ops")
void BPF_PROG(cct_cubic_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	cubictcp_cwnd_event(sk, event);
	on_cwnd_event(sk, CCT_ALGO_CUBIC, event);
}

SEC("struct_ops")
void BPF_PROG(cct_cubic_acked, struct sock *sk, const struct ack_sample *sample)
{
	cubictcp_acked(sk, sample);
}

SEC("struct_ops")
__u32 BPF_PROG(cct_cubic_undo, struct sock *sk)
{
	return on_undo(sk, CCT_ALGO_CUBIC, tcp_reno_undo_cwnd(sk));
}

SEC(".struct_ops.link")
struct tcp_congestion_ops cct_cubic = {
	.init = (void *)cct_cubic_init,
	.ssthresh = (void *)cct_cubic_ssthresh,
	.cong_avoid = (void *)cct_cubic_cong_avoid,
	.set_state = (void *)cct_cubic_state,
	.undo_cwnd = (void *)cct_cubic_undo,
	.cwnd_event = (void *)cct_cubic_cwnd_event,
	.pkts_acked = (void *)cct_cubic_acked,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "cct_cubic",
};

/* ---------------------------------------------------------------- cct_reno */

/* Reno has no init, set_state or cwnd_event of its own: these only report. */
SEC("struct_ops")
void BPF_PROG(cct_reno_init, struct sock *sk)
{
	on_init(sk, CCT_ALGO_RENO);
}

SEC("struct_ops")
__u32 BPF_PROG(cct_reno_ssthresh, struct sock *sk)
{
	return on_ssthresh(sk, CCT_ALGO_RENO, tcp_reno_ssthresh(sk));
}

SEC("struct_ops")
void BPF_PROG(cct_reno_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct cct_round *r = growth_before(sk, acked);

	tcp_reno_cong_avoid(sk, ack, acked);
	growth_after(sk, r, CCT_ALGO_RENO);
}

SEC("struct_ops")
void BPF_PROG(cct_reno_state, struct sock *sk, __u8 new_state)
{
	on_state(sk, CCT_ALGO_RENO, new_state);
}

SEC("struct_ops")
void BPF_PROG(cct_reno_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	on_cwnd_event(sk, CCT_ALGO_RENO, event);
}

SEC("struct_ops")
__u32 BPF_PROG(cct_reno_undo, struct sock *sk)
{
	return on_undo(sk, CCT_ALGO_RENO, tcp_reno_undo_cwnd(sk));
}

SEC(".struct_ops.link")
struct tcp_congestion_ops cct_reno = {
	.init = (void *)cct_reno_init,
	.ssthresh = (void *)cct_reno_ssthresh,
	.cong_avoid = (void *)cct_reno_cong_avoid,
	.set_state = (void *)cct_reno_state,
	.undo_cwnd = (void *)cct_reno_undo,
	.cwnd_event = (void *)cct_reno_cwnd_event,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "cct_reno",
};

/* ---------------------------------------------------------------- cct_bbr */

/* struct bbr (net/ipv4/tcp_bbr.c) is private to the kernel, but in its BTF: CO-RE reads it. */
static __always_inline struct bbr *bbr_of(struct sock *sk)
{
	return (struct bbr *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

SEC("struct_ops")
void BPF_PROG(cct_bbr_init, struct sock *sk)
{
	bbr_init(sk);
	on_init(sk, CCT_ALGO_BBR);
}

/* After each bbr_main: a record when a round trip ended or the mode or gain phase changed. */
SEC("struct_ops")
void BPF_PROG(cct_bbr_main, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct bbr *bbr = bbr_of(sk);
	struct cct_round *r;
	struct cct_decision *d;
	__u32 cwnd_before = tcp(sk)->snd_cwnd;
	__u8 mode, cycle, round_start;

	bbr_main(sk, ack, flag, rs);
	mode = BPF_CORE_READ_BITFIELD(bbr, mode);
	cycle = BPF_CORE_READ_BITFIELD(bbr, cycle_idx);
	round_start = BPF_CORE_READ_BITFIELD(bbr, round_start);
	r = round_of(sk);
	if (!r)
		return;
	if (!round_start && mode == r->bbr_mode && cycle == r->bbr_cycle)
		return;
	r->bbr_mode = mode;
	r->bbr_cycle = cycle;
	d = start(sk, CCT_D_BBR, CCT_ALGO_BBR);
	if (!d)
		return;
	d->cwnd_before = cwnd_before;
	d->arg = mode;
	d->bbr_cycle = cycle;
	d->bbr_pacing_gain = BPF_CORE_READ_BITFIELD(bbr, pacing_gain);
	d->bbr_cwnd_gain = BPF_CORE_READ_BITFIELD(bbr, cwnd_gain);
	d->bw = bbr->bw.s[0].v;
	d->min_rtt_us = bbr->min_rtt_us;
	d->value = round_start;
	submit(d);
}

SEC("struct_ops")
__u32 BPF_PROG(cct_bbr_sndbuf_expand, struct sock *sk)
{
	return bbr_sndbuf_expand(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(cct_bbr_undo, struct sock *sk)
{
	return on_undo(sk, CCT_ALGO_BBR, bbr_undo_cwnd(sk));
}

SEC("struct_ops")
void BPF_PROG(cct_bbr_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	bbr_cwnd_event(sk, event);
	on_cwnd_event(sk, CCT_ALGO_BBR, event);
}

SEC("struct_ops")
__u32 BPF_PROG(cct_bbr_ssthresh, struct sock *sk)
{
	return on_ssthresh(sk, CCT_ALGO_BBR, bbr_ssthresh(sk));
}

SEC("struct_ops")
__u32 BPF_PROG(cct_bbr_tso_segs, struct sock *sk)
{
	return bbr_min_tso_segs(sk);
}

SEC("struct_ops")
void BPF_PROG(cct_bbr_state, struct sock *sk, __u8 new_state)
{
	on_state(sk, CCT_ALGO_BBR, new_state);
	bbr_set_state(sk, new_state);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops cct_bbr = {
	.init = (void *)cct_bbr_init,
	.cong_control = (void *)cct_bbr_main,
	.sndbuf_expand = (void *)cct_bbr_sndbuf_expand,
	.undo_cwnd = (void *)cct_bbr_undo,
	.cwnd_event = (void *)cct_bbr_cwnd_event,
	.ssthresh = (void *)cct_bbr_ssthresh,
	.min_tso_segs = (void *)cct_bbr_tso_segs,
	.set_state = (void *)cct_bbr_state,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "cct_bbr",
};
