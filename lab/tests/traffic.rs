//! Traffic generators: pacing accuracy, byte/time bounds, receive-window
//! limiting, per-socket congestion control, clean close, and the lab-range
//! guard.

mod common;

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use cctrace_lab::{
    EmulatedPath, EmulatedPathSpec, LabError, Netns, SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions,
    VethPair,
};
use common::{lab, mbps};

/// `ss -tnHi` socket lines (state first; the indented `-i` detail lines
/// are dropped) in `ns` for connections with local port `port`.
fn ss_lines(ns: &Netns, port: u16) -> Result<Vec<String>> {
    let out =
        ns.command("ss").args(["-tnHi", "state", "all", &format!("sport = :{port}")]).output_within(CHILD_DEADLINE)?;
    ensure!(out.status.success(), "ss failed");
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(char::is_whitespace))
        .map(str::to_owned)
        .collect())
}

#[test]
fn paced_sender_holds_its_rate() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let pair = VethPair::create(VethOptions::default())?;
    let sink = Sink::start(pair.receiver(), pair.receiver_addr(), 0, SinkOptions::default())?;
    for (rate, write) in [(25_000_000u64, 64 * 1024usize), (500_000, 1024)] {
        let t = Instant::now();
        let report = Sender::start(
            pair.sender(),
            pair.receiver_addr(),
            sink.port(),
            SenderOptions {
                mode: SendMode::Paced { rate_bps: rate, write_size: write },
                duration: Duration::from_secs(2),
                nodelay: write < 4096,
                ..SenderOptions::default()
            },
        )?
        .wait()?;
        let app_rate = report.bytes_written as f64 * 8.0 / 2.0;
        println!(
            "paced {} Mbit/s in {write} B writes: app rate {:.3} Mbit/s, goodput {:.3} Mbit/s, took {:?}",
            rate as f64 / 1e6,
            mbps(app_rate),
            mbps(report.goodput_bps),
            t.elapsed()
        );
        // Writes happen at the start of each interval, so 2 s holds
        // rate*2/write (+1) of them.
        let expected = ((rate as f64 * 2.0 / 8.0) / write as f64).ceil() * write as f64;
        ensure!(
            (report.bytes_written as f64 - expected).abs() <= write as f64,
            "wrote {} bytes, expected ~{expected}",
            report.bytes_written
        );
        ensure!(report.bytes_acked == report.bytes_written);
    }
    let conns = sink.connections();
    ensure!(conns.len() == 2 && conns.iter().all(|c| !c.open), "{conns:?}");
    Ok(())
}

#[test]
fn byte_budget_ends_the_flow_early_and_closes_cleanly() -> Result<()> {
    const DURATION: Duration = Duration::from_secs(10);
    let Some(_lab) = lab() else { return Ok(()) };
    let pair = VethPair::create(VethOptions::default())?;
    let sink = Sink::start(pair.receiver(), pair.receiver_addr(), 0, SinkOptions::default())?;
    let sender = Sender::start(
        pair.sender(),
        pair.receiver_addr(),
        sink.port(),
        SenderOptions { duration: DURATION, max_bytes: Some(3_000_000), ..SenderOptions::default() },
    )?;
    let port = sender.local_port();
    let report = sender.wait()?;
    ensure!(report.bytes_written == 3_000_000 && report.bytes_acked == 3_000_000);
    // The claim is that the budget, not the duration, ended the flow: 3 MB over a veth takes
    // milliseconds, so even a loaded host finishes far inside the duration.
    ensure!(report.elapsed < DURATION / 2, "took {:?} of the {DURATION:?} duration", report.elapsed);
    ensure!(report.local_port == port);
    // Orderly close: our side is in TIME-WAIT (or gone), never reset.
    let lines = ss_lines(pair.sender(), port)?;
    ensure!(lines.iter().all(|l| l.starts_with("TIME-WAIT")), "unexpected socket states: {lines:?}");
    let conns = sink.connections();
    ensure!(conns.len() == 1 && conns[0].bytes == 3_000_000 && !conns[0].open);
    Ok(())
}

