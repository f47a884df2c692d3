//! End-to-end: the real `cctrace --json` against real TCP traffic in lab network namespaces,
//! checked against the kernel's own view (`ss -tni`, `nstat`).

use cctrace_lab::child::{interrupt_within, OutputWithin, CHILD_DEADLINE};
use std::time::Duration;

use anyhow::{Context, Result};
use cctrace_lab::{
    EmulatedPath, EmulatedPathSpec, PathSpec, SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair,
};
use cctrace_tests::{
    bpf_held_by, bpf_ids, loaded_bpf_programs, monotonic_ns, nstat_in, require_kernel, serial, ss_in, HeldBpf, Tracer,
};
use serde_json::Value;

const PORT: u16 = cctrace_lab::SINK_PORT;

/// Samples of the flow whose local port is `port` in namespace `netns`.
fn flow_samples(t: &Tracer, netns: u64, port: u16) -> Vec<Value> {
    t.samples(|v| v["netns"].as_u64() == Some(netns) && v["sport"].as_u64() == Some(u64::from(port)))
}

/// A bulk sender from the lab's sender namespace to its sink, for `secs` seconds.
fn bulk(lab: &VethPair, cc: &str, secs: u64) -> Result<Sender> {
    Sender::start(
        lab.sender(),
        lab.receiver_addr(),
        PORT,
        SenderOptions::new(cc, SendMode::Bulk, Duration::from_secs(secs)),
    )
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// How a test starts cctrace: with the kernel's BTF, or with it hidden (the mode without BTF).
type Start = fn(&[&str]) -> Result<Tracer>;

#[test]
fn samples_agree_with_ss() -> Result<()> {
    require_kernel!();
    samples_agree_with_ss_when(Tracer::start)
}

/// Without BTF the samples are sock_diag's `tcp_info`, read for the flows the tracepoints'
/// records name: the same bounds hold.
#[test]
fn samples_agree_with_ss_without_btf() -> Result<()> {
    require_kernel!();
    samples_agree_with_ss_when(Tracer::start_without_btf)
}

fn samples_agree_with_ss_when(start: Start) -> Result<()> {
    let _serial = serial();
    // 20 ms RTT, a 40 Mbit/s bottleneck with a 64 KiB queue: the bulk phase overflows the queue
    // (so ssthresh gets set), the trickle phase after it is loss free, so cwnd holds still.
    let spec = EmulatedPathSpec::new(PathSpec::delay(Duration::from_millis(10)).with_rate(40_000_000, 64 << 10));
    let lab = EmulatedPath::create(spec)?;
    let tracer = start(&["--sample-ms", "20", "--interval", "500"])?;
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let sender = Sender::start(
        lab.sender(),
        lab.receiver_addr(),
        PORT,
        SenderOptions {
            congestion: Some("cubic".into()),
            mode: SendMode::BulkThenTrickle {
                bulk_for: Duration::from_secs(2),
                trickle_every: Duration::from_millis(20),
                trickle_bytes: 1000,
            },
            // Longer than three readings take however late the lines come (each waits for
            // samples half a second past it to be printed); stopped once they are done.
            duration: Duration::from_secs(30),
            nodelay: true,
            // A modest send buffer: the bulk phase must not leave megabytes queued that would
            // keep cwnd moving into the trickle phase.
            sndbuf: Some(256 << 10),
            ..Default::default()
        },
    )?;
    let port = sender.local_port();
    let netns = lab.sender().inode();
    // The readings compare values that hold still once the trickle runs: wait, in the flow's
    // own samples, for the bulk phase to be over: its two seconds past, its losses having set
    // ssthresh, and under 100 kB acked over the last half second (the bulk phase acks 2.5 MB
    // in that time, the trickle 25 kB).
    let half_s = 500_000_000;
    tracer.wait_for("the trickle phase", Duration::from_secs(20), |lines| {
        let mine: Vec<&Value> = lines
            .iter()
            .filter(|v| {
                v["type"] == "sample"
                    && v["netns"].as_u64() == Some(netns)
                    && v["sport"].as_u64() == Some(u64::from(port))
            })
            .collect();
        let (Some(first), Some(last)) = (mine.first(), mine.last()) else { return false };
        let t = u(last, "ts_ns");
        let Some(before) = mine.iter().rev().find(|s| u(s, "ts_ns") + half_s <= t) else { return false };
        t >= u(first, "ts_ns") + 2_000_000_000 + half_s
            && !last["ssthresh"].is_null()
            && u(last, "bytes_acked").saturating_sub(u(before, "bytes_acked")) < 100_000
    })?;

    let mut checked = 0;
    for _ in 0..3 {
        // ss reads the socket at some instant between t0 and t1, which cctrace's samples
        // bracket: the last one before t0 and the first one after t1 (and any taken in between).
        let t0 = monotonic_ns();
        let ss = ss_in(lab.sender().name())?;
        let t1 = monotonic_ns();
        let sock = ss.iter().find(|s| s.local_port() == Some(port)).context("ss does not list the flow")?;
        // Wait for the samples after the reading to be printed: the bracket, and half a second
        // more to see how this flow's samples are spaced around it.
        let around_ns = 500_000_000;
        tracer.wait_for("samples after the ss reading", Duration::from_secs(10), |lines| {
            lines.iter().any(|v| {
                v["type"] == "sample"
                    && v["netns"].as_u64() == Some(netns)
                    && v["sport"].as_u64() == Some(u64::from(port))
                    && v["ts_ns"].as_u64().is_some_and(|ts| ts > t1 + around_ns)
            })
        })?;
        let mut samples = flow_samples(&tracer, netns, port);
        samples.sort_by_key(|s| u(s, "ts_ns"));
        let ts = |s: &Value| u(s, "ts_ns");
        let first = samples.iter().rposition(|s| ts(s) < t0).context("no sample before the ss reading")?;
        let last = samples.iter().position(|s| ts(s) > t1).context("no sample after the ss reading")?;
        let bracket = &samples[first..=last];

        // How far apart this flow's samples are around the reading (not counting the bracket):
        // the bracket may span the reading plus two of the widest spacings seen.
        let spacing: Vec<u64> = samples
            .windows(2)
            .filter(|w| {
                let (a, b) = (ts(&w[0]), ts(&w[1]));
                (a + around_ns >= t0 && b <= ts(&bracket[0]))
                    || (a >= ts(&bracket[bracket.len() - 1]) && b <= t1 + around_ns)
            })
            .map(|w| ts(&w[1]) - ts(&w[0]))
            .collect();
        let widest = *spacing.iter().max().context("too few samples around the reading to judge their spacing")?;
        let width = ts(&bracket[bracket.len() - 1]) - ts(&bracket[0]);
        let allowed = (t1 - t0) + 2 * widest;
        // srtt moves by one EWMA step per ACK; between two samples by at least that much. The
        // widest step seen between consecutive samples around the reading bounds one ACK's.
        let srtt = |s: &Value| f(s, "rtt");
        let step_ms = samples
            .windows(2)
            .filter(|w| ts(&w[0]) + around_ns >= t0 && ts(&w[1]) <= t1 + around_ns)
            .map(|w| (srtt(&w[1]) - srtt(&w[0])).abs())
            .fold(0.0_f64, f64::max);
        let (lo, hi) = bracket.iter().map(srtt).fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));

        let ss_cwnd = sock.num("cwnd").context("ss cwnd")? as u64;
        let ss_mss = sock.num("mss").context("ss mss")? as u64;
        let ss_ssthresh = sock.num("ssthresh").context("ss ssthresh: the bulk phase should have set it")? as u64;
        let (ss_rtt, _) = sock.rtt().context("ss rtt")?;
        let values = |k: &str| bracket.iter().map(|s| u(s, k)).collect::<Vec<_>>();
        eprintln!(
            "ss read in {:.1} ms; {} samples bracket it over {:.1} ms (allowed {:.1}: widest spacing around {:.1} ms): \
             cwnd {:?} vs ss {ss_cwnd}, ssthresh {:?} vs {ss_ssthresh}, mss {:?} vs {ss_mss}, \
             srtt {lo:.3}..{hi:.3} (+/- {step_ms:.3}) vs ss {ss_rtt} ms",
            (t1 - t0) as f64 / 1e6,
            bracket.len(),
            width as f64 / 1e6,
            allowed as f64 / 1e6,
            widest as f64 / 1e6,
            values("cwnd"),
            values("ssthresh"),
            values("mss"),
        );
        assert!(width <= allowed, "the samples around the reading are {width} ns apart, more than {allowed} ns");
        // cwnd, ssthresh and mss hold still in the trickle phase; where one changed between
        // the samples, ss saw one of the values cctrace reported.
        assert!(values("cwnd").contains(&ss_cwnd), "cwnd: ss {ss_cwnd}, cctrace {:?}", values("cwnd"));
        assert!(values("ssthresh").contains(&ss_ssthresh), "ssthresh: ss {ss_ssthresh}");
        assert!(values("mss").contains(&ss_mss), "mss: ss {ss_mss}");
        // ss prints srtt in ms with three decimals.
        let slack = step_ms + 0.001;
        assert!(
            ss_rtt >= lo - slack && ss_rtt <= hi + slack,
            "srtt: ss {ss_rtt} ms outside cctrace's {lo:.3}..{hi:.3} ms +/- {slack:.3}"
        );
        assert!(lo >= 20.0, "the path has a 20 ms RTT; cctrace says srtt {lo} ms");
        checked += 1;
    }
    assert_eq!(checked, 3);
    sender.stop();
    let report = sender.wait()?;
    assert!(report.bytes_acked > 1_000_000, "the bulk phase moved data: {report:?}");
    let (code, _) = tracer.stop()?;
    assert_eq!(code, 0);
    Ok(())
}

