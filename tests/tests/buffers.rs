//! The send and receive buffers next to the congestion control, on the real kernel.
//!
//! On the long fat path `cargo xtask bench --only long-fat` measures the truth on (200 ms RTT,
//! 200 Mbit/s, a quarter-BDP queue, the receiver's buffers raised): a BBR sender with the
//! kernel's default `tcp_wmem` (4 MiB max) is `sndbuf`-limited with its numbers, `cctrace fix
//! --live` raises the namespace's maximum and the same connection grows into it, `--undo` puts
//! the exact triple back; a CUBIC sender there at 0.05 % random loss is flagged, its verdict
//! names the send buffer as BBR's next limit, its printed fix runs as printed against the real
//! namespace, and the fix's two steps applied live bring the same connection near what BBR
//! with a raised buffer gets. On a 30 ms path: a receiver in another namespace of this host
//! with a small `tcp_rmem` is named with its fix (printed, and applied by `cctrace fix` of the
//! sender's namespace), and an application that sets `SO_SNDBUF` itself is named and nothing
//! is written. On a 40 ms path at 1.5 % random loss, BBR's writer waits on a buffer full of
//! SACKed data that a larger one would not relieve: not `sndbuf`, and no fix touches
//! `tcp_wmem`, with the truth (default against 64 MiB) measured beside it.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use cctrace_lab::{EmulatedPath, EmulatedPathSpec, PathSpec, SendMode, Sender, SenderOptions, Sink, SinkOptions};
use cctrace_tests::{
    flow_lines as lines_of, require_kernel, run_cctrace, serial, ss_in, Tracer, WITHOUT_BTF, WITH_BTF,
};
use serde_json::Value;

const PORT: u16 = cctrace_lab::SINK_PORT;
const LINE_BPS: u64 = 200_000_000;
const WMEM: &str = "net.ipv4.tcp_wmem";
const RMEM: &str = "net.ipv4.tcp_rmem";
const CC: &str = "net.ipv4.tcp_congestion_control";
/// The kernel's default `tcp_wmem` (the lab raises its namespaces' to 32 MiB).
const KERNEL_WMEM: &str = "4096 16384 4194304";

/// The truth on the long fat path (`cargo xtask bench --only long-fat`, 20 s runs, no tracer,
/// 2026-12-06): BBR with the default and a 64 MiB `tcp_wmem` max, without loss 89.2 and 171.2
/// Mbit/s (1.92x), at 0.05 % random loss 73.2 and 146.9 (2.01x); CUBIC at 0.05 % 12.9.
const TRUTH_BBR_RAISED_FACTOR: f64 = 1.92;
const TRUTH_BBR_RAISED_BPS: f64 = 171.2e6;
const TRUTH_BBR_RAISED_LOSSY_BPS: f64 = 146.9e6;

/// The long fat path; with `loss`, the emulator's default seed puts the first random loss at
/// the 2,660th packet, so CUBIC's slow start outgrows the default send buffer before it (with
/// an earlier one, CUBIC never needs more than the buffer and cctrace rightly names no next
/// limit).
fn long_fat(loss: f64) -> Result<EmulatedPath> {
    path(Duration::from_millis(100), loss)
}

fn path(one_way: Duration, loss: f64) -> Result<EmulatedPath> {
    let queue = (LINE_BPS as f64 / 8.0 * one_way.as_secs_f64() * 2.0 / 4.0) as usize;
    let forward = PathSpec::delay(one_way).with_loss(loss).with_rate(LINE_BPS, queue);
    let mut spec = EmulatedPathSpec::new(forward);
    spec.reverse = PathSpec::delay(one_way);
    EmulatedPath::create(spec)
}

fn bulk(path: &EmulatedPath, cc: &str, secs: u64, sndbuf: Option<usize>) -> Result<Sender> {
    Sender::start(
        path.sender(),
        path.receiver_addr(),
        PORT,
        SenderOptions { sndbuf, ..SenderOptions::new(cc, SendMode::Bulk, Duration::from_secs(secs)) },
    )
}

