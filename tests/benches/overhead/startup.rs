//! Start-up on a host full of established sockets: time to the first listed sample and to the
//! last, how many were listed and lost, and cctrace's memory holding them all as idle flows.
//! The sockets are held by child processes (this benchmark run as `--hold NETNS CONNECTIONS`),
//! each below the usual limit of 20,000 open files.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cctrace_lab::Netns;

use crate::tracer::Cctrace;

/// Connections per holder process: two sockets each, 10,000 open files.
pub(crate) const PER_HOLDER: usize = 5_000;

/// The `--hold` mode: enter the namespace at `path`, open `connections` loopback connections,
/// say "ready", and hold them until stdin closes.
pub(crate) fn hold(path: &str, connections: usize) -> Result<()> {
    let ns = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
    use rustix::process::{getrlimit, setrlimit, Resource};
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network)).with_context(|| format!("setns {path}"))?;
    let lim = getrlimit(Resource::Nofile);
    let _ = setrlimit(Resource::Nofile, rustix::process::Rlimit { current: lim.maximum, ..lim });
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let mut held: Vec<TcpStream> = Vec::with_capacity(2 * connections);
    for _ in 0..connections {
        held.push(TcpStream::connect(addr)?);
        held.push(listener.accept()?.0);
    }
    println!("ready");
    std::io::stdout().flush()?;
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    drop(held);
    Ok(())
}

/// A child process holding loopback connections in a namespace until dropped.
pub(crate) struct Holder(Child);

impl Holder {
    pub(crate) fn start(ns: &Netns, connections: usize) -> Result<Self> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .args(["--hold", &ns.path().to_string_lossy(), &connections.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting a socket holder")?;
        let out = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let me = Self(child);
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("socket holder failed in {}", ns.name());
        }
        Ok(me)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

pub(crate) struct StartUp {
    pub(crate) sockets: usize,
    pub(crate) namespaces: usize,
    pub(crate) listed: usize,
    pub(crate) lost: u64,
    pub(crate) first: Option<Duration>,
    pub(crate) all: Option<Duration>,
    /// Resident memory with every socket a flow in the table, and its peak.
    pub(crate) rss: u64,
    pub(crate) peak_rss: u64,
}

#[derive(Default)]
struct Seen {
    listed: usize,
    first: Option<Duration>,
    all: Option<Duration>,
}

/// `sockets` established sockets (rounded to whole connections) over `namespaces` namespaces,
/// listed by the cctrace at `bin`.
pub(crate) fn run(bin: &std::path::Path, sockets: usize, namespaces: usize) -> Result<StartUp> {
    let connections = sockets / 2;
    let per_ns = connections.div_ceil(namespaces);
    let nss = (0..namespaces).map(|i| Netns::create(&format!("bench{i}"))).collect::<Result<Vec<_>>>()?;
    let mut holders = Vec::new();
    let mut opened = 0;
    for ns in &nss {
        let mut left = per_ns.min(connections - opened);
        while left > 0 {
            let n = left.min(PER_HOLDER);
            holders.push(Holder::start(ns, n)?);
            left -= n;
            opened += n;
        }
    }
    let expected = 2 * opened;
    let inodes: HashSet<u64> = nss.iter().map(Netns::inode).collect();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let tracer = Cctrace::start_bin(
        bin,
        &["--events", "--interval", "1000"],
        r#""reason":"snapshot""#.into(),
        Box::new(move |v, at| {
            if v["type"] == "sample"
                && v["reason"] == "snapshot"
                && v["netns"].as_u64().is_some_and(|n| inodes.contains(&n))
            {
                let mut s = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                s.listed += 1;
                s.first.get_or_insert(at);
                if s.listed == expected {
                    s.all = Some(at);
                }
            }
        }),
    )?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).all.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    // Let the table settle with every flow in it before reading memory.
    std::thread::sleep(Duration::from_secs(2));
    let (rss, peak_rss) = tracer.rss()?;
    let summary = tracer.stop()?;
    drop(holders);
    let s = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(StartUp {
        sockets: expected,
        namespaces,
        listed: s.listed,
        lost: summary["events_lost"].as_u64().unwrap_or(u64::MAX),
        first: s.first,
        all: s.all,
        rss,
        peak_rss,
    })
}
