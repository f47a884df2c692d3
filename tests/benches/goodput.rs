//! CUBIC vs BBR goodput on emulated WAN paths, no tracer: the truth the diagnosis is
//! calibrated against. A benchmark, not a test: it prints numbers.
//!
//! Paths, all 30 ms RTT with a 200 Mbit/s bottleneck (queue BDP/4):
//! - `clean`: nothing else (the reference for what each algorithm gets from the bottleneck);
//! - `random`: 0.1 % random loss (the story's path, and `cctrace demo`'s), with the Mathis
//!   prediction for the loss the flows actually saw;
//! - `policer-tight`: a 20 Mbit/s token-bucket policer with a 10 ms bucket (25 kB;
//!   `--tight-bucket BYTES` for another);
//! - `policer-deep`: the same policer with a 1.5 s bucket (3.75 MB, a common router default);
//! - `jitter`: 0-3 ms of uniform per-packet jitter (reordering), no random loss;
//! - `jitter-short`: 0-8 ms of jitter on a 10 ms, 100 Mbit/s path (1 MB queue): reordering the
//!   kernel's RACK (which waits a quarter of min_rtt) takes for loss until DSACK tells it;
//! - `ack-loss`: 2 % loss on the ACK direction only;
//! - `wireguard`: through a wireguard-go tunnel on both ends of a 30 ms, 40 Mbit/s path with
//!   2 % loss on its UDP underlay (`cctrace_tests::tunnel_wan`, tests/tunnel.rs's path): the
//!   truth the live fix through a tunnel is held to, with the CPU wireguard-go took at each end.
//! - `long-fat`: 200 ms RTT, 200 Mbit/s (queue BDP/4), the receiver's buffers raised (the lab's
//!   32 MiB `tcp_rmem` max): CUBIC and BBR with the kernel's default send buffer (`tcp_wmem` max
//!   4 MiB) and with a raised one (64 MiB), without loss and with `--long-loss-pct` (0.05) random
//!   loss: the truth behind the `sndbuf` verdict and the buffer fix.
//!
//! Each flow sets its algorithm per socket (TCP_CONGESTION), runs on a fresh path, and is
//! reported with the kernel's own view of the sender at close (TCP_INFO, the counters
//! `ss -tni` prints) and the emulator's drop and reordering counters.
//!
//! `cargo xtask bench` (or `cargo bench -p cctrace-tests --bench goodput -- [--secs N]
//! [--loss-pct P] [--long-loss-pct P] [--tight-bucket BYTES] [--only NAME]`). A whole run writes
//! the figures page's goodput section; a run of one path (`--only`) only prints. Each flow holds
//! the machine's lab lock while it runs.

use std::time::Duration;

use anyhow::{Context, Result};
use cctrace_lab::figures::{Row, Section};
use cctrace_lab::{DirectionStats, EmulatedPath, EmulatedPathSpec, PathSpec, Policer, SenderReport};
use cctrace_tests::{bulk_transfer, tunnel_wan, TUNNEL_WAN_LOSS, TUNNEL_WAN_RATE_BPS};

const RTT_MS: f64 = 30.0;
const LINE_BPS: u64 = 200_000_000;
const POLICED_BPS: u64 = 20_000_000;
const MSS: f64 = 1448.0;

struct Scenario {
    name: &'static str,
    what: String,
    spec: EmulatedPathSpec,
    /// The policer's rate, where the path has one: what a flow can get at most.
    policed_bps: Option<u64>,
}

struct Run {
    cc: &'static str,
    report: SenderReport,
    forward: DirectionStats,
    reverse: DirectionStats,
}

fn one_way() -> Duration {
    Duration::from_secs_f64(RTT_MS / 2000.0)
}

/// The 30 ms, 200 Mbit/s path with `forward` impairments added to its bottleneck.
fn path(forward: PathSpec, reverse: PathSpec) -> EmulatedPathSpec {
    let queue = (LINE_BPS as f64 / 8.0 * RTT_MS / 1000.0 / 4.0) as usize;
    let mut spec = EmulatedPathSpec::new(forward.with_rate(LINE_BPS, queue));
    spec.reverse = reverse;
    spec
}

