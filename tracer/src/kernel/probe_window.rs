//! `tcp:tcp_probe` attached only in a short window each sample interval.
//!
//! The tracepoint fires on every segment a socket receives, ACKs included: hundreds of
//! thousands of times a second in one bulk transfer, where a flow needs one periodic sample an
//! interval. Every run, even one that only finds the flow not due, pays the kernel's dispatch
//! of a BPF program, and those runs were most of cctrace's time in the kernel. So the program
//! is attached only while samples are due: a window opens at the start of every interval and
//! closes once each flow sampled in the windows before has been sampled again (a busy flow is,
//! at its first segment) and at least [`MIN_OPEN_NS`] has passed (so a flow that was quiet and
//! is busy again is caught); a thin flow holds it open until its next segment, for at most three
//! quarters of an interval, and every [`LONG_EVERY`]th window stays open that long whatever was
//! sampled, to find again thin flows that went unsampled for two windows and were let go. The
//! reader wakes for the window's times, not only on its 20 ms ring timer. Intervals under
//! [`SHORTEST_INTERVAL_NS`] keep the program attached: windows would save little there and cost
//! two system calls an interval. The kernel lets a periodic sample come an eighth of an interval early (tracer-ebpf's
//! `observe`), so a flow sampled just after one window opened is due again when the next opens.
//!
//! Detaching is not free either: each attach and detach switches the tracepoint on or off in
//! the kernel's text (about 0.1 ms of CPU for the two here). So the program is detached only when the
//! runs it would make until the next window cost more than that: the window counts its runs
//! (a per-CPU counter the program bumps), and a host with a few thousand segments a second,
//! the story's video stream, keeps it attached.
//!
//! What changes: a flow whose segments are further apart than three quarters of an interval is
//! sampled when a window catches one of them, not at its first segment after the interval. Retransmissions, CA-state and TCP-state changes and
//! closes come from their own hooks, always attached.
//!
//! [`WindowPlan`] decides (pure); [`ProbeWindow`] attaches and detaches the program.

use std::collections::HashMap;

use aya::programs::{BtfTracePoint, TracePoint};
use aya::Ebpf;

use super::attach::{HookLink, HOOKS};
use crate::analysis::event::{Sample, SampleReason, TcpState};
use tracer_common::HookId;

/// The shortest window. A busy flow is sampled within microseconds of the attach (at its
/// next segment); the reader wakes this long after the window opened, reads those samples from
/// the ring, and closes it.
pub(super) const MIN_OPEN_NS: u64 = 5_000_000;
/// How often an open window is looked at again while it waits for a thinner flow.
const RECHECK_NS: u64 = 10_000_000;

/// Windows missed in a row after which a flow is no longer waited for.
const MISSES_TO_FORGET: u8 = 2;
/// Every this many windows, one is held open for as long as any is.
const LONG_EVERY: u64 = 20;
/// The shortest interval sampled through windows.
pub(super) const SHORTEST_INTERVAL_NS: u64 = 50_000_000;
/// What one run of the program costs, for weighing a detach: a run that finds nothing due, on
/// this VM with the kernel's statistics off (50-80 ns with them on).
const RUN_COST_NS: u64 = 40;

/// What the window should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    Open,
    Close,
    Stay,
}

/// A flow the windows wait for.
#[derive(Clone, Copy, Debug, Default)]
struct Expected {
    sampled: bool,
    missed: u8,
}

/// When the window is open, from the samples seen. Times are CLOCK_MONOTONIC ns, the clock of
/// the samples.
#[derive(Debug)]
pub(super) struct WindowPlan {
    interval_ns: u64,
    max_open_ns: u64,
    /// When the next window opens (the start of the next interval).
    next_open_ns: u64,
    /// When the open window opened; `None` while closed.
    opened_ns: Option<u64>,
    /// When the plan was last stepped.
    stepped_ns: u64,
    /// Windows opened so far.
    opened: u64,
    expected: HashMap<u64, Expected>,
}

