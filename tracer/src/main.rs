//! `cctrace`: see every TCP flow's congestion control live, across all network namespaces.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::builder::TypedValueParser as _;
use clap::{CommandFactory as _, Parser, Subcommand};
use tracer::analysis::diagnosis::DiagnosisConfig;
use tracer::analysis::filter::{resolve, FilterSpec, ResolvedFilter};
use tracer::analysis::model::TableConfig;
use tracer::analysis::schema::SummaryRecord;
use tracer::analysis::Analysis;
use tracer::cgroups::{cgroup2_mount, CgroupResolver, ContainerFiles};
use tracer::cli::{bounded_f64, duration_secs, ring_kib};
use tracer::kernel::{HookMode, HookStatus, KernelOptions, KernelSource};
use tracer::live_filter::{FilterUpkeep, HostPaths, LiveFilter};
use tracer::metrics::Exporting;
use tracer::output::json::JsonOutput;
use tracer::output::writer::LineWriter;
use tracer::pipeline::{self, PipelineOptions};
use tracer::recording::entry::{Entry, Header, FORMAT, FORMAT_VERSION};
use tracer::recording::player::PacedRecording;
use tracer::recording::{Headless, NewFile, RecordWriter, Recorder, Recording, RecordingSource, RecordingStatus};
use tracer::side_job::Beside;
use tracer::signals::Shutdown;
use tracer::source::EventSource;

mod cli_docs;

#[derive(Parser, Debug)]
#[command(name = "cctrace", version, long_version = cli_docs::long_version(),
          about = "Live TCP congestion-control tracer (eBPF)")]
