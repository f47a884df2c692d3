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

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

mod docker;
pub mod image;
mod lxc;
mod podman;

pub use docker::Docker;
pub use lxc::Lxc;
pub use podman::Podman;

/// Port nginx listens on in every container.
pub const HTTP_PORT: u16 = 80;
/// The file nginx serves: sparse, so it costs no disk, and larger than any test reads.
pub const BIG_FILE: &str = "big";
pub(crate) const BIG_FILE_BYTES: u64 = 64 << 30;

/// nginx as each container runs it: root workers (the busybox rootfs has no `nobody`), the
/// served directory at /srv, everything it writes in /tmp, sendfile on. No `daemon` here: the
/// engines need it in the foreground, LXC's `lxc-attach` in the background.
pub(crate) const NGINX_CONF: &str = "user root;
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

pub(crate) const WORKSPACE_PREFIX: &str = "cct-runtimes-";
pub(crate) const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
/// The allowed list as it was, kept in the workspace so a run killed before its drop is undone
/// by the next.
pub(crate) const ALLOWED_SAVED: &str = "allowed_congestion_control.orig";
/// The runtimes' parent cgroups that existed before, kept likewise.
pub(crate) const PARENTS_SAVED: &str = "runtime_cgroups.before";

/// The parent cgroups the runtimes make and leave behind when their last container is gone:
/// dockerd's `docker`, Podman's `libpod_parent` (with `conmon` below it in the v1 hierarchies,
/// where conmon itself lives) and LXC's `lxc.pivot`, in every hierarchy of a hybrid host.
pub(crate) const RUNTIME_PARENTS: [&str; 4] = ["docker", "libpod_parent/conmon", "libpod_parent", "lxc.pivot"];

pub(crate) fn runtime_parents() -> Vec<PathBuf> {
    let hierarchies =
        ["cgroup", "cgroup2"].into_iter().flat_map(|t| cctrace_lab::hierarchy_roots(t).unwrap_or_default());
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
pub(crate) fn remove_new_parents(before: &[PathBuf]) {
    for p in runtime_parents().into_iter().filter(|p| !before.contains(p)) {
        let _ = fs::remove_dir(p);
    }
}

/// Workspaces of runs that died before their drops (SIGKILL, a timeout): their containers,
/// the dockerd they started and the allowed list they widened are put back, then the
/// directory goes.
pub(crate) fn reclaim_stale() {
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
            let p = Podman { root: dir.join("podman"), name: String::new(), id: String::new(), ulimits: Vec::new() };
            let _ = run(p.podman().args(["rm", "-a", "-f", "-t", "0"]));
        }
        let docker = dir.join("docker");
        let daemon = fs::read_to_string(docker.join("dockerd.pid")).ok().and_then(|p| p.trim().parse::<u32>().ok());
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
            // That run's own dockerd.
            let _ = cctrace_lab::child::send_signal(pid, cctrace_lab::child::Signal::TERM);
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
pub(crate) fn remove_workspace(dir: &Path) {
    // A mount left below (a runtime that died mid-way) must not be recursed into.
    let mounts = procfs::process::Process::myself().and_then(|p| p.mountinfo()).map(|m| m.0).unwrap_or_default();
    let mut below: Vec<PathBuf> =
        mounts.into_iter().map(|m| m.mount_point).filter(|m| m.starts_with(dir) && m != dir).collect();
    below.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
    for m in below {
        let _ = Command::new("umount").arg("-l").arg(&m).status_within(CHILD_DEADLINE);
    }
    if let Err(e) = fs::remove_dir_all(dir) {
        eprintln!("removing {}: {e}", dir.display());
    }
}

/// Run `cmd`; its stdout, or an error with its stderr.
pub fn run(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.stdin(Stdio::null()).output_within(CHILD_DEADLINE).with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!("{shown} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn installed(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

pub(crate) fn require(programs: &[&str], package: &str) -> Result<(), Unavailable> {
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
    /// The engine's command line (`docker -H ...`, `podman --root ...`), for Docker and Podman.
    fn engine(&self) -> Option<Command> {
        None
    }
    /// Options every `run` on this engine needs here (Podman's `--ulimit`s under this sandbox's
    /// limits), before a documented line's own.
    fn engine_run_options(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The last lines of a log file, for a refusal's reason.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

pub(crate) fn parse_listing(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, name)| (id.trim().to_string(), name.trim().to_string()))
        .collect()
}

/// The engines' bind mounts: the host's /usr, the served directory, nginx's config.
pub(crate) fn engine_mounts(ws: &Workspace) -> Vec<String> {
    vec![
        "-v".into(),
        "/usr:/usr:ro".into(),
        "-v".into(),
        format!("{}:/srv:ro", ws.www().display()),
        "-v".into(),
        format!("{}:/etc/nginx.conf:ro", ws.nginx_conf().display()),
    ]
}

/// Wait until nginx listens on [`HTTP_PORT`] in the container's network namespace.
pub(crate) fn wait_listening(c: &dyn Container) -> Result<()> {
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
