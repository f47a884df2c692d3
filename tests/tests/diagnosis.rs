//! Acceptance of the diagnosis on the emulated WAN path: the real cctrace judging real flows.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use cctrace_lab::{
    EmulatedPath, EmulatedPathSpec, GilbertElliott, PathSpec, SendMode, Sender, SenderOptions, Sink, SinkOptions,
};
use cctrace_tests::faithful::{judged_on, late_share, on_a_faithful_path, Unfaithful};
use cctrace_tests::{
    demo_wan as wan, flow_lines as lines_of, monotonic_ns, print_time_to_flag, require_kernel, serial, Tracer,
    DEMO_WAN_RATE_BPS,
};
use serde_json::Value;

const PORT: u16 = cctrace_lab::SINK_PORT;
const SMALL_RCVBUF_PORT: u16 = 5202;

fn start(path: &EmulatedPath, port: u16, cc: &str, mode: SendMode, secs: u64) -> Result<Sender> {
    Sender::start(
        path.sender(),
        path.receiver_addr(),
        port,
        SenderOptions { nodelay: true, ..SenderOptions::new(cc, mode, Duration::from_secs(secs)) },
    )
}

struct Outcome {
    first_flag_s: Option<f64>,
    ever_flagged: bool,
    last: Value,
    /// `limited_by` of every judged line while the flow ran (after "not enough data").
    verdicts: Vec<String>,
    /// The judged lines themselves, one per verdict.
    judged: Vec<Value>,
    /// Seconds after the start at which a flagged flow was first seen unflagged again.
    flag_dropped: Option<f64>,
    /// The flow's first kernel sample (or the scenario's start): what the seconds count from.
    start_ns: u64,
}

impl Outcome {
    /// Share of the judged lines that said `limited_by` once `ready` held for a line (the
    /// diagnosis had what it needs to say so); `None` if that came too late to tell. How
    /// soon the evidence arrives is the flow's doing (a CUBIC flow on a shallow buffer takes
    /// seconds between losses), so a share of the whole run would measure the machine's pace.
    /// The line after the first ready one is where the count starts: a new class shows once it
    /// held two evaluations in a row (the diagnosis's hysteresis).
    fn share_once(&self, limited_by: &str, ready: impl Fn(&Value) -> bool) -> Option<f64> {
        let from = self.judged.iter().position(ready)? + 1;
        let after = self.verdicts.get(from..).filter(|a| !a.is_empty())?;
        Some(after.iter().filter(|v| *v == limited_by).count() as f64 / after.len() as f64)
    }