struct Cli {
    /// Print JSON Lines (one object per flow per interval) instead of the terminal UI
    /// (the default when stdout is not a terminal).
    #[arg(long, global = true)]
    json: bool,
    /// Report interval in milliseconds (10 to 3600000).
    #[arg(long, global = true, default_value_t = 1000, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    interval: u64,
    /// Kernel sampling interval per flow in milliseconds, 1 to 60000 (retransmissions, CA state
    /// changes, opens and closes are always sampled immediately).
    #[arg(long, global = true, default_value_t = tracer_common::DEFAULT_SAMPLE_INTERVAL_NS / 1_000_000,
          value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    sample_ms: u64,
    /// Stop after this many seconds.
    #[arg(long, global = true, value_name = "S", value_parser = duration_secs)]
    duration: Option<Duration>,
    /// With --json, also print every kernel sample as it arrives.
    #[arg(long, global = true, requires = "json")]
    events: bool,
    /// Which tracepoint flavour to attach.
    #[arg(long, global = true, value_enum, default_value_t = HookMode::Auto)]
    hooks: HookMode,
    /// Kernel ring-buffer size in KiB (a power of two from 4 to 1048576); samples that do not
    /// fit are counted as lost.
    #[arg(long, global = true, default_value_t = tracer_common::DEFAULT_RING_BYTES / 1024, value_name = "KIB",
          value_parser = ring_kib, hide = true)]
    ring_kib: u32,
    /// A flow counts as heavy (flaggable, shown by default) once it moved this many MB...
    #[arg(long, global = true, default_value_t = 0.5, value_name = "MB", value_parser = bounded_f64(0.0, 1e6))]
    heavy_mb: f64,
    /// ...and moves at least this many Mbit/s (or keeps its congestion window full).
    #[arg(long, global = true, default_value_t = 1.0, value_name = "MBIT/S", value_parser = bounded_f64(0.0, 1e6))]
    heavy_mbps: f64,
    /// Do not track UDP (QUIC, userspace VPNs): no program then sees every packet of the host.
    #[arg(long, global = true)]
    no_udp: bool,
    /// Trace only flows whose socket belongs to this cgroup v2 or below it: a path below the
    /// cgroup v2 mount (`/system.slice/nginx.service`) or an absolute one. Repeatable.
    #[arg(long, global = true, value_name = "PATH")]
    cgroup: Vec<String>,
    /// Trace only this container's flows: its name, its id or an id prefix (Docker, Podman,
    /// containerd, CRI-O, LXC, Proxmox) or a systemd unit. Repeatable.
    #[arg(long, global = true, value_name = "NAME|ID")]
    container: Vec<String>,
    /// Trace only flows in this network namespace: an `ip netns` name, a path such as
    /// /proc/PID/ns/net, or its inode number. Repeatable.
    #[arg(long, global = true, value_name = "NAME|PATH|INODE")]
    netns: Vec<String>,
    /// Docker's data root, where `containers/<id>/config.v2.json` names each container
    /// (default: `data-root` from /etc/docker/daemon.json, else /var/lib/docker).
    #[arg(long, global = true, value_name = "DIR", help_heading = "Container names")]
    docker_root: Option<std::path::PathBuf>,
    /// A Podman storage root (`overlay-containers/containers.json` names containers); default
    /// /var/lib/containers/storage and each user's rootless store. Repeatable.
    #[arg(long, global = true, value_name = "DIR", help_heading = "Container names")]
    podman_store: Vec<std::path::PathBuf>,
    /// Where Proxmox keeps container configs (`<vmid>.conf` with `hostname:`), default /etc/pve/lxc.
    #[arg(long, global = true, value_name = "DIR", help_heading = "Container names")]
    pve_lxc_dir: Option<std::path::PathBuf>,
    /// The kubelet's log directory (`pods/` and `containers/` below it name pods and their
    /// containers), default /var/log.
    #[arg(long, global = true, value_name = "DIR", help_heading = "Container names")]
    kubelet_logs: Option<std::path::PathBuf>,
    /// Also record the session into this new file (samples, ticks, host facts; zstd-compressed
    /// JSON Lines): `cctrace replay FILE` plays it back. Never overwrites a file.
    #[arg(long, global = true, value_name = "FILE")]
    record: Option<std::path::PathBuf>,
    /// In what is recorded (--record, record), exported or reported: replace addresses and
    /// process, container, cgroup and namespace names by pseudonyms, stable within one file.
    #[arg(long, global = true)]
    anonymize: bool,
    /// Deep mode: register instrumented twins of CUBIC, Reno and BBR (cct_cubic, cct_reno,
    /// cct_bbr) that run the kernel's own algorithm and report every decision it makes, and move
    /// the flows of the --netns namespaces onto them while tracing (back when cctrace ends).
    #[arg(long)]
    deep: bool,
    /// Write log messages to this file (nothing is logged to the terminal while the UI is up).
    #[arg(long, global = true, value_name = "PATH")]
    log_file: Option<std::path::PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (and /health) while tracing, beside the
    /// terminal UI or JSON; `cctrace serve` listens on 127.0.0.1:9617 without it.
    #[arg(long, global = true, value_name = "ADDR", help_heading = "Metrics")]
    listen: Option<std::net::SocketAddr>,
    /// Allow --listen on an address other than loopback (the metrics name this host's
    /// containers and flows).
    #[arg(long, global = true, help_heading = "Metrics")]
    allow_non_loopback: bool,
    /// Flagged flows that get series of their own (the most headroom first); the rest are
    /// counted in cctrace_flagged_flows_folded.
    #[arg(long, global = true, value_name = "N", default_value_t = tracer::metrics::model::DEFAULT_TOP_FLAGGED,
          value_parser = clap::value_parser!(u16).range(0..=1000).map(usize::from), help_heading = "Metrics")]
    top_flagged: usize,
    /// Container x netns x cc groups with series of their own over the process's life; flows of
    /// further groups are counted under container="_other".
    #[arg(long, global = true, value_name = "N", default_value_t = tracer::metrics::model::DEFAULT_MAX_GROUPS,
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|n| n as usize), help_heading = "Metrics")]
    max_groups: usize,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Where `cctrace serve` listens unless told otherwise.
const DEFAULT_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9617);

