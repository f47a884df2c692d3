//! The observer's cost as issue 24 defines it: the observer's BPF programs' in-kernel time (the
//! kernel's run-time statistics, on for this measurement only) plus its processes' user and
//! system time, over a saturating transfer, divided by the busy CPU of the experiment in the same
//! window: every CPU second of the processes in a cgroup of the bench's own (this process and
//! everything it starts: the transfer, the observer, the idle flows' holders), of interrupts and
//! softirqs, and of the ksoftirqd threads. On a quiet machine that is the machine's busy CPU
//! (issue 24 divided by that); on a shared one it leaves out what others run meanwhile, which
//! would otherwise shrink every share by as much as they keep the CPUs busy. The observers take turns on the same transfer in interleaved rounds: cctrace with
//! its defaults, `ss -tni` every 100 ms, a bpftrace script keeping per-flow maps from every
//! `tcp_probe`, and cctrace before a change when given; beside the transfer sit 0, 1,000 or
//! 10,000 idle established flows in the sender's namespace, which `ss` reads on every poll and
//! cctrace should not pay for. The transfer is the lab's sender (small writes: many
//! `tcp_probe` firings) or iperf3 (large writes and TSO segments: few, so that a tracer's cost
//! a second, not per event, decides; issue 38).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use cctrace_lab::{Cgroup, Sink, SinkOptions, VethOptions, VethPair};

use crate::bpf_stats;
use crate::ci::Estimate;
use crate::iperf::Iperf3;
use crate::startup::{Holder, PER_HOLDER};
use crate::throughput::{transfer, which, Bpftrace, SsPoller, PORT};
use crate::tracer::{self, Cctrace};

/// How long an observer runs before its window opens: cctrace's start-up listing of every
/// existing socket and its first judgments of each flow it found are one-time costs, not what a
/// tool left running costs. A flow's window fills over six evaluations (one a second), after
/// which an idle one rests and costs nothing more a second: with 2 s here the window measured
/// the first judgments of 10,000 idle flows (the history has both).
const SETTLE: Duration = Duration::from_secs(8);
/// How long the transfer runs before the window opens (within [`SETTLE`]): cctrace adapts to a
/// transfer that starts (it looks at `tcp_probe`'s run rate once a second, then follows its
/// windows), and the measure is what a tool left running costs beside a transfer under way.
const UNDER_WAY: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Observer {
    Cctrace,
    /// The mode without BTF, forced (`--hooks no-btf`): the same programs and lookups as on a
    /// kernel built without BTF.
    CctraceNoBtf,
    /// The binary before a change (`--base`), with its defaults.
    CctraceBefore,
    SsPoll,
    Bpftrace,
}

impl Observer {
    pub(crate) const ALL: [Observer; 5] =
        [Observer::Cctrace, Observer::CctraceNoBtf, Observer::CctraceBefore, Observer::SsPoll, Observer::Bpftrace];

    /// Its name for `--observers`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Observer::Cctrace => "cctrace",
            Observer::CctraceNoBtf => "no-btf",
            Observer::CctraceBefore => "before",
            Observer::SsPoll => "ss",
            Observer::Bpftrace => "bpftrace",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Observer::Cctrace => "cctrace (defaults)",
            Observer::CctraceNoBtf => "cctrace without BTF (--hooks no-btf)",
            Observer::CctraceBefore => "cctrace before (--base, defaults)",
            Observer::SsPoll => "ss -tni every 100 ms",
            Observer::Bpftrace => "bpftrace, per-flow maps from tcp_probe",
        }
    }
}

/// The transfer the observers watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transfer {
    /// The lab's own sender: small writes, so `tcp_probe` fires on many small segments.
    LabSender,
    /// iperf3 over the pair with its offloads on: 128 KiB writes and large TSO segments, few
    /// `tcp_probe` firings per byte.
    Iperf3,
}

impl Transfer {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Transfer::LabSender => "the bench's sender",
            Transfer::Iperf3 => "iperf3",
        }
    }

    /// Its name for `--observer-transfers`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Transfer::LabSender => "lab",
            Transfer::Iperf3 => "iperf3",
        }
    }

    pub(crate) fn run(self, lab: &VethPair, secs: u64) -> Result<()> {
        match self {
            Transfer::LabSender => transfer(lab, secs, None).map(drop),
            Transfer::Iperf3 => Iperf3::start(lab, 1, None, secs)?.wait(),
        }
    }
}

