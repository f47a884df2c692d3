//! The cctrace under measurement: a child process, its output lines counted as they come, its
//! CPU time and memory read from /proc.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

/// Called with each JSON line cctrace prints and the time since it was started.
pub(crate) type OnLine = Box<dyn FnMut(&Value, Duration) + Send>;

pub(crate) struct Cctrace {
    child: Child,
    pub(crate) started: Instant,
    stderr: Arc<Mutex<String>>,
    summary: Arc<Mutex<Option<Value>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
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
        let mut child = Command::new(bin)
            .arg("--json")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let out = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let err = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let summary = Arc::new(Mutex::new(None));
        let s = summary.clone();
        let r1 = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if !line.contains(&wanted) && !line.contains(r#""type":"summary""#) {
                    continue;
                }
                let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
                on_line(&v, started.elapsed());
                if v["type"] == "summary" {
                    *s.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(v);
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let e = stderr.clone();
        let r2 = std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = e.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut me = Self { child, started, stderr, summary, readers: vec![r1, r2] };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !me.stderr().contains("tracing TCP") {
            if let Some(status) = me.child.try_wait()? {
                bail!("cctrace exited at start-up ({status}): {}", me.stderr());
            }
            if Instant::now() > deadline {
                bail!("cctrace did not start within 60 s: {}", me.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(me)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
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
        let _ = cctrace_lab::child::send_signal(self.child.id(), cctrace_lab::child::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                bail!("cctrace did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let summary = self.summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        summary.ok_or_else(|| anyhow!("cctrace printed no summary: {}", self.stderr()))
    }
}

impl Drop for Cctrace {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