#[derive(Subcommand, Debug)]
enum Command {
    /// Build a local lossy WAN path (network namespaces, 30 ms RTT, random loss, 200 Mbit/s)
    /// with CUBIC and BBR streams and bulk transfers over it, and trace them.
    #[cfg(feature = "demo")]
    Demo {
        #[command(flatten)]
        opts: tracer::demo::DemoOptions,
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
    /// text format or OpenMetrics, and /health; --listen ADDR, default 127.0.0.1:9617. Until
    /// SIGTERM, Ctrl-C or --duration.
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
        format: tracer::export::Format,
        /// One row per flow over the whole recording instead of one per sample (csv, jsonl).
        #[arg(long)]
        summary: bool,
        /// Output file (created readable by its owner only, never overwritten); `-` or none:
        /// standard output.
        #[arg(short = 'o', long = "output", value_name = "OUT")]
        output: Option<std::path::PathBuf>,
    },
    /// Switch one network namespace (--netns NAME|PATH|INODE or --container NAME) to BBR: its
    /// default for new connections, with --live its running connections too. Shows the plan
    /// and asks first; --undo restores what it changed.
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
        /// Allow changing the host's own (initial) network namespace.
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
    /// Print the shell completion script the package installs, for a binary installed by hand:
    /// `cctrace completions bash > /etc/bash_completion.d/cctrace`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page the package installs (roff): `cctrace man | man -l -`.
    Man,
}

/// `cctrace export` and `cctrace report`: offline, no privileges, no runtime.
fn after_the_fact(cli: &Cli) -> Option<Result<()>> {
    use std::io::Write;
    let read = |file: &std::path::Path, anonymize: bool| -> Result<Vec<tracer::recording::entry::Entry>> {
        let (entries, truncated) = tracer::export::read_entries(file)?;
        if let Some(at) = truncated {
            eprintln!("cctrace: recording truncated at byte {at}: using the {} entries before it", entries.len());
        }
        Ok(if anonymize { tracer::export::anonymize::anonymize(entries).collect() } else { entries })
    };
    match cli.command.as_ref()? {
        Command::Export { file, format, summary, output } => Some((|| {
            if *format == tracer::export::Format::Perfetto && *summary {
                anyhow::bail!("--summary is for --format csv or jsonl");
            }
            let entries = read(file, cli.anonymize)?;
            let mut out: Box<dyn Write> = match output.as_deref() {
                None => Box::new(std::io::stdout().lock()),
                Some(p) if p.as_os_str() == "-" => Box::new(std::io::stdout().lock()),
                Some(p) => Box::new(tracer::export::create_output(p)?),
            };
            tracer::export::export(entries, *format, *summary, diagnosis_config(cli), &mut out)
        })()),
        Command::Report { file, output } => Some((|| {
            let entries = read(file, cli.anonymize)?;
            let mut out = tracer::export::create_output(output)?;
            out.write_all(tracer::export::report::render(entries, diagnosis_config(cli)).as_bytes())
                .with_context(|| format!("writing {}", output.display()))
        })()),
        Command::Completions { shell } => {
            Some(cli_docs::completions(Cli::command(), *shell, &mut std::io::stdout().lock()))
        }
        Command::Man => Some(cli_docs::man_page(Cli::command(), &mut std::io::stdout().lock())),
        Command::Record { .. } | Command::Replay { .. } | Command::Fix { .. } | Command::Serve => None,
        #[cfg(feature = "demo")]
        Command::Demo { .. } => None,
        #[cfg(feature = "demo")]
        Command::DemoRelay { args } => Some(cctrace_lab::relay::relay_main(args)),
    }
}

fn diagnosis_config(cli: &Cli) -> DiagnosisConfig {
    DiagnosisConfig {
        heavy_min_bytes: (cli.heavy_mb * 1e6) as u64,
        heavy_min_bps: cli.heavy_mbps * 1e6,
        ..DiagnosisConfig::default()
    }
}

