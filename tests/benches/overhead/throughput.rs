//! Throughput of a saturating transfer between two namespaces: untraced, under cctrace, under a
//! bpftrace script doing per-flow work from `tcp:tcp_probe`, and with `ss -tni` polled every
//! 100 ms. Rounds are interleaved (the order rotates every round) so the machine's drift
//! cancels out, and each round gives paired ratios to its own untraced run; rounds go on until
//! every ratio's 95 % confidence interval is within the target, or the round limit.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cctrace_lab::{SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};
use rustix::process::Pid;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use crate::bpf_stats::{self, Runs};
use crate::ci::Estimate;
use crate::tracer::Cctrace;

pub(crate) const PORT: u16 = 5311;

/// Per-flow state from every `tcp_probe`, as a bpftrace user would keep it.
const BPFTRACE_SCRIPT: &str = r#"tracepoint:tcp:tcp_probe {
  @last_ns[args->skaddr] = nsecs;
  @cwnd[args->skaddr] = args->snd_cwnd;
  @srtt[args->skaddr] = args->srtt;
  @snd_nxt[args->skaddr] = args->snd_nxt;
  @samples[args->skaddr] = count();
}"#;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mode {
    Untraced,
    Cctrace,
    Bpftrace,
    SsPoll,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Untraced, Mode::Cctrace, Mode::Bpftrace, Mode::SsPoll];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Cctrace => "cctrace (defaults)",
            Mode::Bpftrace => "bpftrace, per-flow maps from tcp_probe",
            Mode::SsPoll => "ss -tni every 100 ms",
        }
    }
}

pub(crate) struct Settings {
    pub(crate) secs: u64,
    pub(crate) min_rounds: usize,
    pub(crate) max_rounds: usize,
    pub(crate) target: f64,
    /// The CPU the transfer's threads run on (none: wherever the scheduler puts them).
    pub(crate) pin: Option<usize>,
}

pub(crate) struct Results {
    /// Goodput ratio to the untraced run of the same round, per traced mode.
    pub(crate) ratios: BTreeMap<Mode, Estimate>,
    /// Bytes per busy second of the transfer's CPU (pinned), or per CPU second of this process
    /// (not pinned), as a ratio to the untraced run of the same round.
    pub(crate) efficiency: BTreeMap<Mode, Estimate>,
    /// What `efficiency` divides by.
    pub(crate) efficiency_basis: &'static str,
    pub(crate) untraced_gbps: Estimate,
    /// cctrace's CPU seconds per second during the transfers.
    pub(crate) cctrace_cpu: Estimate,
    /// cctrace's programs' in-kernel time as a share of the transfer's own CPU time: what the
    /// hooks add to the data path, from the kernel's statistics rather than from goodput.
    pub(crate) kernel_share: f64,
    /// In-kernel runs of cctrace's programs in one transfer beside the bpftrace script.
    pub(crate) kernel: BTreeMap<String, Runs>,
    /// In-kernel runs of the bpftrace script's program in the same transfer: what the same
    /// per-flow work costs a general tool, on the same machine in the same run.
    pub(crate) bpftrace_kernel: Runs,
    pub(crate) rounds: usize,
    pub(crate) skipped: Vec<String>,
}

