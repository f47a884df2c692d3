//! What the command line says, resolved once into the settings each part of a run takes: the
//! analysis, the container names, the kernel filter, and for a live run all of it together
//! ([`LiveSettings`]), so that no part of a live run reads the command line itself.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::live_demo::DemoOptions;
use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::filter::FilterSpec;
use crate::cgroups::ContainerFiles;
use crate::cli::{Cli, DEFAULT_LISTEN};
use crate::kernel::KernelOptions;
use crate::metrics::{MetricsConfig, OtlpSettings};
use crate::pipeline::PipelineOptions;

pub(super) fn diagnosis_config(cli: &Cli) -> DiagnosisConfig {
    DiagnosisConfig {
        heavy_min_bytes: (cli.heavy_mb * 1e6) as u64,
        heavy_min_bps: cli.heavy_mbps * 1e6,
        ..DiagnosisConfig::default()
    }
}

/// Where container names are read from: the runtimes' usual files, or what the command line
/// (or the demo's own files) says instead.
pub(super) fn container_files(cli: &Cli) -> ContainerFiles {
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

pub(super) fn filter_spec(cli: &Cli) -> FilterSpec {
    FilterSpec { cgroups: cli.cgroup.clone(), containers: cli.container.clone(), netns: cli.netns.clone() }
}

/// The kernel source's options; its filter stays open until resolved against the host.
fn kernel_options(cli: &Cli) -> KernelOptions {
    KernelOptions {
        sample_interval: Duration::from_millis(cli.sample_ms),
        hook_mode: cli.hooks,
        ring_bytes: cli.ring_kib.saturating_mul(1024),
        filter: Default::default(),
        // The same "heavy" as for TCP flows, in bytes per second.
        udp_heavy_bytes_per_sec: (cli.heavy_mbps * 1e6 / 8.0) as u64,
        udp: !cli.no_udp,
        probe_always_attached: cli.probe_always_attached,
        probe_windows_always: cli.probe_windows_always,
        btf_file: cli.btf.clone(),
    }
}

/// The OTLP export `--otlp` asks for: the command line's headers, then the environment's.
fn otlp_settings(cli: &Cli) -> Option<OtlpSettings> {
    let endpoint = cli.otlp.clone()?;
    let from_env = std::env::var(crate::metrics::otlp::HEADERS_VARIABLE)
        .map(|v| crate::metrics::otlp::headers_from_env(&v))
        .unwrap_or_default();
    Some(OtlpSettings {
        endpoint,
        headers: cli.otlp_header.iter().cloned().chain(from_env).collect(),
        ca_file: cli.otlp_ca_file.clone(),
        interval: cli.otlp_interval,
        queue_requests: cli.otlp_queue,
    })
}

/// Who shows the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Front {
    Tui,
    Json,
    /// Nothing but the recorder and the metrics.
    Headless,
}

impl Front {
    fn of(cli: &Cli, headless: bool) -> Self {
        if headless {
            Self::Headless
        } else if cli.json || !std::io::stdout().is_terminal() {
            Self::Json
        } else {
            Self::Tui
        }
    }

    /// Whether lines on stderr are seen (no terminal UI draws over them).
    pub(super) fn says_on_stderr(self) -> bool {
        self != Self::Tui
    }
}

/// What the command asks of a live run: `cctrace` (the terminal UI or JSON Lines), `cctrace
/// record`, `cctrace serve`, `cctrace demo`.
pub(super) struct LiveRun<'c> {
    /// Where the run is recorded.
    record: Option<PathBuf>,
    /// Nothing owns the terminal (`record`, `serve`): a few lines on stderr say what runs.
    headless: bool,
    /// Where the metrics are served.
    listen: Option<SocketAddr>,
    demo: Option<&'c DemoOptions>,
}

impl<'c> LiveRun<'c> {
    /// `cctrace` and `cctrace demo`: the terminal UI, or JSON Lines.
    pub(super) fn trace(cli: &Cli, demo: Option<&'c DemoOptions>) -> Self {
        Self { record: cli.record.clone(), headless: false, listen: cli.listen, demo }
    }

    /// `cctrace record FILE`.
    pub(super) fn record(cli: &Cli, file: &std::path::Path) -> Result<Self> {
        anyhow::ensure!(cli.record.is_none(), "`cctrace record FILE` records to FILE: --record is not needed");
        Ok(Self { record: Some(file.to_path_buf()), headless: true, listen: cli.listen, demo: None })
    }

    /// `cctrace serve`: metrics at the default address unless only OTLP was asked for.
    pub(super) fn serve(cli: &Cli) -> Self {
        let listen = if cli.otlp.is_none() { Some(cli.listen.unwrap_or(DEFAULT_LISTEN)) } else { cli.listen };
        Self { record: cli.record.clone(), headless: true, listen, demo: None }
    }
}

/// Where a live run is recorded.
pub(super) struct RecordSettings {
    pub(super) path: PathBuf,
    /// Addresses, names and ids replaced as they are written (`--anonymize`).
    pub(super) anonymize: bool,
}

/// The metrics a live run exports: served at `listen`, sent to an OTLP collector, or both.
pub(super) struct MetricsSettings {
    pub(super) listen: Option<SocketAddr>,
    pub(super) config: MetricsConfig,
    pub(super) otlp: Option<OtlpSettings>,
}

/// A live run's settings, resolved once from the command line and what the command asks: each
/// part of the run takes its own.
pub(super) struct LiveSettings<'c> {
    pub(super) front: Front,
    /// JSON Lines print every kernel sample too (`--events`).
    pub(super) events: bool,
    pub(super) kernel: KernelOptions,
    pub(super) filter: FilterSpec,
    pub(super) containers: ContainerFiles,
    /// Deep mode's twins for the `--netns` namespaces.
    pub(super) deep: bool,
    pub(super) diagnosis: DiagnosisConfig,
    /// The tick (`--interval`) and `--duration`.
    pub(super) pipeline: PipelineOptions,
    pub(super) record: Option<RecordSettings>,
    pub(super) metrics: MetricsSettings,
    pub(super) demo: Option<&'c DemoOptions>,
}

impl<'c> LiveSettings<'c> {
    /// The settings `what` runs with; what fails before anything is set up fails here: the
    /// metrics address, `--anonymize` without a recording.
    pub(super) fn resolve(cli: &Cli, what: LiveRun<'c>) -> Result<Self> {
        if let Some(addr) = what.listen {
            crate::metrics::check_listen(addr, cli.allow_non_loopback)?;
        }
        anyhow::ensure!(
            !cli.anonymize || what.record.is_some(),
            "--anonymize applies to what is recorded (--record FILE, cctrace record), exported or reported"
        );
        Ok(Self {
            front: Front::of(cli, what.headless),
            events: cli.events,
            kernel: kernel_options(cli),
            filter: filter_spec(cli),
            containers: container_files(cli),
            deep: cli.deep,
            diagnosis: diagnosis_config(cli),
            pipeline: PipelineOptions {
                tick: Duration::from_millis(cli.interval),
                duration: cli.duration,
                ..PipelineOptions::default()
            },
            record: what.record.map(|path| RecordSettings { path, anonymize: cli.anonymize }),
            metrics: MetricsSettings {
                listen: what.listen,
                config: MetricsConfig { top_flagged: cli.top_flagged, max_groups: cli.max_groups },
                otlp: otlp_settings(cli),
            },
            demo: what.demo,
        })
    }
}
