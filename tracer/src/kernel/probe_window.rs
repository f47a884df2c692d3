//! `tcp:tcp_probe` attached only in a short window each sample interval.
//!
//! The tracepoint fires on every segment a socket receives, ACKs included: hundreds of
//! thousands of times a second in one bulk transfer, where a flow needs one periodic sample an
//! interval. Every run, even one that only finds the flow not due, pays the kernel's dispatch
//! of a BPF program, and those runs were most of cctrace's time in the kernel. So the program
//! is attached only while samples are due: a window opens at the start of every interval and
//! closes once each busy flow sampled in the windows before has been sampled again (a busy flow
//! is, at its first segment) and at least [`MIN_OPEN_NS`] has passed (so a flow that was quiet and
//! is busy again is caught); a busy flow that went quiet holds it open until its next segment,
//! for at most three quarters of an interval. A thin flow (sampled only after the shortest
//! window) holds no window open: it is sampled when a window catches one of its segments, and
//! every [`LONG_EVERY`]th window stays open three quarters of an interval whatever was sampled,
//! to sample thin flows and find again those that went unsampled for two windows. (Held open
//! for every thin flow of a host, windows stayed open most of each interval, and cost more than
//! they saved.) The
//! reader wakes for the window's times. Intervals under
//! [`SHORTEST_INTERVAL_NS`] keep the program attached: windows would save little there and cost
//! two system calls an interval. The kernel lets a periodic sample come an eighth of an interval early (tracer-ebpf's
//! `observe`), so a flow sampled just after one window opened is due again when the next opens.
//!
//! Detaching is not free either: each attach and detach switches the tracepoint on or off in
//! the kernel's text, which costs this thread about 0.3 ms for the two here and interrupts
//! every other CPU a dozen times, and each window wakes the reader twice. So the program is
//! detached only when the runs it would make until the next window cost more than all of that
//! ([`CycleCost`]): each window counts its runs (a per-CPU counter the program bumps), and the
//! rate is taken over the last few windows ([`RecentRuns`]), not one. Otherwise
//! it stays attached, returning early from its per-flow due check on every run, and no window
//! wakes the reader until the run rate, looked at once a second, says windows would pay: an
//! idle host, the story's video stream and an `iperf3` transfer keep it attached, a
//! saturating transfer of small writes over veth does not (docs/internals.md has the figures).
//!
//! The program also counts every segment a receiving socket takes (tracer-ebpf's `receive`: the
//! holes losses leave and their filling), which windows would miss: while a receiving socket
//! whose sender is not on this host takes segments out of order, the program stays attached
//! ([`ReceiverHold`]); each attach bumps a generation the counting resumes from.
//!
//! What changes: a flow whose segments are further apart than three quarters of an interval is
//! sampled when a window catches one of them, not at its first segment after the interval. Retransmissions, CA-state and TCP-state changes and
//! closes come from their own hooks, always attached.
//!
//! [`WindowPlan`] decides when windows open and close and [`CycleCost`] whether they pay (both
//! pure); [`ProbeWindow`] attaches and detaches the program.
//!
//! ```text
//!  no plan (an interval under 50 ms, --probe-always-attached, tcp_probe off): attached for good
//!
//!    start
//!      │
//!      ▼
//!  ┌──────────────┐  once a second, at a tick: would a      ┌──────────────────┐
//!  │ ATTACHED     │  window every interval pay at this      │ OPEN             │
//!  │ no windows,  │  run rate? (CycleCost::windows_pay)     │ attached, its    │
//!  │ no wake-ups  │──── yes: WindowPlan::resume ───────────▶│ runs counted     │
//!  │ for them     │  no: stay, this thread's cost fades     │ from the opening │
//!  └──────────────┘                                         └──────────────────┘
//!      ▲                                                      │            ▲
//!      │                                   Close: every flow  │            │ Open, at the
//!      │                                   of the last windows│            │ interval's start:
//!      │                                   sampled again after│            │ attach if detached
//!      │                                   MIN_OPEN_NS, or 3/4│            │ and measure that
//!      │                                   of an interval     ▼            │ cycle's cost
//!      │  StopWindows: short windows   CycleCost::on_close(the recent     │ (CycleCost::measured)
//!      └──────────── would not pay ◀──── windows' run rate (RecentRuns),  │
//!                    either                   time to the next window)     │
//!                                             │ Detach: the runs until the │
//!                                             │ next window cost more than │
//!                                             │ a cycle; KeepUntilNext:    │
//!                                             │ this one window did not    │
//!                                             ▼                            │
//!                                   ┌─────────────────────┐                │
//!                                   │ CLOSED              │────────────────┘
//!                                   │ detached (Detach)   │
//!                                   │ or attached until   │
//!                                   │ the next window     │
//!                                   └─────────────────────┘
//!
//!  --probe-windows-always: every Close detaches. stop(): no window opens again.
//! ```