#[test]
fn retransmissions_ca_states_and_close_match_the_kernel() -> Result<()> {
    require_kernel!();
    retransmissions_ca_states_and_close_when(Tracer::start)
}

/// With the kernel's BTF hidden, cctrace picks the mode without it by itself, says so, and loads
/// only classic tracepoint programs; the flow's retransmissions, CA states and close are still
/// the kernel's, and its sender is named.
#[test]
fn without_btf_the_mode_is_picked_by_itself_and_matches_the_kernel() -> Result<()> {
    require_kernel!();
    retransmissions_ca_states_and_close_when(Tracer::start_without_btf)
}

/// Every program `pid` holds is a classic tracepoint's (bpftool's type `tracepoint`): none is
/// BTF-typed (`tracing`: tp_btf, iterators), none runs on packets.
fn only_tracepoint_programs(pid: u32) -> Result<usize> {
    let held = bpf_held_by(pid)?;
    let mut ids: Vec<u32> = held.programs;
    for link in &held.links {
        let out = std::process::Command::new("bpftool")
            .args(["-j", "link", "show", "id", &link.to_string()])
            .output_within(CHILD_DEADLINE)?;
        let v: Value = serde_json::from_slice(&out.stdout).context("parsing bpftool link")?;
        ids.extend(v["prog_id"].as_u64().and_then(|i| u32::try_from(i).ok()));
    }
    ids.sort_unstable();
    ids.dedup();
    for id in &ids {
        let out = std::process::Command::new("bpftool")
            .args(["-j", "prog", "show", "id", &id.to_string()])
            .output_within(CHILD_DEADLINE)?;
        let v: Value = serde_json::from_slice(&out.stdout).context("parsing bpftool prog")?;
        assert_eq!(v["type"], "tracepoint", "program {id} of cctrace without BTF: {v}");
    }
    Ok(ids.len())
}

