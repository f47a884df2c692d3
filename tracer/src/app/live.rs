//! Live tracing, `cctrace record`, `cctrace serve` and the demo: the kernel source started
//! with the filter and deep mode asked for, the recorder and the metrics set up, and the front
//! end (the terminal UI, JSON Lines or nothing) run in the one stack through the pipeline.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{Context, Result};

use super::lines::{recorded_line, summary_line};
use super::replay::replay;
use super::settings::{container_files, diagnosis_config, filter_spec};
use crate::analysis::filter::{resolve, FilterSpec, ResolvedFilter};
use crate::analysis::model::TableConfig;
use crate::analysis::Analysis;
use crate::cgroups::{cgroup2_mount, CgroupResolver};
use crate::cli::{Cli, Command, DEFAULT_LISTEN};
use crate::frontend::json::JsonOutput;
use crate::frontend::line_writer::LineWriter;
use crate::frontend::stack::{stack, Extras, Headless};
use crate::kernel::filter::live::{FilterUpkeep, HostPaths, LiveFilter};
use crate::kernel::{HookStatus, KernelOptions, KernelSource};
use crate::pipeline::{self, PipelineOptions};
use crate::recording::entry::{Entry, Header, FORMAT, FORMAT_VERSION};
use crate::recording::{NewFile, RecordWriter, Recorder};
use crate::signals::Shutdown;
use crate::source::{ActionPoll, EventSource, WithHostActions};

/// How often the host's fix journal is read for actions other cctrace processes took.
const HOST_ACTIONS_EVERY: Duration = Duration::from_secs(1);

/// The actions other cctrace processes take on the host from now on (`cctrace fix`, another
/// terminal UI's `f` and `u`), read from the fix journal.
fn host_actions() -> ActionPoll {
    let mut journal = crate::fix::journal::Tail::from_now();
    Box::new(move || journal.poll())
}

/// The namespaces `--deep` works in: those `--netns` names, never the host's own.
fn deep_namespaces(
    resolved: &ResolvedFilter,
    env: &crate::analysis::environment::Environment,
) -> Result<Vec<crate::kernel::deep::session::DeepNamespace>> {
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
            let path = crate::host::path_into_netns(env, netns)
                .with_context(|| format!("no path leads into network namespace {netns}"))?;
            Ok(crate::kernel::deep::session::DeepNamespace { netns, path })
        })
        .collect()
}

/// Register the twins and move the namespaces' flows onto them; where the kernel (or another
/// run) does not allow it, one line says why and tracing goes on without them.
fn start_deep(source: &mut KernelSource, namespaces: Vec<crate::kernel::deep::session::DeepNamespace>) -> Result<()> {
    use crate::kernel::deep::session::{restored_line, DeepSession};
    let started =
        crate::kernel::deep::check_support().map_err(anyhow::Error::from).and_then(|()| DeepSession::start(namespaces));
    let (session, moved) = match started {
        Ok(started) => started,
        Err(e) => {
            eprintln!("cctrace: deep mode off, tracing goes on: {e:#}");
            return Ok(());
        }
    };
    if session.restored_at_start > 0 {
        eprintln!("cctrace: {}", restored_line(session.restored_at_start));
    }
    eprintln!(
        "cctrace: deep mode: cct_cubic, cct_reno and cct_bbr registered; {} flows moved onto them",
        moved.switched
    );
    source.attach_deep(session)
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
        probe_always_attached: cli.probe_always_attached,
        probe_windows_always: cli.probe_windows_always,
    };
    let source = KernelSource::start(&opts)?;
    for h in &source.info().hooks {
        if let HookStatus::Disabled(_) = h.status {
            eprintln!("cctrace: {}", h.line());
        }
    }
    for m in &source.info().missing_fields {
        // A counter the JSON can leave out (total_rto, ...) is null there; the rest read as 0.
        eprintln!("cctrace: kernel field unavailable, reported as 0 or null: {m}");
    }
    if let Some(line) = source.info().start_up_listing_line() {
        eprintln!("cctrace: {line}");
    }
    if let Some(why) = &source.info().udp_unavailable {
        eprintln!("cctrace: heavy UDP flows not tracked ({why})");
    }
    if let Some(why) = &source.info().udp_per_packet {
        eprintln!("cctrace: UDP accounted on every packet (cgroup_skb at the cgroup root), not per syscall: {why}");
    }
    if let Some(why) = &source.info().udp_unclassified {
        eprintln!("cctrace: UDP flows counted but not classified as QUIC or WireGuard: {why}");
    }
    Ok(source)
}