    /// Share of the later half of the judged lines that said `limited_by`.
    fn late_share(&self, limited_by: &str) -> f64 {
        let late = &self.verdicts[self.verdicts.len() / 2..];
        late.iter().filter(|v| *v == limited_by).count() as f64 / late.len().max(1) as f64
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
    let judged: Vec<Value> = mine
        .iter()
        .filter(|v| v["closed"] == false)
        .filter(|v| v["limited_by"].as_str().is_some_and(|l| l != "unknown"))
        .cloned()
        .collect();
    let verdicts = judged.iter().filter_map(|v| v["limited_by"].as_str()).map(String::from).collect();
    let since = |v: &Value| v["ts_ns"].as_u64().unwrap_or(0).saturating_sub(t0) as f64 / 1e9;
    let flag_dropped = mine
        .iter()
        .filter(|v| v["closed"] == false)
        .skip_while(|v| v["flagged"] != true)
        .find(|v| v["flagged"] != true)
        .map(since);
    Ok(Outcome {
        first_flag_s,
        ever_flagged: mine.iter().any(|v| v["flagged"] == true),
        last,
        verdicts,
        judged,
        flag_dropped,
        start_ns: t0,
    })
}

/// Each judged line of the flow, one per second: when, the class, the flag, the loss
/// episodes without and with a queue, and the verdict's reason. What a failed time bound
/// needs in order to say which condition held the flag back.
fn trail(o: &Outcome) -> String {
    o.judged
        .iter()
        .map(|v| {
            let e = &v["evidence"];
            format!(
                "\n  {:5.1} s {:<11} flagged={:<5} episodes {}/{} clean, {} queued (not flagged: {}): {}",
                v["ts_ns"].as_u64().unwrap_or(0).saturating_sub(o.start_ns) as f64 / 1e9,
                v["limited_by"].as_str().unwrap_or("?"),
                v["flagged"],
                e["clean_episodes"],
                e["loss_episodes"],
                e["queued_episodes"],
                e["not_flagged"].as_str().unwrap_or("-"),
                v["verdict"].as_str().unwrap_or("")
            )
        })
        .collect()
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

/// A time-to-flag bound missed: an error, marked [`Unfaithful`] when what held the flag back
/// was queue the emulated path cannot have built (its largest backlog at `rate_bps` stayed
/// under the threshold cctrace judged queue by), so the delay is the host's and not cctrace's.
fn late_flag(out: &Outcome, path: &EmulatedPath, rate_bps: f64, error: anyhow::Error) -> anyhow::Error {
    let before_flag = out.judged.iter().take_while(|v| v["flagged"] != true);
    let queued_before = before_flag.clone().any(|v| v["evidence"]["queued_episodes"].as_u64().unwrap_or(0) > 0);
    let threshold_ms =
        before_flag.filter_map(|v| v["evidence"]["queue_threshold_ms"].as_f64()).fold(f64::INFINITY, f64::min);
    queue_not_the_paths(error, queued_before, path, rate_bps, threshold_ms)
}

/// `error` as unfaithful when cctrace saw a queue (`queued`) that the emulated bottleneck never
/// held as deep as cctrace's `threshold_ms`: the host delayed those packets, not the path.
/// Otherwise `error` with the path's queue peak and the emulator's worst release lateness.
fn queue_not_the_paths(
    error: anyhow::Error,
    queued: bool,
    path: &EmulatedPath,
    rate_bps: f64,
    threshold_ms: f64,
) -> anyhow::Error {
    let forward = path.stats().forward;
    let path_queue_ms = forward.max_queue_bytes as f64 * 8.0 / rate_bps * 1e3;
    let lateness_ms = forward.max_release_lateness_ns as f64 / 1e6;
    if queued && path_queue_ms < threshold_ms {
        error.context(Unfaithful::HostQueue { path_queue_ms, threshold_ms })
    } else {
        error.context(format!(
            "the emulated queue peaked at {path_queue_ms:.1} ms, the emulator's release at most {lateness_ms:.1} ms late \
             (threshold {threshold_ms:.1} ms)"
        ))
    }
}

#[test]
fn lossy_wan_flags_cubic_and_spares_bbr_and_thin_streams() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    on_a_faithful_path(3, lossy_wan_scenario)
}

/// The 2 % WAN with the demo's mix; returns the emulator's late-release share.
fn lossy_wan_scenario() -> Result<f64> {
    // The BBR flows get their own copy of the path, as in the demo: on a shared one the BBR bulk
    // transfer keeps the bottleneck's queue full, and CUBIC's losses then come with a queue.
    // The BBR stream gets one of its own too: beside the BBR bulk transfer its data meets that
    // transfer's queue, and its receiving end, which cannot tell whose queue it is, says `path`
    // (docs/flagging.md, the cases it gets wrong); the case here is a sender its application paces.
    let path = wan(0.02)?;
    let bbr_path = wan(0.02)?;
    let stream_path = wan(0.02)?;
    let hidden = receivers_only(&[&path, &bbr_path, &stream_path])?;
    let tracer = both_ends()?;
    let mut sinks = Vec::new();
    for p in [&path, &bbr_path, &stream_path] {
        sinks.push(Sink::start(p.receiver(), p.receiver_addr(), PORT, SinkOptions::default())?);
    }
    let t0 = monotonic_ns();
    let secs = 16;
    let video = SendMode::Paced { rate_bps: 25_000_000, write_size: 64 * 1024 };
    let flows: Vec<(&str, Sender)> = vec![
        ("cubic bulk", start(&path, PORT, "cubic", SendMode::Bulk, secs)?),
        ("bbr bulk", start(&bbr_path, PORT, "bbr", SendMode::Bulk, secs)?),
        ("cubic 25M stream", start(&path, PORT, "cubic", video.clone(), secs)?),
        ("bbr 25M stream", start(&stream_path, PORT, "bbr", video, secs)?),
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
    let path_of = |name: &str| match name {
        "bbr 25M stream" => &stream_path,
        _ if name.starts_with("bbr") => &bbr_path,
        _ => &path,
    };
    let netns_of = |name: &str| path_of(name).sender().inode();
    let closed: Vec<(u64, u16)> = ports.iter().map(|(name, port)| (netns_of(name), *port)).collect();
    wait_all_closed(&tracer, &closed)?;
    let receiver_of = |name: &str| path_of(name).receiver().inode();
    let received: Vec<(u64, u16)> = ports.iter().map(|(name, port)| (receiver_of(name), *port)).collect();
    wait_receivers_closed(&hidden, &received)?;
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    let (code, hidden_lines) = hidden.stop()?;
    assert_eq!(code, 0, "the receivers' tracer");
    let late = late_share(&[&path, &bbr_path, &stream_path]);
    println!("emulator: {:.2}% of packets released late", late * 100.0);
    let o = |name: &str| outcome(&lines, netns_of(name), ports[name], t0);
    // From the receiving end: a sender its application paces is not flagged (the BBR stream
    // keeps up with its application; the thin CUBIC one is far below its loss response).
    let ends = || -> Result<()> {
        let ends: Vec<(ReceivingEnd, FromReceiver)> = [
            ("bbr 25M stream", FromReceiver::Says("application")),
            ("cubic 0.5M stream", FromReceiver::NotFlagged),
            ("cubic bulk", FromReceiver::Informative),
            ("bbr bulk", FromReceiver::Informative),
            ("cubic 25M stream", FromReceiver::Informative),
        ]
        .into_iter()
        .map(|(name, want)| {
            let sender = (netns_of(name), ports[name]);
            (ReceivingEnd::of(name, &lines, &hidden_lines, sender, receiver_of(name)), want)
        })
        .collect();
        // The BBR stream's receiving end says `path` only from a queue its data met: on its own
        // copy of the path, one the emulated bottleneck never held came from the host.
        let stream = &ends[0].0;
        let own = stream.check(ends[0].1).map_err(|e| {
            queue_not_the_paths(e, stream.said("path"), &stream_path, DEMO_WAN_RATE_BPS, stream.queue_threshold_ms())
        });
        match (own, check_ends(ends.iter().skip(1).map(|(end, want)| (end, *want)))) {
            (Ok(()), others) => others,
            (Err(e), Ok(())) => Err(e),
            (Err(e), Err(others)) => Err(others.context(format!("{e:#}"))),
        }
    };
    judged_on(late, check_lossy_wan(&o, &path, &reports).and_then(|()| ends()))
}

fn check_lossy_wan(
    o: &dyn Fn(&str) -> Result<Outcome>,
    path: &EmulatedPath,
    reports: &HashMap<&str, cctrace_lab::SenderReport>,
) -> Result<()> {
    for name in ["cubic bulk", "cubic 25M stream"] {
        let out = o(name)?;
        let first = out.first_flag_s.with_context(|| format!("{name} never flagged: {}", describe(&out)))?;
        print_time_to_flag(name, first);
        if first > 10.0 {
            let e = anyhow::anyhow!("{name} flagged only after {first:.1} s:{}", trail(&out));
            return Err(late_flag(&out, path, DEMO_WAN_RATE_BPS, e));
        }
        anyhow::ensure!(out.last["flagged"] == true, "{name} stays flagged: {}", describe(&out));
        anyhow::ensure!(out.last["limited_by"] == "cwnd", "{name}: {}", describe(&out));
        let verdict = out.last["verdict"].as_str().unwrap_or_default();
        anyhow::ensure!(verdict.contains("Mathis bound"), "{verdict}");
        let evidence = &out.last["evidence"];
        let loss = evidence["loss_ratio"].as_f64().unwrap_or(0.0);
        anyhow::ensure!(loss > 0.01, "retransmitted share near the path's 2 %: {loss}");
        let rtt = evidence["srtt_ms"].as_f64().unwrap_or(0.0);
        anyhow::ensure!((29.0..45.0).contains(&rtt), "srtt {rtt}");
        let fix = out.last["fix"].to_string();
        anyhow::ensure!(
            fix.contains(&format!(
                "ip netns exec {} sysctl -w net.ipv4.tcp_congestion_control=bbr",
                path.sender().name()
            )),
            "{fix}"
        );
        // An `ip netns add` namespace does not survive a reboot: no files to persist it in.
        anyhow::ensure!(
            fix.contains("roll back: ip netns exec") && fix.contains("=cubic") && fix.contains("persist"),
            "{fix}"
        );
    }
    let bbr_bulk = o("bbr bulk")?;
    anyhow::ensure!(!bbr_bulk.ever_flagged, "bbr bulk: {}", describe(&bbr_bulk));
    for name in ["bbr 25M stream", "cubic 0.5M stream"] {
        let out = o(name)?;
        anyhow::ensure!(!out.ever_flagged, "{name}: {}", describe(&out));
        // What the user sees once the stream runs steadily: application-limited, bar the odd
        // window in which a loss burst made it lag. (In its first seconds the BBR stream shares
        // the path with the BBR bulk transfer's start-up and may lag its application: `cwnd`
        // or `path` then are right.)
        anyhow::ensure!(out.late_share("application") >= 0.75, "{name}: {}", describe(&out));
    }
    // The BBR stream keeps up with its application; the CUBIC one cannot (the senders' own
    // count over their whole run: the last window includes the tail after the last write).
    anyhow::ensure!(reports["bbr 25M stream"].goodput_bps > 20e6, "{:?}", reports["bbr 25M stream"]);
    anyhow::ensure!(reports["cubic 25M stream"].goodput_bps < 15e6, "{:?}", reports["cubic 25M stream"]);
    Ok(())
}

#[test]
fn clean_path_and_small_receive_buffer_are_not_flagged() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let path = wan(0.0)?;
    let hidden = receivers_only(&[&path])?;
    let tracer = both_ends()?;
    let _sink = Sink::start(path.receiver(), path.receiver_addr(), PORT, SinkOptions::default())?;
    let _small =
        Sink::start(path.receiver(), path.receiver_addr(), SMALL_RCVBUF_PORT, SinkOptions { rcvbuf: Some(32 * 1024) })?;
    // 16 s: the receiving end is compared with the sender after its first 10 s.
    let bulk = start(&path, PORT, "cubic", SendMode::Bulk, 16)?;
    let windowed = start(&path, SMALL_RCVBUF_PORT, "cubic", SendMode::Bulk, 16)?;
    let (bulk_port, windowed_port) = (bulk.local_port(), windowed.local_port());
    let t0 = monotonic_ns();
    bulk.wait()?;
    windowed.wait()?;
    wait_all_closed(&tracer, &[(path.sender().inode(), bulk_port), (path.sender().inode(), windowed_port)])?;
    let receiver = path.receiver().inode();
    wait_receivers_closed(&hidden, &[(receiver, bulk_port), (receiver, windowed_port)])?;
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    let (code, hidden_lines) = hidden.stop()?;
    assert_eq!(code, 0, "the receivers' tracer");
    let netns = path.sender().inode();
    let clean = outcome(&lines, netns, bulk_port, t0)?;
    assert!(!clean.ever_flagged, "clean path: {}", describe(&clean));
    assert_ne!(clean.last["limited_by"], "unknown", "{}", describe(&clean));
    let rwnd = outcome(&lines, netns, windowed_port, t0)?;
    assert!(!rwnd.ever_flagged, "small rcvbuf: {}", describe(&rwnd));
    assert_eq!(rwnd.last["limited_by"], "rwnd", "small rcvbuf: {}", describe(&rwnd));
    // From the receiving end: this host's window, set by the application's SO_RCVBUF.
    let windowed_end = ReceivingEnd::of("small rcvbuf", &lines, &hidden_lines, (netns, windowed_port), receiver);
    let clean_end = ReceivingEnd::of("clean path", &lines, &hidden_lines, (netns, bulk_port), receiver);
    check_ends([(&windowed_end, FromReceiver::Says("rwnd")), (&clean_end, FromReceiver::Informative)].into_iter())?;
    let verdict = windowed_end.hidden.last().and_then(|v| v["verdict"].as_str()).unwrap_or_default().to_string();
    anyhow::ensure!(verdict.contains("SO_RCVBUF"), "the application's buffer is named: {verdict}");
    Ok(())
}

#[test]
fn demo_flags_its_cubic_flows_and_cleans_up_on_sigterm() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let tracer = Tracer::start(&["demo"])?;
    let prefix = format!("cct-{}-", tracer.pid());
    let namespaces = || -> Result<Vec<String>> {
        let out = std::process::Command::new("ip").args(["netns", "list"]).output_within(CHILD_DEADLINE)?;
        Ok(String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with(&prefix)).map(String::from).collect())
    };
    // A sender and a receiver namespace for each algorithm's copy of the path.
    assert_eq!(namespaces()?.len(), 4, "the demo's namespaces exist");
    // The time to flag is measured by the tests above; here that the demo's story plays out.
    tracer.wait_for("both CUBIC demo flows flagged", Duration::from_secs(40), |lines| {
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

// ---- Realistic loss rates, full bottlenecks and bursty loss (issue 13) ----

/// A 200 Mbit/s path of `rtt_ms` with a quarter-BDP queue and `loss` on the data direction
/// (Bernoulli, or two-state when `bursty`).
fn lossy_path(rtt_ms: u64, loss: f64, bursty: bool) -> Result<EmulatedPath> {
    lossy_path_at(LOSSY_PATH_BPS, rtt_ms, loss, bursty)
}

/// The lossy paths' bottleneck: BBR fills it, the loss-based algorithms stay far below it.
const LOSSY_PATH_BPS: u64 = 200_000_000;

/// A lossy path as [`lossy_path`], through a `rate` bottleneck.
fn lossy_path_at(rate: u64, rtt_ms: u64, loss: f64, bursty: bool) -> Result<EmulatedPath> {
    let queue = (rate / 8 * rtt_ms / 1000 / 4) as usize;
    let forward = PathSpec::delay(Duration::from_millis(rtt_ms / 2)).with_rate(rate, queue);
    let forward = if bursty {
        // Bad spells of 5 packets on average losing half of theirs.
        forward.with_bursty_loss(GilbertElliott::with_mean(loss, 5.0, 0.5))
    } else {
        forward.with_loss(loss)
    };
    let mut spec = EmulatedPathSpec::new(forward);
    spec.reverse = PathSpec::delay(Duration::from_millis(rtt_ms / 2));
    EmulatedPath::create(spec)
}

/// A 30 ms path through a `rate_bps` bottleneck whose drop-tail queue holds `bdp_share` of a
/// bandwidth-delay product, without random loss.
fn bottleneck(rate_bps: u64, bdp_share: f64) -> Result<EmulatedPath> {
    let queue = (rate_bps as f64 / 8.0 * 0.030 * bdp_share) as usize;
    let mut spec = EmulatedPathSpec::new(PathSpec::delay(Duration::from_millis(15)).with_rate(rate_bps, queue));
    spec.reverse = PathSpec::delay(Duration::from_millis(15));
    EmulatedPath::create(spec)
}

/// Wait until the tracer has said each flow (netns, local port) closed: its last judgments are
/// in, and stopping the tracer now loses none of them.
fn wait_all_closed(tracer: &Tracer, flows: &[(u64, u16)]) -> Result<()> {
    for &(netns, port) in flows {
        tracer.wait_closed(netns, port, Duration::from_secs(15))?;
    }
    Ok(())
}

/// One bulk flow of a scenario and what cctrace said about it.
struct Judged {
    label: String,
    outcome: Outcome,
    goodput_bps: f64,
    /// The same transfer judged from its receiving end.
    receiving: ReceivingEnd,
}

impl Judged {
    fn describe(&self) -> String {
        let e = &self.outcome.last["evidence"];
        format!(
            "{}: goodput {:.1} Mbit/s, {}, episodes {}/{} without queue (queue at loss {:.1} ms, threshold {:.1} ms), \
             loss events {:.3}%, srtt {:.1} vs min_rtt {:.1} ms",
            self.label,
            self.goodput_bps / 1e6,
            describe(&self.outcome),
            e["clean_episodes"],
            e["loss_episodes"],
            e["queue_at_loss_ms"].as_f64().unwrap_or(0.0),
            e["queue_threshold_ms"].as_f64().unwrap_or(0.0),
            e["loss_event_rate"].as_f64().unwrap_or(0.0) * 100.0,
            e["srtt_ms"].as_f64().unwrap_or(0.0),
            e["min_rtt_ms"].as_f64().unwrap_or(0.0),
        )
    }

    /// Flagged within `within` s of its start and on every judged line from then on.
    fn check_flagged_and_stays(&self, within: f64) -> Result<()> {
        let first = self.outcome.first_flag_s.unwrap_or(f64::INFINITY);
        if first.is_finite() {
            print_time_to_flag(&self.label, first);
        }
        anyhow::ensure!(first <= within, "{} not flagged within {within} s:{}", self.describe(), trail(&self.outcome));
        anyhow::ensure!(self.outcome.last["flagged"] == true, "stays flagged: {}", self.describe());
        anyhow::ensure!(
            self.outcome.flag_dropped.is_none(),
            "flag dropped at {:?}: {}",
            self.outcome.flag_dropped,
            self.describe()
        );
        anyhow::ensure!(self.outcome.last["limited_by"] == "cwnd", "{}", self.describe());
        let verdict = self.outcome.last["verdict"].as_str().unwrap_or_default();
        anyhow::ensure!(verdict.contains("episodes") && verdict.contains("Mathis bound"), "{verdict}");
        Ok(())
    }
}

/// Run bulk flows (`(path index, cc)`) over `paths` for `secs` under one tracer, and beside it a
/// second that sees only the receivers (see [`ReceivingEnd`]).
fn run_bulk(paths: &[(&str, &EmulatedPath)], flows: &[(usize, &str)], secs: u64) -> Result<Vec<Judged>> {
    let hidden = receivers_only(&paths.iter().map(|(_, p)| *p).collect::<Vec<_>>())?;
    let tracer = both_ends()?;
    let mut sinks = Vec::new();
    for (_, p) in paths {
        sinks.push(Sink::start(p.receiver(), p.receiver_addr(), PORT, SinkOptions::default())?);
    }
    let t0 = monotonic_ns();
    let mut started = Vec::new();
    for &(i, cc) in flows {
        started.push((i, cc, start(paths[i].1, PORT, cc, SendMode::Bulk, secs)?));
    }
    let mut done = Vec::new();
    for (i, cc, s) in started {
        let port = s.local_port();
        done.push((i, cc, port, s.wait()?));
    }
    let closed: Vec<(u64, u16)> = done.iter().map(|(i, _, port, _)| (paths[*i].1.sender().inode(), *port)).collect();
    wait_all_closed(&tracer, &closed)?;
    let received: Vec<(u64, u16)> =
        done.iter().map(|(i, _, port, _)| (paths[*i].1.receiver().inode(), *port)).collect();
    wait_receivers_closed(&hidden, &received)?;
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    let (code, hidden_lines) = hidden.stop()?;
    assert_eq!(code, 0, "the receivers' tracer");
    if let Ok(dir) = std::env::var("CCT_DUMP") {
        let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
        std::fs::write(format!("{dir}/lines-{}.jsonl", monotonic_ns()), text)?;
        for (name, p) in paths {
            println!("DUMP {name}: overload drops {:?}, fwd {:?}", p.overload_drops()?, p.stats().forward);
        }
    }
    drop(sinks);
    done.into_iter()
        .map(|(i, cc, port, report)| {
            let (label, path) = (format!("{cc} on {}", paths[i].0), paths[i].1);
            let sender = (path.sender().inode(), port);
            Ok(Judged {
                receiving: ReceivingEnd::of(&label, &lines, &hidden_lines, sender, path.receiver().inode()),
                label,
                outcome: outcome(&lines, sender.0, port, t0)?,
                goodput_bps: report.goodput_bps,
            })
        })
        .collect()
}

/// The random-loss share the emulator realised on the data direction must be the configured
/// one (within 5 standard deviations of the count), or the run proves nothing.
fn assert_realised_loss(name: &str, path: &EmulatedPath, loss: f64) -> f64 {
    let f = path.stats().forward;
    let n = f.packets_in as f64;
    let realised = f.dropped_loss as f64 / n.max(1.0);
    // Bursty loss has a larger variance; the bound is generous enough for both.
    let sd = (n * loss * 6.0).sqrt();
    assert!(
        (f.dropped_loss as f64 - n * loss).abs() <= 5.0 * sd + 3.0,
        "{name}: realised loss {:.4}% ({} of {} packets) against {:.3}%",
        realised * 100.0,
        f.dropped_loss,
        f.packets_in,
        loss * 100.0
    );
    println!("{name}: {} packets, random loss {:.3}%, queue drops {}", f.packets_in, realised * 100.0, f.dropped_queue);
    realised
}

/// CUBIC and Reno on a 30 ms and an 80 ms path at each of `losses`, all at once (together they
/// use a small share of each 200 Mbit/s path, so they do not queue), and CUBIC on a bursty path
/// when asked, flagged within 15 s and staying flagged, on a run whose emulator kept its timing.
/// A late emulator adds delay the test did not ask for: srtt then rises before losses, they look
/// congestive, and the flag rightly waits. (A fresh-clone run flagged CUBIC at 0.05 % only after
/// 17.9 s, with 2 of its 16 loss episodes showing queue; its emulator's timing was not recorded.)
fn loss_based_flagged_at(losses: &[f64], bursty_extra: bool) -> Result<()> {
    on_a_faithful_path(3, || loss_based_scenario(losses, bursty_extra))
}

fn loss_based_scenario(losses: &[f64], bursty_extra: bool) -> Result<f64> {
    let mut owned = Vec::new();
    for &loss in losses {
        for rtt in [30, 80] {
            owned.push((format!("{rtt} ms {:.2}%", loss * 100.0), loss, lossy_path(rtt, loss, false)?));
        }
    }
    let ge = if bursty_extra { Some(lossy_path(30, 0.002, true)?) } else { None };
    let mut paths: Vec<(&str, &EmulatedPath)> = owned.iter().map(|(name, _, p)| (name.as_str(), p)).collect();
    let mut flows: Vec<(usize, &str)> = (0..paths.len()).flat_map(|i| [(i, "cubic"), (i, "reno")]).collect();
    if let Some(g) = &ge {
        flows.push((paths.len(), "cubic"));
        paths.push(("30 ms bursty 0.2%", g));
    }
    let judged = run_bulk(&paths, &flows, 20)?;
    for j in &judged {
        println!("{}", j.describe());
    }
    for (name, loss, p) in &owned {
        assert_realised_loss(name, p, *loss);
    }
    if let Some(g) = &ge {
        assert_realised_loss("30 ms bursty", g, 0.002);
    }
    let all: Vec<&EmulatedPath> = paths.iter().map(|(_, p)| *p).collect();
    let late = late_share(&all);
    println!("emulator: {:.2}% of packets released late", late * 100.0);
    let checked = judged.iter().try_for_each(|j| j.check_flagged_and_stays(15.0)).and_then(|()| {
        check_ends(judged.iter().map(|j| {
            let listed = ["30 ms 0.10%", "30 ms 1.00%"].iter().any(|p| j.label.ends_with(p));
            (&j.receiving, if listed { FromReceiver::Flagged } else { FromReceiver::Informative })
        }))
    });
    judged_on(late, checked)
}

/// The three loss rates in one run: at these rates CUBIC and Reno take a few to a few tens of
/// Mbit/s each, so six paths at once (about 100 Mbit/s through the emulator in all) cost it little
/// more than two, and the suite two runs less.
#[test]
fn cubic_and_reno_flagged_at_0_05_0_1_and_1_pct_loss_and_bursty_loss() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    loss_based_flagged_at(&[0.0005, 0.001, 0.01], true)
}

#[test]
fn bbr_on_the_lossy_paths_fills_them_and_is_not_flagged() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    // One tracer for the six runs (each of its starts and stops cost the suite seconds). BBR
    // takes its whole path, and the emulator needs about a core for 200 Mbit/s: the 30 ms and
    // 80 ms paths of each loss rate run side by side at half the lossy paths' rate each, so the
    // emulator carries what one BBR flow on a full-rate path did, in half the suite's time.
    // The paths are made first: the receivers' tracer (see [`ReceivingEnd`]) filters them by
    // name from its start. 16 s a run: the receiving end is compared after its first 10 s.
    let rate = LOSSY_PATH_BPS / 2;
    let mut pairs = Vec::new();
    for loss in [0.0005, 0.001, 0.01] {
        let mut pair = Vec::new();
        for rtt in [30, 80] {
            pair.push((format!("{rtt} ms {:.2}%", loss * 100.0), loss, lossy_path_at(rate, rtt, loss, false)?));
        }
        pairs.push(pair);
    }
    let hidden = receivers_only(&pairs.iter().flatten().map(|(_, _, p)| p).collect::<Vec<_>>())?;
    let tracer = both_ends()?;
    let t0 = monotonic_ns();
    let mut runs = Vec::new();
    for pair in &pairs {
        let mut running = Vec::new();
        for (name, loss, path) in pair {
            let sink = Sink::start(path.receiver(), path.receiver_addr(), PORT, SinkOptions::default())?;
            running.push((name, *loss, path, sink, start(path, PORT, "bbr", SendMode::Bulk, 16)?));
        }
        for (name, loss, path, sink, sender) in running {
            let port = sender.local_port();
            let report = sender.wait()?;
            drop(sink);
            assert_realised_loss(name, path, loss);
            runs.push((name.clone(), loss, path, port, report.goodput_bps));
        }
    }
    let closed: Vec<(u64, u16)> = runs.iter().map(|(_, _, path, port, _)| (path.sender().inode(), *port)).collect();
    wait_all_closed(&tracer, &closed)?;
    let received: Vec<(u64, u16)> = runs.iter().map(|(_, _, path, port, _)| (path.receiver().inode(), *port)).collect();
    wait_receivers_closed(&hidden, &received)?;
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    let (code, hidden_lines) = hidden.stop()?;
    assert_eq!(code, 0, "the receivers' tracer");
    let mut ends = Vec::new();
    for (name, loss, path, port, goodput_bps) in runs {
        let label = format!("bbr on {name}");
        let (netns, receiver) = (path.sender().inode(), path.receiver().inode());
        let receiving = ReceivingEnd::of(&label, &lines, &hidden_lines, (netns, port), receiver);
        let j = Judged { label, outcome: outcome(&lines, netns, port, t0)?, goodput_bps, receiving };
        println!("{}", j.describe());
        assert!(!j.outcome.ever_flagged, "{}", j.describe());
        assert!(j.goodput_bps > rate as f64 / 2.0, "BBR uses the path: {}", j.describe());
        // At the story's loss rates BBR fills the bottleneck, and cctrace says so once BBR is
        // past its start-up (which is window-limited by design, and takes more of the run's
        // verdicts when a loaded host judges fewer of them).
        if loss <= 0.001 {
            assert!(j.outcome.late_share("path") >= 0.5, "{}", j.describe());
        }
        // Not flagged from the receiving end either: it does not cut at its losses.
        let listed = name.starts_with("30 ms") && loss >= 0.001;
        ends.push((j.receiving, if listed { FromReceiver::NotFlagged } else { FromReceiver::Informative }));
    }
    check_ends(ends.iter().map(|(end, want)| (end, *want)))
}