fn retransmissions_ca_states_and_close_when(start: Start) -> Result<()> {
    let _serial = serial();
    let lab = VethPair::create(VethOptions { loss: 0.02 })?;
    let tracer = start(&["--sample-ms", "50", "--interval", "500"])?;
    let without_btf = tracer.stderr().contains("mode without BTF");
    if without_btf {
        let stderr = tracer.stderr();
        assert!(stderr.contains("cctrace: mode without BTF (no kernel BTF"), "picked by itself: {stderr}");
        let programs = only_tracepoint_programs(tracer.pid())?;
        assert!(programs >= 4, "tcp_probe, retransmissions, state changes and destroy at least: {programs}");
    }
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let sender_ns = lab.sender().name().to_string();
    let retrans_before = nstat_in(&sender_ns, "TcpRetransSegs")?;
    let sender = bulk(&lab, "cubic", 3)?;
    let port = sender.local_port();
    let report = sender.wait()?;
    let netns = lab.sender().inode();
    // The close and destroy samples follow the FIN exchange.
    tracer.wait_closed(netns, port, Duration::from_secs(10))?;
    let retrans_after = nstat_in(&sender_ns, "TcpRetransSegs")?;
    let kernel_delta = retrans_after - retrans_before;
    let samples = flow_samples(&tracer, netns, port);
    let last = samples.last().context("no samples")?;
    let traced = u(last, "retrans");
    assert!(kernel_delta > 100, "2 % loss over 3 s must cause retransmissions (nstat delta {kernel_delta})");
    let err = (traced as f64 - kernel_delta as f64).abs() / kernel_delta as f64;
    eprintln!(
        "retransmissions: cctrace {traced}, nstat TcpRetransSegs delta {kernel_delta}, sender TCP_INFO {}",
        report.total_retrans
    );
    if without_btf {
        // Its counters are sock_diag's at each look, and the socket closed within an interval of
        // its last one (docs/json.md): short by at most what one look's interval carried, read
        // from the flow's own steps before its last sample.
        let counts: Vec<u64> = samples.iter().map(|v| u(v, "retrans")).collect();
        let step =
            counts[..counts.len().saturating_sub(1)].windows(2).map(|w| w[1].saturating_sub(w[0])).max().unwrap_or(0);
        eprintln!("without BTF: the largest step between looks {step}, over {} samples", counts.len());
        assert!(
            traced + step >= kernel_delta && traced as f64 <= kernel_delta as f64 * 1.02,
            "cctrace retrans {traced} vs nstat TcpRetransSegs delta {kernel_delta} (one look's step {step})"
        );
    } else {
        assert!(
            err <= 0.02,
            "cctrace retrans {traced} vs nstat TcpRetransSegs delta {kernel_delta} ({:.2}%)",
            err * 100.0
        );
    }
    if without_btf {
        // Read by sock_diag at the flow's last look before it closed: a retransmission of its
        // last interval (its FIN's, say) may come after that look.
        assert!(traced <= u64::from(report.total_retrans), "no more than the sender's own TCP_INFO");
    } else {
        assert_eq!(u64::from(report.total_retrans), traced, "the sender's own TCP_INFO agrees");
    }

    // CA state: Recovery or Loss under loss, and back to Open.
    let states: Vec<&str> = samples.iter().filter_map(|s| s["ca_state"].as_str()).collect();
    let first_bad = states.iter().position(|s| *s == "Recovery" || *s == "Loss").context("never left Open")?;
    assert!(states[first_bad..].contains(&"Open"), "never returned to Open: {states:?}");
    if without_btf {
        // Looked up each interval the records said the flow was busy: every sample interval.
        let periodic: Vec<u64> = samples.iter().filter(|s| s["reason"] == "periodic").map(|s| u(s, "ts_ns")).collect();
        let widest = periodic.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(u64::MAX);
        assert!(periodic.len() >= 20 && widest < 500_000_000, "{} samples, widest gap {widest} ns", periodic.len());
        let owner = &last["owner"];
        assert!(owner["pid"].as_u64().is_some_and(|p| p > 0) && owner["comm"].is_string(), "sender named: {last}");
    } else {
        assert!(samples.iter().any(|s| s["reason"] == "ca_state"), "CA state changes are sampled immediately");
        assert!(samples.iter().any(|s| s["reason"] == "retransmit"));
    }

    // Closed: the last flow line says so.
    let lines = tracer.lines();
    let flow_line = lines
        .iter()
        .rev()
        .find(|v| v["type"] == "flow" && v["netns"].as_u64() == Some(netns) && v["sport"] == port)
        .context("no flow line")?;
    assert_eq!(flow_line["closed"], true);
    assert_eq!(flow_line["cc"], "cubic");
    assert_eq!(flow_line["retrans"].as_u64(), Some(traced));
    assert!(
        flow_line["ca_time_ms"]["Recovery"].as_u64().unwrap_or(0)
            + flow_line["ca_time_ms"]["Loss"].as_u64().unwrap_or(0)
            > 0
    );
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    let summary = lines.last().context("no summary")?;
    assert_eq!(summary["type"], "summary");
    assert!(summary["events_received"].as_u64().unwrap_or(0) > 10);
    assert_eq!(summary["events_lost"], 0);
    // The kernel-side failure counters are reported, and none happened here.
    assert_eq!(summary["kernel_read_errors"], 0, "{summary}");
    assert_eq!(summary["flow_map_full"], 0, "{summary}");
    assert_eq!(summary["decode_errors"], 0, "{summary}");
    Ok(())
}

