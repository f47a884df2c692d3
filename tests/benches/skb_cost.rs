//! What the UDP accounting programs cost per run (per socket call where the kernel has
//! `sock:sock_send_length`, else the `cgroup_skb` pair per packet), from the kernel's own BPF
//! statistics (held on with BPF_ENABLE_STATS while it runs: run time and run
//! count per program), against a baseline measured in the same run: the CPU time the sending process
//! itself spent (iperf3's own report for UDP, the kernel's per-process counters for TCP).
//! First a TCP bulk flow without UDP: how often the UDP programs ran on it (the receive hook is
//! attached only while UDP is received in earnest). A benchmark: it prints numbers and writes
//! the figures page's UDP section.
//!
//! `cargo xtask bench` (or `cargo bench -p cctrace-tests --bench skb_cost -- [--secs N]`).

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use cctrace_lab::figures::{number, Row, Section};
use cctrace_lab::{EmulatedPath, EmulatedPathSpec, PathSpec, SendMode, Sender, SenderOptions, Sink, SinkOptions};
use cctrace_tests::{bpf_held_by, BpfStats, Tracer};
use serde_json::Value;

/// (run_time_ns, run_cnt) of the programs named `name` that process `pid` loaded.
fn prog_stats(pid: u32, name: &str) -> Result<(u64, u64)> {
    let held = bpf_held_by(pid)?.programs;
    let out = Command::new("bpftool").args(["-j", "prog", "show"]).output().context("bpftool prog show")?;
    let progs: Value = serde_json::from_slice(&out.stdout)?;
    let mut total = (0, 0);
    for p in progs.as_array().into_iter().flatten() {
        let ours = p["id"].as_u64().and_then(|i| u32::try_from(i).ok()).is_some_and(|i| held.contains(&i));
        if ours && p["name"] == name {
            total.0 += p["run_time_ns"].as_u64().unwrap_or(0);
            total.1 += p["run_cnt"].as_u64().unwrap_or(0);
        }
    }
    Ok(total)
}

/// The UDP programs cctrace attached (send side, receive side) and what one run is.
fn udp_programs(pid: u32) -> Result<([&'static str; 2], &'static str)> {
    let held = bpf_held_by(pid)?.programs;
    let out = Command::new("bpftool").args(["-j", "prog", "show"]).output().context("bpftool prog show")?;
    let progs: Value = serde_json::from_slice(&out.stdout)?;
    let per_call = progs.as_array().into_iter().flatten().any(|p| {
        p["name"] == "cct_udp_recv"
            && p["id"].as_u64().and_then(|i| u32::try_from(i).ok()).is_some_and(|i| held.contains(&i))
    });
    Ok(if per_call {
        (["cct_send_call", "cct_udp_recv"], "socket call")
    } else {
        (["cct_udp_egress", "cct_udp_ingress"], "packet")
    })
}

fn delta(before: (u64, u64), after: (u64, u64)) -> (u64, u64) {
    (after.0.saturating_sub(before.0), after.1.saturating_sub(before.1))
}

fn per_run(d: (u64, u64)) -> f64 {
    d.0 as f64 / d.1.max(1) as f64
}

/// CPU time (user + system) of process `pid` so far, ns.
fn cpu_ns(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat.rsplit_once(')').context("stat")?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5); after the command they are 12th and 13th.
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    let hz = clock_ticks_per_sec();
    Ok(ticks * 1_000_000_000 / hz)
}

