//! Retransmissions that are not losses, on the emulated WAN path, judged by the real cctrace:
//! reordering without loss (per-packet jitter) and loss of ACKs only. Neither is flagged; the
//! reordering is named, and what cctrace counts as spurious is the kernel's own `dsack_dups`
//! as `ss -tni` prints it. Both scenarios run at once under one tracer, on paths of their own.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use cctrace_lab::{EmulatedPath, EmulatedPathSpec, PathSpec, SendMode, Sender, SenderOptions, Sink, SinkOptions};
use cctrace_tests::{require_kernel, serial, ss_in, Tracer};
use serde_json::Value;

const ONE_WAY: Duration = Duration::from_millis(15);
const SECS: u64 = 10;

/// 10 ms RTT with up to 4 ms of extra delay per data packet (packets overtake each other), a
/// 100 Mbit/s bottleneck with a 1 MB queue, and no loss. The kernel's RACK waits a quarter of
/// min_rtt before it calls a segment lost: on 30 ms a few ms of jitter never fools it (measured:
/// 3 ms on 30 ms, 32 k reorderings seen and not one retransmission); on 10 ms it does, until
/// DSACK teaches it to wait longer.
fn jittery_path() -> Result<EmulatedPath> {
    let forward = PathSpec::delay(Duration::from_millis(5))
        .with_jitter(Duration::from_millis(8))
        .with_rate(100_000_000, 1_000_000);
    EmulatedPath::create(EmulatedPathSpec { seed: 7, ..EmulatedPathSpec::new(forward) })
}

/// 30 ms RTT, a 50 Mbit/s bottleneck with a quarter-BDP queue, 2 % of ACKs lost, no data lost.
fn ack_loss_path() -> Result<EmulatedPath> {
    let mut spec = EmulatedPathSpec::new(PathSpec::delay(ONE_WAY).with_rate(50_000_000, 190_000));
    spec.reverse = PathSpec::delay(ONE_WAY).with_loss(0.02);
    spec.seed = 11;
    EmulatedPath::create(spec)
}

fn cubic(path: &EmulatedPath, port: u16) -> Result<Sender> {
    Sender::start(
        path.sender(),
        path.receiver_addr(),
        port,
        SenderOptions { nodelay: true, ..SenderOptions::new("cubic", SendMode::Bulk, Duration::from_secs(SECS)) },
    )
}

fn lines_of<'a>(lines: &'a [Value], kind: &str, netns: u64, port: u16) -> Vec<&'a Value> {
    lines.iter().filter(|v| v["type"] == kind && v["netns"].as_u64() == Some(netns) && v["sport"] == port).collect()
}

/// One `ss -tni` reading of the connection from `port`, with the monotonic clock read just
/// before and just after it, so the tracer's samples can bracket it.
struct SsReading {
    before_ns: u64,
    after_ns: u64,
    dsack_dups: u64,
}

fn ss_dsack(path: &EmulatedPath, port: u16) -> Result<Option<SsReading>> {
    let before_ns = cctrace_tests::monotonic_ns();
    let sockets = ss_in(path.sender().name())?;
    let after_ns = cctrace_tests::monotonic_ns();
    let Some(sock) = sockets.iter().find(|s| s.local_port() == Some(port)) else { return Ok(None) };
    // ss leaves the field out while it is 0.
    let dsack_dups = sock.num("dsack_dups").map_or(0, |v| v as u64);
    Ok(Some(SsReading { before_ns, after_ns, dsack_dups }))
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

#[test]
fn reordering_and_ack_loss_are_not_flagged_and_spurious_retransmissions_match_the_kernel() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let jitter = jittery_path()?;
    let acks = ack_loss_path()?;
    let tracer = Tracer::start(&["--interval", "1000"])?;
    // A receive window of about 4 ms at the rate less than the path's BDP keeps CUBIC off the
    // bottleneck's queue: every retransmission on this path is then the jitter's doing.
    let rcvbuf = SinkOptions { rcvbuf: Some(60_000) };
    let _jitter_sink = Sink::start(jitter.receiver(), jitter.receiver_addr(), cctrace_lab::SINK_PORT, rcvbuf)?;
    let _ack_sink = Sink::start(acks.receiver(), acks.receiver_addr(), cctrace_lab::SINK_PORT, SinkOptions::default())?;
    let reordered = cubic(&jitter, cctrace_lab::SINK_PORT)?;
    let ack_lossy = cubic(&acks, cctrace_lab::SINK_PORT)?;
    let (jitter_port, ack_port) = (reordered.local_port(), ack_lossy.local_port());

    // The kernel's own count, read with ss while the flow runs.
    let mut readings = Vec::new();
    let end = Instant::now() + Duration::from_secs(SECS - 1);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(250));
        readings.extend(ss_dsack(&jitter, jitter_port)?);
    }
    let jitter_report = reordered.wait()?;
    let ack_report = ack_lossy.wait()?;
    tracer.wait_closed(jitter.sender().inode(), jitter_port, Duration::from_secs(5))?;
    tracer.wait_closed(acks.sender().inode(), ack_port, Duration::from_secs(5))?;
    let (code, lines) = tracer.stop()?;
    ensure!(code == 0, "cctrace exited {code}");
    let (jstats, astats) = (jitter.stats(), acks.stats());
    println!(
        "jitter: {:.1} Mbit/s, total_retrans {}, dsack_dups {}, reord_seen {}, reordering {}; emulator reordered {}, dropped {}+{}+{}",
        jitter_report.goodput_bps / 1e6,
        jitter_report.total_retrans,
        jitter_report.dsack_dups,
        jitter_report.reord_seen,
        jitter_report.reordering,
        jstats.forward.reordered,
        jstats.forward.dropped_loss,
        jstats.forward.dropped_queue,
        jstats.forward.dropped_other,
    );
    println!(
        "ack loss: {:.1} Mbit/s, total_retrans {}, dsack_dups {}; ACKs dropped {} of {}, data dropped {}",
        ack_report.goodput_bps / 1e6,
        ack_report.total_retrans,
        ack_report.dsack_dups,
        astats.reverse.dropped_loss,
        astats.reverse.packets_in,
        astats.forward.dropped_queue + astats.forward.dropped_loss,
    );

    check_reordering(&lines, &jitter, jitter_port, &jitter_report, &readings)?;
    check_ack_loss(&lines, &acks, ack_port)
}

