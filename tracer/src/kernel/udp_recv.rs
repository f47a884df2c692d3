//! The UDP receive hook (`cct_udp_recv` on `sock:sock_recv_length`) attached only while UDP is
//! received in earnest.
//!
//! The tracepoint fires on every receive call of every socket: a TCP bulk receiver's reads run
//! the program 100,000 times a second and more, each an early return that still pays the
//! kernel's dispatch of a program. UDP's sends need no hook of their own (the send hook names
//! TCP owners anyway and counts a UDP send in the same run), so receiving is where UDP's
//! accounting costs TCP. The receive hook is attached:
//! - while a heavy UDP socket exists (in the kernel's index: it sent or received over the heavy
//!   threshold and has not gone quiet), or UDP was received at half the heavy rate or more
//!   since the last look;
//! - otherwise for one reading (a second) every [`DISCOVER_EVERY_NS`], so that a socket that only
//!   receives (a stream from another host) is found within that time and counted from then on.
//!
//! A host without heavy UDP pays a second of receive runs every [`DISCOVER_EVERY_NS`] and the
//! attach and detach (each a patch of the kernel's text, which interrupts the other CPUs). What
//! changes against a hook attached for good: a UDP socket that only receives is counted from
//! the first discovery window after it starts, not from its first datagram; sends are counted
//! from the first, as before.
//!
//! [`RecvPlan`] decides (pure); [`RecvHook`] attaches and detaches the program.

use aya::programs::tp_btf::BtfTracePointLinkId;
use aya::programs::BtfTracePoint;
use aya::Ebpf;

/// How often a discovery window opens while the hook is detached.
pub(super) const DISCOVER_EVERY_NS: u64 = 10_000_000_000;
/// How long the hook stays once attached before what it counted is judged: a discovery window.
pub(super) const WINDOW_NS: u64 = 1_000_000_000;
/// The program on `sock:sock_recv_length`.
pub(super) const PROGRAM: &str = "cct_udp_recv";

/// What the hook should do at a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    Attach,
    Detach,
    Keep,
}

/// When the receive hook is attached, from what each look at the UDP accounting finds.
#[derive(Debug)]
pub(super) struct RecvPlan {
    /// When the hook was attached; `None` while detached.
    attached_ns: Option<u64>,
    next_window_ns: u64,
    /// The received-bytes counter at the last look, and when that was.
    last: (u64, u64),
    /// Half the heavy rate: received this fast (bytes a second), the hook stays.
    keep_bytes_per_s: u64,
}

impl RecvPlan {
    /// A plan whose hook was attached at `now_ns` (start-up is the first discovery window);
    /// `heavy_bytes` in `window_ns` is the heavy threshold.
    pub(super) fn new(now_ns: u64, received: u64, heavy_bytes: u64, window_ns: u64) -> Self {
        let per_s = u128::from(heavy_bytes) * 1_000_000_000 / u128::from(window_ns.max(1));
        Self {
            attached_ns: Some(now_ns),
            next_window_ns: now_ns,
            last: (received, now_ns),
            keep_bytes_per_s: u64::try_from(per_s / 2).unwrap_or(u64::MAX),
        }
    }

    /// A look at `now_ns`: `heavy` sockets in the index, `received` bytes counted so far. A hook
    /// attached less than [`WINDOW_NS`] ago is not judged yet.
    pub(super) fn look(&mut self, now_ns: u64, heavy: usize, received: u64) -> Change {
        if self.attached_ns.is_some_and(|at| now_ns.saturating_sub(at) < WINDOW_NS) {
            return Change::Keep;
        }
        let (then, at) = std::mem::replace(&mut self.last, (received, now_ns));
        let elapsed = u128::from(now_ns.saturating_sub(at).max(1));
        let rate = u128::from(received.saturating_sub(then)) * 1_000_000_000 / elapsed;
        let needed = heavy > 0 || rate >= u128::from(self.keep_bytes_per_s.max(1));
        match (self.attached_ns, needed) {
            (Some(_), true) => Change::Keep,
            (Some(_), false) => {
                self.attached_ns = None;
                self.next_window_ns = now_ns + DISCOVER_EVERY_NS;
                Change::Detach
            }
            // Heavy from its sends, or a discovery window due: judged a window later.
            (None, true) => {
                self.attached_ns = Some(now_ns);
                Change::Attach
            }
            (None, false) if now_ns >= self.next_window_ns => {
                self.attached_ns = Some(now_ns);
                Change::Attach
            }
            (None, false) => Change::Keep,
        }
    }
}