/// The OTLP export `--otlp` asks for, checked (a bad endpoint, header or CA file is one error
/// line); `on_stderr` when nothing owns the terminal, so a collector going away is said there.
fn otlp_export(cli: &Cli, start: (u64, u64), on_stderr: bool) -> Result<Option<crate::metrics::OtlpExport>> {
    let Some(endpoint) = &cli.otlp else { return Ok(None) };
    let settings = crate::metrics::OtlpSettings {
        endpoint: endpoint.clone(),
        headers: cli
            .otlp_header
            .iter()
            .cloned()
            .chain(
                std::env::var(crate::metrics::otlp::HEADERS_VARIABLE)
                    .map(|v| crate::metrics::otlp::headers_from_env(&v))
                    .unwrap_or_default(),
            )
            .collect(),
        ca_file: cli.otlp_ca_file.clone(),
        interval: cli.otlp_interval,
        queue_requests: cli.otlp_queue,
    };
    let host =
        crate::metrics::otlp::encode::Host { name: crate::host::hostname(), kernel: crate::host::kernel_release() };
    fn in_log(line: &str) {
        log::warn!("{line}");
    }
    fn on_stderr_too(line: &str) {
        log::warn!("{line}");
        eprintln!("cctrace: {line}");
    }
    let clock = crate::analysis::time::WallClock::from_start(start.0, start.1);
    let say = if on_stderr { on_stderr_too } else { in_log };
    crate::metrics::OtlpExport::start(&settings, &host, clock, start.0, say).map(Some)
}

/// A recording's header: this host, the run's start, its settings, filter and hooks.
fn recording_header(cli: &Cli, source: &KernelSource, spec: &FilterSpec, start: (u64, u64), tick: Duration) -> Header {
    let config = diagnosis_config(cli);
    Header {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        cctrace_version: env!("CARGO_PKG_VERSION").into(),
        host: crate::host::hostname(),
        kernel: crate::host::kernel_release(),
        start_unix_ns: start.0,
        start_monotonic_ns: start.1,
        sample_interval_ms: cli.sample_ms,
        tick_ms: u64::try_from(tick.as_millis()).unwrap_or(u64::MAX),
        filters: spec.describe(),
        source: source.describe(),
        hooks: source.info().hooks.iter().map(crate::kernel::HookReport::line).collect(),
        heavy_min_bytes: Some(config.heavy_min_bytes),
        heavy_min_bps: Some(config.heavy_min_bps),
        anonymized: false,
    }
}

