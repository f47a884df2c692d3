//! What each subcommand assembles and runs, once the command line is parsed: files made from a
//! recording (`offline`), `cctrace fix` ([`crate::fix`]), a replay (`replay`) and live
//! tracing (`live`, the demo's parts in `live_demo`); `main.rs` only parses and hands over, and
//! [`main`] is the one place a command is told apart.

mod lines;
mod live;
mod live_demo;
mod offline;
mod replay;
#[cfg(test)]
mod same_figures_tests;
mod settings;
mod show;

use std::future::Future;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::CommandFactory as _;

use crate::cgroups::{cgroup2_mount, CgroupResolver};
use crate::cli::{Cli, Command};
use crate::host::mounts::HostMounts;
use settings::LiveRun;

/// Run what `cli` asks for; the exit code says how it went, and any error was printed as one
/// line on stderr.
pub fn main(cli: Cli) -> ExitCode {
    // First, while this is the only thread: run from the image, look at the host's files.
    let mounts = crate::host::mounts::enter_if_asked();
    if let (HostMounts::Refused(why), true) = (&mounts, looks_at_the_host(&cli)) {
        eprintln!("cctrace: only this container's files are in view (container names, owners and the fix's state may be missing): {why}");
    }
    let Some(command) = &cli.command else { return in_runtime(&cli, live::run(&cli, LiveRun::trace(&cli, None))) };
    match command {
        // Offline: no privileges, no runtime, no log.
        Command::Export { file, format, summary, output } => {
            offline(offline::export(&cli, file, *format, *summary, output.as_deref()))
        }
        Command::Report { file, output } => offline(offline::report(&cli, file, output)),
        Command::Completions { shell } => {
            offline(crate::cli::docs::completions(Cli::command(), *shell, &mut std::io::stdout().lock()))
        }
        Command::Man => offline(crate::cli::docs::man_page(Cli::command(), &mut std::io::stdout().lock())),
        Command::Check => check(&cli),
        #[cfg(feature = "demo")]
        Command::DemoRelay { args } => offline(cctrace_lab::relay::relay_main(args)),
        Command::Fix { cc, live, persist, yes, host_namespace, undo } => {
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
            fix(&cli, &args)
        }
        Command::Replay { file } => in_runtime(&cli, replay::replay(&cli, file)),
        Command::Record { file } => in_runtime(&cli, async { live::run(&cli, LiveRun::record(&cli, file)?).await }),
        Command::Serve => in_runtime(&cli, live::run(&cli, LiveRun::serve(&cli))),
        #[cfg(feature = "demo")]
        Command::Demo { opts } => in_runtime(&cli, live::run(&cli, LiveRun::trace(&cli, Some(opts)))),
    }
}

/// Whether `cli` traces the host or changes it (and so needs the host's files), rather than
/// reading a recording or printing documentation.
fn looks_at_the_host(cli: &Cli) -> bool {
    matches!(&cli.command, None | Some(Command::Record { .. } | Command::Serve | Command::Fix { .. }))
}

/// The exit of an offline command.
fn offline(result: Result<()>) -> ExitCode {
    let reader_left = |e: &anyhow::Error| {
        let pipe = |io: &std::io::Error| io.kind() == std::io::ErrorKind::BrokenPipe;
        e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>().is_some_and(pipe)
                || c.downcast_ref::<csv::Error>()
                    .is_some_and(|e| matches!(e.kind(), csv::ErrorKind::Io(io) if pipe(io)))
        })
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `cctrace export ... | head`: the reader has what it wanted.
        Err(e) if reader_left(&e) => ExitCode::SUCCESS,
        Err(e) => failed(&e),
    }
}

/// `cctrace check`: the report on stdout, its worst line the exit status.
fn check(cli: &Cli) -> ExitCode {
    let checks = crate::kernel::preflight::checks(cli.btf.as_deref(), cli.hooks);
    for c in &checks {
        println!("{}", c.line());
    }
    ExitCode::from(crate::kernel::preflight::exit_status(&checks))
}

/// `cctrace fix`, with the log and the same container names as tracing (`--container NAME`).
fn fix(cli: &Cli, args: &crate::fix::FixArgs) -> ExitCode {
    if let Err(e) = init_logging(cli.log_file.as_deref()) {
        return failed(&e);
    }
    crate::cgroups::set_system_resolver(CgroupResolver::new(cgroup2_mount(), settings::container_files(cli)));
    match crate::fix::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::info!("fix failed: {e:#}");
            failed(&e)
        }
    }
}

/// A live run or a replay, on the async runtime with the log.
fn in_runtime(cli: &Cli, run: impl Future<Output = Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cctrace: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = init_logging(cli.log_file.as_deref()) {
        return failed(&e);
    }
    let result = runtime.block_on(run);
    // A writer thread blocked on a reader that stopped reading must not hold the exit.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failed(&e),
    }
}

/// The one line an error gets.
fn failed(e: &anyhow::Error) -> ExitCode {
    eprintln!("cctrace: {e:#}");
    ExitCode::FAILURE
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