#[test]
fn flows_in_two_namespaces_carry_their_own_netns() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let lab = VethPair::create(VethOptions::default())?;
    let tracer = Tracer::start(&["--interval", "200"])?;
    let sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let sender = bulk(&lab, "cubic", 1)?;
    let port = sender.local_port();
    sender.wait()?;
    let (s_ns, r_ns) = (lab.sender().inode(), lab.receiver().inode());
    assert_ne!(s_ns, r_ns);
    let closed = |lines: &[Value], ns: u64, local_port: u16| {
        lines
            .iter()
            .rev()
            .find(|v| {
                v["type"] == "flow"
                    && v["netns"].as_u64() == Some(ns)
                    && v["sport"].as_u64() == Some(u64::from(local_port))
                    && v["closed"] == true
            })
            .cloned()
    };
    tracer.wait_for("both ends of the connection closed", Duration::from_secs(10), |lines| {
        closed(lines, s_ns, port).is_some() && closed(lines, r_ns, PORT).is_some()
    })?;
    let lines = tracer.lines();
    let last = |ns: u64, p: u16| closed(&lines, ns, p).unwrap_or_default();
    // The receiving end counts what the sink read; the sending end what the peer acknowledged.
    // Both count sequence space: the FIN adds one byte to each, and the sender's count also
    // includes its SYN (acknowledged by the SYN-ACK).
    assert_eq!(u(&last(r_ns, PORT), "bytes_received"), sink.total_bytes() + 1);
    assert_eq!(u(&last(s_ns, port), "bytes_acked"), sink.total_bytes() + 2);
    assert_eq!(last(r_ns, PORT)["dport"].as_u64(), Some(u64::from(port)));
    assert_eq!(
        last(s_ns, port)["owner"]["comm"].as_str().map(|c| !c.is_empty()),
        Some(true),
        "connect() side knows its owner"
    );
    tracer.stop()?;
    Ok(())
}

#[test]
fn classic_tracepoints_work_as_a_fallback() -> Result<()> {
    require_kernel!();
    classic_tracepoints_when(Tracer::start, &[])
}

/// With the kernel's BTF hidden and given back as a file (`--btf`), the classic programs read
/// the socket at the file's offsets: what runs on a kernel built without BTF whose BTF a
/// debug package ships (there the kernel refuses BTF-typed programs; `--hooks classic` stands
/// in for that refusal here).
#[test]
fn a_btf_file_gives_the_classic_programs_their_offsets() -> Result<()> {
    require_kernel!();
    let file = cctrace_tests::RemoveOnDrop(std::env::temp_dir().join(format!("cctrace-btf-{}", std::process::id())));
    std::fs::copy("/sys/kernel/btf/vmlinux", &file.0).context("copying the kernel's BTF")?;
    let btf = file.0.to_string_lossy().into_owned();
    classic_tracepoints_when(Tracer::start_without_btf, &["--btf", &btf])
}

fn classic_tracepoints_when(start: Start, extra: &[&str]) -> Result<()> {
    let _serial = serial();
    let lab = VethPair::create(VethOptions::default())?;
    let mut args = vec!["--hooks", "classic", "--interval", "200"];
    args.extend_from_slice(extra);
    let tracer = start(&args)?;
    if !extra.is_empty() {
        let stderr = tracer.stderr();
        assert!(stderr.contains("cctrace: kernel BTF read from /") && !stderr.contains("without BTF"), "{stderr}");
    }
    // The socket-call hook (sock_send_length) is BTF only: that hook alone is off, said in one
    // line with what is lost, and the rest works.
    let stderr = tracer.stderr();
    assert!(stderr.contains("5/6 hooks"), "{stderr}");
    let disabled: Vec<&str> = stderr.lines().filter(|l| l.contains("disabled")).collect();
    assert_eq!(disabled.len(), 1, "{stderr}");
    assert!(
        disabled[0].starts_with("cctrace: sock:sock_send_length: disabled (")
            && disabled[0].contains("owners of accepted connections"),
        "{stderr}"
    );
    let progs = loaded_bpf_programs()?;
    assert!(progs.iter().any(|p| p.starts_with("cct_tp_")), "classic programs loaded: {progs:?}");
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let sender = bulk(&lab, "cubic", 1)?;
    let port = sender.local_port();
    let report = sender.wait()?;
    let netns = lab.sender().inode();
    tracer.wait_closed(netns, port, Duration::from_secs(10))?;
    let samples = flow_samples(&tracer, netns, port);
    let last = samples.last().context("no samples")?;
    assert_eq!(u(last, "mss"), 1448);
    assert!(u(last, "cwnd") >= 2);
    // The kernel counts sequence space: the FIN (and on the sender's last TCP_INFO read, an
    // in-flight tail) make up to two bytes of difference.
    assert!(
        u(last, "bytes_acked").abs_diff(report.bytes_acked) <= 2,
        "{} vs {}",
        u(last, "bytes_acked"),
        report.bytes_acked
    );
    tracer.stop()?;
    Ok(())
}