/// One size's results: each observer's share of busy CPU, and cctrace's share over each peer's
/// (paired within a round).
pub(crate) struct Shares {
    pub(crate) idle_flows: usize,
    pub(crate) share: BTreeMap<Observer, Estimate>,
    pub(crate) cctrace_over: BTreeMap<Observer, Estimate>,
    /// cctrace's in-kernel part of its share, for where the rest goes, and each program's.
    pub(crate) cctrace_kernel_share: Option<Estimate>,
    pub(crate) cctrace_programs: BTreeMap<String, Estimate>,
}

/// The ticks of `/proc/stat`'s line for all CPUs: user, nice, system, idle, iowait, irq,
/// softirq, steal, ...
fn cpu_ticks() -> Result<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().find(|l| l.starts_with("cpu ")).context("no cpu line in /proc/stat")?;
    Ok(line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect())
}

fn ticks_per_s() -> f64 {
    rustix::param::clock_ticks_per_second().max(1) as f64
}

/// Machine-wide busy CPU seconds (user, nice, system, irq, softirq of every CPU).
fn machine_busy_secs() -> Result<f64> {
    let ticks = cpu_ticks()?;
    Ok([0, 1, 2, 5, 6].iter().filter_map(|i| ticks.get(*i)).sum::<u64>() as f64 / ticks_per_s())
}

/// The busy CPU the experiment makes: its cgroup's tasks, the interrupts and softirqs of every
/// CPU, and the ksoftirqd threads (which run softirqs the interrupted tasks left over).
struct Experiment {
    cgroup: std::path::PathBuf,
    ksoftirqd: Vec<u32>,
}

impl Experiment {
    fn new(cgroup: &Path) -> Self {
        let ksoftirqd = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with("ksoftirqd/"))
            })
            .collect();
        Self { cgroup: cgroup.to_path_buf(), ksoftirqd }
    }

    fn busy_secs(&self) -> Result<f64> {
        let stat = std::fs::read_to_string(self.cgroup.join("cpu.stat")).context("the bench cgroup's cpu.stat")?;
        let usage_usec: u64 = stat
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse().ok())
            .context("no usage_usec in cpu.stat")?;
        let ticks = cpu_ticks()?;
        let interrupts = [5, 6].iter().filter_map(|i| ticks.get(*i)).sum::<u64>() as f64 / ticks_per_s();
        let softirq_threads =
            self.ksoftirqd.iter().filter_map(|pid| crate::selfcost::cpu_ns(*pid).ok()).sum::<u64>() as f64 / 1e9;
        Ok(usage_usec as f64 / 1e6 + interrupts + softirq_threads)
    }
}

/// An observer running; its CPU so far (processes + in-kernel programs).
enum Running {
    Cctrace(Cctrace),
    Bpftrace(Bpftrace),
    SsPoll(SsPoller),
}

