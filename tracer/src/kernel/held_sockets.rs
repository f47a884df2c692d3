//! The live switch where `iter/tcp` cannot call `bpf_setsockopt` (kernels before 5.15): each
//! established TCP connection of a network namespace is reached through a process that holds
//! it. `pidfd_open` and `pidfd_getfd` (Linux 5.6) give cctrace a descriptor of that very socket,
//! on which `setsockopt(TCP_CONGESTION)` acts as it would in its holder, and `SO_COOKIE` reads
//! the cookie `iter/tcp` would report, so a plan, its state and `--undo` are the same either way.
//!
//! Found as `ss -p` finds owners: the namespace's own `/proc/net/tcp{,6}` (read on a thread that
//! entered it) gives each connection's socket inode, and the `socket:[INODE]` links of
//! `/proc/PID/fd` the process and descriptor holding it. A connection no process holds (still in
//! its server's accept queue, or held by a process that could not be reached) is listed with
//! the reason instead.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};

use super::listing::{in_namespace, Errno, NetnsWalkError};
use crate::analysis::fix_plan::{Switched, Unreached};
use crate::host::procs::{self, Holder};

/// An established connection of the namespace with cctrace's own descriptor of its socket.
struct Reached {
    socket: OwnedFd,
    cookie: u64,
    sport: u16,
    dport: u16,
    cc: String,
}

/// What one walk of a namespace found.
struct Walk {
    reached: Vec<Reached>,
    unreached: Vec<Unreached>,
}

/// Walk namespace `netns` (entered through `path`) and set the algorithm `choose` names for each
/// connection it reached (`None`: leave it); one record per connection chosen, with `new_cc`
/// its old one when it was left, and the connections that could not be reached.
pub(super) fn switch_where(
    netns: u32,
    path: &Path,
    choose: &dyn Fn(u64, &str) -> Option<String>,
) -> Result<(Vec<Switched>, Vec<Unreached>), NetnsWalkError> {
    let walk = walk(netns, path)?;
    let mut touched = Vec::new();
    for r in walk.reached {
        let Some(new_cc) = choose(r.cookie, &r.cc) else { continue };
        let result = if new_cc == r.cc {
            0
        } else {
            rustix::net::sockopt::set_tcp_congestion(&r.socket, &new_cc).map_or_else(|e| -e.raw_os_error(), |()| 0)
        };
        touched.push(Switched { cookie: r.cookie, old_cc: r.cc, new_cc, result, sport: r.sport, dport: r.dport });
    }
    Ok((touched, walk.unreached))
}

fn walk(netns: u32, path: &Path) -> Result<Walk, NetnsWalkError> {
    let connections = established_in(netns, path)?;
    let wanted: HashSet<u64> = connections.iter().map(|c| c.2).filter(|&inode| inode != 0).collect();
    let holders = procs::socket_holders(Path::new(procs::PROC), &wanted);
    let mut pidfds: HashMap<u32, std::io::Result<OwnedFd>> = HashMap::new();
    let mut out = Walk { reached: Vec::new(), unreached: Vec::new() };
    let mut seen = HashSet::new();
    for (local, remote, inode) in connections {
        if inode != 0 && !seen.insert(inode) {
            continue;
        }
        let (sport, dport) = (local.port(), remote.port());
        let unreached = |why: String| Unreached { sport, dport, why };
        let Some(&Holder { pid, fd }) = holders.get(&inode) else {
            out.unreached.push(unreached(
                if inode == 0 { "not yet accepted by its server" } else { "held by no process" }.into(),
            ));
            continue;
        };
        let pidfd = pidfds.entry(pid).or_insert_with(|| open_pidfd(pid));
        let socket = match pidfd.as_ref().map_err(Errno::of).and_then(|p| take_descriptor(p, fd)) {
            Ok(socket) => socket,
            Err(errno) => {
                out.unreached.push(unreached(format!("pid {pid}'s descriptor {fd}: {errno}")));
                continue;
            }
        };
        match (rustix::net::sockopt::socket_cookie(&socket), rustix::net::sockopt::tcp_congestion(&socket)) {
            (Ok(cookie), Ok(cc)) => out.reached.push(Reached { socket, cookie, sport, dport, cc }),
            (Err(e), _) | (_, Err(e)) => out.unreached.push(unreached(format!("reading its socket: {e}"))),
        }
    }
    Ok(out)
}