use std::collections::HashMap;

use aya::programs::{BtfTracePoint, TracePoint};
use aya::Ebpf;

use super::attach::{HookLink, HOOKS};
use super::receiver_hold::ReceiverHold;
use crate::analysis::sample::{Sample, SampleReason, TcpState};
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
/// What one run of the program costs at least, for weighing a detach: a run that finds nothing
/// due, on this VM with the kernel's statistics off. While the kernel's run-time statistics
/// count (someone enabled them: a benchmark, `bpftool prog profile`, a metrics scraper's
/// operator), a run costs what they measure it at, which is more (the two clock reads they add,
/// and the cache misses of a busy host the constant does not know): the model takes the larger.
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

    /// Open the next window at `now_ns` (windows start again after the program stayed attached).
    pub(super) fn resume(&mut self, now_ns: u64) {
        self.opened_ns = None;
        self.next_open_ns = now_ns;
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
            // A flow sampled only after the shortest window is thin: no window waits for it
            // (held open for it, windows cost more than they save). It is sampled when a window
            // catches one of its segments, and in the long windows.
            let late = self.opened_ns.is_some_and(|opened| sample.ts_ns > opened + MIN_OPEN_NS);
            if late {
                self.expected.remove(&sample.cookie);
            } else {
                self.expected.insert(sample.cookie, Expected { sampled: true, missed: 0 });
            }
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
/// `cycle_ns` for a detach and an attach (see [`CycleCost`] for what that counts).
pub(super) fn detach_pays(runs: u64, open_ns: u64, closed_ns: u64, cycle_ns: u64, run_ns: u64) -> bool {
    let saved_runs = u128::from(runs) * u128::from(closed_ns) / u128::from(open_ns.max(1));
    saved_runs * u128::from(run_ns) > u128::from(cycle_ns)
}

/// What a detach and an attach cost a busy CPU other than the one doing them. Each patches the
/// tracepoint into or out of the kernel's text, which interrupts every other online CPU a few
/// times (x86's text poking serializes each CPU three times a patch: 12 inter-processor
/// interrupts a cycle, counted with `ipi:ipi_send_cpumask`), and each interruption costs what
/// that CPU was running the time to take it. Measured on this VM as the time a thread spinning
/// on the other CPU lost: 17-18 interruptions a cycle of 7-8 us each (each leaves the VM and
/// enters it again), `cargo xtask bench`'s tracepoint flip row.
const OTHER_CPU_CYCLE_NS: u64 = 125_000;
/// This thread's part of a window cycle assumed until one is measured: about what this VM
/// measured (a detach and an attach 0.3 ms, the window's two wake-ups 0.1 ms).
const FIRST_CYCLE_GUESS_NS: u64 = 400_000;

/// While the program stays attached, its run rate is looked at this often (at the reads of
/// the pipeline's ticks: no wake-up of its own).
const RATE_CHECK_NS: u64 = 1_000_000_000;

/// What a window cycle costs the host, to weigh against the runs it saves. Pure: the caller
/// measures this thread's part.
#[derive(Clone, Copy, Debug)]
pub(super) struct CycleCost {
    /// This thread's CPU for a detach, an attach and the wake-ups a window asks for (the
    /// switch back into the thread included), averaged over the cycles measured.
    own_ns: u64,
    /// Whether `own_ns` was measured, or is the first guess.
    measured: bool,
    /// The other online CPUs' part: [`OTHER_CPU_CYCLE_NS`] each.
    others_ns: u64,
    /// What a run of the program costs: [`RUN_COST_NS`], or what the kernel's statistics
    /// measured when that is more.
    run_ns: u64,
}

impl CycleCost {
    pub(super) fn new(online_cpus: u64) -> Self {
        Self {
            own_ns: FIRST_CYCLE_GUESS_NS,
            measured: false,
            others_ns: online_cpus.saturating_sub(1) * OTHER_CPU_CYCLE_NS,
            run_ns: RUN_COST_NS,
        }
    }

    /// The kernel's statistics measured `ns_per_run` over the runs since the last look, or
    /// counted none (`None`: they are off).
    pub(super) fn runs_measured(&mut self, ns_per_run: Option<u64>) {
        self.run_ns = ns_per_run.map_or(RUN_COST_NS, |ns| ns.max(RUN_COST_NS));
    }

    pub(super) fn total_ns(&self) -> u64 {
        self.own_ns + self.others_ns
    }

    /// A cycle measured: it weighs a quarter of the average (one slow cycle on a busy host
    /// moves it a little), the first one all of it.
    pub(super) fn measured(&mut self, own_ns: u64) {
        self.own_ns = if self.measured { (3 * self.own_ns + own_ns) / 4 } else { own_ns };
        self.measured = true;
    }

    /// A cost measured once under load must not keep the program attached for good: this
    /// thread's part fades while the program stays attached (by a sixteenth a look at the run
    /// rate), so that a cycle is tried and measured again where the runs come near paying.
    pub(super) fn fade(&mut self) {
        self.own_ns -= self.own_ns / 16;
    }

    /// Whether windows would pay while the program stays attached: it made `runs` in
    /// `elapsed_ns`, and a window every `interval_ns` would keep it attached
    /// [`MIN_OPEN_NS`] of each.
    pub(super) fn windows_pay(&self, runs: u64, elapsed_ns: u64, interval_ns: u64) -> bool {
        let interval = interval_ns.max(1);
        let closed_share = u128::from(interval.saturating_sub(MIN_OPEN_NS));
        let closed_ns = u128::from(elapsed_ns) * closed_share / u128::from(interval);
        let cycles_ns = u128::from(self.total_ns()) * u128::from(elapsed_ns) / u128::from(interval);
        detach_pays(
            runs,
            elapsed_ns,
            u64::try_from(closed_ns).unwrap_or(u64::MAX),
            u64::try_from(cycles_ns).unwrap_or(u64::MAX),
            self.run_ns,
        )
    }
}

/// What a closing window does with the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Closing {
    Detach,
    /// This window alone did not pay (held open for a thin flow, or one of the long ones):
    /// attached until the next.
    KeepUntilNext,
    /// Short windows would not pay at this run rate either: attached, and nothing wakes the
    /// reader for windows until the run rate says they pay.
    StopWindows,
}