/// A sysctl triple as three numbers (the kernel writes tabs).
fn triple(ns: &cctrace_lab::Netns, key: &str) -> Result<String> {
    Ok(ns.sysctl_get(key)?.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Seconds from the flow's first flow line to its first line matching `pred`.
fn seconds_to(lines: &[Value], pred: impl Fn(&Value) -> bool) -> Option<f64> {
    let t0 = lines.first()?["ts_ns"].as_u64()?;
    lines.iter().find(|v| pred(v)).and_then(|v| v["ts_ns"].as_u64()).map(|t| t.saturating_sub(t0) as f64 / 1e9)
}

fn trail(lines: &[Value]) -> String {
    lines
        .iter()
        .map(|v| format!("\n  {} flagged={} {}", v["limited_by"], v["flagged"], v["verdict"].as_str().unwrap_or("")))
        .collect()
}

/// Bytes the sink received per second over `window`.
fn sink_rate(sink: &Sink, window: Duration) -> f64 {
    let (b0, t0) = (sink.total_bytes(), Instant::now());
    std::thread::sleep(window);
    (sink.total_bytes() - b0) as f64 * 8.0 / t0.elapsed().as_secs_f64()
}

/// The sink's goodput each half second for `secs`, as (seconds since the start, bits/s).
fn goodput_series(sink: &Sink, secs: f64) -> Vec<(f64, f64)> {
    let start = Instant::now();
    let mut out = Vec::new();
    let (mut b0, mut t0) = (sink.total_bytes(), Instant::now());
    while start.elapsed().as_secs_f64() < secs {
        std::thread::sleep(Duration::from_millis(500));
        let (b, t) = (sink.total_bytes(), Instant::now());
        out.push((start.elapsed().as_secs_f64(), (b - b0) as f64 * 8.0 / (t - t0).as_secs_f64()));
        (b0, t0) = (b, t);
    }
    out
}

/// When the series first reached `share` of the mean of its last `tail` points.
fn reached(series: &[(f64, f64)], share: f64, tail: usize) -> Option<f64> {
    let end = &series[series.len().saturating_sub(tail)..];
    let plateau = end.iter().map(|p| p.1).sum::<f64>() / end.len().max(1) as f64;
    series.iter().find(|p| p.1 >= share * plateau).map(|p| p.0)
}

/// Run the printed fix's command lines (not its comments) through `/bin/sh`, as a user
/// pasting them would; then the roll back's, without their label.
fn run_printed(fix: &[String], rollback: bool) -> Result<()> {
    let lines: Vec<String> = if rollback {
        fix.iter().filter_map(|c| c.strip_prefix("# roll back: ")).map(String::from).collect()
    } else {
        fix.iter().filter(|c| !c.starts_with('#')).cloned().collect()
    };
    anyhow::ensure!(!lines.is_empty(), "nothing to run in {fix:#?}");
    for line in lines {
        let out =
            Command::new("/bin/sh").arg("-c").arg(&line).output_within(CHILD_DEADLINE).context("running /bin/sh")?;
        anyhow::ensure!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// `ss -tmi`'s send buffer (`skmem`'s `tb`) of the socket with local port `port` in `ns`.
fn ss_sndbuf(ns: &cctrace_lab::Netns, port: u16) -> Result<Option<u64>> {
    let out = Command::new("ip").args(["netns", "exec", ns.name(), "ss", "-tmniH"]).output_within(CHILD_DEADLINE)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut this = false;
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            this = line.split_whitespace().nth(3).and_then(|a| a.rsplit(':').next()) == Some(&port.to_string());
        } else if this {
            let tb = line.split([',', '(', ')']).find_map(|w| w.strip_prefix("tb"));
            return Ok(tb.and_then(|v| v.parse().ok()));
        }
    }
    Ok(None)
}

/// Judged twice at once: by a tracer with the kernel's BTF and by one with it hidden (the mode
/// without BTF, its verdicts from sock_diag's view of the sockets), on the same two transfers.
/// Each fix path runs once: the BBR flow's buffer raised live by `cctrace fix` without BTF
/// (through the processes holding its sockets), the CUBIC flow switched and raised live with it
/// (in the kernel). One lab for both modes: the long fat path's transfers are the test's time.
#[test]
fn a_long_fat_path_held_by_its_send_buffer_is_named_fixed_live_and_undone_with_and_without_btf() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    // Both flows at once: BBR held by its buffer, CUBIC at 0.05 % random loss.
    let bbr_path = long_fat(0.0)?;
    let cubic_path = long_fat(0.0005)?;
    for p in [&bbr_path, &cubic_path] {
        p.sender().sysctl_set(WMEM, KERNEL_WMEM)?;
    }
    // A loss-based default to change back to (a namespace inherits the host's bbr).
    cubic_path.sender().sysctl_set(CC, "reno")?;
    let tracers = [
        ("with BTF", (WITH_BTF.start)(&["--interval", "1000"])?),
        ("without BTF", (WITHOUT_BTF.start)(&["--interval", "1000"])?),
    ];
    let bbr_sink = Sink::start(bbr_path.receiver(), bbr_path.receiver_addr(), PORT, SinkOptions::default())?;
    let cubic_sink = Sink::start(cubic_path.receiver(), cubic_path.receiver_addr(), PORT, SinkOptions::default())?;
    let bbr = bulk(&bbr_path, "bbr", 180, None)?;
    let cubic = bulk(&cubic_path, "cubic", 180, None)?;
    let (bbr_ns, cubic_ns) = (bbr_path.sender(), cubic_path.sender());
    let (bbr_port, cubic_port) = (bbr.local_port(), cubic.local_port());

    let mut cookies = Vec::new();
    let mut printed = Vec::new();
    for (mode, tracer) in &tracers {
        cookies.push(held_by_its_buffer(mode, tracer, bbr_ns, bbr_port)?);
        printed.push(flagged_with_its_next_limit(mode, tracer, cubic_ns, cubic_port)?);
    }
    let cookie = cookies[0];
    anyhow::ensure!(cookies.iter().all(|c| *c == cookie), "one socket, one cookie in both modes: {cookies:?}");
    let cubic_cookie = printed[0].0;
    anyhow::ensure!(printed.iter().all(|p| p.0 == cubic_cookie), "one socket, one cookie in both modes");
    let (_, printed) = printed.swap_remove(0);

    // The BBR flow fixed live without BTF: the namespace's maximum raised, the same connection
    // grows into it.
    let before = sink_rate(&bbr_sink, Duration::from_secs(4));
    let fix_started = Instant::now();
    let (code, out, err) = (WITHOUT_BTF.run)(&["fix", "--netns", bbr_ns.name(), "--live", "--yes"])?;
    let fix_took = fix_started.elapsed();
    println!("{out}{err}");
    anyhow::ensure!(code == 0, "{out}{err}");
    anyhow::ensure!(out.contains("raise net.ipv4.tcp_wmem's max from 4.0 MiB to"), "{out}");
    let raised = triple(bbr_ns, WMEM)?;
    anyhow::ensure!(raised != KERNEL_WMEM && raised.starts_with("4096 16384 "), "{raised}");
    let series = goodput_series(&bbr_sink, 10.0);
    let grown = ss_sndbuf(bbr_ns, bbr_port)?;
    let after = series[series.len() - 6..].iter().map(|p| p.1).sum::<f64>() / 6.0;
    let to_90 = reached(&series, 0.9, 6);
    println!(
        "BBR goodput {:.1} -> {:.1} Mbit/s ({:.2}x; the truth {TRUTH_BBR_RAISED_FACTOR}x); 90 % of it {to_90:?} s after the fix \
         ({:?} for the fix itself); send buffer now {grown:?}; each half second: {:?}",
        before / 1e6,
        after / 1e6,
        after / before,
        fix_took,
        series.iter().map(|p| (p.1 / 1e6).round()).collect::<Vec<_>>()
    );
    // The truth's factor compares 20 s runs with BBR's start-up in each, which pulls the default
    // buffer's average below the rate a flow held by it keeps (measured here 111.5 against the
    // truth's 89.2, and 1.72x against 1.92x): 0.75 of the factor, and 0.8 of the truth's rate.
    anyhow::ensure!(
        after >= 0.75 * TRUTH_BBR_RAISED_FACTOR * before && after >= 0.8 * TRUTH_BBR_RAISED_BPS,
        "{:.1} -> {:.1} Mbit/s",
        before / 1e6,
        after / 1e6
    );
    anyhow::ensure!(grown.is_some_and(|b| b > 4_194_304), "the same socket's buffer grew: {grown:?}");
    for (mode, tracer) in &tracers {
        tracer.wait_for(
            &format!("{mode}: the same cookie no longer held by its buffer"),
            Duration::from_secs(20),
            |lines| {
                lines
                    .iter()
                    .rev()
                    .find(|v| v["type"] == "flow" && v["cookie"].as_u64() == Some(cookie))
                    .is_some_and(|v| v["limited_by"] != "sndbuf")
            },
        )?;
    }
    let (code, out, err) = (WITHOUT_BTF.run)(&["fix", "--undo", "--netns", bbr_ns.name(), "--yes"])?;
    println!("{out}{err}");
    anyhow::ensure!(code == 0, "{out}{err}");
    anyhow::ensure!(triple(bbr_ns, WMEM)? == KERNEL_WMEM, "the exact triple back: {}", triple(bbr_ns, WMEM)?);
    bbr.stop();
    drop(bbr);

    // The CUBIC flow's printed fix, run as printed against its namespace, then rolled back.
    run_printed(&printed, false)?;
    anyhow::ensure!(cubic_ns.sysctl_get(CC)? == "bbr", "{printed:#?}");
    let printed_wmem = triple(cubic_ns, WMEM)?;
    anyhow::ensure!(printed_wmem != KERNEL_WMEM, "{printed:#?}");
    run_printed(&printed, true)?;
    anyhow::ensure!(cubic_ns.sysctl_get(CC)? == "reno" && triple(cubic_ns, WMEM)? == KERNEL_WMEM, "{printed:#?}");

    // Its two steps applied live with BTF: the same connection on BBR with a raised buffer.
    let before = sink_rate(&cubic_sink, Duration::from_secs(3));
    let (code, out, err) = (WITH_BTF.run)(&["fix", "--netns", cubic_ns.name(), "--live", "--yes"])?;
    println!("{out}{err}");
    anyhow::ensure!(code == 0, "{out}{err}");
    anyhow::ensure!(out.contains(&format!("(cookie {cubic_cookie}) from cubic to bbr")), "{out}");
    let live_wmem = triple(cubic_ns, WMEM)?;
    // Both size the buffer from the same path (its rate and RTT), rounded to a power of two of
    // MiB: the same maximum, or the next power up or down where the estimate sat on the line.
    anyhow::ensure!(
        same_size_class(&live_wmem, &printed_wmem),
        "the fix {live_wmem} and the printed fix {printed_wmem} agree: {out}"
    );
    let series = goodput_series(&cubic_sink, 12.0);
    let after = series[series.len() - 6..].iter().map(|p| p.1).sum::<f64>() / 6.0;
    println!(
        "CUBIC -> BBR, buffer raised: {:.1} -> {:.1} Mbit/s (the truth's BBR with a raised buffer {:.1}); each half second: {:?}",
        before / 1e6,
        after / 1e6,
        TRUTH_BBR_RAISED_LOSSY_BPS / 1e6,
        series.iter().map(|p| (p.1 / 1e6).round()).collect::<Vec<_>>()
    );
    anyhow::ensure!(after >= 0.8 * TRUTH_BBR_RAISED_LOSSY_BPS, "{:.1} Mbit/s", after / 1e6);
    let (code, out, err) = (WITH_BTF.run)(&["fix", "--undo", "--netns", cubic_ns.name(), "--yes"])?;
    println!("{out}{err}");
    anyhow::ensure!(code == 0, "{out}{err}");
    anyhow::ensure!(cubic_ns.sysctl_get(CC)? == "reno" && triple(cubic_ns, WMEM)? == KERNEL_WMEM);
    let on = ss_in(cubic_ns.name())?;
    anyhow::ensure!(
        on.iter().any(|s| s.local_port() == Some(cubic_port) && s.fields.contains_key("cubic")),
        "the same connection back on cubic"
    );
    cubic.stop();
    drop(cubic);
    for (mode, tracer) in tracers {
        let (code, _) = tracer.stop()?;
        anyhow::ensure!(code == 0, "{mode}: cctrace exited {code}");
    }
    Ok(())
}

/// The tcp_wmem maxima of two triples are equal, or a factor of two apart.
fn same_size_class(a: &str, b: &str) -> bool {
    let max = |t: &str| t.split_whitespace().nth(2).and_then(|m| m.parse::<u64>().ok()).unwrap_or(0);
    let (a, b) = (max(a), max(b));
    a > 0 && b > 0 && (a == b || a == 2 * b || b == 2 * a)
}

/// The BBR flow, judged by `tracer`: `sndbuf` with its numbers within 15 s of its first line,
/// never `application` or `idle` while held. Its cookie.
fn held_by_its_buffer(mode: &str, tracer: &Tracer, ns: &cctrace_lab::Netns, port: u16) -> Result<u64> {
    let is_sndbuf = |v: &Value| v["limited_by"] == "sndbuf";
    tracer.wait_for(&format!("{mode}: the BBR flow sndbuf-limited"), Duration::from_secs(40), |lines| {
        lines_of(lines, ns.inode(), port).iter().any(is_sndbuf)
    })?;
    let mine = lines_of(&tracer.lines(), ns.inode(), port);
    let to_verdict = seconds_to(&mine, is_sndbuf).context("a verdict")?;
    println!("{mode}: BBR sndbuf after {to_verdict:.1} s");
    anyhow::ensure!(to_verdict <= 15.0, "{mode}: sndbuf only after {to_verdict:.1} s:{}", trail(&mine));
    let held = mine.iter().find(|v| is_sndbuf(v)).context("sndbuf line")?;
    let verdict = held["verdict"].as_str().unwrap_or_default();
    println!("{mode}: BBR verdict: {verdict}\nfix: {:#?}", held["fix"]);
    for words in [
        "grown by autotuning to the namespace's tcp_wmem max (4.0 MiB)",
        "what a buffer that size allows at this RTT",
        "Raise the namespace's tcp_wmem max to",
    ] {
        anyhow::ensure!(verdict.contains(words), "{mode}: {words:?} in {verdict}");
    }
    let b = &held["evidence"]["buffers"];
    anyhow::ensure!(b["sndbuf"] == 4_194_304 && b["sndbuf_set_by"] == "autotuning", "{mode}: {b}");
    anyhow::ensure!(b["sndbuf_bound_share"].as_f64().unwrap_or(0.0) >= 0.3, "{mode}: {b}");
    let fix = held["fix"].to_string();
    anyhow::ensure!(
        fix.contains(&format!("ip netns exec {} sysctl -w 'net.ipv4.tcp_wmem=4096 16384 ", ns.name())),
        "{mode}: {fix}"
    );
    // Held by its buffer, every rate sample is application-limited: from its first `sndbuf`
    // line on, the flow is never called application or idle.
    tracer.wait_for(&format!("{mode}: five evaluations held"), Duration::from_secs(10), |lines| {
        lines_of(lines, ns.inode(), port).iter().skip_while(|v| !is_sndbuf(v)).count() >= 5
    })?;
    let held_lines = lines_of(&tracer.lines(), ns.inode(), port);
    let since: Vec<&str> =
        held_lines.iter().skip_while(|v| !is_sndbuf(v)).filter_map(|v| v["limited_by"].as_str()).collect();
    println!("{mode}: BBR held, each evaluation from the first sndbuf: {since:?}");
    anyhow::ensure!(
        !since.iter().any(|l| matches!(*l, "application" | "idle")),
        "{mode}: misread while held by its buffer:{}",
        trail(&held_lines)
    );
    held["cookie"].as_u64().context("cookie")
}

/// The CUBIC flow, judged by `tracer`: flagged, with BBR's next limit (its send buffer) named
/// and a fix that raises it. Its cookie and its printed fix.
fn flagged_with_its_next_limit(
    mode: &str,
    tracer: &Tracer,
    ns: &cctrace_lab::Netns,
    port: u16,
) -> Result<(u64, Vec<String>)> {
    let next = |v: &Value| v["flagged"] == true && v["evidence"]["buffers"]["next_limit_sndbuf"] == true;
    tracer.wait_for(
        &format!("{mode}: the CUBIC flow flagged with its next limit"),
        Duration::from_secs(40),
        |lines| lines_of(lines, ns.inode(), port).iter().any(next),
    )?;
    let lines = lines_of(&tracer.lines(), ns.inode(), port);
    let flagged = lines.iter().find(|v| next(v)).context("flagged line")?;
    if let Some(s) = cctrace_tests::seconds_to_flag(&lines) {
        cctrace_tests::print_time_to_flag(&format!("cubic on 200 ms 0.05% ({mode})"), s);
    }
    let verdict = flagged["verdict"].as_str().unwrap_or_default();
    println!("{mode}: CUBIC verdict: {verdict}");
    anyhow::ensure!(verdict.contains("Switched alone, BBR would be held next by its send buffer"), "{mode}: {verdict}");
    anyhow::ensure!(verdict.contains("The fix raises the max to"), "{mode}: {verdict}");
    let printed =
        flagged["fix"].as_array().context("fix")?.iter().filter_map(|c| c.as_str().map(String::from)).collect();
    Ok((flagged["cookie"].as_u64().context("cookie")?, printed))
}

#[test]
fn a_receiver_on_this_host_and_an_application_s_own_buffer_are_named() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let windowed = path(Duration::from_millis(15), 0.0)?;
    let own = path(Duration::from_millis(15), 0.0)?;
    // The receiving namespace's autotuning may grow a buffer to 256 KiB only.
    let small_rmem = "4096 131072 262144";
    windowed.receiver().sysctl_set(RMEM, small_rmem)?;
    let tracer = Tracer::start(&["--interval", "1000"])?;
    let _s1 = Sink::start(windowed.receiver(), windowed.receiver_addr(), PORT, SinkOptions::default())?;
    let _s2 = Sink::start(own.receiver(), own.receiver_addr(), PORT, SinkOptions::default())?;
    let held = bulk(&windowed, "bbr", 60, None)?;
    // The application fixes its send buffer at 128 KiB (the kernel doubles it).
    let fixed = bulk(&own, "bbr", 60, Some(128 << 10))?;
    let (ns, rcv) = (windowed.sender(), windowed.receiver());
    let own_ns = own.sender();
    let wmem_before = triple(own_ns, WMEM)?;

    let is = |limited: &'static str| move |v: &Value| v["limited_by"] == limited;
    tracer.wait_for("both verdicts", Duration::from_secs(30), |lines| {
        lines_of(lines, ns.inode(), held.local_port()).iter().any(is("rwnd"))
            && lines_of(lines, own_ns.inode(), fixed.local_port()).iter().any(is("sndbuf"))
    })?;
    let lines = tracer.lines();
    let rwnd = lines_of(&lines, ns.inode(), held.local_port()).into_iter().rev().find(is("rwnd")).context("rwnd")?;
    let verdict = rwnd["verdict"].as_str().unwrap_or_default();
    println!("rwnd verdict: {verdict}\nfix: {:#?}", rwnd["fix"]);
    anyhow::ensure!(rwnd["flagged"] == false, "{verdict}");
    for words in [
        format!("The receiver is on this host, in ip netns {}", rcv.name()),
        "grown by autotuning to that namespace's tcp_rmem max (256.0 KiB): raise it to".to_string(),
    ] {
        anyhow::ensure!(verdict.contains(&words), "{words:?} in {verdict}");
    }
    let printed: Vec<String> =
        rwnd["fix"].as_array().context("fix")?.iter().filter_map(|c| c.as_str().map(String::from)).collect();
    anyhow::ensure!(
        printed
            .iter()
            .any(|c| c.starts_with(&format!("ip netns exec {} sysctl -w 'net.ipv4.tcp_rmem=4096 131072 ", rcv.name()))),
        "{printed:#?}"
    );
    // Run as printed against the receiver's namespace, and rolled back to the exact triple.
    run_printed(&printed, false)?;
    let raised = triple(rcv, RMEM)?;
    anyhow::ensure!(raised != small_rmem && raised.starts_with("4096 131072 "), "{raised}");
    run_printed(&printed, true)?;
    anyhow::ensure!(triple(rcv, RMEM)? == small_rmem);
    // `cctrace fix` of the sender's namespace raises the receiving namespace's maximum too.
    let (code, out, err) = run_cctrace(&["fix", "--netns", ns.name(), "--yes"])?;
    println!("{out}{err}");
    anyhow::ensure!(code == 0, "{out}{err}");
    anyhow::ensure!(out.contains(&format!("tcp_rmem's max in ip netns {} (the receiving end)", rcv.name())), "{out}");
    anyhow::ensure!(triple(rcv, RMEM)? == raised, "the fix and the printed fix agree: {out}");
    let (code, out, err) = run_cctrace(&["fix", "--undo", "--netns", ns.name(), "--yes"])?;
    anyhow::ensure!(code == 0, "{out}{err}");
    anyhow::ensure!(triple(rcv, RMEM)? == small_rmem, "{out}");

    // The application's own send buffer: named as the limit, nothing written.
    let sndbuf =
        lines_of(&lines, own_ns.inode(), fixed.local_port()).into_iter().rev().find(is("sndbuf")).context("sndbuf")?;
    let verdict = sndbuf["verdict"].as_str().unwrap_or_default();
    println!("own SO_SNDBUF verdict: {verdict}");
    anyhow::ensure!(verdict.contains("set by the application itself (SO_SNDBUF"), "{verdict}");
    anyhow::ensure!(verdict.contains("cctrace changes nothing for it"), "{verdict}");
    anyhow::ensure!(sndbuf["flagged"] == false && sndbuf["fix"].is_null(), "{sndbuf}");
    let (code, out, err) = run_cctrace(&["fix", "--netns", own_ns.name(), "--yes"])?;
    println!("{out}{err}");
    anyhow::ensure!(code == 0, "{out}{err}");
    anyhow::ensure!(out.contains("set its own send buffer") && out.contains("left alone"), "{out}");
    anyhow::ensure!(!out.contains("raise net.ipv4"), "{out}");
    anyhow::ensure!(triple(own_ns, WMEM)? == wmem_before, "nothing written");
    let (code, out, err) = run_cctrace(&["fix", "--undo", "--netns", own_ns.name(), "--yes"])?;
    anyhow::ensure!(code == 0, "{out}{err}");
    held.stop();
    fixed.stop();
    drop((held, fixed));
    let (code, _) = tracer.stop()?;
    anyhow::ensure!(code == 0);
    Ok(())
}

