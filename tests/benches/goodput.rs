//! CUBIC vs BBR goodput on the same emulated lossy WAN path, in one run, with the Mathis
//! prediction for the loss the flows actually saw. A benchmark, not a test: it prints numbers.
//! The default path is the story's (and `cctrace demo`'s): 30 ms RTT, 0.1 % random loss,
//! 200 Mbit/s.
//!
//! `cargo xtask bench` (or `cargo bench -p cctrace-tests --bench goodput -- [--secs N] [--loss-pct P]`).

use std::time::Duration;

use anyhow::{Context, Result};
use cctrace_lab::{EmulatedPath, EmulatedPathSpec, PathSpec, SendMode, Sender, SenderOptions, Sink, SinkOptions};

const PORT: u16 = 5201;

struct Run {
    cc: &'static str,
    goodput_bps: f64,
    retrans: u32,
    bytes_acked: u64,
}

fn bulk(path: &EmulatedPath, cc: &'static str, secs: u64) -> Result<Run> {
    let sender = Sender::start(
        path.sender(),
        path.receiver_addr(),
        PORT,
        SenderOptions::new(cc, SendMode::Bulk, Duration::from_secs(secs)),
    )?;
    let r = sender.wait()?;
    Ok(Run { cc, goodput_bps: r.goodput_bps, retrans: r.total_retrans, bytes_acked: r.bytes_acked })
}

fn mathis_bps(mss: f64, rtt_s: f64, p: f64) -> f64 {
    mss * 8.0 / rtt_s * 1.22 / p.sqrt()
}

fn main() -> Result<()> {
    // `cargo bench` passes --bench; accept and ignore unknown flags.
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let secs = arg("--secs").and_then(|v| v.parse().ok()).unwrap_or(20u64);
    let loss = arg("--loss-pct").and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.1) / 100.0;
    if let Err(e) = cctrace_lab::check_privileges() {
        println!("goodput benchmark skipped: {e}");
        return Ok(());
    }
    let (rtt_ms, rate_mbps) = (30.0, 200.0);
    let rate = (rate_mbps * 1e6) as u64;
    let queue = (rate as f64 / 8.0 * rtt_ms / 1000.0 / 4.0) as usize;
    let one_way = Duration::from_secs_f64(rtt_ms / 2000.0);
    let mut spec = EmulatedPathSpec::new(PathSpec::delay(one_way).with_loss(loss).with_rate(rate, queue));
    spec.reverse = PathSpec::delay(one_way);
    let path = EmulatedPath::create(spec).context("building the emulated path")?;
    let _sink = Sink::start(path.receiver(), path.receiver_addr(), PORT, SinkOptions::default())?;

    println!(
        "path: {rtt_ms} ms RTT, {}% random loss, {rate_mbps} Mbit/s bottleneck; {secs} s bulk per algorithm",
        loss * 100.0
    );
    let cubic = bulk(&path, "cubic", secs)?;
    let bbr = bulk(&path, "bbr", secs)?;
    let mss = 1448.0;
    for r in [&cubic, &bbr] {
        let segs = r.bytes_acked as f64 / mss;
        let p = if segs > 0.0 { f64::from(r.retrans) / segs } else { 0.0 };
        println!(
            "{:>5}: goodput {:>7.1} Mbit/s, retransmitted {:.3}% of segments, Mathis bound at that loss {:>6.1} Mbit/s",
            r.cc,
            r.goodput_bps / 1e6,
            p * 100.0,
            if p > 0.0 { mathis_bps(mss, rtt_ms / 1000.0, p) / 1e6 } else { f64::INFINITY }
        );
    }
    println!(
        "ratio bbr/cubic: {:.1}x; Mathis bound at the configured {}% loss: {:.1} Mbit/s",
        bbr.goodput_bps / cubic.goodput_bps.max(1.0),
        loss * 100.0,
        mathis_bps(mss, rtt_ms / 1000.0, loss) / 1e6
    );
    Ok(())
}