impl CycleCost {
    /// A window closes with `closed_ns` to the next one, windows opening every `interval_ns`;
    /// the program made `runs` in `open_ns` of the recent windows ([`RecentRuns`]).
    pub(super) fn on_close(&self, runs: u64, open_ns: u64, closed_ns: u64, interval_ns: u64) -> Closing {
        if detach_pays(runs, open_ns, closed_ns, self.total_ns(), self.run_ns) {
            Closing::Detach
        } else if self.windows_pay(runs, open_ns, interval_ns) {
            Closing::KeepUntilNext
        } else {
            Closing::StopWindows
        }
    }
}

/// Windows whose runs a closing window is judged with.
const RECENT_WINDOWS: usize = 8;

/// The program's run rate as the recent windows measured it: the runs and the open time of the
/// last [`RECENT_WINDOWS`], and of the second before them when windows resumed. One window is
/// a few milliseconds of one transfer: behind the bench's saturating sender one in twenty
/// caught a tenth of the usual rate (a lull of the sender's), and judged alone it stopped the
/// windows and kept the program attached until the next look at the rate, a second or two at
/// ten times what the windows cost.
#[derive(Debug, Default)]
pub(super) struct RecentRuns {
    windows: std::collections::VecDeque<(u64, u64)>,
    /// What the last look at the rate while attached measured, weighed until as many windows
    /// followed it.
    seed: Option<(u64, u64)>,
}

