//! Harness for cctrace's integration tests: run the real binary, read its JSON Lines, and read
//! the kernel's own view (`ss -tni`, `nstat`) inside lab network namespaces.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

pub mod faithful;
pub mod player;
pub mod runtimes;
pub mod serve;
pub mod services;
pub mod tmux;

/// Tests that load eBPF programs or build labs run one at a time, across processes too: they
/// count programs with bpftool, change host-wide sysctls and measure timing-sensitive things on
/// a 2-core machine (see `cctrace_lab::serial`).
pub fn serial() -> cctrace_lab::serial::Serial {
    cctrace_lab::serial::serial().expect("the machine-wide test lock")
}

/// Why a test cannot run here, if it cannot. CI runs as root on a BTF kernel, so there every
/// test runs; elsewhere the skip says exactly what is missing.
pub fn skip_reason() -> Option<String> {
    if let Some(why) = cctrace_lab::skip::missing_root_or_btf() {
        return Some(why);
    }
    if !cctrace_bin().exists() {
        return Some(format!("{} is not built (cargo build -p tracer)", cctrace_bin().display()));
    }
    None
}

/// Skip (return early) with a printed reason unless the environment can run the test.
/// In CI (`CI=true`) a missing prerequisite is a failure, not a skip.
#[macro_export]
macro_rules! require_kernel {
    () => {
        if let Some(why) = $crate::skip_reason() {
            cctrace_lab::skip::skip(&why);
            return Ok(());
        }
    };
}

/// `cctrace ARGS` run to its end with no input: exit code, stdout, stderr.
pub fn run_cctrace(args: &[&str]) -> Result<(i32, String, String)> {
    let out = Command::new(cctrace_bin())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output_within(CHILD_DEADLINE)
        .context("running cctrace")?;
    Ok(ran(&out))
}

/// [`run_cctrace`] with the kernel's BTF hidden from it, as [`Tracer::start_without_btf`] does.
pub fn run_cctrace_without_btf(args: &[&str]) -> Result<(i32, String, String)> {
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("mount -t tmpfs cctrace-no-btf {HIDDEN_BTF} && exec \"$0\" \"$@\""))
        .arg(cctrace_bin())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output_within(CHILD_DEADLINE)
        .context("running cctrace without BTF")?;
    Ok(ran(&out))
}

fn ran(out: &std::process::Output) -> Ran {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What [`run_cctrace`] returns: exit code, stdout, stderr.
pub type Ran = (i32, String, String);

/// How a test runs cctrace: with the kernel's BTF, or with it hidden (the mode without BTF).
#[derive(Clone, Copy)]
pub struct Mode {
    pub start: fn(&[&str]) -> Result<Tracer>,
    pub run: fn(&[&str]) -> Result<Ran>,
}

pub const WITH_BTF: Mode = Mode { start: Tracer::start, run: run_cctrace };
pub const WITHOUT_BTF: Mode = Mode { start: Tracer::start_without_btf, run: run_cctrace_without_btf };

/// The `cctrace` binary next to this test binary (target/<profile>/cctrace), or $CCTRACE_BIN.
pub fn cctrace_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CCTRACE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> -> target/<profile>/cctrace
    exe.parent().and_then(|d| d.parent()).map(|d| d.join("cctrace")).unwrap_or_else(|| PathBuf::from("cctrace"))
}

/// Where the kernel's BTF is; [`Tracer::start_without_btf`] hides it.
pub const HIDDEN_BTF: &str = "/sys/kernel/btf";