#[test]
fn full_bottlenecks_are_the_path_and_not_flagged() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    on_a_faithful_path(3, full_bottlenecks_scenario)
}

/// CUBIC alone on 40 Mbit/s bottlenecks whose buffers hold a quarter, half, one and four BDPs, and
/// two sharing one; returns the emulator's late-release share. (A stalled emulator releases bursts
/// into a shallow queue: one such run saw ten times the usual drops and 60 % of the link.)
fn full_bottlenecks_scenario() -> Result<f64> {
    let rate = 40_000_000;
    let quarter = bottleneck(rate, 0.25)?;
    let half = bottleneck(rate, 0.5)?;
    let medium = bottleneck(rate, 1.0)?;
    let deep = bottleneck(rate, 4.0)?;
    let shared = bottleneck(rate, 1.0)?;
    let paths = [("quarter", &quarter), ("half", &half), ("medium", &medium), ("deep", &deep), ("shared", &shared)];
    let flows = [(0, "cubic"), (1, "cubic"), (2, "cubic"), (3, "cubic"), (4, "cubic"), (4, "cubic")];
    let judged = run_bulk(&paths, &flows, 20)?;
    for j in &judged {
        println!("{}", j.describe());
    }
    for (name, p) in paths {
        let f = p.stats().forward;
        assert_eq!(f.dropped_loss, 0, "{name}: no random loss");
        println!("{name}: queue drops {}, max queue {} B", f.dropped_queue, f.max_queue_bytes);
    }
    let late = late_share(&[&quarter, &half, &medium, &deep, &shared]);
    println!("emulator: {:.2}% of packets released late", late * 100.0);
    judged_on(late, check_full_bottlenecks(&judged, rate))
}

