//! Churn: a loop opening and closing loopback connections at a set rate next to one bulk flow,
//! while cctrace reports every second. Its CPU and memory, whether the bulk flow was reported
//! every interval, and whether anything was lost.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cctrace_lab::{Netns, SendMode, Sender, SenderOptions, Sink, SinkOptions, VethOptions, VethPair};

use crate::tracer::Cctrace;

const PORT: u16 = 5312;

pub(crate) struct Churn {
    pub(crate) secs: u64,
    pub(crate) target_rate: u64,
    pub(crate) achieved_rate: f64,
    pub(crate) connect_errors: u64,
    pub(crate) cpu_share: f64,
    pub(crate) peak_rss: u64,
    /// Seconds of the run in which the bulk flow had a flow line, of the whole seconds run.
    pub(crate) bulk_reported: (usize, usize),
    pub(crate) lost: u64,
    pub(crate) flows_seen: u64,
    pub(crate) flows_evicted: u64,
}

pub(crate) fn run(secs: u64, rate: u64) -> Result<Churn> {
    let lab = VethPair::create(VethOptions::default()).context("building the veth pair")?;
    let churn_ns = Netns::create("churn")?;
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let bulk_netns = lab.sender().inode();
    let reported = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let r = reported.clone();
    let tracer = Cctrace::start(
        &["--interval", "1000"],
        Box::new(move |v, at| {
            if v["type"] == "flow" && v["netns"].as_u64() == Some(bulk_netns) && v["dport"] == PORT {
                r.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(at.as_secs());
            }
        }),
    )?;
    let bulk = Sender::start(
        lab.sender(),
        lab.receiver_addr(),
        PORT,
        SenderOptions::new("cubic", SendMode::Bulk, Duration::from_secs(secs + 2)),
    )?;
    std::thread::sleep(Duration::from_secs(1));
    let stop = Arc::new(AtomicBool::new(false));
    let (opened, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (st, op, er) = (stop.clone(), opened.clone(), errors.clone());
    let churner = churn_ns.spawn_thread("cct-churn", move || -> std::io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let start = Instant::now();
        let mut n = 0u64;
        while !st.load(Ordering::Relaxed) {
            // Paced: ahead of the rate, wait.
            let due = start + Duration::from_secs_f64(n as f64 / rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            match TcpStream::connect(addr) {
                Ok(c) => {
                    let (s, _) = listener.accept()?;
                    drop(c);
                    drop(s);
                    op.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    er.fetch_add(1, Ordering::Relaxed);
                }
            }
            n += 1;
        }
        Ok(())
    })?;
    let (cpu0, t0) = (tracer.cpu_secs()?, Instant::now());
    let first_second = tracer.started.elapsed().as_secs() + 1;
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = tracer.cpu_secs()? - cpu0;
    let last_second = tracer.started.elapsed().as_secs();
    let _ = churner.join();
    let (_, peak_rss) = tracer.rss()?;
    bulk.stop();
    let _ = bulk.wait();
    let summary = tracer.stop()?;
    let seconds = reported.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let whole = (first_second..last_second).count();
    let hit = (first_second..last_second).filter(|s| seconds.contains(s)).count();
    Ok(Churn {
        secs,
        target_rate: rate,
        achieved_rate: opened.load(Ordering::Relaxed) as f64 / elapsed,
        connect_errors: errors.load(Ordering::Relaxed),
        cpu_share: cpu / elapsed,
        peak_rss,
        bulk_reported: (hit, whole),
        lost: summary["events_lost"].as_u64().unwrap_or(u64::MAX),
        flows_seen: summary["flows_seen"].as_u64().unwrap_or(0),
        flows_evicted: summary["flows_evicted"].as_u64().unwrap_or(0),
    })
}
