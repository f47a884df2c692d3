//! Which process owns a UDP socket, the way `ss -p` finds it: the socket's inode among the
//! `socket:[INODE]` links in `/proc/PID/fd`. The kernel's hint (the last process seen sending
//! on it) is checked first, so the full walk of `/proc` runs only for sockets nobody was seen
//! sending on, and only once per socket.

use std::path::Path;

use crate::analysis::udp::Process;

/// The fd targets of `pid` (`socket:[123]`, `/dev/net/tun`, ...), at most `limit` of them.
fn fd_targets(pid: u32, limit: usize) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    dir.flatten()
        .take(limit)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .collect()
}

/// Most descriptors read per process: a server with more is rare, and the walk stays bounded.
const MAX_FDS: usize = 65_536;

fn holds_socket(targets: &[String], inode: u64) -> bool {
    let want = format!("socket:[{inode}]");
    targets.contains(&want)
}

/// What `/proc` says about `pid`, with the fd targets already read.
fn describe(pid: u32, targets: &[String]) -> Option<Process> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim_end().to_string();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default();
    let tun_open = targets.iter().any(|t| t == "/dev/net/tun");
    Some(Process { pid, comm, cmdline, tun_open })
}

/// The process owning the socket with `inode`; `hint` is the pid the kernel saw sending on it.
/// With no inode, the hint is taken as it is.
pub fn owner_of_socket(inode: u64, hint: u32) -> Option<Process> {
    if hint != 0 {
        let targets = fd_targets(hint, MAX_FDS);
        if inode == 0 || holds_socket(&targets, inode) {
            return describe(hint, &targets);
        }
    }
    if inode == 0 {
        return None;
    }
    let procs = std::fs::read_dir(Path::new("/proc")).ok()?;
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let targets = fd_targets(pid, MAX_FDS);
        if holds_socket(&targets, inode) {
            return describe(pid, &targets);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn finds_this_process_by_its_socket_inode() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", sock.as_raw_fd())).expect("fd").ino();
        let me = std::process::id();
        let by_walk = owner_of_socket(inode, 0).expect("found by walking /proc");
        assert_eq!(by_walk.pid, me);
        let by_hint = owner_of_socket(inode, me).expect("found by the hint");
        assert_eq!(by_hint.pid, me);
        assert!(!by_hint.cmdline.is_empty());
        // A wrong hint falls back to the walk.
        assert_eq!(owner_of_socket(inode, 1).map(|p| p.pid), Some(me));
    }
}