fn check_full_bottlenecks(judged: &[Judged], rate: u64) -> Result<()> {
    for j in judged {
        anyhow::ensure!(!j.outcome.ever_flagged, "{}", j.describe());
    }
    // From the receiving end, a shallow (half a BDP) and a deep queue are the path too. A quarter
    // of a BDP at 30 ms holds 7.5 ms, barely above the 5 ms the queue at a loss must exceed: the
    // segment after a tail drop may arrive once a burst's queue drained, and the receiving end
    // then reads the loss as clean (docs/flagging.md, the cases it gets wrong). It is printed.
    check_ends(judged.iter().enumerate().map(|(i, j)| {
        (&j.receiving, if i == 1 || i == 3 { FromReceiver::Says("path") } else { FromReceiver::Informative })
    }))?;
    // Alone on its bottleneck, each flow is told it fills the path: from the queue before its
    // losses (the quarter) or its standing queue (the others).
    // Until a shallow buffer's flow has lost twice after queueing it is only window-limited
    // ("cwnd", unflagged); from then on it must say "path" and keep saying it.
    let path_evidence =
        |line: &Value| line["limited_by"] == "path" || line["evidence"]["queued_episodes"].as_u64() >= Some(2);
    // A deep enough buffer keeps the link busy through CUBIC's cuts (measured 0.96 of the rate
    // every run); half a BDP does too, as CUBIC's cut to 0.7 of 1.5 BDPs stays above one. A
    // quarter-BDP one does not: after each cut the window is below the BDP until it regrows,
    // and the emulator's bursts on a loaded host cost more than one drop per episode (measured
    // 0.60-0.85).
    let min_utilisation = [0.5, 0.8, 0.9, 0.9];
    for (j, min_utilisation) in judged[..4].iter().zip(min_utilisation) {
        anyhow::ensure!(j.outcome.last["limited_by"] == "path", "{}", j.describe());
        let share = j.outcome.share_once("path", path_evidence);
        anyhow::ensure!(share.is_some_and(|s| s >= 0.9), "path share once evidenced {share:?}: {}", j.describe());
        anyhow::ensure!(j.goodput_bps > min_utilisation * rate as f64, "{}", j.describe());
    }
    Ok(())
}

