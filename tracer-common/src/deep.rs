//! Deep mode's decision record: what the struct_ops twins (`cct_cubic`, `cct_reno`, `cct_bbr`)
//! write into their ring buffer from inside each congestion-control callback.
//!
//! The twins are C (aya cannot load struct_ops), so the writer's side is
//! `struct cct_decision` in tracer/src/kernel/deep/decision.h. That header asserts each
//! field's offset and the size; a test of the tracer (`kernel/deep/layout_test.rs`) reads those
//! assertions and its enums and holds them equal to this type's offsets and the constants
//! below, so the two sides cannot drift apart without a failing build or test.

/// Version of [`DecisionRecord`] (`CCT_DECISION_VERSION`). Bump on any layout change.
pub const DECISION_VERSION: u8 = 1;

/// What a record says (`enum cct_decision_kind`); [`DecisionRecord::arg`] and
/// [`DecisionRecord::value`] mean what each kind's comment says.
pub mod decision_kind {
    /// The twin took the flow over.
    pub const INIT: u8 = 1;
    /// The loss response: `value` = ssthresh before, `ssthresh` = the new target.
    pub const SSTHRESH: u8 = 2;
    /// One RTT of `cong_avoid` that changed cwnd: `value` = segments acked, `arg` = 1 in slow start.
    pub const GROWTH: u8 = 3;
    /// `arg` = `enum tcp_ca_event`.
    pub const CWND_EVENT: u8 = 4;
    /// The CA state moves from `ca_state` to `arg`.
    pub const STATE: u8 = 5;
    /// A spurious loss undone: `cwnd_before` -> `cwnd_after`.
    pub const UNDO: u8 = 6;
    /// After `bbr_main`: `arg` = mode, and the `bbr_*` fields, `bw`, `min_rtt_us`, pacing.
    pub const BBR: u8 = 7;
}

/// The kernel algorithm a twin runs (`enum cct_algo`).
pub mod twin_algo {
    pub const CUBIC: u8 = 1;
    pub const RENO: u8 = 2;
    pub const BBR: u8 = 3;
}

/// One decision, as the twins write it (`struct cct_decision`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DecisionRecord {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    /// Socket cookie (0 if nothing asked for it yet).
    pub cookie: u64,
    /// `sk_pacing_rate`, bytes per second.
    pub pacing_rate: u64,
    /// BBR: its max-filtered bandwidth, packets per µs << 24 (`BW_SCALE`).
    pub bw: u64,
    pub cwnd_before: u32,
    pub cwnd_after: u32,
    pub ssthresh: u32,
    /// BBR's min_rtt estimate; else `tcp_min_rtt`.
    pub min_rtt_us: u32,
    /// Smoothed RTT, µs (already shifted).
    pub srtt_us: u32,
    pub mss: u32,
    pub value: u32,
    /// [`DECISION_VERSION`].
    pub version: u8,
    /// A [`decision_kind`] value.
    pub kind: u8,
    /// A [`twin_algo`] value.
    pub algo: u8,
    /// `icsk_ca_state` when the callback ran.
    pub ca_state: u8,
    pub arg: u8,
    /// BBR's probe_bw phase index.
    pub bbr_cycle: u8,
    /// BBR's gains, `BBR_UNIT` (256) = 1.0.
    pub bbr_pacing_gain: u16,
    pub bbr_cwnd_gain: u16,
    pub _pad: u16,
}

/// `CCT_DECISION_SIZE`.
pub const DECISION_SIZE: usize = 72;
const _: () = assert!(core::mem::size_of::<DecisionRecord>() == DECISION_SIZE);
const _: () = assert!(core::mem::size_of::<DecisionRecord>().is_multiple_of(8));
