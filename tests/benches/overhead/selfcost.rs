//! The tracer's own process (issue 38): its CPU a second at rest, with one busy flow and with
//! 100, for each front end (`--json` into a pipe, the terminal UI in a tmux pane, `serve`), for
//! this binary and, when `--base BIN` names one, the binary before the work, in interleaved
//! runs. The busy flows are iperf3 streams over veth with its offloads on, as a host has them
//! (one saturating, or 100 of 20 Mbit/s).
//! CPU time is the sum of the process's threads' time on a CPU from `/proc/PID/task/*/schedstat`
//! (nanoseconds; the ticks of `/proc/PID/stat` are 10 ms, too coarse for a millisecond a second).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cctrace_lab::{VethOptions, VethPair};

use crate::iperf::Iperf3;

/// The front ends measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Front {
    Json,
    Tui,
    Serve,
}

impl Front {
    pub(crate) const ALL: [Front; 3] = [Front::Json, Front::Tui, Front::Serve];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Front::Json => "--json",
            Front::Tui => "terminal UI",
            Front::Serve => "serve",
        }
    }
}

/// What runs beside the tracer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Load {
    Rest,
    /// This many iperf3 streams over veth: one saturating, or each at 20 Mbit/s.
    Busy(usize),
}

impl Load {
    pub(crate) fn label(self) -> String {
        match self {
            Load::Rest => "at rest".into(),
            Load::Busy(1) => "1 busy flow (iperf3)".into(),
            Load::Busy(n) => format!("{n} busy flows (iperf3 -P {n}, 20 Mbit/s each)"),
        }
    }
}

/// One measurement: a binary's CPU a second under a load with a front end, over the rounds.
pub(crate) struct Measured {
    pub(crate) load: Load,
    pub(crate) front: Front,
    /// Per binary (in the order given), milliseconds of CPU a second, one value a round.
    pub(crate) ms_per_s: Vec<Vec<f64>>,
}

/// The process's threads' time on a CPU so far, ns.
pub(crate) fn cpu_ns(pid: u32) -> Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("process {pid} is gone"))? {
        let Ok(text) = std::fs::read_to_string(task?.path().join("schedstat")) else { continue };
        total += text.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    Ok(total)
}

/// A tracer running with one front end until stopped.
struct Running {
    child: Option<Child>,
    /// The tmux session holding the terminal UI.
    tmux: Option<String>,
    pid: u32,
}

impl Running {
    fn start(bin: &Path, front: Front) -> Result<Self> {
        match front {
            Front::Json | Front::Serve => {
                let mut cmd = Command::new(bin);
                if front == Front::Json {
                    cmd.arg("--json");
                } else {
                    cmd.args(["serve", "--listen", "127.0.0.1:0"]);
                }
                let mut child = cmd
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .with_context(|| format!("starting {}", bin.display()))?;
                // Its output read and dropped as a consumer of the pipe would.
                let mut out = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    while out.read(&mut buf).is_ok_and(|n| n > 0) {}
                });
                let err = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
                let pid = child.id();
                let me = Self { child: Some(child), tmux: None, pid };
                let mut lines = BufReader::new(err).lines();
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    match lines.next() {
                        Some(Ok(l)) if l.contains("tracing TCP") => break,
                        Some(Ok(_)) if Instant::now() < deadline => {}
                        _ => bail!("{} did not start tracing", bin.display()),
                    }
                }
                std::thread::spawn(move || for _ in lines.by_ref() {});
                Ok(me)
            }
            Front::Tui => {
                let name = format!("cct-selfcost-{}", std::process::id());
                let status = Command::new("tmux")
                    .args(["new-session", "-d", "-s", &name, "-x", "200", "-y", "50"])
                    .arg(bin)
                    .status()
                    .context("running tmux (cargo xtask setup installs it)")?;
                if !status.success() {
                    bail!("tmux new-session failed");
                }
                let mut me = Self { child: None, tmux: Some(name.clone()), pid: 0 };
                let out = Command::new("tmux").args(["display-message", "-p", "-t", &name, "#{pane_pid}"]).output()?;
                me.pid = String::from_utf8_lossy(&out.stdout).trim().parse().context("the pane's pid")?;
                // The UI says nothing on stderr: it is up once its first frame shows the hooks.
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let screen = Command::new("tmux").args(["capture-pane", "-p", "-t", &name]).output()?;
                    if String::from_utf8_lossy(&screen.stdout).contains("hooks)") {
                        break;
                    }
                    if Instant::now() > deadline {
                        bail!("the terminal UI did not come up");
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok(me)
            }
        }
    }

    fn stop(mut self) -> Result<()> {
        if let Some(name) = &self.tmux {
            Command::new("tmux").args(["send-keys", "-t", name, "q"]).status()?;
            let deadline = Instant::now() + Duration::from_secs(15);
            while Path::new(&format!("/proc/{}", self.pid)).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if let Some(child) = &mut self.child {
            let _ = cctrace_lab::child::send_signal(child.id(), cctrace_lab::child::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(15);
            while child.try_wait()?.is_none() {
                if Instant::now() > deadline {
                    bail!("cctrace did not exit within 15 s of SIGTERM");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(name) = &self.tmux {
            let _ = Command::new("tmux").args(["kill-session", "-t", name]).status();
        }
    }
}

/// `bin`'s CPU a second with `front`, over `secs` after `settle`.
fn measure(bin: &Path, front: Front, settle: Duration, secs: Duration) -> Result<f64> {
    let running = Running::start(bin, front)?;
    std::thread::sleep(settle);
    let (cpu0, t0) = (cpu_ns(running.pid)?, Instant::now());
    std::thread::sleep(secs);
    let (cpu1, elapsed) = (cpu_ns(running.pid)?, t0.elapsed());
    running.stop()?;
    Ok((cpu1 - cpu0) as f64 / 1e6 / elapsed.as_secs_f64())
}

/// Every load and front end for each of `bins`, `rounds` times, the binaries taking turns.
pub(crate) fn run(
    bins: &[PathBuf],
    loads: &[Load],
    rounds: usize,
    settle: Duration,
    secs: Duration,
) -> Result<Vec<Measured>> {
    let mut out = Vec::new();
    let per_run = settle + secs + Duration::from_secs(3);
    for &load in loads {
        let runs = (Front::ALL.len() * bins.len() * rounds) as u32;
        let lab = match load {
            Load::Rest => None,
            Load::Busy(_) => {
                let lab = VethPair::create(VethOptions::default()).context("building the veth pair")?;
                crate::iperf::offloads_on(&lab)?;
                Some(lab)
            }
        };
        let _iperf = match (load, &lab) {
            (Load::Busy(n), Some(lab)) => {
                let rate = (n > 1).then_some("20M");
                let iperf = Iperf3::start(lab, n, rate, (per_run * runs).as_secs() + 10)?;
                // Every stream under way before the first tracer starts.
                std::thread::sleep(Duration::from_secs(2));
                Some(iperf)
            }
            _ => None,
        };
        for front in Front::ALL {
            let mut ms_per_s = vec![Vec::new(); bins.len()];
            for round in 0..rounds {
                for i in 0..bins.len() {
                    let b = (i + round) % bins.len();
                    let v = measure(&bins[b], front, settle, secs)?;
                    eprintln!("  {} {}, {}: {v:.2} ms/s", load.label(), front.label(), bins[b].display());
                    ms_per_s[b].push(v);
                }
            }
            out.push(Measured { load, front, ms_per_s });
        }
    }
    Ok(out)
}
