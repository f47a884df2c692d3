//! `cctrace fix` on the real kernel: a flagged CUBIC flow on a lossy path is switched to BBR
//! while it runs (same socket), the namespace's default follows, nothing else changes, and
//! `--undo` puts everything back. The kernel's refusals come back as one specific line.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cctrace_lab::{Cgroup, Netns, SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};
use cctrace_tests::{cctrace_bin, demo_wan, require_kernel, run_cctrace, serial, ss_in, RemoveOnDrop, Tracer};
use serde_json::Value;

const PORT: u16 = cctrace_lab::SINK_PORT;
const CC: &str = "net.ipv4.tcp_congestion_control";
const HOST_CC: &str = "/proc/sys/net/ipv4/tcp_congestion_control";
const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

fn state_file(netns: u64) -> PathBuf {
    PathBuf::from(format!("/run/cctrace/fix-netns-{netns}.json"))
}

/// A host sysctl changed for the test, written back exactly as it was on drop.
struct HostSysctl {
    path: &'static str,
    original: String,
}

impl HostSysctl {
    fn set(path: &'static str, value: &str) -> Result<Self> {
        let original = std::fs::read_to_string(path)?.trim().to_string();
        let guard = Self { path, original };
        std::fs::write(path, value)?;
        Ok(guard)
    }
}

impl Drop for HostSysctl {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(self.path, &self.original) {
            eprintln!("restoring {} to {:?} failed: {e}", self.path, self.original);
        }
    }
}

fn host_default() -> Result<String> {
    Ok(std::fs::read_to_string(HOST_CC)?.trim().to_string())
}

/// The latest flow line of socket `cookie`.
fn flow_of(lines: &[Value], cookie: u64) -> Option<Value> {
    lines.iter().rev().find(|v| v["type"] == "flow" && v["cookie"].as_u64() == Some(cookie)).cloned()
}

/// The congestion control `ss -tni` shows for the socket with local port `port` in `ns`.
fn ss_cc(ns: &Netns, port: u16) -> Result<Option<String>> {
    let sockets = ss_in(ns.name())?;
    let sock = sockets.iter().find(|s| s.local_port() == Some(port) && s.state == "ESTAB");
    Ok(sock.and_then(|s| {
        ["bbr", "cubic", "reno"].iter().find(|cc| s.fields.contains_key(**cc)).map(|cc| (*cc).to_string())
    }))
}

/// Bytes the sink received per second over `window`.
fn sink_rate(sink: &Sink, window: Duration) -> f64 {
    let (b0, t0) = (sink.total_bytes(), Instant::now());
    std::thread::sleep(window);
    (sink.total_bytes() - b0) as f64 * 8.0 / t0.elapsed().as_secs_f64()
}