fn scenarios(loss: f64, tight_bucket: Option<u64>) -> Vec<Scenario> {
    let d = one_way();
    let tight = match tight_bucket {
        Some(bytes) => Policer::new(POLICED_BPS, bytes),
        None => Policer::with_depth(POLICED_BPS, Duration::from_millis(10)),
    };
    let deep = Policer::with_depth(POLICED_BPS, Duration::from_millis(1500));
    let jitter = Duration::from_millis(3);
    vec![
        Scenario {
            name: "clean",
            what: "no loss, no policer, no jitter".into(),
            spec: path(PathSpec::delay(d), PathSpec::delay(d)),
            policed_bps: None,
        },
        Scenario {
            name: "random",
            what: format!("{}% random loss", loss * 100.0),
            spec: path(PathSpec::delay(d).with_loss(loss), PathSpec::delay(d)),
            policed_bps: None,
        },
        Scenario {
            name: "policer-tight",
            what: format!(
                "policer {} Mbit/s, bucket {} B ({:.1} ms at the rate)",
                POLICED_BPS / 1_000_000,
                tight.burst_bytes,
                tight.burst_bytes as f64 * 8e3 / POLICED_BPS as f64
            ),
            spec: path(PathSpec::delay(d).with_policer(tight), PathSpec::delay(d)),
            policed_bps: Some(POLICED_BPS),
        },
        Scenario {
            name: "policer-deep",
            what: format!("policer {} Mbit/s, bucket {} B (1.5 s)", POLICED_BPS / 1_000_000, deep.burst_bytes),
            spec: path(PathSpec::delay(d).with_policer(deep), PathSpec::delay(d)),
            policed_bps: Some(POLICED_BPS),
        },
        Scenario {
            name: "jitter",
            what: format!("per-packet jitter uniform in [0, {jitter:?}], no random loss"),
            spec: path(PathSpec::delay(d).with_jitter(jitter), PathSpec::delay(d)),
            policed_bps: None,
        },
        Scenario {
            name: "jitter-short",
            what: "10 ms RTT, per-packet jitter uniform in [0, 8 ms], 100 Mbit/s (1 MB queue), no loss: \
                   jitter above a quarter of min_rtt, where the kernel's RACK retransmits what was only late \
                   (tests/loss_kinds.rs's path)"
                .into(),
            spec: EmulatedPathSpec::new(
                PathSpec::delay(Duration::from_millis(5))
                    .with_jitter(Duration::from_millis(8))
                    .with_rate(100_000_000, 1_000_000),
            ),
            policed_bps: None,
        },
        Scenario {
            name: "ack-loss",
            what: "2% loss on the ACK direction only".into(),
            spec: path(PathSpec::delay(d), PathSpec::delay(d).with_loss(0.02)),
            policed_bps: None,
        },
    ]
}

fn bulk(spec: &EmulatedPathSpec, cc: &'static str, secs: u64) -> Result<Run> {
    bulk_with_wmem(spec, cc, secs, None)
}

/// [`bulk`] with the sender's namespace's `net.ipv4.tcp_wmem` set to `wmem` first.
fn bulk_with_wmem(spec: &EmulatedPathSpec, cc: &'static str, secs: u64, wmem: Option<&str>) -> Result<Run> {
    let _lock = cctrace_lab::serial::serial()?;
    let path = EmulatedPath::create(spec.clone()).context("building the emulated path")?;
    if let Some(wmem) = wmem {
        path.sender().sysctl_set("net.ipv4.tcp_wmem", wmem)?;
    }
    let report = bulk_transfer(path.sender(), path.receiver(), path.receiver_addr(), cc, Duration::from_secs(secs))?;
    let stats = path.stats();
    Ok(Run { cc, report, forward: stats.forward, reverse: stats.reverse })
}

/// A process's CPU time so far (user and system), seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    ticks as f64 / rustix::param::clock_ticks_per_second() as f64
}

