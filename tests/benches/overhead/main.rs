//! cctrace's overhead and scale, measured against the alternatives in one run, printed as one
//! table: throughput of a saturating transfer untraced, under cctrace, under bpftrace and under
//! `ss -tni` polling (interleaved rounds, paired ratios with 95 % confidence intervals, more
//! rounds until each interval is within the target), cctrace's CPU, its programs' in-kernel
//! time per run (`bpf_stats`), the observer's share of busy CPU beside cctrace's two peers at 0,
//! 1,000 and 10,000 idle flows (issue 24's measure), start-up with many existing sockets, churn,
//! and memory.
//!
//! `cargo xtask bench` or `cargo bench -p cctrace-tests --bench overhead -- [options]`:
//! `--secs N` (per transfer, 4), `--min-rounds N` (4), `--max-rounds N` (20), `--target-pct P`
//! (2), `--startup-sockets N` (100000), `--startup-namespaces N` (5), `--churn-secs N` (60),
//! `--churn-rate N` (5000 connections/s), `--observer-rounds N` (6), `--observer-secs N` (4),
//! `--only throughput|observer|startup|churn`.

mod bpf_stats;
mod churn;
mod ci;
mod observer;
mod startup;
mod throughput;
mod tracer;

use std::time::Duration;

use anyhow::{bail, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let num = |name: &str, default: u64| arg(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    if let Some(path) = arg("--hold") {
        let n = args.last().and_then(|v| v.parse().ok()).unwrap_or(0);
        return startup::hold(&path, n);
    }
    if let Err(e) = cctrace_lab::check_privileges() {
        println!("overhead benchmark skipped: {e}");
        return Ok(());
    }
    let bin = cctrace_tests::cctrace_bin();
    if !bin.exists() {
        bail!("{} is not built: cargo build --release -p tracer", bin.display());
    }
    let only = arg("--only");
    let wanted = |section: &str| only.as_deref().is_none_or(|o| o == section);
    let mut table: Vec<(String, String)> = Vec::new();
    let mut row = |what: &str, value: String| {
        println!("{what:<58} {value}");
        table.push((what.to_string(), value));
    };
    println!("cctrace overhead benchmark ({}; {} CPUs; load average {})", bin.display(), cpus(), loadavg());

    if wanted("throughput") {
        let settings = throughput::Settings {
            secs: num("--secs", 4),
            min_rounds: num("--min-rounds", 4) as usize,
            max_rounds: num("--max-rounds", 20) as usize,
            target: num("--target-pct", 2) as f64 / 100.0,
            // The last CPU, unless asked not to or there is only one.
            pin: (!args.iter().any(|a| a == "--no-pin") && cpus() > 1).then(|| cpus() - 1),
        };
        eprintln!(
            "throughput: {} s transfers over veth, interleaved rounds, {}",
            settings.secs,
            settings.pin.map_or("transfer threads not pinned".to_string(), |c| format!("transfer threads on CPU {c}"))
        );
        let r = throughput::run(&settings)?;
        row("untraced goodput, Gbit/s", r.untraced_gbps.to_string());
        for (mode, e) in &r.ratios {
            let met = if e.relative() <= settings.target { "" } else { "  (CI wider than the target: round limit)" };
            row(&format!("throughput ratio, {}", mode.label()), format!("{e}{met}"));
        }
        for (mode, e) in &r.efficiency {
            let met = if e.relative() <= settings.target { "" } else { "  (CI wider than the target: round limit)" };
            row(&format!("{} ratio, {}", r.efficiency_basis, mode.label()), format!("{e}{met}"));
        }
        row("cctrace CPU, seconds per second", r.cctrace_cpu.to_string());
        row(
            "cctrace in-kernel time / the transfer's CPU time (one transfer, statistics on)",
            format!("{:.1} %", r.kernel_share * 100.0),
        );
        for (name, runs) in &r.kernel {
            if runs.count > 0 {
                row(
                    &format!("in-kernel ns per run, {name} (beside bpftrace, statistics on)"),
                    format!("{:.0} ({} runs)", runs.ns as f64 / runs.count as f64, runs.count),
                );
            }
        }
        if r.bpftrace_kernel.count > 0 {
            let runs = &r.bpftrace_kernel;
            let per_run = runs.ns as f64 / runs.count as f64;
            let cct = r.kernel.get("cct_probe").filter(|c| c.count > 0).map(|c| c.ns as f64 / c.count as f64);
            row(
                "in-kernel ns per tcp_probe, the bpftrace per-flow script",
                format!(
                    "{per_run:.0} ({} runs){}",
                    runs.count,
                    cct.map_or(String::new(), |c| format!("; cct_probe / bpftrace {:.2}", c / per_run))
                ),
            );
        }
        for s in &r.skipped {
            row("skipped", s.clone());
        }
        row("throughput rounds", r.rounds.to_string());
    }

    if wanted("observer") {
        let (rounds, secs) = (num("--observer-rounds", 6) as usize, num("--observer-secs", 4));
        eprintln!("observer: share of busy CPU, {rounds} interleaved rounds of {secs} s transfers per size");
        for size in observer::run(&[0, 1_000, 10_000], secs, rounds)? {
            let n = size.idle_flows;
            let pct = |e: &ci::Estimate| format!("{:.2} % ± {:.2} (n={})", e.mean * 100.0, e.half_width * 100.0, e.n);
            for (o, e) in &size.share {
                let target = if *o == observer::Observer::Cctrace {
                    if e.mean <= 0.01 {
                        "  (target ≤ 1 %: met)"
                    } else {
                        "  (target ≤ 1 %: missed)"
                    }
                } else {
                    ""
                };
                row(&format!("observer CPU / busy CPU, {n} idle flows, {}", o.label()), format!("{}{target}", pct(e)));
            }
            if let Some(k) = &size.cctrace_kernel_share {
                row(&format!("  of which cctrace's programs in the kernel, {n} idle flows"), pct(k));
            }
            for (o, e) in &size.cctrace_over {
                let below = if e.mean + e.half_width < 1.0 { "below" } else { "NOT clearly below" };
                row(&format!("cctrace / {}, {n} idle flows", o.label()), format!("{e} ({below})"));
            }
        }
    }

    if wanted("startup") {
        for (sockets, namespaces) in
            [(1_000, 1), (num("--startup-sockets", 100_000) as usize, num("--startup-namespaces", 5) as usize)]
        {
            eprintln!("start-up: {sockets} sockets in {namespaces} namespaces");
            let s = startup::run(sockets, namespaces)?;
            let t = |d: Option<Duration>| d.map_or("never".to_string(), |d| format!("{:.2} s", d.as_secs_f64()));
            row(
                &format!("start-up, {} sockets in {} namespaces", s.sockets, s.namespaces),
                format!(
                    "{} listed, {} lost; first sample {}, all {}; RSS {} MB (peak {} MB)",
                    s.listed,
                    s.lost,
                    t(s.first),
                    t(s.all),
                    s.rss >> 20,
                    s.peak_rss >> 20
                ),
            );
        }
    }

    if wanted("churn") {
        let (secs, rate) = (num("--churn-secs", 60), num("--churn-rate", 5_000));
        eprintln!("churn: {rate} connections/s for {secs} s next to a bulk flow");
        let c = churn::run(secs, rate)?;
        row(
            &format!("churn, {} conn/s for {} s next to a bulk flow", c.target_rate, c.secs),
            format!(
                "{:.0} conn/s achieved ({} connect errors); cctrace {:.1} % of a core, peak RSS {} MB; bulk flow reported {} times, longest gap {:.2} s (interval 1 s); {} lost; {} flows seen, {} evicted",
                c.achieved_rate,
                c.connect_errors,
                c.cpu_share * 100.0,
                c.peak_rss >> 20,
                c.bulk_lines,
                c.bulk_max_gap.as_secs_f64(),
                c.lost,
                c.flows_seen,
                c.flows_evicted
            ),
        );
        for (name, runs) in c.kernel.iter().filter(|(_, r)| r.count > 0) {
            row(
                &format!("in-kernel ns per run during churn, {name}"),
                format!("{:.0} ({} runs)", runs.ns as f64 / runs.count as f64, runs.count),
            );
        }
    }
    println!();
    println!("| measure | result |");
    println!("|---|---|");
    for (what, value) in &table {
        println!("| {what} | {value} |");
    }
    println!("(load average at the end: {})", loadavg());
    Ok(())
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "?".into(), |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}
