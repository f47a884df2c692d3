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
//!
//! Each section holds the machine's lab lock while it runs and writes its section of the figures
//! page (`cctrace_lab::figures`) when it is done.

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

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use cctrace_lab::figures::{number, targets, Row, Section};

use crate::ci::Estimate;

/// What the command line asks for.
struct Args(Vec<String>);

impl Args {
    fn arg(&self, name: &str) -> Option<String> {
        self.0.iter().position(|a| a == name).and_then(|i| self.0.get(i + 1)).cloned()
    }

    fn num(&self, name: &str, default: u64) -> u64 {
        self.arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
    }

    /// A comma-separated list after `name`, each item one of `known` (`None` when absent).
    fn list(&self, name: &str, known: &[&str]) -> Result<Option<Vec<String>>> {
        let Some(value) = self.arg(name) else { return Ok(None) };
        let items: Vec<String> = value.split(',').map(|i| i.trim().to_string()).collect();
        if let Some(bad) = items.iter().find(|i| !known.contains(&i.as_str())) {
            bail!("{name} {bad:?}: expected a comma-separated list of {}", known.join(", "));
        }
        Ok(Some(items))
    }

    /// Whether a section measures less than the page's (`--observer-sizes` and the like).
    fn narrowed(&self) -> bool {
        ["--observer-sizes", "--observer-transfers", "--observers"].iter().any(|a| self.has(a))
    }

    fn has(&self, flag: &str) -> bool {
        self.0.iter().any(|a| a == flag)
    }
}

/// The binaries measured: this one, and the one before a change when given.
struct Bins {
    now: PathBuf,
    base: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args(std::env::args().collect());
    if let Some(path) = args.arg("--hold") {
        let n = args.0.last().and_then(|v| v.parse().ok()).unwrap_or(0);
        return startup::hold(&path, n);
    }
    if let Err(e) = cctrace_lab::check_privileges() {
        println!("overhead benchmark skipped: {e}");
        return Ok(());
    }
    let now = cctrace_tests::cctrace_bin();
    if !now.exists() {
        bail!("{} is not built: cargo build --release -p tracer", now.display());
    }
    let only = args.arg("--only");
    let wanted = |section: &str| only.as_deref().is_none_or(|o| o.split(',').any(|s| s == section));
    println!("cctrace overhead benchmark ({}; {} CPUs; load average {})", now.display(), cpus(), loadavg());
    // The binary before a change, measured beside this one where the sections can.
    let base = args.arg("--base").or_else(|| std::env::var("CCTRACE_BASE_BIN").ok()).map(PathBuf::from);
    if let Some(b) = &base {
        if !b.exists() {
            bail!("--base {}: no such binary", b.display());
        }
        println!("before: {}", b.display());
    }
    let bins = Bins { now, base };
    let sections: [(&str, SectionFn); 6] = [
        ("throughput", throughput_section),
        ("selfcost", selfcost_section),
        ("observer", observer_section),
        ("windows", windows_section),
        ("startup", startup_section),
        ("churn", churn_section),
    ];
    let mut printed = Vec::new();
    for (name, measure) in sections {
        if !wanted(name) {
            continue;
        }
        // One lab at a time on this machine: each section holds the lock while it measures.
        let lock = cctrace_lab::serial::serial()?;
        let section = measure(&args, &bins)?;
        drop(lock);
        // A narrowed look measures part of what the page says: printed, not written.
        if !args.narrowed() {
            section.write()?;
        }
        printed.push(section);
    }
    println!();
    println!("| measure | result | target |");
    println!("|---|---|---|");
    for row in printed.iter().flat_map(Section::rows) {
        let target = row.target.map_or(String::new(), |(t, v)| format!("{} ({v:?})", t.text()));
        println!("| {} | {} | {target} |", row.figure, row.value);
    }
    println!("(load average at the end: {})", loadavg());
    Ok(())
}

type SectionFn = fn(&Args, &Bins) -> Result<Section>;

