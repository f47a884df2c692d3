//! Live tracing, `cctrace record`, `cctrace serve` and the demo: the kernel source started
//! with the filter and deep mode asked for, the recorder and the metrics set up; the front end
//! (the terminal UI, JSON Lines or nothing) then runs over it ([`super::show`]).

use std::time::Duration;

use anyhow::{Context, Result};

use super::live_demo::Demo;
use super::settings::{LiveRun, LiveSettings, MetricsSettings};
use super::show::{show, Shown, Traced};
use crate::analysis::filter::{resolve, ResolvedFilter};
use crate::analysis::flow_table::TableConfig;
use crate::analysis::Analysis;
use crate::cgroups::{cgroup2_mount, CgroupResolver};
use crate::cli::Cli;
use crate::kernel::filter::live::{HostPaths, LiveFilter};
use crate::kernel::{HookStatus, KernelOptions, LiveSource};
use crate::metrics::{MetricsService, OtlpSettings, OtlpStatus};
use crate::recording::entry::{Entry, Header, FORMAT, FORMAT_VERSION};
use crate::recording::{NewFile, RecordWriter, Recorder};
use crate::signals::Shutdown;
use crate::source::EventSource as _;

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
fn start_deep(source: &mut LiveSource, namespaces: Vec<crate::kernel::deep::session::DeepNamespace>) -> Result<()> {
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

/// The kernel source with `options` and the resolved `filter`, and the lines that say what it
/// could not do.
fn start_kernel(options: &KernelOptions, filter: ResolvedFilter) -> Result<LiveSource> {
    let source = LiveSource::start(&KernelOptions { filter, ..options.clone() })?;
    if source.info().no_btf {
        eprintln!("cctrace: {}", no_btf_line(options.hook_mode));
    }
    if let Some(file) = &source.info().btf_file {
        eprintln!("cctrace: kernel BTF read from {file}");
    }
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

/// The start-up line of the mode without BTF: why it runs, what it reads, what it loses.
fn no_btf_line(asked: crate::kernel::HookMode) -> String {
    let why = if asked == crate::kernel::HookMode::NoBtf {
        "--hooks no-btf".to_string()
    } else {
        format!("no kernel BTF ({} is absent)", crate::kernel::KERNEL_BTF)
    };
    format!(
        "mode without BTF ({why}): flows from classic tracepoint records and sock_diag; it loses: {}",
        crate::kernel::nobtf::LOSES
    )
}

/// The OTLP export of `settings`, checked (a bad endpoint, header or CA file is one error line);
/// `on_stderr` when nothing owns the terminal, so a collector going away is said there.
fn otlp_export(
    settings: Option<&OtlpSettings>,
    start: (u64, u64),
    on_stderr: bool,
) -> Result<Option<crate::metrics::OtlpExport>> {
    let Some(settings) = settings else { return Ok(None) };
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
    crate::metrics::OtlpExport::start(settings, &host, clock, start.0, say).map(Some)
}

/// A recording's header: this host, the run's start, its settings, filter and hooks.
fn recording_header(settings: &LiveSettings<'_>, source: &LiveSource, start: (u64, u64), tick: Duration) -> Header {
    let config = &settings.diagnosis;
    Header {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        cctrace_version: env!("CARGO_PKG_VERSION").into(),
        host: crate::host::hostname(),
        kernel: crate::host::kernel_release(),
        start_unix_ns: start.0,
        start_monotonic_ns: start.1,
        sample_interval_ms: u64::try_from(settings.kernel.sample_interval.as_millis()).unwrap_or(u64::MAX),
        tick_ms: u64::try_from(tick.as_millis()).unwrap_or(u64::MAX),
        filters: settings.filter.describe(),
        source: source.describe(),
        hooks: source.info().hooks.iter().map(crate::kernel::HookReport::line).collect(),
        heavy_min_bytes: Some(config.heavy_min_bytes),
        heavy_min_bps: Some(config.heavy_min_bps),
        anonymized: false,
    }
}

/// Trace live as `what` asks until a stop; the front end is chosen from the command line and
/// the terminal. The command line is read here, once, into the settings each part takes.
pub(super) async fn run(cli: &Cli, what: LiveRun<'_>) -> Result<()> {
    let settings = LiveSettings::resolve(cli, what)?;
    // A path that cannot be recorded to fails before anything is set up.
    let new_file = settings.record.as_ref().map(|r| NewFile::create(&r.path)).transpose()?;
    // The one start both the JSON times and the recording's header derive from.
    let start = crate::clock::start_instants();
    let mut shutdown = Shutdown::install()?;
    // The demo's lab lives as long as this function: its Drop removes it on every exit path.
    let mut demo = Demo::containers(settings.demo)?;
    let mut traced = assemble(&settings, &demo, start).await?;
    demo.start_lab(settings.pipeline.duration)?;
    let mut analysis =
        Analysis::new(TableConfig::default(), settings.diagnosis.clone(), std::mem::take(&mut traced.env))
            .with_env_refresh(Some(crate::host::environment))
            .with_route_reader(Some(crate::host::tunnels::read_routes));
    let shown = Shown::of(&settings, demo.description(), start);
    let recorder = new_file.map(|file| recorder(&settings, file, &traced.source, start, shown.tick())).transpose()?;
    let result = show(&shown, &mut traced, &mut analysis, recorder, &mut shutdown).await;
    if let Some(c) = traced.source.deep_counters() {
        eprintln!(
            "cctrace: deep mode: {} decision events received, {} lost in the kernel (ring buffer full), {} undecodable",
            c.received, c.lost, c.decode_errors
        );
    }
    // The programs detach before the demo's lab goes (at the end of this function).
    drop(traced);
    result
}

/// The host read, the filter resolved, the metrics set up and the kernel source started (deep
/// mode's twins too): everything fails fast before anything is attached that can.
async fn assemble(settings: &LiveSettings<'_>, demo: &Demo<'_>, start: (u64, u64)) -> Result<Traced> {
    // One resolver for the host facts and the filter, with the roots chosen above.
    crate::cgroups::set_system_resolver(CgroupResolver::new(
        cgroup2_mount(),
        demo.container_files(settings.containers.clone()),
    ));
    // A filter term that names nothing is an error before anything is attached.
    let env = crate::host::environment();
    let spec = settings.filter.clone();
    let host_paths = HostPaths { cgroup_root: cgroup2_mount() };
    let resolved = resolve(&spec, &env, &host_paths)?;
    // The port is taken and the collector's address checked before anything is attached: a
    // port in use or a bad endpoint fails fast.
    let (mut metrics, otlp) = metrics(&settings.metrics, start, settings.front.says_on_stderr()).await?;
    // Attach first so the demo's connections are seen from their first packet.
    let deep_namespaces = if settings.deep {
        Some(deep_namespaces(&resolved, &env)?)
    } else {
        restore_deep_left();
        None
    };
    let mut source = start_kernel(&settings.kernel, resolved)?;
    if let Some(m) = &mut metrics {
        m.set_hooks(
            source
                .info()
                .hooks
                .iter()
                .map(|h| (h.name.clone(), !matches!(h.status, HookStatus::Disabled(_))))
                .collect(),
            crate::kernel::hook_cost::reader(source.hook_programs()),
        );
    }
    let serving = metrics.as_ref().and_then(MetricsService::local_addr);
    if let Some(namespaces) = deep_namespaces {
        start_deep(&mut source, namespaces)?;
    }
    let live_filter = source.take_filter().map(|k| LiveFilter::new(k, spec.clone(), host_paths));
    Ok(Traced { source, spec, live_filter, env, metrics, serving, otlp })
}

/// A killed --deep run leaves flows on its unregistered twins: any next start puts them back.
fn restore_deep_left() {
    match crate::kernel::deep::session::restore_if_left() {
        Ok(0) => {}
        Ok(n) => eprintln!("cctrace: {}", crate::kernel::deep::session::restored_line(n)),
        Err(e) => eprintln!("cctrace: flows a killed cctrace --deep left on its twins stay there: {e:#}"),
    }
}

/// The metrics service (serving at `listen`, or only feeding the OTLP export) and the OTLP
/// export's status, for the line that ends the run.
async fn metrics(
    settings: &MetricsSettings,
    start: (u64, u64),
    on_stderr: bool,
) -> Result<(Option<MetricsService>, Option<OtlpStatus>)> {
    let otlp = otlp_export(settings.otlp.as_ref(), start, on_stderr)?;
    let status = otlp.as_ref().map(crate::metrics::OtlpExport::status);
    let config = settings.config.clone();
    let mut metrics = match settings.listen {
        Some(addr) => Some(MetricsService::start(addr, config, Vec::new()).await?),
        None => otlp.is_some().then(|| MetricsService::without_server(config, Vec::new())),
    };
    if let (Some(m), Some(otlp)) = (&mut metrics, otlp) {
        m.set_otlp(otlp);
    }
    Ok((metrics, status))
}

/// The recorder writing to `file`, its header first (anonymized when asked).
fn recorder(
    settings: &LiveSettings<'_>,
    file: NewFile,
    source: &LiveSource,
    start: (u64, u64),
    tick: Duration,
) -> Result<Recorder> {
    let mut header = recording_header(settings, source, start, tick);
    let anonymize = settings.record.as_ref().is_some_and(|r| r.anonymize);
    let mut anonymizer = anonymize.then(crate::recording::anonymize::Anonymizer::default);
    if let Some(a) = &mut anonymizer {
        header.anonymized = true;
        if let Entry::Header(h) = a.entry(Entry::Header(header.clone())) {
            header = h;
        }
    }
    Ok(Recorder::new(RecordWriter::start(file, &header)?).with_anonymizer(anonymizer))
}
