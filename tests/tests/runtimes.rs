//! Containers under the real runtimes of the distribution: Docker (dockerd), Podman and LXC,
//! each running nginx that serves a large file with sendfile, their network namespaces joined
//! to one shared lossy emulated path, a client downloading from each. cctrace must name each
//! flow's container as the runtime does (`docker ps`, `podman ps`, `lxc-ls`), keep only that
//! container's flows under `--container NAME` and its short id, flag the CUBIC download with
//! the fix that fits the runtime, and `cctrace fix --container NAME --live --yes` must switch
//! the running connection (the client's goodput rises) until `--undo` puts it back.
//!
//! cctrace's own container image, run by the lines its page documents (read from the page), must
//! do the same from inside its container under dockerd and Podman, serve on the host's port and
//! leave nothing loaded after `docker stop`; the compose file and the Unraid template must be
//! the documented `serve` line.
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
use cctrace_lab::{AttachedNetns, EmulatedPath, Netns, NsThread};
use cctrace_tests::runtimes::image::{self, RunLine};
use cctrace_tests::runtimes::{run, Container, Docker, Lxc, Podman, Unavailable, Workspace, BIG_FILE, HTTP_PORT};
use cctrace_tests::tmux::Tmux;
use cctrace_tests::{
    bpf_held_by, bpf_ids, demo_wan, loaded_bpf_programs, parse_ss, require_kernel, run_cctrace, serial, Tracer,
};
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