/// Print `row` as it is measured and keep it in `section`.
fn add(section: &mut Section, row: Row) {
    println!("{:<58} {}", row.figure, row.value);
    section.row(row);
}

/// A share as the page writes it: "0.62 % ± 0.10 (n=4)".
fn pct(e: &Estimate) -> String {
    format!("{:.2} % ± {:.2} (n={})", e.mean * 100.0, e.half_width * 100.0, e.n)
}

fn throughput_section(args: &Args, _: &Bins) -> Result<Section> {
    let settings = throughput::Settings {
        secs: args.num("--secs", 4),
        min_rounds: args.num("--min-rounds", 4) as usize,
        max_rounds: args.num("--max-rounds", 20) as usize,
        target: args.num("--target-pct", 2) as f64 / 100.0,
        // The last CPU, unless asked not to or there is only one.
        pin: (!args.has("--no-pin") && cpus() > 1).then(|| cpus() - 1),
    };
    let how = format!(
        "{} s transfers over veth, interleaved rounds, {}",
        settings.secs,
        settings.pin.map_or("transfer threads not pinned".to_string(), |c| format!("transfer threads on CPU {c}"))
    );
    eprintln!("throughput: {how}");
    let mut s = Section::new("throughput", "Throughput of a saturating transfer, traced").about(&format!(
        "`cargo bench -p cctrace-tests --bench overhead -- --only throughput`: a saturating transfer between \
         two namespaces over veth ({how}), untraced, under cctrace's defaults, the bpftrace per-flow script \
         and `ss -tni` every 100 ms; each traced run's goodput over its own round's untraced run, rounds added \
         until each 95 % interval is within ±{} % or the round limit; the kernel's run-time statistics off, as \
         a user's machine runs, but for the last rows (one transfer with cctrace and bpftrace attached together, \
         statistics on).",
        args.num("--target-pct", 2)
    ));
    let r = throughput::run(&settings)?;
    let rounds = format!("{} rounds", r.rounds);
    add(
        &mut s,
        Row::new("untraced goodput", format!("{:.2} Gbit/s ± {:.2}", r.untraced_gbps.mean, r.untraced_gbps.half_width))
            .how(&rounds),
    );
    for (mode, e) in &r.ratios {
        add(&mut s, Row::new(format!("goodput ratio, {}", mode.label()), e.to_string()).how(&rounds));
    }
    for (mode, e) in &r.efficiency {
        add(&mut s, Row::new(format!("{} ratio, {}", r.efficiency_basis, mode.label()), e.to_string()).how(&rounds));
    }
    add(
        &mut s,
        Row::new(
            "cctrace's CPU",
            format!("{:.1} ms/s ± {:.1}", r.cctrace_cpu.mean * 1e3, r.cctrace_cpu.half_width * 1e3),
        )
        .how(&rounds),
    );
    add(
        &mut s,
        Row::new(
            "cctrace's programs' in-kernel time / the transfer's CPU time",
            format!("{:.2} %", r.kernel_share * 100.0),
        )
        .how("one transfer, statistics on"),
    );
    for (name, runs) in r.kernel.iter().filter(|(_, r)| r.count > 0) {
        let per_run = runs.ns as f64 / runs.count as f64;
        let row =
            Row::new(format!("one run of {name}"), format!("{per_run:.0} ns ({} runs)", number(runs.count as f64)))
                .how("beside bpftrace, statistics on");
        add(&mut s, if name == "cct_probe" { row.judged(&targets::PROBE_RUN, per_run) } else { row });
    }
    if r.bpftrace_kernel.count > 0 {
        let runs = &r.bpftrace_kernel;
        let per_run = runs.ns as f64 / runs.count as f64;
        let cct = r.kernel.get("cct_probe").filter(|c| c.count > 0).map(|c| c.ns as f64 / c.count as f64);
        add(
            &mut s,
            Row::new(
                "one run of the bpftrace per-flow script on tcp_probe",
                format!(
                    "{per_run:.0} ns ({} runs){}",
                    number(runs.count as f64),
                    cct.map_or(String::new(), |c| format!("; cct_probe / bpftrace {:.2}", c / per_run))
                ),
            )
            .how("the same transfer, statistics on"),
        );
    }
    for skipped in &r.skipped {
        add(&mut s, Row::new("skipped", skipped.clone()));
    }
    Ok(s)
}