impl RecentRuns {
    /// Windows resume after the program was attached: `runs` in `elapsed_ns` said they pay.
    pub(super) fn resumed(&mut self, runs: u64, elapsed_ns: u64) {
        self.windows.clear();
        self.seed = Some((runs, elapsed_ns));
    }

    /// A window closed after `runs` in `open_ns`; returns the runs and the time to judge it by.
    pub(super) fn closed(&mut self, runs: u64, open_ns: u64) -> (u64, u64) {
        if self.windows.len() == RECENT_WINDOWS {
            self.windows.pop_front();
            self.seed = None;
        }
        self.windows.push_back((runs, open_ns));
        self.windows.iter().chain(&self.seed).fold((0, 0), |(r, t), (runs, ns)| (r + runs, t + ns))
    }
}

/// `tcp:tcp_probe`'s program: attached only in the plan's windows while that costs the host
/// less than keeping it attached, and attached otherwise.
///
/// A window cycle costs this thread a detach, an attach and the wake-ups the window asks for
/// (measured from the thread's CPU clock, the switch back into the thread included), and the
/// other CPUs the text patches' interrupts ([`CycleCost`]). Keeping the program attached costs
/// every run it makes, [`RUN_COST_NS`] each or what the kernel's statistics measure: the runs a window saves are counted in the
/// window (a per-CPU counter the program bumps). Windows are followed while a closing window
/// finds that detaching pays; otherwise the program stays attached, nothing wakes the reader
/// for windows, and the run rate is looked at once a second (at the pipeline's ticks) to see
/// whether windows would pay now. A host with a few thousand segments a second (the story's
/// video stream) or an idle one keeps it attached.
#[derive(Debug)]
pub(super) struct ProbeWindow {
    plan: Option<WindowPlan>,
    /// The program's link while attached.
    link: Option<HookLink>,
    classic: bool,
    stopped: bool,
    /// Following the plan's windows; otherwise attached until the run rate says windows pay.
    windowing: bool,
    /// The program's run count and the time when the window opened (windowing) or when the
    /// rate was last looked at (attached).
    mark: (u64, u64),
    cost: CycleCost,
    /// This thread's CPU for the current cycle so far (detach, wake-ups, attach).
    cycle_so_far: u64,
    /// The current cycle detached the program (it is measured whole at the next attach).
    detached: bool,
    /// Attaches that failed (the next window tries again).
    pub(super) attach_failures: u64,
    /// Windows opened so far.
    pub(super) windows: u64,
    /// Times windows stopped, the program staying attached as detaching did not pay.
    pub(super) kept: u64,
    /// Windows followed and the program detached at each close, paying or not.
    always: bool,
    /// The receiving sockets that keep the program attached.
    receivers: ReceiverHold,
    /// The program's run time and count as the kernel's statistics had them at the last look.
    run_stats: (u64, u64),
    /// The run rate the recent windows measured, which each closing window is judged by.
    recent: RecentRuns,
}

