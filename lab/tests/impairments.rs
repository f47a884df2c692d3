//! The emulator's loss kinds other than random loss, each checked against what
//! the kernel of the sending namespace saw: a token-bucket policer, per-packet
//! jitter that reorders, loss on the ACK direction only, and IPv6.

mod common;

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use cctrace_lab::{
    udp_blast, BlastOptions, DirectionStats, EmulatedPath, EmulatedPathSpec, Netns, PathSpec, Policer, SendMode,
    Sender, SenderOptions, SenderReport, Sink, SinkOptions, UdpCounter,
};
use common::{lab, mbps};

const ONE_WAY: Duration = Duration::from_millis(15);

/// Absolute values of SNMP counters in `ns` from `nstat` (per namespace).
fn nstat(ns: &Netns, names: &[&str]) -> Result<Vec<u64>> {
    let out = ns.command("nstat").args(["-asz"]).args(names).output_within(CHILD_DEADLINE).context("running nstat")?;
    ensure!(out.status.success(), "nstat failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    names
        .iter()
        .map(|name| {
            text.lines()
                .find_map(|l| {
                    let mut f = l.split_whitespace();
                    (f.next() == Some(name)).then(|| f.next().and_then(|v| v.parse().ok()))
                })
                .flatten()
                .with_context(|| format!("{name} missing from nstat output {text:?}"))
        })
        .collect()
}

/// One bulk flow with per-socket congestion control, and the sender
/// namespace's TcpRetransSegs over it.
fn bulk(path: &EmulatedPath, cc: &str, secs: u64) -> Result<(SenderReport, u64)> {
    let sink = Sink::start(path.receiver(), path.receiver_addr(), 0, SinkOptions::default())?;
    let before = nstat(path.sender(), &["TcpRetransSegs"])?[0];
    let report = Sender::start(
        path.sender(),
        path.receiver_addr(),
        sink.port(),
        SenderOptions::new(cc, SendMode::Bulk, Duration::from_secs(secs)),
    )?
    .wait()?;
    let after = nstat(path.sender(), &["TcpRetransSegs"])?[0];
    ensure!(report.congestion == cc, "socket ran {} instead of {cc}", report.congestion);
    Ok((report, after - before))
}

fn drops(d: &DirectionStats) -> u64 {
    d.dropped_loss + d.dropped_policer + d.dropped_queue + d.dropped_other
}

/// Every data segment the path dropped had to be sent again for the flow to
/// complete, and every retransmission either replaced a dropped copy or
/// arrived as a duplicate the receiver reported by DSACK:
/// `data drops <= retransmissions <= drops + dsack_dups`. The few packets of
/// the forward direction that carry no data (the handshake's and the close's
/// pure ACKs) give a slack of `SLACK` on the lower bound.
/// Drops counted on the data path: the emulator's, plus the sender TUN's own
/// (the kernel's, should the forwarder ever fall behind).
fn check_retransmissions_explained(
    r: &SenderReport,
    netns_retrans: u64,
    path: &EmulatedPath,
    fwd: &DirectionStats,
) -> Result<()> {
    const SLACK: u64 = 3;
    let retrans = u64::from(r.total_retrans);
    ensure!(netns_retrans == retrans, "nstat TcpRetransSegs {netns_retrans} != the socket's total_retrans {retrans}");
    let d = drops(fwd) + path.overload_drops()?.0;
    ensure!(retrans + SLACK >= d, "{d} packets dropped on the data path but only {retrans} retransmitted");
    ensure!(
        retrans <= d + u64::from(r.dsack_dups),
        "{retrans} retransmissions, more than {d} drops plus {} DSACK-reported duplicates",
        r.dsack_dups
    );
    Ok(())
}

fn describe(r: &SenderReport, netns_retrans: u64) -> String {
    format!(
        "{}: {:.2} Mbit/s, total_retrans {} (nstat {netns_retrans}), dsack_dups {}, reord_seen {}, reordering {}, total_rto {}",
        r.congestion,
        mbps(r.goodput_bps),
        r.total_retrans,
        r.dsack_dups,
        r.reord_seen,
        r.reordering,
        r.total_rto
    )
}

#[test]
fn policer_drops_excess_and_the_kernel_retransmits_exactly_those() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    const RATE: u64 = 20_000_000;
    const BURST: u64 = 15_000;
    // No bottleneck behind the policer: every drop is the policer's.
    let spec = EmulatedPathSpec::new(PathSpec::delay(ONE_WAY).with_policer(Policer::new(RATE, BURST)));
    let path = EmulatedPath::create(spec)?;
    let (report, netns_retrans) = bulk(&path, "cubic", 3)?;
    let stats = path.stats();
    println!("policer {} Mbit/s, {BURST} B bucket: {}; {stats:?}", RATE / 1_000_000, describe(&report, netns_retrans));
    let fwd = stats.forward;
    ensure!(fwd.dropped_policer > 0, "a bulk flow must exceed a 20 Mbit/s policer");
    ensure!(fwd.dropped_loss == 0 && fwd.dropped_queue == 0 && fwd.dropped_other == 0);
    ensure!(fwd.max_queue_bytes == 0, "a policer never queues");
    ensure!(drops(&stats.reverse) == 0, "the ACK path has no policer");
    // What passed is bounded by the token rate over the flow's life plus one bucket
    // (headers included, so goodput is strictly below it).
    let allowed = RATE as f64 / 8.0 * report.elapsed.as_secs_f64() + BURST as f64;
    ensure!(
        (report.bytes_acked as f64) < allowed,
        "{} bytes acked, the policer allows {allowed:.0}",
        report.bytes_acked
    );
    check_retransmissions_explained(&report, netns_retrans, &path, &fwd)
}

