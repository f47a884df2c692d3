//! What a recording becomes after the fact: rows (CSV, JSON Lines) and a per-flow summary, a
//! Perfetto trace, a self-contained HTML report, each optionally anonymized. Everything here
//! works over [`Entry`] values, re-running the analysis through [`replay()`] so rates and
//! verdicts are those of the live run.

pub mod flows;
pub mod perfetto;
pub mod replay;
pub mod report;
pub mod table;

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::schema::SampleRecord;
use crate::export::flows::{wall_clock, FlowLog, FlowSummary};
use crate::export::replay::{new_analysis, replay, Step};
use crate::export::table::CsvTable;
use crate::recording::entry::Entry;

/// Row formats of `cctrace export`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One row per sample; columns are the JSON names (`owner.comm`, `container.name`).
    Csv,
    /// One `SampleRecord` JSON object per sample, as `cctrace --json --events` prints them.
    Jsonl,
    /// Chrome trace JSON for ui.perfetto.dev and chrome://tracing.
    Perfetto,
}

/// `cctrace export`: `entries` as `format` into `out`. `summary` writes one row per flow
/// (CSV or JSON Lines) instead of one per sample.
pub fn export(
    entries: impl IntoIterator<Item = Entry>,
    format: Format,
    summary: bool,
    diagnosis: DiagnosisConfig,
    out: &mut dyn Write,
) -> Result<()> {
    match (format, summary) {
        (Format::Perfetto, true) => bail!("--summary is for csv and jsonl"),
        (Format::Perfetto, false) => perfetto::write(entries, diagnosis, out),
        (_, true) => write_summary(entries, format, diagnosis, out),
        (_, false) => write_rows(entries, format, diagnosis, out),
    }
}

/// Where rows go.
#[allow(clippy::large_enum_variant)] // one per export
enum Sink<W: Write> {
    Csv(CsvTable<W>),
    Jsonl(W, Vec<u8>),
}

impl<W: Write> Sink<W> {
    fn row(&mut self, record: &SampleRecord) -> Result<()> {
        match self {
            Self::Csv(t) => t.row(record),
            Self::Jsonl(out, line) => {
                line.clear();
                json_line(line, record)?;
                out.write_all(line).context("writing JSON Lines")
            }
        }
    }

    fn finish(self) -> Result<()> {
        let mut out = match self {
            Self::Csv(t) => t.finish()?,
            Self::Jsonl(out, _) => out,
        };
        out.flush().context("writing the export")
    }
}

/// One row per sample, with the placement (cgroup, container) known at that moment.
fn write_rows(
    entries: impl IntoIterator<Item = Entry>,
    format: Format,
    diagnosis: DiagnosisConfig,
    out: &mut dyn Write,
) -> Result<()> {
    let out = std::io::BufWriter::new(out);
    let mut sink = match format {
        Format::Csv => Sink::Csv(CsvTable::new(out, &SampleRecord::with_every_part())?),
        _ => Sink::Jsonl(out, Vec::new()),
    };
    let mut clock = wall_clock(None);
    let mut result = Ok(());
    let mut analysis = new_analysis(diagnosis);
    replay(entries, &mut analysis, |a, step| match step {
        Step::Header(h) => clock = wall_clock(Some(h)),
        Step::Sample(s) if result.is_ok() => result = sink.row(&SampleRecord::of(s, &clock, &a.env)),
        _ => {}
    });
    result?;
    sink.finish()
}

fn json_line(buf: &mut Vec<u8>, record: &impl serde::Serialize) -> Result<()> {
    serde_json::to_writer(&mut *buf, record).context("encoding a record")?;
    buf.push(b'\n');
    Ok(())
}

/// The replay of `entries`, gathered per flow.
pub fn flow_log(entries: impl IntoIterator<Item = Entry>, diagnosis: DiagnosisConfig) -> FlowLog {
    let mut log = FlowLog::default();
    let mut analysis = new_analysis(diagnosis);
    replay(entries, &mut analysis, |a, step| log.on_step(a, &step));
    log
}