#[test]
fn live_fix_switches_a_flagged_cubic_flow_to_bbr_and_undo_switches_it_back() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let path = demo_wan(0.02)?; // CUBIC crawls on it, BBR does not
    let (sender_ns, other_ns) = (path.sender(), path.receiver());
    let netns = sender_ns.inode();
    let _no_state = RemoveOnDrop(state_file(netns));
    // A namespace inherits the host's default (bbr here): give it a loss-based one, allowed
    // in every namespace, so the fix has a default to change.
    sender_ns.sysctl_set(CC, "reno")?;
    let (host_before, other_before) = (host_default()?, other_ns.sysctl_get(CC)?);

    let tracer = Tracer::start(&["--interval", "1000"])?;
    let sink = Sink::start(other_ns, path.receiver_addr(), PORT, SinkOptions::default())?;
    let sender = Sender::start(
        sender_ns,
        path.receiver_addr(),
        PORT,
        SenderOptions { nodelay: true, ..SenderOptions::new("cubic", SendMode::Bulk, Duration::from_secs(120)) },
    )?;
    let port = sender.local_port();
    let started = Instant::now();
    let mine = |v: &Value| v["type"] == "flow" && v["netns"].as_u64() == Some(netns) && v["sport"] == port;
    tracer.wait_for("the CUBIC flow flagged", Duration::from_secs(40), |lines| {
        lines.iter().any(|v| mine(v) && v["flagged"] == true)
    })?;
    let to_flag = started.elapsed();
    let lines = tracer.lines();
    let flagged = lines.iter().find(|v| mine(v) && v["flagged"] == true).context("flagged line")?;
    let cookie = flagged["cookie"].as_u64().context("cookie")?;
    assert_eq!(flagged["cc"], "cubic");
    // Goodput before, over as long as the flag took (at least 3 tracer intervals).
    let window = to_flag.max(Duration::from_secs(3)).min(Duration::from_secs(8));
    let before = sink_rate(&sink, window);
    println!("flagged after {to_flag:?}; CUBIC goodput {:.1} Mbit/s over {window:?}", before / 1e6);

    let log = std::env::temp_dir().join(format!("cctrace-fix-test-{}.log", std::process::id()));
    let _log_removed = RemoveOnDrop(log.clone());
    let log_arg = log.to_string_lossy().into_owned();
    let (code, out, err) =
        run_cctrace(&["--log-file", &log_arg, "fix", "--netns", sender_ns.name(), "--live", "--yes"])?;
    println!("{out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    let logged = std::fs::read_to_string(&log)?;
    assert!(logged.contains("set from reno to bbr"), "{logged}");
    assert!(logged.contains(&format!("switched socket {cookie} ")), "{logged}");
    assert!(out.contains("from reno to bbr"), "the plan says what changes: {out}");
    assert!(
        out.contains(&format!("switched connection :{port} -> :{PORT} (cookie {cookie}) from cubic to bbr")),
        "{out}"
    );
    let state = state_file(netns);
    assert_eq!(std::fs::metadata(&state)?.mode() & 0o777, 0o600, "state readable by root only");
    let switched_at = Instant::now();

    // The same socket is now on bbr, in ss and in cctrace.
    assert_eq!(ss_cc(sender_ns, port)?.as_deref(), Some("bbr"));
    tracer.wait_for("the same cookie on bbr", Duration::from_secs(10), |lines| {
        flow_of(lines, cookie).is_some_and(|v| v["cc"] == "bbr")
    })?;
    // BBR's start-up takes a few round trips; measure once cctrace reports it, over the same window.
    let after = sink_rate(&sink, window);
    println!("BBR goodput {:.1} Mbit/s over {window:?} ({:?} after the switch)", after / 1e6, switched_at.elapsed());
    assert!(after >= 10.0 * before, "goodput {:.1} -> {:.1} Mbit/s", before / 1e6, after / 1e6);
    tracer.wait_for("the flag cleared", Duration::from_secs(30), |lines| {
        flow_of(lines, cookie).is_some_and(|v| v["cc"] == "bbr" && v["flagged"] == false)
    })?;

    // New connections from the namespace get bbr without asking; nothing else changed.
    assert_eq!(sender_ns.sysctl_get(CC)?, "bbr");
    let fresh = Sender::start(
        sender_ns,
        path.receiver_addr(),
        PORT,
        SenderOptions { congestion: None, ..SenderOptions::new("bbr", SendMode::Bulk, Duration::from_millis(300)) },
    )?;
    assert_eq!(fresh.wait()?.congestion, "bbr");
    assert_eq!(other_ns.sysctl_get(CC)?, other_before, "the other namespace keeps its default");
    assert_eq!(host_default()?, host_before, "the host keeps its default");

    let (code, out, err) = run_cctrace(&["fix", "--undo", "--netns", sender_ns.name(), "--yes"])?;
    println!("{out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(sender_ns.sysctl_get(CC)?, "reno", "the default is back");
    assert_eq!(ss_cc(sender_ns, port)?.as_deref(), Some("cubic"), "the same flow is back on cubic");
    tracer.wait_for("the same cookie back on cubic", Duration::from_secs(10), |lines| {
        flow_of(lines, cookie).is_some_and(|v| v["cc"] == "cubic")
    })?;
    assert!(!state.exists(), "undo deletes its state");
    // The running tracer took both from the host's journal as actions of its own run, in order,
    // each naming the switched connection.
    let actions = |lines: &[Value]| -> Vec<Value> { lines.iter().filter(|v| v["type"] == "action").cloned().collect() };
    tracer.wait_for("the fix and the undo among the tracer's actions", Duration::from_secs(10), |lines| {
        actions(lines).len() >= 2
    })?;
    let taken = actions(&tracer.lines());
    let kinds: Vec<&str> = taken.iter().filter_map(|a| a["action"].as_str()).collect();
    assert_eq!(kinds, ["fix", "undo"], "{taken:#?}");
    for a in &taken {
        let cookies: Vec<u64> =
            a["switched"].as_array().into_iter().flatten().filter_map(|f| f["cookie"].as_u64()).collect();
        assert!(cookies.contains(&cookie), "{a:#}");
    }
    let (code, out, err) = run_cctrace(&["fix", "--undo", "--netns", sender_ns.name(), "--yes"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("nothing to undo"), "{out}");
    assert_eq!(other_ns.sysctl_get(CC)?, other_before);
    assert_eq!(host_default()?, host_before);

    sender.stop();
    sender.wait()?;
    let (code, _) = tracer.stop()?;
    assert_eq!(code, 0);
    Ok(())
}

#[test]
fn a_restricted_or_unknown_algorithm_is_refused_with_its_reason_and_nothing_changes() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let ns = Netns::create("fixrefused")?;
    let _no_state = RemoveOnDrop(state_file(ns.inode()));
    ns.sysctl_set(CC, "reno")?;
    let host_before = host_default()?;
    let allowed_before = std::fs::read_to_string(ALLOWED)?;
    {
        // bbr off the list non-initial namespaces may choose from.
        let _allowed = HostSysctl::set(ALLOWED, "reno")?;
        let (code, out, err) = run_cctrace(&["fix", "--netns", ns.name(), "--live", "--yes"])?;
        println!("{out}{err}");
        assert_ne!(code, 0);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("bbr is restricted for non-initial network namespaces (EPERM)"), "{err}");
        assert!(err.contains("tcp_allowed_congestion_control=\"reno bbr\""), "says how to allow it: {err}");
    }
    assert_eq!(std::fs::read_to_string(ALLOWED)?, allowed_before, "the allowed list is restored");
    assert_eq!(ns.sysctl_get(CC)?, "reno", "nothing changed");
    assert!(!state_file(ns.inode()).exists());

    let (code, out, err) = run_cctrace(&["fix", "--netns", ns.name(), "--cc", "nosuchcc", "--yes"])?;
    println!("{out}{err}");
    assert_ne!(code, 0);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("nosuchcc is not available and its module tcp_nosuchcc could not be loaded (ENOENT)"),
        "{err}"
    );
    assert_eq!(ns.sysctl_get(CC)?, "reno", "nothing changed");
    assert!(!state_file(ns.inode()).exists());

    // The host's own namespace needs its own flag besides --yes.
    let (code, _, err) = run_cctrace(&["fix", "--netns", "/proc/self/ns/net", "--yes"])?;
    assert_ne!(code, 0);
    assert!(err.contains("--host-namespace"), "{err}");
    assert_eq!(host_default()?, host_before);
    // Without --yes and without a terminal nothing is confirmed.
    let (code, _, err) = run_cctrace(&["fix", "--netns", ns.name()])?;
    assert_ne!(code, 0);
    assert!(err.contains("not confirmed, nothing changed"), "{err}");
    assert_eq!(ns.sysctl_get(CC)?, "reno");
    assert!(!Path::new(&state_file(ns.inode())).exists());
    Ok(())
}