impl Running {
    fn start(observer: Observer, lab: &VethPair, before: Option<&Path>) -> Result<Self> {
        let summary_only = || (r#""type":"summary""#.to_string(), Box::new(|_: &_, _| {}) as tracer::OnLine);
        Ok(match (observer, before) {
            (Observer::Cctrace, _) => {
                let (wanted, on_line) = summary_only();
                Running::Cctrace(Cctrace::start(&[], wanted, on_line)?)
            }
            (Observer::CctraceNoBtf, _) => {
                let (wanted, on_line) = summary_only();
                Running::Cctrace(Cctrace::start(&["--hooks", "no-btf"], wanted, on_line)?)
            }
            (Observer::CctraceBefore, Some(bin)) => {
                let (wanted, on_line) = summary_only();
                Running::Cctrace(Cctrace::start_bin(bin, &[], wanted, on_line)?)
            }
            (Observer::CctraceBefore, None) => bail!("no binary before the change (--base) to observe with"),
            (Observer::Bpftrace, _) => Running::Bpftrace(Bpftrace::start()?),
            (Observer::SsPoll, _) => Running::SsPoll(SsPoller::start(lab.sender().name())),
        })
    }

    /// (process CPU seconds, in-kernel program seconds) so far.
    /// A process's threads' time on a CPU (their schedstat, ns): the clock ticks of
    /// `/proc/PID/stat` are 10 ms, a quarter of a percent of a 4 s window on two CPUs.
    fn cpu(&self) -> Result<(f64, f64)> {
        let programs = |pid: u32| -> Result<f64> {
            Ok(bpf_stats::programs_of(pid)?.values().map(|r| r.ns).sum::<u64>() as f64 / 1e9)
        };
        let process = |pid: u32| -> Result<f64> { Ok(crate::selfcost::cpu_ns(pid)? as f64 / 1e9) };
        match self {
            Running::Cctrace(c) => Ok((process(c.pid())?, programs(c.pid())?)),
            Running::Bpftrace(b) => Ok((process(b.0.id())?, programs(b.0.id())?)),
            Running::SsPoll(poller) => Ok((poller.cpu_secs(), 0.0)),
        }
    }

    fn stop(self) -> Result<()> {
        match self {
            Running::Cctrace(c) => c.stop().map(drop),
            Running::Bpftrace(b) => {
                drop(b);
                Ok(())
            }
            Running::SsPoll(poller) => {
                poller.stop();
                Ok(())
            }
        }
    }
}

/// One observer over one transfer, as shares of the experiment's busy CPU.
struct Measured {
    /// Its processes and programs.
    share: f64,
    /// Its programs alone, and each (cctrace only).
    in_kernel: f64,
    programs: BTreeMap<String, f64>,
    /// Its share of the whole machine's busy CPU (issue 24's denominator), for comparison.
    of_machine: f64,
}

/// One observer over one transfer. For cctrace, each of its programs' part is kept too (runs,
/// ns a run, share), so a change in its in-kernel share can be put on the hook that made it.
fn measure(
    observer: Observer,
    lab: &VethPair,
    what: Transfer,
    secs: u64,
    before: Option<&Path>,
    experiment: &Experiment,
) -> Result<Measured> {
    let running = Running::start(observer, lab, before)?;
    std::thread::sleep(SETTLE - UNDER_WAY);
    let programs = || match &running {
        Running::Cctrace(c) => bpf_stats::programs_of(c.pid()).map(Some),
        _ => Ok(None),
    };
    let window = std::thread::scope(|s| -> Result<_> {
        // The transfer runs a second past the window: the window ends while it is under way.
        let transfer = s.spawn(|| what.run(lab, UNDER_WAY.as_secs() + secs + 1));
        std::thread::sleep(UNDER_WAY);
        let start = ((experiment.busy_secs()?, machine_busy_secs()?), running.cpu()?, programs()?);
        std::thread::sleep(Duration::from_secs(secs));
        let end = ((experiment.busy_secs()?, machine_busy_secs()?), running.cpu()?, programs()?);
        transfer.join().map_err(|_| anyhow::anyhow!("the transfer panicked"))??;
        Ok((start, end))
    });
    running.stop()?;
    let (((busy0, machine0), (cpu0, bpf0), programs0), ((busy1, machine1), (cpu1, bpf1), programs1)) = window?;
    let busy = (busy1 - busy0).max(1e-6);
    let mut shares = BTreeMap::new();
    if let (Some(p0), Some(p1)) = (programs0, programs1) {
        let mut parts = Vec::new();
        for (name, r) in bpf_stats::delta(&p0, &p1).iter().filter(|(_, r)| r.count > 0) {
            let share = r.ns as f64 / 1e9 / busy;
            parts.push(format!(
                "{name} {} runs {:.0} ns/run {:.2} %",
                r.count,
                r.ns as f64 / r.count as f64,
                share * 100.0
            ));
            shares.insert(name.clone(), share);
        }
        eprintln!("    {:?}'s programs: {}", observer, parts.join(", "));
    }
    let cost = (cpu1 - cpu0) + (bpf1 - bpf0);
    let per_s = |v: f64| v / secs as f64 * 1e3;
    eprintln!(
        "    {observer:?}: process {:.2} ms/s, programs {:.2} ms/s, the experiment {:.2} CPUs busy",
        per_s(cpu1 - cpu0),
        per_s(bpf1 - bpf0),
        busy / secs as f64
    );
    Ok(Measured {
        share: cost / busy,
        in_kernel: (bpf1 - bpf0) / busy,
        programs: shares,
        of_machine: cost / (machine1 - machine0).max(1e-6),
    })
}

/// Each observer's share at each size of `sizes` idle flows, over `what`, in `rounds`
/// interleaved rounds; the binary `before` a change is one more observer when given.
pub(crate) fn run(
    sizes: &[usize],
    what: Transfer,
    secs: u64,
    rounds: usize,
    before: Option<&Path>,
    only: Option<&[String]>,
) -> Result<Vec<Shares>> {
    // The whole experiment in a cgroup of its own: this process moves in, and what it starts
    // from here on (transfer, observers, holders) is born there.
    let cgroup = Cgroup::top().context("the bench's cgroup")?;
    let experiment = Experiment::new(cgroup.path());
    cgroup.create_sockets_here(|| run_in(sizes, what, secs, rounds, before, only, &experiment))?
}

fn run_in(
    sizes: &[usize],
    what: Transfer,
    secs: u64,
    rounds: usize,
    before: Option<&Path>,
    only: Option<&[String]>,
    experiment: &Experiment,
) -> Result<Vec<Shares>> {
    let lab = VethPair::create(VethOptions::default()).context("building the veth pair")?;
    if what == Transfer::Iperf3 {
        crate::iperf::offloads_on(&lab)?;
    }
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let mut observers = vec![Observer::Cctrace, Observer::CctraceNoBtf, Observer::SsPoll];
    if before.is_some() {
        observers.push(Observer::CctraceBefore);
    }
    if which("bpftrace") {
        observers.push(Observer::Bpftrace);
    }
    if let Some(only) = only {
        observers.retain(|o| only.iter().any(|name| name == o.name()));
    }
    // On for the whole measurement: every observer's programs pay the statistics' clock reads.
    let _stats = bpf_stats::enable()?;
    let mut out = Vec::new();
    for &idle_flows in sizes {
        let mut holders = Vec::new();
        let mut left = idle_flows;
        while left > 0 {
            let n = left.min(PER_HOLDER);
            holders.push(Holder::start(lab.sender(), n)?);
            left -= n;
        }
        let mut shares: BTreeMap<Observer, Vec<f64>> = BTreeMap::new();
        let mut over: BTreeMap<Observer, Vec<f64>> = BTreeMap::new();
        let mut kernel = Vec::new();
        let mut programs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for round in 0..rounds {
            let mut this = BTreeMap::new();
            let mut of_machine = Vec::new();
            for i in 0..observers.len() {
                let observer = observers[(i + round) % observers.len()];
                let m = measure(observer, &lab, what, secs, before, experiment)?;
                if observer == Observer::Cctrace {
                    kernel.push(m.in_kernel);
                    for (name, share) in m.programs {
                        programs.entry(name).or_default().push(share);
                    }
                }
                of_machine.push(format!("{observer:?} {:.2} %", m.of_machine * 100.0));
                this.insert(observer, m.share);
                shares.entry(observer).or_default().push(m.share);
            }
            let cct = this.get(&Observer::Cctrace).copied().unwrap_or(f64::NAN);
            for (o, s) in &this {
                if *o != Observer::Cctrace && cct.is_finite() {
                    over.entry(*o).or_default().push(cct / s.max(1e-9));
                }
            }
            eprintln!(
                "  {idle_flows} idle flows, round {}: {} (of the machine's busy CPU: {})",
                round + 1,
                this.iter().map(|(o, s)| format!("{o:?} {:.2} %", s * 100.0)).collect::<Vec<_>>().join(", "),
                of_machine.join(", ")
            );
        }
        drop(holders);
        let estimates =
            |m: &BTreeMap<Observer, Vec<f64>>| m.iter().filter_map(|(o, v)| Some((*o, Estimate::of(v)?))).collect();
        // A program that ran in some rounds only counts 0 in the others.
        let cctrace_programs = programs
            .into_iter()
            .filter_map(|(name, mut v)| {
                v.resize(rounds, 0.0);
                Some((name, Estimate::of(&v)?))
            })
            .collect();
        out.push(Shares {
            idle_flows,
            share: estimates(&shares),
            cctrace_over: estimates(&over),
            cctrace_kernel_share: Estimate::of(&kernel),
            cctrace_programs,
        });
    }
    Ok(out)
}
