//! Acceptance of the diagnosis on the emulated WAN path: the real cctrace judging real flows.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use cctrace_lab::{EmulatedPath, EmulatedPathSpec, PathSpec, SendMode, Sender, SenderOptions, Sink, SinkOptions};
use cctrace_tests::{monotonic_ns, require_kernel, serial, Tracer};
use serde_json::Value;

const PORT: u16 = 5201;
const SMALL_RCVBUF_PORT: u16 = 5202;

/// The demo's path: 30 ms RTT, `loss` on the data direction, a 200 Mbit/s bottleneck with a
/// quarter-BDP queue.
fn wan(loss: f64) -> Result<EmulatedPath> {
    let rate = 200_000_000;
    let queue = 200_000_000 / 8 * 30 / 1000 / 4;
    let mut spec =
        EmulatedPathSpec::new(PathSpec::delay(Duration::from_millis(15)).with_loss(loss).with_rate(rate, queue));
    spec.reverse = PathSpec::delay(Duration::from_millis(15));
    EmulatedPath::create(spec)
}

fn start(path: &EmulatedPath, port: u16, cc: &str, mode: SendMode, secs: u64) -> Result<Sender> {
    Sender::start(
        path.sender(),
        path.receiver_addr(),
        port,
        SenderOptions { nodelay: true, ..SenderOptions::new(cc, mode, Duration::from_secs(secs)) },
    )
}

/// Flow lines of the sender-side socket with local port `port`.
fn lines_of(lines: &[Value], netns: u64, port: u16) -> Vec<Value> {
    lines
        .iter()
        .filter(|v| v["type"] == "flow" && v["netns"].as_u64() == Some(netns) && v["sport"] == port)
        .cloned()
        .collect()
}

struct Outcome {
    first_flag_s: Option<f64>,
    ever_flagged: bool,
    last: Value,
    /// `limited_by` of every judged line while the flow ran (after "not enough data").
    verdicts: Vec<String>,
}

impl Outcome {
    /// Share of judged lines that said `limited_by`.
    fn share(&self, limited_by: &str) -> f64 {
        let n = self.verdicts.len().max(1) as f64;
        self.verdicts.iter().filter(|v| *v == limited_by).count() as f64 / n
    }
}

fn outcome(lines: &[Value], netns: u64, port: u16, t0: u64) -> Result<Outcome> {
    let mine = lines_of(lines, netns, port);
    // Time to a flag counts from the flow's first kernel sample: on a loaded machine a sender
    // can start well after `t0`, and that delay is not the diagnosis's.
    let local_port = |v: &Value| v["local"].as_str().and_then(|a| a.rsplit(':').next()).and_then(|p| p.parse().ok());
    let t0 = lines
        .iter()
        .filter(|v| v["type"] == "sample" && v["netns"].as_u64() == Some(netns) && local_port(v) == Some(port))
        .filter_map(|v| v["ts_ns"].as_u64())
        .min()
        .unwrap_or(t0);
    let first_flag_s = mine
        .iter()
        .find(|v| v["flagged"] == true)
        .and_then(|v| v["ts_ns"].as_u64())
        .map(|ts| ts.saturating_sub(t0) as f64 / 1e9);
    // The verdict while the flow ran: the last line before it started closing.
    let last = mine.iter().rev().find(|v| v["closed"] == false).or(mine.last()).cloned().context("no flow lines")?;
    let verdicts = mine
        .iter()
        .filter(|v| v["closed"] == false)
        .filter_map(|v| v["limited_by"].as_str())
        .filter(|l| *l != "unknown")
        .map(String::from)
        .collect();
    Ok(Outcome { first_flag_s, ever_flagged: mine.iter().any(|v| v["flagged"] == true), last, verdicts })
}

fn describe(o: &Outcome) -> String {
    format!(
        "verdicts={:?} limited_by={} flagged={} first_flag={:?} throughput={:.1} Mbit/s verdict={}",
        o.verdicts,
        o.last["limited_by"],
        o.last["flagged"],
        o.first_flag_s,
        o.last["throughput_bps"].as_f64().unwrap_or(0.0) / 1e6,
        o.last["verdict"]
    )
}

