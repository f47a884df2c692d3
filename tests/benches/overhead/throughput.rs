//! Throughput of a saturating transfer between two namespaces: untraced, under cctrace, under a
//! bpftrace script doing per-flow work from `tcp:tcp_probe`, and with `ss -tni` polled every
//! 100 ms. Rounds are interleaved (the order rotates every round) so the machine's drift
//! cancels out, and each round gives paired ratios to its own untraced run; rounds go on until
//! every ratio's 95 % confidence interval is within the target, or the round limit.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cctrace_lab::{SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};

use crate::bpf_stats::{self, Runs};
use crate::ci::Estimate;
use crate::tracer::Cctrace;

const PORT: u16 = 5311;

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
}

pub(crate) struct Results {
    /// Goodput ratio to the untraced run of the same round, per traced mode.
    pub(crate) ratios: BTreeMap<Mode, Estimate>,
    pub(crate) untraced_gbps: Estimate,
    /// cctrace's CPU seconds per second during the transfers.
    pub(crate) cctrace_cpu: Estimate,
    /// In-kernel runs of cctrace's programs over all its transfers.
    pub(crate) kernel: BTreeMap<String, Runs>,
    pub(crate) rounds: usize,
    pub(crate) skipped: Vec<String>,
}

pub(crate) fn run(settings: &Settings) -> Result<Results> {
    let lab = VethPair::create(VethOptions::default()).context("building the veth pair")?;
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let bpftrace = which("bpftrace");
    let mut skipped = Vec::new();
    if !bpftrace {
        skipped.push("bpftrace not installed (cargo xtask setup installs it)".to_string());
    }
    let modes: Vec<Mode> = Mode::ALL.into_iter().filter(|m| *m != Mode::Bpftrace || bpftrace).collect();
    let _stats = bpf_stats::enable()?;
    let mut per_round: BTreeMap<Mode, Vec<f64>> = BTreeMap::new();
    let mut untraced = Vec::new();
    let mut cpu = Vec::new();
    let mut kernel: BTreeMap<String, Runs> = BTreeMap::new();
    let mut rounds = 0;
    while rounds < settings.max_rounds {
        let mut goodput = BTreeMap::new();
        for i in 0..modes.len() {
            let mode = modes[(i + rounds) % modes.len()];
            let (bps, cctrace) = run_mode(mode, &lab, settings.secs)?;
            goodput.insert(mode, bps);
            if let Some((cpu_per_s, runs)) = cctrace {
                cpu.push(cpu_per_s);
                for (name, r) in runs {
                    let k = kernel.entry(name).or_default();
                    k.count += r.count;
                    k.ns += r.ns;
                }
            }
        }
        rounds += 1;
        let base = goodput[&Mode::Untraced];
        untraced.push(base / 1e9);
        for (mode, bps) in &goodput {
            if *mode != Mode::Untraced {
                per_round.entry(*mode).or_default().push(bps / base);
            }
        }
        let estimates: Vec<Estimate> = per_round.values().filter_map(|v| Estimate::of(v)).collect();
        let worst = estimates.iter().map(Estimate::relative).fold(0.0, f64::max);
        eprintln!(
            "  round {rounds}: untraced {:.2} Gbit/s; {}; worst CI ±{:.1} %",
            base / 1e9,
            per_round
                .iter()
                .map(|(m, v)| format!("{:?} {:.3}", m, v.last().unwrap_or(&0.0)))
                .collect::<Vec<_>>()
                .join(", "),
            worst * 100.0
        );
        if rounds >= settings.min_rounds && estimates.len() == per_round.len() && worst <= settings.target {
            break;
        }
    }
    let ratios = per_round.iter().filter_map(|(m, v)| Some((*m, Estimate::of(v)?))).collect();
    Ok(Results {
        ratios,
        untraced_gbps: Estimate::of(&untraced).context("too few rounds")?,
        cctrace_cpu: Estimate::of(&cpu).context("too few rounds")?,
        kernel,
        rounds,
        skipped,
    })
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One bulk transfer of `secs` seconds; its goodput in bit/s.
fn transfer(lab: &VethPair, secs: u64) -> Result<f64> {
    let sender = Sender::start(
        lab.sender(),
        lab.receiver_addr(),
        PORT,
        SenderOptions::new("cubic", SendMode::Bulk, Duration::from_secs(secs)),
    )?;
    Ok(sender.wait()?.goodput_bps)
}

/// Goodput under `mode`; for cctrace also its CPU seconds per second and its programs' runs.
type CctraceCost = Option<(f64, BTreeMap<String, Runs>)>;

fn run_mode(mode: Mode, lab: &VethPair, secs: u64) -> Result<(f64, CctraceCost)> {
    match mode {
        Mode::Untraced => Ok((transfer(lab, secs)?, None)),
        Mode::Cctrace => {
            let tracer = Cctrace::start(&[], Box::new(|_, _| {}))?;
            let (cpu0, runs0, t0) = (tracer.cpu_secs()?, bpf_stats::programs_of(tracer.pid())?, Instant::now());
            let bps = transfer(lab, secs)?;
            let (cpu1, runs1) = (tracer.cpu_secs()?, bpf_stats::programs_of(tracer.pid())?);
            let per_s = (cpu1 - cpu0) / t0.elapsed().as_secs_f64();
            let summary = tracer.stop()?;
            if summary["events_lost"].as_u64() != Some(0) {
                eprintln!("  cctrace lost samples during a saturating transfer: {summary}");
            }
            Ok((bps, Some((per_s, bpf_stats::delta(&runs0, &runs1)))))
        }
        Mode::Bpftrace => {
            let _bpftrace = Bpftrace::start()?;
            Ok((transfer(lab, secs)?, None))
        }
        Mode::SsPoll => {
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let name = lab.sender().name().to_string();
            let poller = std::thread::spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let next = Instant::now() + Duration::from_millis(100);
                    let _ =
                        Command::new("ip").args(["netns", "exec", &name, "ss", "-tni"]).stdout(Stdio::null()).status();
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            });
            let bps = transfer(lab, secs);
            stop.store(true, Ordering::Relaxed);
            let _ = poller.join();
            Ok((bps?, None))
        }
    }
}

/// bpftrace running the script, killed on drop.
struct Bpftrace(Child);

impl Bpftrace {
    fn start() -> Result<Self> {
        let mut child = Command::new("bpftrace")
            .args(["-e", BPFTRACE_SCRIPT])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting bpftrace")?;
        let out = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut me = Self(child);
        // It prints "Attaching 1 probe..." once attached.
        let mut lines = BufReader::new(out).lines();
        match lines.next() {
            Some(Ok(l)) if l.starts_with("Attaching") => {}
            other => bail!("bpftrace did not attach: {other:?}"),
        }
        // The maps it prints at exit go nowhere.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        std::thread::sleep(Duration::from_millis(200));
        let _ = me.0.try_wait();
        Ok(me)
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