fn open_pidfd(pid: u32) -> std::io::Result<OwnedFd> {
    let pid = i32::try_from(pid).ok().and_then(Pid::from_raw).ok_or(std::io::ErrorKind::InvalidInput)?;
    Ok(pidfd_open(pid, PidfdFlags::empty())?)
}

/// A descriptor of cctrace's own for descriptor `fd` of the process behind `pidfd`.
fn take_descriptor(pidfd: &OwnedFd, fd: i32) -> Result<OwnedFd, Errno> {
    pidfd_getfd(pidfd, fd, PidfdGetfdFlags::empty()).map_err(|e| Errno(e.raw_os_error()))
}

/// The established connections of the namespace (local, remote, socket inode; 0 while one
/// waits in its server's accept queue), from its own `/proc/net/tcp{,6}`.
fn established_in(netns: u32, path: &Path) -> Result<Vec<(SocketAddr, SocketAddr, u64)>, NetnsWalkError> {
    // A thread of its own: entering a namespace changes the thread for good.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                in_namespace(netns, path, crate::host::setns_net, || {
                    let rows = procs::tcp_tables(Path::new("/proc/thread-self/net"))
                        .map_err(|e| NetnsWalkError::Read(Errno::of(&e)))?;
                    let established = rows.into_iter().filter(|r| r.state == procfs::net::TcpState::Established);
                    Ok(established.map(|r| (r.local_address, r.remote_address, r.inode)).collect())
                })
            })
            .join()
            .unwrap_or(Err(NetnsWalkError::Panicked))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection of this process's own namespace, both ends held here.
    fn connection() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    fn own_netns() -> Option<u32> {
        crate::host::netns_inode("/proc/thread-self/ns/net")
    }

    #[test]
    fn this_process_is_found_holding_both_ends_of_its_connection() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let (client, server) = connection();
        let inode =
            |s: &std::net::TcpStream| std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd())).unwrap().ino();
        let wanted: HashSet<u64> = [inode(&client), inode(&server)].into();
        let found = procs::socket_holders(Path::new(procs::PROC), &wanted);
        assert_eq!(found.get(&inode(&client)), Some(&Holder { pid: std::process::id(), fd: client.as_raw_fd() }));
        assert_eq!(found.get(&inode(&server)), Some(&Holder { pid: std::process::id(), fd: server.as_raw_fd() }));
    }

    #[test]
    fn a_connection_is_switched_through_the_process_holding_it_and_keeps_its_cookie() {
        let Some(netns) = own_netns() else { return };
        let (client, _server) = connection();
        let port = client.local_addr().unwrap().port();
        let cookie = rustix::net::sockopt::socket_cookie(&client).unwrap();
        let before = rustix::net::sockopt::tcp_congestion(&client).unwrap();
        let available = crate::host::available_congestion_controls();
        let Some(target) = available.iter().find(|a| **a != before) else { return };
        let choose = |c: u64, _: &str| (c == cookie).then(|| target.clone());
        let (touched, _) = switch_where(netns, Path::new("/proc/thread-self/ns/net"), &choose).unwrap();
        let mine: Vec<&Switched> = touched.iter().filter(|s| s.cookie == cookie).collect();
        assert_eq!(mine.len(), 1, "{touched:?}");
        assert_eq!((mine[0].sport, mine[0].old_cc.as_str(), mine[0].result), (port, before.as_str(), 0));
        assert_eq!(&rustix::net::sockopt::tcp_congestion(&client).unwrap(), target, "the kernel's own view");
        assert_eq!(rustix::net::sockopt::socket_cookie(&client).unwrap(), cookie);
    }
}
