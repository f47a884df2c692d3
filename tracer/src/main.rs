//! `cctrace`: see every TCP flow's congestion control live, across all network namespaces.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tracer::diagnosis::DiagnosisConfig;
use tracer::kernel::{HookMode, HookStatus, KernelOptions, KernelSource};
use tracer::output::json::{self, JsonOptions};
use tracer::signals::Shutdown;
use tracer::source::EventSource;

#[derive(Parser, Debug)]
#[command(name = "cctrace", version, about = "Live TCP congestion-control tracer (eBPF)")]
struct Cli {
    /// Print JSON Lines (one object per flow per interval) instead of the terminal UI.
    #[arg(long)]
    json: bool,
    /// Report interval in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..))]
    interval: u64,
    /// Kernel sampling interval per flow in milliseconds (retransmissions, CA state changes,
    /// opens and closes are always sampled immediately).
    #[arg(long, default_value_t = 100, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    sample_ms: u64,
    /// Stop after this many seconds.
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// With --json, also print every kernel sample as it arrives.
    #[arg(long, requires = "json")]
    events: bool,
    /// Which tracepoint flavour to attach.
    #[arg(long, value_enum, default_value_t = HookMode::Auto)]
    hooks: HookMode,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {}

fn duration_arg(secs: Option<f64>) -> Result<Option<Duration>> {
    match secs {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => anyhow::bail!("--duration must be a positive number of seconds, got {s}"),
    }
}

async fn run_json(cli: &Cli) -> Result<()> {
    let duration = duration_arg(cli.duration)?;
    let mut shutdown = Shutdown::install()?;
    let opts = KernelOptions { sample_interval: Duration::from_millis(cli.sample_ms), hook_mode: cli.hooks };
    let mut source = KernelSource::start(&opts)?;
    for h in &source.info().hooks {
        if let HookStatus::Disabled(_) = h.status {
            eprintln!("cctrace: {}", h.line());
        }
    }
    for m in &source.info().missing_fields {
        eprintln!("cctrace: kernel field unavailable, reported as 0: {m}");
    }
    eprintln!("cctrace: tracing TCP in all network namespaces ({})", source.describe());
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let jopts = JsonOptions {
        interval: Duration::from_millis(cli.interval),
        diagnosis: DiagnosisConfig::default(),
        duration,
        events: cli.events,
    };
    json::run(&mut source, tracer::host::environment(), &jopts, &mut out, shutdown.wait()).await
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
    let result = runtime.block_on(async {
        match &cli.command {
            None if cli.json || !std::io::stdout().is_terminal() => run_json(&cli).await,
            None => run_json(&cli).await,
            Some(_) => unreachable!("no subcommands yet"),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cctrace: {e:#}");
            ExitCode::FAILURE
        }
    }
}