/// A cctrace process started by [`spawn_until_tracing`]; killed and reaped on drop.
pub struct Spawned {
    child: Child,
    /// Everything it printed on stderr so far.
    stderr: Arc<Mutex<String>>,
    /// The threads reading its stdout and stderr (they end when it exits).
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Spawned {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// SIGTERM, and its exit status once it has exited (killed, and an error, if that takes
    /// longer than `within`) and its output has all been read.
    pub fn stop(&mut self, within: Duration) -> Result<std::process::ExitStatus> {
        let _ = cctrace_lab::child::send_signal(self.child.id(), cctrace_lab::child::Signal::TERM);
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                bail!("cctrace did not exit within {within:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Ok(status)
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `cmd` (a cctrace command) with its output piped here, hand each line of its stdout to
/// `on_line` on a thread of its own, keep its stderr, and return once it says it is tracing
/// (`tracing TCP` on stderr, printed when its programs are attached). An exit before that, or
/// no word within `ready_within`, is an error with what it printed.
pub fn spawn_until_tracing(
    mut cmd: Command,
    mut on_line: impl FnMut(String) + Send + 'static,
    ready_within: Duration,
) -> Result<Spawned> {
    let shown = format!("{cmd:?}");
    let mut child =
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().with_context(|| format!("starting {shown}"))?;
    let out = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let err = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let r1 = std::thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).for_each(&mut on_line));
    let stderr = Arc::new(Mutex::new(String::new()));
    let e = stderr.clone();
    let r2 = std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let mut s = e.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            s.push_str(&line);
            s.push('\n');
        }
    });
    let mut spawned = Spawned { child, stderr, readers: vec![r1, r2] };
    let deadline = Instant::now() + ready_within;
    while !spawned.stderr().contains("tracing TCP") {
        if let Some(status) = spawned.child.try_wait()? {
            bail!("cctrace exited at start-up ({status}): {}", spawned.stderr());
        }
        if Instant::now() > deadline {
            bail!("cctrace did not report ready within {ready_within:?}: {}", spawned.stderr());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(spawned)
}

/// A running `cctrace --json --events`, collecting its output lines.
pub struct Tracer {
    run: Spawned,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl Tracer {
    /// Start cctrace with `args` (after `--json --events`) and wait until its programs are
    /// attached (it says so on stderr).
    pub fn start(args: &[&str]) -> Result<Self> {
        Self::start_env(args, &[])
    }

    /// [`Tracer::start`] with `env` added to its environment (`RUST_LOG`, say).
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Result<Self> {
        let mut cmd = Command::new(cctrace_bin());
        cmd.args(["--json", "--events"]).args(args).envs(env.iter().copied());
        Self::start_command(cmd)
    }

    /// [`Tracer::start`] with the kernel's BTF hidden from cctrace, as on a kernel built
    /// without it: in a mount namespace of its own (private: nothing propagates to the host),
    /// an empty tmpfs lies over `/sys/kernel/btf`. The shell then becomes cctrace (`exec`), so
    /// the process stopped and inspected is cctrace itself.
    pub fn start_without_btf(args: &[&str]) -> Result<Self> {
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!("mount -t tmpfs cctrace-no-btf {HIDDEN_BTF} && exec \"$0\" \"$@\""))
            .arg(cctrace_bin())
            .args(["--json", "--events"])
            .args(args);
        Self::start_command(cmd)
    }

    /// [`Tracer::start`] for a command that runs cctrace with `--json` some other way: its
    /// container image under an engine (`docker run ... cctrace:VERSION --json`), whose client
    /// passes SIGTERM on to it.
    pub fn start_command(cmd: Command) -> Result<Self> {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        let on_line = move |line: String| {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                l.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(v);
            }
        };
        Ok(Self { run: spawn_until_tracing(cmd, on_line, Duration::from_secs(30))?, lines })
    }

    pub fn stderr(&self) -> String {
        self.run.stderr()
    }

    pub fn pid(&self) -> u32 {
        self.run.pid()
    }

    /// Everything printed so far.
    pub fn lines(&self) -> Vec<Value> {
        self.lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Raw kernel samples (`"type":"sample"`) matching `pred`.
    pub fn samples(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.lines().into_iter().filter(|v| v["type"] == "sample" && pred(v)).collect()
    }

    /// How many lines printed so far match `pred`, counted in place: a run that printed
    /// tens of thousands of lines is not copied on every poll.
    pub fn count(&self, pred: impl Fn(&Value) -> bool) -> usize {
        self.lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().filter(|v| pred(v)).count()
    }

    /// Poll until `pred` holds over the collected lines, or fail after `timeout`.
    pub fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&[Value]) -> bool) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&self.lines()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("timed out after {timeout:?} waiting for {what}; stderr: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until a flow line of the socket with local port `port` in `netns` says it closed.
    pub fn wait_closed(&self, netns: u64, port: u16, timeout: Duration) -> Result<()> {
        self.wait_for(&format!("the close of :{port} in netns {netns}"), timeout, |lines| {
            lines.iter().any(|v| {
                v["type"] == "flow" && v["netns"].as_u64() == Some(netns) && v["sport"] == port && v["closed"] == true
            })
        })
    }

    /// SIGTERM, wait for exit, return the exit status code and all output.
    pub fn stop(mut self) -> Result<(i32, Vec<Value>)> {
        let status = self.run.stop(Duration::from_secs(15))?;
        let lines = self.lines();
        keep_lines(&lines);
        records_agree(&lines)?;
        Ok((status.code().unwrap_or(-1), lines))
    }
}

