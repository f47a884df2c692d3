//! The distribution's container runtimes, driven as a user drives them: dockerd (started with
//! state of its own when none runs), Podman (rootful, its store under the test's directory)
//! and LXC (the busybox template, under the test's own lxcpath). Each runs nginx serving a
//! large file with sendfile, from an image the test builds: a tarball of a few directories and
//! symlinks, imported with `docker import` / `podman import`, the host's /usr bind-mounted
//! read-only. Nothing comes from a registry; every container has no network of its own
//! (`--network none`, `lxc.net.0.type = empty`) until the test joins it to a lab path.
//!
//! Everything a runtime starts or creates is undone on drop: containers, images, the daemon
//! this started (never one it found), the state directories.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// Port nginx listens on in every container.
pub const HTTP_PORT: u16 = 80;
/// The file nginx serves: sparse, so it costs no disk, and larger than any test reads.
pub const BIG_FILE: &str = "big";
const BIG_FILE_BYTES: u64 = 64 << 30;

/// nginx as each container runs it: root workers (the busybox rootfs has no `nobody`), the
/// served directory at /srv, everything it writes in /tmp, sendfile on. No `daemon` here: the
/// engines need it in the foreground, LXC's `lxc-attach` in the background.
const NGINX_CONF: &str = "user root;
worker_processes 1;
pid /tmp/nginx.pid;
error_log stderr;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path /tmp;
  proxy_temp_path /tmp;
  fastcgi_temp_path /tmp;
  uwsgi_temp_path /tmp;
  scgi_temp_path /tmp;
  default_type application/octet-stream;
  server { listen 80; root /srv; }
}
";

/// Why a runtime is not tested here.
#[derive(Debug)]
pub enum Unavailable {
    /// Its programs are not installed.
    NotInstalled(String),
    /// Installed, but it refused to run a container in this sandbox.
    Refused(String),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotInstalled(why) => write!(f, "not installed: {why}"),
            Self::Refused(why) => write!(f, "installed but refused to run: {why}"),
        }
    }
}

/// The test's own directory: the image's files, the served file, the runtimes' state.
/// Removed on drop, after everything in it was stopped.
#[derive(Debug)]
pub struct Workspace {
    dir: PathBuf,
    /// The runtimes' parent cgroups that existed before, per hierarchy.
    parents_before: Vec<PathBuf>,
    /// The host's allowed congestion controls before [`Workspace::allow_cc`] widened them.
    allowed_before: Option<String>,
}

const WORKSPACE_PREFIX: &str = "cct-runtimes-";
const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
/// The allowed list as it was, kept in the workspace so a run killed before its drop is undone
/// by the next.
const ALLOWED_SAVED: &str = "allowed_congestion_control.orig";
/// The runtimes' parent cgroups that existed before, kept likewise.
const PARENTS_SAVED: &str = "runtime_cgroups.before";

/// The parent cgroups the runtimes make and leave behind when their last container is gone:
/// dockerd's `docker`, Podman's `libpod_parent` (with `conmon` below it in the v1 hierarchies,
/// where conmon itself lives) and LXC's `lxc.pivot`, in every hierarchy of a hybrid host.
const RUNTIME_PARENTS: [&str; 4] = ["docker", "libpod_parent/conmon", "libpod_parent", "lxc.pivot"];

fn runtime_parents() -> Vec<PathBuf> {
    let mut hierarchies: Vec<PathBuf> = fs::read_dir("/sys/fs/cgroup")
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.join("cgroup.procs").exists()).collect())
        .unwrap_or_default();
    hierarchies.push(PathBuf::from("/sys/fs/cgroup"));
    let mut out = Vec::new();
    for h in hierarchies {
        out.extend(RUNTIME_PARENTS.iter().map(|p| h.join(p)).filter(|p| p.is_dir()));
    }
    out
}