/// Start a container of each of `runtimes` (`docker`, `podman`, `lxc`), named `PREFIX-RUNTIME-PID`,
/// or say why it cannot run here (fatal under CI).
fn start_runtimes(ws: &Workspace, prefix: &str, runtimes: &[&str]) -> Result<Vec<Box<dyn Container>>> {
    let pid = std::process::id();
    let mut out: Vec<Box<dyn Container>> = Vec::new();
    let mut problems = Vec::new();
    let t = Instant::now();
    let attempts = runtimes.iter().map(|runtime| {
        let name = format!("{prefix}-{runtime}-{pid}");
        let attempt: Attempt = match *runtime {
            "docker" => Docker::start(ws, &name).map(|c| Box::new(c) as Box<dyn Container>),
            "podman" => Podman::start(ws, &name).map(|c| Box::new(c) as Box<dyn Container>),
            _ => Lxc::start(ws, &name).map(|c| Box::new(c) as Box<dyn Container>),
        };
        (*runtime, attempt)
    });
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

/// Each container joined to the lossy `path`, its namespace's default set to CUBIC, and a
/// download from its nginx running.
fn downloads_from(path: &EmulatedPath, containers: Vec<Box<dyn Container>>) -> Result<Vec<Tenant>> {
    let mut tenants = Vec::new();
    for (slot, container) in containers.into_iter().enumerate() {
        let link = path.attach(container.pid()?, u8::try_from(slot)?)?;
        let set = link.command("sysctl").args(["-w", &format!("{CC}=cubic")]).output_within(CHILD_DEADLINE)?;
        assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
        let download = Download::start(path.receiver(), link.addr())
            .with_context(|| format!("downloading from {} {}", container.runtime(), container.name()))?;
        tenants.push(Tenant { download, link, container });
    }
    Ok(tenants)
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

/// Wait until the tracer has judged `kept`'s flow `n` more times (one line an interval, while it
/// downloads): each interval the others' flows had another chance to leak through its filter.
fn more_rounds(tracer: &Tracer, kept: &Tenant, n: usize) -> Result<()> {
    let is_kept = |v: &Value| v["type"] == "flow" && kept.owns(v);
    let seen = tracer.count(is_kept);
    tracer.wait_for(&format!("{n} more intervals of {}'s flow", kept.label()), Duration::from_secs(15), |lines| {
        lines.iter().filter(|v| is_kept(v)).count() >= seen + n
    })
}

/// cctrace with `--container QUERY` shows `kept`'s flow and nothing of the others'.
fn check_filter(query: &str, kept: &Tenant, all: &[Tenant]) -> Result<()> {
    let tracer = Tracer::start(&["--interval", "300", "--container", query])?;
    tracer.wait_for(
        &format!("{}'s flow under --container {query}", kept.label()),
        Duration::from_secs(20),
        |lines| lines.iter().any(|v| v["type"] == "flow" && kept.owns(v)),
    )?;
    // The others send all the time: three more intervals give each many chances to leak.
    more_rounds(&tracer, kept, 3)?;
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
    let containers = start_runtimes(&ws, "cct-web", &["docker", "podman", "lxc"])?;
    if containers.is_empty() {
        cctrace_lab::skip::skip("no container runtime runs here");
        return Ok(());
    }
    let tenants = downloads_from(&path, containers)?;
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

/// A container the test started under an engine, removed on drop whatever happened (its
/// engine client may be gone, the container still running).
struct Started {
    engine: Command,
    name: String,
}

impl Started {
    fn engine(&self) -> Command {
        let mut c = Command::new(self.engine.get_program());
        c.args(self.engine.get_args());
        c
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = run(self.engine().args(["rm", "-f", &self.name]));
    }
}

/// The image loaded into `t`'s engine, untagged again on drop (a daemon the test found running
/// keeps an image of that tag it had before).
struct Loaded {
    engine: Command,
    name: String,
    before: String,
}

impl Loaded {
    fn load(t: &Tenant, archive: &std::path::Path) -> Result<Loaded> {
        let engine = t.container.engine().context("an engine")?;
        let mut c = Command::new(engine.get_program());
        c.args(engine.get_args());
        let before = run(c.args(["images", "-q", &image::tag()])).unwrap_or_default().trim().to_string();
        let name = image::load(t.container.engine().context("an engine")?, archive)?;
        Ok(Loaded { engine, name, before })
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if self.before.is_empty() {
            let mut c = Command::new(self.engine.get_program());
            let _ = run(c.args(self.engine.get_args()).args(["rmi", &self.name]));
        }
    }
}

/// `engine run` with a documented line's `options` (plus the engine's own and `extra`), the
/// image, and `args`.
fn engine_run(t: &Tenant, options: &[String], extra: &[String], args: &[String]) -> Result<Command> {
    let mut c = t.container.engine().context("an engine")?;
    c.arg("run").args(t.container.engine_run_options()).args(options).args(extra).arg(image::tag()).args(args);
    Ok(c)
}

/// cctrace from its image, JSON Lines under `--container` `t`, by the terminal UI's documented
/// line: it names `t`'s container as the engine lists it, and nothing of the `others` passes.
fn check_image_filter(t: &Tenant, ui: &RunLine, others: &[&Tenant]) -> Result<()> {
    let name = format!("cct-img-json-{}", std::process::id());
    let args: Vec<String> =
        ["--json", "--interval", "500", "--container", t.container.name()].map(String::from).to_vec();
    let cmd = engine_run(t, &ui.options_without_terminal(), &["--name".into(), name.clone()], &args)?;
    let _started = Started { engine: t.container.engine().context("an engine")?, name };
    let tracer = Tracer::start_command(cmd)?;
    tracer.wait_for(&format!("{}'s flow named from the image", t.label()), Duration::from_secs(30), |lines| {
        named_flow(lines, t).is_some()
    })?;
    // The others send all the time: three intervals more give each many chances to leak.
    more_rounds(&tracer, t, 3)?;
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0, "{}: cctrace in its container ended with {code}", t.label());
    check_named(named_flow(&lines, t).context("named")?, t)?;
    for other in others {
        assert!(!lines.iter().any(|v| other.owns(v)), "--container let {}'s flow through", other.label());
    }
    for v in lines.iter().filter(|v| v["type"] == "flow") {
        assert_eq!(v["netns"].as_u64(), Some(t.link.inode()), "--container {} let through: {v}", t.container.name());
    }
    let s = lines.iter().rev().find(|v| v["type"] == "summary").context("no summary")?;
    assert!(s["events_filtered"].as_u64() > Some(0), "the kernel filtered nothing: {s}");
    Ok(())
}

/// The documented fix and undo lines, for `t`'s container: the running download moves to BBR
/// (the kernel's view, `ss`) and back to CUBIC, the namespace's default with it.
fn check_image_fix(t: &Tenant, fix: &RunLine, undo: &RunLine) -> Result<()> {
    let for_t = |line: &RunLine| -> Vec<String> {
        let mut args: Vec<String> = line
            .args
            .iter()
            .map(|a| if a == "jellyfin" { t.container.name().to_string() } else { a.clone() })
            .collect();
        // No terminal to confirm on: as the fix itself says, --yes.
        args.push("--yes".into());
        args
    };
    assert!(fix.args.iter().any(|a| a == "jellyfin"), "the documented fix names no container: {fix:?}");
    let out = run(&mut engine_run(t, &fix.options_without_terminal(), &[], &for_t(fix))?)?;
    println!("{out}");
    assert!(out.contains("from cubic to bbr"), "{}: {out}", t.label());
    assert!(out.contains(&format!(":{HTTP_PORT} -> :{}", t.download.port)), "{}: {out}", t.label());
    assert_eq!(t.ss_cc()?.as_deref(), Some("bbr"), "{}: ss after the fix from the image", t.label());
    assert_eq!(t.netns_default()?, "bbr", "{}", t.label());
    let out = run(&mut engine_run(t, &undo.options_without_terminal(), &[], &for_t(undo))?)?;
    println!("{out}");
    assert_eq!(t.ss_cc()?.as_deref(), Some("cubic"), "{}: ss after the undo from the image", t.label());
    assert_eq!(t.netns_default()?, "cubic", "{}: the default is back", t.label());
    Ok(())
}

/// The documented `serve` line, detached with its restart policy: the host's port answers with
/// `t`'s container in its metrics; `docker stop` (SIGTERM) ends it with exit 0 within the
/// engine's default timeout, and nothing it loaded stays in the kernel.
fn check_image_serve(t: &Tenant, serve: &RunLine) -> Result<()> {
    let name = format!("cct-img-serve-{}", std::process::id());
    let mut options = serve.options.clone();
    let at = options.iter().position(|o| o == "--name").context("the serve line names its container")?;
    options[at + 1] = name.clone();
    assert!(serve.settings().contains(&("--network".into(), Some("host".into()))), "{serve:?}");
    let mut args = serve.args.clone();
    let mut port = 9617;
    if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
        port = cctrace_tests::serve::free_port()?;
        println!("127.0.0.1:9617 is taken on this host: serving on {port}");
        args.extend(["--listen".into(), format!("127.0.0.1:{port}")]);
    }
    let started = Started { engine: t.container.engine().context("an engine")?, name: name.clone() };
    run(&mut engine_run(t, &options, &[], &args)?)?;
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let wanted = format!("cctrace_flows{{container=\"{}\"", t.container.name());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = cctrace_tests::serve::http_get(metrics, "/metrics", "text/plain", Duration::from_secs(2));
        if got.as_ref().is_ok_and(|(code, body)| *code == 200 && body.contains(&wanted)) {
            break;
        }
        if Instant::now() > deadline {
            let logs = run(started.engine().args(["logs", &name])).unwrap_or_default();
            bail!("no {wanted} at http://{metrics}/metrics after 30 s: {got:?}; logs: {logs}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let pid: u32 = run(started.engine().args(["inspect", "-f", "{{.State.Pid}}", &name]))?.trim().parse()?;
    let held = bpf_held_by(pid)?;
    assert!(!held.programs.is_empty() || !held.links.is_empty(), "serve in its container holds no BPF program");
    let stopping = Instant::now();
    run(started.engine().args(["stop", &name]))?;
    let took = stopping.elapsed();
    let state = run(started.engine().args(["inspect", "-f", "{{.State.ExitCode}} {{.State.Status}}", &name]))?;
    println!("docker stop took {:.1} s; the container: {}", took.as_secs_f64(), state.trim());
    // Docker's default stop timeout is 10 s, after which it kills (exit 137).
    assert_eq!(state.trim(), "0 exited", "serve did not end by itself on SIGTERM (docker stop took {took:?})");
    let now = bpf_ids()?;
    let left: Vec<u32> = held
        .programs
        .iter()
        .chain(&held.links)
        .filter(|id| now.programs.contains(id) || now.links.contains(id))
        .copied()
        .collect();
    assert!(left.is_empty(), "BPF objects of the stopped container remain: {left:?}");
    let cct: Vec<String> = loaded_bpf_programs()?.into_iter().filter(|p| p.starts_with("cct_")).collect();
    assert!(cct.is_empty(), "bpftool prog still lists cctrace programs: {cct:?}");
    Ok(())
}

/// The terminal UI's documented line as written (`-it`), in a terminal: the table names `t`'s
/// container and its process; `docker stop` ends it.
fn check_image_ui(t: &Tenant, ui: &RunLine) -> Result<()> {
    let name = format!("cct-img-ui-{}", std::process::id());
    let cmd = engine_run(t, &ui.options, &["--name".into(), name.clone()], &[])?;
    let started = Started { engine: t.container.engine().context("an engine")?, name: name.clone() };
    let words: Vec<String> =
        std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|w| w.to_string_lossy().into_owned()).collect();
    let shell = shlex::try_join(words.iter().map(String::as_str))?;
    let tmux = Tmux::start_named(&format!("cct-img-ui-{}", std::process::id()), &shell, 160, 30)?;
    // A row of the table: the name, then its nginx serving the download.
    let row = |s: &str| s.lines().any(|l| l.contains(t.container.name()) && l.contains("nginx"));
    tmux.wait_for(&format!("{}'s flow in the table", t.label()), Duration::from_secs(30), row)?;
    run(started.engine().args(["stop", &name]))?;
    Ok(())
}

#[test]
fn the_compose_file_and_the_unraid_template_are_the_documented_serve_line() -> Result<()> {
    let serve = image::documented_lines()?.serve;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Every setting the line makes, as docker run options, but the container's name.
    let documented: Vec<(String, Option<String>)> =
        serve.settings().into_iter().filter(|(flag, _)| flag != "--name").collect();

    let text = std::fs::read_to_string(root.join("contrib/compose.yaml"))?;
    let docs = yaml_rust2::YamlLoader::load_from_str(&text)?;
    let service = &docs[0]["services"]["cctrace"];
    let mut compose = vec![("-d".to_string(), None)];
    let word = |key: &str| service[key].as_str().map(String::from);
    for (key, flag) in [("restart", "--restart"), ("network_mode", "--network"), ("pid", "--pid")] {
        compose.push((flag.into(), Some(word(key).with_context(|| format!("compose.yaml: no {key}"))?)));
    }
    for (key, flag) in [("cap_drop", "--cap-drop"), ("cap_add", "--cap-add")] {
        let list = service[key].as_vec().with_context(|| format!("compose.yaml: no {key}"))?;
        compose.extend(list.iter().filter_map(|v| v.as_str()).map(|v| (flag.to_string(), Some(v.to_string()))));
    }
    compose.sort();
    assert_eq!(compose, documented, "contrib/compose.yaml and the documented serve line differ");
    assert_eq!(word("image").as_deref(), Some(serve.image.as_str()));
    let command: Vec<&str> =
        service["command"].as_vec().context("compose.yaml: no command")?.iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(command, serve.args, "compose.yaml's command");
    let known = ["image", "container_name", "command", "restart", "network_mode", "pid", "cap_drop", "cap_add"];
    let keys: Vec<&str> = service.as_hash().context("a service")?.keys().filter_map(|k| k.as_str()).collect();
    assert!(keys.iter().all(|k| known.contains(k)), "compose.yaml sets more than the line: {keys:?}");

    let text = std::fs::read_to_string(root.join("contrib/unraid/cctrace.xml"))?;
    let xml = roxmltree::Document::parse(&text)?;
    let field = |name: &str| {
        xml.root_element()
            .children()
            .find(|n| n.has_tag_name(name))
            .and_then(|n| n.text())
            .unwrap_or("")
            .trim()
            .to_string()
    };
    // Unraid starts a template's container detached, with --net from <Network> and
    // <ExtraParams> as they are; <Privileged> adds --privileged.
    let mut unraid = RunLine::parse(&format!(
        "docker run -d --network {} {} {} {}",
        field("Network"),
        field("ExtraParams"),
        field("Repository"),
        field("PostArgs")
    ))?
    .settings();
    unraid.sort();
    assert_eq!(unraid, documented, "contrib/unraid/cctrace.xml and the documented serve line differ");
    assert_eq!(field("Privileged"), "false");
    assert_eq!(field("Repository"), serve.image);
    assert_eq!(field("PostArgs").split_whitespace().collect::<Vec<_>>(), serve.args);
    assert!(
        xml.root_element().children().all(|n| !n.has_tag_name("Config")),
        "the template adds a path, port or variable"
    );
    Ok(())
}

/// cctrace's image, loaded into the real dockerd and Podman and run by the lines
/// docs/container-image.md documents (read from the page): from inside its container it names
/// another container's flow, `--container` keeps only that container's flows, the fix switches
/// the running connection to BBR and the undo puts it back, `serve` answers on the host's port,
/// and after `docker stop` nothing it loaded stays; Podman loads the same archive and names its
/// own container's flow.
#[test]
fn the_image_run_by_the_documented_lines_traces_fixes_and_serves_from_its_container() -> Result<()> {
    require_kernel!();
    let lines = image::documented_lines()?;
    // Before the lock: in the suite this waits for the dist step beside the tests.
    let archive = image::archive()?;
    let _serial = serial();
    let started = Instant::now();
    let mut ws = Workspace::create()?;
    ws.allow_cc("cubic")?;
    let path = demo_wan(0.02)?;
    let containers = start_runtimes(&ws, "cct-img", &["docker", "podman"])?;
    let tenants = downloads_from(&path, containers)?;
    let Some(docker) = tenants.iter().find(|t| t.container.runtime() == "docker") else {
        cctrace_lab::skip::skip("dockerd does not run here");
        return Ok(());
    };
    let others: Vec<&Tenant> = tenants.iter().filter(|t| t.container.runtime() != "docker").collect();
    println!("set up in {:.1} s", started.elapsed().as_secs_f64());

    let loaded = Loaded::load(docker, &archive)?;
    assert_eq!(loaded.name, image::tag(), "docker load");
    println!("docker loaded {} after {:.1} s", loaded.name, started.elapsed().as_secs_f64());
    check_image_ui(docker, &lines.ui)?;
    println!("the terminal UI named {} after {:.1} s", docker.label(), started.elapsed().as_secs_f64());
    check_image_filter(docker, &lines.ui, &others)?;
    println!("--container checked after {:.1} s", started.elapsed().as_secs_f64());
    check_image_fix(docker, &lines.fix, &lines.undo)?;
    println!("fixed and undone after {:.1} s", started.elapsed().as_secs_f64());
    check_image_serve(docker, &lines.serve)?;
    println!("served and stopped after {:.1} s", started.elapsed().as_secs_f64());

    for podman in &others {
        let loaded = Loaded::load(podman, &archive)?;
        assert!(loaded.name.ends_with(&format!("/{}", image::tag())), "podman load: {}", loaded.name);
        let others: Vec<&Tenant> = vec![docker];
        check_image_filter(podman, &lines.ui, &others)?;
        println!("{} traced from the image after {:.1} s", podman.label(), started.elapsed().as_secs_f64());
    }
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