/// Where container names are read from: the runtimes' usual files, or what the command line
/// (or the demo's own files) says instead.
fn container_files(cli: &Cli) -> ContainerFiles {
    let mut files = ContainerFiles::default();
    if let Some(dir) = &cli.docker_root {
        files.docker_root.clone_from(dir);
    }
    if !cli.podman_store.is_empty() {
        files.podman_stores.clone_from(&cli.podman_store);
    }
    if let Some(dir) = &cli.pve_lxc_dir {
        files.pve_lxc.clone_from(dir);
    }
    if let Some(dir) = &cli.kubelet_logs {
        files.kubelet_pod_logs = dir.join("pods");
        files.kubelet_container_logs = dir.join("containers");
    }
    files
}

fn filter_spec(cli: &Cli) -> FilterSpec {
    FilterSpec { cgroups: cli.cgroup.clone(), containers: cli.container.clone(), netns: cli.netns.clone() }
}

/// The namespaces `--deep` works in: those `--netns` names, never the host's own.
fn deep_namespaces(
    resolved: &ResolvedFilter,
    env: &tracer::analysis::diagnosis::Environment,
) -> Result<Vec<tracer::deep::session::DeepNamespace>> {
    tracer::deep::check_support()?;
    if resolved.netns.is_empty() {
        anyhow::bail!("--deep needs --netns: it moves the flows of the named network namespaces onto its twins");
    }
    resolved
        .netns
        .iter()
        .map(|&netns| {
            if netns == env.host_netns {
                anyhow::bail!("--deep does not move the host's own flows: name other network namespaces with --netns");
            }
            let path = tracer::host::path_into_netns(env, netns)
                .with_context(|| format!("no path leads into network namespace {netns}"))?;
            Ok(tracer::deep::session::DeepNamespace { netns, path })
        })
        .collect()
}

fn start_kernel(cli: &Cli, filter: ResolvedFilter) -> Result<KernelSource> {
    let opts = KernelOptions {
        sample_interval: Duration::from_millis(cli.sample_ms),
        hook_mode: cli.hooks,
        ring_bytes: cli.ring_kib.saturating_mul(1024),
        filter,
        // The same "heavy" as for TCP flows, in bytes per second.
        udp_heavy_bytes_per_sec: (cli.heavy_mbps * 1e6 / 8.0) as u64,
        udp: !cli.no_udp,
    };
    let source = KernelSource::start(&opts)?;
    for h in &source.info().hooks {
        if let HookStatus::Disabled(_) = h.status {
            eprintln!("cctrace: {}", h.line());
        }
    }
    for m in &source.info().missing_fields {
        eprintln!("cctrace: kernel field unavailable, reported as 0: {m}");
    }
    if let Some(line) = source.info().start_up_listing_line() {
        eprintln!("cctrace: {line}");
    }
    if let Some(why) = &source.info().udp_unavailable {
        eprintln!("cctrace: heavy UDP flows not tracked ({why})");
    }
    Ok(source)
}

/// One line for stderr after the terminal UI: what the run saw and whether anything was lost.
fn summary_line(s: &SummaryRecord) -> String {
    let mut line = format!(
        "cctrace: {} samples from {}, {} lost, {} flows",
        s.events_received, s.source, s.events_lost, s.flows_seen
    );
    for (what, n) in [
        ("decode errors", s.decode_errors),
        ("kernel read errors", s.kernel_read_errors),
        ("flows the kernel map could not hold", s.flow_map_full),
        ("samples filtered out in the kernel", s.events_filtered),
        ("flows evicted from the table", s.flows_evicted),
    ] {
        if n > 0 {
            line.push_str(&format!(", {n} {what}"));
        }
    }
    line
}

