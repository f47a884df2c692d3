//! What `tcp_probe`'s windows cost the rest of the machine (issue 38). Each attach and detach of
//! a program on a tracepoint switches the tracepoint on or off in the kernel's text, and x86's
//! text patching interrupts every other CPU a few times for it.
//!
//! - The flip itself: a trivial raw-tracepoint program attached to `tcp:tcp_probe` and detached
//!   again, a few hundred times a second in alternate seconds, while a thread spins on another
//!   CPU noting every gap in its clock readings (1.5-70 us: an interruption, not a time slice):
//!   the flipping thread's CPU per cycle, and the spinner's extra interruptions and the time
//!   they took per cycle. The tracer's own window cost model takes its other-CPU figure from
//!   this (`tracer/src/kernel/probe_window.rs`).
//! - Over a transfer: function-call interrupts a second on the whole machine
//!   (`/proc/interrupts`, CAL) and the inter-processor interrupts the tracer's own threads
//!   sent (`ipi:ipi_send_cpu`/`ipi_send_cpumask`, counted by bpftrace by pid), untraced, under
//!   cctrace with its defaults, under cctrace `--probe-always-attached`, and the binary before
//!   a change when given; with the process's CPU a second and its programs' in-kernel time.

use std::io::Read;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cctrace_lab::{Sink, SinkOptions, VethOptions, VethPair};

use crate::bpf_stats;
use crate::observer::Transfer;
use crate::throughput::PORT;
use crate::tracer::Cctrace;

/// The flip measurement's result.
pub(crate) struct Flip {
    pub(crate) cycles_per_s: f64,
    /// The flipping thread's CPU per attach and detach.
    pub(crate) own_us: f64,
    /// The spinning thread's extra interruptions per cycle, and the time they took it.
    pub(crate) interruptions: f64,
    pub(crate) other_cpu_us: f64,
    /// Inter-processor interrupts this process sent per cycle (the text patches').
    pub(crate) ipis: f64,
}