fn selfcost_section(args: &Args, bins: &Bins) -> Result<Section> {
    let rounds = args.num("--selfcost-rounds", 1) as usize;
    let mut list = vec![bins.now.clone()];
    list.extend(bins.base.clone());
    eprintln!("selfcost: the process's CPU a second, each front end, {rounds} round(s)");
    let mut s = Section::new("selfcost", "cctrace's own process").about(&format!(
        "`cargo bench -p cctrace-tests --bench overhead -- --only selfcost`: the sum of the process's threads' \
         time on a CPU (`/proc/PID/task/*/schedstat`), 15 s after 8 s of settling, release binary, {rounds} \
         round(s); at rest, beside one saturating iperf3 flow and beside 100 iperf3 flows of 20 Mbit/s over veth \
         with its offloads on; `--json` into a pipe, the terminal UI in a tmux pane, `serve`.{}",
        if bins.base.is_some() { " \"Before\": the binary given with `--base`, in interleaved runs." } else { "" }
    ));
    let loads = [selfcost::Load::Rest, selfcost::Load::Busy(1), selfcost::Load::Busy(100)];
    let measured = selfcost::run(&list, &loads, rounds, Duration::from_secs(8), Duration::from_secs(15))?;
    for m in &measured {
        let target = match m.load {
            selfcost::Load::Rest => Some(&targets::PROCESS_AT_REST),
            selfcost::Load::Busy(1) => Some(&targets::PROCESS_ONE_FLOW),
            selfcost::Load::Busy(_) => None,
        };
        add(&mut s, selfcost_row(format!("process CPU, {}, {}", m.front.label(), m.load.label()), &m.ms_per_s, target));
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
            add(
                &mut s,
                selfcost_row(
                    format!("process CPU per busy flow beyond the first, {}", front.label()),
                    &per_flow,
                    Some(&targets::PROCESS_PER_FLOW),
                ),
            );
        }
    }
    Ok(s)
}

/// This binary's mean (and range over the rounds) in ms/s, judged against `target`, then the
/// binary before.
fn selfcost_row(figure: String, values: &[Vec<f64>], target: Option<&'static cctrace_lab::figures::Target>) -> Row {
    let summary = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| (l.min(*x), h.max(*x)));
        let range = if v.len() > 1 { format!(" ({lo:.2}-{hi:.2})") } else { String::new() };
        (mean, hi, format!("{mean:.2} ms/s{range}"))
    };
    let Some((_, worst, text)) = values.first().map(|v| summary(v)) else { return Row::new(figure, "not measured") };
    let before = values.get(1).map_or(String::new(), |v| format!("; before: {}", summary(v).2));
    let row = Row::new(figure, format!("{text}{before}"));
    match target {
        Some(t) => row.judged(t, worst),
        None => row,
    }
}