/// With the kernel's BTF hidden from cctrace, the regimes a user meets, at once under one tracer
/// (about 160 Mbit/s through the emulator in all): CUBIC on a 0.1 % lossy 40 ms path flagged with
/// the BBR fix, BBR on another not flagged and `path`, CUBIC alone on a full bottleneck `path`,
/// a receiver with a small buffer `rwnd`. The verdicts come from sock_diag's view of the sockets.
#[test]
fn without_btf_the_regimes_are_judged_as_with_it() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    on_a_faithful_path(3, without_btf_scenario)
}

fn without_btf_scenario() -> Result<f64> {
    let lossy = lossy_path(40, 0.001, false)?;
    let bbr_path = lossy_path_at(LOSSY_PATH_BPS / 2, 40, 0.001, false)?;
    let full = bottleneck(40_000_000, 1.0)?;
    let clean = wan(0.0)?;
    let tracer = Tracer::start_without_btf(&["--interval", "1000"])?;
    anyhow::ensure!(tracer.stderr().contains("mode without BTF"), "{}", tracer.stderr());
    let mut sinks = Vec::new();
    for p in [&lossy, &bbr_path, &full] {
        sinks.push(Sink::start(p.receiver(), p.receiver_addr(), PORT, SinkOptions::default())?);
    }
    let small = SinkOptions { rcvbuf: Some(32 * 1024) };
    sinks.push(Sink::start(clean.receiver(), clean.receiver_addr(), SMALL_RCVBUF_PORT, small)?);
    let t0 = monotonic_ns();
    let secs = 20;
    let flows = [
        ("cubic 0.1%", &lossy, PORT, "cubic"),
        ("bbr 0.1%", &bbr_path, PORT, "bbr"),
        ("cubic full", &full, PORT, "cubic"),
        ("cubic rwnd", &clean, SMALL_RCVBUF_PORT, "cubic"),
    ];
    let mut started = Vec::new();
    for (name, p, port, cc) in flows {
        started.push((name, p, start(p, port, cc, SendMode::Bulk, secs)?));
    }
    let mut done = Vec::new();
    for (name, p, s) in started {
        let port = s.local_port();
        let report = s.wait()?;
        done.push((name, p.sender().inode(), p.receiver().inode(), port, report.goodput_bps));
    }
    let closed: Vec<(u64, u16)> = done.iter().map(|(_, netns, _, port, _)| (*netns, *port)).collect();
    wait_all_closed(&tracer, &closed)?;
    let (code, lines) = tracer.stop()?;
    anyhow::ensure!(code == 0);
    drop(sinks);
    let mut judged = HashMap::new();
    for (name, netns, receiver, port, goodput_bps) in done {
        // Without BTF nothing counts a receiving socket's segments: its end is not judged.
        let receiving = ReceivingEnd::of(name, &lines, &[], (netns, port), receiver);
        let j = Judged { label: name.to_string(), outcome: outcome(&lines, netns, port, t0)?, goodput_bps, receiving };
        println!("{}", j.describe());
        judged.insert(name, j);
    }
    assert_realised_loss("cubic 0.1%", &lossy, 0.001);
    let late = late_share(&[&lossy, &bbr_path, &full, &clean]);
    println!("emulator: {:.2}% of packets released late", late * 100.0);
    judged_on(late, check_without_btf(&judged, &lossy))
}