#[test]
fn sigterm_detaches_everything() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let tracer = Tracer::start(&[])?;
    // What this cctrace holds, by ID: other tracers may run on the same machine.
    let held = bpf_held_by(tracer.pid())?;
    let progs = loaded_bpf_programs()?;
    assert!(progs.iter().filter(|p| p.starts_with("cct_")).count() >= 5, "attached: {progs:?}");
    assert!(held.programs.len() >= 5 && held.links.len() >= 5, "cctrace holds {held:?}");
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0, "clean exit on SIGTERM");
    assert_eq!(lines.last().map(|v| v["type"].clone()), Some(Value::from("summary")));
    // The kernel frees programs after an RCU grace period: give it a moment.
    let left = || -> Result<HeldBpf> {
        let now = bpf_ids()?;
        Ok(HeldBpf {
            programs: held.programs.iter().copied().filter(|id| now.programs.contains(id)).collect(),
            links: held.links.iter().copied().filter(|id| now.links.contains(id)).collect(),
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut after = left()?;
    while after != HeldBpf::default() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        after = left()?;
    }
    assert_eq!(after, HeldBpf::default(), "programs or links of the stopped cctrace left behind");
    Ok(())
}

#[test]
fn unprivileged_start_names_the_missing_capabilities() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let before = bpf_ids()?;
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(cctrace_tests::cctrace_bin())
        .args(["--json", "--duration", "1"])
        .output_within(CHILD_DEADLINE)
        .context("running setpriv")?;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(out.stdout.is_empty());
    // Nothing it could have loaded stays: every program or link that appeared since is held
    // by a running process (another tracer on this machine), none is left over.
    let after = bpf_ids()?;
    let new_programs: Vec<u32> = after.programs.iter().copied().filter(|id| !before.programs.contains(id)).collect();
    let new_links: Vec<u32> = after.links.iter().copied().filter(|id| !before.links.contains(id)).collect();
    if !new_programs.is_empty() || !new_links.is_empty() {
        let mut held = HeldBpf::default();
        for pid in std::fs::read_dir("/proc")?.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()) {
            if let Ok(h) = bpf_held_by(pid) {
                held.programs.extend(h.programs);
                held.links.extend(h.links);
            }
        }
        // Another tracer's link may have been let go between the two reads (cctrace detaches
        // `tcp_probe` between its sampling windows): only what is still listed is left over.
        let listed = bpf_ids()?;
        let orphans: Vec<&u32> = new_programs
            .iter()
            .chain(&new_links)
            .filter(|id| !held.programs.contains(id) && !held.links.contains(id))
            .filter(|id| listed.programs.contains(id) || listed.links.contains(id))
            .collect();
        assert!(orphans.is_empty(), "left behind by the failed start: {orphans:?}");
    }
    Ok(())
}

#[test]
fn a_full_ring_buffer_is_reported_as_lost_events() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let lab = VethPair::create(VethOptions { loss: 0.02 })?;
    // One page of ring (16 samples) and a 1 ms sampling interval over eight lossy bulk flows:
    // bursts overflow the ring between two reads.
    let tracer = Tracer::start(&["--ring-kib", "4", "--sample-ms", "1", "--interval", "500"])?;
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let senders = (0..8).map(|_| bulk(&lab, "cubic", 2)).collect::<Result<Vec<_>>>()?;
    for s in senders {
        s.wait()?;
    }
    let stderr = tracer.stderr();
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    let summary = lines.last().context("no summary")?;
    assert_eq!(summary["type"], "summary");
    let lost = summary["events_lost"].as_u64().context("events_lost")?;
    let received = summary["events_received"].as_u64().context("events_received")?;
    let emitted = summary["kernel_emitted"].as_u64().context("kernel_emitted")?;
    eprintln!("ring of 4 KiB: {summary}");
    assert!(lost > 0, "a 4 KiB ring under this load must overflow: {summary}");
    // Said on stderr when it happened, not only in the summary.
    assert!(stderr.contains(" samples lost so far ("), "no loss reported on stderr: {stderr}");
    // Every sample the kernel managed to write reached the consumer; the rest were counted.
    assert_eq!(received, emitted, "{summary}");
    Ok(())
}

#[test]
fn accepted_connections_learn_their_owner_when_they_send() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    use std::io::{Read, Write};
    const SERVER_PORT: u16 = 5203;
    let lab = VethPair::create(VethOptions::default())?;
    let tracer = Tracer::start(&["--interval", "200"])?;
    // A server that accepts and sends, like a video server: the SYN_SENT transition that names
    // a client's owner never happens on its side.
    let listener_addr = std::net::SocketAddr::from((lab.receiver_addr(), SERVER_PORT));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = lab.receiver().spawn_thread("cct-server", move || -> std::io::Result<()> {
        let listener = std::net::TcpListener::bind(listener_addr)?;
        let _ = ready_tx.send(());
        let (mut conn, _) = listener.accept()?;
        conn.write_all(&vec![0u8; 4 << 20])?;
        Ok(())
    })?;
    ready_rx.recv_timeout(Duration::from_secs(5)).context("server did not start")?;
    let client = lab.sender().spawn_thread("cct-client", move || -> std::io::Result<u64> {
        let mut conn = std::net::TcpStream::connect(listener_addr)?;
        let mut sink = Vec::new();
        conn.read_to_end(&mut sink)?;
        Ok(sink.len() as u64)
    })?;
    let received = client.join().map_err(|_| anyhow::anyhow!("client panicked"))??;
    server.join().map_err(|_| anyhow::anyhow!("server panicked"))??;
    assert_eq!(received, 4 << 20);
    let netns = lab.receiver().inode();
    tracer.wait_closed(netns, SERVER_PORT, Duration::from_secs(10))?;
    let lines = tracer.lines();
    let server_flow = lines
        .iter()
        .rev()
        .find(|v| v["type"] == "flow" && v["netns"].as_u64() == Some(netns) && v["sport"] == SERVER_PORT)
        .context("no server-side flow")?;
    assert_eq!(server_flow["owner"]["comm"], "cct-server", "{server_flow}");
    let client_flow = lines
        .iter()
        .rev()
        .find(|v| v["type"] == "flow" && v["netns"].as_u64() == Some(lab.sender().inode()))
        .context("no client-side flow")?;
    assert_eq!(client_flow["owner"]["comm"], "cct-client", "{client_flow}");
    tracer.stop()?;
    Ok(())
}