#[test]
fn lossy_wan_flags_cubic_and_spares_bbr_and_thin_streams() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let path = wan(0.02)?;
    let tracer = Tracer::start(&["--interval", "1000"])?;
    let _sink = Sink::start(path.receiver(), path.receiver_addr(), PORT, SinkOptions::default())?;
    let t0 = monotonic_ns();
    let secs = 16;
    let video = SendMode::Paced { rate_bps: 25_000_000, write_size: 64 * 1024 };
    let flows: Vec<(&str, Sender)> = vec![
        ("cubic bulk", start(&path, PORT, "cubic", SendMode::Bulk, secs)?),
        ("bbr bulk", start(&path, PORT, "bbr", SendMode::Bulk, secs)?),
        ("cubic 25M stream", start(&path, PORT, "cubic", video.clone(), secs)?),
        ("bbr 25M stream", start(&path, PORT, "bbr", video, secs)?),
        (
            "cubic 0.5M stream",
            start(&path, PORT, "cubic", SendMode::Paced { rate_bps: 500_000, write_size: 1024 }, secs)?,
        ),
    ];
    let ports: HashMap<&str, u16> = flows.iter().map(|(n, s)| (*n, s.local_port())).collect();
    let mut reports = HashMap::new();
    for (name, s) in flows {
        reports.insert(name, s.wait()?);
    }
    std::thread::sleep(Duration::from_secs(1));
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    let netns = path.sender().inode();
    let o = |name: &str| outcome(&lines, netns, ports[name], t0);

    for name in ["cubic bulk", "cubic 25M stream"] {
        let out = o(name)?;
        let first = out.first_flag_s.with_context(|| format!("{name} never flagged: {}", describe(&out)))?;
        assert!(first <= 10.0, "{name} flagged only after {first:.1} s");
        assert_eq!(out.last["flagged"], true, "{name} stays flagged: {}", describe(&out));
        assert_eq!(out.last["limited_by"], "cwnd", "{name}: {}", describe(&out));
        let verdict = out.last["verdict"].as_str().unwrap_or_default();
        assert!(verdict.contains("Mathis bound"), "{verdict}");
        let evidence = &out.last["evidence"];
        let loss = evidence["loss_ratio"].as_f64().unwrap_or(0.0);
        assert!(loss > 0.01, "retransmitted share near the path's 2 %: {loss}");
        let rtt = evidence["srtt_ms"].as_f64().unwrap_or(0.0);
        assert!((29.0..45.0).contains(&rtt), "srtt {rtt}");
        let fix = out.last["fix"].to_string();
        assert!(
            fix.contains(&format!(
                "ip netns exec {} sysctl -w net.ipv4.tcp_congestion_control=bbr",
                path.sender().name()
            )),
            "{fix}"
        );
        // An `ip netns add` namespace does not survive a reboot: no files to persist it in.
        assert!(fix.contains("roll back: ip netns exec") && fix.contains("=cubic") && fix.contains("persist"), "{fix}");
    }
    let bbr_bulk = o("bbr bulk")?;
    assert!(!bbr_bulk.ever_flagged, "bbr bulk: {}", describe(&bbr_bulk));
    for name in ["bbr 25M stream", "cubic 0.5M stream"] {
        let out = o(name)?;
        assert!(!out.ever_flagged, "{name}: {}", describe(&out));
        // What the user sees while the stream runs: application-limited, bar the odd window in
        // which a loss burst made it lag.
        assert!(out.share("application") >= 0.75, "{name}: {}", describe(&out));
    }
    // The BBR stream keeps up with its application; the CUBIC one cannot (the senders' own
    // count over their whole run: the last window includes the tail after the last write).
    assert!(reports["bbr 25M stream"].goodput_bps > 20e6, "{:?}", reports["bbr 25M stream"]);
    assert!(reports["cubic 25M stream"].goodput_bps < 15e6, "{:?}", reports["cubic 25M stream"]);
    Ok(())
}

#[test]
fn clean_path_and_small_receive_buffer_are_not_flagged() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let path = wan(0.0)?;
    let tracer = Tracer::start(&["--interval", "1000"])?;
    let _sink = Sink::start(path.receiver(), path.receiver_addr(), PORT, SinkOptions::default())?;
    let _small =
        Sink::start(path.receiver(), path.receiver_addr(), SMALL_RCVBUF_PORT, SinkOptions { rcvbuf: Some(32 * 1024) })?;
    let bulk = start(&path, PORT, "cubic", SendMode::Bulk, 12)?;
    let windowed = start(&path, SMALL_RCVBUF_PORT, "cubic", SendMode::Bulk, 12)?;
    let (bulk_port, windowed_port) = (bulk.local_port(), windowed.local_port());
    let t0 = monotonic_ns();
    bulk.wait()?;
    windowed.wait()?;
    std::thread::sleep(Duration::from_secs(1));
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    let netns = path.sender().inode();
    let clean = outcome(&lines, netns, bulk_port, t0)?;
    assert!(!clean.ever_flagged, "clean path: {}", describe(&clean));
    assert_ne!(clean.last["limited_by"], "unknown", "{}", describe(&clean));
    let rwnd = outcome(&lines, netns, windowed_port, t0)?;
    assert!(!rwnd.ever_flagged, "small rcvbuf: {}", describe(&rwnd));
    assert_eq!(rwnd.last["limited_by"], "rwnd", "small rcvbuf: {}", describe(&rwnd));
    Ok(())
}

#[test]
fn demo_flags_its_cubic_flows_and_cleans_up_on_sigterm() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let tracer = Tracer::start(&["demo"])?;
    let prefix = format!("cct-{}-", tracer.pid());
    let namespaces = || -> Result<Vec<String>> {
        let out = std::process::Command::new("ip").args(["netns", "list"]).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with(&prefix)).map(String::from).collect())
    };
    assert_eq!(namespaces()?.len(), 2, "the demo's sender and receiver namespaces exist");
    tracer.wait_for("both CUBIC demo flows flagged", Duration::from_secs(15), |lines| {
        let flagged = |comm: &str| {
            lines.iter().any(|v| v["type"] == "flow" && v["owner"]["comm"] == comm && v["flagged"] == true)
        };
        flagged("cubic-video") && flagged("cubic-bulk")
    })?;
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    for comm in ["bbr-video", "bbr-bulk"] {
        assert!(
            !lines.iter().any(|v| v["type"] == "flow" && v["owner"]["comm"] == comm && v["flagged"] == true),
            "{comm} must not be flagged"
        );
    }
    assert!(namespaces()?.is_empty(), "left behind: {:?}", namespaces()?);
    Ok(())
}