impl Workspace {
    pub fn create() -> Result<Workspace> {
        reclaim_stale();
        let dir = std::env::temp_dir().join(format!("{WORKSPACE_PREFIX}{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // LXC's rootfs and the engines' state live below: reachable by the containers' root.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
        let parents_before = runtime_parents();
        let listed: String = parents_before.iter().map(|p| format!("{}\n", p.display())).collect();
        fs::write(dir.join(PARENTS_SAVED), listed)?;
        let ws = Workspace { dir, parents_before, allowed_before: None };
        ws.build_files()?;
        Ok(ws)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Add `cc` to the host's list of congestion controls non-initial namespaces may choose
    /// (the containers' default must be one of them); put back on drop.
    pub fn allow_cc(&mut self, cc: &str) -> Result<()> {
        let before = fs::read_to_string(ALLOWED_CC)?.trim().to_string();
        if before.split_whitespace().any(|a| a == cc) {
            return Ok(());
        }
        fs::write(self.dir.join(ALLOWED_SAVED), &before)?;
        self.allowed_before = Some(before.clone());
        fs::write(ALLOWED_CC, format!("{before} {cc}")).with_context(|| format!("adding {cc} to {ALLOWED_CC}"))
    }

    fn www(&self) -> PathBuf {
        self.dir.join("www")
    }

    fn nginx_conf(&self) -> PathBuf {
        self.dir.join("nginx.conf")
    }

    fn image_tar(&self) -> PathBuf {
        self.dir.join("image.tar")
    }

    /// The image tarball (a merged-/usr skeleton: /bin, /sbin, /lib, /lib64 link into /usr,
    /// which the container gets from the host), nginx's config and the served file.
    fn build_files(&self) -> Result<()> {
        let root = self.dir.join("rootfs");
        for d in ["etc", "tmp", "usr", "proc", "sys", "dev", "srv", "run", "var/log/nginx", "var/lib/nginx"] {
            fs::create_dir_all(root.join(d))?;
        }
        fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777))?;
        for (link, target) in [("lib", "usr/lib"), ("lib64", "usr/lib64"), ("bin", "usr/bin"), ("sbin", "usr/sbin")] {
            std::os::unix::fs::symlink(target, root.join(link))?;
        }
        fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
        fs::write(root.join("etc/group"), "root:x:0:\n")?;
        run(Command::new("tar").arg("-C").arg(&root).arg("-cf").arg(self.image_tar()).arg("."))?;
        fs::write(self.nginx_conf(), NGINX_CONF)?;
        fs::create_dir_all(self.www())?;
        fs::File::create(self.www().join(BIG_FILE))?.set_len(BIG_FILE_BYTES)?;
        Ok(())
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if let Some(before) = &self.allowed_before {
            if let Err(e) = fs::write(ALLOWED_CC, before) {
                eprintln!("restoring {ALLOWED_CC} to {before:?} failed: {e}");
            }
        }
        remove_workspace(&self.dir);
        remove_new_parents(&self.parents_before);
    }
}

/// The runtimes' parent cgroups a run's containers made, once empty (children first, as
/// listed); a parent that was there before, or still holds a container, stays.
fn remove_new_parents(before: &[PathBuf]) {
    for p in runtime_parents().into_iter().filter(|p| !before.contains(p)) {
        let _ = fs::remove_dir(p);
    }
}

/// Workspaces of runs that died before their drops (SIGKILL, a timeout): their containers,
/// the dockerd they started and the allowed list they widened are put back, then the
/// directory goes.
fn reclaim_stale() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(WORKSPACE_PREFIX).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = entry.path();
        eprintln!("reclaiming {} of a run that did not clean up", dir.display());
        if let Ok(before) = fs::read_to_string(dir.join(ALLOWED_SAVED)) {
            let _ = fs::write(ALLOWED_CC, before.trim());
        }
        let lxcpath = dir.join("lxc");
        for c in fs::read_dir(&lxcpath).into_iter().flatten().flatten().filter(|c| c.path().join("config").exists()) {
            let name = c.file_name().to_string_lossy().into_owned();
            // Its drop stops and destroys it.
            drop(Lxc { lxcpath: lxcpath.clone(), name });
        }
        if dir.join("podman").is_dir() {
            // Its drop removes the images.
            let p = Podman { root: dir.join("podman"), name: String::new(), id: String::new() };
            let _ = run(p.podman().args(["rm", "-a", "-f", "-t", "0"]));
        }
        let docker = dir.join("docker");
        let daemon = fs::read_to_string(docker.join("dockerd.pid")).ok().and_then(|p| p.trim().parse::<i32>().ok());
        // Only a dockerd that still runs on that workspace's state is the one that run started.
        if let Some(pid) = daemon.filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&docker.display().to_string()))
        }) {
            let host = format!("unix://{}", docker.join("docker.sock").display());
            let ids = run(Command::new("docker").args(["-H", &host, "ps", "-aq"])).unwrap_or_default();
            for id in ids.split_whitespace() {
                let _ = run(Command::new("docker").args(["-H", &host, "rm", "-f", id]));
            }
            // SAFETY: kill has no memory effects; the pid is that run's own dockerd.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let before = fs::read_to_string(dir.join(PARENTS_SAVED));
        remove_workspace(&dir);
        if let Ok(before) = before {
            remove_new_parents(&before.lines().map(PathBuf::from).collect::<Vec<_>>());
        }
    }
}