fn write_summary(
    entries: impl IntoIterator<Item = Entry>,
    format: Format,
    diagnosis: DiagnosisConfig,
    out: &mut dyn Write,
) -> Result<()> {
    let log = flow_log(entries, diagnosis);
    let clock = log.session.clock();
    let rows = log.flows.iter().map(|f| FlowSummary::of(f, &clock));
    if format == Format::Csv {
        let mut t = CsvTable::new(&mut *out, &FlowSummary::with_every_part())?;
        for row in rows {
            t.row(&row)?;
        }
        t.finish()?;
    } else {
        let mut buf = Vec::new();
        for row in rows {
            json_line(&mut buf, &row)?;
        }
        // Heavy UDP flows follow as their own records (`"proto":"udp"`); a CSV's columns are
        // the TCP flows' only.
        for udp in &log.udp {
            json_line(&mut buf, &crate::analysis::schema::Record::UdpFlow(udp.clone()))?;
        }
        out.write_all(&buf).context("writing JSON Lines")?;
    }
    out.flush().context("writing the export")
}

/// Every entry of the recording at `path`, and the byte it was cut off at when it did not end
/// cleanly (a crash or a copy in progress: what is there is still good).
pub fn read_entries(path: &Path) -> Result<(Vec<Entry>, Option<u64>)> {
    let mut reader = crate::recording::Reader::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let entries =
        reader.by_ref().collect::<Result<Vec<_>, _>>().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((entries, reader.truncated()))
}