impl ProbeWindow {
    /// `link`: the program's link as the hooks were attached (`None`: `tcp_probe` is off).
    /// `windows`: false keeps the program attached for good (`--probe-always-attached`).
    pub(super) fn new(link: Option<HookLink>, interval_ns: u64, now_ns: u64, windows: bool) -> Self {
        let classic = matches!(link, Some(HookLink::Classic(_)));
        let plan = link.as_ref().filter(|_| windows).and_then(|_| WindowPlan::new(interval_ns, now_ns));
        // SAFETY: sysconf reads a constant.
        let online = u64::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).unwrap_or(1).max(1);
        Self {
            plan,
            link,
            classic,
            stopped: false,
            windowing: false,
            mark: (0, now_ns),
            cost: CycleCost::new(online),
            cycle_so_far: 0,
            detached: false,
            attach_failures: 0,
            windows: 0,
            kept: 0,
            always: false,
            receivers: ReceiverHold::default(),
            run_stats: (0, 0),
            recent: RecentRuns::default(),
        }
    }

    /// A receiving socket with holes needs every segment counted.
    fn receiver_holds(&self, now_ns: u64) -> bool {
        !self.always && self.receivers.holds(now_ns)
    }

    /// What the kernel's statistics measured a run at since the last look, if they counted
    /// any: the cost model's price of a run.
    fn price_runs(cost: &mut CycleCost, run_stats: &mut (u64, u64), classic: bool, ebpf: &Ebpf) {
        let hook = &HOOKS[HookId::TcpProbe.index()];
        let name = if classic { hook.classic_prog } else { hook.btf_prog };
        let Some(info) = ebpf.program(name).and_then(|p| p.info().ok()) else { return };
        let now = (u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX), info.run_count());
        let (ns, runs) = (now.0.saturating_sub(run_stats.0), now.1.saturating_sub(run_stats.1));
        *run_stats = now;
        cost.runs_measured((runs > 0).then(|| ns / runs));
    }

    /// Follow the windows and detach at every close whatever the run rate: the windows alone,
    /// for tests of them on a host too loaded for a transfer to make them pay.
    pub(super) fn follow_windows_always(&mut self) {
        self.always = self.plan.is_some();
        self.windowing = self.always;
    }

    /// Whether the reader wakes for the windows' times (and charges those wake-ups to them).
    pub(super) fn windowing(&self) -> bool {
        self.windowing && !self.stopped
    }

    /// This thread's CPU for a wake-up the window asked for: part of the cycle's cost.
    pub(super) fn charge_wake_up(&mut self, cpu_ns: u64) {
        self.cycle_so_far += cpu_ns;
    }

    /// Take note of `batch` and open or close the window as the plan says at `now_ns`, or,
    /// while attached, see whether windows would pay; `probe_runs` reads the program's run count.
    pub(super) fn step(&mut self, ebpf: &mut Ebpf, now_ns: u64, batch: &[Sample], probe_runs: impl Fn() -> u64) {
        if self.plan.is_none() {
            return;
        }
        self.receivers.note(batch, now_ns);
        let holds = self.receiver_holds(now_ns);
        let Some(plan) = self.plan.as_mut() else { return };
        for sample in batch {
            plan.saw(sample);
        }
        if self.stopped {
            return;
        }
        if !self.windowing {
            let (runs_then, at) = self.mark;
            let elapsed = now_ns.saturating_sub(at);
            if elapsed < RATE_CHECK_NS {
                return;
            }
            let runs = probe_runs();
            Self::price_runs(&mut self.cost, &mut self.run_stats, self.classic, ebpf);
            log::trace!(
                target: LOG_TARGET,
                "attached: {} runs in {elapsed} ns, a cycle {} ns, a run {} ns",
                runs.saturating_sub(runs_then),
                self.cost.total_ns(),
                self.cost.run_ns
            );
            if holds || !self.cost.windows_pay(runs.saturating_sub(runs_then), elapsed, plan.interval_ns) {
                self.cost.fade();
                self.mark = (runs, now_ns);
                return;
            }
            self.windowing = true;
            self.recent.resumed(runs.saturating_sub(runs_then), elapsed);
            plan.resume(now_ns);
        }
        match plan.step(now_ns) {
            Action::Open => {
                self.windows += 1;
                self.mark = (probe_runs(), now_ns);
                if self.link.is_none() {
                    let (started, from_ns) = (crate::clock::thread_cpu_ns(), crate::clock::monotonic_now_ns());
                    match attach(ebpf, self.classic) {
                        Some(link) => {
                            self.link = Some(link);
                            log_flip("attached", from_ns);
                        }
                        None => self.attach_failures += 1,
                    }
                    self.cycle_so_far += crate::clock::thread_cpu_ns().saturating_sub(started);
                }
                if std::mem::take(&mut self.detached) {
                    self.cost.measured(self.cycle_so_far);
                }
                self.cycle_so_far = 0;
            }
            Action::Close => {
                let (runs_then, opened_ns) = self.mark;
                let open_ns = now_ns.saturating_sub(opened_ns);
                let closed_ns = plan.next_step_ns().saturating_sub(now_ns);
                let runs = probe_runs();
                Self::price_runs(&mut self.cost, &mut self.run_stats, self.classic, ebpf);
                let closing = if self.always {
                    Closing::Detach
                } else if holds {
                    Closing::StopWindows
                } else {
                    let (recent_runs, recent_ns) = self.recent.closed(runs.saturating_sub(runs_then), open_ns);
                    self.cost.on_close(recent_runs, recent_ns, closed_ns, plan.interval_ns)
                };
                log::trace!(
                    target: LOG_TARGET,
                    "window closes: {} runs in {open_ns} ns, {closed_ns} ns to the next, a cycle {} ns, a run {} ns: {closing:?}",
                    runs.saturating_sub(runs_then),
                    self.cost.total_ns(),
                    self.cost.run_ns
                );
                match closing {
                    Closing::Detach => {
                        let (started, from_ns) = (crate::clock::thread_cpu_ns(), crate::clock::monotonic_now_ns());
                        detach(ebpf, self.link.take());
                        log_flip("detached", from_ns);
                        self.cycle_so_far += crate::clock::thread_cpu_ns().saturating_sub(started);
                        self.detached = true;
                    }
                    Closing::KeepUntilNext => {
                        self.kept += 1;
                        self.cycle_so_far = 0;
                    }
                    Closing::StopWindows => {
                        self.kept += 1;
                        self.cycle_so_far = 0;
                        self.windowing = false;
                        self.mark = (runs, now_ns);
                    }
                }
            }
            Action::Stay => {}
        }
    }

    /// When the window next wants a step (CLOCK_MONOTONIC ns), while windows are followed.
    /// Attached, nothing waits on the time: the pipeline's ticks look at the run rate.
    pub(super) fn next_step_ns(&self) -> Option<u64> {
        let plan = self.plan.as_ref().filter(|_| self.windowing())?;
        Some(plan.next_step_ns())
    }

    /// No window opens after this (the programs are being detached for good).
    pub(super) fn stop(&mut self) {
        self.stopped = true;
    }
}