/// A recording's header: this host, the run's start, its settings, filter and hooks.
fn recording_header(cli: &Cli, source: &KernelSource, spec: &FilterSpec, start: (u64, u64), tick: Duration) -> Header {
    let config = diagnosis_config(cli);
    Header {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        cctrace_version: env!("CARGO_PKG_VERSION").into(),
        host: tracer::host::hostname(),
        kernel: tracer::host::kernel_release(),
        start_unix_ns: start.0,
        start_monotonic_ns: start.1,
        sample_interval_ms: cli.sample_ms,
        tick_ms: u64::try_from(tick.as_millis()).unwrap_or(u64::MAX),
        filters: spec.describe(),
        source: source.describe(),
        hooks: source.info().hooks.iter().map(tracer::kernel::HookReport::line).collect(),
        heavy_min_bytes: Some(config.heavy_min_bytes),
        heavy_min_bps: Some(config.heavy_min_bps),
        anonymized: false,
    }
}

/// One line for stderr when a recording ends: how much, how long, what was lost.
fn recorded_line(status: &RecordingStatus, summary: Option<&SummaryRecord>) -> String {
    let (dropped, dropped_samples) = status.dropped();
    format!(
        "cctrace: recorded {} entries, {} bytes ({}) in {:.1} s to {}; {} samples lost by the kernel, {dropped} entries ({dropped_samples} samples) dropped by the recorder",
        status.entries(),
        status.bytes(),
        tracer::recording::writer::human_bytes(status.bytes()),
        status.elapsed().as_secs_f64(),
        status.path().display(),
        summary.map_or(0, |s| s.events_lost),
    )
}

/// `cctrace replay FILE`: the recording through the same pipeline, ticking where it ticked.
async fn replay(cli: &Cli, file: &std::path::Path) -> Result<()> {
    if !filter_spec(cli).is_empty() || cli.record.is_some() {
        anyhow::bail!("a replay takes no --cgroup, --container, --netns or --record: they apply while recording");
    }
    if cli.listen.is_some() {
        anyhow::bail!("a replay takes no --listen: metrics are served while tracing live (cctrace serve)");
    }
    let mut shutdown = Shutdown::install()?;
    let mut source = RecordingSource::open(file)?;
    let h = source.header().clone();
    eprintln!("cctrace: replaying {} (recorded on {}, Linux {}, {})", file.display(), h.host, h.kernel, h.source);
    if !h.filters.is_empty() {
        eprintln!("cctrace: recorded with the filter {}", h.filters.join(" "));
    }
    let mut config = diagnosis_config(cli);
    if let (Some(bytes), Some(bps)) = (h.heavy_min_bytes, h.heavy_min_bps) {
        config.heavy_min_bytes = bytes;
        config.heavy_min_bps = bps;
    }
    let mut analysis =
        Analysis::new(TableConfig::default(), config, tracer::analysis::diagnosis::Environment::default());
    let pipeline_opts = PipelineOptions {
        tick: Duration::from_millis(h.tick_ms.max(10)),
        duration: cli.duration,
        final_drain: Duration::ZERO,
        scripted: true,
        ..PipelineOptions::default()
    };
    let (result, truncated) = if cli.json || !std::io::stdout().is_terminal() {
        let out = LineWriter::spawn(Box::new(std::io::stdout()));
        let wall = tracer::analysis::time::WallClock::from_start(h.start_unix_ns, h.start_monotonic_ns);
        let mut front = JsonOutput::new(out, wall, cli.events);
        // As fast as it reads: the recorded ticks decide what is printed, not the pace.
        let result = pipeline::run(&mut source, &mut analysis, &mut front, &pipeline_opts, || 0, &mut shutdown).await;
        (result.map(drop), source.truncated())
    } else {
        let header = tracer::tui::HeaderInfo {
            host: h.host.clone(),
            kernel: h.kernel.clone(),
            source: format!("{} · recorded from {}", source.describe(), h.source),
            recording: None,
            filters: h.filters.clone(),
        };
        let opts = tracer::tui::TuiOptions::default();
        // At the recorded pace, with the playback keys.
        let mut paced = PacedRecording::open(file)?;
        let player = Some(paced.player());
        let result = tracer::tui::run(
            &mut paced,
            &mut analysis,
            header,
            &opts,
            pipeline_opts,
            None,
            None,
            None,
            None,
            player,
            &mut shutdown,
        )
        .await
        .map(|summary| eprintln!("{}", summary_line(&summary)));
        (result, paced.source().truncated())
    };
    if let Some(at) = truncated {
        eprintln!("cctrace: recording truncated at byte {at}");
    }
    result
}

