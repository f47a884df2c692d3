//! The command line as a user meets it: bad numbers, a closed or stalled stdout, signals. Each
//! ends cleanly: one line on stderr, the right exit status, every program detached.

use cctrace_lab::child::{send_signal, OutputWithin, Signal, CHILD_DEADLINE};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cctrace_lab::{SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};
use cctrace_tests::{bpf_held_by, bpf_ids, cctrace_bin, require_kernel, serial, HeldBpf};

const PORT: u16 = cctrace_lab::SINK_PORT;

/// What `pid` holds now (programs and links), and which of it is still loaded later.
fn held(pid: u32) -> Result<HeldBpf> {
    let held = bpf_held_by(pid)?;
    assert!(held.programs.len() >= 5 && !held.links.is_empty(), "cctrace holds its programs while it runs: {held:?}");
    Ok(held)
}

/// What of `held` is still loaded once the kernel has had time to free it. A program's id goes
/// only after an RCU grace period past its last reference, so right after cctrace exits its
/// programs can still be listed: a fresh-clone run saw all eight there at the first look and
/// gone moments later. Wait for them as long as a grace period can take on a busy host (a few
/// seconds at most); what is still there then was left behind.
fn still_loaded(held: &HeldBpf) -> Result<HeldBpf> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = bpf_ids()?;
        let left = HeldBpf {
            programs: held.programs.iter().copied().filter(|p| now.programs.contains(p)).collect(),
            links: held.links.iter().copied().filter(|l| now.links.contains(l)).collect(),
        };
        if left == HeldBpf::default() || Instant::now() > deadline {
            return Ok(left);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait for `child` to exit, at most `limit`; kill it and fail if it does not.
fn exit_within(child: &mut std::process::Child, limit: Duration, what: &str) -> Result<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status.code().unwrap_or(-1));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("cctrace did not exit within {limit:?} {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until cctrace said on stderr that it attached.
fn wait_attached(child: &mut std::process::Child) -> Result<Vec<String>> {
    let err = child.stderr.take().context("stderr")?;
    let mut lines = BufReader::new(err).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line?;
        let ready = line.contains("tracing TCP");
        seen.push(line);
        if ready {
            // Keep draining stderr in the background so cctrace never blocks on it.
            std::thread::spawn(move || for _ in lines.by_ref() {});
            return Ok(seen);
        }
    }
    bail!("cctrace exited before attaching: {seen:?}")
}

#[test]
fn bad_numbers_are_one_line_errors_and_nothing_is_loaded() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    for args in [
        &["--json", "--duration", "1e20"][..],
        &["--json", "--duration=-1"],
        &["--json", "--interval", "5"],
        &["--json", "--sample-ms", "0"],
        &["--json", "--ring-kib", "3000"],
        &["--json", "--heavy-mb", "NaN"],
        &["--json", "--heavy-mbps=-2"],
        &["demo", "--json", "--loss-pct", "80"],
        &["demo", "--json", "--rtt-ms", "inf"],
    ] {
        let out = Command::new(cctrace_bin()).args(args).output_within(CHILD_DEADLINE)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line, got {stderr:?}");
        assert!(stderr.starts_with("cctrace: invalid value"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        eprintln!("{args:?} -> {}", stderr.trim());
    }
    Ok(())
}

/// A lossless veth lab with a bulk flow, so cctrace has flow lines to print every interval.
fn busy_lab(secs: u64) -> Result<(VethPair, Sink, Sender)> {
    let lab = VethPair::create(VethOptions::default())?;
    let sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let sender = Sender::start(
        lab.sender(),
        lab.receiver_addr(),
        PORT,
        SenderOptions::new("cubic", SendMode::Bulk, Duration::from_secs(secs)),
    )?;
    Ok((lab, sink, sender))
}

#[test]
fn a_closed_stdout_ends_cctrace_quietly_with_status_0() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let (_lab, _sink, sender) = busy_lab(20)?;
    // `cctrace --json --events | head -1`: the reader takes one line and goes away.
    let mut child = Command::new(cctrace_bin())
        .args(["--json", "--events", "--interval", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let before = wait_attached(&mut child)?;
    let programs = held(child.id())?;
    let mut out = BufReader::new(child.stdout.take().context("stdout")?);
    let mut first = String::new();
    out.read_line(&mut first)?;
    assert!(first.starts_with('{'), "a JSON line first: {first:?}");
    drop(out);
    let code = exit_within(&mut child, Duration::from_secs(10), "after its reader went away")?;
    assert_eq!(code, 0, "stderr: {before:?}");
    assert_eq!(still_loaded(&programs)?, HeldBpf::default(), "programs or links left behind");
    drop(sender);
    Ok(())
}

#[test]
fn a_reader_that_stops_reading_cannot_block_sigterm() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let (_lab, _sink, sender) = busy_lab(30)?;
    // Every sample printed, and nobody reads: the pipe and the writer's queue fill up.
    let mut child = Command::new(cctrace_bin())
        .args(["--json", "--events", "--sample-ms", "1", "--interval", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    wait_attached(&mut child)?;
    let programs = held(child.id())?;
    let stdout = child.stdout.take().context("stdout")?;
    // Wait until the pipe is full: its capacity is known, and what waits in it unread is the
    // kernel's own count (FIONREAD). A pipe is full when its page slots are, which can leave
    // up to a page of its capacity unused: full is within a page, and no longer growing.
    let capacity = pipe_size(&stdout)?;
    let page = i32::try_from(rustix::param::page_size())?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = -1;
    loop {
        let now = unread(&stdout)?;
        if now + page >= capacity && now == last {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {now} of {capacity} pipe bytes filled in 20 s");
        }
        last = now;
        std::thread::sleep(Duration::from_millis(250));
    }
    send_signal(child.id(), Signal::TERM)?;
    let started = Instant::now();
    let code = exit_within(&mut child, Duration::from_secs(10), "of SIGTERM with a stalled reader")?;
    eprintln!(
        "the {capacity}-byte pipe was full and unread; cctrace exited {:.2} s after SIGTERM",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(code, 0);
    assert_eq!(still_loaded(&programs)?, HeldBpf::default(), "programs or links left behind");
    drop(stdout);
    drop(sender);
    Ok(())
}

/// Bytes waiting unread in the pipe behind `stdout` (FIONREAD).
fn unread(stdout: &std::process::ChildStdout) -> Result<i32> {
    Ok(i32::try_from(rustix::io::ioctl_fionread(stdout).context("FIONREAD")?)?)
}

/// The capacity of the pipe behind `stdout` (F_GETPIPE_SZ).
fn pipe_size(stdout: &std::process::ChildStdout) -> Result<i32> {
    let size = rustix::pipe::fcntl_getpipe_size(stdout).context("F_GETPIPE_SZ")?;
    anyhow::ensure!(size > 0, "F_GETPIPE_SZ: {size}");
    Ok(i32::try_from(size)?)
}
