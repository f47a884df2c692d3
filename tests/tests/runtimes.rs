//! Containers under the real runtimes of the distribution: Docker (dockerd), Podman and LXC,
//! each running nginx that serves a large file with sendfile, their network namespaces joined
//! to one shared lossy emulated path, a client downloading from each. cctrace must name each
//! flow's container as the runtime does (`docker ps`, `podman ps`, `lxc-ls`), keep only that
//! container's flows under `--container NAME` and its short id, flag the CUBIC download with
//! the fix that fits the runtime, and `cctrace fix --container NAME --live --yes` must switch
//! the running connection (the client's goodput rises) until `--undo` puts it back.
//!
//! A runtime that is not installed or refuses to run here is skipped with the reason; under
//! `CI=true` that fails the test instead.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cctrace_lab::{AttachedNetns, Netns, NsThread};
use cctrace_tests::runtimes::{Container, Docker, Lxc, Podman, Unavailable, Workspace, BIG_FILE, HTTP_PORT};
use cctrace_tests::{demo_wan, parse_ss, require_kernel, run_cctrace, serial, Tracer};
use serde_json::Value;

const CC: &str = "net.ipv4.tcp_congestion_control";

use cctrace_lab::skip::in_ci;

/// An HTTP download of nginx's large file from the receiver side of the path, counting bytes.
struct Download {
    bytes: Arc<AtomicU64>,
    status: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    port: u16,
    thread: Option<NsThread<()>>,
}