#[test]
fn idle_flows_that_exist_at_start_are_listed_at_once() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    use std::io::{Read, Write};
    const IDLE_PORT: u16 = 5204;
    let lab = VethPair::create(VethOptions::default())?;
    // A connection that exchanges a little data, then sits idle while cctrace starts.
    let addr = std::net::SocketAddr::from((lab.receiver_addr(), IDLE_PORT));
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let server = lab.receiver().spawn_thread("cct-idle-srv", move || -> std::io::Result<()> {
        let listener = std::net::TcpListener::bind(addr)?;
        let _ = tx.send(());
        let (mut conn, _) = listener.accept()?;
        let mut buf = [0u8; 5];
        conn.read_exact(&mut buf)?;
        let _ = stop_rx.recv_timeout(Duration::from_secs(30));
        Ok(())
    })?;
    rx.recv_timeout(Duration::from_secs(5)).context("server did not start")?;
    let (client_tx, client_rx) = std::sync::mpsc::channel();
    let (client_stop_tx, client_stop_rx) = std::sync::mpsc::channel::<()>();
    let client = lab.sender().spawn_thread("cct-idle-cli", move || -> std::io::Result<()> {
        let mut conn = std::net::TcpStream::connect(addr)?;
        conn.write_all(b"hello")?;
        let _ = client_tx.send(conn.local_addr()?.port());
        let _ = client_stop_rx.recv_timeout(Duration::from_secs(30));
        Ok(())
    })?;
    let client_port = client_rx.recv_timeout(Duration::from_secs(5)).context("client did not connect")?;
    // Idle means its hello is acknowledged: ss shows no unacked segment on the socket.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ss_in(lab.sender().name())?
        .iter()
        .any(|s| s.local_port() == Some(client_port) && s.fields.contains_key("unacked"))
    {
        anyhow::ensure!(std::time::Instant::now() < deadline, "the client's hello was not acknowledged in 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }

    let tracer = Tracer::start(&["--interval", "200"])?;
    let netns = lab.sender().inode();
    tracer.wait_for("a snapshot sample of the idle flow", Duration::from_secs(5), |lines| {
        lines.iter().any(|v| {
            v["type"] == "sample"
                && v["reason"] == "snapshot"
                && v["netns"].as_u64() == Some(netns)
                && v["sport"].as_u64() == Some(u64::from(client_port))
        })
    })?;
    let snap = flow_samples(&tracer, netns, client_port);
    let first = snap.first().context("no samples")?;
    assert_eq!(first["reason"], "snapshot", "{first}");
    assert_eq!(first["state"], "ESTAB");
    assert_eq!(u(first, "bytes_acked"), 6, "5 bytes and the SYN: {first}");
    let _ = stop_tx.send(());
    let _ = client_stop_tx.send(());
    client.join().map_err(|_| anyhow::anyhow!("client panicked"))??;
    server.join().map_err(|_| anyhow::anyhow!("server panicked"))??;
    tracer.stop()?;
    Ok(())
}

/// The runs of `name` among the programs process `pid` holds (statistics must be on).
fn runs_of_program(pid: u32, name: &str) -> Result<u64> {
    let held = bpf_held_by(pid)?;
    let out = std::process::Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output_within(CHILD_DEADLINE)
        .context("bpftool")?;
    let all: Value = serde_json::from_slice(&out.stdout).context("bpftool's JSON")?;
    let program = all
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name && p["id"].as_u64().is_some_and(|id| held.programs.contains(&(id as u32))))
        .with_context(|| format!("{name} is not among the programs cctrace holds"))?;
    // bpftool leaves `run_cnt` out while it is 0.
    Ok(program["run_cnt"].as_u64().unwrap_or(0))
}

/// Counts every `tcp:tcp_probe` the kernel fires while it runs, by the millisecond of
/// CLOCK_MONOTONIC (bpftrace's `nsecs`, the clock of the tracer's log): bpftrace, attached
/// throughout.
struct ProbeCounter(std::process::Child);

/// bpftrace attaches in well under a second here (0.09 s to its first line, measured); this
/// bounds a start that never attaches, not a slow one.
const BPFTRACE_ATTACH_DEADLINE: Duration = Duration::from_secs(30);

/// How long bpftrace may take to print its maps and exit after SIGINT: a few milliseconds
/// (a few thousand lines here).
const BPFTRACE_EXIT_DEADLINE: Duration = Duration::from_secs(10);

/// Firings by the millisecond: CLOCK_MONOTONIC ms -> count.
struct Firings(std::collections::BTreeMap<u64, u64>);

const MS: u64 = 1_000_000;

impl Firings {
    /// In the milliseconds wholly inside `[from_ns, to_ns]`: no more than fired in it.
    fn within(&self, from_ns: u64, to_ns: u64) -> u64 {
        let (first, last) = (from_ns.div_ceil(MS), (to_ns / MS).saturating_sub(1));
        if last < first {
            return 0;
        }
        self.0.range(first..=last).map(|(_, n)| n).sum()
    }