pub(crate) fn run(settings: &Settings) -> Result<Results> {
    // Everything but the transfer (this thread, and so every tracer and `ss` it starts, and the
    // lab's threads until they are pinned) stays off the transfer's CPU: that CPU's busy time
    // is then the data path and the hooks on it, and nothing else of ours.
    let _off = settings.pin.map(OffCpu::keep_off).transpose()?;
    let lab = VethPair::create(VethOptions::default()).context("building the veth pair")?;
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let bpftrace = which("bpftrace");
    let mut skipped = Vec::new();
    if !bpftrace {
        skipped.push("bpftrace not installed (cargo xtask setup installs it)".to_string());
    }
    let modes: Vec<Mode> = Mode::ALL.into_iter().filter(|m| *m != Mode::Bpftrace || bpftrace).collect();
    let mut goodput_ratios: BTreeMap<Mode, Vec<f64>> = BTreeMap::new();
    let mut efficiency_ratios: BTreeMap<Mode, Vec<f64>> = BTreeMap::new();
    let mut untraced = Vec::new();
    let mut cpu = Vec::new();
    let mut rounds = 0;
    while rounds < settings.max_rounds {
        let mut round = BTreeMap::new();
        for i in 0..modes.len() {
            let mode = modes[(i + rounds) % modes.len()];
            let (t, cost) = run_mode(mode, &lab, settings.secs, settings.pin)?;
            round.insert(mode, t);
            if let Some(Cost::Cctrace(cpu_per_s)) = cost {
                cpu.push(cpu_per_s);
            }
        }
        rounds += 1;
        let base = round[&Mode::Untraced];
        untraced.push(base.goodput_bps / 1e9);
        for (mode, t) in &round {
            if *mode != Mode::Untraced {
                goodput_ratios.entry(*mode).or_default().push(t.goodput_bps / base.goodput_bps);
                efficiency_ratios.entry(*mode).or_default().push(t.bytes_per_cpu_s / base.bytes_per_cpu_s);
            }
        }
        let worst = |ratios: &BTreeMap<Mode, Vec<f64>>| {
            ratios.values().map(|v| Estimate::of(v).map_or(f64::INFINITY, |e| e.relative())).fold(0.0, f64::max)
        };
        let last = |ratios: &BTreeMap<Mode, Vec<f64>>| {
            ratios.iter().map(|(m, v)| format!("{m:?} {:.3}", v.last().unwrap_or(&0.0))).collect::<Vec<_>>().join(", ")
        };
        let (worst_goodput, worst_efficiency) = (worst(&goodput_ratios), worst(&efficiency_ratios));
        eprintln!(
            "  round {rounds}: untraced {:.2} Gbit/s; goodput {} (worst CI ±{:.1} %); bytes per CPU s {} (worst CI ±{:.1} %)",
            base.goodput_bps / 1e9,
            last(&goodput_ratios),
            worst_goodput * 100.0,
            last(&efficiency_ratios),
            worst_efficiency * 100.0
        );
        if rounds >= settings.min_rounds && worst_goodput <= settings.target && worst_efficiency <= settings.target {
            break;
        }
    }
    let (kernel, bpftrace_kernel, kernel_share) = kernel_costs(&lab, settings, bpftrace)?;
    let estimates =
        |ratios: &BTreeMap<Mode, Vec<f64>>| ratios.iter().filter_map(|(m, v)| Some((*m, Estimate::of(v)?))).collect();
    Ok(Results {
        ratios: estimates(&goodput_ratios),
        efficiency: estimates(&efficiency_ratios),
        efficiency_basis: if settings.pin.is_some() {
            "bytes per busy second of the transfer's CPU"
        } else {
            "bytes per CPU second of the transfer's threads"
        },
        untraced_gbps: Estimate::of(&untraced).context("too few rounds")?,
        cctrace_cpu: Estimate::of(&cpu).context("too few rounds")?,
        kernel_share,
        kernel,
        bpftrace_kernel,
        rounds,
        skipped,
    })
}

pub(crate) fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What one transfer achieved.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Transfer {
    goodput_bps: f64,
    /// Bytes acknowledged per second of CPU work on the data path. Pinned: the transfer CPU's
    /// busy time from /proc/stat (user, system, irq and softirq: the veth receive path runs
    /// in softirq, which a task's own CPU time leaves out with IRQ time accounting; time the
    /// hypervisor stole is not busy time). Not pinned: this process's CPU time. A machine
    /// that gives the transfer less CPU changes its goodput but hardly what a byte costs, so
    /// this ratio stays readable where goodput does not.
    bytes_per_cpu_s: f64,
    /// The CPU seconds that divide: the transfer CPU's busy time, or this process's.
    work_s: f64,
}

/// User + system CPU seconds of this process so far.
fn own_cpu_secs() -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// This thread kept on every CPU but one (the threads and processes it starts inherit that)
/// until dropped, when its own CPUs are given back.
struct OffCpu(CpuSet);

impl OffCpu {
    fn keep_off(cpu: usize) -> Result<Self> {
        let before = sched_getaffinity(None).context("reading this thread's CPUs")?;
        let mut set = before;
        set.unset(cpu);
        sched_setaffinity(None, &set).with_context(|| format!("keeping the benchmark off CPU {cpu}"))?;
        Ok(Self(before))
    }
}

