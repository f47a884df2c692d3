//! What recordings cost: bytes per sample and per flow-minute of a synthetic session, and the
//! time to write and to read back a one-hour, 100-flow recording. Prints figures; asserts
//! nothing. The synthetic flows change only a few fields per sample, so they compress far better
//! than real traffic (the demo's lossy path records about 60 bytes per sample).
//!
//! `cargo bench -p tracer --bench recording`

mod synthetic;

use std::time::Instant;

use tracer::analysis::sample::Sample;
use tracer::recording::entry::{Entry, Header, FORMAT, FORMAT_VERSION};
use tracer::recording::{Reader, RecordWriter};
use tracer::source::SourceCounters;

const FLOWS: u64 = 100;
const SECONDS: u64 = 3600;
/// The kernel's default sampling interval per flow: ten samples a second.
const SAMPLES_PER_SEC: u64 = 10;

fn header() -> Header {
    Header {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        cctrace_version: env!("CARGO_PKG_VERSION").into(),
        host: "bench".into(),
        kernel: "6.8.0".into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        start_monotonic_ns: 0,
        sample_interval_ms: 100,
        tick_ms: 1000,
        filters: vec![],
        source: "synthetic".into(),
        hooks: vec![],
        heavy_min_bytes: None,
        heavy_min_bps: None,
        anonymized: false,
    }
}

/// Counts what it is given.
#[derive(Clone, Default)]
struct Counting(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl std::io::Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.fetch_add(buf.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The session's entries of second `s`: one batch per 100 ms of every flow's samples, a tick.
fn second(s: u64, mut emit: impl FnMut(Entry)) {
    for tenth in 0..SAMPLES_PER_SEC {
        let ts = (s * SAMPLES_PER_SEC + tenth + 1) * 100_000_000;
        let batch: Vec<Sample> = (0..FLOWS).map(|c| synthetic::sample(c, ts, ts / 1_000 * (c % 10 + 1))).collect();
        emit(Entry::Samples { samples: batch });
    }
    emit(Entry::Tick {
        now_ns: (s + 1) * 1_000_000_000,
        counters: SourceCounters { received: (s + 1) * FLOWS * SAMPLES_PER_SEC, ..Default::default() },
    });
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let path = std::env::temp_dir().join(format!("cctrace-bench-{}.cctrace", std::process::id()));
    let _ = std::fs::remove_file(&path);

    // Write the hour to a file, as `--record` does (the writer thread compresses).
    let start = Instant::now();
    let file = tracer::recording::NewFile::create(&path).expect("new file");
    let mut w = RecordWriter::start(file, &header()).expect("writer");
    for s in 0..SECONDS {
        second(s, |e| w.write(e));
        // Keep the queue from overflowing: a live source yields this over an hour, not at once.
        while w.status().entries() + 64 < 1 + (s + 1) * (SAMPLES_PER_SEC + 1) {
            std::thread::yield_now();
        }
    }
    rt.block_on(w.close()).expect("closed");
    let write_time = start.elapsed();
    let bytes = std::fs::metadata(&path).expect("written").len();
    let samples = FLOWS * SAMPLES_PER_SEC * SECONDS;
    let (dropped, _) = w.status().dropped();

    // The uncompressed JSON Lines, for the ratio.
    let raw = Counting::default();
    let mut json = std::io::BufWriter::new(raw.clone());
    for s in 0..60 {
        second(s, |e| {
            serde_json::to_writer(&mut json, &e).expect("json");
            std::io::Write::write_all(&mut json, b"\n").expect("write");
        });
    }
    drop(json);
    let raw_per_sample =
        raw.0.load(std::sync::atomic::Ordering::Relaxed) as f64 / (FLOWS * SAMPLES_PER_SEC * 60) as f64;

    // Open and read it all back.
    let start = Instant::now();
    let mut reader = Reader::open(&path).expect("open");
    let first = reader.next_entry().expect("header");
    let open_time = start.elapsed();
    assert!(matches!(first, Some(Entry::Header(_))));
    let mut read_samples = 0u64;
    for entry in reader.by_ref() {
        if let Entry::Samples { samples } = entry.expect("readable") {
            read_samples += samples.len() as u64;
        }
    }
    let read_time = start.elapsed();
    let _ = std::fs::remove_file(&path);

    println!("recording: {FLOWS} flows x {SECONDS} s at {SAMPLES_PER_SEC} samples/s each = {samples} samples");
    println!(
        "recording: {bytes} bytes ({:.1} MiB), {:.1} bytes/sample compressed, {:.0} bytes/sample as JSON ({:.1}:1)",
        bytes as f64 / 1048576.0,
        bytes as f64 / samples as f64,
        raw_per_sample,
        raw_per_sample / (bytes as f64 / samples as f64),
    );
    println!(
        "recording: {:.1} KiB per flow-minute ({} entries dropped while writing)",
        bytes as f64 / (FLOWS * SECONDS / 60) as f64 / 1024.0,
        dropped
    );
    println!(
        "recording: write {:.2} s ({:.0} samples/s)",
        write_time.as_secs_f64(),
        samples as f64 / write_time.as_secs_f64()
    );
    println!(
        "recording: open (magic + header) {:.3} ms, read all {:.2} s ({:.0} samples/s, {read_samples} samples)",
        open_time.as_secs_f64() * 1e3,
        read_time.as_secs_f64(),
        read_samples as f64 / read_time.as_secs_f64()
    );
    use cctrace_lab::figures::{number, Row, Section};
    let mut section = Section::new("recording", "Recordings: size and speed").about(&format!(
        "`cargo bench -p tracer --bench recording`: a synthetic hour of {FLOWS} flows at {SAMPLES_PER_SEC} samples \
         a second each, written as `--record` writes it and read back whole. Synthetic flows change only a few \
         fields a sample, so they compress far better than real traffic."
    ));
    section.row(Row::new(
        "a sample, compressed (as JSON Lines)",
        format!("{:.1} B ({:.0} B)", bytes as f64 / samples as f64, raw_per_sample),
    ));
    section.row(Row::new("a flow-minute", format!("{:.1} KiB", bytes as f64 / (FLOWS * SECONDS / 60) as f64 / 1024.0)));
    section.row(Row::new(
        "writing the hour / reading it back",
        format!(
            "{:.1} s / {:.1} s ({} / {} samples a second)",
            write_time.as_secs_f64(),
            read_time.as_secs_f64(),
            number((samples as f64 / write_time.as_secs_f64()).round()),
            number((read_samples as f64 / read_time.as_secs_f64()).round())
        ),
    ));
    section.write().map(drop)
}
