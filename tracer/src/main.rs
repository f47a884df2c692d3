//! `cctrace`: see every TCP flow's congestion control live, across all network namespaces.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use tracer::analysis::diagnosis::DiagnosisConfig;
use tracer::kernel::{HookMode, HookStatus, KernelOptions, KernelSource};
use tracer::output::json::{self, JsonOptions};
use tracer::signals::Shutdown;
use tracer::source::EventSource;

#[derive(Parser, Debug)]
#[command(name = "cctrace", version, about = "Live TCP congestion-control tracer (eBPF)")]
struct Cli {
    /// Print JSON Lines (one object per flow per interval) instead of the terminal UI
    /// (the default when stdout is not a terminal).
    #[arg(long, global = true)]
    json: bool,
    /// Report interval in milliseconds.
    #[arg(long, global = true, default_value_t = 1000, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..))]
    interval: u64,
    /// Kernel sampling interval per flow in milliseconds (retransmissions, CA state changes,
    /// opens and closes are always sampled immediately).
    #[arg(long, global = true, default_value_t = 100, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    sample_ms: u64,
    /// Stop after this many seconds.
    #[arg(long, global = true, value_name = "S")]
    duration: Option<f64>,
    /// With --json, also print every kernel sample as it arrives.
    #[arg(long, global = true, requires = "json")]
    events: bool,
    /// Which tracepoint flavour to attach.
    #[arg(long, global = true, value_enum, default_value_t = HookMode::Auto)]
    hooks: HookMode,
    /// Kernel ring-buffer size in KiB (a power of two); samples that do not fit are counted
    /// as lost.
    #[arg(long, global = true, default_value_t = 8192, value_name = "KIB", hide = true)]
    ring_kib: u32,
    /// A flow counts as heavy (flaggable, shown by default) once it moved this many MB...
    #[arg(long, global = true, default_value_t = 0.5, value_name = "MB")]
    heavy_mb: f64,
    /// ...and moves at least this many Mbit/s (or keeps its congestion window full).
    #[arg(long, global = true, default_value_t = 1.0, value_name = "MBIT/S")]
    heavy_mbps: f64,
    /// Write log messages to this file (nothing is logged to the terminal while the UI is up).
    #[arg(long, global = true, value_name = "PATH")]
    log_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build a local lossy WAN path (network namespaces, 30 ms RTT, random loss, 200 Mbit/s)
    /// with CUBIC and BBR streams and bulk transfers over it, and trace them.
    Demo {
        #[command(flatten)]
        opts: tracer::demo::DemoOptions,
    },
}

fn duration_arg(secs: Option<f64>) -> Result<Option<Duration>> {
    match secs {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => anyhow::bail!("--duration must be a positive number of seconds, got {s}"),
    }
}

fn diagnosis_config(cli: &Cli) -> Result<DiagnosisConfig> {
    anyhow::ensure!(cli.heavy_mb.is_finite() && cli.heavy_mb >= 0.0, "--heavy-mb must be a non-negative number");
    anyhow::ensure!(cli.heavy_mbps.is_finite() && cli.heavy_mbps >= 0.0, "--heavy-mbps must be a non-negative number");
    Ok(DiagnosisConfig {
        heavy_min_bytes: (cli.heavy_mb * 1e6) as u64,
        heavy_min_bps: cli.heavy_mbps * 1e6,
        ..DiagnosisConfig::default()
    })
}

fn start_kernel(cli: &Cli) -> Result<KernelSource> {
    let opts = KernelOptions {
        sample_interval: Duration::from_millis(cli.sample_ms),
        hook_mode: cli.hooks,
        ring_bytes: cli.ring_kib.saturating_mul(1024),
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
    if let Err(why) = &source.info().snapshot {
        eprintln!("cctrace: no start-up snapshot of existing sockets ({why}); idle flows appear when they next send");
    }
    Ok(source)
}

async fn run_json(cli: &Cli, source: &mut KernelSource, shutdown: &mut Shutdown) -> Result<()> {
    eprintln!("cctrace: tracing TCP in all network namespaces ({})", source.describe());
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let jopts = JsonOptions {
        interval: Duration::from_millis(cli.interval),
        diagnosis: diagnosis_config(cli)?,
        duration: duration_arg(cli.duration)?,
        events: cli.events,
        env_refresh: Some(tracer::host::environment),
    };
    json::run(source, tracer::host::environment(), &jopts, &mut out, shutdown.wait()).await
}

async fn run_tui(cli: &Cli, source: &mut KernelSource, shutdown: &mut Shutdown, demo: Option<&str>) -> Result<()> {
    let described = match demo {
        Some(d) => format!("{} · {d}", source.describe()),
        None => source.describe(),
    };
    let header = tracer::tui::HeaderInfo::this_host(described);
    let opts = tracer::tui::TuiOptions {
        env_refresh: Some(tracer::host::environment),
        diagnosis: diagnosis_config(cli)?,
        ..Default::default()
    };
    let duration = duration_arg(cli.duration)?;
    let stop = async {
        tokio::select! {
            _ = shutdown.wait() => {}
            _ = async {
                match duration {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    };
    tracer::tui::run(source, header, tracer::host::environment(), opts, stop).await
}

async fn run(cli: &Cli) -> Result<()> {
    let duration = duration_arg(cli.duration)?;
    diagnosis_config(cli)?;
    let mut shutdown = Shutdown::install()?;
    // Attach first so the demo's connections are seen from their first packet.
    let mut source = start_kernel(cli)?;
    // The demo lab exists only while this function runs: its Drop removes the namespaces on
    // every exit path (end of --duration, Ctrl-C, SIGTERM, an error below).
    let demo = match &cli.command {
        Some(Command::Demo { opts }) => {
            let lab = tracer::demo::DemoLab::start(opts, duration.unwrap_or(cctrace_lab::MAX_DURATION))?;
            if cli.json {
                eprintln!("cctrace: {}", lab.description);
            }
            Some(lab)
        }
        None => None,
    };
    let result = if cli.json || !std::io::stdout().is_terminal() {
        run_json(cli, &mut source, &mut shutdown).await
    } else {
        run_tui(cli, &mut source, &mut shutdown, demo.as_ref().map(|d| d.description.as_str())).await
    };
    drop(source);
    drop(demo);
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

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    let result = runtime.block_on(run(&cli));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cctrace: {e:#}");
            ExitCode::FAILURE
        }
    }
}