pub(super) async fn run(cli: &Cli) -> Result<()> {
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
        Some(Command::Serve) if cli.otlp.is_none() => Some(cli.listen.unwrap_or(DEFAULT_LISTEN)),
        _ => cli.listen,
    };
    if let Some(addr) = listen {
        crate::metrics::check_listen(addr, cli.allow_non_loopback)?;
    }
    anyhow::ensure!(
        !cli.anonymize || record_path.is_some(),
        "--anonymize applies to what is recorded (--record FILE, cctrace record), exported or reported"
    );
    // A path that cannot be recorded to fails before anything is set up.
    let new_file = record_path.as_deref().map(NewFile::create).transpose()?;
    // The one start both the JSON times and the recording's header derive from.
    let start = crate::clock::start_instants();
    let mut shutdown = Shutdown::install()?;
    // The demo's containers exist before the host is read, so `--container jellyfin` names one.
    #[cfg(feature = "demo")]
    let mut demo_containers = match &cli.command {
        Some(Command::Demo { .. }) => Some(crate::demo::DemoContainers::create()?),
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
    crate::cgroups::set_system_resolver(CgroupResolver::new(cgroup2_mount(), files));
    // A filter term that names nothing is an error before anything is attached.
    let env = crate::host::environment();
    let spec = filter_spec(cli);
    let host_paths = HostPaths { cgroup_root: cgroup2_mount() };
    let resolved = resolve(&spec, &env, &host_paths)?;
    // The port is taken and the collector's address checked before anything is attached: a
    // port in use or a bad endpoint fails fast.
    let json = !headless && (cli.json || !std::io::stdout().is_terminal());
    let otlp = otlp_export(cli, start, json || headless)?;
    let otlp_status = otlp.as_ref().map(crate::metrics::OtlpExport::status);
    let metrics_config = crate::metrics::MetricsConfig { top_flagged: cli.top_flagged, max_groups: cli.max_groups };
    let mut metrics = match listen {
        Some(addr) => Some(crate::metrics::MetricsService::start(addr, metrics_config, Vec::new()).await?),
        None => otlp.is_some().then(|| crate::metrics::MetricsService::without_server(metrics_config, Vec::new())),
    };
    if let (Some(m), Some(otlp)) = (&mut metrics, otlp) {
        m.set_otlp(otlp);
    }
    // Attach first so the demo's connections are seen from their first packet.
    let deep_namespaces = if cli.deep {
        Some(deep_namespaces(&resolved, &env)?)
    } else {
        // A killed --deep run leaves flows on its unregistered twins: any next start puts them back.
        match crate::kernel::deep::session::restore_if_left() {
            Ok(0) => {}
            Ok(n) => eprintln!("cctrace: {}", crate::kernel::deep::session::restored_line(n)),
            Err(e) => eprintln!("cctrace: flows a killed cctrace --deep left on its twins stay there: {e:#}"),
        }
        None
    };
    let mut source = start_kernel(cli, resolved)?;
    if let Some(e) = &mut metrics {
        e.set_hooks(
            source
                .info()
                .hooks
                .iter()
                .map(|h| (h.name.clone(), !matches!(h.status, HookStatus::Disabled(_))))
                .collect(),
            crate::kernel::hook_cost::reader(source.hook_programs()),
        );
    }
    let serving = metrics.as_ref().and_then(crate::metrics::MetricsService::local_addr);
    if let Some(namespaces) = deep_namespaces {
        start_deep(&mut source, namespaces)?;
    }
    let live_filter = source.take_filter().map(|k| LiveFilter::new(k, spec.clone(), host_paths));
    // The demo lab exists only while this function runs: its Drop removes the namespaces on
    // every exit path (end of --duration, Ctrl-C, SIGTERM, an error below).
    #[cfg(feature = "demo")]
    let demo = match (&cli.command, demo_containers.as_mut()) {
        (Some(Command::Demo { opts }), Some(containers)) => {
            Some(crate::demo::DemoLab::start(opts, cli.duration.unwrap_or(cctrace_lab::MAX_DURATION), containers)?)
        }
        _ => None,
    };
    #[cfg(feature = "demo")]
    let demo_description = demo.as_ref().map(|d| d.description.clone());
    #[cfg(not(feature = "demo"))]
    let demo_description: Option<String> = None;

    let mut analysis = Analysis::new(TableConfig::default(), diagnosis_config(cli), env)
        .with_env_refresh(Some(crate::host::environment))
        .with_route_reader(Some(crate::host::tunnels::read_routes));
    let pipeline_opts = PipelineOptions {
        tick: Duration::from_millis(cli.interval),
        duration: cli.duration,
        ..PipelineOptions::default()
    };
    let tick = if json || headless { pipeline_opts.tick } else { crate::tui::TuiOptions::default().frame_interval };
    let recorder = match new_file {
        Some(file) => {
            let mut header = recording_header(cli, &source, &spec, start, tick);
            let mut anonymizer = cli.anonymize.then(crate::recording::anonymize::Anonymizer::default);
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
        if let Some(otlp) = &cli.otlp {
            eprintln!(
                "cctrace: exporting to the OTLP collector at {otlp}: metrics every {} s, events as they happen",
                cli.otlp_interval.as_secs()
            );
        }
        let filter = live_filter.context("the filter maps are missing")?;
        let clock = crate::clock::monotonic_now_ns;
        let extras = Extras { job: Some(FilterUpkeep(filter)), recorder, metrics };
        let summary = if headless {
            let mut front = stack(Headless, extras);
            let mut source = WithHostActions::new(&mut source, host_actions(), HOST_ACTIONS_EVERY);
            pipeline::run(&mut source, &mut analysis, &mut front, &pipeline_opts, clock, &mut shutdown).await
        } else {
            let out = LineWriter::spawn(Box::new(std::io::stdout()));
            let json = JsonOutput::new(out, crate::analysis::time::WallClock::from_start(start.0, start.1), cli.events);
            let mut front = stack(json, extras);
            let mut source = WithHostActions::new(&mut source, host_actions(), HOST_ACTIONS_EVERY);
            pipeline::run(&mut source, &mut analysis, &mut front, &pipeline_opts, clock, &mut shutdown).await
        };
        if let Some(r) = &recording {
            eprintln!("{}", recorded_line(r, summary.as_ref().ok()));
        }
        if let Some(o) = &otlp_status {
            eprintln!("{}", o.line());
        }
        summary.map(drop)
    } else {
        // Where the metrics are, before the demo's long description the header may cut short.
        let mut described = source.describe();
        if let Some(addr) = serving {
            described.push_str(&format!(" · metrics on http://{addr}/metrics"));
        }
        if let Some(otlp) = &cli.otlp {
            described.push_str(&format!(" · OTLP to {otlp}"));
        }
        if let Some(d) = &demo_description {
            described.push_str(&format!(" · {d}"));
        }
        let mut header =
            crate::tui::HeaderInfo::live(crate::host::hostname(), crate::host::kernel_release(), described);
        header.filters = spec.describe();
        let opts = crate::tui::TuiOptions::default();
        // The filter in force is shared: the prompt (F) changes it, and the same upkeep as in
        // the other modes keeps it following the host beside the UI.
        let upkeep = live_filter.clone().map(FilterUpkeep);
        let filter = live_filter.map(|f| Box::new(f) as crate::tui::FilterControlBox);
        // `f` and `u` change the host through the same code as `cctrace fix`.
        let fixer = Some(Box::<crate::fix::HostFixer>::default() as crate::tui::FixControlBox);
        let summary = crate::tui::run(
            &mut WithHostActions::new(&mut source, host_actions(), HOST_ACTIONS_EVERY),
            &mut analysis,
            header,
            &opts,
            pipeline_opts,
            filter,
            fixer,
            Extras { job: upkeep, recorder, metrics },
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
        if let Some(o) = &otlp_status {
            eprintln!("{}", o.line());
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
