//! Owners of flows the kernel side could not name, found the way `ss -p` finds them: the
//! socket's inode from `/proc/PID/net/tcp{,6}` of a process in the flow's network namespace,
//! then the process holding that inode among its `/proc/PID/fd` links.
//!
//! The kernel names a flow's owner when `connect()` runs, or, with `sock:sock_send_length`,
//! when a process sends on it. Kernels without BTF-typed tracepoints (6.1 and older) leave
//! accepted connections, the sender of a video among them, without one; this fills the gap.
//!
//! A scan first reads each waiting namespace's `/proc/PID/net/tcp{,6}` (one file each), and
//! walks every process's descriptors only when a waiting socket has an inode there: a
//! connection is established, and sampled, before `accept()` gives it one, and a walk then
//! would find nothing. A walk runs no sooner than `COST_FACTOR` times the CPU time the last one
//! took after it (so walking takes at most a twentieth of one core however many processes
//! there are; CPU time, not wall time, so a busy machine does not stretch the gap), and any
//! scan no sooner than `MIN_SCAN_GAP` after the last. A flow is given up after `MAX_TRIES`
//! walks or scans that did not find it, or after `MAX_UNACCEPTED_LOOKS` scans that saw it still
//! waiting for `accept()`. The reader wakes for a due scan even when no sample arrives: on
//! kernels without periodic samples a flow may send nothing more until it closes, when its
//! process has let go of it.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use procfs::net::{TcpNetEntry, TcpState};

use super::procs;
use crate::analysis::sample::{Owner, Sample, TcpState as SampleState};

const MIN_SCAN_GAP: Duration = Duration::from_millis(250);
const COST_FACTOR: u32 = 20;
/// The first scan often comes before `accept()` returns (the connection is established first),
/// so a flow gets a few seconds' worth of tries.
const MAX_TRIES: u8 = 8;
/// A connection stays in the accept queue while its server is busy; a few seconds' worth of
/// looks (each one read of the namespace's socket table) before giving up.
const MAX_UNACCEPTED_LOOKS: u8 = 40;
/// Flows remembered (named or given up on); the oldest half is forgotten past this.
const MAX_REMEMBERED: usize = 65_536;

/// A flow as `/proc/net/tcp` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FlowKey {
    netns: u32,
    local: SocketAddr,
    remote: SocketAddr,
}

impl FlowKey {
    /// IPv4-mapped IPv6 endpoints (an IPv6 socket talking IPv4) compare as the IPv4 they are.
    fn new(netns: u32, local: SocketAddr, remote: SocketAddr) -> Self {
        let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        Self { netns, local: canonical(local), remote: canonical(remote) }
    }
}

#[derive(Default)]
pub struct OwnerLookup {
    /// By cookie: the owner found, or `None` once given up.
    known: HashMap<u64, Option<Owner>>,
    /// Unnamed flows waiting for a scan, with the scans already tried.
    waiting: HashMap<u64, Waiting>,
    /// No scan before this.
    next_scan: Option<Instant>,
    /// No walk of every process's descriptors before this.
    next_walk: Option<Instant>,
}

/// A flow waiting for its owner.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    key: FlowKey,
    /// Walks (or scans that no longer saw the socket) that did not find it.
    tries: u8,
    /// Scans that saw it still in the accept queue.
    unaccepted_looks: u8,
}

/// What a socket table says of a waiting flow's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TableRow {
    /// Accepted: the inode that a process's descriptor links to.
    Inode(u64),
    /// Established but not yet accepted: no inode until `accept()` returns.
    Unaccepted,
}

impl OwnerLookup {
    /// Name the owner of every sample that lacks one, from what earlier scans found, and scan
    /// when flows are waiting and the last scan is old enough.
    pub fn fill(&mut self, batch: &mut [Sample]) {
        for s in batch.iter_mut() {
            if s.owner.is_some() || s.local.port() == 0 || s.remote.port() == 0 {
                continue;
            }
            match self.known.get(&s.cookie) {
                Some(found) => s.owner.clone_from(found),
                None if s.tcp_state == SampleState::Established => {
                    let key = FlowKey::new(s.netns, s.local, s.remote);
                    self.waiting.entry(s.cookie).or_insert(Waiting { key, tries: 0, unaccepted_looks: 0 });
                }
                None => {}
            }
        }
        if !self.scan_if_due() {
            return;
        }
        for s in batch.iter_mut() {
            if s.owner.is_none() {
                if let Some(found) = self.known.get(&s.cookie) {
                    s.owner.clone_from(found);
                }
            }
        }
    }