fn check_without_btf(judged: &HashMap<&str, Judged>, lossy: &EmulatedPath) -> Result<()> {
    let cubic = &judged["cubic 0.1%"];
    cubic.check_flagged_and_stays(15.0)?;
    let fix = cubic.outcome.last["fix"].to_string();
    let switch = format!("ip netns exec {} sysctl -w net.ipv4.tcp_congestion_control=bbr", lossy.sender().name());
    anyhow::ensure!(fix.contains(&switch), "{fix}");
    let bbr = &judged["bbr 0.1%"];
    anyhow::ensure!(!bbr.outcome.ever_flagged, "{}", bbr.describe());
    anyhow::ensure!(bbr.outcome.late_share("path") >= 0.5, "{}", bbr.describe());
    let full = &judged["cubic full"];
    anyhow::ensure!(!full.outcome.ever_flagged && full.outcome.last["limited_by"] == "path", "{}", full.describe());
    let rwnd = &judged["cubic rwnd"];
    anyhow::ensure!(!rwnd.outcome.ever_flagged && rwnd.outcome.last["limited_by"] == "rwnd", "{}", rwnd.describe());
    judged.values().try_for_each(|j| j.receiving.not_judged_without_btf())
}

// ---- Long fat paths (issue 46) ----

/// A long fat path: 240 ms, 150 Mbit/s with a quarter-BDP queue, 0.05 % random loss.
const LONG_FAT_BPS: u64 = 150_000_000;
const LONG_FAT_RTT_MS: u64 = 240;
const LONG_FAT_LOSS: f64 = 0.0005;
/// The kernel's default `tcp_wmem` (the lab raises its namespaces' to 32 MiB).
const KERNEL_WMEM: &str = "4096 16384 4194304";
/// CUBIC there must be flagged within this long of its start, in every run.
const LONG_FAT_FLAG_WITHIN: f64 = 20.0;

#[test]
fn long_fat_paths_flag_cubic_within_20_s_and_name_bbr_s_send_buffer() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    on_a_faithful_path(2, long_fat_scenario)
}

/// CUBIC and BBR side by side, each on a long fat path of its own with the kernel's default
/// send buffer maximum, for 25 s under one tracer; returns the emulator's late-release share.
fn long_fat_scenario() -> Result<f64> {
    let cubic_path = lossy_path_at(LONG_FAT_BPS, LONG_FAT_RTT_MS, LONG_FAT_LOSS, false)?;
    let bbr_path = lossy_path_at(LONG_FAT_BPS, LONG_FAT_RTT_MS, LONG_FAT_LOSS, false)?;
    for p in [&cubic_path, &bbr_path] {
        p.sender().sysctl_set("net.ipv4.tcp_wmem", KERNEL_WMEM)?;
    }
    let paths = [("240 ms 0.05%", &cubic_path), ("240 ms 0.05% (bbr)", &bbr_path)];
    let judged = run_bulk(&paths, &[(0, "cubic"), (1, "bbr")], 25)?;
    for j in &judged {
        println!("{}", j.describe());
    }
    for (name, p) in paths {
        assert_realised_loss(name, p, LONG_FAT_LOSS);
    }
    let late = late_share(&[&cubic_path, &bbr_path]);
    println!("emulator: {:.2}% of packets released late", late * 100.0);
    judged_on(late, check_long_fat(&judged))
}