fn observer_section(args: &Args, bins: &Bins) -> Result<Section> {
    let (rounds, secs) = (args.num("--observer-rounds", 4) as usize, args.num("--observer-secs", 4));
    let how = format!("{rounds} interleaved rounds of {secs} s");
    let mut s = Section::new("observer", "The observer's cost").about(&format!(
        "`cargo bench -p cctrace-tests --bench overhead -- --only observer`: each observer's CPU (its processes' \
         user and system time, and its programs' in-kernel time from the kernel's run-time statistics, on for \
         this measurement and for every observer alike) over a saturating veth transfer, as a share of the busy \
         CPU of the experiment: every CPU second of the processes in the bench's own cgroup (the transfer, the \
         observer, the idle connections' holders), of interrupts and softirqs, and of the ksoftirqd threads; on \
         a quiet machine that is the machine's busy CPU, and the machine's other work (another engineer's build) \
         is left out. The observers take turns in interleaved rounds ({how} per size); the transfer starts 5 s \
         after the observer (its start-up listing and first judgments are one-time costs) and the window \
         opens 3 s into the transfer (cctrace adapts to a transfer that starts within a second or two; the \
         measure is what it costs left running beside one): cctrace with \
         its defaults, cctrace without BTF (`--hooks no-btf`), the bpftrace script keeping per-flow maps from every `tcp_probe`, and `ss -tni` every \
         100 ms; with 0, 1,000 and 10,000 idle established connections in the sender's namespace. Transfers: the \
         bench's own sender (small writes: many `tcp_probe` firings) and iperf3 (large TSO segments). Each share \
         is a mean with its 95 % interval (Student's t); the ratios are paired within a round; a claim holds when \
         the interval's upper end does."
    ));
    // Narrowed for a look at one case (`--observer-sizes 0 --observer-transfers iperf3
    // --observers cctrace`): then the page is not written (see `Args::narrowed`).
    let sizes: Vec<usize> = match args.arg("--observer-sizes") {
        Some(v) => v
            .split(',')
            .map(|n| {
                n.trim().parse::<usize>().with_context(|| format!("--observer-sizes {n:?}: not a number of idle flows"))
            })
            .collect::<Result<_>>()?,
        None => vec![0, 1_000, 10_000],
    };
    let all = [observer::Transfer::LabSender, observer::Transfer::Iperf3];
    let transfers = args.list("--observer-transfers", &all.map(observer::Transfer::name))?;
    let observers = args.list("--observers", &observer::Observer::ALL.map(observer::Observer::name))?;
    for what in all {
        if transfers.as_ref().is_some_and(|t| !t.iter().any(|t| t == what.name())) {
            continue;
        }
        let t = what.label();
        eprintln!("observer: share of busy CPU over {t}, {how} per size");
        for size in observer::run(&sizes, what, secs, rounds, bins.base.as_deref(), observers.as_deref())? {
            let n = number(size.idle_flows as f64);
            for (o, e) in &size.share {
                let row = Row::new(format!("{}, {t}, {n} idle flows", o.label()), pct(e)).how(&how);
                // Without BTF (`--hooks no-btf`) cctrace is held to the same target.
                let row = if matches!(o, observer::Observer::Cctrace | observer::Observer::CctraceNoBtf) {
                    row.judged(&targets::OBSERVER_SHARE, (e.mean + e.half_width) * 100.0)
                } else {
                    row
                };
                add(&mut s, row);
                if *o == observer::Observer::Cctrace {
                    if let Some(k) = &size.cctrace_kernel_share {
                        let parts: Vec<String> = size
                            .cctrace_programs
                            .iter()
                            .filter(|(_, e)| e.mean >= 0.000_05)
                            .map(|(name, e)| format!("{name} {:.2}", e.mean * 100.0))
                            .collect();
                        add(
                            &mut s,
                            Row::new(
                                format!("of which cctrace's programs, {t}, {n} idle flows"),
                                format!("{} ({} %)", pct(k), parts.join(", ")),
                            )
                            .how(&how),
                        );
                    }
                }
            }
            for (o, e) in &size.cctrace_over {
                let row = Row::new(format!("cctrace's share / {}'s, {t}, {n} idle flows", o.label()), e.to_string())
                    .how(&how);
                // The binary before a change is no peer: its ratio is printed, not judged.
                let peer = matches!(o, observer::Observer::SsPoll | observer::Observer::Bpftrace);
                add(&mut s, if peer { row.judged(&targets::BELOW_PEERS, e.mean + e.half_width) } else { row });
            }
        }
    }
    Ok(s)
}