    /// When the next scan is due, if flows are waiting for one.
    pub fn due_at(&self) -> Option<Instant> {
        (!self.waiting.is_empty()).then(|| self.next_scan.unwrap_or_else(Instant::now))
    }

    /// Scan if flows wait and the last scan is far enough back; whether it scanned.
    pub fn scan_if_due(&mut self) -> bool {
        let now = Instant::now();
        if self.waiting.is_empty() || self.next_scan.is_some_and(|t| now < t) {
            return false;
        }
        let cpu_before = thread_cpu_time();
        let walked = self.scan(Path::new(procs::PROC), self.next_walk.is_none_or(|t| now >= t));
        let cost = thread_cpu_time().saturating_sub(cpu_before);
        let now = Instant::now();
        self.next_scan = Some(now + MIN_SCAN_GAP);
        if walked {
            self.next_walk = Some(now + MIN_SCAN_GAP.max(cost * COST_FACTOR));
        }
        true
    }

    /// Read the waiting flows' socket tables and, if `may_walk` and a waiting socket has been
    /// accepted, walk the descriptors for its holder; whether it walked.
    fn scan(&mut self, proc: &Path, may_walk: bool) -> bool {
        let netns: HashSet<u32> = self.waiting.values().map(|w| w.key.netns).collect();
        let rows = socket_rows(proc, &netns);
        let wanted: HashMap<u64, u64> = self
            .waiting
            .iter()
            .filter_map(|(cookie, w)| match rows.get(&w.key) {
                Some(TableRow::Inode(inode)) => Some((*inode, *cookie)),
                _ => None,
            })
            .collect();
        let walk = may_walk && !wanted.is_empty();
        let owners = if walk { holders(proc, &wanted) } else { HashMap::new() };
        if self.known.len() > MAX_REMEMBERED {
            self.known.clear();
        }
        self.waiting.retain(|cookie, w| {
            if let Some(owner) = owners.get(cookie) {
                // Said once per flow: on kernels without periodic samples the flow's next
                // line may be its close, and this is the one place the finding shows before it.
                log::debug!(
                    "owner of {} -> {} (netns {}) found in /proc: {} (pid {})",
                    w.key.local,
                    w.key.remote,
                    w.key.netns,
                    owner.comm,
                    owner.pid
                );
                self.known.insert(*cookie, Some(owner.clone()));
                return false;
            }
            let given_up = match rows.get(&w.key) {
                Some(TableRow::Unaccepted) => {
                    w.unaccepted_looks += 1;
                    w.unaccepted_looks >= MAX_UNACCEPTED_LOOKS
                }
                // Waits for a walk that was not yet due.
                Some(TableRow::Inode(_)) if !walk => false,
                _ => {
                    w.tries += 1;
                    w.tries >= MAX_TRIES
                }
            };
            if given_up {
                self.known.insert(*cookie, None);
            }
            !given_up
        });
        walk
    }
}

/// CPU time this thread has used (zero where the clock is unreadable: the gap is then the minimum).
fn thread_cpu_time() -> Duration {
    Duration::from_nanos(crate::clock::thread_cpu_ns())
}

/// What the socket tables of the given namespaces say of each TCP socket, read through one
/// process of each namespace.
fn socket_rows(proc: &Path, netns: &HashSet<u32>) -> HashMap<FlowKey, TableRow> {
    let mut out = HashMap::new();
    let mut done = HashSet::new();
    for pid in procs::pids(proc) {
        if done.len() == netns.len() {
            break;
        }
        let dir = proc.join(pid.to_string());
        let Some(ns) = crate::host::netns_inode(&dir.join("ns/net")) else { continue };
        if !netns.contains(&ns) || !done.insert(ns) {
            continue;
        }
        for socket in procs::tcp_tables(&dir.join("net")).unwrap_or_default() {
            if let Some(row) = table_row(&socket) {
                out.insert(FlowKey::new(ns, socket.local_address, socket.remote_address), row);
            }
        }
    }
    out
}

