//! Processes and what they hold: the one walk of `/proc` that maps descriptors (sockets by
//! their `socket:[INODE]` link, TUN files) to the processes holding them, the way `ss -p` and
//! `lsof` do, and the TCP socket tables (`net/tcp{,6}`) that give a connection's inode.
//!
//! The tables are parsed by the `procfs` crate. The descriptors are read by hand: `procfs`'s
//! `Process::fd` opens, reads, stats and closes each descriptor's link (four calls where one
//! `readlink` does) and cost a third more CPU time per walk, measured over 10,000 sockets
//! (62 ms against 47 ms here), which the owner lookup pays in its pace (it walks no sooner than
//! twenty times a walk's cost after the last, see [`super::owners`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use procfs::net::{TcpNetEntries, TcpNetEntry};
use procfs::FromReadSI as _;

/// Where the kernel shows processes.
pub(crate) const PROC: &str = "/proc";

/// The ids of the processes listed in `proc`, in its directory order.
pub(crate) fn pids(proc: &Path) -> impl Iterator<Item = u32> {
    std::fs::read_dir(proc).into_iter().flatten().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
}

/// What `pid`'s descriptors point at (`socket:[123]`, `/dev/net/tun`, ...), each with its
/// number, at most `limit` of them.
pub(crate) fn fd_targets(proc: &Path, pid: u32, limit: usize) -> Vec<(i32, PathBuf)> {
    let Ok(fds) = std::fs::read_dir(proc.join(pid.to_string()).join("fd")) else { return Vec::new() };
    fds.filter_map(Result::ok)
        .take(limit)
        .filter_map(|entry| {
            let fd = entry.file_name().to_str()?.parse().ok()?;
            Some((fd, std::fs::read_link(entry.path()).ok()?))
        })
        .collect()
}

/// The socket inode a descriptor's link names (`socket:[123]` -> 123).
pub(crate) fn socket_inode(target: &Path) -> Option<u64> {
    target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// A process and the descriptor by which it holds a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    pub pid: u32,
    pub fd: i32,
}

/// The first process (in `/proc`'s order) and descriptor holding each `wanted` socket inode.
/// The walk stops once each has been found.
pub(crate) fn socket_holders(proc: &Path, wanted: &HashSet<u64>) -> HashMap<u64, Holder> {
    let mut out = HashMap::new();
    if wanted.is_empty() {
        return out;
    }
    for pid in pids(proc) {
        for (fd, target) in fd_targets(proc, pid, usize::MAX) {
            if let Some(inode) = socket_inode(&target).filter(|i| wanted.contains(i)) {
                out.entry(inode).or_insert(Holder { pid, fd });
            }
        }
        if out.len() == wanted.len() {
            break;
        }
    }
    out
}

/// A process's command name (`/proc/PID/comm`), empty when it is gone.
pub(crate) fn comm(proc: &Path, pid: u32) -> String {
    let text = std::fs::read_to_string(proc.join(pid.to_string()).join("comm")).unwrap_or_default();
    text.trim_end().to_string()
}

/// The rows of the TCP socket tables under `net` (a `/proc/PID/net` or
/// `/proc/thread-self/net`): IPv4 then IPv6. A table that cannot be read is an error.
pub(crate) fn tcp_tables(net: &Path) -> std::io::Result<Vec<TcpNetEntry>> {
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        out.extend(tcp_table(std::fs::File::open(net.join(table))?)?);
    }
    Ok(out)
}

/// One TCP socket table's rows, as the kernel prints them (`/proc/net/tcp` or `tcp6`).
pub(crate) fn tcp_table(text: impl std::io::Read) -> std::io::Result<Vec<TcpNetEntry>> {
    TcpNetEntries::from_read(text, procfs::current_system_info()).map(|rows| rows.0).map_err(|e| match e {
        procfs::ProcError::Io(e, _) => e,
        other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::MetadataExt as _;

    use procfs::net::TcpState;

    use super::*;

    #[test]
    fn tcp_tables_parse_as_the_kernel_prints_them() {
        // A listener, a loopback connection 127.0.0.1:51000 -> 127.0.0.1:8096, and one still in
        // its server's accept queue (established, no inode yet).
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1FA0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:C738 0100007F:1FA0 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1389 0100007F:D0A4 01 00000000:00000000 00:00000000 00000000     0        0 0 1
";
        let rows = tcp_table(v4.as_bytes()).expect("parses");
        let row = |i: usize| (rows[i].local_address, rows[i].remote_address, rows[i].state.clone(), rows[i].inode);
        let addr = |a: &str| a.parse::<SocketAddr>().expect("an address");
        assert_eq!(row(0), (addr("127.0.0.1:8096"), addr("0.0.0.0:0"), TcpState::Listen, 111));
        assert_eq!(row(1), (addr("127.0.0.1:51000"), addr("127.0.0.1:8096"), TcpState::Established, 222));
        assert_eq!(row(2), (addr("127.0.0.1:5001"), addr("127.0.0.1:53412"), TcpState::Established, 0));
        // Each 32-bit word of an IPv6 address in host order.
        let v6 = "  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1FA0 0000000000000000FFFF00000100007F:C738 01 00000000:00000000 00:00000000 00000000 0 0 333 1
";
        let rows = tcp_table(v6.as_bytes()).expect("parses");
        assert_eq!(
            (rows[0].local_address, rows[0].remote_address),
            (addr("[::1]:8096"), addr("[::ffff:127.0.0.1]:51000"))
        );
    }

    #[test]
    fn this_process_holds_its_own_socket_by_its_descriptor() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", sock.as_raw_fd())).expect("fd").ino();
        let found = socket_holders(Path::new(PROC), &[inode, 1].into());
        let me = Holder { pid: std::process::id(), fd: sock.as_raw_fd() };
        assert_eq!(found, [(inode, me)].into(), "inode 1 is no socket anyone holds");
        assert!(socket_holders(Path::new(PROC), &HashSet::new()).is_empty());
    }
}