fn windows_section(args: &Args, bins: &Bins) -> Result<Section> {
    let secs = args.num("--windows-secs", 6);
    let rounds = args.num("--windows-rounds", 2) as usize;
    let mut s = Section::new("windows", "tcp_probe's windows: the cost model and the interrupts").about(&format!(
        "`cargo bench -p cctrace-tests --bench overhead -- --only windows`. A window cycle: a trivial program \
         attached to `tcp:tcp_probe` and detached again a few hundred times a second in alternate seconds, while \
         a real-time thread spins on another CPU counting its interruptions; the flipping thread's CPU a cycle, \
         the inter-processor interrupts it sent (`ipi:ipi_send_cpu`/`ipi_send_cpumask`) and the spinner's lost \
         time a cycle: what the cost model in `tracer/src/kernel/probe_window.rs` weighs a detach against. Then \
         over each transfer ({rounds} rounds of {secs} s, statistics on): function-call interrupts a second on \
         all CPUs (`/proc/interrupts`, CAL), the IPIs cctrace's threads sent, its process's and its programs' ms \
         a second, untraced, with its defaults and with `--probe-always-attached`."
    ));
    eprintln!("windows: a tracepoint flip's cost to the other CPUs");
    match windows::flip_cost(200, 12) {
        Ok(f) => add(
            &mut s,
            Row::new(
                "a window cycle (a trivial program attached and detached)",
                format!(
                    "the flipping thread {:.0} µs, {:.1} IPIs sent; a busy other CPU {:.1} more interruptions, {:.0} µs",
                    f.own_us, f.ipis, f.interruptions, f.other_cpu_us
                ),
            )
            .how(format!("{:.0} cycles a second", f.cycles_per_s)),
        ),
        Err(e) => add(&mut s, Row::new("a window cycle", format!("not measured: {e:#}"))),
    }
    let mut watchers = vec![
        windows::Watcher::Untraced,
        windows::Watcher::Cctrace { bin: bins.now.clone(), args: vec![], label: "cctrace (defaults)".into() },
        windows::Watcher::Cctrace {
            bin: bins.now.clone(),
            args: vec!["--probe-always-attached"],
            label: "cctrace --probe-always-attached".into(),
        },
    ];
    if let Some(b) = &bins.base {
        watchers.push(windows::Watcher::Cctrace {
            bin: b.clone(),
            args: vec![],
            label: "cctrace before (defaults)".into(),
        });
    }
    eprintln!("windows: function-call interrupts over a transfer, {rounds} rounds of {secs} s");
    for (what, label, watched) in windows::run(&watchers, secs, rounds)? {
        let mean = |f: fn(&windows::Watched) -> f64| watched.iter().map(f).sum::<f64>() / watched.len().max(1) as f64;
        add(
            &mut s,
            Row::new(
                format!("{label}, {}", what.label()),
                format!(
                    "{} function-call interrupts/s on all CPUs, {:.0} IPIs/s sent by the tracer; its process {:.2} ms/s, its programs {:.2} ms/s",
                    number(mean(|w| w.call_interrupts_per_s).round()),
                    mean(|w| w.tracer_ipis_per_s),
                    mean(|w| w.process_ms_per_s),
                    mean(|w| w.kernel_ms_per_s)
                ),
            )
            .how(format!("{rounds} rounds of {secs} s")),
        );
    }
    Ok(s)
}

