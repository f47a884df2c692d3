//! What a deep-mode twin costs: goodput of CUBIC and BBR on the same emulated path, plain and
//! on their twins (cct_cubic, cct_bbr), each traced by a cctrace (without and with --deep, so
//! the observer's own cost is on both sides), and the in-kernel time per twin callback from the
//! kernel's BPF run-time statistics. A benchmark, not a test: it prints ratios.
//!
//! `cargo xtask bench` (or `cargo bench -p cctrace-tests --bench deep -- [--secs N] [--loss-pct P]`).

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use cctrace_lab::figures::{number, Row, Section};
use cctrace_lab::{EmulatedPath, EmulatedPathSpec, PathSpec, SendMode, Sender, SenderOptions, Sink, SinkOptions};
use cctrace_tests::Tracer;
use serde_json::Value;

const PORT: u16 = cctrace_lab::SINK_PORT;
/// `BPF_ENABLE_STATS` and `BPF_STATS_RUN_TIME` (include/uapi/linux/bpf.h).
const BPF_ENABLE_STATS: libc::c_long = 32;
const BPF_STATS_RUN_TIME: u32 = 0;

/// Run-time statistics on while the returned fd is open (and off when it closes, even if this
/// process dies): the kernel.bpf_stats_enabled sysctl is left alone.
fn enable_bpf_stats() -> Result<OwnedFd> {
    let attr: [u32; 1] = [BPF_STATS_RUN_TIME];
    // SAFETY: bpf(BPF_ENABLE_STATS) reads `size` bytes of `attr` (a valid u32 array) and returns
    // a new fd or -1; nothing else is touched.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_ENABLE_STATS, attr.as_ptr(), std::mem::size_of_val(&attr)) };
    if fd < 0 {
        bail!("BPF_ENABLE_STATS: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// (program name, runs, ns) of the programs whose names start with `prefix`.
fn prog_stats(prefix: &str) -> Result<Vec<(String, u64, u64)>> {
    let out = Command::new("bpftool").args(["-j", "prog", "show"]).output().context("running bpftool")?;
    let v: Value = serde_json::from_slice(&out.stdout).context("parsing bpftool output")?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default().to_string();
            (name, p["run_cnt"].as_u64().unwrap_or(0), p["run_time_ns"].as_u64().unwrap_or(0))
        })
        .collect())
}

fn bulk(path: &EmulatedPath, cc: &str, secs: u64) -> Result<f64> {
    let sender = Sender::start(
        path.sender(),
        path.receiver_addr(),
        PORT,
        SenderOptions::new(cc, SendMode::Bulk, Duration::from_secs(secs)),
    )?;
    Ok(sender.wait()?.goodput_bps)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let secs = arg("--secs").and_then(|v| v.parse().ok()).unwrap_or(10u64);
    let loss = arg("--loss-pct").and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.1) / 100.0;
    if let Err(e) = cctrace_lab::check_privileges() {
        println!("deep-mode benchmark skipped: {e}");
        return Ok(());
    }
    let (rtt_ms, rate) = (30.0, 200_000_000u64);
    let queue = (rate as f64 / 8.0 * rtt_ms / 1000.0 / 4.0) as usize;
    let one_way = Duration::from_secs_f64(rtt_ms / 2000.0);
    let mut spec = EmulatedPathSpec::new(PathSpec::delay(one_way).with_loss(loss).with_rate(rate, queue));
    spec.reverse = PathSpec::delay(one_way);
    let _lock = cctrace_lab::serial::serial()?;
    let path = EmulatedPath::create(spec).context("building the emulated path")?;
    let _sink = Sink::start(path.receiver(), path.receiver_addr(), PORT, SinkOptions::default())?;
    let ns = path.sender().name().to_string();
    println!("path: {rtt_ms} ms RTT, {}% random loss, 200 Mbit/s; {secs} s bulk per run", loss * 100.0);

    let tracer = Tracer::start(&["--netns", &ns])?;
    let plain: Vec<(&str, f64)> = vec![("cubic", bulk(&path, "cubic", secs)?), ("bbr", bulk(&path, "bbr", secs)?)];
    tracer.stop()?;

    let stats = enable_bpf_stats()?;
    let tracer = Tracer::start(&["--deep", "--netns", &ns])?;
    // The rescan moves a new flow within a second: the rest of the run is on the twin.
    let twin: Vec<(&str, f64)> = vec![("cubic", bulk(&path, "cubic", secs)?), ("bbr", bulk(&path, "bbr", secs)?)];
    let callbacks: Vec<(String, u64, u64)> =
        ["cct_cubic", "cct_bbr"].iter().map(|p| prog_stats(p)).collect::<Result<Vec<_>>>()?.concat();
    tracer.stop()?;
    drop(stats);

    let mut section = Section::new("deep", "Deep mode: what a twin costs").about(&format!(
        "`cargo bench -p cctrace-tests --bench deep`: CUBIC and BBR on one emulated path ({rtt_ms} ms, {} % \
         random loss, 200 Mbit/s), {secs} s each, plain under cctrace and on their twins under cctrace `--deep`; \
         the in-kernel time a twin callback from the kernel's run-time statistics (on for the twin runs), which \
         includes the kernel algorithm it calls. A single CUBIC run at random loss varies by a fifth from run \
         to run.",
        loss * 100.0
    ));
    for ((cc, p), (_, t)) in plain.iter().zip(&twin) {
        println!(
            "{cc:>5}: goodput plain {:>6.1} Mbit/s, on cct_{cc} {:>6.1} Mbit/s, ratio twin/plain {:.3}",
            p / 1e6,
            t / 1e6,
            t / p.max(1.0)
        );
        section.row(Row::new(
            format!("{cc}: plain, on cct_{cc}"),
            format!("{:.1}, {:.1} Mbit/s (ratio {:.3})", p / 1e6, t / 1e6, t / p.max(1.0)),
        ));
    }
    println!("in-kernel time per twin callback (includes the kernel algorithm it calls):");
    for (name, runs, ns) in callbacks.iter().filter(|(_, runs, _)| *runs > 0) {
        println!("  {name:<16} {runs:>9} runs  {:>7.0} ns/run", *ns as f64 / *runs as f64);
        section.row(Row::new(
            format!("one run of {name}"),
            format!("{} ns ({} runs)", number((*ns as f64 / *runs as f64).round()), number(*runs as f64)),
        ));
    }
    section.write().map(drop)
}
