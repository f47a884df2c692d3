//! The command line as clap reads it: every option and subcommand, with the help text each
//! shows. What a subcommand does is in [`crate::app`].

use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Parser, Subcommand};

use super::values::{bounded_f64, duration_secs, otlp_interval, ring_kib};
use crate::kernel::HookMode;

#[derive(Parser, Debug)]
#[command(name = "cctrace", version, long_version = super::docs::long_version(),
          about = "Live TCP congestion-control tracer (eBPF)")]
pub struct Cli {
    /// Print JSON Lines (one object per flow per interval) instead of the terminal UI
    /// (the default when stdout is not a terminal).
    #[arg(long, global = true)]
    pub json: bool,
    /// Report interval in milliseconds (10 to 3600000).
    #[arg(long, global = true, default_value_t = 1000, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub interval: u64,
    /// Kernel sampling interval per flow in milliseconds, 1 to 60000 (retransmissions, CA state
    /// changes, opens and closes are always sampled immediately).
    #[arg(long, global = true, default_value_t = tracer_common::DEFAULT_SAMPLE_INTERVAL_NS / 1_000_000,
          value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub sample_ms: u64,
    /// Stop after this many seconds.
    #[arg(long, global = true, value_name = "S", value_parser = duration_secs)]
    pub duration: Option<Duration>,
    /// With --json, also print every kernel sample as it arrives.
    #[arg(long, global = true, requires = "json")]
    pub events: bool,
    /// Which tracepoint flavour to attach. `auto` runs without BTF (no-btf: classic tracepoints'
    /// own records and sock_diag) where the kernel has none and no BTF file is found.
    #[arg(long, global = true, value_enum, default_value_t = HookMode::Auto)]
    pub hooks: HookMode,
    /// The running kernel's BTF in this file (raw BTF, or a vmlinux image with a .BTF section,
    /// checked against the kernel's build id), for a kernel built without it: the normal
    /// programs then run, reading sockets at its offsets. Without it cctrace looks where
    /// libbpf does (/boot/vmlinux-RELEASE, /usr/lib/debug/boot/vmlinux-RELEASE, ...).
    #[arg(long, global = true, value_name = "FILE")]
    pub btf: Option<std::path::PathBuf>,
    /// Kernel ring-buffer size in KiB (a power of two from 4 to 1048576); samples that do not
    /// fit are counted as lost.
    #[arg(long, global = true, default_value_t = tracer_common::DEFAULT_RING_BYTES / 1024, value_name = "KIB",
          value_parser = ring_kib, hide = true)]
    pub ring_kib: u32,
    /// A flow counts as heavy (flaggable, shown by default) once it moved this many MB...
    #[arg(long, global = true, default_value_t = 0.5, value_name = "MB", value_parser = bounded_f64(0.0, 1e6))]
    pub heavy_mb: f64,
    /// ...and moves at least this many Mbit/s (or keeps its congestion window full).
    #[arg(long, global = true, default_value_t = 1.0, value_name = "MBIT/S", value_parser = bounded_f64(0.0, 1e6))]
    pub heavy_mbps: f64,
    /// Do not track UDP (QUIC, userspace VPNs): no program then sees every socket call of the host
    /// (every packet, before Linux 6.3).
    #[arg(long, global = true)]
    pub no_udp: bool,
    /// Keep `tcp:tcp_probe`'s program attached between sample windows instead of switching it
    /// on and off ten times a second (each switch patches the kernel's code on every CPU).
    #[arg(long, global = true)]
    pub probe_always_attached: bool,
    /// Follow `tcp:tcp_probe`'s windows even where the run rate says they do not pay: for the
    /// live tests of the windows themselves, whose transfer a loaded host slows.
    #[arg(long, global = true, hide = true, conflicts_with = "probe_always_attached")]
    pub probe_windows_always: bool,
    /// Trace only flows whose socket belongs to this cgroup v2 or below it: a path below the
    /// cgroup v2 mount (`/system.slice/nginx.service`) or an absolute one. Repeatable.
    #[arg(long, global = true, value_name = "PATH")]
    pub cgroup: Vec<String>,
    /// Trace only this container's flows: its name, its id or an id prefix (Docker, Podman,
    /// containerd, CRI-O, LXC, Proxmox) or a systemd unit. Repeatable.
    #[arg(long, global = true, value_name = "NAME|ID")]
    pub container: Vec<String>,
    /// Trace only flows in this network namespace: an `ip netns` name, a path such as
    /// /proc/PID/ns/net, or its inode number. Repeatable.
    #[arg(long, global = true, value_name = "NAME|PATH|INODE")]
    pub netns: Vec<String>,
    /// Docker's data root, where `containers/<id>/config.v2.json` names each container
    /// (default: `data-root` from /etc/docker/daemon.json, else /var/lib/docker).
    #[arg(long, global = true, value_name = "DIR", help_heading = "Container names")]
    pub docker_root: Option<std::path::PathBuf>,
    /// A Podman storage root (`overlay-containers/containers.json` names containers); default
    /// /var/lib/containers/storage and each user's rootless store. Repeatable.
    #[arg(long, global = true, value_name = "DIR", help_heading = "Container names")]
    pub podman_store: Vec<std::path::PathBuf>,
    /// Where Proxmox keeps container configs (`<vmid>.conf` with `hostname:`), default /etc/pve/lxc.
    #[arg(long, global = true, value_name = "DIR", help_heading = "Container names")]
    pub pve_lxc_dir: Option<std::path::PathBuf>,
    /// The kubelet's log directory (`pods/` and `containers/` below it name pods and their
    /// containers), default /var/log.
    #[arg(long, global = true, value_name = "DIR", help_heading = "Container names")]
    pub kubelet_logs: Option<std::path::PathBuf>,
    /// Also record the session into this new file (samples, ticks, host facts; zstd-compressed
    /// JSON Lines): `cctrace replay FILE` plays it back. Never overwrites a file.
    #[arg(long, global = true, value_name = "FILE")]
    pub record: Option<std::path::PathBuf>,
    /// In what is recorded (--record, record), exported or reported: replace addresses and
    /// process, container, cgroup and namespace names by pseudonyms, stable within one file.
    #[arg(long, global = true)]
    pub anonymize: bool,
    /// Deep mode: register instrumented twins of CUBIC, Reno and BBR (cct_cubic, cct_reno,
    /// cct_bbr) that run the kernel's own algorithm and report every decision it makes, and move
    /// the flows of the --netns namespaces onto them while tracing (back when cctrace ends).
    #[arg(long)]
    pub deep: bool,
    /// Write log messages to this file (nothing is logged to the terminal while the UI is up).
    #[arg(long, global = true, value_name = "PATH")]
    pub log_file: Option<std::path::PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (and /health) while tracing, beside the
    /// terminal UI or JSON; `cctrace serve` listens on 127.0.0.1:9617 without it.
    #[arg(long, global = true, value_name = "ADDR", help_heading = "Metrics")]
    pub listen: Option<std::net::SocketAddr>,
    /// Push the metrics, and flagged flows and fixes as events, to an OpenTelemetry collector
    /// over OTLP/HTTP (protobuf): its base URL, e.g. http://collector:4318 (/v1/metrics and
    /// /v1/logs are added). `cctrace serve --otlp URL` serves no Prometheus endpoint unless
    /// --listen is given too.
    #[arg(long, global = true, value_name = "URL", help_heading = "Metrics")]
    pub otlp: Option<String>,
    /// Seconds between two metric exports to the collector, 1 to 3600 (events go out as they
    /// happen).
    #[arg(long, global = true, value_name = "S", value_parser = otlp_interval, requires = "otlp",
          default_value = "15", help_heading = "Metrics")]
    pub otlp_interval: Duration,
    /// A header sent with every export (an API key, a tenant): KEY=VALUE. Repeatable. A secret
    /// is better kept out of the command line, in OTEL_EXPORTER_OTLP_HEADERS (key=value,...).
    #[arg(long, global = true, value_name = "KEY=VALUE", requires = "otlp", help_heading = "Metrics")]
    pub otlp_header: Vec<String>,
    /// Trust only the CA certificates in this PEM file for an https:// collector (default:
    /// the system's roots).
    #[arg(long, global = true, value_name = "PEM", requires = "otlp", help_heading = "Metrics")]
    pub otlp_ca_file: Option<std::path::PathBuf>,
    /// Requests the OTLP queue holds while the collector is away (the tests make it small, to
    /// see it fill quickly).
    #[arg(long, global = true, value_name = "N", default_value_t = crate::metrics::otlp::sender::QUEUE_REQUESTS,
          value_parser = clap::value_parser!(u16).range(1..=4096).map(usize::from), requires = "otlp", hide = true)]
    pub otlp_queue: usize,
    /// Allow --listen on an address other than loopback (the metrics name this host's
    /// containers and flows).
    #[arg(long, global = true, help_heading = "Metrics")]
    pub allow_non_loopback: bool,
    /// Flagged flows that get series of their own (the most headroom first); the rest are
    /// counted in cctrace_flagged_flows_folded.
    #[arg(long, global = true, value_name = "N", default_value_t = crate::metrics::model::DEFAULT_TOP_FLAGGED,
          value_parser = clap::value_parser!(u16).range(0..=1000).map(usize::from), help_heading = "Metrics")]
    pub top_flagged: usize,
    /// Container x netns x cc groups with series of their own over the process's life; flows of
    /// further groups are counted under container="_other".
    #[arg(long, global = true, value_name = "N", default_value_t = crate::metrics::model::DEFAULT_MAX_GROUPS,
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|n| n as usize), help_heading = "Metrics")]
    pub max_groups: usize,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Where `cctrace serve` listens unless told otherwise.