/// The receive hook's program and link, attached and detached as its plan says.
#[derive(Debug)]
pub(super) struct RecvHook {
    plan: RecvPlan,
    link: Option<BtfTracePointLinkId>,
    stopped: bool,
    /// Attaches after start-up (discovery windows and heavy UDP), and those that failed.
    pub(super) attaches: u64,
    pub(super) attach_failures: u64,
}

impl RecvHook {
    /// The hook as start-up attached it (`link`), judged from the next look on.
    pub(super) fn new(link: BtfTracePointLinkId, plan: RecvPlan) -> Self {
        Self { plan, link: Some(link), stopped: false, attaches: 0, attach_failures: 0 }
    }

    /// Look at the accounting at `now_ns` and attach or detach the program as the plan says.
    pub(super) fn look(&mut self, ebpf: &mut Ebpf, now_ns: u64, heavy: usize, received: u64) {
        if self.stopped {
            return;
        }
        match self.plan.look(now_ns, heavy, received) {
            Change::Keep => {}
            Change::Detach => {
                if let (Some(prog), Some(link)) = (program(ebpf), self.link.take()) {
                    let _ = prog.detach(link);
                }
                log::debug!(target: LOG_TARGET, "{PROGRAM} detached {now_ns}");
            }
            Change::Attach => {
                self.attaches += 1;
                match program(ebpf).map(BtfTracePoint::attach) {
                    Some(Ok(link)) => self.link = Some(link),
                    _ => self.attach_failures += 1,
                }
                log::debug!(target: LOG_TARGET, "{PROGRAM} attached {now_ns}");
            }
        }
    }

    /// No attach after this: the programs are being unloaded.
    pub(super) fn stop(&mut self) {
        self.stopped = true;
    }

    pub(super) fn attached(&self) -> bool {
        self.link.is_some()
    }
}

/// The log target of each attach and detach (`RUST_LOG=cctrace::udp_recv=debug`).
const LOG_TARGET: &str = "cctrace::udp_recv";

fn program(ebpf: &mut Ebpf) -> Option<&mut BtfTracePoint> {
    ebpf.program_mut(PROGRAM)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn plan() -> RecvPlan {
        // 125,000 bytes a second is heavy: 62,500 a second keeps the hook.
        RecvPlan::new(0, 0, 125_000, SEC)
    }

    #[test]
    fn without_heavy_udp_the_hook_goes_and_comes_back_for_a_window_every_ten_seconds() {
        let mut p = plan();
        assert_eq!(p.look(SEC / 100, 0, 0), Change::Keep, "start-up's window is judged after a second");
        assert_eq!(p.look(SEC, 0, 1_000), Change::Detach, "start-up's window found nothing heavy");
        for s in 2..11 {
            assert_eq!(p.look(s * SEC, 0, 1_000), Change::Keep, "detached at {s} s");
        }
        assert_eq!(p.look(11 * SEC, 0, 1_000), Change::Attach, "a discovery window");
        assert_eq!(p.look(12 * SEC, 0, 1_000), Change::Detach, "nothing received in it");
        assert_eq!(p.look(13 * SEC, 0, 1_000), Change::Keep);
    }

    #[test]
    fn a_heavy_socket_or_receiving_near_the_heavy_rate_keeps_it() {
        let mut p = plan();
        assert_eq!(p.look(SEC, 1, 0), Change::Keep, "a heavy socket");
        assert_eq!(p.look(2 * SEC, 0, 70_000), Change::Keep, "70 kB in a second: half the heavy rate or more");
        assert_eq!(p.look(3 * SEC, 0, 100_000), Change::Detach, "30 kB in a second: too little");
        assert_eq!(p.look(4 * SEC, 1, 100_000), Change::Attach, "a socket heavy from its sends");
        assert_eq!(p.look(5 * SEC, 1, 400_000), Change::Keep);
    }

    #[test]
    fn a_receive_only_stream_is_found_by_the_next_window_and_kept() {
        let mut p = plan();
        assert_eq!(p.look(SEC, 0, 0), Change::Detach);
        // A 2 Mbit/s stream starts at 3 s: nothing counts it while the hook is detached.
        assert_eq!(p.look(5 * SEC, 0, 0), Change::Keep);
        assert_eq!(p.look(11 * SEC, 0, 0), Change::Attach, "the window");
        assert_eq!(p.look(12 * SEC, 0, 250_000), Change::Keep, "found: received at the heavy rate");
        assert_eq!(p.look(13 * SEC, 1, 500_000), Change::Keep, "and heavy now");
    }
}
