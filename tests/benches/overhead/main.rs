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
//! `--churn-rate N` (5000 connections/s), `--observer-rounds N` (4), `--observer-secs N` (4),
//! `--selfcost-rounds N` (1), `--base BIN` (the binary before a change, measured beside this
//! one: the process's own cost, the observer, start-up and churn),
//! `--windows-secs N` (6), `--windows-rounds N` (2),
//! `--only SECTION[,SECTION...]` (throughput, selfcost, observer, windows, startup, churn).

mod bpf_stats;
mod churn;
mod ci;
mod iperf;
mod observer;
mod selfcost;
mod startup;
mod throughput;
mod tracer;
mod windows;

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
    let wanted = |section: &str| only.as_deref().is_none_or(|o| o.split(',').any(|s| s == section));
    let mut table: Vec<(String, String)> = Vec::new();
    let mut row = |what: &str, value: String| {
        println!("{what:<58} {value}");
        table.push((what.to_string(), value));
    };
    println!("cctrace overhead benchmark ({}; {} CPUs; load average {})", bin.display(), cpus(), loadavg());
    // The binary before a change, measured beside this one where the sections can.
    let base = arg("--base").or_else(|| std::env::var("CCTRACE_BASE_BIN").ok()).map(std::path::PathBuf::from);
    if let Some(b) = &base {
        if !b.exists() {
            bail!("--base {}: no such binary", b.display());
        }
        println!("before: {}", b.display());
    }

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

    if wanted("selfcost") {
        let rounds = num("--selfcost-rounds", 1) as usize;
        let mut bins = vec![bin.clone()];
        bins.extend(base.clone());
        eprintln!("selfcost: the process's CPU a second, each front end, {rounds} round(s)");
        let loads = [selfcost::Load::Rest, selfcost::Load::Busy(1), selfcost::Load::Busy(100)];
        let measured = selfcost::run(&bins, &loads, rounds, Duration::from_secs(8), Duration::from_secs(15))?;
        for m in &measured {
            let target = match m.load {
                selfcost::Load::Rest => Some(1.0),
                selfcost::Load::Busy(1) => Some(2.0),
                selfcost::Load::Busy(_) => None,
            };
            row(
                &format!("process CPU ms/s, {}, {}", m.front.label(), m.load.label()),
                selfcost_figure(&m.ms_per_s, target),
            );
        }
        // What each busy flow beyond the first adds, from the same runs.
        for front in selfcost::Front::ALL {
            let of = |load| measured.iter().find(|m| m.front == front && m.load == load);
            if let (Some(one), Some(many)) = (of(selfcost::Load::Busy(1)), of(selfcost::Load::Busy(100))) {
                let per_flow: Vec<Vec<f64>> = one
                    .ms_per_s
                    .iter()
                    .zip(&many.ms_per_s)
                    .map(|(a, b)| a.iter().zip(b).map(|(a, b)| (b - a) / 99.0).collect())
                    .collect();
                row(
                    &format!("process CPU ms/s per busy flow beyond the first, {}", front.label()),
                    selfcost_figure(&per_flow, Some(0.2)),
                );
            }
        }
    }

    if wanted("observer") {
        let (rounds, secs) = (num("--observer-rounds", 4) as usize, num("--observer-secs", 4));
        for what in [observer::Transfer::LabSender, observer::Transfer::Iperf3] {
            let t = what.label();
            eprintln!(
                "observer: share of busy CPU over {t}, {rounds} interleaved rounds of {secs} s transfers per size"
            );
            for size in observer::run(&[0, 1_000, 10_000], what, secs, rounds, base.as_deref())? {
                let n = size.idle_flows;
                let pct =
                    |e: &ci::Estimate| format!("{:.2} % ± {:.2} (n={})", e.mean * 100.0, e.half_width * 100.0, e.n);
                for (o, e) in &size.share {
                    let target = if matches!(o, observer::Observer::Cctrace | observer::Observer::CctraceNoBtf) {
                        if e.mean <= 0.01 {
                            "  (target ≤ 1 %: met)"
                        } else {
                            "  (target ≤ 1 %: missed)"
                        }
                    } else {
                        ""
                    };
                    row(
                        &format!("observer CPU / busy CPU, {t}, {n} idle flows, {}", o.label()),
                        format!("{}{target}", pct(e)),
                    );
                }
                if let Some(k) = &size.cctrace_kernel_share {
                    row(&format!("  of which cctrace's programs in the kernel, {t}, {n} idle flows"), pct(k));
                }
                for (o, e) in &size.cctrace_over {
                    let below = if e.mean + e.half_width < 1.0 { "below" } else { "NOT clearly below" };
                    row(&format!("cctrace / {}, {t}, {n} idle flows", o.label()), format!("{e} ({below})"));
                }
            }
        }
    }

    if wanted("windows") {
        eprintln!("windows: a tracepoint flip's cost to the other CPUs");
        match windows::flip_cost(200, 12) {
            Ok(f) => row(
                "tcp_probe attached and detached (a window cycle), trivial program",
                format!(
                    "{:.0} cycles/s: the flipping thread {:.0} us a cycle; a busy other CPU {:.1} more interruptions, {:.0} us a cycle",
                    f.cycles_per_s, f.own_us, f.interruptions, f.other_cpu_us
                ),
            ),
            Err(e) => row("tcp_probe attached and detached (a window cycle)", format!("not measured: {e:#}")),
        }
        let secs = num("--windows-secs", 6);
        let rounds = num("--windows-rounds", 2) as usize;
        let mut watchers = vec![
            windows::Watcher::Untraced,
            windows::Watcher::Cctrace { bin: bin.clone(), args: vec![], label: "cctrace (defaults)".into() },
            windows::Watcher::Cctrace {
                bin: bin.clone(),
                args: vec!["--probe-always-attached"],
                label: "cctrace --probe-always-attached".into(),
            },
        ];
        if let Some(b) = &base {
            watchers.push(windows::Watcher::Cctrace {
                bin: b.clone(),
                args: vec![],
                label: "cctrace before (defaults)".into(),
            });
        }
        eprintln!("windows: function-call interrupts over a transfer, {rounds} rounds of {secs} s");
        for (what, label, watched) in windows::run(&watchers, secs, rounds)? {
            let mean =
                |f: fn(&windows::Watched) -> f64| watched.iter().map(f).sum::<f64>() / watched.len().max(1) as f64;
            row(
                &format!("function-call interrupts/s, {}, {label}", what.label()),
                format!(
                    "{:.0} on all CPUs; {:.0} sent by the tracer; its process {:.2} ms/s, its programs {:.2} ms/s (statistics on)",
                    mean(|w| w.call_interrupts_per_s),
                    mean(|w| w.tracer_ipis_per_s),
                    mean(|w| w.process_ms_per_s),
                    mean(|w| w.kernel_ms_per_s)
                ),
            );
        }
    }

    // This binary, then the one before when given.
    let mut bins = vec![("", bin.clone())];
    bins.extend(base.clone().map(|b| (" (before)", b)));

    if wanted("startup") {
        for (sockets, namespaces) in
            [(1_000, 1), (num("--startup-sockets", 100_000) as usize, num("--startup-namespaces", 5) as usize)]
        {
            for (which, b) in &bins {
                eprintln!("start-up: {sockets} sockets in {namespaces} namespaces{which}");
                let s = startup::run(b, sockets, namespaces)?;
                let t = |d: Option<Duration>| d.map_or("never".to_string(), |d| format!("{:.2} s", d.as_secs_f64()));
                row(
                    &format!("start-up, {} sockets in {} namespaces{which}", s.sockets, s.namespaces),
                    format!(
                        "{} listed, {} lost; first sample {}, all {}; RSS {} MB (peak {} MB{})",
                        s.listed,
                        s.lost,
                        t(s.first),
                        t(s.all),
                        s.rss >> 20,
                        s.peak_rss >> 20,
                        if which.is_empty() && s.sockets >= 100_000 {
                            if s.peak_rss <= 150 << 20 {
                                "; target ≤ 150 MB: met"
                            } else {
                                "; target ≤ 150 MB: missed"
                            }
                        } else {
                            ""
                        }
                    ),
                );
            }
        }
    }

    if wanted("churn") {
        let (secs, rate) = (num("--churn-secs", 60), num("--churn-rate", 5_000));
        for (which, b) in &bins {
            eprintln!("churn: {rate} connections/s for {secs} s next to a bulk flow{which}");
            let c = churn::run(b, secs, rate)?;
            row(
                &format!("churn, {} conn/s for {} s next to a bulk flow{which}", c.target_rate, c.secs),
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
                    &format!("in-kernel ns per run during churn{which}, {name}"),
                    format!("{:.0} ({} runs)", runs.ns as f64 / runs.count as f64, runs.count),
                );
            }
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

/// This binary's mean (and range over the rounds) against a target, then the binary before.
fn selfcost_figure(values: &[Vec<f64>], target: Option<f64>) -> String {
    let summary = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| (l.min(*x), h.max(*x)));
        let range = if v.len() > 1 { format!(" ({lo:.2}-{hi:.2})") } else { String::new() };
        (mean, format!("{mean:.2}{range}"))
    };
    let Some((now, text)) = values.first().map(|v| summary(v)) else { return "not measured".into() };
    let met =
        target.map_or(String::new(), |t| format!("  (target ≤ {t}: {})", if now <= t { "met" } else { "missed" }));
    let before = values.get(1).map_or(String::new(), |v| format!("; before: {}", summary(v).1));
    format!("{text}{before}{met}")
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "?".into(), |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}