impl WindowPlan {
    /// A plan for `interval_ns` whose first window opens at `now_ns`; `None` when the interval
    /// is too short for windows to save anything (the program then stays attached).
    pub(super) fn new(interval_ns: u64, now_ns: u64) -> Option<Self> {
        (interval_ns >= SHORTEST_INTERVAL_NS).then(|| Self {
            interval_ns,
            max_open_ns: interval_ns / 4 * 3,
            next_open_ns: now_ns,
            opened_ns: None,
            stepped_ns: now_ns,
            opened: 0,
            expected: HashMap::new(),
        })
    }

    /// When the plan next wants a step: the next window's start while closed; while open, the
    /// end of the shortest window, then every [`RECHECK_NS`], at the latest its longest.
    pub(super) fn next_step_ns(&self) -> u64 {
        match self.opened_ns {
            None => self.next_open_ns,
            Some(opened) if self.stepped_ns < opened + MIN_OPEN_NS => opened + MIN_OPEN_NS,
            Some(opened) => (self.stepped_ns + RECHECK_NS).min(opened + self.max_open_ns),
        }
    }

    /// Take note of a sample: its flow sampled in this window (and so waited for in the next),
    /// or gone. A flow is waited for only once it has had a periodic sample: under churn, new
    /// connections that close within their first interval would otherwise hold every window
    /// open. A new busy flow is sampled in the next window's first milliseconds anyway.
    pub(super) fn saw(&mut self, sample: &Sample) {
        let closed = sample.reason == SampleReason::Destroy
            || (sample.reason == SampleReason::StateChange && sample.tcp_state == TcpState::Close);
        if closed {
            self.expected.remove(&sample.cookie);
        } else if sample.reason == SampleReason::Periodic {
            self.expected.insert(sample.cookie, Expected { sampled: true, missed: 0 });
        }
    }

    /// What to do at `now_ns`.
    pub(super) fn step(&mut self, now_ns: u64) -> Action {
        self.stepped_ns = now_ns;
        match self.opened_ns {
            None if now_ns >= self.next_open_ns => {
                self.opened_ns = Some(now_ns);
                self.opened += 1;
                for e in self.expected.values_mut() {
                    e.sampled = false;
                }
                // The next interval's start; a reader late by more than an interval skips to now.
                self.next_open_ns += self.interval_ns;
                if self.next_open_ns <= now_ns {
                    self.next_open_ns = now_ns + self.interval_ns;
                }
                Action::Open
            }
            None => Action::Stay,
            Some(opened) => {
                let open_for = now_ns.saturating_sub(opened);
                let long = self.opened.is_multiple_of(LONG_EVERY);
                let all_sampled = !long && self.expected.values().all(|e| e.sampled);
                if (open_for >= MIN_OPEN_NS && all_sampled) || open_for >= self.max_open_ns {
                    self.opened_ns = None;
                    self.expected.retain(|_, e| {
                        if !e.sampled {
                            e.missed += 1;
                        }
                        e.missed < MISSES_TO_FORGET
                    });
                    Action::Close
                } else {
                    Action::Stay
                }
            }
        }
    }
}

/// Whether detaching until the next window saves more than the detach and the attach cost:
/// `runs` made in the `open_ns` the window was open, at that rate for `closed_ns` more, against
/// `cycle_ns` for a detach and an attach (0 while not yet measured: detach, and measure).
pub(super) fn detach_pays(runs: u64, open_ns: u64, closed_ns: u64, cycle_ns: u64) -> bool {
    let saved_runs = u128::from(runs) * u128::from(closed_ns) / u128::from(open_ns.max(1));
    saved_runs * u128::from(RUN_COST_NS) > u128::from(cycle_ns)
}