fn check_long_fat(judged: &[Judged]) -> Result<()> {
    let (cubic, bbr) = (&judged[0], &judged[1]);
    cubic.check_flagged_and_stays(LONG_FAT_FLAG_WITHIN)?;
    // BBR is held by the kernel's default 4 MiB: named `sndbuf` within the same time and from
    // then on in most of its verdicts (never flagged as loss-based: every record's words agree).
    let o = &bbr.outcome;
    let since = |v: &Value| v["ts_ns"].as_u64().unwrap_or(0).saturating_sub(o.start_ns) as f64 / 1e9;
    let first = o.judged.iter().find(|v| v["limited_by"] == "sndbuf").map(since);
    println!("BBR named sndbuf after {first:?} s");
    anyhow::ensure!(
        first.is_some_and(|s| s <= LONG_FAT_FLAG_WITHIN),
        "BBR not sndbuf within {LONG_FAT_FLAG_WITHIN} s:{}",
        trail(o)
    );
    let share = o.share_once("sndbuf", |v| v["limited_by"] == "sndbuf");
    anyhow::ensure!(share.is_some_and(|s| s >= 0.75), "sndbuf in {share:?} of its verdicts since:{}", trail(o));
    anyhow::ensure!(o.last["limited_by"] == "sndbuf", "{}", bbr.describe());
    Ok(())
}

// ---- From the receiving end (issue 48) ----
//
// Every run above is judged from both ends at once: the tracer that sees every namespace judges
// each flow at its sender and, from the receiving socket alone, at its receiver (the receiving
// end's verdict is in its `evidence.remote_sender` while its sender is on this host); a second
// tracer filtered in the kernel to the receivers' namespaces (`--netns`) cannot see the senders
// at all, and judges the same transfers as a download from a remote host. One transfer judged
// three ways costs the suite a tracer's start, not a transfer.