impl Drop for OffCpu {
    fn drop(&mut self) {
        let _ = sched_setaffinity(None, &self.0);
    }
}

/// Seconds CPU `cpu` has spent working (user, nice, system, irq, softirq) since boot.
fn cpu_busy_secs(cpu: usize) -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let label = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(label.as_str()))
        .with_context(|| format!("no {label} line in /proc/stat"))?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = [0, 1, 2, 5, 6].iter().filter_map(|i| ticks.get(*i)).sum::<u64>();
    let per_s = rustix::param::clock_ticks_per_second().max(1) as f64;
    Ok(busy as f64 / per_s)
}

/// The transfer's threads (the sender and the sink, named so by the lab) on CPU `cpu`: with
/// the softirq work they cause, the whole data path runs on one core, so a round's goodput is
/// what that core moves rather than where the scheduler put two threads, which varied more
/// between runs than the tracers' cost. The tracers themselves are not pinned.
fn pin_transfer_threads(cpu: usize) -> Result<()> {
    for task in std::fs::read_dir("/proc/self/task")? {
        let task = task?;
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !matches!(comm.trim(), "cct-sink" | "cct-sender") {
            continue;
        }
        let tid: i32 = task.file_name().to_string_lossy().parse()?;
        let mut set = CpuSet::new();
        set.set(cpu);
        sched_setaffinity(Pid::from_raw(tid), &set).with_context(|| format!("pinning thread {tid}"))?;
    }
    Ok(())
}

/// One bulk transfer of `secs` seconds, its threads on `pin` when set.
pub(crate) fn transfer(lab: &VethPair, secs: u64, pin: Option<usize>) -> Result<Transfer> {
    let cpu0 = own_cpu_secs();
    let busy0 = pin.map(cpu_busy_secs).transpose()?;
    let sender = Sender::start(
        lab.sender(),
        lab.receiver_addr(),
        PORT,
        SenderOptions::new("cubic", SendMode::Bulk, Duration::from_secs(secs)),
    )?;
    if let Some(cpu) = pin {
        pin_transfer_threads(cpu)?;
    }
    let report = sender.wait()?;
    let cpu = own_cpu_secs() - cpu0;
    let busy = match (pin, busy0) {
        (Some(c), Some(b0)) => cpu_busy_secs(c)? - b0,
        _ => cpu,
    };
    Ok(Transfer {
        goodput_bps: report.goodput_bps,
        bytes_per_cpu_s: report.bytes_acked as f64 / busy.max(1e-6),
        work_s: busy,
    })
}

/// What a tracer cost besides the transfer's goodput: cctrace's CPU seconds per second.
enum Cost {
    Cctrace(f64),
}

