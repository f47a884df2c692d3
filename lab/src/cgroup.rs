//! cgroup v2 directories for tests and the demo, so flows can live in container-like cgroups
//! (`system.slice/docker-<id>.scope`, `lxc/102/ns`) without any container runtime.
//!
//! Every tree lives below a top directory of its own, `/cct-lab-<pid>-<n>`, so the host's real
//! slices are never touched; dropping the [`Cgroup`] kills its residents and removes the tree.
//! A socket belongs to the cgroup of the task that created it (`sk_cgrp_data`, set in
//! `socket()`), so [`Cgroup::create_sockets_here`] runs a closure with the whole process moved
//! into the cgroup and back: the sockets it makes stay there, as a container's would.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::netns::Netns;

const TOP_PREFIX: &str = "cct-lab-";

/// Only one closure at a time may move the process: two would each move it back to a cgroup
/// the other moved it into.
static MIGRATION: Mutex<()> = Mutex::new(());

/// The root of every cgroup hierarchy mounted here, `fs_type` `cgroup2` (the v2 one) or
/// `cgroup` (v1's, on hybrid hosts), from `/proc/self/mountinfo`: its mounts of the whole
/// hierarchy (root `/`), in mount order. The tracer finds the v2 mount by the same rule
/// (`cgroups::cgroup2_mount`); mount points mountinfo had to escape (a space in the path) are
/// refused here rather than unescaped: no lab host has one.
pub fn hierarchy_roots(fs_type: &str) -> Result<Vec<PathBuf>> {
    let mounts =
        procfs::process::Process::myself().and_then(|p| p.mountinfo()).context("reading /proc/self/mountinfo")?;
    let roots = mounts.into_iter().filter(|m| m.fs_type == fs_type && m.root == "/").map(|m| m.mount_point);
    roots
        .map(|p| match p.to_str() {
            Some(s) if !s.contains('\\') => Ok(p),
            _ => {
                bail!("a cgroup hierarchy mounted at {} (escaped in mountinfo): not supported by the lab", p.display())
            }
        })
        .collect()
}

/// Where cgroup v2 is mounted: `/sys/fs/cgroup` on unified hosts, `/sys/fs/cgroup/unified`
/// on hybrid ones.
pub fn cgroup2_mount() -> Result<PathBuf> {
    hierarchy_roots("cgroup2")?.into_iter().next().ok_or_else(|| anyhow!("no cgroup v2 hierarchy is mounted"))
}

/// The cgroup v2 directory this process is in now.
fn own_cgroup(mount: &Path) -> Result<PathBuf> {
    let text = fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    let rel = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| anyhow!("this process has no cgroup v2 membership"))?;
    Ok(mount.join(rel.trim_start_matches('/')))
}

fn move_process(dir: &Path, pid: u32) -> Result<()> {
    fs::write(dir.join("cgroup.procs"), pid.to_string())
        .with_context(|| format!("moving process {pid} into {}", dir.display()))
}

/// A cgroup v2 directory this process created, with the directories above it that it had to
/// create; removed (residents killed first) on drop.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
    mount: PathBuf,
    /// Directories this value created, outermost first.
    created: Vec<PathBuf>,
    residents: Vec<Child>,
}

impl Cgroup {
    /// A fresh top directory for one test or demo: `<mount>/cct-lab-<pid>-<n>`.
    pub fn top() -> Result<Cgroup> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mount = cgroup2_mount()?;
        cleanup_stale(&mount);
        let name = format!("{TOP_PREFIX}{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let path = mount.join(&name);
        fs::create_dir(&path).with_context(|| format!("creating cgroup {}", path.display()))?;
        Ok(Cgroup { created: vec![path.clone()], path, mount, residents: Vec::new() })
    }

    /// `rel` (e.g. `system.slice/docker-<id>.scope`) below this cgroup, creating what is missing.
    pub fn child(&self, rel: &str) -> Result<Cgroup> {
        if rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
            bail!("bad cgroup path {rel:?}");
        }
        let mut created = Vec::new();
        let mut path = self.path.clone();
        for component in rel.split('/') {
            path.push(component);
            if !path.exists() {
                fs::create_dir(&path).with_context(|| format!("creating cgroup {}", path.display()))?;
                created.push(path.clone());
            }
        }
        Ok(Cgroup { path, mount: self.mount.clone(), created, residents: Vec::new() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path below the cgroup v2 mount, as `/proc/PID/cgroup` shows it.
    pub fn rel_path(&self) -> String {
        format!("/{}", self.path.strip_prefix(&self.mount).unwrap_or(&self.path).display())
    }

    /// The cgroup id: the directory's inode, the id the kernel reports for sockets in it.
    pub fn id(&self) -> Result<u64> {
        Ok(fs::metadata(&self.path).with_context(|| format!("stat {}", self.path.display()))?.ino())
    }

    /// Start a process that lives in this cgroup and in `ns`, as a container's init does, so
    /// the cgroup has a live pid inside the namespace. Returns its pid.
    pub fn spawn_resident(&mut self, ns: &Netns) -> Result<u32> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "sleep", "infinity"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting a resident process")?;
        let pid = child.id();
        if let Err(e) = move_process(&self.path, pid) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        self.residents.push(child);
        // `ip netns exec` enters the namespace, then execs sleep under the same pid.
        let deadline = Instant::now() + Duration::from_secs(5);
        while fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| m.ino()).ok() != Some(ns.inode()) {
            if Instant::now() > deadline {
                bail!("resident {pid} did not enter {}", ns.name());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(pid)
    }

    /// Run `f` with this process moved into the cgroup, then move it back: the sockets `f`
    /// creates belong to this cgroup for their whole life. Threads that create sockets
    /// meanwhile would land here too; lab users create theirs through this or before.
    pub fn create_sockets_here<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        create_sockets_in(&self.path, f)
    }
}

/// [`Cgroup::create_sockets_here`] for a cgroup directory given by its path.
pub fn create_sockets_in<T>(dir: &Path, f: impl FnOnce() -> T) -> Result<T> {
    let _one_at_a_time = MIGRATION.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let home = own_cgroup(&cgroup2_mount()?)?;
    move_process(dir, std::process::id())?;
    let out = f();
    move_process(&home, std::process::id())?;
    Ok(out)
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for mut r in self.residents.drain(..) {
            let _ = r.kill();
            let _ = r.wait();
        }
        for dir in self.created.iter().rev() {
            remove_tree(dir);
        }
    }
}

/// Remove `dir` and every cgroup below it, deepest first; processes still in them are killed.
fn remove_tree(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in procs.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                if pid != std::process::id() {
                    let _ = crate::child::send_signal(pid, crate::child::Signal::KILL);
                }
            }
        }
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            // Killed processes leave the cgroup once they are reaped.
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                log::warn!("removing cgroup {}: {e}", dir.display());
                return;
            }
        }
    }
}

/// Remove top directories left by lab processes that died without cleaning up.
fn cleanup_stale(mount: &Path) {
    let Ok(entries) = fs::read_dir(mount) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TOP_PREFIX)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            remove_tree(&e.path());
        }
    }
}