fn clock_ticks_per_sec() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let secs: u64 = args.iter().position(|a| a == "--secs").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(5);
    let _lock = cctrace_lab::serial::serial()?;
    let _stats = BpfStats::enable()?;
    let mut spec = EmulatedPathSpec::new(PathSpec::delay(Duration::from_millis(5)).with_rate(400_000_000, 1_000_000));
    spec.reverse = PathSpec::delay(Duration::from_millis(5));
    let path = EmulatedPath::create(spec)?;
    let tracer = Tracer::start(&[])?;
    let pid = tracer.pid();
    let ([send_prog, recv_prog], unit) = udp_programs(pid)?;
    println!("UDP accounting: {send_prog} and {recv_prog}, one run per {unit}");
    let mut section = Section::new("udp", "UDP accounting").about(&format!(
        "`cargo bench -p cctrace-tests --bench skb_cost`: the UDP programs' in-kernel time a run from the \
         kernel's run-time statistics (on for this run), over an emulated 10 ms, 400 Mbit/s path: iperf3 at \
         100 Mbit/s of 1400-byte datagrams for {secs} s against the sending iperf3's own CPU time; then a TCP bulk \
         flow for {secs} s before any UDP, and what the UDP programs ran on it. Here UDP is counted {}.",
        if unit == "packet" { "per packet (cgroup_skb, kernels before 6.3)" } else { "per socket call" }
    ));

    // TCP first, on a host without UDP: a bulk flow, whose packets (or calls) the programs only
    // tell apart from UDP's. Start-up's discovery window for UDP receivers is over by then.
    std::thread::sleep(Duration::from_secs(2));
    let _sink = Sink::start(path.receiver(), path.receiver_addr(), cctrace_lab::SINK_PORT, SinkOptions::default())?;
    let (send0, recv0) = (prog_stats(pid, send_prog)?, prog_stats(pid, recv_prog)?);
    let me = std::process::id();
    let cpu0 = cpu_ns(me)?;
    let sender = Sender::start(
        path.sender(),
        path.receiver_addr(),
        cctrace_lab::SINK_PORT,
        SenderOptions::new("bbr", SendMode::Bulk, Duration::from_secs(secs)),
    )?;
    let report = sender.wait()?;
    let cpu = cpu_ns(me)?.saturating_sub(cpu0);
    let (tcp_send, tcp_recv) = (delta(send0, prog_stats(pid, send_prog)?), delta(recv0, prog_stats(pid, recv_prog)?));
    println!(
        "TCP bulk {:.0} Mbit/s: {send_prog} {:.0} ns per run ({} runs), {recv_prog} {} runs; {:.2}% of the sending process's CPU time ({:.0} ms)",
        report.goodput_bps / 1e6,
        per_run(tcp_send),
        tcp_send.1,
        tcp_recv.1,
        (tcp_send.0 + tcp_recv.0) as f64 / cpu.max(1) as f64 * 100.0,
        cpu as f64 / 1e6
    );
    section.row(Row::new(
        format!("a TCP bulk flow without UDP ({:.0} Mbit/s): the UDP programs' runs", report.goodput_bps / 1e6),
        format!(
            "{recv_prog} {} runs; {send_prog} (the TCP owner hook) {} runs of {:.0} ns; {:.2} % of the sending process's CPU time",
            number(tcp_recv.1 as f64),
            number(tcp_send.1 as f64),
            per_run(tcp_send),
            (tcp_send.0 + tcp_recv.0) as f64 / cpu.max(1) as f64 * 100.0
        ),
    ));

    // UDP: iperf3 at 100 Mbit/s of 1400-byte datagrams.
    let mut server = path
        .receiver()
        .command("iperf3")
        .args(["-s", "-1", "-p", "5302"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("iperf3 -s")?;
    std::thread::sleep(Duration::from_millis(300));
    let (egress0, ingress0) = (prog_stats(pid, send_prog)?, prog_stats(pid, recv_prog)?);
    let out = path
        .sender()
        .command("iperf3")
        .args(["-u", "-c", &path.receiver_addr().to_string(), "-p", "5302", "-b", "100M", "-l", "1400"])
        .args(["-t", &secs.to_string(), "-J"])
        .output()
        .context("iperf3 -u")?;
    let _ = server.wait();
    if !out.status.success() {
        bail!("iperf3 failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let egress = delta(egress0, prog_stats(pid, send_prog)?);
    let ingress = delta(ingress0, prog_stats(pid, recv_prog)?);
    let report: Value = serde_json::from_slice(&out.stdout)?;
    let packets = report["end"]["sum"]["packets"].as_u64().unwrap_or(0);
    let cpu_pct = report["end"]["cpu_utilization_percent"]["host_total"].as_f64().unwrap_or(0.0);
    let sender_cpu_ns = cpu_pct / 100.0 * secs as f64 * 1e9;
    println!(
        "UDP {packets} datagrams: sending {:.0} ns per {unit} ({} runs), receiving {:.0} ns per {unit} ({} runs)",
        per_run(egress),
        egress.1,
        per_run(ingress),
        ingress.1
    );
    // The programs see every packet (or socket call) on the host: other traffic during the run
    // shows up as runs beyond this run's datagrams, and its cost in the totals below.
    let expected = packets + packets / 10 + 100;
    let note = if egress.1 > expected || ingress.1 > expected {
        "; other traffic shared the programs, and is in these totals"
    } else {
        ""
    };
    let share = (egress.0 + ingress.0) as f64 / sender_cpu_ns.max(1.0) * 100.0;
    println!(
        "UDP: the programs' time is {share:.2}% of the iperf3 sender's own CPU time ({:.0} ms){note}",
        sender_cpu_ns / 1e6
    );
    section.row(Row::new(
        format!("UDP at 100 Mbit/s ({} datagrams): a send, a receive", number(packets as f64)),
        format!(
            "{:.0} ns per {unit} ({} runs), {:.0} ns ({} runs); {share:.1} % of the sending iperf3's own CPU time{note}",
            per_run(egress),
            number(egress.1 as f64),
            per_run(ingress),
            number(ingress.1 as f64)
        ),
    ));

    let (code, _) = tracer.stop()?;
    if code != 0 {
        bail!("cctrace exited with {code}");
    }
    section.write().map(drop)
}