async fn run(cli: &Cli) -> Result<()> {
    let record_path = match &cli.command {
        Some(Command::Replay { file }) => return replay(cli, file).await,
        Some(Command::Record { file }) => {
            anyhow::ensure!(cli.record.is_none(), "`cctrace record FILE` records to FILE: --record is not needed");
            Some(file.clone())
        }
        _ => cli.record.clone(),
    };
    let headless = matches!(cli.command, Some(Command::Record { .. } | Command::Serve));
    let listen = match cli.command {
        Some(Command::Serve) => Some(cli.listen.unwrap_or(DEFAULT_LISTEN)),
        _ => cli.listen,
    };
    if let Some(addr) = listen {
        tracer::metrics::check_listen(addr, cli.allow_non_loopback)?;
    }
    anyhow::ensure!(
        !cli.anonymize || record_path.is_some(),
        "--anonymize applies to what is recorded (--record FILE, cctrace record), exported or reported"
    );
    // A path that cannot be recorded to fails before anything is set up.
    let new_file = record_path.as_deref().map(NewFile::create).transpose()?;
    // The one start both the JSON times and the recording's header derive from.
    let start = tracer::clock::start_instants();
    let mut shutdown = Shutdown::install()?;
    // The demo's containers exist before the host is read, so `--container jellyfin` names one.
    #[cfg(feature = "demo")]
    let mut demo_containers = match &cli.command {
        Some(Command::Demo { .. }) => Some(tracer::demo::DemoContainers::create()?),
        _ => None,
    };
    #[allow(unused_mut)] // the demo adds its own container files
    let mut files = container_files(cli);
    #[cfg(feature = "demo")]
    if let Some(c) = &demo_containers {
        files.docker_root = c.docker_root();
        files.pve_lxc = c.pve_lxc_dir();
    }
    // One resolver for the host facts and the filter, with the roots chosen above.
    tracer::cgroups::set_system_resolver(CgroupResolver::new(cgroup2_mount(), files));
    // A filter term that names nothing is an error before anything is attached.
    let env = tracer::host::environment();
    let spec = filter_spec(cli);
    let host_paths = HostPaths { cgroup_root: cgroup2_mount() };
    let resolved = resolve(&spec, &env, &host_paths)?;
    // The port is taken before anything is attached: a port in use fails fast.
    let metrics_config = tracer::metrics::MetricsConfig { top_flagged: cli.top_flagged, max_groups: cli.max_groups };
    let mut exporter = match listen {
        Some(addr) => Some(tracer::metrics::Exporter::start(addr, metrics_config, Vec::new()).await?),
        None => None,
    };
    // Attach first so the demo's connections are seen from their first packet.
    let deep_namespaces = if cli.deep {
        Some(deep_namespaces(&resolved, &env)?)
    } else {
        // A killed --deep run leaves flows on its unregistered twins: any next start puts them back.
        match tracer::deep::session::restore_if_left() {
            Ok(0) => {}
            Ok(n) => eprintln!("cctrace: {}", tracer::deep::session::restored_line(n)),
            Err(e) => eprintln!("cctrace: flows a killed cctrace --deep left on its twins stay there: {e:#}"),
        }
        None
    };
    let mut source = start_kernel(cli, resolved)?;
    if let Some(e) = &mut exporter {
        e.set_hooks(
            source
                .info()
                .hooks
                .iter()
                .map(|h| (h.name.clone(), !matches!(h.status, HookStatus::Disabled(_))))
                .collect(),
            source.hook_programs(),
        );
    }
    let serving = exporter.as_ref().and_then(tracer::metrics::Exporter::local_addr);
    if let Some(namespaces) = deep_namespaces {
        let (session, moved) = tracer::deep::session::DeepSession::start(namespaces)?;
        if session.restored_at_start > 0 {
            eprintln!("cctrace: {}", tracer::deep::session::restored_line(session.restored_at_start));
        }
        eprintln!(
            "cctrace: deep mode: cct_cubic, cct_reno and cct_bbr registered; {} flows moved onto them",
            moved.switched
        );
        source.attach_deep(session)?;
    }
    let live_filter = source.take_filter().map(|k| LiveFilter::new(k, spec.clone(), host_paths));
    // The demo lab exists only while this function runs: its Drop removes the namespaces on
    // every exit path (end of --duration, Ctrl-C, SIGTERM, an error below).
    #[cfg(feature = "demo")]
    let demo = match (&cli.command, demo_containers.as_mut()) {
        (Some(Command::Demo { opts }), Some(containers)) => {
            Some(tracer::demo::DemoLab::start(opts, cli.duration.unwrap_or(cctrace_lab::MAX_DURATION), containers)?)
        }
        _ => None,
    };
    #[cfg(feature = "demo")]
    let demo_description = demo.as_ref().map(|d| d.description.clone());
    #[cfg(not(feature = "demo"))]
    let demo_description: Option<String> = None;

    let mut analysis = Analysis::new(TableConfig::default(), diagnosis_config(cli), env)
        .with_env_refresh(Some(tracer::host::environment));
    let pipeline_opts = PipelineOptions {
        tick: Duration::from_millis(cli.interval),
        duration: cli.duration,
        ..PipelineOptions::default()
    };
    let json = !headless && (cli.json || !std::io::stdout().is_terminal());
    let tick = if json || headless { pipeline_opts.tick } else { tracer::tui::TuiOptions::default().frame_interval };
    let recorder = match new_file {
        Some(file) => {
            let mut header = recording_header(cli, &source, &spec, start, tick);
            let mut anonymizer = cli.anonymize.then(tracer::export::anonymize::Anonymizer::default);
            if let Some(a) = &mut anonymizer {
                header.anonymized = true;
                if let Entry::Header(h) = a.entry(Entry::Header(header.clone())) {
                    header = h;
                }
            }
            Some(Recorder::new(RecordWriter::start(file, &header)?).with_anonymizer(anonymizer))
        }
        None => None,
    };
    let recording = recorder.as_ref().map(Recorder::status);
    let result = if json || headless {
        if spec.is_empty() {
            eprintln!("cctrace: tracing TCP in all network namespaces ({})", source.describe());
        } else {
            eprintln!("cctrace: tracing TCP flows of {} ({})", spec.describe().join(" "), source.describe());
        }
        if let Some(d) = &demo_description {
            eprintln!("cctrace: {d}");
        }
        if let Some(r) = &recording {
            eprintln!("cctrace: recording to {}", r.path().display());
        }
        if let Some(addr) = serving {
            eprintln!("cctrace: serving metrics at http://{addr}/metrics");
        }
        let filter = live_filter.context("the filter maps are missing")?;
        let clock = tracer::clock::monotonic_now_ns;
        let summary = if headless {
            let recording = Recording::new(Beside::new(Headless, Some(FilterUpkeep(filter))), recorder);
            let mut front = Exporting::new(recording, exporter);
            pipeline::run(&mut source, &mut analysis, &mut front, &pipeline_opts, clock, &mut shutdown).await
        } else {
            let out = LineWriter::spawn(Box::new(std::io::stdout()));
            let json =
                JsonOutput::new(out, tracer::analysis::time::WallClock::from_start(start.0, start.1), cli.events);
            let recording = Recording::new(Beside::new(json, Some(FilterUpkeep(filter))), recorder);
            let mut front = Exporting::new(recording, exporter);
            pipeline::run(&mut source, &mut analysis, &mut front, &pipeline_opts, clock, &mut shutdown).await
        };
        if let Some(r) = &recording {
            eprintln!("{}", recorded_line(r, summary.as_ref().ok()));
        }
        summary.map(drop)
    } else {
        // Where the metrics are, before the demo's long description the header may cut short.
        let mut described = source.describe();
        if let Some(addr) = serving {
            described.push_str(&format!(" · metrics on http://{addr}/metrics"));
        }
        if let Some(d) = &demo_description {
            described.push_str(&format!(" · {d}"));
        }
        let mut header = tracer::tui::HeaderInfo::this_host(described);
        header.filters = spec.describe();
        let opts = tracer::tui::TuiOptions::default();
        // The kernel filter's control comes with the filter itself; until then, none to change.
        let filter = live_filter.map(|f| Box::new(f) as tracer::tui::FilterControlBox);
        // `f` and `u` change the host through the same code as `cctrace fix`.
        let fixer = Some(Box::<tracer::apply::HostFixer>::default() as tracer::tui::FixControlBox);
        let summary = tracer::tui::run(
            &mut source,
            &mut analysis,
            header,
            &opts,
            pipeline_opts,
            filter,
            fixer,
            recorder,
            exporter,
            None,
            &mut shutdown,
        )
        .await;
        if let Ok(s) = &summary {
            eprintln!("{}", summary_line(s));
        }
        if let Some(r) = &recording {
            eprintln!("{}", recorded_line(r, summary.as_ref().ok()));
        }
        summary.map(drop)
    };
    if let Some(c) = source.deep_counters() {
        eprintln!(
            "cctrace: deep mode: {} decision events received, {} lost in the kernel (ring buffer full), {} undecodable",
            c.received, c.lost, c.decode_errors
        );
    }
    drop(source);
    #[cfg(feature = "demo")]
    {
        drop(demo);
        drop(demo_containers);
    }
    result
}