/// The words a flagged verdict says for each class a flag may name.
const FLAGGED_WORDS: [(&str, &str); 3] = [
    ("cwnd", "is held back by loss-based congestion control"),
    ("policer", "is policed at"),
    ("sndbuf", "send-buffer-limited"),
];

/// The words an unflagged verdict opens with for each class (`limited_by`'s description).
const CLASS_WORDS: [(&str, &str); 10] = [
    ("unknown", "not enough data"),
    ("idle", "idle:"),
    ("receiving", "receiving:"),
    ("application", "application-limited"),
    ("rwnd", "receive-window-limited"),
    ("sndbuf", "send-buffer-limited"),
    ("cwnd", "congestion-window-limited"),
    ("pacing", "pacing/bandwidth-limited"),
    ("path", "network-path-limited"),
    ("policer", "policed:"),
];

/// Whether one TCP flow record's `limited_by`, `flagged` and words tell one story: a flagged
/// record is of a class a flag may name and says so; any other says its own class and none of
/// a flag's words. (UDP records carry no flag.)
pub fn record_agrees(v: &Value) -> Result<()> {
    if v["type"] != "flow" || v["proto"] == "udp" {
        return Ok(());
    }
    let class = v["limited_by"].as_str().unwrap_or_default();
    let text = v["verdict"].as_str().unwrap_or_default();
    let words = |table: &[(&str, &'static str)]| table.iter().find(|(c, _)| *c == class).map(|(_, w)| *w);
    if v["flagged"] == true {
        let Some(flagged) = words(&FLAGGED_WORDS) else { bail!("flagged as {class}, which no flag names: {v}") };
        anyhow::ensure!(text.contains(flagged), "flagged {class} without its words ({flagged:?}): {v}");
    } else {
        if let Some((_, w)) = FLAGGED_WORDS[..2].iter().find(|(_, w)| text.contains(w)) {
            bail!("not flagged, yet its words say {w:?}: {v}");
        }
        let own = words(&CLASS_WORDS).with_context(|| format!("an unknown class {class}: {v}"))?;
        anyhow::ensure!(text.contains(own), "{class} without its words ({own:?}): {v}");
    }
    receiving_end_agrees(v, class, text)
}

/// A receiving flow judged from its receiving end (`evidence.remote_sender`) tells the same
/// story: where its sender is not on this host the record is that judgment and says it is the
/// receiving end's; where it is, the record stays `receiving` and names the receiving end's class
/// and flag.
fn receiving_end_agrees(v: &Value, class: &str, text: &str) -> Result<()> {
    let remote = &v["evidence"]["remote_sender"];
    if !remote.is_object() {
        return Ok(());
    }
    let (own, flagged) = (remote["limited_by"].as_str().unwrap_or_default(), remote["flagged"] == true);
    if remote["sender_on_host"].is_null() {
        anyhow::ensure!(
            own == class && flagged == (v["flagged"] == true),
            "the receiving end's evidence says {own} (flagged {flagged}), the record {class}: {v}"
        );
        anyhow::ensure!(
            text.to_lowercase().contains("from this receiving end"),
            "a receiving end's verdict not saying so: {v}"
        );
    } else {
        let said = format!("from this end alone: {own}{}", if flagged { ", flagged" } else { "" });
        anyhow::ensure!(class == "receiving" && text.contains(&said), "sender on this host, yet not {said:?}: {v}");
    }
    Ok(())
}

/// Every flow record of a run agrees with itself (see [`record_agrees`]): checked on every
/// tracer a test stops, so every diagnosis test checks every record it was given.
pub fn records_agree(lines: &[Value]) -> Result<()> {
    lines.iter().try_for_each(record_agrees)
}

/// With `CCTRACE_TEST_KEEP=DIR`, every stopped tracer's lines are kept in DIR, one JSON Lines
/// file per run named after the test: what a judgment was made from, to read after a failure.
pub const KEEP_LINES_ENV: &str = "CCTRACE_TEST_KEEP";

fn keep_lines(lines: &[Value]) {
    let Some(dir) = std::env::var_os(KEEP_LINES_ENV) else { return };
    let test = std::thread::current().name().unwrap_or("test").replace("::", "-");
    let path = PathBuf::from(dir).join(format!("{test}-{}.jsonl", monotonic_ns()));
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    match std::fs::write(&path, text) {
        Ok(()) => eprintln!("kept the tracer's lines in {}", path.display()),
        Err(e) => eprintln!("could not keep the tracer's lines in {}: {e}", path.display()),
    }
}

/// Removes a file on drop: a state file a failed test may have left (a passing test leaves
/// none), a test's log or recording.
pub struct RemoveOnDrop(pub PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The flow lines of the socket with local port `port` in network namespace `netns`.
pub fn flow_lines(lines: &[Value], netns: u64, port: u16) -> Vec<Value> {
    lines
        .iter()
        .filter(|v| v["type"] == "flow" && v["netns"].as_u64() == Some(netns) && v["sport"] == port)
        .cloned()
        .collect()
}

/// The bottleneck rate of [`demo_wan`].
pub const DEMO_WAN_RATE_BPS: f64 = 200e6;

/// The demo's path: 30 ms RTT, `loss` on the data direction, a 200 Mbit/s bottleneck with a
/// quarter-BDP queue.
pub fn demo_wan(loss: f64) -> Result<cctrace_lab::EmulatedPath> {
    use cctrace_lab::{EmulatedPath, EmulatedPathSpec, PathSpec};
    let rate = DEMO_WAN_RATE_BPS as u64;
    let queue = (rate / 8 * 30 / 1000 / 4) as usize;
    let mut spec =
        EmulatedPathSpec::new(PathSpec::delay(Duration::from_millis(15)).with_loss(loss).with_rate(rate, queue));
    spec.reverse = PathSpec::delay(Duration::from_millis(15));
    EmulatedPath::create(spec)
}

/// The tunnel labs' underlay bottleneck: what wireguard-go carries on a 2-core machine with
/// room to spare (at this rate each end took about a quarter of a core, measured).
pub const TUNNEL_WAN_RATE_BPS: f64 = 40e6;
/// Random loss on the underlay's data direction.
pub const TUNNEL_WAN_LOSS: f64 = 0.02;

/// wireguard-go on both ends of a 30 ms path with `loss` on the data direction (the underlay:
/// the tunnel's UDP, never the TCP inside it) and a [`TUNNEL_WAN_RATE_BPS`] bottleneck with a
/// quarter-BDP queue; `lans` behind the server end.
pub fn tunnel_wan(loss: f64, lans: Vec<cctrace_lab::LanSpec>) -> Result<cctrace_lab::WireGuardLab> {
    use cctrace_lab::{EmulatedPathSpec, PathSpec, WireGuardLab, WireGuardSpec};
    let rate = TUNNEL_WAN_RATE_BPS as u64;
    let queue = (rate / 8 * 30 / 1000 / 4) as usize;
    let mut underlay =
        EmulatedPathSpec::new(PathSpec::delay(Duration::from_millis(15)).with_loss(loss).with_rate(rate, queue));
    underlay.reverse = PathSpec::delay(Duration::from_millis(15));
    WireGuardLab::create(WireGuardSpec { lans, ..WireGuardSpec::new(underlay) })
}

/// A bulk transfer of `duration` from namespace `from` to a sink at `to` in `to_ns`, with
/// congestion control `cc` set on the socket: the sender's report (the kernel's view at close).
pub fn bulk_transfer(
    from: &cctrace_lab::Netns,
    to_ns: &cctrace_lab::Netns,
    to: impl Into<std::net::IpAddr>,
    cc: &str,
    duration: Duration,
) -> Result<cctrace_lab::SenderReport> {
    use cctrace_lab::{SendMode, Sender, SenderOptions, Sink, SinkOptions};
    const PORT: u16 = cctrace_lab::SINK_PORT;
    let to = to.into();
    let _sink = Sink::start(to_ns, to, PORT, SinkOptions::default())?;
    let sender = Sender::start(from, to, PORT, SenderOptions::new(cc, SendMode::Bulk, duration))?;
    let report = sender.wait()?;
    anyhow::ensure!(report.congestion == cc, "the socket ran {} instead of {cc}", report.congestion);
    Ok(report)
}

/// Where the host lists the congestion controls a non-initial namespace may make its default.
pub const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// The host's allowed list with one algorithm added for as long as this lives, put back exactly
/// on drop. This machine allows `reno bbr` (a namespace may not make cubic its default here),
/// most distributions `reno cubic`: a test that needs CUBIC as a namespace's default adds it.
pub struct AllowedCc {
    before: Option<String>,
}

impl AllowedCc {
    pub fn add(cc: &str) -> Result<Self> {
        let before = std::fs::read_to_string(ALLOWED_CC)?.trim().to_string();
        if before.split_whitespace().any(|a| a == cc) {
            return Ok(Self { before: None });
        }
        std::fs::write(ALLOWED_CC, format!("{before} {cc}")).with_context(|| format!("adding {cc} to {ALLOWED_CC}"))?;
        Ok(Self { before: Some(before) })
    }
}

impl Drop for AllowedCc {
    fn drop(&mut self) {
        if let Some(before) = &self.before {
            let _ = std::fs::write(ALLOWED_CC, before);
        }
    }
}

/// Print a flow's time from its start to its first flag in the form `cargo xtask verdicts`
/// gathers (`time to flag: FLOW = S s`).
pub fn print_time_to_flag(flow: &str, secs: f64) {
    println!("time to flag: {flow} = {secs:.1} s");
}

/// Seconds from the first of `lines` (a flow's records) to the first flagged one.
pub fn seconds_to_flag(lines: &[Value]) -> Option<f64> {
    let t0 = lines.first()?["ts_ns"].as_u64()?;
    let flagged = lines.iter().find(|v| v["flagged"] == true)?["ts_ns"].as_u64()?;
    Some(flagged.saturating_sub(t0) as f64 / 1e9)
}

/// CLOCK_MONOTONIC now, in the kernel samples' time base.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One socket as `ss -tni` prints it.
#[derive(Clone, Debug, Default)]
pub struct SsSocket {
    pub state: String,
    pub local: String,
    pub peer: String,
    pub fields: HashMap<String, String>,
}

impl SsSocket {
    pub fn local_port(&self) -> Option<u16> {
        self.local.rsplit(':').next()?.parse().ok()
    }

    pub fn num(&self, key: &str) -> Option<f64> {
        self.fields.get(key)?.trim_end_matches("ms").parse().ok()
    }

    /// `rtt:30.1/0.5` -> (30.1, 0.5)
    pub fn rtt(&self) -> Option<(f64, f64)> {
        let (a, b) = self.fields.get("rtt")?.split_once('/')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    }
}

/// Parse `ss -tniH` output: a socket line followed by an indented info line.
pub fn parse_ss(text: &str) -> Vec<SsSocket> {
    let mut out: Vec<SsSocket> = Vec::new();
    for line in text.lines() {
        if line.starts_with(char::is_whitespace) {
            if let Some(sock) = out.last_mut() {
                for word in line.split_whitespace() {
                    if let Some((k, v)) = word.split_once(':') {
                        sock.fields.insert(k.to_string(), v.to_string());
                    } else {
                        sock.fields.insert(word.to_string(), String::new());
                    }
                }
            }
        } else {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() >= 5 {
                out.push(SsSocket {
                    state: cols[0].to_string(),
                    local: cols[3].to_string(),
                    peer: cols[4].to_string(),
                    fields: HashMap::new(),
                });
            }
        }
    }
    out
}

/// `ss -tni` inside a namespace.
pub fn ss_in(netns: &str) -> Result<Vec<SsSocket>> {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "ss", "-tniH"])
        .output_within(CHILD_DEADLINE)
        .context("running ss")?;
    if !out.status.success() {
        bail!("ss failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(parse_ss(&String::from_utf8_lossy(&out.stdout)))
}

/// A namespace-wide SNMP counter via `nstat -az` (absolute values, no history file).
pub fn nstat_in(netns: &str, counter: &str) -> Result<u64> {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "nstat", "-azs", counter])
        .env("NSTAT_HISTORY", "/dev/null")
        .output_within(CHILD_DEADLINE)
        .context("running nstat")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(counter)).then(|| w.next().and_then(|v| v.parse().ok())).flatten()
        })
        .ok_or_else(|| anyhow!("nstat printed no {counter}: {text}"))
}