/// `tcp:tcp_probe`'s program, attached while the plan's window is open (and between windows
/// when detaching would cost more than it saves).
#[derive(Debug)]
pub(super) struct ProbeWindow {
    plan: Option<WindowPlan>,
    /// The program's link while attached.
    link: Option<HookLink>,
    classic: bool,
    stopped: bool,
    /// The program's run count and the time when the window opened.
    opened_at: (u64, u64),
    /// CPU time of a detach and an attach, averaged over the cycles measured (0: not yet).
    cycle_ns: u64,
    /// The last detach's CPU time, until the attach that completes its cycle.
    detach_ns: Option<u64>,
    /// Attaches that failed (the next window tries again).
    pub(super) attach_failures: u64,
    /// Windows opened so far.
    pub(super) windows: u64,
    /// Windows after which the program stayed attached, detaching not paying.
    pub(super) kept: u64,
}

impl ProbeWindow {
    /// `link`: the program's link as the hooks were attached (`None`: `tcp_probe` is off).
    /// `windows`: false keeps the program attached for good (`--probe-always-attached`).
    pub(super) fn new(link: Option<HookLink>, interval_ns: u64, now_ns: u64, windows: bool) -> Self {
        let classic = matches!(link, Some(HookLink::Classic(_)));
        let plan = link.as_ref().filter(|_| windows).and_then(|_| WindowPlan::new(interval_ns, now_ns));
        Self {
            plan,
            link,
            classic,
            stopped: false,
            opened_at: (0, now_ns),
            cycle_ns: 0,
            detach_ns: None,
            attach_failures: 0,
            windows: 0,
            kept: 0,
        }
    }

    /// Take note of `batch` and open or close the window as the plan says at `now_ns`;
    /// `probe_runs` reads the program's run count.
    pub(super) fn step(&mut self, ebpf: &mut Ebpf, now_ns: u64, batch: &[Sample], probe_runs: impl Fn() -> u64) {
        let Some(plan) = self.plan.as_mut() else { return };
        for sample in batch {
            plan.saw(sample);
        }
        if self.stopped {
            return;
        }
        match plan.step(now_ns) {
            Action::Open => {
                self.windows += 1;
                self.opened_at = (probe_runs(), now_ns);
                // At start the program is attached already, and it stays attached between
                // windows when detaching did not pay.
                if self.link.is_none() {
                    let started = crate::clock::thread_cpu_ns();
                    match attach(ebpf, self.classic) {
                        Some(link) => self.link = Some(link),
                        None => self.attach_failures += 1,
                    }
                    let attach_ns = crate::clock::thread_cpu_ns().saturating_sub(started);
                    if let Some(detach_ns) = self.detach_ns.take() {
                        self.cycle_ns = average_cycle(self.cycle_ns, detach_ns + attach_ns);
                    }
                }
            }
            Action::Close => {
                let (runs_then, opened_ns) = self.opened_at;
                let open_ns = now_ns.saturating_sub(opened_ns);
                let closed_ns = plan.next_step_ns().saturating_sub(now_ns);
                if detach_pays(probe_runs().saturating_sub(runs_then), open_ns, closed_ns, self.cycle_ns) {
                    let started = crate::clock::thread_cpu_ns();
                    detach(ebpf, self.link.take());
                    // The cycle is measured whole at the next attach.
                    self.detach_ns = Some(crate::clock::thread_cpu_ns().saturating_sub(started));
                } else {
                    self.kept += 1;
                    // A cost measured once under load must not keep the program attached for
                    // good: it fades while kept, so that a cycle is tried and measured again
                    // (about every six seconds at the default interval on a quiet host).
                    self.cycle_ns -= self.cycle_ns / 16;
                }
            }
            Action::Stay => {}
        }
    }

    /// When the window next wants a step (CLOCK_MONOTONIC ns), if it is being planned. Kept
    /// attached between windows, nothing waits on the time: the reader's own 20 ms timer steps
    /// the plan, and the reader wakes no more often than it did before windows.
    pub(super) fn next_step_ns(&self) -> Option<u64> {
        let plan = self.plan.as_ref().filter(|_| !self.stopped)?;
        if self.link.is_some() && plan.opened_ns.is_none() {
            return None;
        }
        Some(plan.next_step_ns())
    }

