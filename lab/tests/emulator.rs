//! Fidelity of the userspace path emulator: delay, ordering, loss and
//! throughput measured end to end through real sockets.

mod common;

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use cctrace_lab::{
    host_timer_jitter, list_namespaces, udp_blast, udp_ping, BlastOptions, EmulatedPath, EmulatedPathSpec, PathSpec,
    PingOptions, SendMode, Sender, SenderOptions, Sink, SinkOptions, UdpCounter, UdpEcho,
};
use common::{binomial_halfwidth, lab, mbps, Z99};

const RTT: Duration = Duration::from_millis(30);
const ATTEMPTS: usize = 5;

/// Waits until `f` stops changing (the last probes are still in flight for
/// one delay after the sender returns).
fn settle<T: PartialEq + Copy>(mut f: impl FnMut() -> T) -> T {
    let mut last = f();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = f();
        if now == last {
            return now;
        }
        last = now;
    }
}

#[test]
fn rtt_is_accurate_and_packets_stay_in_order() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let path = EmulatedPath::create(EmulatedPathSpec::with_rtt(RTT))?;
    let echo = UdpEcho::start(path.receiver(), path.receiver_addr(), 0)?;

    // A shared VM can stall any thread for milliseconds (other tenants, vCPU
    // steal, other builds on the same two cores), and no emulator can be more
    // precise than the host's timers let it be. So each attempt measures,
    // concurrently, how late a plain timer sleep wakes on this host, and
    // checks the emulator against its own budget (0.5 ms at p50, 1 ms at p99
    // over the configured RTT) plus what the host imposes: each probe crosses
    // four timed wake-ups (two releases, echo, receive), so four times the
    // host's lateness at the same percentile. The bound is checked on every
    // host, quiet or loaded; there is no "could not tell" outcome.
    const BUDGET_P50: Duration = Duration::from_micros(500);
    const BUDGET_P99: Duration = Duration::from_millis(1);
    const WAKE_UPS_PER_PROBE: u32 = 4;
    let mut failures = Vec::new();
    for attempt in 1..=ATTEMPTS {
        let before = path.stats();
        let jitter = std::thread::spawn(|| host_timer_jitter(800, Duration::from_millis(1)));
        let report = udp_ping(
            path.sender(),
            path.receiver_addr(),
            echo.port(),
            PingOptions { count: 400, interval: Duration::from_millis(2), ..PingOptions::default() },
        )?;
        let host = jitter.join().map_err(|_| anyhow::anyhow!("jitter thread panicked"))??;
        let after = path.stats();
        let sorted = report.sorted();
        ensure!(report.received() == 400, "lost probes on a lossless path");
        let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
        let p50 = report.percentile(0.50).unwrap_or_default();
        let p99 = report.percentile(0.99).unwrap_or_default();
        let p50_bound = RTT + BUDGET_P50 + host.p50 * WAKE_UPS_PER_PROBE;
        let p99_bound = RTT + BUDGET_P99 + host.p99 * WAKE_UPS_PER_PROBE;
        let late = after.forward.late_releases + after.reverse.late_releases
            - before.forward.late_releases
            - before.reverse.late_releases;
        println!(
            "attempt {attempt}: udp ping over {RTT:?}: n={} min={min:?} p50={p50:?} (bound {p50_bound:?}) \
             p99={p99:?} (bound {p99_bound:?}) max={max:?} reordered={}; emulator releases >0.5 ms late: \
             {late}; host timer wake-up p50={:?} p99={:?} max={:?}",
            report.received(),
            report.out_of_order,
            host.p50,
            host.p99,
            host.max,
        );
        // These hold on every attempt, however noisy the host: delay is never
        // short and packets are never reordered.
        ensure!(min >= RTT, "RTT {min:?} below the configured {RTT:?}");
        ensure!(report.out_of_order == 0, "ping replies reordered");
        if p99 <= p99_bound && p50 <= p50_bound {
            break;
        }
        failures.push(format!("p50 {p50:?} (bound {p50_bound:?}), p99 {p99:?} (bound {p99_bound:?})"));
    }
    // A load burst can outlast one attempt's jitter measurement; it cannot
    // outlast all of them.
    ensure!(
        failures.len() < ATTEMPTS,
        "the emulator's RTT exceeded its budget over the host's own timer lateness in all {ATTEMPTS} attempts: {failures:?}"
    );

    // A fast one-way stream: every probe arrives, in sequence order.
    let counter = UdpCounter::start(path.receiver(), path.receiver_addr(), 0)?;
    let sent = udp_blast(
        path.sender(),
        path.receiver_addr(),
        counter.port(),
        BlastOptions { count: 10_000, rate_pps: 20_000, payload_len: 200 },
    )?;
    let stats = settle(|| counter.stats());
    println!("one-way burst: sent={sent} {stats:?}");
    ensure!(stats.received == sent, "lossless path lost datagrams");
    ensure!(stats.out_of_order == 0, "emulator reordered packets");
    Ok(())
}