pub const DEFAULT_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9617);

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build a local lossy WAN path (network namespaces, 30 ms RTT, random loss, 200 Mbit/s)
    /// with CUBIC and BBR streams and bulk transfers over it, and trace them.
    #[cfg(feature = "demo")]
    Demo {
        #[command(flatten)]
        opts: DemoOptions,
    },
    /// The demo's stand-in for tailscaled in userspace-networking mode (started by
    /// `cctrace demo --scenario userspace-vpn`, named tailscaled).
    #[cfg(feature = "demo")]
    #[command(hide = true)]
    DemoRelay {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Record into FILE without showing anything (no terminal UI, no JSON): until Ctrl-C,
    /// SIGTERM or --duration. One line on stderr says what was recorded.
    Record {
        /// A new file (never overwritten).
        file: std::path::PathBuf,
    },
    /// Serve Prometheus metrics without a terminal (as a service): http://ADDR/metrics in the
    /// text format or OpenMetrics, and /health; --listen ADDR, default 127.0.0.1:9617 (none
    /// with --otlp alone). With --otlp URL, push them and events to an OpenTelemetry collector.
    /// Until SIGTERM, Ctrl-C or --duration.
    Serve,
    /// Play back a recording: the terminal UI, or with --json exactly the lines the live run
    /// printed (the recorded instants, host facts and thresholds).
    Replay { file: std::path::PathBuf },
    /// Export a recording: one row per sample (CSV, JSON Lines), one per flow (--summary), or a
    /// Perfetto trace (ui.perfetto.dev, chrome://tracing). The analysis is re-run over it.
    Export {
        /// The recording.
        file: std::path::PathBuf,
        #[arg(long, value_enum)]
        format: crate::export::Format,
        /// One row per flow over the whole recording instead of one per sample (csv, jsonl).
        #[arg(long)]
        summary: bool,
        /// Output file (created readable by its owner only, never overwritten); `-` or none:
        /// standard output.
        #[arg(short = 'o', long = "output", value_name = "OUT")]
        output: Option<std::path::PathBuf>,
    },
    /// Switch one network namespace (--netns NAME|PATH|INODE or --container NAME) to BBR: its
    /// default for new connections, with --live its running connections too; and raise the
    /// tcp_wmem / tcp_rmem maxima its connections reached (running ones grow into them). Shows
    /// the plan and asks first; --undo restores what it changed.
    Fix {
        /// The congestion control to switch to.
        #[arg(long, default_value = "bbr", value_name = "NAME")]
        cc: String,
        /// Also switch the namespace's established connections that use another algorithm now.
        #[arg(long)]
        live: bool,
        /// Make the default last across reboots where cctrace can (the host: /etc/sysctl.d and
        /// /etc/modules-load.d files, only when absent); elsewhere say how.
        #[arg(long)]
        persist: bool,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
        /// Allow changing the host's own (initial) network namespace (also as the receiving end
        /// whose tcp_rmem the fix raises).
        #[arg(long)]
        host_namespace: bool,
        /// Restore what the last fix of this namespace changed.
        #[arg(long, conflicts_with_all = ["live", "persist"])]
        undo: bool,
    },
    /// Write a self-contained HTML report of a recording: the session, each heavy flow's
    /// verdict, evidence, fix and charts.
    Report {
        /// The recording.
        file: std::path::PathBuf,
        /// The page to write (created readable by its owner only, never overwritten).
        #[arg(short = 'o', long = "output", value_name = "OUT")]
        output: std::path::PathBuf,
    },
    /// Check what works on this host before tracing: the kernel's BTF and where it came from,
    /// each hook and the mode chosen, the BPF ring buffer, cgroup v2, privileges,
    /// perf_event_paranoid, the congestion controls that can be loaded and the root qdiscs. One
    /// line each; nothing is attached. Exit status: 0 everything works, 3 cctrace traces with
    /// less (the mode without BTF, a hook missing, no BBR), 1 it cannot trace here.
    Check,
    /// Print the shell completion script the package installs, for a binary installed by hand:
    /// `cctrace completions bash > /etc/bash_completion.d/cctrace`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page the package installs (roff): `cctrace man | man -l -`.
    Man,
}