/// Remove a workspace directory, unmounting first whatever a runtime left mounted below it.
fn remove_workspace(dir: &Path) {
    // A mount left below (a runtime that died mid-way) must not be recursed into.
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = format!("{}/", dir.display());
    let mut below: Vec<&str> =
        mounts.lines().filter_map(|l| l.split_whitespace().nth(4)).filter(|m| m.starts_with(&prefix)).collect();
    below.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in below {
        let _ = Command::new("umount").args(["-l", m]).status();
    }
    if let Err(e) = fs::remove_dir_all(dir) {
        eprintln!("removing {}: {e}", dir.display());
    }
}

/// Run `cmd`; its stdout, or an error with its stderr.
pub fn run(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!("{shown} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn installed(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

fn require(programs: &[&str], package: &str) -> Result<(), Unavailable> {
    match programs.iter().find(|p| !installed(p)) {
        Some(p) => Err(Unavailable::NotInstalled(format!("no {p} on PATH (Debian package {package})"))),
        None => Ok(()),
    }
}

/// A running container with nginx in it, as its runtime lists it.
pub trait Container {
    /// `docker`, `podman` or `lxc`: the runtime cctrace must name.
    fn runtime(&self) -> &'static str;
    /// The name the runtime gave it.
    fn name(&self) -> &str;
    /// The runtime's full id (LXC: the name).
    fn id(&self) -> &str;
    /// A process inside it (its init), whose network namespace is the container's.
    fn pid(&self) -> Result<u32>;
    /// (id, name) of every running container, as the runtime's own listing command prints them.
    fn listed(&self) -> Result<Vec<(String, String)>>;
    /// Where an LXC container's directory lives (`lxc-* -P`); `None` for the other runtimes.
    fn lxc_path(&self) -> Option<&Path> {
        None
    }
}

/// The last lines of a log file, for a refusal's reason.
fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

fn parse_listing(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, name)| (id.trim().to_string(), name.trim().to_string()))
        .collect()
}

/// dockerd started by this test; stopped (SIGTERM, then SIGKILL) on drop.
struct OwnDaemon {
    child: Child,
}

impl Drop for OwnDaemon {
    fn drop(&mut self) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Docker container; removed on drop, with its image, then the daemon if this started it.
pub struct Docker {
    host: String,
    name: String,
    id: String,
    image: String,
    // Last: the daemon outlives the container's removal.
    _daemon: Option<OwnDaemon>,
}

impl Docker {
    fn docker(&self) -> Command {
        let mut c = Command::new("docker");
        c.args(["-H", &self.host]);
        c
    }