    /// In the milliseconds that touch any of `spans`: no fewer than fired in them.
    fn touching(&self, spans: &[(u64, u64)]) -> u64 {
        self.0
            .iter()
            .filter(|(ms, _)| spans.iter().any(|&(a, b)| **ms <= b / MS && **ms >= a / MS))
            .map(|(_, n)| n)
            .sum()
    }
}

impl ProbeCounter {
    fn start() -> Result<Self> {
        let child = std::process::Command::new("bpftrace")
            .args(["-e", "tracepoint:tcp:tcp_probe { @ms[nsecs / 1000000] = count(); }"])
            // One key a millisecond: room for minutes.
            .env("BPFTRACE_MAP_KEYS_MAX", "1000000")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("running bpftrace (apt-get install bpftrace)")?;
        let mut counter = Self(child);
        // bpftrace prints "Attaching 1 probe..." before it attaches: a signal sent then can be
        // lost. The kernel's own list of perf-event attachments names its pid once it is on.
        let deadline = std::time::Instant::now() + BPFTRACE_ATTACH_DEADLINE;
        while !counter.attached()? {
            if let Some(status) = counter.0.try_wait()? {
                anyhow::bail!("bpftrace exited before attaching ({status})");
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "bpftrace did not attach to tcp:tcp_probe within {BPFTRACE_ATTACH_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(counter)
    }

    /// Whether `bpftool perf show` lists this bpftrace's program on `tcp_probe`.
    fn attached(&self) -> Result<bool> {
        let out = std::process::Command::new("bpftool")
            .args(["-j", "perf", "show"])
            .output_within(Duration::from_secs(30))?;
        let listed: Value = serde_json::from_slice(&out.stdout).context("bpftool perf show's JSON")?;
        Ok(listed
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["pid"].as_u64() == Some(u64::from(self.0.id())) && a["tracepoint"] == "tcp_probe"))
    }

    /// Stop counting: when the tracepoint fired.
    fn stop(mut self) -> Result<Firings> {
        let out = interrupt_within(&mut self.0, BPFTRACE_EXIT_DEADLINE, "bpftrace")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let parse = |l: &str| -> Option<(u64, u64)> {
            let (ms, n) = l.strip_prefix("@ms[")?.split_once("]: ")?;
            Some((ms.parse().ok()?, n.trim().parse().ok()?))
        };
        let by_ms: std::collections::BTreeMap<u64, u64> = text.lines().filter_map(parse).collect();
        anyhow::ensure!(!by_ms.is_empty(), "no counts in bpftrace's output: {text:?}");
        Ok(Firings(by_ms))
    }
}

/// cctrace with its log of `tcp_probe`'s attaches and detaches (`RUST_LOG`, `--log-file`).
struct FlipLog(std::path::PathBuf);

impl FlipLog {
    fn new() -> Self {
        Self(std::env::temp_dir().join(format!("cct-probe-flips-{}.log", std::process::id())))
    }

    fn start_tracer(&self, args: &[&str]) -> Result<Tracer> {
        let _ = std::fs::remove_file(&self.0);
        let path = self.0.to_string_lossy().into_owned();
        let args = [&["--sample-ms", "100", "--log-file", &path][..], args].concat();
        Tracer::start_env(&args, &[("RUST_LOG", "cctrace::probe_window=debug")])
    }