#[test]
fn jitter_reorders_and_receivers_see_exactly_the_emulators_count() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let spec = EmulatedPathSpec {
        seed: 7,
        // A rate cap keeps the forwarder's CPU out of the picture; the queue
        // (over 2 BDP) is there to pace, and what it drops is counted.
        ..EmulatedPathSpec::new(
            PathSpec::delay(ONE_WAY).with_jitter(Duration::from_millis(3)).with_rate(100_000_000, 1_000_000),
        )
    };
    let path = EmulatedPath::create(spec)?;

    // UDP probes, numbered: the receiver's "below the highest seen" count is
    // the emulator's out-of-order release count, one for one.
    let counter = UdpCounter::start(path.receiver(), path.receiver_addr(), 0)?;
    let sent = udp_blast(
        path.sender(),
        path.receiver_addr(),
        counter.port(),
        BlastOptions { count: 5000, rate_pps: 10_000, payload_len: 200 },
    )?;
    // The last probes are still in flight for one delay plus the jitter.
    std::thread::sleep(ONE_WAY * 2 + Duration::from_millis(200));
    let probes = counter.stats();
    let fwd = path.stats().forward;
    println!("udp over 3 ms jitter: sent {sent}, {probes:?}; emulator reordered {}", fwd.reordered);
    ensure!(probes.received == sent, "a jittery path without loss lost probes");
    ensure!(fwd.reordered > sent / 10, "3 ms of jitter at 10 kpps must reorder many probes");
    ensure!(probes.out_of_order == fwd.reordered, "receiver saw {} out of order", probes.out_of_order);
    ensure!(path.stats().reverse.reordered == 0, "the reverse direction has no jitter");
    drop(counter);

    // TCP: reordering without loss. The kernel sees it (reord_seen), retransmits
    // some segments that were only late, and the receiver reports those by DSACK.
    let before = path.stats().forward;
    let (report, netns_retrans) = bulk(&path, "cubic", 3)?;
    let after = path.stats().forward;
    let fwd = DirectionStats {
        dropped_loss: after.dropped_loss - before.dropped_loss,
        dropped_policer: after.dropped_policer - before.dropped_policer,
        dropped_queue: after.dropped_queue - before.dropped_queue,
        dropped_other: after.dropped_other - before.dropped_other,
        reordered: after.reordered - before.reordered,
        ..after
    };
    println!(
        "tcp over 3 ms jitter: {}; emulator reordered {}, dropped {}",
        describe(&report, netns_retrans),
        fwd.reordered,
        drops(&fwd)
    );
    ensure!(fwd.reordered > 0 && report.reord_seen > 0, "the kernel saw no reordering");
    ensure!(report.reordering > 3, "the sender's reordering estimate never grew: {}", report.reordering);
    check_retransmissions_explained(&report, netns_retrans, &path, &fwd)
}