/// `bpf(2)` with an attribute block of `attr`'s size.
fn bpf(cmd: libc::c_long, attr: &mut [u8]) -> libc::c_long {
    // SAFETY: the kernel reads (and may write) at most `attr.len()` bytes of the block.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) }
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;

/// A raw-tracepoint program that returns 0: `r0 = 0; exit`.
fn load_trivial_program() -> Result<std::os::fd::OwnedFd> {
    let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
    let license = c"GPL";
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&BPF_PROG_TYPE_RAW_TRACEPOINT.to_ne_bytes());
    attr[4..8].copy_from_slice(&2u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    let fd = bpf(BPF_PROG_LOAD, &mut attr);
    if fd < 0 {
        bail!("loading a trivial program: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a new fd the kernel just returned, owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

/// Attach `prog` to `tcp:tcp_probe` and detach it again.
fn flip(prog: &std::os::fd::OwnedFd) -> Result<()> {
    use std::os::fd::AsRawFd;
    let name = c"tcp_probe";
    let mut attr = [0u8; 16];
    attr[0..8].copy_from_slice(&(name.as_ptr() as u64).to_ne_bytes());
    attr[8..12].copy_from_slice(&(prog.as_raw_fd() as u32).to_ne_bytes());
    let link = bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr);
    if link < 0 {
        bail!("attaching to tcp_probe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the link fd the kernel just returned; closing it detaches the program.
    unsafe { libc::close(link as i32) };
    Ok(())
}

fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

fn thread_cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Interruptions of a thread spinning on CPU 0 and the time they took, counted until stopped.
struct Spinner {
    stop: Arc<AtomicBool>,
    gaps: Arc<AtomicU64>,
    gap_ns: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Spinner {
    fn start() -> Self {
        let (stop, gaps, gap_ns) =
            (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (s, g, gn) = (stop.clone(), gaps.clone(), gap_ns.clone());
        let thread = std::thread::spawn(move || {
            pin_to(0);
            // Real-time, so that the machine's other work does not take the CPU from it in
            // slices that would drown the interruptions (the kernel's RT throttling still
            // leaves others 5 %; those gaps are longer than counted).
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: sets the calling thread's policy from a valid parameter.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
            let mut last = Instant::now();
            while !s.load(Ordering::Relaxed) {
                let now = Instant::now();
                let gap = now.duration_since(last);
                if gap > Duration::from_nanos(1_500) && gap < Duration::from_micros(70) {
                    g.fetch_add(1, Ordering::Relaxed);
                    gn.fetch_add(gap.as_nanos() as u64, Ordering::Relaxed);
                }
                last = now;
            }
        });
        Self { stop, gaps, gap_ns, thread }
    }

    fn read(&self) -> (u64, u64) {
        (self.gaps.load(Ordering::Relaxed), self.gap_ns.load(Ordering::Relaxed))
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// Attach and detach a trivial program on `tcp_probe` `rate` times a second, in alternate
/// seconds over `phases` seconds, with a spinner on CPU 0 and the flipping on the last CPU.
pub(crate) fn flip_cost(rate: u32, phases: usize) -> Result<Flip> {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    if cpus < 2 {
        bail!("one CPU: no other CPU to interrupt");
    }
    let prog = load_trivial_program()?;
    let ipis = IpiCounter::start(std::process::id())?;
    // The flipping runs on a thread of its own, pinned to the last CPU.
    let flipper = std::thread::spawn(move || -> Result<(Flip, u64)> {
        pin_to(cpus - 1);
        let spinner = Spinner::start();
        std::thread::sleep(Duration::from_millis(300));
        let (mut quiet, mut flipping) = ((0u64, 0u64, 0f64), (0u64, 0u64, 0f64));
        let (mut cycles, mut own_ns) = (0u64, 0u64);
        for phase in 0..phases {
            let flips = phase % 2 == 1;
            let (g0, n0, t0) = (spinner.read().0, spinner.read().1, Instant::now());
            while t0.elapsed() < Duration::from_secs(1) {
                if flips {
                    let c0 = thread_cpu_ns();
                    flip(&prog)?;
                    own_ns += thread_cpu_ns() - c0;
                    cycles += 1;
                }
                std::thread::sleep(Duration::from_secs(1) / rate);
            }
            let (g1, n1) = spinner.read();
            let totals = if flips { &mut flipping } else { &mut quiet };
            totals.0 += g1 - g0;
            totals.1 += n1 - n0;
            totals.2 += t0.elapsed().as_secs_f64();
        }
        spinner.stop();
        let per_s = |t: (u64, u64, f64)| (t.0 as f64 / t.2, t.1 as f64 / t.2);
        let ((qg, qn), (fg, fnanos)) = (per_s(quiet), per_s(flipping));
        let cycles_per_s = cycles as f64 / flipping.2;
        let flip = Flip {
            cycles_per_s,
            own_us: own_ns as f64 / 1e3 / cycles.max(1) as f64,
            interruptions: (fg - qg) / cycles_per_s,
            other_cpu_us: (fnanos - qn) / 1e3 / cycles_per_s,
            // Counted once the flipping is done.
            ipis: 0.0,
        };
        Ok((flip, cycles))
    });
    let (mut flip, cycles) = flipper.join().map_err(|_| anyhow!("the flipping thread panicked"))??;
    flip.ipis = ipis.stop()? as f64 / cycles.max(1) as f64;
    Ok(flip)
}

/// Function-call interrupts so far, all CPUs.
fn call_interrupts() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/interrupts")?;
    let line = text.lines().find(|l| l.trim_start().starts_with("CAL:")).context("no CAL line in /proc/interrupts")?;
    Ok(line.split_whitespace().skip(1).map_while(|v| v.parse::<u64>().ok()).sum())
}

/// Inter-processor interrupts sent by one process's threads, counted by bpftrace until stopped.
struct IpiCounter(Child);

impl IpiCounter {
    fn start(pid: u32) -> Result<Self> {
        let script = format!(
            "tracepoint:ipi:ipi_send_cpu /pid == {pid}/ {{ @ipis = count(); }} \
             tracepoint:ipi:ipi_send_cpumask /pid == {pid}/ {{ @ipis = count(); }}"
        );
        let (mut child, out) = crate::throughput::spawn_bpftrace(&script).context("counting IPIs")?;
        child.stdout = Some(out.into_inner());
        Ok(Self(child))
    }

    fn stop(mut self) -> Result<u64> {
        let _ = cctrace_lab::child::send_signal(self.0.id(), cctrace_lab::child::Signal::INT);
        let mut text = String::new();
        self.0.stdout.take().context("bpftrace's stdout")?.read_to_string(&mut text)?;
        self.0.wait()?;
        Ok(text.lines().find_map(|l| l.strip_prefix("@ipis: ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0))
    }
}

impl Drop for IpiCounter {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Who watches the transfer.
#[derive(Clone, Debug)]
pub(crate) enum Watcher {
    Untraced,
    Cctrace { bin: PathBuf, args: Vec<&'static str>, label: String },
}

impl Watcher {
    pub(crate) fn label(&self) -> &str {
        match self {
            Watcher::Untraced => "untraced",
            Watcher::Cctrace { label, .. } => label,
        }
    }
}

/// One transfer under one watcher.
pub(crate) struct Watched {
    pub(crate) call_interrupts_per_s: f64,
    /// Sent by the tracer's threads (none untraced).
    pub(crate) tracer_ipis_per_s: f64,
    pub(crate) process_ms_per_s: f64,
    /// The programs' in-kernel time (statistics on, which add two clock reads a run).
    pub(crate) kernel_ms_per_s: f64,
}

fn watch(lab: &VethPair, what: Transfer, watcher: &Watcher, secs: u64) -> Result<Watched> {
    let tracer = match watcher {
        Watcher::Untraced => None,
        Watcher::Cctrace { bin, args, .. } => {
            Some(Cctrace::start_bin(bin, args, r#""type":"summary""#.into(), Box::new(|_, _| {}))?)
        }
    };
    // Windows start once a rate check finds them paying: let the tracer settle first.
    std::thread::sleep(Duration::from_secs(3));
    let started = std::thread::scope(|s| -> Result<Watched> {
        let transfer = s.spawn(|| what.run(lab, secs + 4));
        std::thread::sleep(Duration::from_secs(3));
        let ipis = tracer.as_ref().map(|t| IpiCounter::start(t.pid())).transpose()?;
        let programs =
            |t: &Cctrace| -> Result<u64> { Ok(bpf_stats::programs_of(t.pid())?.values().map(|r| r.ns).sum::<u64>()) };
        let (cal0, t0) = (call_interrupts()?, Instant::now());
        let cpu0 = tracer.as_ref().map(Cctrace::cpu_ns).transpose()?.unwrap_or(0);
        let k0 = tracer.as_ref().map(programs).transpose()?.unwrap_or(0);
        std::thread::sleep(Duration::from_secs(secs.saturating_sub(1).max(1)));
        let (cal1, elapsed) = (call_interrupts()?, t0.elapsed().as_secs_f64());
        let cpu1 = tracer.as_ref().map(Cctrace::cpu_ns).transpose()?.unwrap_or(0);
        let k1 = tracer.as_ref().map(programs).transpose()?.unwrap_or(0);
        let sent = ipis.map(IpiCounter::stop).transpose()?.unwrap_or(0);
        transfer.join().map_err(|_| anyhow!("the transfer panicked"))??;
        Ok(Watched {
            call_interrupts_per_s: (cal1 - cal0) as f64 / elapsed,
            tracer_ipis_per_s: sent as f64 / elapsed,
            process_ms_per_s: (cpu1 - cpu0) as f64 / 1e6 / elapsed,
            kernel_ms_per_s: (k1 - k0) as f64 / 1e6 / elapsed,
        })
    });
    if let Some(t) = tracer {
        t.stop()?;
    }
    started
}

/// Each watcher over each transfer, `rounds` times, the watchers taking turns.
pub(crate) fn run(watchers: &[Watcher], secs: u64, rounds: usize) -> Result<Vec<(Transfer, String, Vec<Watched>)>> {
    let _stats = bpf_stats::enable()?;
    let mut out = Vec::new();
    for what in [Transfer::LabSender, Transfer::Iperf3] {
        let lab = VethPair::create(VethOptions::default()).context("building the veth pair")?;
        if what == Transfer::Iperf3 {
            crate::iperf::offloads_on(&lab)?;
        }
        let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
        let mut all: Vec<Vec<Watched>> = watchers.iter().map(|_| Vec::new()).collect();
        for round in 0..rounds {
            for i in 0..watchers.len() {
                let w = (i + round) % watchers.len();
                let watched = watch(&lab, what, &watchers[w], secs)?;
                eprintln!(
                    "  {}, {}: {:.0} CAL/s, tracer sent {:.0} IPIs/s, process {:.2} ms/s, programs {:.2} ms/s",
                    what.label(),
                    watchers[w].label(),
                    watched.call_interrupts_per_s,
                    watched.tracer_ipis_per_s,
                    watched.process_ms_per_s,
                    watched.kernel_ms_per_s
                );
                all[w].push(watched);
            }
        }
        for (w, watched) in watchers.iter().zip(all) {
            out.push((what, w.label().to_string(), watched));
        }
    }
    Ok(out)
}