    /// Use the host's dockerd when one answers, else start one with all its state under the
    /// workspace (no iptables, no bridge: the container gets no network from it).
    pub fn start(ws: &Workspace, name: &str) -> Result<Docker, Unavailable> {
        require(&["dockerd", "docker"], "docker.io")?;
        let refused = |e: anyhow::Error| Unavailable::Refused(format!("{e:#}"));
        let system = "unix:///var/run/docker.sock";
        let answers = |host: &str| {
            Command::new("docker")
                .args(["-H", host, "version"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let (host, daemon) = if answers(system) {
            (system.to_string(), None)
        } else {
            let state = ws.dir().join("docker");
            fs::create_dir_all(&state).map_err(|e| refused(e.into()))?;
            let host = format!("unix://{}", state.join("docker.sock").display());
            let log_path = state.join("dockerd.log");
            let log = fs::File::create(&log_path).map_err(|e| refused(e.into()))?;
            let err = log.try_clone().map_err(|e| refused(e.into()))?;
            let child = Command::new("dockerd")
                .args(["--iptables=false", "--ip6tables=false", "--bridge=none", "-H", &host])
                .arg("--data-root")
                .arg(state.join("data"))
                .arg("--exec-root")
                .arg(state.join("exec"))
                .arg("--pidfile")
                .arg(state.join("dockerd.pid"))
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                .spawn()
                .map_err(|e| refused(anyhow!("starting dockerd: {e}")))?;
            let mut daemon = OwnDaemon { child };
            let deadline = Instant::now() + Duration::from_secs(60);
            while !answers(&host) {
                if let Ok(Some(status)) = daemon.child.try_wait() {
                    return Err(Unavailable::Refused(format!(
                        "dockerd exited at start-up ({status}): {}",
                        tail(&log_path, 5)
                    )));
                }
                if Instant::now() > deadline {
                    return Err(Unavailable::Refused(format!(
                        "dockerd did not answer within 60 s: {}",
                        tail(&log_path, 5)
                    )));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (host, Some(daemon))
        };
        let image = format!("cct-runtimes:{}", std::process::id());
        let mut d = Docker { host, name: name.to_string(), id: String::new(), image: image.clone(), _daemon: daemon };
        run(d.docker().arg("import").arg(ws.image_tar()).arg(&image)).map_err(refused)?;
        let out = run(d
            .docker()
            .args(["run", "-d", "--name", name, "--network", "none"])
            .args(engine_mounts(ws))
            .arg(&image)
            .args(["/usr/sbin/nginx", "-c", "/etc/nginx.conf", "-g", "daemon off;"]))
        .map_err(refused)?;
        d.id = out.trim().to_string();
        wait_listening(&d).map_err(refused)?;
        Ok(d)
    }
}

/// The engines' bind mounts: the host's /usr, the served directory, nginx's config.
fn engine_mounts(ws: &Workspace) -> Vec<String> {
    vec![
        "-v".into(),
        "/usr:/usr:ro".into(),
        "-v".into(),
        format!("{}:/srv:ro", ws.www().display()),
        "-v".into(),
        format!("{}:/etc/nginx.conf:ro", ws.nginx_conf().display()),
    ]
}

impl Container for Docker {
    fn runtime(&self) -> &'static str {
        "docker"
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn id(&self) -> &str {
        &self.id
    }
    fn pid(&self) -> Result<u32> {
        let out = run(self.docker().args(["inspect", "-f", "{{.State.Pid}}", &self.name]))?;
        out.trim().parse().with_context(|| format!("docker inspect pid: {out:?}"))
    }
    fn listed(&self) -> Result<Vec<(String, String)>> {
        Ok(parse_listing(&run(self.docker().args(["ps", "--no-trunc", "--format", "{{.ID}} {{.Names}}"]))?))
    }
}

impl Drop for Docker {
    fn drop(&mut self) {
        let _ = run(self.docker().args(["rm", "-f", &self.name]));
        let _ = run(self.docker().args(["rmi", "-f", &self.image]));
    }
}

/// A rootful Podman container with its store, run root and temp files under the workspace;
/// removed on drop.
pub struct Podman {
    root: PathBuf,
    name: String,
    id: String,
}

impl Podman {
    fn podman(&self) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root").arg(self.root.join("store"));
        c.arg("--runroot").arg(self.root.join("run"));
        c.arg("--tmpdir").arg(self.root.join("tmp"));
        // No systemd to make scopes (a container, a sandbox): cgroupfs, as Podman would pick.
        if !Path::new("/run/systemd/system").exists() {
            c.args(["--cgroup-manager", "cgroupfs", "--events-backend", "file"]);
        }
        c
    }

    pub fn start(ws: &Workspace, name: &str) -> Result<Podman, Unavailable> {
        require(&["podman", "conmon"], "podman")?;
        let refused = |e: anyhow::Error| Unavailable::Refused(format!("{e:#}"));
        let p = Podman { root: ws.dir().join("podman"), name: name.to_string(), id: String::new() };
        let image = "localhost/cct-runtimes:latest";
        run(p.podman().arg("import").arg(ws.image_tar()).arg(image)).map_err(refused)?;
        // As a user runs it first. In a sandbox whose hard limits are below the RLIMIT_NOFILE and
        // RLIMIT_NPROC Podman asks for by default, runc's setrlimit fails with EPERM: say so, and
        // run it again asking for no more than those limits.
        let run_nginx = |ulimits: &[String]| {
            run(p
                .podman()
                .args(["run", "-d", "--name", name, "--network", "none"])
                .args(ulimits)
                .args(engine_mounts(ws))
                .arg(image)
                .args(["/usr/sbin/nginx", "-c", "/etc/nginx.conf", "-g", "daemon off;"]))
        };
        let out = match run_nginx(&[]) {
            Ok(out) => out,
            Err(e) if format!("{e:#}").contains("rlimit") => {
                let mut ulimits = Vec::new();
                for (resource, flag) in [(libc::RLIMIT_NOFILE, "nofile"), (libc::RLIMIT_NPROC, "nproc")] {
                    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                    // SAFETY: getrlimit writes only the struct it is given.
                    let hard = if unsafe { libc::getrlimit(resource, &raw mut lim) } == 0 { lim.rlim_max } else { 0 };
                    let n = hard.min(1024);
                    ulimits.extend(["--ulimit".to_string(), format!("{flag}={n}:{n}")]);
                }
                let msg = format!("{e:#}");
                eprintln!(
                    "podman: the container's limits are refused here ({}); again with {}",
                    msg.find("Error:").map_or(msg.as_str(), |i| &msg[i..]),
                    ulimits.join(" ")
                );
                let _ = run(p.podman().args(["rm", "-f", "-t", "0", name]));
                run_nginx(&ulimits).map_err(refused)?
            }
            Err(e) => return Err(refused(e)),
        };
        let mut p = p;
        p.id = out.lines().last().unwrap_or_default().trim().to_string();
        wait_listening(&p).map_err(refused)?;
        Ok(p)
    }
}

impl Container for Podman {
    fn runtime(&self) -> &'static str {
        "podman"
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn id(&self) -> &str {
        &self.id
    }
    fn pid(&self) -> Result<u32> {
        let out = run(self.podman().args(["inspect", "-f", "{{.State.Pid}}", &self.name]))?;
        out.trim().parse().with_context(|| format!("podman inspect pid: {out:?}"))
    }
    fn listed(&self) -> Result<Vec<(String, String)>> {
        Ok(parse_listing(&run(self.podman().args(["ps", "--no-trunc", "--format", "{{.ID}} {{.Names}}"]))?))
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = run(self.podman().args(["rm", "-f", "-t", "0", &self.name]));
        let _ = run(self.podman().args(["rmi", "-a", "-f"]));
    }
}

/// An LXC container from the busybox template under the workspace's own lxcpath, nginx started
/// in it with `lxc-attach`; stopped and destroyed on drop.
pub struct Lxc {
    lxcpath: PathBuf,
    name: String,
}

impl Lxc {
    fn lxc(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.arg("-P").arg(&self.lxcpath).args(["-n", &self.name]);
        c
    }

    pub fn start(ws: &Workspace, name: &str) -> Result<Lxc, Unavailable> {
        require(&["lxc-create", "lxc-start", "lxc-attach", "busybox"], "lxc and busybox")?;
        let refused = |e: anyhow::Error| Unavailable::Refused(format!("{e:#}"));
        let lxcpath = ws.dir().join("lxc");
        fs::create_dir_all(&lxcpath).map_err(|e| refused(e.into()))?;
        let c = Lxc { lxcpath, name: name.to_string() };
        run(c.lxc("lxc-create").args(["-t", "busybox"])).map_err(refused)?;
        // No network from LXC (`empty`: a namespace with lo only), nginx and its files mounted.
        let config = c.lxcpath.join(name).join("config");
        let text = fs::read_to_string(&config).map_err(|e| refused(e.into()))?;
        let mut kept: String = text.lines().filter(|l| !l.starts_with("lxc.net.")).map(|l| format!("{l}\n")).collect();
        kept.push_str("lxc.net.0.type = empty\n");
        kept.push_str("lxc.mount.entry = /usr/sbin/nginx usr/sbin/nginx none ro,bind,create=file 0 0\n");
        kept.push_str(&format!("lxc.mount.entry = {} srv none ro,bind,create=dir 0 0\n", ws.www().display()));
        kept.push_str(&format!(
            "lxc.mount.entry = {} etc/nginx.conf none ro,bind,create=file 0 0\n",
            ws.nginx_conf().display()
        ));
        fs::File::create(&config).and_then(|mut f| f.write_all(kept.as_bytes())).map_err(|e| refused(e.into()))?;
        let log = c.lxcpath.join("lxc.log");
        let started = run(c.lxc("lxc-start").arg("-o").arg(&log).args(["-l", "INFO"]))
            .and_then(|_| run(c.lxc("lxc-wait").args(["-s", "RUNNING", "-t", "20"])));
        if let Err(e) = started {
            return Err(Unavailable::Refused(format!("{e:#}; {}", tail(&log, 5))));
        }
        // nginx daemonizes: its output (and the pipes it would hold open) go to a file.
        let nginx_log = c.lxcpath.join("nginx.log");
        let attached = fs::File::create(&nginx_log).and_then(|out| {
            let err = out.try_clone()?;
            c.lxc("lxc-attach")
                .args(["--", "/usr/sbin/nginx", "-c", "/etc/nginx.conf"])
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .status()
        });
        match attached {
            Ok(s) if s.success() => {}
            Ok(s) => return Err(Unavailable::Refused(format!("lxc-attach nginx: {s}: {}", tail(&nginx_log, 5)))),
            Err(e) => return Err(Unavailable::Refused(format!("lxc-attach nginx: {e}"))),
        }
        wait_listening(&c).map_err(refused)?;
        Ok(c)
    }
}

impl Container for Lxc {
    fn runtime(&self) -> &'static str {
        "lxc"
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn id(&self) -> &str {
        &self.name
    }
    fn pid(&self) -> Result<u32> {
        let out = run(self.lxc("lxc-info").args(["-p", "-H"]))?;
        out.trim().parse().with_context(|| format!("lxc-info pid: {out:?}"))
    }
    fn listed(&self) -> Result<Vec<(String, String)>> {
        let out = run(Command::new("lxc-ls").arg("-P").arg(&self.lxcpath).args(["--running", "-1"]))?;
        Ok(out.split_whitespace().map(|n| (n.to_string(), n.to_string())).collect())
    }
    fn lxc_path(&self) -> Option<&Path> {
        Some(&self.lxcpath)
    }
}

impl Drop for Lxc {
    fn drop(&mut self) {
        let _ = run(self.lxc("lxc-stop").arg("-k"));
        let _ = run(self.lxc("lxc-destroy").arg("-f"));
    }
}

/// Wait until nginx listens on [`HTTP_PORT`] in the container's network namespace.
fn wait_listening(c: &dyn Container) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pid = c.pid()?;
        let out = run(Command::new("nsenter").arg(format!("--net=/proc/{pid}/ns/net")).args([
            "ss",
            "-tlnH",
            &format!("sport = :{HTTP_PORT}"),
        ]))?;
        if !out.trim().is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("nginx in {} {} does not listen on :{HTTP_PORT} after 20 s", c.runtime(), c.name());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