/// The programs' in-kernel time, from one more transfer with cctrace and the bpftrace script
/// attached together and the kernel's run-time statistics on: both measured on the same
/// packets at the same time. The rounds above run with the statistics off, as a user's
/// machine does: they cost two clock reads per program run, more for cctrace's several
/// programs per packet than for bpftrace's one, and would tilt the goodput ratios.
fn kernel_costs(
    lab: &VethPair,
    settings: &Settings,
    with_bpftrace: bool,
) -> Result<(BTreeMap<String, Runs>, Runs, f64)> {
    let _stats = bpf_stats::enable()?;
    let tracer = Cctrace::start(&[], r#""type":"summary""#.into(), Box::new(|_, _| {}))?;
    let bpftrace = if with_bpftrace { Some(Bpftrace::start()?) } else { None };
    let bpftrace_runs = |b: &Option<Bpftrace>| -> Result<BTreeMap<String, Runs>> {
        b.as_ref().map_or_else(|| Ok(BTreeMap::new()), |b| bpf_stats::programs_of(b.0.id()))
    };
    let (cct0, bt0) = (bpf_stats::programs_of(tracer.pid())?, bpftrace_runs(&bpftrace)?);
    let t = transfer(lab, settings.secs, settings.pin)?;
    let (cct1, bt1) = (bpf_stats::programs_of(tracer.pid())?, bpftrace_runs(&bpftrace)?);
    drop(bpftrace);
    tracer.stop()?;
    let kernel = bpf_stats::delta(&cct0, &cct1);
    let mut bt = Runs::default();
    for r in bpf_stats::delta(&bt0, &bt1).values() {
        bt.count += r.count;
        bt.ns += r.ns;
    }
    let share = kernel.values().map(|r| r.ns).sum::<u64>() as f64 / 1e9 / t.work_s.max(1e-6);
    Ok((kernel, bt, share))
}

/// A transfer under `mode`.
fn run_mode(mode: Mode, lab: &VethPair, secs: u64, pin: Option<usize>) -> Result<(Transfer, Option<Cost>)> {
    match mode {
        Mode::Untraced => Ok((transfer(lab, secs, pin)?, None)),
        Mode::Cctrace => {
            let tracer = Cctrace::start(&[], r#""type":"summary""#.into(), Box::new(|_, _| {}))?;
            let (cpu0, t0) = (tracer.cpu_secs()?, Instant::now());
            let t = transfer(lab, secs, pin)?;
            let cpu1 = tracer.cpu_secs()?;
            let per_s = (cpu1 - cpu0) / t0.elapsed().as_secs_f64();
            let summary = tracer.stop()?;
            if summary["events_lost"].as_u64() != Some(0) {
                eprintln!("  cctrace lost samples during a saturating transfer: {summary}");
            }
            Ok((t, Some(Cost::Cctrace(per_s))))
        }
        Mode::Bpftrace => {
            let _bpftrace = Bpftrace::start()?;
            Ok((transfer(lab, secs, pin)?, None))
        }
        Mode::SsPoll => {
            let poller = SsPoller::start(lab.sender().name());
            let t = transfer(lab, secs, pin);
            poller.stop();
            Ok((t?, None))
        }
    }
}

/// `ss -tni` run in namespace `netns` every 100 ms, as a user polling it would, until stopped;
/// the CPU its runs took (each reaped with its own resource usage: the bench's other children,
/// iperf3 among them, are not in it).
pub(crate) struct SsPoller {
    stop: Arc<AtomicBool>,
    cpu_us: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl SsPoller {
    pub(crate) fn start(netns: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cpu_us = Arc::new(AtomicU64::new(0));
        let (s, cpu) = (stop.clone(), cpu_us.clone());
        let name = netns.to_string();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let next = Instant::now() + Duration::from_millis(100);
                let run = Command::new("ip").args(["netns", "exec", &name, "ss", "-tni"]).stdout(Stdio::null()).spawn();
                if let Ok(child) = run {
                    cpu.fetch_add(reap_cpu_us(child.id()), Ordering::Relaxed);
                }
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        Self { stop, cpu_us, thread }
    }

    /// CPU seconds of the runs reaped so far.
    pub(crate) fn cpu_secs(&self) -> f64 {
        self.cpu_us.load(Ordering::Relaxed) as f64 / 1e6
    }

    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// Wait for child `pid` and return the user and system time it took, µs.
fn reap_cpu_us(pid: u32) -> u64 {
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 writes into both out-parameters for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) } < 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// bpftrace running the script, killed on drop.
pub(crate) struct Bpftrace(pub(crate) Child);

/// bpftrace running `script`, once it says it attaches; its stdout after that line.
pub(crate) fn spawn_bpftrace(script: &str) -> Result<(Child, BufReader<std::process::ChildStdout>)> {
    let mut child = Command::new("bpftrace")
        .args(["-e", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting bpftrace")?;
    let mut out = BufReader::new(child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?);
    // It prints "Attaching N probes..." once attached.
    let mut first = String::new();
    out.read_line(&mut first)?;
    if !first.starts_with("Attaching") {
        let _ = child.kill();
        let _ = child.wait();
        bail!("bpftrace did not attach: {first:?}");
    }
    Ok((child, out))
}

impl Bpftrace {
    pub(crate) fn start() -> Result<Self> {
        let (child, out) = spawn_bpftrace(BPFTRACE_SCRIPT)?;
        let mut me = Self(child);
        let mut lines = out.lines();
        // The maps it prints at exit go nowhere.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        std::thread::sleep(Duration::from_millis(200));
        let _ = me.0.try_wait();
        Ok(me)
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        let _ = cctrace_lab::child::send_signal(self.0.id(), cctrace_lab::child::Signal::INT);
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