/// The log target of every attach and detach: `RUST_LOG=cctrace::probe_window=debug` with
/// `--log-file` writes when the program was attached, which the live tests hold its run count
/// against (tests/tests/live.rs).
const LOG_TARGET: &str = "cctrace::probe_window";

/// The array whose one value each attach bumps (tracer-ebpf's `receive`).
const RECV_GENERATION: &str = "RECV_GENERATION";

/// `tcp_probe attached|detached FROM TO`: the CLOCK_MONOTONIC ns the system call began and ended.
fn log_flip(what: &str, from_ns: u64) {
    log::debug!(target: LOG_TARGET, "tcp_probe {what} {from_ns} {}", crate::clock::monotonic_now_ns());
}

fn attach(ebpf: &mut Ebpf, classic: bool) -> Option<HookLink> {
    let hook = &HOOKS[HookId::TcpProbe.index()];
    // Receiving sockets' counts resume from the first segment after the attach rather than
    // take what arrived meanwhile for holes.
    if let Some(map) = ebpf.map_mut(RECV_GENERATION) {
        if let Ok(mut generation) = aya::maps::Array::<_, u32>::try_from(map) {
            let next = generation.get(&0, 0).unwrap_or(0).wrapping_add(1);
            let _ = generation.set(0, next, 0);
        }
    }
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
        Sample { reason, ..crate::analysis::flow_table::tests::sample(cookie, 0) }
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
    fn a_thin_flow_sampled_after_the_shortest_window_holds_no_window_open() {
        let at = |cookie: u64, ts_ns: u64| Sample { ts_ns, ..sample(cookie, SampleReason::Periodic) };
        let mut plan = WindowPlan::new(SEC, 0).expect("long enough");
        assert_eq!(plan.step(0), Action::Open);
        plan.saw(&at(1, MS));
        assert_eq!(plan.step(5 * MS), Action::Close);
        assert_eq!(plan.step(SEC), Action::Open);
        plan.saw(&at(1, SEC + 20 * MS));
        assert_eq!(plan.step(SEC + 25 * MS), Action::Close, "flow 1 came late: thin, not waited for");
        assert_eq!(plan.step(2 * SEC), Action::Open);
        assert_eq!(plan.step(2 * SEC + 5 * MS), Action::Close, "nothing to wait for");
        assert_eq!(plan.step(3 * SEC), Action::Open);
        plan.saw(&at(1, 3 * SEC + MS));
        plan.saw(&at(2, 3 * SEC + 2 * MS));
        assert_eq!(plan.step(3 * SEC + 5 * MS), Action::Close);
        assert_eq!(plan.step(4 * SEC), Action::Open);
        plan.saw(&at(1, 4 * SEC + MS));
        assert_eq!(plan.step(4 * SEC + 5 * MS), Action::Stay, "busy again: flow 2 is waited for");
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
        assert!(detach_pays(1_000, 5 * MS, 95 * MS, cycle, RUN_COST_NS));
        // A 25 Mbit/s stream: 2,000 ACKs a second, 10 in the window: 190 saved, 8 us.
        assert!(!detach_pays(10, 5 * MS, 95 * MS, cycle, RUN_COST_NS));
        assert!(detach_pays(1, 5 * MS, 95 * MS, 0, RUN_COST_NS), "not yet measured: detach, and measure");
        assert!(!detach_pays(0, 5 * MS, 95 * MS, cycle, RUN_COST_NS), "an idle host keeps it attached");
    }

    #[test]
    fn runs_the_kernels_statistics_measure_dearer_tip_an_iperf3_transfer_into_windows() {
        let mut cost = CycleCost::new(2);
        cost.measured(400_000);
        assert!(!cost.windows_pay(78_000, SEC, 100 * MS), "40 ns a run: attached");
        cost.runs_measured(Some(130));
        assert!(cost.windows_pay(78_000, SEC, 100 * MS), "130 ns a run, as the statistics measured it");
        cost.runs_measured(Some(20));
        assert!(!cost.windows_pay(78_000, SEC, 100 * MS), "never below the constant");
        cost.runs_measured(None);
        assert!(!cost.windows_pay(78_000, SEC, 100 * MS), "statistics off: the constant");
    }

    #[test]
    fn one_slow_cycle_moves_the_average_a_quarter_and_the_first_replaces_the_guess() {
        let mut cost = CycleCost::new(1);
        assert_eq!(cost.total_ns(), FIRST_CYCLE_GUESS_NS, "one CPU: no other CPU to interrupt");
        cost.measured(100_000);
        assert_eq!(cost.total_ns(), 100_000, "the first cycle measured replaces the guess");
        cost.measured(500_000);
        assert_eq!(cost.total_ns(), 200_000);
    }

    #[test]
    fn windows_pay_for_a_bulk_transfer_and_not_for_a_video_stream_an_idle_host_or_many_cpus() {
        let mut cost = CycleCost::new(2);
        cost.measured(400_000);
        // 200,000 segments a second (the bench's own sender over veth): windows save 7.6 ms
        // a second for 5.25 ms of cycles.
        assert!(cost.windows_pay(200_000, SEC, 100 * MS));
        // An iperf3 transfer's 78,000: 2.9 ms saved, not enough.
        assert!(!cost.windows_pay(78_000, SEC, 100 * MS));
        assert!(!cost.windows_pay(2_000, SEC, 100 * MS), "a video stream");
        assert!(!cost.windows_pay(0, SEC, 100 * MS), "an idle host");
        // Each other CPU takes the text patches' interrupts: on 32 CPUs a cycle costs 4.3 ms.
        let mut many = CycleCost::new(32);
        many.measured(400_000);
        assert!(!many.windows_pay(200_000, SEC, 100 * MS));
        assert!(many.windows_pay(2_000_000, SEC, 100 * MS));
    }

    #[test]
    fn a_long_window_keeps_the_program_attached_until_the_next_and_a_thin_stream_stops_windows() {
        let mut cost = CycleCost::new(2);
        cost.measured(400_000);
        // 200,000 runs a second: a 5 ms window's runs pay for a detach over the 95 ms left.
        assert_eq!(cost.on_close(1_000, 5 * MS, 95 * MS, 100 * MS), Closing::Detach);
        // The same rate in a window held open 75 ms (a thin flow, or every twentieth): too
        // little left to save, yet short windows still pay at this rate.
        assert_eq!(cost.on_close(15_000, 75 * MS, 25 * MS, 100 * MS), Closing::KeepUntilNext);
        // 20,000 runs a second: no window pays.
        assert_eq!(cost.on_close(100, 5 * MS, 95 * MS, 100 * MS), Closing::StopWindows);
    }

    #[test]
    fn one_window_in_a_lull_does_not_stop_the_windows_a_second_of_them_does() {
        let mut cost = CycleCost::new(2);
        cost.measured(600_000);
        // The bench's sender: 700 runs a millisecond, windows resumed on a second of that.
        let mut recent = RecentRuns::default();
        recent.resumed(700_000, SEC);
        let close = |recent: &mut RecentRuns, runs: u64| {
            let (runs, open) = recent.closed(runs, 6 * MS);
            cost.on_close(runs, open, 94 * MS, 100 * MS)
        };
        assert_eq!(close(&mut recent, 4_200), Closing::Detach);
        // One window caught a tenth of that (judged alone, it stopped the windows).
        assert_eq!(close(&mut recent, 440), Closing::Detach);
        for _ in 0..RECENT_WINDOWS {
            assert_eq!(close(&mut recent, 4_200), Closing::Detach);
        }
        // The transfer ends: the windows stop once the recent ones, the seed gone, say so.
        let stopped = (0..=RECENT_WINDOWS).position(|_| close(&mut recent, 0) == Closing::StopWindows);
        assert!(stopped.is_some_and(|n| n < RECENT_WINDOWS), "{stopped:?}");
    }

    #[test]
    fn a_cycle_measured_under_load_fades_while_attached_until_it_is_tried_again() {
        let mut cost = CycleCost::new(2);
        cost.measured(4_000_000);
        assert!(!cost.windows_pay(200_000, SEC, 100 * MS), "a slow cycle under load");
        let checks = (0..100).take_while(|_| {
            cost.fade();
            !cost.windows_pay(200_000, SEC, 100 * MS)
        });
        assert!(checks.count() < 60, "tried again within a minute of looks at the rate");
        assert!(cost.total_ns() >= OTHER_CPU_CYCLE_NS, "the other CPU's part does not fade");
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