/// Names of loaded BPF programs (bpftool prog show).
pub fn loaded_bpf_programs() -> Result<Vec<String>> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output_within(CHILD_DEADLINE)
        .context("running bpftool")?;
    let v: Value = serde_json::from_slice(&out.stdout).context("parsing bpftool output")?;
    Ok(v.as_array()
        .map(|a| a.iter().filter_map(|p| p["name"].as_str().map(String::from)).collect())
        .unwrap_or_default())
}

/// IDs of the BPF programs and links process `pid` holds open, read from its fd table: what
/// that process loaded and attached, whatever other processes on the machine do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeldBpf {
    pub programs: Vec<u32>,
    pub links: Vec<u32>,
}

pub fn bpf_held_by(pid: u32) -> Result<HeldBpf> {
    let mut held = HeldBpf::default();
    let dir = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).with_context(|| format!("reading fds of {pid}"))?;
    for entry in dir.flatten() {
        // An fd can close between listing and reading: skip it.
        let Ok(info) = std::fs::read_to_string(entry.path()) else { continue };
        let field =
            |name: &str| info.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<u32>().ok());
        // A link fd also names its program: it counts as the link only.
        if let Some(link) = field("link_id:") {
            held.links.push(link);
        } else if let Some(prog) = field("prog_id:") {
            held.programs.push(prog);
        }
    }
    held.programs.sort_unstable();
    held.links.sort_unstable();
    Ok(held)
}