#[test]
fn bulk_then_trickle_keeps_the_connection_open() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let path = EmulatedPath::create(EmulatedPathSpec::with_rtt(Duration::from_millis(20)))?;
    let sink = Sink::start(path.receiver(), path.receiver_addr(), 0, SinkOptions::default())?;
    let duration = Duration::from_millis(4000);
    let trickle_every = Duration::from_millis(100);
    let sender = Sender::start(
        path.sender(),
        path.receiver_addr(),
        sink.port(),
        SenderOptions {
            mode: SendMode::BulkThenTrickle { bulk_for: Duration::from_millis(500), trickle_every, trickle_bytes: 100 },
            duration,
            ..SenderOptions::default()
        },
    )?;
    let port = sender.local_port();
    let started = Instant::now();
    // The trickle starts once the bulk phase is all acknowledged: the send queue is empty then.
    // How long that takes depends on how fast this machine forwards; wait for it rather than
    // guess, and leave the trickle at least a second.
    let during = loop {
        let lines = ss_lines(path.sender(), port)?;
        let send_q = lines.first().and_then(|l| l.split_whitespace().nth(2)).and_then(|q| q.parse::<u64>().ok());
        if send_q == Some(0) && started.elapsed() > Duration::from_millis(500) {
            break lines;
        }
        ensure!(
            started.elapsed() < duration - Duration::from_secs(1),
            "the bulk phase was not acknowledged within {:?}: {lines:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let drained_at = started.elapsed();
    let bytes_mid = sink.total_bytes();
    let report = sender.wait()?;
    println!("bulk acknowledged after {drained_at:?}; ss then: {during:?}");
    ensure!(during.len() == 1 && during[0].starts_with("ESTAB"), "flow not established while trickling: {during:?}");
    // 100 bytes per 100 ms for what is left of the duration, plus one write of slack.
    let left = duration.saturating_sub(drained_at);
    let most = 100 * (left.as_millis() / trickle_every.as_millis() + 2) as u64;
    let trickled = report.bytes_written - bytes_mid;
    ensure!(
        (100..=most).contains(&trickled),
        "trickle phase wrote {trickled} bytes (at most {most}) after the bulk phase"
    );
    let after = ss_lines(path.sender(), port)?;
    ensure!(after.iter().all(|l| l.starts_with("TIME-WAIT")), "{after:?}");
    Ok(())
}

#[test]
fn small_receive_buffer_limits_the_flow() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let path = EmulatedPath::create(EmulatedPathSpec::with_rtt(Duration::from_millis(30)))?;
    let sink = Sink::start(path.receiver(), path.receiver_addr(), 0, SinkOptions { rcvbuf: Some(64 * 1024) })?;
    let report = Sender::start(
        path.sender(),
        path.receiver_addr(),
        sink.port(),
        SenderOptions { duration: Duration::from_secs(1), ..SenderOptions::default() },
    )?
    .wait()?;
    println!("64 KiB rcvbuf over 30 ms: {:.1} Mbit/s", mbps(report.goodput_bps));
    // The window caps the flow near rcvbuf/RTT (~17-35 Mbit/s), far
    // below what the path carries unconstrained.
    ensure!(report.goodput_bps < 60e6, "not receive-window limited");
    ensure!(report.goodput_bps > 5e6, "suspiciously slow");
    Ok(())
}

#[test]
fn congestion_control_is_per_socket() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let pair = VethPair::create(VethOptions::default())?;
    let sink = Sink::start(pair.receiver(), pair.receiver_addr(), 0, SinkOptions::default())?;
    for cc in ["bbr", "reno", "cubic"] {
        let report = Sender::start(
            pair.sender(),
            pair.receiver_addr(),
            sink.port(),
            SenderOptions {
                congestion: Some(cc.into()),
                duration: Duration::from_millis(200),
                ..SenderOptions::default()
            },
        )?
        .wait()?;
        ensure!(report.congestion == cc, "{} instead of {cc}", report.congestion);
    }
    let err = Sender::start(
        pair.sender(),
        pair.receiver_addr(),
        sink.port(),
        SenderOptions { congestion: Some("no-such-cc".into()), ..SenderOptions::default() },
    )
    .err();
    ensure!(err.is_some(), "unknown congestion control accepted");
    Ok(())
}

#[test]
fn generators_refuse_addresses_outside_the_lab() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let ns = Netns::create("guard")?;
    for ip in [Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(8, 8, 8, 8), Ipv4Addr::LOCALHOST] {
        let err = Sender::start(&ns, ip, 9, SenderOptions::default()).err();
        ensure!(
            matches!(
                err.as_ref().and_then(|e| e.downcast_ref::<LabError>()),
                Some(LabError::AddressOutsideLab(a)) if *a == ip
            ),
            "{ip}: {err:?}"
        );
        ensure!(Sink::start(&ns, ip, 0, SinkOptions::default()).is_err());
    }
    Ok(())
}

#[test]
fn stop_ends_a_long_flow_promptly() -> Result<()> {
    let Some(_lab) = lab() else { return Ok(()) };
    let pair = VethPair::create(VethOptions::default())?;
    let sink = Sink::start(pair.receiver(), pair.receiver_addr(), 0, SinkOptions::default())?;
    let sender = Sender::start(
        pair.sender(),
        pair.receiver_addr(),
        sink.port(),
        SenderOptions { duration: Duration::from_secs(60), ..SenderOptions::default() },
    )?;
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    sender.stop();
    let report = sender.wait()?;
    ensure!(t.elapsed() < Duration::from_secs(1), "stop took {:?}", t.elapsed());
    ensure!(report.bytes_written > 0 && report.bytes_acked == report.bytes_written);

    // Dropping a running sender is prompt as well.
    let sender = Sender::start(
        pair.sender(),
        pair.receiver_addr(),
        sink.port(),
        SenderOptions { duration: Duration::from_secs(60), ..SenderOptions::default() },
    )?;
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    drop(sender);
    ensure!(t.elapsed() < Duration::from_secs(1), "drop took {:?}", t.elapsed());
    Ok(())
}
