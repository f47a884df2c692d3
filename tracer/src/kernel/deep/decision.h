/* The decision record the twins write into their ring buffer. Its Rust side is
 * `DecisionRecord` in tracer-common/src/deep.rs, with the same version, kinds and algorithms.
 * The assertions below pin every field's offset and the size; the tracer's test
 * kernel/deep/layout_test.rs reads them and holds them equal to the Rust type's, so a change
 * to either side fails the build or that test until both agree. */
#ifndef CCT_DECISION_H
#define CCT_DECISION_H

#define CCT_DECISION_VERSION 1

/* What a record says; `arg` and `value` mean what the comment says for each kind. */
enum cct_decision_kind {
	CCT_D_INIT = 1,       /* the twin took the flow over */
	CCT_D_SSTHRESH = 2,   /* loss response: value = ssthresh before, ssthresh = new target */
	CCT_D_GROWTH = 3,     /* one RTT of cong_avoid that changed cwnd: cwnd_before -> cwnd_after, value = segments acked, arg = 1 in slow start */
	CCT_D_CWND_EVENT = 4, /* arg = enum tcp_ca_event */
	CCT_D_STATE = 5,      /* ca_state -> arg (the new state) */
	CCT_D_UNDO = 6,       /* a spurious loss undone: cwnd_before -> cwnd_after */
	CCT_D_BBR = 7,        /* after bbr_main: arg = mode, bbr_cycle, gains, bw, min_rtt, pacing */
};

enum cct_algo {
	CCT_ALGO_CUBIC = 1,
	CCT_ALGO_RENO = 2,
	CCT_ALGO_BBR = 3,
};

struct cct_decision {
	__u64 ts_ns;        /* CLOCK_MONOTONIC */
	__u64 cookie;       /* socket cookie (0 if nothing asked for it yet) */
	__u64 pacing_rate;  /* sk_pacing_rate, bytes/s */
	__u64 bw;           /* BBR: max-filtered bandwidth, packets/us << 24 (BW_SCALE) */
	__u32 cwnd_before;
	__u32 cwnd_after;
	__u32 ssthresh;
	__u32 min_rtt_us;   /* BBR's min_rtt estimate; else tcp_min_rtt */
	__u32 srtt_us;      /* smoothed RTT, us */
	__u32 mss;
	__u32 value;
	__u8 version;
	__u8 kind;
	__u8 algo;
	__u8 ca_state;      /* icsk_ca_state when the callback ran */
	__u8 arg;
	__u8 bbr_cycle;     /* BBR probe_bw phase index */
	__u16 bbr_pacing_gain; /* BBR_UNIT (256) = 1.0 */
	__u16 bbr_cwnd_gain;
	__u16 _pad;
};

#define CCT_DECISION_SIZE 72
_Static_assert(sizeof(struct cct_decision) == CCT_DECISION_SIZE, "decision layout");

#define CCT_AT(field, offset) \
	_Static_assert(__builtin_offsetof(struct cct_decision, field) == offset, "offset of " #field)
CCT_AT(ts_ns, 0);
CCT_AT(cookie, 8);
CCT_AT(pacing_rate, 16);
CCT_AT(bw, 24);
CCT_AT(cwnd_before, 32);
CCT_AT(cwnd_after, 36);
CCT_AT(ssthresh, 40);
CCT_AT(min_rtt_us, 44);
CCT_AT(srtt_us, 48);
CCT_AT(mss, 52);
CCT_AT(value, 56);
CCT_AT(version, 60);
CCT_AT(kind, 61);
CCT_AT(algo, 62);
CCT_AT(ca_state, 63);
CCT_AT(arg, 64);
CCT_AT(bbr_cycle, 65);
CCT_AT(bbr_pacing_gain, 66);
CCT_AT(bbr_cwnd_gain, 68);
CCT_AT(_pad, 70);
#undef CCT_AT

#endif
