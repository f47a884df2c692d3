//! `cctrace export` and `cctrace report`: files made from a recording, offline, with no
//! privileges and no async runtime.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use super::settings::diagnosis_config;
use crate::cli::Cli;
use crate::recording::entry::Entry;

/// A recording's entries (those before a truncation, said on stderr), anonymized on request.
fn read(file: &Path, anonymize: bool) -> Result<Vec<Entry>> {
    let (entries, truncated) = crate::export::read_entries(file)?;
    if let Some(at) = truncated {
        eprintln!("cctrace: recording truncated at byte {at}: using the {} entries before it", entries.len());
    }
    Ok(if anonymize { crate::recording::anonymize::anonymize(entries).collect() } else { entries })
}

/// `cctrace export`: to `output`, or standard output for none or `-`.
pub(super) fn export(
    cli: &Cli,
    file: &Path,
    format: crate::export::Format,
    summary: bool,
    output: Option<&Path>,
) -> Result<()> {
    if format == crate::export::Format::Perfetto && summary {
        anyhow::bail!("--summary is for --format csv or jsonl");
    }
    let entries = read(file, cli.anonymize)?;
    let mut out: Box<dyn Write> = match output {
        None => Box::new(std::io::stdout().lock()),
        Some(p) if p.as_os_str() == "-" => Box::new(std::io::stdout().lock()),
        Some(p) => Box::new(crate::export::create_output(p)?),
    };
    crate::export::export(entries, format, summary, diagnosis_config(cli), &mut out)
}

/// `cctrace report`: the HTML page to `output`.
pub(super) fn report(cli: &Cli, file: &Path, output: &Path) -> Result<()> {
    let entries = read(file, cli.anonymize)?;
    let mut out = crate::export::create_output(output)?;
    out.write_all(crate::export::report::render(entries, diagnosis_config(cli)).as_bytes())
        .with_context(|| format!("writing {}", output.display()))
}
