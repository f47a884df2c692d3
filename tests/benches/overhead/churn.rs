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
const CHURN_THREADS: usize = 2;

pub(crate) struct Churn {
    pub(crate) secs: u64,
    pub(crate) target_rate: u64,
    pub(crate) achieved_rate: f64,
    pub(crate) connect_errors: u64,
    pub(crate) cpu_share: f64,
    pub(crate) peak_rss: u64,
    /// Flow lines of the bulk flow during the churn, and the longest gap between two.
    pub(crate) bulk_lines: usize,
    pub(crate) bulk_max_gap: Duration,
    pub(crate) lost: u64,
    pub(crate) flows_seen: u64,
    pub(crate) flows_evicted: u64,
    /// cctrace's programs' runs during the churn (the state hooks run hundreds of thousands of
    /// times here, so their averages are not at the mercy of a few preempted runs).
    pub(crate) kernel: std::collections::BTreeMap<String, crate::bpf_stats::Runs>,
}

/// `rate` connections a second for `secs` under the cctrace at `bin`.
pub(crate) fn run(bin: &std::path::Path, secs: u64, rate: u64) -> Result<Churn> {
    let lab = VethPair::create(VethOptions::default()).context("building the veth pair")?;
    let churn_ns = Netns::create("churn")?;
    let _sink = Sink::start(lab.receiver(), lab.receiver_addr(), PORT, SinkOptions::default())?;
    let bulk_netns = lab.sender().inode();
    let reported = Arc::new(Mutex::new(Vec::new()));
    let r = reported.clone();
    let tracer = Cctrace::start_bin(
        bin,
        &["--interval", "1000"],
        format!(r#""dport":{PORT},"#),
        Box::new(move |v, at| {
            if v["type"] == "flow" && v["netns"].as_u64() == Some(bulk_netns) && v["dport"] == PORT {
                r.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(at);
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
    // Two loops, each at half the rate: one alone does not keep up on a busy 2-core machine.
    let churners = (0..CHURN_THREADS)
        .map(|_| {
            let (st, op, er) = (stop.clone(), opened.clone(), errors.clone());
            let rate = rate as f64 / CHURN_THREADS as f64;
            churn_ns.spawn_thread("cct-churn", move || -> std::io::Result<()> {
                let listener = TcpListener::bind("127.0.0.1:0")?;
                let addr = listener.local_addr()?;
                let start = Instant::now();
                let mut n = 0u64;
                while !st.load(Ordering::Relaxed) {
                    // Paced: ahead of the rate, wait.
                    let due = start + Duration::from_secs_f64(n as f64 / rate);
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
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let stats = crate::bpf_stats::enable()?;
    let (cpu0, runs0, t0) = (tracer.cpu_secs()?, crate::bpf_stats::programs_of(tracer.pid())?, Instant::now());
    let churn_start = tracer.started.elapsed();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = tracer.cpu_secs()? - cpu0;
    let kernel = crate::bpf_stats::delta(&runs0, &crate::bpf_stats::programs_of(tracer.pid())?);
    drop(stats);
    let churn_end = tracer.started.elapsed();
    for churner in churners {
        let _ = churner.join();
    }
    let (_, peak_rss) = tracer.rss()?;
    bulk.stop();
    let _ = bulk.wait();
    let summary = tracer.stop()?;
    let lines: Vec<Duration> = reported
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .copied()
        .filter(|at| (churn_start..churn_end).contains(at))
        .collect();
    // From the churn's start to its first line, between lines, and from the last to its end.
    let mut edges = vec![churn_start];
    edges.extend(&lines);
    edges.push(churn_end);
    let bulk_max_gap = edges.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
    Ok(Churn {
        secs,
        target_rate: rate,
        achieved_rate: opened.load(Ordering::Relaxed) as f64 / elapsed,
        connect_errors: errors.load(Ordering::Relaxed),
        cpu_share: cpu / elapsed,
        peak_rss,
        bulk_lines: lines.len(),
        bulk_max_gap,
        lost: summary["events_lost"].as_u64().unwrap_or(u64::MAX),
        flows_seen: summary["flows_seen"].as_u64().unwrap_or(0),
        flows_evicted: summary["flows_evicted"].as_u64().unwrap_or(0),
        kernel,
    })
}