/// Which process holds each wanted socket inode (inode -> cookie): cookie -> owner.
fn holders(proc: &Path, wanted: &HashMap<u64, u64>) -> HashMap<u64, Owner> {
    let inodes: HashSet<u64> = wanted.keys().copied().collect();
    let found = procs::socket_holders(proc, &inodes);
    let comms: HashMap<u32, String> = found.values().map(|h| (h.pid, procs::comm(proc, h.pid))).collect();
    found
        .iter()
        .filter_map(|(inode, h)| Some((*wanted.get(inode)?, Owner { pid: h.pid, comm: comms[&h.pid].as_str().into() })))
        .collect()
}

/// What a socket table's row says of the socket; `None` for rows without an inode that wait
/// for nothing (listeners' children in other states, TIME_WAIT).
fn table_row(socket: &TcpNetEntry) -> Option<TableRow> {
    match socket.inode {
        0 if socket.state == TcpState::Established => Some(TableRow::Unaccepted),
        0 => None,
        inode => Some(TableRow::Inode(inode)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_say_accepted_unaccepted_or_nothing_to_wait_for() {
        let table = "  sl  local_address rem_address   st
   0: 0100007F:1389 0100007F:D0A2 01 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 20 4 30 10 -1
   1: 0100007F:1389 0100007F:D0A4 01 00000000:00000000 00:00000000 00000000     0        0 0 1
   2: 0100007F:1389 0100007F:D0A6 06 00000000:00000000 03:00000F9E 00000000     0        0 0 3
";
        let rows: Vec<_> = procs::tcp_table(table.as_bytes()).expect("parses").iter().map(table_row).collect();
        assert_eq!(rows, [Some(TableRow::Inode(12345)), Some(TableRow::Unaccepted), None], "the last one TIME_WAIT");
    }

    /// An established flow of this process's namespace (cookie 9) with no owner yet.
    fn unnamed(local: SocketAddr, remote: SocketAddr) -> Sample {
        let mut sample = crate::analysis::flow_table::tests::sample(9, 0);
        sample.netns = crate::host::netns_inode("/proc/self/ns/net").unwrap();
        sample.local = local;
        sample.remote = remote;
        sample.tcp_state = SampleState::Established;
        sample.owner = None;
        sample
    }

    #[test]
    fn this_process_is_found_as_the_owner_of_its_own_accepted_connection() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        accepted.write_all(b"x").unwrap();
        client.read_exact(&mut [0u8; 1]).unwrap();
        let mut lookup = OwnerLookup::default();
        let mut batch = vec![unnamed(accepted.local_addr().unwrap(), accepted.peer_addr().unwrap())];
        lookup.fill(&mut batch);
        let owner = batch[0].owner.clone().expect("owner found");
        assert_eq!(owner.pid, std::process::id());
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(owner.comm, comm.trim_end());
    }

    #[test]
    fn a_connection_waiting_in_the_accept_queue_costs_no_walk_and_no_try() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut lookup = OwnerLookup::default();
        let mut batch = vec![unnamed(listener.local_addr().unwrap(), client.local_addr().unwrap())];
        lookup.fill(&mut batch);
        assert!(batch[0].owner.is_none(), "not accepted yet");
        assert!(lookup.next_walk.is_none(), "no walk for a socket without an inode");
        let waiting = lookup.waiting[&9];
        assert_eq!((waiting.tries, waiting.unaccepted_looks), (0, 1));
        let (_accepted, _) = listener.accept().unwrap();
        assert!(lookup.scan(Path::new("/proc"), true), "accepted: walked");
        assert_eq!(lookup.known[&9].as_ref().map(|o| o.pid), Some(std::process::id()));
    }
}
