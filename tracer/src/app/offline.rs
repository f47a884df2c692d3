//! `cctrace export` and `cctrace report`: files made from a recording, offline, with no
//! privileges and no async runtime; and the demo's relay stand-in.

use anyhow::{Context, Result};
use clap::CommandFactory as _;

use super::settings::diagnosis_config;
use crate::cli::{Cli, Command};

/// `cctrace export` and `cctrace report`: offline, no privileges, no runtime.
pub(super) fn after_the_fact(cli: &Cli) -> Option<Result<()>> {
    use std::io::Write;
    let read = |file: &std::path::Path, anonymize: bool| -> Result<Vec<crate::recording::entry::Entry>> {
        let (entries, truncated) = crate::export::read_entries(file)?;
        if let Some(at) = truncated {
            eprintln!("cctrace: recording truncated at byte {at}: using the {} entries before it", entries.len());
        }
        Ok(if anonymize { crate::recording::anonymize::anonymize(entries).collect() } else { entries })
    };
    match cli.command.as_ref()? {
        Command::Export { file, format, summary, output } => Some((|| {
            if *format == crate::export::Format::Perfetto && *summary {
                anyhow::bail!("--summary is for --format csv or jsonl");
            }
            let entries = read(file, cli.anonymize)?;
            let mut out: Box<dyn Write> = match output.as_deref() {
                None => Box::new(std::io::stdout().lock()),
                Some(p) if p.as_os_str() == "-" => Box::new(std::io::stdout().lock()),
                Some(p) => Box::new(crate::export::create_output(p)?),
            };
            crate::export::export(entries, *format, *summary, diagnosis_config(cli), &mut out)
        })()),
        Command::Report { file, output } => Some((|| {
            let entries = read(file, cli.anonymize)?;
            let mut out = crate::export::create_output(output)?;
            out.write_all(crate::export::report::render(entries, diagnosis_config(cli)).as_bytes())
                .with_context(|| format!("writing {}", output.display()))
        })()),
        Command::Completions { shell } => {
            Some(crate::cli::docs::completions(Cli::command(), *shell, &mut std::io::stdout().lock()))
        }
        Command::Man => Some(crate::cli::docs::man_page(Cli::command(), &mut std::io::stdout().lock())),
        Command::Record { .. } | Command::Replay { .. } | Command::Fix { .. } | Command::Serve => None,
        #[cfg(feature = "demo")]
        Command::Demo { .. } => None,
        #[cfg(feature = "demo")]
        Command::DemoRelay { args } => Some(cctrace_lab::relay::relay_main(args)),
    }
}