/// CUBIC and BBR through a fresh wireguard-go tunnel each, no tracer: goodput, and the share of
/// a core wireguard-go took at each end.
fn wireguard(secs: u64, section: &mut Section) -> Result<()> {
    println!(
        "wireguard: through wireguard-go on both ends, {}% loss on the underlay, {} Mbit/s bottleneck",
        TUNNEL_WAN_LOSS * 100.0,
        TUNNEL_WAN_RATE_BPS / 1e6
    );
    let mut goodput = Vec::new();
    let mut cpu_use = Vec::new();
    for cc in ["cubic", "bbr"] {
        let _lock = cctrace_lab::serial::serial()?;
        let lab = tunnel_wan(TUNNEL_WAN_LOSS, Vec::new()).context("building the tunnel")?;
        let cpu = [lab.server_pid(), lab.client_pid()].map(cpu_secs);
        let report = bulk_transfer(lab.server(), lab.client(), lab.client_inner_addr(), cc, Duration::from_secs(secs))?;
        let used = [lab.server_pid(), lab.client_pid()].map(cpu_secs);
        let share = |i: usize| 100.0 * (used[i] - cpu[i]) / report.elapsed.as_secs_f64();
        println!(
            "  {cc:>5}: goodput {:>6.1} Mbit/s; retrans {} ({:.3}% of segments); wireguard-go took {:.0}% of a core \
             sending, {:.0}% receiving",
            report.goodput_bps / 1e6,
            report.total_retrans,
            retrans_share(&report) * 100.0,
            share(0),
            share(1)
        );
        goodput.push(report.goodput_bps);
        cpu_use.push(format!("{:.0} % and {:.0} %", share(0), share(1)));
    }
    println!("  ratio bbr/cubic: {:.2}x", goodput[1] / goodput[0].max(1.0));
    section.row(
        Row::new(
            "through wireguard-go: CUBIC, BBR",
            format!(
                "{:.1}, {:.1} Mbit/s ({:.1}x); wireguard-go took {} of a core sending and receiving under CUBIC, {} under BBR",
                goodput[0] / 1e6,
                goodput[1] / 1e6,
                goodput[1] / goodput[0].max(1.0),
                cpu_use[0],
                cpu_use[1]
            ),
        )
        .how(format!(
            "30 ms, {} Mbit/s, {} % loss on the underlay; {secs} s a flow",
            TUNNEL_WAN_RATE_BPS / 1e6,
            TUNNEL_WAN_LOSS * 100.0
        )),
    );
    Ok(())
}

fn mathis_bps(p: f64) -> f64 {
    MSS * 8.0 / (RTT_MS / 1000.0) * 1.22 / p.sqrt()
}

fn print_run(r: &Run, policed_bps: Option<u64>, line_bps: u64) {
    let k = &r.report;
    let mbps = k.goodput_bps / 1e6;
    let versus = match policed_bps {
        Some(p) => format!("{:>4.0}% of the policed rate", 100.0 * k.goodput_bps / p as f64),
        None => format!("{:>4.0}% of the line rate", 100.0 * k.goodput_bps / line_bps as f64),
    };
    println!(
        "  {:>5}: goodput {mbps:>6.1} Mbit/s ({versus}); kernel at close: retrans {} ({:.3}% of segments), \
         dsack_dups {}, reord_seen {}, reordering {}, total_rto {}; emulator: policer drops {}, queue drops {}, \
         random drops {}, reordered {}, ACK drops {}",
        r.cc,
        k.total_retrans,
        retrans_share(k) * 100.0,
        k.dsack_dups,
        k.reord_seen,
        k.reordering,
        k.total_rto,
        r.forward.dropped_policer,
        r.forward.dropped_queue,
        r.forward.dropped_loss,
        r.forward.reordered,
        r.reverse.dropped_loss,
    );
}

fn retrans_share(k: &SenderReport) -> f64 {
    let segs = k.bytes_acked as f64 / MSS;
    if segs > 0.0 {
        f64::from(k.total_retrans) / segs
    } else {
        0.0
    }
}