#[test]
fn ack_path_loss_is_expressible_and_costs_no_data_retransmissions() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    const RATE: u64 = 50_000_000;
    let mut spec = EmulatedPathSpec::new(PathSpec::delay(ONE_WAY).with_rate(RATE, 190_000));
    spec.reverse = PathSpec::delay(ONE_WAY).with_loss(0.02);
    spec.seed = 11;
    let path = EmulatedPath::create(spec)?;
    let (report, netns_retrans) = bulk(&path, "bbr", 3)?;
    let stats = path.stats();
    println!("2 % ACK loss: {}; {stats:?}", describe(&report, netns_retrans));
    let (fwd, rev) = (stats.forward, stats.reverse);
    ensure!(rev.dropped_loss > 0, "no ACK was dropped");
    let p = rev.dropped_loss as f64 / rev.packets_in as f64;
    ensure!((0.01..0.03).contains(&p), "realised ACK loss {p:.4}, configured 0.02");
    ensure!(fwd.dropped_loss == 0 && fwd.dropped_policer == 0, "the data path has no random loss or policer");
    // Cumulative ACKs cover lost ones: the data still flows near the rate.
    ensure!(report.goodput_bps > 0.7 * RATE as f64, "goodput {:.1} Mbit/s", mbps(report.goodput_bps));
    check_retransmissions_explained(&report, netns_retrans, &path, &fwd)
}

/// `ss -tnHi` of the connection from local port `port` in `ns`: its RTT in ms.
fn ss_rtt_ms(ns: &Netns, port: u16) -> Result<f64> {
    let out = ns
        .command("ss")
        .args(["-6tnHi", "state", "established", &format!("sport = :{port}")])
        .output_within(CHILD_DEADLINE)?;
    ensure!(out.status.success(), "ss failed");
    let text = String::from_utf8_lossy(&out.stdout);
    for field in text.split_whitespace() {
        if let Some(v) = field.strip_prefix("rtt:") {
            return v.split('/').next().and_then(|x| x.parse().ok()).context("rtt field");
        }
    }
    bail!("no IPv6 connection from port {port} in ss output {text:?}")
}

#[test]
fn ipv6_tcp_crosses_the_emulator_with_its_delay_and_rate() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    const RATE: u64 = 30_000_000;
    let spec =
        EmulatedPathSpec { ipv6: true, ..EmulatedPathSpec::new(PathSpec::delay(ONE_WAY).with_rate(RATE, 120_000)) };
    let path = EmulatedPath::create(spec)?;
    let (s6, r6) = (path.sender_addr_v6().context("sender v6")?, path.receiver_addr_v6().context("receiver v6")?);
    ensure!(cctrace_lab::is_lab_addr_v6(s6) && cctrace_lab::is_lab_addr_v6(r6));
    let sink = Sink::start(path.receiver(), r6, 0, SinkOptions::default())?;
    let sender = Sender::start(
        path.sender(),
        r6,
        sink.port(),
        SenderOptions::new("cubic", SendMode::Bulk, Duration::from_secs(2)),
    )?;
    ensure!(sender.local_addr().ip() == std::net::IpAddr::V6(s6), "sent from {}", sender.local_addr());
    std::thread::sleep(Duration::from_secs(1));
    let rtt = ss_rtt_ms(path.sender(), sender.local_port())?;
    let report = sender.wait()?;
    let stats = path.stats();
    println!(
        "ipv6 {s6} -> {r6}: ss rtt {rtt} ms, {:.2} Mbit/s, retrans {}; {stats:?}",
        mbps(report.goodput_bps),
        report.total_retrans
    );
    ensure!(rtt >= 30.0, "the kernel measured {rtt} ms, below the emulated 30 ms");
    ensure!(report.goodput_bps <= RATE as f64 && report.goodput_bps > 0.6 * RATE as f64);
    // Both directions carried the flow and nothing else (no router
    // solicitations, MLD or DAD: those would be non-lab and dropped_other).
    ensure!(stats.forward.bytes_forwarded >= report.bytes_acked);
    ensure!(stats.forward.dropped_other == 0 && stats.reverse.dropped_other == 0, "stray packets crossed");
    ensure!(sink.connections().iter().all(|c| c.peer.ip() == std::net::IpAddr::V6(s6)));
    Ok(())
}