#[test]
fn realised_loss_matches_configured_rate() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    const P: f64 = 0.02;
    let spec = EmulatedPathSpec { seed: 0xC0FFEE, ..EmulatedPathSpec::new(PathSpec::delay(RTT / 2).with_loss(P)) };
    let path = EmulatedPath::create(spec)?;
    let counter = UdpCounter::start(path.receiver(), path.receiver_addr(), 0)?;
    let sent = udp_blast(
        path.sender(),
        path.receiver_addr(),
        counter.port(),
        BlastOptions { count: 30_000, rate_pps: 30_000, payload_len: 100 },
    )?;
    let received = settle(|| counter.stats()).received;
    let fwd = path.stats().forward;
    let rev = path.stats().reverse;
    let n = fwd.packets_in;
    let lost_by_probe = sent - received;
    let hw = binomial_halfwidth(n, P, Z99);
    println!(
        "loss p={P}: n={n} forwarder dropped {} ({:.4}), receiver missed {lost_by_probe} of {sent} ({:.4}); 99% interval {:.0}..{:.0}",
        fwd.dropped_loss,
        fwd.dropped_loss as f64 / n as f64,
        lost_by_probe as f64 / sent as f64,
        n as f64 * P - hw,
        n as f64 * P + hw
    );
    ensure!(n == sent, "forwarder saw {n} packets, {sent} were sent");
    ensure!((fwd.dropped_loss as f64 - n as f64 * P).abs() <= hw, "realised loss outside the 99% binomial interval");
    ensure!(lost_by_probe == fwd.dropped_loss, "receiver count disagrees with the forwarder's loss counter");
    ensure!(fwd.dropped_queue == 0 && fwd.dropped_other == 0);
    ensure!(rev.dropped_loss == 0, "reverse path must be lossless by default");
    Ok(())
}

#[test]
fn bulk_tcp_exceeds_200_mbit() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let path = EmulatedPath::create(EmulatedPathSpec::with_rtt(RTT))?;
    let sink = Sink::start(path.receiver(), path.receiver_addr(), 0, SinkOptions::default())?;
    let sender = Sender::start(
        path.sender(),
        path.receiver_addr(),
        sink.port(),
        SenderOptions {
            congestion: Some("cubic".into()),
            mode: SendMode::Bulk,
            duration: Duration::from_secs(3),
            ..SenderOptions::default()
        },
    )?;
    let report = sender.wait()?;
    let stats = path.stats();
    let (overload_fwd, overload_rev) = path.overload_drops()?;
    println!(
        "bulk over {RTT:?}: {:.1} Mbit/s goodput, {} bytes acked in {:?}, retrans {}, \
         host overload drops {overload_fwd}/{overload_rev}; {stats:?}",
        mbps(report.goodput_bps),
        report.bytes_acked,
        report.elapsed,
        report.total_retrans
    );
    ensure!(report.congestion == "cubic");
    ensure!(report.goodput_bps >= 200e6, "goodput {:.1} Mbit/s below 200", mbps(report.goodput_bps));
    ensure!(stats.forward.dropped_other == 0 && stats.reverse.dropped_other == 0);
    Ok(())
}