/// `cctrace demo`'s path and traffic.
#[cfg(feature = "demo")]
#[derive(Clone, Debug, clap::Args)]
pub struct DemoOptions {
    /// Round-trip time of the emulated path, ms.
    #[arg(long, default_value_t = 30.0, value_parser = bounded_f64(0.1, 2000.0))]
    pub rtt_ms: f64,
    /// Random loss on the data direction, percent.
    #[arg(long, default_value_t = 0.1, value_parser = bounded_f64(0.0, 49.0))]
    pub loss_pct: f64,
    /// Bottleneck rate, Mbit/s.
    #[arg(long, default_value_t = 200.0, value_parser = bounded_f64(1.0, 10_000.0))]
    pub rate_mbps: f64,
    /// Rate of the two video-like streams, Mbit/s.
    #[arg(long, default_value_t = 40.0, value_parser = bounded_f64(0.01, 10_000.0))]
    pub stream_mbps: f64,
    /// `kernel`: CUBIC and BBR senders on the path (the kernel's TCP crosses it).
    /// `userspace-vpn`: Jellyfin streams over loopback to tailscaled in userspace-networking
    /// mode, which carries it over the lossy path as WireGuard in UDP at the rate its own
    /// (loss-based) TCP stack allows: no kernel setting reaches that leg.
    #[arg(long, value_enum, default_value_t = Scenario::Kernel)]
    pub scenario: Scenario,
}

/// What the demo's heavy traffic crosses the lossy path as.
#[cfg(feature = "demo")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Kernel,
    UserspaceVpn,
}