/// A new output file, readable by its owner only; an existing file is never overwritten.
pub fn create_output(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!("{} exists; not overwriting it", path.display())
        } else {
            anyhow::anyhow!("cannot create {}: {e}", path.display())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::anonymize::anonymize;
    use crate::recording::fixture;

    /// Every export of `entries`, and the report last.
    fn all_outputs(entries: &[Entry]) -> Vec<String> {
        let mut outs = Vec::new();
        for (format, summary) in [
            (Format::Csv, false),
            (Format::Jsonl, false),
            (Format::Csv, true),
            (Format::Jsonl, true),
            (Format::Perfetto, false),
        ] {
            let mut out = Vec::new();
            export(entries.to_vec(), format, summary, DiagnosisConfig::default(), &mut out).expect("export");
            outs.push(String::from_utf8(out).expect("utf8"));
        }
        outs.push(report::render(entries.to_vec(), DiagnosisConfig::default()));
        outs
    }

    #[test]
    fn no_original_name_or_address_is_left_anywhere() {
        let anonymized: Vec<Entry> = anonymize(fixture::entries()).collect();
        let json = serde_json::to_string(&anonymized).expect("json");
        let mut outputs = all_outputs(&anonymized);
        outputs.push(json);
        for original in fixture::originals() {
            for out in &outputs {
                // The report escapes markup: look for both spellings.
                let escaped = report::escape(&original);
                assert!(
                    !out.contains(&original) && !out.contains(&escaped),
                    "{original:?} left in:\n{}",
                    &out[..out.len().min(400)]
                );
            }
        }
        // Still a useful recording: the lossy flows are flagged, with a fix naming pseudonyms.
        let report = &outputs[5];
        assert!(
            report.contains("netns-1") && report.contains("container-1") && report.contains("host-1"),
            "pseudonyms shown"
        );
        let Entry::Header(h) = &anonymized[0] else { panic!("header first") };
        assert!(h.anonymized);
        assert_eq!(h.filters, ["container=container-1"]);
    }

    fn run(format: Format, summary: bool) -> String {
        let mut out = Vec::new();
        export(fixture::entries(), format, summary, DiagnosisConfig::default(), &mut out).expect("export");
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn csv_has_one_row_per_sample_under_the_schema_names() {
        let text = run(Format::Csv, false);
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = r.headers().expect("header").iter().map(String::from).collect();
        for name in ["reason", "time", "ts_ns", "src", "sport", "owner.comm", "cwnd", "ssthresh", "rtt", "cgroup"] {
            assert!(header.iter().any(|h| h == name), "{name} in {header:?}");
        }
        assert!(header.iter().any(|h| h == "container.name"));
        let rows: Vec<csv::StringRecord> = r.records().map(|r| r.expect("row")).collect();
        assert_eq!(rows.len(), fixture::sample_count(&fixture::entries()));
        let col = |name: &str| header.iter().position(|h| h == name).expect("column");
        let first = &rows[0];
        // The header's clock: monotonic start maps to its unix start.
        assert_eq!(first[col("time")].parse::<f64>().expect("time"), fixture::START_UNIX_NS as f64 / 1e9);
        assert!(rows.iter().any(|r| &r[col("container.name")] == fixture::EVIL_CONTAINER));
        assert!(rows.iter().any(|r| &r[col("owner.comm")] == fixture::EVIL_COMM));
    }

    #[test]
    fn jsonl_rows_are_exactly_the_sample_records() {
        let text = run(Format::Jsonl, false);
        let entries = fixture::entries();
        assert_eq!(text.lines().count(), fixture::sample_count(&entries));
        let first: SampleRecord = serde_json::from_str(text.lines().next().expect("a line")).expect("a SampleRecord");
        let Entry::Samples { samples } = &entries[2] else { panic!("samples third") };
        let clock = wall_clock(Some(&fixture::header()));
        assert_eq!(first, SampleRecord::of(&samples[0], &clock, &fixture::env()));
    }

    #[test]
    fn summary_has_one_row_per_flow_with_the_verdicts() {
        let text = run(Format::Csv, true);
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let header = r.headers().expect("header").clone();
        let rows: Vec<csv::StringRecord> = r.records().map(|r| r.expect("row")).collect();
        assert_eq!(rows.len(), 6, "one per flow");
        let col = |name: &str| header.iter().position(|h| h == name).expect(name);
        let cubic = rows.iter().find(|r| &r[col("cookie")] == "101").expect("cubic row");
        assert_eq!(&cubic[col("flagged")], "true");
        assert_eq!(&cubic[col("limited_by")], "cwnd");
        assert_eq!(&cubic[col("cc")], "cubic");
        let ratio: f64 = cubic[col("retrans_ratio")].parse().expect("ratio");
        assert!((ratio - 0.02).abs() < 0.001, "{ratio}");
        let mean: f64 = cubic[col("mean_throughput_bps")].parse().expect("mean");
        assert!((mean - 4_000_000.0).abs() < 100_000.0, "{mean}");
        assert_eq!(&cubic[col("min_rtt_ms")], "30.0");
        for name in [
            "first_time",
            "last_time",
            "duration_s",
            "bytes_sent",
            "bytes_acked",
            "bytes_retrans",
            "max_throughput_bps",
            "min_srtt_ms",
            "mean_srtt_ms",
            "mean_cwnd",
            "max_cwnd",
            "container.name",
            "owner.comm",
            "verdict",
        ] {
            col(name);
        }
        let jsonl = run(Format::Jsonl, true);
        assert_eq!(jsonl.lines().count(), 6);
    }

    #[test]
    fn output_files_are_private_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("cctrace-export-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("out.csv");
        let _ = std::fs::remove_file(&path);
        drop(create_output(&path).expect("created"));
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        let err = create_output(&path).expect_err("exists").to_string();
        assert!(err.ends_with("exists; not overwriting it") && !err.contains('\n'), "{err}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn exports_read_what_the_recorder_wrote() {
        let dir = std::env::temp_dir().join(format!("cctrace-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("session.cctrace");
        let entries = fixture::entries();
        let Some(crate::recording::Entry::Header(header)) = entries.first().cloned() else { panic!("header first") };
        let file = crate::recording::NewFile::create(&path).expect("create");
        let writer = crate::recording::RecordWriter::start(file, &header).expect("start");
        for e in entries.iter().skip(1).cloned() {
            writer.write(e);
        }
        drop(writer);
        let (read, truncated) = read_entries(&path).expect("read");
        assert_eq!(read, entries);
        assert_eq!(truncated, None, "the fixture ends with End");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