impl Download {
    fn start(ns: &Netns, server: Ipv4Addr) -> Result<Download> {
        let bytes = Arc::new(AtomicU64::new(0));
        let status = Arc::new(Mutex::new(String::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<u16, String>>(1);
        let (b, s, st) = (bytes.clone(), status.clone(), stop.clone());
        let thread = ns.spawn_thread("download", move || {
            let connected =
                TcpStream::connect_timeout(&SocketAddrV4::new(server, HTTP_PORT).into(), Duration::from_secs(5))
                    .and_then(|mut c| {
                        c.write_all(
                            format!("GET /{BIG_FILE} HTTP/1.1\r\nHost: cct\r\nConnection: close\r\n\r\n").as_bytes(),
                        )?;
                        c.set_read_timeout(Some(Duration::from_millis(200)))?;
                        Ok(c)
                    });
            let mut conn = match connected {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(format!("connecting to {server}:{HTTP_PORT}: {e}")));
                    return;
                }
            };
            let _ = tx.send(conn.local_addr().map(|a| a.port()).map_err(|e| e.to_string()));
            let mut buf = vec![0u8; 1 << 18];
            let mut head = Vec::new();
            while !st.load(Ordering::Relaxed) {
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if head.len() < 64 {
                            head.extend_from_slice(&buf[..n.min(64)]);
                            let text = String::from_utf8_lossy(&head);
                            *s.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                                text.lines().next().unwrap_or_default().to_string();
                        }
                        b.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
        })?;
        let port = rx
            .recv_timeout(Duration::from_secs(10))
            .context("the download did not connect")?
            .map_err(anyhow::Error::msg)?;
        Ok(Download { bytes, status, stop, port, thread: Some(thread) })
    }

    /// Bits per second received over `window`.
    fn rate(&self, window: Duration) -> f64 {
        let (b0, t0) = (self.bytes.load(Ordering::Relaxed), Instant::now());
        std::thread::sleep(window);
        (self.bytes.load(Ordering::Relaxed) - b0) as f64 * 8.0 / t0.elapsed().as_secs_f64()
    }

    fn status_line(&self) -> String {
        self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl Drop for Download {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One runtime's container on the path, with its download.
struct Tenant {
    // Drop order: the download, the veth, then the container.
    download: Download,
    link: AttachedNetns,
    container: Box<dyn Container>,
}

impl Tenant {
    fn label(&self) -> String {
        format!("{} {}", self.container.runtime(), self.container.name())
    }

    /// Whether `v` is a line of this tenant's nginx socket.
    fn owns(&self, v: &Value) -> bool {
        v["netns"].as_u64() == Some(self.link.inode())
            && v["sport"].as_u64() == Some(u64::from(HTTP_PORT))
            && v["dport"].as_u64() == Some(u64::from(self.download.port))
    }

    /// The congestion control `ss -tni` shows for nginx's connection, in the container's netns.
    fn ss_cc(&self) -> Result<Option<String>> {
        let out = self.link.command("ss").args(["-tniH"]).output_within(CHILD_DEADLINE).context("running ss")?;
        if !out.status.success() {
            bail!("ss failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let sockets = parse_ss(&String::from_utf8_lossy(&out.stdout));
        let sock = sockets.iter().find(|s| s.local_port() == Some(HTTP_PORT) && s.state == "ESTAB");
        Ok(sock.and_then(|s| {
            ["bbr", "cubic", "reno"].iter().find(|cc| s.fields.contains_key(**cc)).map(|cc| (*cc).to_string())
        }))
    }

    fn netns_default(&self) -> Result<String> {
        let out = self.link.command("sysctl").args(["-n", CC]).output_within(CHILD_DEADLINE)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// A runtime's container, or why it cannot run here.
type Attempt = Result<Box<dyn Container>, Unavailable>;

/// Start each runtime's container, or say why it cannot run here (fatal under CI).
fn start_runtimes(ws: &Workspace) -> Result<Vec<Box<dyn Container>>> {
    let pid = std::process::id();
    let mut out: Vec<Box<dyn Container>> = Vec::new();
    let mut problems = Vec::new();
    let t = Instant::now();
    let attempts: [(&str, Attempt); 3] = [
        ("docker", Docker::start(ws, &format!("cct-web-docker-{pid}")).map(|c| Box::new(c) as Box<dyn Container>)),
        ("podman", Podman::start(ws, &format!("cct-web-podman-{pid}")).map(|c| Box::new(c) as Box<dyn Container>)),
        ("lxc", Lxc::start(ws, &format!("cct-web-lxc-{pid}")).map(|c| Box::new(c) as Box<dyn Container>)),
    ];
    for (runtime, attempt) in attempts {
        match attempt {
            Ok(c) => out.push(c),
            Err(why) => {
                eprintln!("{runtime}: {why}");
                problems.push(format!("{runtime}: {why}"));
            }
        }
    }
    println!("runtimes started in {:.1} s", t.elapsed().as_secs_f64());
    if !problems.is_empty() && in_ci() {
        bail!("CI must run every runtime, but {}", problems.join("; "));
    }
    Ok(out)
}

/// The latest line of `t`'s socket that names a container.
fn named_flow<'a>(lines: &'a [Value], t: &Tenant) -> Option<&'a Value> {
    lines.iter().rev().find(|v| v["type"] == "flow" && t.owns(v) && !v["container"].is_null())
}

/// The name and the identity cctrace gave `t`'s flow agree with the runtime's own listing.
fn check_named(v: &Value, t: &Tenant) -> Result<()> {
    let c = &t.container;
    let listed = c.listed()?;
    let (id, name) = listed
        .iter()
        .find(|(_, n)| n == c.name())
        .with_context(|| format!("{} does not list {}: {listed:?}", c.runtime(), c.name()))?;
    let got = &v["container"];
    assert_eq!(got["runtime"], c.runtime(), "{}: {v}", t.label());
    assert_eq!(got["name"].as_str(), Some(name.as_str()), "{}: {v}", t.label());
    assert_eq!(got["id"].as_str(), Some(id.as_str()), "{}: {v}", t.label());
    assert_eq!(id, c.id(), "{}", t.label());
    Ok(())
}

/// The fix printed for `t`'s flagged flow fits its runtime.
fn check_fix_advice(v: &Value, t: &Tenant) -> Result<()> {
    let fix: Vec<&str> =
        v["fix"].as_array().context("a flagged flow carries its fix")?.iter().filter_map(Value::as_str).collect();
    let all = fix.join("\n");
    let set = format!("sysctl -w {CC}=bbr");
    let name = t.container.name();
    match t.container.runtime() {
        runtime @ ("docker" | "podman") => {
            // Entered from the host by a process that really is in the container's namespace.
            let cmd = fix.iter().find(|l| !l.starts_with('#') && l.ends_with(&set)).context(all.clone())?;
            let pid: u32 = cmd
                .strip_prefix("nsenter --net=/proc/")
                .and_then(|r| r.split('/').next())
                .and_then(|p| p.parse().ok())
                .with_context(|| format!("{}: {cmd}", t.label()))?;
            let ino = std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
            assert_eq!(ino.ok(), Some(t.link.inode()), "{}: {cmd} enters another namespace", t.label());
            let persist = fix.iter().find(|l| l.starts_with("# persist")).context(all.clone())?;
            assert!(
                persist.contains(&format!("recreate {name} with {runtime} run --sysctl {CC}=bbr")),
                "{}: {persist}",
                t.label()
            );
        }
        "lxc" => {
            // Outside LXC's default lxcpath: lxc-attach is told where, or it finds nothing.
            let lxcpath = t.container.lxc_path().context("an LXC container has an lxcpath")?.display().to_string();
            let cmd = format!("lxc-attach -P {lxcpath} -n {name} -- {set}");
            assert!(fix.contains(&cmd.as_str()), "{}: no {cmd:?} in {all}", t.label());
            let persist = fix
                .iter()
                .find_map(|l| l.strip_prefix("# persist (LXC sets it at every start): "))
                .context(all.clone())?;
            let rollback = fix.iter().find_map(|l| l.strip_prefix("# roll back: ")).context(all.clone())?;
            // Pasted as printed, on this host: the switch reaches the container's namespace, the
            // persisting line its config, and the roll back undoes both.
            let config = std::path::Path::new(&lxcpath).join(name).join("config");
            let sh = |script: &str| -> Result<()> {
                let out = Command::new("sh").arg("-c").arg(script).output_within(CHILD_DEADLINE)?;
                anyhow::ensure!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
                Ok(())
            };
            sh(&cmd)?;
            assert_eq!(t.netns_default()?, "bbr", "{}: {cmd}", t.label());
            sh(persist)?;
            let text = std::fs::read_to_string(&config)?;
            assert!(text.contains("\nlxc.sysctl.net.ipv4.tcp_congestion_control = bbr\n"), "{persist}: {text}");
            sh(rollback)?;
            assert_eq!(t.netns_default()?, "cubic", "{}: {rollback}", t.label());
            assert!(!std::fs::read_to_string(&config)?.contains("lxc.sysctl"), "{rollback}");
        }
        other => bail!("unknown runtime {other}"),
    }
    Ok(())
}

/// cctrace with `--container QUERY` shows `kept`'s flow and nothing of the others'.
fn check_filter(query: &str, kept: &Tenant, all: &[Tenant]) -> Result<()> {
    let tracer = Tracer::start(&["--interval", "300", "--container", query])?;
    tracer.wait_for(
        &format!("{}'s flow under --container {query}", kept.label()),
        Duration::from_secs(20),
        |lines| lines.iter().any(|v| v["type"] == "flow" && kept.owns(v)),
    )?;
    // The others send all the time: a few more intervals give each many chances to leak.
    std::thread::sleep(Duration::from_secs(1));
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);
    for v in lines.iter().filter(|v| v["type"] == "flow") {
        assert_eq!(v["netns"].as_u64(), Some(kept.link.inode()), "--container {query} let through: {v}");
    }
    for other in all.iter().filter(|t| t.link.inode() != kept.link.inode()) {
        assert!(!lines.iter().any(|v| other.owns(v)), "--container {query} let {}'s flow through", other.label());
    }
    let s = lines.iter().rev().find(|v| v["type"] == "summary").context("no summary")?;
    assert!(s["events_filtered"].as_u64() > Some(0), "the kernel filtered nothing: {s}");
    Ok(())
}

/// `cctrace fix --container NAME --live --yes` on `t`: the same connection moves to bbr (ss and
/// cctrace agree), the download speeds up at least 3x; `--undo` puts connection and default back.
fn check_live_fix(tracer: &Tracer, t: &Tenant, cookie: u64) -> Result<()> {
    let name = t.container.name();
    let before = t.download.rate(Duration::from_secs(4));
    let (code, out, err) = run_cctrace(&["fix", "--container", name, "--live", "--yes"])?;
    println!("{out}{err}");
    assert_eq!(code, 0, "{}: {out}{err}", t.label());
    assert!(out.contains(&format!("container {name} (pid ")), "{}: {out}", t.label());
    assert!(out.contains("from cubic to bbr"), "{}: {out}", t.label());
    assert!(
        out.contains(&format!(":{HTTP_PORT} -> :{} (cookie {cookie}) from cubic to bbr", t.download.port)),
        "{}: {out}",
        t.label()
    );
    assert_eq!(t.ss_cc()?.as_deref(), Some("bbr"), "{}: ss after the fix", t.label());
    assert_eq!(t.netns_default()?, "bbr", "{}", t.label());
    tracer.wait_for(&format!("{}'s connection on bbr", t.label()), Duration::from_secs(10), |lines| {
        lines
            .iter()
            .rev()
            .find(|v| v["type"] == "flow" && v["cookie"].as_u64() == Some(cookie))
            .is_some_and(|v| v["cc"] == "bbr")
    })?;
    let after = t.download.rate(Duration::from_secs(4));
    println!("{}: goodput {:.1} -> {:.1} Mbit/s", t.label(), before / 1e6, after / 1e6);
    assert!(after >= 3.0 * before, "{}: goodput {:.1} -> {:.1} Mbit/s", t.label(), before / 1e6, after / 1e6);

    let (code, out, err) = run_cctrace(&["fix", "--undo", "--container", name, "--yes"])?;
    println!("{out}{err}");
    assert_eq!(code, 0, "{}: {out}{err}", t.label());
    assert_eq!(t.ss_cc()?.as_deref(), Some("cubic"), "{}: ss after the undo", t.label());
    assert_eq!(t.netns_default()?, "cubic", "{}: the default is back", t.label());
    Ok(())
}

#[test]
fn docker_podman_and_lxc_containers_are_named_filtered_flagged_and_fixed() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    let started = Instant::now();
    let mut ws = Workspace::create()?;
    // The containers' nginx must run CUBIC, and cannot choose one itself: each container's
    // namespace gets it as its default, which a non-initial namespace may only choose from the
    // host's allowed list.
    ws.allow_cc("cubic")?;
    let path = demo_wan(0.02)?; // CUBIC crawls on it, BBR does not
    let containers = start_runtimes(&ws)?;
    if containers.is_empty() {
        cctrace_lab::skip::skip("no container runtime runs here");
        return Ok(());
    }
    let mut tenants = Vec::new();
    for (slot, container) in containers.into_iter().enumerate() {
        let link = path.attach(container.pid()?, u8::try_from(slot)?)?;
        let set = link.command("sysctl").args(["-w", &format!("{CC}=cubic")]).output_within(CHILD_DEADLINE)?;
        assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
        let download = Download::start(path.receiver(), link.addr())
            .with_context(|| format!("downloading from {} {}", container.runtime(), container.name()))?;
        tenants.push(Tenant { download, link, container });
    }
    println!("set up in {:.1} s", started.elapsed().as_secs_f64());

    let tracer = Tracer::start(&["--interval", "1000"])?;
    tracer.wait_for("every container's download named and flagged", Duration::from_secs(60), |lines| {
        tenants.iter().all(|t| named_flow(lines, t).is_some_and(|v| v["flagged"] == true))
    })?;
    println!("flagged after {:.1} s", started.elapsed().as_secs_f64());
    let lines = tracer.lines();
    let mut cookies = Vec::new();
    for t in &tenants {
        assert!(t.download.status_line().starts_with("HTTP/1.1 200"), "{}: {}", t.label(), t.download.status_line());
        let v = named_flow(&lines, t).context("named")?;
        check_named(v, t)?;
        assert_eq!(v["cc"], "cubic", "{}: {v}", t.label());
        assert_eq!(v["netns_cc"], "cubic", "{}: {v}", t.label());
        check_fix_advice(v, t)?;
        cookies.push(v["cookie"].as_u64().context("cookie")?);
    }

    for t in &tenants {
        check_filter(t.container.name(), t, &tenants)?;
        // Docker's and Podman's short id, as their `ps` shows it (an LXC container's id is its name).
        let id = t.container.id();
        if id.len() == 64 {
            check_filter(&id[..12], t, &tenants)?;
        }
    }
    println!("filters checked after {:.1} s", started.elapsed().as_secs_f64());

    for (t, cookie) in tenants.iter().zip(cookies) {
        check_live_fix(&tracer, t, cookie)?;
    }
    let (code, _) = tracer.stop()?;
    assert_eq!(code, 0);
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
