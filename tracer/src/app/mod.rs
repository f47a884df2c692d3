//! What each subcommand assembles and runs, once the command line is parsed: files made from a
//! recording (`offline`), `cctrace fix` ([`crate::fix`]), a replay (`replay`) and live
//! tracing (`live`); `main.rs` only parses and hands over.

mod lines;
mod live;
mod offline;
mod replay;
#[cfg(test)]
mod same_figures_tests;
mod settings;

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cgroups::{cgroup2_mount, CgroupResolver};
use crate::cli::{Cli, Command};

/// Run what `cli` asks for; the exit code says how it went, and any error was printed as one
/// line on stderr.
pub fn main(cli: Cli) -> ExitCode {
    if let Some(result) = offline::after_the_fact(&cli) {
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
        crate::cgroups::set_system_resolver(CgroupResolver::new(cgroup2_mount(), settings::container_files(&cli)));
        let args = crate::fix::FixArgs {
            netns: cli.netns.clone(),
            containers: cli.container.clone(),
            cc: cc.clone(),
            live: *live,
            persist: *persist,
            yes: *yes,
            host_namespace: *host_namespace,
            undo: *undo,
        };
        return match crate::fix::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                log::info!("fix failed: {e:#}");
                eprintln!("cctrace: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let result = runtime.block_on(live::run(&cli));
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