/// `--log-file`: the only place log output goes (stderr belongs to the terminal UI).
fn init_logging(path: Option<&std::path::Path>) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening log file {}", path.display()))?;
    env_logger::Builder::new()
        .filter_level(log::LevelFilter::Info)
        .parse_default_env()
        .target(env_logger::Target::Pipe(Box::new(file)))
        .try_init()
        .context("initialising logging")
}

/// Parse the command line; bad input is one line on stderr and exit code 2.
fn parse_cli() -> Result<Cli, ExitCode> {
    Cli::try_parse().map_err(|e| {
        use clap::error::ErrorKind;
        if matches!(
            e.kind(),
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        ) {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        eprintln!("cctrace: {}", tracer::cli::one_line(&e.to_string()));
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    if let Some(result) = after_the_fact(&cli) {
        let reader_left = |e: &anyhow::Error| {
            let pipe = |io: &std::io::Error| io.kind() == std::io::ErrorKind::BrokenPipe;
            e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(pipe)
                    || c.downcast_ref::<csv::Error>()
                        .is_some_and(|e| matches!(e.kind(), csv::ErrorKind::Io(io) if pipe(io)))
            })
        };
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            // `cctrace export ... | head`: the reader has what it wanted.
            Err(e) if reader_left(&e) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cctrace: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cctrace: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = init_logging(cli.log_file.as_deref()) {
        eprintln!("cctrace: {e:#}");
        return ExitCode::FAILURE;
    }
    if let Some(Command::Fix { cc, live, persist, yes, host_namespace, undo }) = &cli.command {
        // `--container NAME` is resolved with the same container files as tracing.
        tracer::cgroups::set_system_resolver(CgroupResolver::new(cgroup2_mount(), container_files(&cli)));
        let args = tracer::apply::FixArgs {
            netns: cli.netns.clone(),
            containers: cli.container.clone(),
            cc: cc.clone(),
            live: *live,
            persist: *persist,
            yes: *yes,
            host_namespace: *host_namespace,
            undo: *undo,
        };
        return match tracer::apply::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                log::info!("fix failed: {e:#}");
                eprintln!("cctrace: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let result = runtime.block_on(run(&cli));
    // A writer thread blocked on a reader that stopped reading must not hold the exit.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cctrace: {e:#}");
            ExitCode::FAILURE
        }
    }
}