    /// When the program was attached, clipped to `[from_ns, to_ns]`, as the tracer wrote it
    /// down: from the start of an attach's system call to the end of a detach's. It is attached
    /// from start-up on.
    fn attached(&self, from_ns: u64, to_ns: u64) -> Result<Vec<(u64, u64)>> {
        let text = std::fs::read_to_string(&self.0).with_context(|| format!("reading {}", self.0.display()))?;
        let (mut spans, mut since) = (Vec::new(), Some(0));
        for line in text.lines() {
            let Some((what, times)) = line.split_once("tcp_probe ").and_then(|(_, r)| r.split_once(' ')) else {
                continue;
            };
            let (began, ended) = times.split_once(' ').context("a flip's two times")?;
            let (began, ended): (u64, u64) = (began.trim().parse()?, ended.trim().parse()?);
            match what {
                "attached" => since = since.or(Some(began)),
                "detached" => spans.extend(since.take().map(|a| (a, ended))),
                _ => {}
            }
        }
        spans.extend(since.map(|a| (a, u64::MAX)));
        Ok(spans
            .into_iter()
            .filter(|&(a, b)| b >= from_ns && a <= to_ns)
            .map(|(a, b)| (a.max(from_ns), b.min(to_ns)))
            .collect())
    }
}

impl Drop for FlipLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Drop for ProbeCounter {
    /// A test that fails before [`ProbeCounter::stop`] leaves no bpftrace (and its program on
    /// the tracepoint) behind.
    fn drop(&mut self) {
        if self.0.try_wait().is_ok_and(|exited| exited.is_none()) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A lab pair with a sink, the kernel's run statistics on, and cctrace sampling every 100 ms
/// and writing down when `tcp_probe`'s program was attached.
struct ProbeLab {
    lab: VethPair,
    tracer: Tracer,
    sink: Sink,
    /// The kernel counts runs only while statistics are on; this fd keeps them on.
    stats: cctrace_tests::BpfStats,
    flips: FlipLog,
}

impl ProbeLab {
    /// cctrace with `args` beside its defaults.
    fn start(args: &[&str]) -> Result<Self> {
        let lab = VethPair::create(VethOptions::default())?;
        let stats = cctrace_tests::BpfStats::enable()?;
        let flips = FlipLog::new();
        let tracer = flips.start_tracer(args)?;
        let sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
        Ok(Self { lab, tracer, sink, stats, flips })
    }
}

#[test]
fn tcp_probe_runs_only_in_its_windows_and_every_interval_is_still_sampled() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    // The windows themselves, whatever the run rate: on a loaded host the transfer can run too
    // slowly for them to pay, and cctrace would rightly keep the program attached (the test
    // below and the unit tests of the cost model check that choice).
    let ProbeLab { lab, tracer, sink: _held_sink, stats: _held_stats, flips } =
        ProbeLab::start(&["--probe-windows-always"])?;
    let counter = ProbeCounter::start()?;
    // The runs counted lie within [from, to].
    let from = monotonic_ns();
    let runs_before = runs_of_program(tracer.pid(), "cct_probe")?;
    let sender = bulk(&lab, "cubic", 4)?;
    let port = sender.local_port();
    let report = sender.wait()?;
    let runs = runs_of_program(tracer.pid(), "cct_probe")? - runs_before;
    let to = monotonic_ns();
    let firings = counter.stop()?;
    let netns = lab.sender().inode();
    tracer.wait_closed(netns, port, Duration::from_secs(10))?;
    let periodic: Vec<u64> = flow_samples(&tracer, netns, port)
        .iter()
        .filter(|s| s["reason"] == "periodic")
        .map(|s| u(s, "ts_ns"))
        .collect();
    tracer.stop()?;
    // Attached throughout, as bpftrace's program is, cctrace's would run every time the
    // tracepoint fires (on every segment either end receives, ACKs included). It runs only
    // while attached, in windows of a few milliseconds an interval once the run rate says they
    // pay: no more often than the tracepoint fired in the spans the tracer says it was
    // attached. How long those windows stay open depends on how soon a loaded host wakes the
    // tracer, so the bound is what fired in them, not a share of the transfer.
    let attached = flips.attached(from, to)?;
    let fired = firings.within(from, to);
    let fired_attached = firings.touching(&attached);
    let detached_ns = (to - from) - attached.iter().map(|(a, b)| b - a).sum::<u64>();
    println!(
        "cct_probe ran {runs} times; tcp:tcp_probe fired {fired} times meanwhile, {fired_attached} of them in \
         the {} spans cctrace had the program attached ({:.2} s of {:.2} s detached)",
        attached.len(),
        detached_ns as f64 / 1e9,
        (to - from) as f64 / 1e9
    );
    assert!(fired > 10_000, "the transfer moved too little to judge: tcp_probe fired {fired} times");
    assert!(
        attached.len() > 1 && fired_attached < fired,
        "cctrace kept tcp_probe's program attached through a transfer of {fired} firings: no window"
    );
    // The milliseconds at the spans' ends count whole: the margin of the clocks' reads.
    assert!(
        runs <= fired_attached,
        "cct_probe ran {runs} times, but tcp_probe fired {fired_attached} times while attached"
    );
    // Yet the bulk flow is sampled once an interval: as many samples as intervals passed, give
    // or take the first and last, and the gaps between them an interval, as the kernel's early
    // allowance (an eighth) and a reader woken a few milliseconds late make them.
    let interval_ns = 100_000_000;
    let span = report.elapsed.as_nanos() as u64;
    let mut gaps: Vec<u64> = periodic.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    let median = *gaps.get(gaps.len() / 2).context("fewer than two periodic samples")?;
    println!(
        "{} periodic samples over {:.1} s; gaps {:?} ms",
        periodic.len(),
        span as f64 / 1e9,
        gaps.iter().map(|g| g / 1_000_000).collect::<Vec<_>>()
    );
    assert!(periodic.len() as u64 + 2 >= span / interval_ns, "{} periodic samples in {span} ns", periodic.len());
    assert!(median.abs_diff(interval_ns) <= interval_ns / 8, "median gap {median} ns");
    Ok(())
}

#[test]
fn tcp_probe_stays_attached_where_detaching_would_cost_more_than_it_saves() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let ProbeLab { lab, tracer, sink: _held_sink, stats: _held_stats, flips } = ProbeLab::start(&[])?;
    // A 5 Mbit/s stream: a few hundred segments a second, a handful in each window. Detaching
    // and attaching again (two system calls that patch the kernel's text) would cost more than
    // the runs it saves, so the program stays attached and runs on every firing, as before
    // windows.
    let mut opts = SenderOptions::new(
        "cubic",
        SendMode::Paced { rate_bps: 5_000_000, write_size: 16 << 10 },
        Duration::from_secs(6),
    );
    opts.nodelay = true;
    let sender = Sender::start(lab.sender(), lab.receiver_addr(), PORT, opts)?;
    std::thread::sleep(Duration::from_secs(1));
    let counter = ProbeCounter::start()?;
    // The runs counted cover [from, to].
    let runs_before = runs_of_program(tracer.pid(), "cct_probe")?;
    let from = monotonic_ns();
    std::thread::sleep(Duration::from_secs(2));
    let to = monotonic_ns();
    let runs = runs_of_program(tracer.pid(), "cct_probe")? - runs_before;
    let firings = counter.stop()?;
    sender.stop();
    sender.wait()?;
    tracer.stop()?;
    let attached = flips.attached(from, to)?;
    let fired = firings.within(from, to);
    println!("cct_probe ran {runs} times; tcp:tcp_probe fired {fired} times meanwhile; attached spans {attached:?}");
    assert!(fired > 200, "the stream moved too little to judge: tcp_probe fired {fired} times");
    assert!(attached == [(from, to)], "cctrace detached tcp_probe's program at a few hundred firings a second");
    // Attached throughout, it ran on every firing in the span (bpftrace's milliseconds wholly
    // inside it, read with the same clock).
    assert!(runs >= fired, "cct_probe ran {runs} times of {fired}, attached throughout");
    Ok(())
}