fn startup_section(args: &Args, bins: &Bins) -> Result<Section> {
    let mut s = Section::new("startup", "Start-up with many sockets").about(
        "`cargo bench -p cctrace-tests --bench overhead -- --only startup`: established loopback connections held \
         by child processes before cctrace starts (`--json`, release binary); time from exec to the first listed \
         sample and to the last, sockets listed and lost, resident memory with every socket a flow.",
    );
    let mut list = vec![("", bins.now.clone())];
    list.extend(bins.base.clone().map(|b| (" (before)", b)));
    for (sockets, namespaces) in
        [(1_000, 1), (args.num("--startup-sockets", 100_000) as usize, args.num("--startup-namespaces", 5) as usize)]
    {
        for (which, b) in &list {
            eprintln!("start-up: {sockets} sockets in {namespaces} namespaces{which}");
            let r = startup::run(b, sockets, namespaces)?;
            let t = |d: Option<Duration>| d.map_or("never".to_string(), |d| format!("{:.2} s", d.as_secs_f64()));
            let figure =
                format!("start-up, {} sockets in {} namespaces{which}", number(r.sockets as f64), r.namespaces);
            let mut row = Row::new(
                figure,
                format!(
                    "{} listed, {} lost; first sample {}, all {}; resident {} MB (peak {} MB)",
                    number(r.listed as f64),
                    r.lost,
                    t(r.first),
                    t(r.all),
                    r.rss >> 20,
                    r.peak_rss >> 20,
                ),
            );
            if which.is_empty() && r.sockets >= 100_000 {
                let all_s =
                    r.all.filter(|_| r.lost == 0 && r.listed >= r.sockets).map_or(f64::INFINITY, |d| d.as_secs_f64());
                add(&mut s, row.clone().judged(&targets::STARTUP_ALL_LISTED, all_s));
                row = Row::new(
                    format!("peak memory, {} sockets", number(r.sockets as f64)),
                    format!("{} MB", r.peak_rss >> 20),
                )
                .judged(&targets::PEAK_MEMORY, (r.peak_rss >> 20) as f64);
            }
            add(&mut s, row);
        }
    }
    Ok(s)
}

fn churn_section(args: &Args, bins: &Bins) -> Result<Section> {
    let (secs, rate) = (args.num("--churn-secs", 60), args.num("--churn-rate", 5_000));
    let mut s = Section::new("churn", "Churn: short connections beside a bulk flow").about(&format!(
        "`cargo bench -p cctrace-tests --bench overhead -- --only churn`: {} loopback connections a second \
         opened and closed for {secs} s beside one bulk flow over veth, under cctrace `--json` reporting every \
         second (release binary): the rate achieved, cctrace's share of a core and peak memory, how often the bulk \
         flow was reported, samples lost, flows seen and evicted, and each program's in-kernel time a run over \
         the churn's hundreds of thousands of runs (statistics on).",
        number(rate as f64)
    ));
    let mut list = vec![("", bins.now.clone())];
    list.extend(bins.base.clone().map(|b| (" (before)", b)));
    for (which, b) in &list {
        eprintln!("churn: {rate} connections/s for {secs} s next to a bulk flow{which}");
        let c = churn::run(b, secs, rate)?;
        let mut row = Row::new(
            format!("churn, {} connections a second for {} s{which}", number(c.target_rate as f64), c.secs),
            format!(
                "{} a second achieved ({} connect errors); cctrace {:.1} % of a core, peak {} MB; the bulk flow reported {} times, longest gap {:.2} s; {} lost; {} flows seen, {} evicted",
                number(c.achieved_rate.round()),
                c.connect_errors,
                c.cpu_share * 100.0,
                c.peak_rss >> 20,
                c.bulk_lines,
                c.bulk_max_gap.as_secs_f64(),
                c.lost,
                number(c.flows_seen as f64),
                number(c.flows_evicted as f64)
            ),
        );
        if which.is_empty() {
            row = row.judged(&targets::CHURN_CORE_SHARE, c.cpu_share * 100.0);
            add(&mut s, row);
            row = Row::new("peak memory, churn", format!("{} MB", c.peak_rss >> 20))
                .judged(&targets::PEAK_MEMORY, (c.peak_rss >> 20) as f64);
        }
        add(&mut s, row);
        for (name, runs) in c.kernel.iter().filter(|(_, r)| r.count > 0) {
            add(
                &mut s,
                Row::new(
                    format!("one run of {name} during churn{which}"),
                    format!(
                        "{} ns ({} runs)",
                        number((runs.ns as f64 / runs.count as f64).round()),
                        number(runs.count as f64)
                    ),
                ),
            );
        }
    }
    Ok(s)
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "?".into(), |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}