/// The tracer that sees both ends of every flow. A receiving socket whose sender is on this host
/// does not keep `tcp_probe` attached (its sender's socket is judged), so its receiving end's
/// counts would have the windows' gaps: attached for good, every segment is counted, and the
/// receiving end's verdict can be checked against its sender's.
fn both_ends() -> Result<Tracer> {
    let mut args = vec!["--interval".to_string(), "1000".to_string(), "--probe-always-attached".to_string()];
    // With CCT_DUMP the run is also recorded there, so a misjudged flow can be replayed and its
    // samples read back (`cctrace export`).
    if let Ok(dir) = std::env::var("CCT_DUMP") {
        args.extend(["--record".to_string(), format!("{dir}/run-{}.cct", monotonic_ns())]);
    }
    Tracer::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A tracer that sees only the receivers' namespaces of `paths`.
fn receivers_only(paths: &[&EmulatedPath]) -> Result<Tracer> {
    let mut args = vec!["--interval".to_string(), "1000".to_string()];
    for p in paths {
        args.extend(["--netns".to_string(), p.receiver().name().to_string()]);
    }
    Tracer::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The flow lines of the receiving socket of the flow its sender sent from `sender_port`, while
/// open: the sink's side of it in the receiver's namespace.
fn receiving_lines(lines: &[Value], receiver_netns: u64, sender_port: u16) -> Vec<Value> {
    lines
        .iter()
        .filter(|v| {
            v["type"] == "flow"
                && v["netns"].as_u64() == Some(receiver_netns)
                && v["dport"] == sender_port
                && v["closed"] == false
        })
        .cloned()
        .collect()
}

/// Wait until a tracer said the receiving socket of each flow (receiver netns, sender port)
/// closed.
fn wait_receivers_closed(tracer: &Tracer, flows: &[(u64, u16)]) -> Result<()> {
    for &(netns, port) in flows {
        tracer.wait_for(&format!("the close of the receiver of :{port}"), Duration::from_secs(15), |lines| {
            lines.iter().any(|v| {
                v["type"] == "flow" && v["netns"].as_u64() == Some(netns) && v["dport"] == port && v["closed"] == true
            })
        })?;
    }
    Ok(())
}

/// What two ends are compared by: the flag, else the class where it names a limit both ends
/// can see (the path, this host's window, a sender with little to send); every other
/// unflagged class is one.
fn end_class(limited_by: &str, flagged: bool) -> &'static str {
    match (flagged, limited_by) {
        (true, _) => "flagged",
        (false, "path") => "path",
        (false, "rwnd") => "rwnd",
        (false, "application") => "application",
        (false, "unknown" | "receiving") => "not judged",
        _ => "unflagged",
    }
}

/// One evaluation of one end: when (the sample's clock), its class.
type Judgment = (u64, &'static str);

fn sender_judgments(lines: &[Value]) -> Vec<Judgment> {
    lines
        .iter()
        .filter(|v| v["closed"] == false)
        .map(|v| {
            let class = end_class(v["limited_by"].as_str().unwrap_or(""), v["flagged"] == true);
            (v["ts_ns"].as_u64().unwrap_or(0), class)
        })
        .collect()
}

/// The receiving end's own judgment in one line, its class and flag: its verdict where the
/// sender is not seen (`hidden`), its `remote_sender` evidence where it is.
fn receiving_judgment(v: &Value, hidden: bool) -> (&str, bool) {
    let r = &v["evidence"]["remote_sender"];
    if hidden {
        (v["limited_by"].as_str().unwrap_or(""), v["flagged"] == true)
    } else {
        (r["limited_by"].as_str().unwrap_or("receiving"), r["flagged"] == true)
    }
}

/// The receiving end's own judgments over its lines.
fn receiver_judgments(lines: &[Value], hidden: bool) -> Vec<Judgment> {
    lines
        .iter()
        .map(|v| {
            let (limited_by, flagged) = receiving_judgment(v, hidden);
            (v["ts_ns"].as_u64().unwrap_or(0), end_class(limited_by, flagged))
        })
        .collect()
}

/// Of the receiving end's judgments `after_s` seconds past `start_ns`, the share whose class is
/// the sender's at its nearest judgment (within 1.5 s), and how many were compared.
fn agreement(sender: &[Judgment], receiver: &[Judgment], start_ns: u64, after_s: f64) -> (f64, usize) {
    let from = start_ns + (after_s * 1e9) as u64;
    let mut compared = 0;
    let mut agreed = 0;
    for &(ts, class) in receiver.iter().filter(|(ts, _)| *ts >= from) {
        let nearest =
            sender.iter().filter(|(s, _)| s.abs_diff(ts) <= 1_500_000_000).min_by_key(|(s, _)| s.abs_diff(ts));
        let Some(&(_, sender_class)) = nearest else { continue };
        compared += 1;
        agreed += usize::from(sender_class == class);
    }
    (if compared == 0 { 0.0 } else { agreed as f64 / compared as f64 }, compared)
}

/// What the receiving end must say of a flow, beyond agreeing with its sender.
#[derive(Clone, Copy, Debug, PartialEq)]
enum FromReceiver {
    /// Flagged within 15 s of the flow's start, and on at least 80 % of the judgments after.
    Flagged,
    NotFlagged,
    /// Not flagged, and its last judgment says this.
    Says(&'static str),
    /// Agreement printed, nothing required (a case the issue does not list).
    Informative,
}

/// Check every end against what it must say, and fail with all that did not (one failed flow
/// must not hide what the others showed).
fn check_ends<'a>(ends: impl Iterator<Item = (&'a ReceivingEnd, FromReceiver)>) -> Result<()> {
    let failed: Vec<String> = ends.filter_map(|(end, want)| end.check(want).err()).map(|e| format!("{e:#}")).collect();
    anyhow::ensure!(failed.is_empty(), "{} receiving ends failed:\n{}", failed.len(), failed.join("\n"));
    Ok(())
}

/// One flow judged from its receiving end: both tracers' lines of its receiving socket.
struct ReceivingEnd {
    label: String,
    /// The tracer that sees both ends: the sender's lines, the receiver's.
    sender: Vec<Value>,
    receiver: Vec<Value>,
    /// The tracer that sees only the receivers.
    hidden: Vec<Value>,
    start_ns: u64,
}

impl ReceivingEnd {
    fn of(label: &str, both: &[Value], hidden: &[Value], sender: (u64, u16), receiver_netns: u64) -> Self {
        let sender_lines = lines_of(both, sender.0, sender.1);
        let start_ns = sender_lines
            .iter()
            .chain(receiving_lines(hidden, receiver_netns, sender.1).iter())
            .filter_map(|v| v["ts_ns"].as_u64())
            .min()
            .unwrap_or(0);
        Self {
            label: label.to_string(),
            sender: sender_lines,
            receiver: receiving_lines(both, receiver_netns, sender.1),
            hidden: receiving_lines(hidden, receiver_netns, sender.1),
            start_ns,
        }
    }

    /// Whether either receiver's judgment was ever `class`.
    fn said(&self, class: &str) -> bool {
        let judged = |lines: &[Value], hidden| receiver_judgments(lines, hidden).into_iter().any(|(_, c)| c == class);
        judged(&self.receiver, false) || judged(&self.hidden, true)
    }

    /// The lowest queue threshold the receivers judged the queue at a loss against (ms).
    fn queue_threshold_ms(&self) -> f64 {
        self.receiver
            .iter()
            .chain(&self.hidden)
            .filter_map(|v| v["evidence"]["remote_sender"]["queue_threshold_ms"].as_f64())
            .fold(f64::INFINITY, f64::min)
    }

    /// Both receivers' judgments with the numbers they rest on: the hidden tracer's, then the
    /// one that sees both ends (where the class is its `remote_sender` evidence's).
    fn trail(&self) -> String {
        format!(
            "\n  sender hidden:{}\n  both ends seen:{}",
            Self::trail_of(&self.hidden, self.start_ns, true),
            Self::trail_of(&self.receiver, self.start_ns, false)
        )
    }

    fn trail_of(lines: &[Value], start_ns: u64, hidden: bool) -> String {
        lines
            .iter()
            .map(|v| {
                let r = &v["evidence"]["remote_sender"];
                let (limited_by, flagged) = receiving_judgment(v, hidden);
                format!(
                    "\n  {:5.1} s {:<11} flagged={:<5} episodes {} ({} clean, queue at loss {} ms of {} ms) cut {} goodput {:.1} Mbit/s response {:.1}: {}",
                    v["ts_ns"].as_u64().unwrap_or(0).saturating_sub(start_ns) as f64 / 1e9,
                    limited_by,
                    flagged,
                    r["loss_episodes"],
                    r["clean_episodes"],
                    r["queue_at_loss_ms"],
                    r["queue_threshold_ms"],
                    r["median_cut"],
                    r["goodput_bps"].as_f64().unwrap_or(0.0) / 1e6,
                    r["response_bps"].as_f64().unwrap_or(0.0) / 1e6,
                    r["not_flagged"].as_str().unwrap_or(""),
                )
            })
            .collect()
    }

    /// Without BTF: every receiving line says `receiving`, with its receiving fields null and no
    /// judgment of its own (sock_diag cannot count segments).
    fn not_judged_without_btf(&self) -> Result<()> {
        anyhow::ensure!(!self.receiver.is_empty(), "{}: no receiving lines", self.label);
        for v in &self.receiver {
            anyhow::ensure!(
                v["receive"].is_null() && v["evidence"]["remote_sender"].is_null(),
                "{}: receiving fields without BTF: {v}",
                self.label
            );
            let class = v["limited_by"].as_str().unwrap_or_default();
            anyhow::ensure!(
                matches!(class, "receiving" | "unknown" | "idle"),
                "{}: judged as {class}: {v}",
                self.label
            );
        }
        Ok(())
    }

    /// The receiving end agrees with the sender's own verdict on at least 80 % of its judgments
    /// after the first ten seconds, seen from both tracers; and says what `want` asks.
    fn check(&self, want: FromReceiver) -> Result<()> {
        let sender = sender_judgments(&self.sender);
        let (both, n_both) = agreement(&sender, &receiver_judgments(&self.receiver, false), self.start_ns, 10.0);
        let (hidden, n_hidden) = agreement(&sender, &receiver_judgments(&self.hidden, true), self.start_ns, 10.0);
        let classes = |j: Vec<Judgment>| j.into_iter().map(|(_, c)| c).collect::<Vec<_>>();
        println!(
            "{}: receiving end agrees with the sender on {:.0}% of {n_both} (both seen) and {:.0}% of {n_hidden} (sender hidden)\n  sender {:?}\n  both   {:?}\n  hidden {:?}",
            self.label,
            both * 100.0,
            hidden * 100.0,
            classes(sender_judgments(&self.sender)),
            classes(receiver_judgments(&self.receiver, false)),
            classes(receiver_judgments(&self.hidden, true)),
        );
        if want == FromReceiver::Informative {
            return Ok(());
        }
        anyhow::ensure!(n_both >= 3 && n_hidden >= 3, "{}: too few judgments after 10 s{}", self.label, self.trail());
        anyhow::ensure!(both >= 0.8, "{}: agreement {:.2} with both ends seen{}", self.label, both, self.trail());
        anyhow::ensure!(
            hidden >= 0.8,
            "{}: agreement {:.2} with the sender hidden{}",
            self.label,
            hidden,
            self.trail()
        );
        let flagged_at = self
            .hidden
            .iter()
            .find(|v| v["flagged"] == true)
            .and_then(|v| v["ts_ns"].as_u64())
            .map(|ts| ts.saturating_sub(self.start_ns) as f64 / 1e9);
        let last = self.hidden.last().context("no receiving-end lines")?;
        match want {
            FromReceiver::Flagged => {
                let at = flagged_at.with_context(|| format!("{}: never flagged{}", self.label, self.trail()))?;
                anyhow::ensure!(at <= 15.0, "{}: flagged only after {at:.1} s{}", self.label, self.trail());
                anyhow::ensure!(last["flagged"] == true, "{}: stays flagged{}", self.label, self.trail());
                let verdict = last["verdict"].as_str().unwrap_or_default();
                anyhow::ensure!(
                    verdict.contains("Mathis bound")
                        && verdict.contains("On the sender's host")
                        && verdict.contains("net.ipv4.tcp_congestion_control=bbr"),
                    "{verdict}"
                );
                anyhow::ensure!(last["fix"].is_null(), "nothing to change on this host: {}", last["fix"]);
            }
            FromReceiver::NotFlagged => {
                anyhow::ensure!(flagged_at.is_none(), "{}: flagged{}", self.label, self.trail());
            }
            FromReceiver::Says(class) => {
                anyhow::ensure!(flagged_at.is_none(), "{}: flagged{}", self.label, self.trail());
                anyhow::ensure!(
                    last["limited_by"] == class,
                    "{}: says {}{}",
                    self.label,
                    last["limited_by"],
                    self.trail()
                );
            }
            FromReceiver::Informative => {}
        }
        Ok(())
    }
}