/// A short path's BBR at 1.5 % random loss: 40 ms, 200 Mbit/s. Its queue fills with data SACKed
/// and not yet acknowledged and its writer waits on a full buffer, yet a larger buffer gains
/// nothing (issue 46 measured 177.1 Mbit/s with the default 4 MiB maximum, 178.9 with 64 MiB).
const SHORT_LOSSY_LOSS: f64 = 0.015;
/// A maximum far above what the path needs at its RTT.
const LARGE_WMEM: &str = "4096 16384 67108864";

#[test]
fn bbr_at_random_loss_on_a_short_path_is_not_held_by_a_buffer_that_would_gain_it_nothing() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let lossy = path(Duration::from_millis(20), SHORT_LOSSY_LOSS)?;
    let ns = lossy.sender();
    let tracer = Tracer::start(&["--interval", "1000"])?;
    let _sink = Sink::start(lossy.receiver(), lossy.receiver_addr(), PORT, SinkOptions::default())?;
    // The truth beside it, each in turn on the same path under the same tracer: a large
    // maximum first, then the kernel's default, the flow the verdict is about.
    let mut runs = Vec::new();
    for wmem in [LARGE_WMEM, KERNEL_WMEM] {
        ns.sysctl_set(WMEM, wmem)?;
        let sender = bulk(&lossy, "bbr", 10, None)?;
        let port = sender.local_port();
        let report = sender.wait()?;
        tracer.wait_closed(ns.inode(), port, Duration::from_secs(15))?;
        runs.push((wmem, port, report.goodput_bps));
    }
    let (code, lines) = tracer.stop()?;
    anyhow::ensure!(code == 0);
    let (large, default) = (runs[0].2, runs[1].2);
    println!(
        "BBR at {:.1} % loss on 40 ms: {:.1} Mbit/s with 64 MiB, {:.1} with the default 4 MiB ({:.2}x)",
        SHORT_LOSSY_LOSS * 100.0,
        large / 1e6,
        default / 1e6,
        large / default
    );
    // The truth: the buffer holds nothing back. The path carries most of its line (for the
    // faster of the two: beside the suite's other work one run can get less), and a larger
    // maximum gains no more than BBR's own spread from run to run at this loss (0.95-1.21x over
    // 10 s runs, measured; a fresh clone's run got 153.2 and 176.7 Mbit/s, 1.15x).
    anyhow::ensure!(
        large.max(default) >= 0.8 * LINE_BPS as f64,
        "the path carried {:.1} and {:.1} Mbit/s",
        large / 1e6,
        default / 1e6
    );
    anyhow::ensure!(large / default < 1.3, "the larger buffer gained {:.2}x", large / default);
    for (wmem, port, _) in &runs {
        let mine = lines_of(&lines, ns.inode(), *port);
        let judged: Vec<&str> =
            mine.iter().filter_map(|v| v["limited_by"].as_str()).filter(|l| *l != "unknown").collect();
        println!("tcp_wmem {wmem}: {judged:?}");
        anyhow::ensure!(judged.len() >= 5, "too few verdicts:{}", trail(&mine));
        anyhow::ensure!(!mine.iter().any(|v| v["flagged"] == true), "flagged:{}", trail(&mine));
        anyhow::ensure!(!judged.contains(&"sndbuf"), "called sndbuf:{}", trail(&mine));
        let fixes = mine.iter().filter_map(|v| v["fix"].as_array()).flatten().filter_map(Value::as_str);
        anyhow::ensure!(
            !fixes.clone().any(|c| c.contains("tcp_wmem")),
            "a fix raising tcp_wmem: {:?}",
            fixes.collect::<Vec<_>>()
        );
    }
    Ok(())
}
