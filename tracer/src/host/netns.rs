//! The host's network namespaces: which exist (a process in each, `ip netns` names), the paths
//! that open them, and the one way a thread enters one.

use std::collections::HashMap;
use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::procs;
use crate::analysis::environment::Environment;

/// Inode of the network namespace a `/proc/.../ns/net` link points to.
pub fn netns_inode<P: AsRef<Path> + ?Sized>(path: &P) -> Option<u32> {
    // readlink gives "net:[4026531840]".
    let link = std::fs::read_link(path).ok()?;
    let s = link.to_string_lossy();
    s.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// The host's network namespace: that of the process standing for the host (run from the image,
/// the runtime's shim, see [`super::mounts`]; else pid 1), or cctrace's own where that cannot be
/// read.
pub fn host_netns() -> Option<u32> {
    let host = super::mounts::host_process().unwrap_or(1);
    netns_inode(&format!("/proc/{host}/ns/net")).or_else(|| netns_inode("/proc/self/ns/net"))
}

/// A path that enters network namespace `netns`: its `ip netns` name, else a process in it.
pub fn path_into_netns(env: &Environment, netns: u32) -> Option<String> {
    if let Some(name) = env.netns_names.get(&netns) {
        return Some(format!("/run/netns/{name}"));
    }
    env.netns_pids.get(&netns).map(|pid| format!("/proc/{pid}/ns/net"))
}

/// One process per network namespace (the lowest pid), for `nsenter --net=/proc/PID/ns/net`.
pub fn netns_pids() -> HashMap<u32, u32> {
    let mut map: HashMap<u32, u32> = HashMap::new();
    for pid in procs::pids(Path::new(procs::PROC)) {
        if let Some(ino) = netns_inode(&format!("/proc/{pid}/ns/net")) {
            map.entry(ino).and_modify(|p| *p = (*p).min(pid)).or_insert(pid);
        }
    }
    map
}

/// Namespaces created with `ip netns add`: /run/netns/NAME, keyed by inode.
pub fn named_netns() -> HashMap<u32, String> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/run/netns") else { return map };
    for entry in dir.flatten() {
        if let (Ok(meta), Some(name)) = (entry.metadata(), entry.file_name().to_str()) {
            if let Ok(ino) = u32::try_from(meta.ino()) {
                map.insert(ino, name.to_string());
            }
        }
    }
    map
}

/// Run `read` inside each namespace of `paths` (given its inode) and collect what it returned.
///
/// `/proc/sys/net`, like a netlink socket, belongs to the namespace of the thread that opens
/// it, so a short-lived thread enters each namespace in turn (`setns` moves only the calling
/// thread) and reads it there; the rest of the process never leaves its own namespace. A
/// namespace that cannot be entered (gone, no privilege) is left out.
pub(crate) fn in_each_netns<T: Send + 'static>(
    paths: &[(u32, PathBuf)],
    read: impl Fn(u32) -> Option<T> + Send + 'static,
) -> Vec<T> {
    let paths = paths.to_vec();
    let reader = std::thread::Builder::new().name("cct-netns-read".into()).spawn(move || {
        let mut out = Vec::new();
        for (ino, path) in paths {
            if enter_netns(ino, &path).is_ok() {
                out.extend(read(ino));
            }
        }
        out
    });
    reader.ok().and_then(|t| t.join().ok()).unwrap_or_default()
}

/// Move the calling thread into network namespace `ino`, opened by `path`. A path that now
/// leads to another namespace (a pid reused, a name given again) is `ENOENT`: the namespace
/// asked for is gone.
pub(crate) fn enter_netns(ino: u32, path: &Path) -> std::io::Result<()> {
    let ns = std::fs::File::open(path)?;
    // Entered by the descriptor: comparing the inode of what was opened catches a path that
    // now leads elsewhere.
    if ns.metadata()?.ino() != u64::from(ino) {
        return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
    }
    setns_net(&ns)
}

/// `setns(fd, CLONE_NEWNET)` on the calling thread: the one place cctrace changes a thread's
/// network namespace. A thread that entered one stays there, so callers use a thread of their
/// own.
pub(crate) fn setns_net(ns: &std::fs::File) -> std::io::Result<()> {
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    Ok(move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))?)
}

/// A path that opens each network namespace on the host, one per namespace (by inode): a
/// process's `/proc/PID/ns/net`, or `/run/netns/NAME` for namespaces without processes.
pub fn netns_paths() -> Vec<(u32, PathBuf)> {
    paths_into(&netns_pids(), &named_netns())
}

/// [`netns_paths`] from what [`netns_pids`] and [`named_netns`] read.
pub(super) fn paths_into(pids: &HashMap<u32, u32>, names: &HashMap<u32, String>) -> Vec<(u32, PathBuf)> {
    let mut seen: HashMap<u32, PathBuf> = HashMap::new();
    for (ino, pid) in pids {
        seen.insert(*ino, format!("/proc/{pid}/ns/net").into());
    }
    for (ino, name) in names {
        seen.entry(*ino).or_insert_with(|| Path::new("/run/netns").join(name));
    }
    let mut all: Vec<_> = seen.into_iter().collect();
    all.sort_unstable();
    all
}