/// IDs of every loaded BPF program and link (bpftool prog/link show).
pub fn bpf_ids() -> Result<HeldBpf> {
    let ids = |what: &str| -> Result<Vec<u32>> {
        let out = Command::new("bpftool")
            .args(["-j", what, "show"])
            .output_within(CHILD_DEADLINE)
            .context("running bpftool")?;
        let v: Value = serde_json::from_slice(&out.stdout).context("parsing bpftool output")?;
        Ok(v.as_array()
            .map(|a| a.iter().filter_map(|p| p["id"].as_u64().and_then(|i| u32::try_from(i).ok())).collect())
            .unwrap_or_default())
    };
    Ok(HeldBpf { programs: ids("prog")?, links: ids("link")? })
}

/// Number of BPF links (bpftool link show).
pub fn bpf_link_count() -> Result<usize> {
    let out = Command::new("bpftool")
        .args(["-j", "link", "show"])
        .output_within(CHILD_DEADLINE)
        .context("running bpftool")?;
    let v: Value = serde_json::from_slice(&out.stdout).context("parsing bpftool output")?;
    Ok(v.as_array().map(Vec::len).unwrap_or(0))
}

/// The kernel measures BPF programs' run time and count while this is held (BPF_ENABLE_STATS:
/// scoped to the fd, unlike the kernel.bpf_stats_enabled sysctl, so nothing stays changed).
pub struct BpfStats {
    _held: std::os::fd::OwnedFd,
}