#[test]
fn rate_cap_and_queue_shape_a_bulk_flow() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    const RATE: u64 = 20_000_000;
    const QUEUE: usize = 150_000;
    let path = EmulatedPath::create(EmulatedPathSpec::new(PathSpec::delay(RTT / 2).with_rate(RATE, QUEUE)))?;
    let sink = Sink::start(path.receiver(), path.receiver_addr(), 0, SinkOptions::default())?;
    let sender = Sender::start(
        path.sender(),
        path.receiver_addr(),
        sink.port(),
        SenderOptions {
            congestion: Some("cubic".into()),
            duration: Duration::from_secs(3),
            ..SenderOptions::default()
        },
    )?;
    let report = sender.wait()?;
    let fwd = path.stats().forward;
    println!(
        "rate cap {} Mbit/s, queue {QUEUE} B: goodput {:.2} Mbit/s, max queue {} B, tail drops {}, retrans {}",
        RATE / 1_000_000,
        mbps(report.goodput_bps),
        fwd.max_queue_bytes,
        fwd.dropped_queue,
        report.total_retrans
    );
    // Goodput excludes headers (~3 %) and slow start; it must not exceed
    // the cap and should come close to it.
    ensure!(report.goodput_bps <= RATE as f64, "faster than the rate cap");
    ensure!(report.goodput_bps >= 0.8 * RATE as f64, "far below the rate cap");
    ensure!(fwd.max_queue_bytes <= QUEUE as u64, "queue exceeded its limit");
    ensure!(fwd.dropped_queue > 0, "cubic should overflow a 150 kB queue");
    Ok(())
}

/// How much slower than on a healthy path a teardown may be and still count
/// as prompt: either this many times the baseline measured on this host in
/// this run, or the baseline plus `PROMPT_SLACK`, whichever is larger.
const PROMPT_FACTOR: u32 = 10;
const PROMPT_SLACK: Duration = Duration::from_secs(1);

fn prompt_limit(baseline: Duration) -> Duration {
    (baseline * PROMPT_FACTOR).max(baseline + PROMPT_SLACK)
}

fn flood(path: &EmulatedPath) -> Result<(Sink, Sender)> {
    let sink = Sink::start(path.receiver(), path.receiver_addr(), 0, SinkOptions::default())?;
    let sender = Sender::start(
        path.sender(),
        path.receiver_addr(),
        sink.port(),
        SenderOptions { duration: Duration::from_secs(30), ..SenderOptions::default() },
    )?;
    Ok((sink, sender))
}

#[test]
fn drop_mid_flow_removes_namespaces_promptly() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    // What "prompt" means on this host right now: stopping generators on a
    // path that stays up, then tearing down the idle path.
    let baseline_path = EmulatedPath::create(EmulatedPathSpec::with_rtt(RTT))?;
    let (sink, sender) = flood(&baseline_path)?;
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    drop(sender);
    drop(sink);
    let generators_baseline = t.elapsed();
    let t = Instant::now();
    drop(baseline_path);
    let teardown_baseline = t.elapsed();

    let path = EmulatedPath::create(EmulatedPathSpec::with_rtt(RTT))?;
    let names = [path.sender().name().to_owned(), path.receiver().name().to_owned()];
    let listed = list_namespaces()?;
    ensure!(names.iter().all(|n| listed.contains(n)));
    // Tear down mid-flood: the forwarder must stop even while saturated.
    let (sink, sender) = flood(&path)?;
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    drop(path);
    let took = t.elapsed();
    let t = Instant::now();
    drop(sender);
    drop(sink);
    let generators_took = t.elapsed();
    let listed = list_namespaces()?;
    println!(
        "emulated path torn down mid-flow in {took:?} (idle path: {teardown_baseline:?}, limit {:?}), \
         generators stopped in {generators_took:?} (on a live path: {generators_baseline:?}, limit {:?})",
        prompt_limit(teardown_baseline),
        prompt_limit(generators_baseline)
    );
    ensure!(names.iter().all(|n| !listed.contains(n)), "namespaces left behind");
    ensure!(took <= prompt_limit(teardown_baseline), "teardown took {took:?}");
    ensure!(generators_took <= prompt_limit(generators_baseline), "generators took {generators_took:?}");
    Ok(())
}
