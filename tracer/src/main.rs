//! `cctrace`: see every TCP flow's congestion control live, across all network namespaces.
//!
//! This only parses the command line; [`tracer::app`] runs what it asks for.

use std::process::ExitCode;

use clap::Parser;
use tracer::cli::Cli;

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
        eprintln!("cctrace: {}", tracer::cli::values::one_line(&e.to_string()));
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    match parse_cli() {
        Ok(cli) => tracer::app::main(cli),
        Err(code) => code,
    }
}