fn check_reordering(
    lines: &[Value],
    path: &EmulatedPath,
    port: u16,
    report: &cctrace_lab::SenderReport,
    readings: &[SsReading],
) -> Result<()> {
    let netns = path.sender().inode();
    let flows = lines_of(lines, "flow", netns, port);
    let samples = lines_of(lines, "sample", netns, port);
    ensure!(!flows.is_empty() && !samples.is_empty(), "no lines for the jittery flow");
    let fwd = path.stats().forward;
    ensure!(fwd.reordered > 0, "the path reordered nothing");
    ensure!(report.dsack_dups > 0, "no spurious retransmission to count (total_retrans {})", report.total_retrans);
    let drops = fwd.dropped_loss + fwd.dropped_queue + fwd.dropped_other + fwd.dropped_policer;
    ensure!(drops == 0, "the path was to lose nothing, it dropped {drops}: the scenario is not reordering alone");
    ensure!(flows.iter().all(|v| v["flagged"] != true), "a reordering flow was flagged");

    // Every ss reading lies between the tracer's samples just before and just after it, give
    // or take one segment.
    ensure!(!readings.is_empty(), "ss never saw the connection");
    let seen: Vec<u64> = readings.iter().map(|r| r.dsack_dups).collect();
    println!("ss -tni dsack_dups during the run: {seen:?}");
    let mut bracketed = 0;
    for r in readings {
        let before = samples.iter().filter(|s| num(s, "ts_ns") <= r.before_ns).map(|s| num(s, "dsack_dups")).max();
        let after = samples.iter().filter(|s| num(s, "ts_ns") >= r.after_ns).map(|s| num(s, "dsack_dups")).min();
        let (Some(lo), Some(hi)) = (before, after) else { continue };
        ensure!(
            lo.saturating_sub(1) <= r.dsack_dups && r.dsack_dups <= hi + 1,
            "ss said dsack_dups {} between samples saying {lo} and {hi}",
            r.dsack_dups
        );
        bracketed += 1;
    }
    ensure!(
        bracketed * 2 >= readings.len(),
        "only {bracketed} of {} ss readings had samples around them",
        readings.len()
    );
    // And at the close, the tracer's last count is the socket's final one (TCP_INFO at close,
    // the struct ss prints).
    let last = samples.iter().map(|s| num(s, "dsack_dups")).max().unwrap_or(0);
    ensure!(
        last.abs_diff(u64::from(report.dsack_dups)) <= 1,
        "tracer {last} vs kernel {} spurious retransmissions at close",
        report.dsack_dups
    );

    // The verdict names the reordering and takes the spurious retransmissions back.
    let noted: Vec<&&Value> = flows.iter().filter(|v| v["evidence"]["note"] == "reordering").collect();
    let trail: Vec<String> = flows
        .iter()
        .map(|v| {
            format!(
                "{} {} retrans {} spurious {} episodes {}+{} spurious: {}",
                v["limited_by"],
                v["flagged"],
                v["evidence"]["retrans_segments"],
                v["evidence"]["dsack_dups"],
                v["evidence"]["loss_episodes"],
                v["evidence"]["spurious_episodes"],
                v["verdict"]
            )
        })
        .collect();
    let noted_last = noted.last().with_context(|| format!("no reordering note: {trail:#?}"))?;
    let text = noted_last["verdict"].as_str().unwrap_or_default();
    println!(
        "jitter flow, last noted line: {}",
        trail[flows.iter().rposition(|v| v["evidence"]["note"] == "reordering").unwrap_or(0)]
    );
    let undone = samples.iter().map(|s| num(s, "undo_events")).max().unwrap_or(0);
    println!("undo_events at the last sample: {undone}");
    ensure!(text.contains("Reordering") && text.contains("not BBR"), "{text}");
    let e = &noted_last["evidence"];
    ensure!(num(e, "dsack_dups") > 0 && num(e, "dsack_dups") <= last, "{e}");
    ensure!(num(e, "spurious_episodes") > 0, "no episode taken back: {e}");
    // The path lost nothing: no episode may count as a loss.
    ensure!(num(e, "loss_episodes") == 0, "a loss counted where the path lost nothing: {e}");
    Ok(())
}

fn check_ack_loss(lines: &[Value], path: &EmulatedPath, port: u16) -> Result<()> {
    let netns = path.sender().inode();
    let flows = lines_of(lines, "flow", netns, port);
    ensure!(!flows.is_empty(), "no lines for the flow with lossy ACKs");
    let stats = path.stats();
    ensure!(stats.reverse.dropped_loss > 0, "no ACK was lost");
    ensure!(stats.forward.dropped_loss == 0, "the data path has no random loss");
    let flagged: Vec<String> =
        flows.iter().filter(|v| v["flagged"] == true).map(|v| v["verdict"].to_string()).collect();
    ensure!(flagged.is_empty(), "loss of ACKs only was flagged: {flagged:#?}");
    Ok(())
}
