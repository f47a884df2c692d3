//! The observer's cost as issue 24 defines it: the observer's BPF programs' in-kernel time (the
//! kernel's run-time statistics, on for this measurement only) plus its processes' user and
//! system time, over a saturating transfer, divided by all busy CPU of the machine in the same
//! window. The observers take turns on the same transfer in interleaved rounds: cctrace with
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
use cctrace_lab::{Sink, SinkOptions, VethOptions, VethPair};

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
/// the first judgments of 10,000 idle flows (docs/testing.md has both).
const SETTLE: Duration = Duration::from_secs(8);

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
    /// cctrace's in-kernel part of its share, for where the rest goes.
    pub(crate) cctrace_kernel_share: Option<Estimate>,
}

/// Machine-wide busy CPU seconds (user, nice, system, irq, softirq of every CPU).
fn machine_busy_secs() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().find(|l| l.starts_with("cpu ")).context("no cpu line in /proc/stat")?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let busy = [0, 1, 2, 5, 6].iter().filter_map(|i| ticks.get(*i)).sum::<u64>();
    // SAFETY: sysconf reads a constant.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(busy as f64 / per_s)
}

/// CPU seconds of this process's reaped children: the `ss` runs of the poller.
fn children_cpu_secs() -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
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
    fn cpu(&self) -> Result<(f64, f64)> {
        let programs = |pid: u32| -> Result<f64> {
            Ok(bpf_stats::programs_of(pid)?.values().map(|r| r.ns).sum::<u64>() as f64 / 1e9)
        };
        match self {
            Running::Cctrace(c) => Ok((c.cpu_secs()?, programs(c.pid())?)),
            Running::Bpftrace(b) => Ok((tracer::cpu_secs(b.0.id())?, programs(b.0.id())?)),
            Running::SsPoll(..) => Ok((children_cpu_secs(), 0.0)),
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

/// One observer over one transfer: (its share of busy CPU, the in-kernel part of it). For
/// cctrace, each of its programs' part is printed too (runs, ns a run, share), so a change in
/// its in-kernel share can be put on the hook that made it.
fn measure(observer: Observer, lab: &VethPair, what: Transfer, secs: u64, before: Option<&Path>) -> Result<(f64, f64)> {
    let running = Running::start(observer, lab, before)?;
    std::thread::sleep(SETTLE);
    let programs = || match &running {
        Running::Cctrace(c) => bpf_stats::programs_of(c.pid()).map(Some),
        _ => Ok(None),
    };
    let (busy0, (cpu0, bpf0), programs0) = (machine_busy_secs()?, running.cpu()?, programs()?);
    what.run(lab, secs)?;
    let (busy1, (cpu1, bpf1), programs1) = (machine_busy_secs()?, running.cpu()?, programs()?);
    running.stop()?;
    let busy = (busy1 - busy0).max(1e-6);
    if let (Some(p0), Some(p1)) = (programs0, programs1) {
        let parts: Vec<String> = bpf_stats::delta(&p0, &p1)
            .iter()
            .filter(|(_, r)| r.count > 0)
            .map(|(name, r)| {
                let share = r.ns as f64 / 1e9 / busy * 100.0;
                format!("{name} {} runs {:.0} ns/run {share:.2} %", r.count, r.ns as f64 / r.count as f64)
            })
            .collect();
        eprintln!("    {:?}'s programs: {}", observer, parts.join(", "));
    }
    Ok((((cpu1 - cpu0) + (bpf1 - bpf0)) / busy, (bpf1 - bpf0) / busy))
}

/// Each observer's share at each size of `sizes` idle flows, over `what`, in `rounds`
/// interleaved rounds; the binary `before` a change is one more observer when given.
pub(crate) fn run(
    sizes: &[usize],
    what: Transfer,
    secs: u64,
    rounds: usize,
    before: Option<&Path>,
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
        for round in 0..rounds {
            let mut this = BTreeMap::new();
            for i in 0..observers.len() {
                let observer = observers[(i + round) % observers.len()];
                let (share, in_kernel) = measure(observer, &lab, what, secs, before)?;
                if observer == Observer::Cctrace {
                    kernel.push(in_kernel);
                }
                this.insert(observer, share);
                shares.entry(observer).or_default().push(share);
            }
            let cct = this[&Observer::Cctrace];
            for (o, s) in &this {
                if *o != Observer::Cctrace {
                    over.entry(*o).or_default().push(cct / s.max(1e-9));
                }
            }
            eprintln!(
                "  {idle_flows} idle flows, round {}: {}",
                round + 1,
                this.iter().map(|(o, s)| format!("{o:?} {:.2} %", s * 100.0)).collect::<Vec<_>>().join(", ")
            );
        }
        drop(holders);
        let estimates =
            |m: &BTreeMap<Observer, Vec<f64>>| m.iter().filter_map(|(o, v)| Some((*o, Estimate::of(v)?))).collect();
        out.push(Shares {
            idle_flows,
            share: estimates(&shares),
            cctrace_over: estimates(&over),
            cctrace_kernel_share: Estimate::of(&kernel),
        });
    }
    Ok(out)
}