impl BpfStats {
    pub fn enable() -> Result<BpfStats> {
        use std::os::fd::FromRawFd;
        const BPF_ENABLE_STATS: libc::c_long = 32;
        // union bpf_attr { struct { __u32 type; } enable_stats; }: BPF_STATS_RUN_TIME is 0.
        let attr = [0u32; 2];
        // SAFETY: bpf(2) reads `size_of_val(&attr)` bytes from a valid, initialised buffer.
        let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_ENABLE_STATS, attr.as_ptr(), std::mem::size_of_val(&attr)) };
        anyhow::ensure!(fd >= 0, "BPF_ENABLE_STATS: {}", std::io::Error::last_os_error());
        // SAFETY: the kernel just returned this fd to us; nothing else owns it.
        Ok(BpfStats { _held: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_whose_class_flag_and_words_disagree_is_caught() {
        let record = |class: &str, flagged: bool, verdict: &str| serde_json::json!({"type": "flow", "proto": "tcp", "limited_by": class, "flagged": flagged, "verdict": verdict});
        let held = "198.18.0.1:1 -> 198.18.0.2:2 is held back by loss-based congestion control: cubic lost ...";
        assert!(record_agrees(&record("cwnd", true, held)).is_ok());
        // The record: flagged, the loss-based words, and `path`.
        assert!(record_agrees(&record("path", true, held)).is_err());
        assert!(record_agrees(&record("cwnd", false, held)).is_err());
        assert!(record_agrees(&record("path", false, "network-path-limited: the flow fills ...")).is_ok());
        assert!(record_agrees(&record("cwnd", false, "network-path-limited: the flow fills ...")).is_err());
        let sndbuf = "send-buffer-limited: the local send buffer is too small (63.6 Mbit/s over 9 s) ...";
        assert!(record_agrees(&record("sndbuf", true, sndbuf)).is_ok());
        assert!(record_agrees(&serde_json::json!({"type": "flow", "proto": "udp", "limited_by": "tunnel"})).is_ok());
        let remote = |class: &str, flagged: bool, on_host: Option<u64>, verdict: &str| {
            let mut r = record(class, flagged, verdict);
            r["evidence"] = serde_json::json!({"remote_sender": {"limited_by": "cwnd", "flagged": true, "sender_on_host": on_host}});
            r
        };
        let from_here = "From this receiving end: the sender at 198.18.0.1:1 (to 198.18.0.2:2) is held back by loss-based congestion control. ...";
        assert!(record_agrees(&remote("cwnd", true, None, from_here)).is_ok());
        assert!(record_agrees(&remote("cwnd", true, None, held)).is_err());
        let here = "receiving: its sender is a socket of this host (cookie 7), judged there; from this end alone: cwnd, flagged";
        assert!(record_agrees(&remote("receiving", false, Some(7), here)).is_ok());
        assert!(record_agrees(&remote("receiving", false, Some(7), &here.replace(", flagged", ""))).is_err());
    }

    #[test]
    fn parses_ss_output() {
        let text = "ESTAB 0      0      198.18.0.1:40000 198.18.0.2:5201\n\t cubic wscale:7,7 rto:231 rtt:30.512/1.25 mss:1448 pmtu:1500 cwnd:68 ssthresh:45 bytes_acked:123 busy:1000ms\n";
        let s = parse_ss(text);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].local_port(), Some(40000));
        assert_eq!(s[0].num("cwnd"), Some(68.0));
        assert_eq!(s[0].num("busy"), Some(1000.0));
        assert_eq!(s[0].rtt(), Some((30.512, 1.25)));
        assert!(s[0].fields.contains_key("cubic"));
    }
}