#[test]
fn a_read_only_proc_sys_is_refused_with_its_reason_and_nothing_changes() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let ns = Netns::create("fixrofs")?;
    let _no_state = RemoveOnDrop(state_file(ns.inode()));
    ns.sysctl_set(CC, "reno")?;
    // cctrace in a mount namespace of its own whose /proc/sys is read-only, as in a container or
    // under systemd's ProtectKernelTunables.
    let script = format!(
        "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec {} fix --netns {} --yes",
        cctrace_bin().display(),
        ns.name()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .output_within(CHILD_DEADLINE)
        .context("running unshare")?;
    let (code, err) = (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned());
    println!("{}{err}", String::from_utf8_lossy(&out.stdout));
    assert_ne!(code, 0);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("read-only where cctrace runs (EROFS"), "{err}");
    assert!(err.contains("--sysctl net.ipv4.tcp_congestion_control=bbr"), "says what to do instead: {err}");
    assert_eq!(ns.sysctl_get(CC)?, "reno", "nothing changed");
    assert!(!state_file(ns.inode()).exists(), "no state for a fix that did not happen");
    // The same command where /proc/sys is writable goes through: the refusal was the mount's.
    let (code, out, err) = run_cctrace(&["fix", "--netns", ns.name(), "--yes"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(ns.sysctl_get(CC)?, "bbr");
    let (code, out, err) = run_cctrace(&["fix", "--netns", ns.name(), "--undo", "--yes"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(ns.sysctl_get(CC)?, "reno");
    Ok(())
}

#[test]
fn persisting_on_the_host_writes_only_its_own_files_and_undo_removes_only_those() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let host_before = host_default()?;
    // The host's /etc stays untouched: cctrace runs in a mount namespace of its own with empty
    // /etc/sysctl.d and /etc/modules-load.d, one of them holding files that are not its own.
    let bin = cctrace_bin();
    let fix = format!("{} fix --netns /proc/self/ns/net --host-namespace --yes", bin.display());
    let script = format!(
        "set -e; mount -t tmpfs cct /etc/sysctl.d; mount -t tmpfs cct /etc/modules-load.d; \
         echo 'vm.swappiness=10' > /etc/sysctl.d/99-mine.conf; echo mine > /etc/modules-load.d/cctrace-bbr.conf; \
         {fix} --persist; echo FILES; head /etc/sysctl.d/* /etc/modules-load.d/*; \
         {fix} --undo; echo AFTER; head /etc/sysctl.d/* /etc/modules-load.d/*"
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .output_within(CHILD_DEADLINE)
        .context("running unshare")?;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{stdout}{stderr}");
    assert!(out.status.success(), "{stdout}{stderr}");
    let (fixed, undone) = stdout.split_once("AFTER").context("the script did not get to the undo")?;
    let files = fixed.split_once("FILES").map(|(_, f)| f).context("no file listing")?;
    // Its own sysctl file, written and said; the modules file existed and is left as it was.
    assert!(fixed.contains("cctrace: wrote /etc/sysctl.d/90-cctrace-bbr.conf"), "{fixed}");
    assert!(files.contains("net.ipv4.tcp_congestion_control=bbr"), "{files}");
    assert!(!fixed.contains("wrote /etc/modules-load.d"), "an existing file is never overwritten: {fixed}");
    assert!(files.contains("modules-load.d/cctrace-bbr.conf <==\nmine"), "{files}");
    // Undo removes what it wrote, nothing else.
    assert!(stdout.contains("cctrace: removed /etc/sysctl.d/90-cctrace-bbr.conf"), "{stdout}");
    assert!(!undone.contains("90-cctrace-bbr.conf <=="), "{undone}");
    assert!(undone.contains("99-mine.conf <==\nvm.swappiness=10"), "{undone}");
    assert!(undone.contains("cctrace-bbr.conf <==\nmine"), "{undone}");
    assert_eq!(host_default()?, host_before, "the host's default is as it was");
    Ok(())
}

#[test]
fn a_docker_container_is_fixed_by_name_and_persisting_points_to_the_runtime() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    const ID: &str = "5e1f2a9be0d7c3b5a6e8f9d0c1b2a3948576f5e4d3c2b1a0f9e8d7c6b5a4cafe";
    // Docker's own file naming the container, as on a host running it.
    let root = std::env::temp_dir().join(format!("cct-fix-docker-{}", std::process::id()));
    let dir = root.join("containers").join(ID);
    std::fs::create_dir_all(&dir)?;
    let _root_removed = RemoveDirOnDrop(root.clone());
    std::fs::write(dir.join("config.v2.json"), format!(r#"{{"ID":"{ID}","Name":"/jellyfin","State":{{"Pid":1}}}}"#))?;
    let top = Cgroup::top()?;
    let mut cgroup = top.child(&format!("system.slice/docker-{ID}.scope"))?;
    let lab = VethPair::create(VethOptions::default())?;
    let ns = lab.sender();
    let _no_state = RemoveOnDrop(state_file(ns.inode()));
    ns.sysctl_set(CC, "reno")?;
    cgroup.spawn_resident(ns)?;
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let sender = Sender::start(
        ns,
        lab.receiver_addr(),
        PORT,
        SenderOptions {
            socket_cgroup: Some(cgroup.path().to_path_buf()),
            ..SenderOptions::new(
                "cubic",
                SendMode::Paced { rate_bps: 2_000_000, write_size: 16 << 10 },
                Duration::from_secs(60),
            )
        },
    )?;
    let port = sender.local_port();
    let receiver_before = lab.receiver().sysctl_get(CC)?;
    let docker_root = root.to_string_lossy().into_owned();

    let (code, out, err) = run_cctrace(&[
        "--docker-root",
        &docker_root,
        "fix",
        "--container",
        "jellyfin",
        "--live",
        "--persist",
        "--yes",
    ])?;
    println!("{out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("network namespace container jellyfin (pid "), "{out}");
    assert!(out.contains("recreate it with docker run --sysctl net.ipv4.tcp_congestion_control=bbr"), "{out}");
    assert!(out.contains(&format!("switched connection :{port} -> :{PORT}")), "{out}");
    assert_eq!(ns.sysctl_get(CC)?, "bbr");
    assert_eq!(ss_cc(ns, port)?.as_deref(), Some("bbr"));
    assert_eq!(lab.receiver().sysctl_get(CC)?, receiver_before, "only the container's namespace");

    let (code, out, err) =
        run_cctrace(&["--docker-root", &docker_root, "fix", "--undo", "--container", "jellyfin", "--yes"])?;
    println!("{out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(ns.sysctl_get(CC)?, "reno");
    assert_eq!(ss_cc(ns, port)?.as_deref(), Some("cubic"));
    assert!(!state_file(ns.inode()).exists());
    sender.stop();
    sender.wait()?;
    Ok(())
}

struct RemoveDirOnDrop(PathBuf);

impl Drop for RemoveDirOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn undo_of_a_namespace_deleted_since_its_fix_clears_the_state() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let ns = Netns::create("fixgone")?;
    let (name, state) = (ns.name().to_string(), state_file(ns.inode()));
    let _no_state = RemoveOnDrop(state.clone());
    ns.sysctl_set(CC, "reno")?;
    let (code, out, err) = run_cctrace(&["fix", "--netns", &name, "--yes"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(state.exists());
    drop(ns);
    let (code, out, err) = run_cctrace(&["fix", "--undo", "--netns", &name, "--yes"])?;
    println!("{out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("is gone: nothing to restore in it"), "{out}");
    assert!(!state.exists(), "the state goes with it");
    Ok(())
}