/// The long fat path: 200 ms RTT, 200 Mbit/s, a quarter-BDP queue.
const LONG_RTT_MS: f64 = 200.0;
/// The kernel's default `tcp_wmem` (a new namespace copies the host's; the lab raises it).
const DEFAULT_WMEM: &str = "4096 16384 4194304";
/// A raised maximum, as the second user of the README raised theirs.
const RAISED_WMEM: &str = "4096 16384 67108864";

/// The truth table of the long fat path: each algorithm with the default and a raised send
/// buffer, without loss and with `loss`.
fn long_fat(secs: u64, loss: f64, section: &mut Section) -> Result<()> {
    let one_way = Duration::from_secs_f64(LONG_RTT_MS / 2000.0);
    let queue = (LINE_BPS as f64 / 8.0 * LONG_RTT_MS / 1000.0 / 4.0) as usize;
    println!(
        "long-fat: {LONG_RTT_MS} ms RTT, {} Mbit/s (queue BDP/4), receiver tcp_rmem max 32 MiB; sender tcp_wmem \
         {DEFAULT_WMEM:?} (the kernel's default) or {RAISED_WMEM:?}",
        LINE_BPS / 1_000_000
    );
    for loss in [0.0, loss] {
        let forward = PathSpec::delay(one_way).with_rate(LINE_BPS, queue);
        let forward = if loss > 0.0 { forward.with_loss(loss) } else { forward };
        let mut spec = EmulatedPathSpec::new(forward);
        spec.reverse = PathSpec::delay(one_way);
        println!("  {}% random loss:", loss * 100.0);
        let mut got = Vec::new();
        for (cc, wmem, label) in [
            ("cubic", DEFAULT_WMEM, "default"),
            ("bbr", DEFAULT_WMEM, "default"),
            ("bbr", RAISED_WMEM, "raised"),
            ("cubic", RAISED_WMEM, "raised"),
        ] {
            let r = bulk_with_wmem(&spec, cc, secs, Some(wmem))?;
            println!(
                "    {cc:>5}, {label:>7} tcp_wmem: goodput {:>6.1} Mbit/s; retrans {} ({:.3}% of segments), \
                 emulator random drops {}, queue drops {}",
                r.report.goodput_bps / 1e6,
                r.report.total_retrans,
                retrans_share(&r.report) * 100.0,
                r.forward.dropped_loss,
                r.forward.dropped_queue
            );
            got.push(r.report.goodput_bps);
        }
        println!(
            "    bbr raised / bbr default {:.2}x; bbr raised / cubic default {:.2}x; bbr default / cubic default {:.2}x",
            got[2] / got[1].max(1.0),
            got[2] / got[0].max(1.0),
            got[1] / got[0].max(1.0)
        );
        let m = |i: usize| format!("{:.1}", got[i] / 1e6);
        section.row(
            Row::new(
                format!("the long fat path, {} % loss: CUBIC, BBR with 4 MiB; BBR, CUBIC with 64 MiB", loss * 100.0),
                format!(
                    "{}, {}; {}, {} Mbit/s (BBR 64 / 4 MiB {:.2}x)",
                    m(0),
                    m(1),
                    m(2),
                    m(3),
                    got[2] / got[1].max(1.0)
                ),
            )
            .how(format!("{LONG_RTT_MS} ms, 200 Mbit/s; the sender's tcp_wmem max 4 or 64 MiB; {secs} s a flow")),
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    // `cargo bench` passes --bench; accept and ignore unknown flags.
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let secs = arg("--secs").and_then(|v| v.parse().ok()).unwrap_or(20u64);
    let loss = arg("--loss-pct").and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.1) / 100.0;
    let only = arg("--only").cloned();
    let long_loss = arg("--long-loss-pct").and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.05) / 100.0;
    let tight_bucket = match arg("--tight-bucket") {
        Some(v) => Some(v.parse::<u64>().with_context(|| format!("--tight-bucket {v:?}: expected bytes"))?),
        None => None,
    };
    if let Err(e) = cctrace_lab::check_privileges() {
        println!("goodput benchmark skipped: {e}");
        return Ok(());
    }
    let all = scenarios(loss, tight_bucket);
    let mut section = Section::new("goodput", "Goodput: CUBIC and BBR on the emulated paths").about(&format!(
        "`cargo bench -p cctrace-tests --bench goodput`: the truth the diagnosis is calibrated against, no \
         tracer. Bulk flows of {secs} s, each algorithm set per socket on a fresh emulated path (a userspace \
         forwarder over TUN: 30 ms RTT, 200 Mbit/s, a quarter-BDP queue, and the impairment the row names), \
         reported with the kernel's own view of the sender at close."
    ));
    if only.as_deref() == Some("long-fat") {
        return long_fat(secs, long_loss, &mut section);
    }
    if let Some(name) = &only {
        if name != "wireguard" && !all.iter().any(|s| s.name == name.as_str()) {
            let names: Vec<&str> = all.iter().map(|s| s.name).chain(["wireguard", "long-fat"]).collect();
            anyhow::bail!("unknown path {name:?}; one of {names:?}");
        }
    }
    println!(
        "CUBIC vs BBR, no tracer: {RTT_MS} ms RTT, {} Mbit/s bottleneck (queue BDP/4); {secs} s bulk per \
         algorithm on a fresh path",
        LINE_BPS / 1_000_000
    );
    for s in all.iter().filter(|s| only.as_deref().is_none_or(|o| o == s.name)) {
        println!("{}: {}", s.name, s.what);
        let cubic = bulk(&s.spec, "cubic", secs)?;
        let bbr = bulk(&s.spec, "bbr", secs)?;
        for r in [&cubic, &bbr] {
            print_run(r, s.policed_bps, s.spec.forward.rate_bps.unwrap_or(LINE_BPS));
        }
        let ratio = bbr.report.goodput_bps / cubic.report.goodput_bps.max(1.0);
        println!("  ratio bbr/cubic: {ratio:.2}x");
        section.row(
            Row::new(
                format!("{}: CUBIC, BBR", s.name),
                format!(
                    "{:.1}, {:.1} Mbit/s ({ratio:.1}x)",
                    cubic.report.goodput_bps / 1e6,
                    bbr.report.goodput_bps / 1e6
                ),
            )
            .how(&s.what),
        );
        if let (Some(rate), Some(p)) = (s.policed_bps, s.spec.forward.policer) {
            // The policer counts whole packets and starts with a full bucket: what a flow can
            // get over the run, to read the goodputs (and cctrace's policed rate) against.
            let payload = rate as f64 * MSS / 1500.0;
            let burst = p.burst_bytes as f64 * 8.0 * MSS / 1500.0 / secs as f64;
            println!(
                "  the policed rate carries {:.1} Mbit/s of goodput (1448 of each 1500 bytes); its full bucket \
                 at the start adds {:.1} Mbit/s over {secs} s",
                payload / 1e6,
                burst / 1e6
            );
        }
        if s.name == "random" {
            for r in [&cubic, &bbr] {
                let p = retrans_share(&r.report);
                let bound = if p > 0.0 { mathis_bps(p) / 1e6 } else { f64::INFINITY };
                println!("  {:>5}: Mathis bound at the loss it saw {bound:.1} Mbit/s", r.cc);
            }
            println!("  Mathis bound at the configured {}% loss: {:.1} Mbit/s", loss * 100.0, mathis_bps(loss) / 1e6);
            section.row(
                Row::new(
                    format!("the Mathis bound at {} % loss", loss * 100.0),
                    format!("{:.1} Mbit/s", mathis_bps(loss) / 1e6),
                )
                .how("1448-byte segments, 30 ms"),
            );
        }
    }
    if only.as_deref().is_none_or(|o| o == "wireguard") {
        wireguard(secs, &mut section)?;
    }
    if only.is_some() {
        println!("figures: one path of the goodput section measured (--only): the page is not written");
        return Ok(());
    }
    long_fat(secs, long_loss, &mut section)?;
    section.write().map(drop)
}
