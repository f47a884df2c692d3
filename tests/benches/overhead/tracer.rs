//! The cctrace under measurement: a child process, its output lines counted as they come, its
//! CPU time and memory read from /proc.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use cctrace_tests::{spawn_until_tracing, Spawned};
use serde_json::Value;

/// Called with each JSON line cctrace prints and the time since it was started.
pub(crate) type OnLine = Box<dyn FnMut(&Value, Duration) + Send>;

pub(crate) struct Cctrace {
    run: Spawned,
    pub(crate) started: Instant,
    summary: Arc<Mutex<Option<Value>>>,
}

impl Cctrace {
    /// `cctrace --json ARGS`, waiting until it says it is tracing. Only lines containing
    /// `wanted` (and the summary) are parsed and given to `on_line`: parsing every line of a
    /// busy run would make this reader the bottleneck, and a stalled output stalls cctrace.
    pub(crate) fn start(args: &[&str], wanted: String, on_line: OnLine) -> Result<Self> {
        Self::start_bin(&cctrace_tests::cctrace_bin(), args, wanted, on_line)
    }

    /// [`Cctrace::start`] of binary `bin` (the one before a change, say).
    pub(crate) fn start_bin(bin: &std::path::Path, args: &[&str], wanted: String, mut on_line: OnLine) -> Result<Self> {
        let started = Instant::now();
        let mut cmd = Command::new(bin);
        cmd.arg("--json").args(args).stdin(Stdio::null());
        let summary = Arc::new(Mutex::new(None));
        let s = summary.clone();
        let read = move |line: String| {
            if !line.contains(&wanted) && !line.contains(r#""type":"summary""#) {
                return;
            }
            let Ok(v) = serde_json::from_str::<Value>(&line) else { return };
            on_line(&v, started.elapsed());
            if v["type"] == "summary" {
                *s.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(v);
            }
        };
        Ok(Self { run: spawn_until_tracing(cmd, read, Duration::from_secs(60))?, started, summary })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.run.pid()
    }

    pub(crate) fn stderr(&self) -> String {
        self.run.stderr()
    }

    /// User + system CPU seconds so far.
    pub(crate) fn cpu_secs(&self) -> Result<f64> {
        cpu_secs(self.pid())
    }

    /// The process's threads' time on a CPU so far, ns (finer than [`Cctrace::cpu_secs`]).
    pub(crate) fn cpu_ns(&self) -> Result<u64> {
        crate::selfcost::cpu_ns(self.pid())
    }

    /// (resident now, peak resident) in bytes.
    pub(crate) fn rss(&self) -> Result<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let kb = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        };
        Ok((kb("VmRSS:").unwrap_or(0) * 1024, kb("VmHWM:").unwrap_or(0) * 1024))
    }

    /// SIGTERM, wait, and return the summary line.
    pub(crate) fn stop(mut self) -> Result<Value> {
        self.run.stop(Duration::from_secs(30))?;
        let summary = self.summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        summary.ok_or_else(|| anyhow!("cctrace printed no summary: {}", self.stderr()))
    }
}

/// User + system CPU seconds of process `pid` (fields 14 and 15 of /proc/PID/stat).
pub(crate) fn cpu_secs(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').map(|(_, r)| r).context("stat format")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 =
        fields.get(11).context("utime")?.parse::<u64>()? + fields.get(12).context("stime")?.parse::<u64>()?;
    let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
    Ok(ticks as f64 / hz)
}