    /// No window opens after this (the programs are being detached for good).
    pub(super) fn stop(&mut self) {
        self.stopped = true;
    }
}

/// The average of the cycles measured so far (`average`, 0 before the first) with `cycle`, the
/// last one weighing a quarter: one slow cycle on a busy host moves it a little.
fn average_cycle(average: u64, cycle: u64) -> u64 {
    if average == 0 {
        cycle
    } else {
        (3 * average + cycle) / 4
    }
}

fn attach(ebpf: &mut Ebpf, classic: bool) -> Option<HookLink> {
    let hook = &HOOKS[HookId::TcpProbe.index()];
    if classic {
        let prog: &mut TracePoint = ebpf.program_mut(hook.classic_prog)?.try_into().ok()?;
        prog.attach(hook.group, hook.event).ok().map(HookLink::Classic)
    } else {
        let prog: &mut BtfTracePoint = ebpf.program_mut(hook.btf_prog)?.try_into().ok()?;
        prog.attach().ok().map(HookLink::Btf)
    }
}

fn detach(ebpf: &mut Ebpf, link: Option<HookLink>) {
    let hook = &HOOKS[HookId::TcpProbe.index()];
    match link {
        Some(HookLink::Btf(id)) => {
            if let Some(prog) = ebpf.program_mut(hook.btf_prog).and_then(|p| <&mut BtfTracePoint>::try_from(p).ok()) {
                let _ = prog.detach(id);
            }
        }
        Some(HookLink::Classic(id)) => {
            if let Some(prog) = ebpf.program_mut(hook.classic_prog).and_then(|p| <&mut TracePoint>::try_from(p).ok()) {
                let _ = prog.detach(id);
            }
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn sample(cookie: u64, reason: SampleReason) -> Sample {
        Sample { reason, ..crate::analysis::model::tests::sample(cookie, 0) }
    }

    #[test]
    fn busy_flows_close_the_window_once_sampled_and_after_the_shortest_window() {
        let mut plan = WindowPlan::new(SEC, 0).expect("a second is long enough");
        assert_eq!(plan.step(0), Action::Open);
        plan.saw(&sample(1, SampleReason::Periodic));
        plan.saw(&sample(2, SampleReason::Periodic));
        assert_eq!(plan.step(MS), Action::Stay, "open for the shortest window first");
        assert_eq!(plan.next_step_ns(), 5 * MS, "at the shortest window's end");
        assert_eq!(plan.step(5 * MS), Action::Close);
        assert_eq!(plan.step(500 * MS), Action::Stay, "closed until the next interval");
        assert_eq!(plan.step(SEC), Action::Open);
        plan.saw(&sample(1, SampleReason::Periodic));
        assert_eq!(plan.step(SEC + 40 * MS), Action::Stay, "flow 2 not sampled yet");
        plan.saw(&sample(2, SampleReason::Periodic));
        assert_eq!(plan.step(SEC + 60 * MS), Action::Close);
    }

    #[test]
    fn a_quiet_flow_holds_the_window_three_quarters_of_an_interval_then_is_let_go_after_two_misses() {
        let mut plan = WindowPlan::new(SEC, 0).expect("long enough");
        assert_eq!(plan.step(0), Action::Open);
        assert_eq!(plan.next_step_ns(), 5 * MS, "the shortest window's end");
        plan.saw(&sample(7, SampleReason::Periodic));
        assert_eq!(plan.step(40 * MS), Action::Close);
        assert_eq!(plan.next_step_ns(), SEC, "the next interval");
        for window in 1..=2 {
            let start = window * SEC;
            assert_eq!(plan.step(start), Action::Open);
            assert_eq!(plan.step(start + 300 * MS), Action::Stay, "waiting for flow 7");
            assert_eq!(plan.step(start + 745 * MS), Action::Stay);
            assert_eq!(plan.next_step_ns(), start + 750 * MS, "at the latest the longest window's end");
            assert_eq!(plan.step(start + 750 * MS), Action::Close, "at most three quarters of an interval");
        }
        assert_eq!(plan.step(3 * SEC), Action::Open);
        assert_eq!(plan.step(3 * SEC + 40 * MS), Action::Close, "flow 7 no longer waited for");
    }

    #[test]
    fn only_flows_sampled_before_are_waited_for_and_closed_ones_are_not() {
        let mut plan = WindowPlan::new(SEC, 0).expect("long enough");
        assert_eq!(plan.step(0), Action::Open);
        plan.saw(&sample(3, SampleReason::StateChange));
        assert_eq!(plan.step(5 * MS), Action::Close, "a new flow without a periodic sample holds nothing");
        assert_eq!(plan.step(SEC), Action::Open);
        plan.saw(&sample(3, SampleReason::Periodic));
        assert_eq!(plan.step(SEC + 5 * MS), Action::Close);
        assert_eq!(plan.step(2 * SEC), Action::Open);
        assert_eq!(plan.step(2 * SEC + 100 * MS), Action::Stay, "waiting for flow 3");
        plan.saw(&sample(3, SampleReason::Destroy));
        assert_eq!(plan.step(2 * SEC + 120 * MS), Action::Close, "a closed flow is not waited for");
    }

    #[test]
    fn a_late_reader_skips_to_now_and_short_intervals_stay_attached() {
        let mut plan = WindowPlan::new(SEC, 0).expect("long enough");
        assert_eq!(plan.step(0), Action::Open);
        assert_eq!(plan.step(40 * MS), Action::Close);
        assert_eq!(plan.step(5 * SEC + 1), Action::Open);
        assert_eq!(plan.step(5 * SEC + 40 * MS), Action::Close);
        assert_eq!(plan.step(5 * SEC + 500 * MS), Action::Stay, "the next opens an interval after");
        assert_eq!(plan.step(6 * SEC + 1), Action::Open);
        assert!(WindowPlan::new(20 * MS, 0).is_none(), "20 ms: windows would save little");
        assert!(WindowPlan::new(100 * MS, 0).is_some(), "the default interval");
    }

    #[test]
    fn detaching_pays_for_a_bulk_transfer_and_not_for_a_video_stream() {
        // 0.4 ms for a detach and an attach, windows of 5 ms every 100 ms.
        let cycle = 400_000;
        // A bulk transfer: 200,000 segments a second, 1,000 in the window: 19,000 saved.
        assert!(detach_pays(1_000, 5 * MS, 95 * MS, cycle));
        // A 25 Mbit/s stream: 2,000 ACKs a second, 10 in the window: 190 saved, 8 us.
        assert!(!detach_pays(10, 5 * MS, 95 * MS, cycle));
        assert!(detach_pays(1, 5 * MS, 95 * MS, 0), "not yet measured: detach, and measure");
        assert!(!detach_pays(0, 5 * MS, 95 * MS, cycle), "an idle host keeps it attached");
    }

    #[test]
    fn one_slow_cycle_moves_the_average_a_quarter() {
        assert_eq!(average_cycle(0, 100_000), 100_000, "the first cycle is the average");
        assert_eq!(average_cycle(100_000, 500_000), 200_000);
    }

    #[test]
    fn every_twentieth_window_stays_open_to_find_thin_flows_again() {
        let mut plan = WindowPlan::new(SEC, 0).expect("long enough");
        for window in 0..LONG_EVERY {
            let start = window * SEC;
            assert_eq!(plan.step(start), Action::Open);
            let closes_at = if window + 1 == LONG_EVERY { 750 * MS } else { 5 * MS };
            assert_eq!(plan.step(start + closes_at - 1), Action::Stay, "window {window}");
            assert_eq!(plan.step(start + closes_at), Action::Close, "window {window}");
        }
    }
}
