//! Scale: a host with many existing sockets is listed in full at start-up, none lost, checked
//! against `ss` in every namespace. (Speed and memory targets are in `cargo xtask bench`.)

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::collections::{HashMap, HashSet};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use cctrace_lab::Netns;
use cctrace_tests::{require_kernel, serial, Tracer};
use serde_json::Value;

/// Namespaces, and loopback connections in each (two sockets per connection): 19,200 sockets,
/// held by this process, within the usual hard limit of 20,000 open files.
const NAMESPACES: usize = 3;
const CONNECTIONS_PER_NAMESPACE: usize = 3_200;

/// Raise this process's open-file limit to hold every socket (up to the hard limit).
fn raise_fd_limit(wanted: u64) -> Result<()> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    // `None` is no limit.
    let (max, current) = (lim.maximum.unwrap_or(u64::MAX), lim.current.unwrap_or(u64::MAX));
    if max < wanted {
        bail!("this test holds {wanted} open files; the hard limit is {max}");
    }
    let raised = Rlimit { current: Some(wanted.max(current)), ..lim };
    setrlimit(Resource::Nofile, raised).with_context(|| format!("raising RLIMIT_NOFILE to {wanted}"))?;
    Ok(())
}

/// `connections` established loopback connections inside `ns`: both ends of each, held open.
fn connections_in(ns: &Netns, connections: usize) -> Result<Vec<TcpStream>> {
    let thread = ns.spawn_thread("cct-scale", move || -> std::io::Result<Vec<TcpStream>> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let mut held = Vec::with_capacity(2 * connections);
        for _ in 0..connections {
            held.push(TcpStream::connect(addr)?);
            held.push(listener.accept()?.0);
        }
        Ok(held)
    })?;
    Ok(thread.join().map_err(|_| anyhow::anyhow!("connecting thread panicked"))??)
}

/// Established TCP sockets in `ns` as `ss` sees them: (local port, peer port) pairs.
fn ss_established(ns: &Netns) -> Result<HashSet<(u16, u16)>> {
    let out =
        ns.command("ss").args(["-tnH", "state", "established"]).output_within(CHILD_DEADLINE).context("running ss")?;
    if !out.status.success() {
        bail!("ss failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let port = |addr: &str| addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    let mut set = HashSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // Recv-Q Send-Q Local:Port Peer:Port
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(peer)) = (cols.get(2).and_then(|a| port(a)), cols.get(3).and_then(|a| port(a))) else {
            bail!("unexpected ss line: {line}");
        };
        set.insert((local, peer));
    }
    Ok(set)
}

fn is_snapshot_in(v: &Value, inodes: &HashSet<u64>) -> bool {
    v["type"] == "sample" && v["reason"] == "snapshot" && v["netns"].as_u64().is_some_and(|n| inodes.contains(&n))
}

#[test]
fn every_existing_socket_is_listed_at_start_up_and_none_is_lost() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    raise_fd_limit(2 * (NAMESPACES * CONNECTIONS_PER_NAMESPACE) as u64 + 256)?;
    let namespaces = (0..NAMESPACES).map(|i| Netns::create(&format!("scale{i}"))).collect::<Result<Vec<_>>>()?;
    let mut held = Vec::new();
    for ns in &namespaces {
        held.push(connections_in(ns, CONNECTIONS_PER_NAMESPACE)?);
    }
    let mut expected: HashMap<u64, HashSet<(u16, u16)>> = HashMap::new();
    for ns in &namespaces {
        let seen = ss_established(ns)?;
        assert_eq!(seen.len(), 2 * CONNECTIONS_PER_NAMESPACE, "ss in {} disagrees with what was opened", ns.name());
        expected.insert(ns.inode(), seen);
    }
    let total: usize = expected.values().map(HashSet::len).sum();
    let inodes: HashSet<u64> = expected.keys().copied().collect();

    // The default ring (8 MiB, 32,768 samples) could hold these; a 1 MiB ring could not if the
    // listing went through it. It does not: the iterators' output is read at the reader's pace.
    let tracer = Tracer::start(&["--ring-kib", "1024", "--interval", "1000"])?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while tracer.count(|v| is_snapshot_in(v, &inodes)) < total && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (code, lines) = tracer.stop()?;
    assert_eq!(code, 0);

    let mut listed: HashMap<u64, HashSet<(u16, u16)>> = HashMap::new();
    for v in lines.iter().filter(|v| is_snapshot_in(v, &inodes)) {
        let netns = v["netns"].as_u64().context("netns")?;
        let ports = (
            u16::try_from(v["sport"].as_u64().context("sport")?)?,
            u16::try_from(v["dport"].as_u64().context("dport")?)?,
        );
        assert_eq!(v["state"], "ESTAB", "{v}");
        assert!(listed.entry(netns).or_default().insert(ports), "listed twice: {v}");
    }
    for ns in &namespaces {
        let want = &expected[&ns.inode()];
        let got = listed.remove(&ns.inode()).unwrap_or_default();
        let missing = want.difference(&got).count();
        assert_eq!(missing, 0, "{missing} of {} sockets in {} were not listed", want.len(), ns.name());
        assert_eq!(got.len(), want.len(), "sockets listed in {} that ss does not show", ns.name());
    }
    let summary = lines.last().context("no summary")?;
    assert_eq!(summary["type"], "summary", "{summary}");
    assert_eq!(summary["events_lost"], 0, "{summary}");
    assert_eq!(summary["events_received"], summary["kernel_emitted"], "{summary}");
    drop(held);
    Ok(())
}
