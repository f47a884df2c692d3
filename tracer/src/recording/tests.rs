//! Round trips, files cut at every byte, flipped bytes, and the fuzz corpus.

use super::entry::{Entry, Header, FORMAT, FORMAT_VERSION};
use super::reader::{read_all, ReadError};
use super::writer::RecordWriter;
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::tests::sample;
use crate::analysis::schema::SummaryRecord;
use crate::source::SourceCounters;
use crate::test_support::SharedBuf;

pub(crate) fn header() -> Header {
    Header {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        cctrace_version: "0.1.0".into(),
        host: "edge-07".into(),
        kernel: "6.8.0".into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        start_monotonic_ns: 1_000_000_000,
        sample_interval_ms: 100,
        tick_ms: 1000,
        filters: vec![],
        source: "live kernel (6/6 hooks)".into(),
        hooks: vec!["tcp_probe: BTF tracepoint".into()],
        heavy_min_bytes: Some(500_000),
        heavy_min_bps: Some(1e6),
        anonymized: false,
    }
}

fn summary() -> SummaryRecord {
    SummaryRecord {
        source: "live kernel (6/6 hooks)".into(),
        events_received: 12,
        events_lost: 0,
        kernel_emitted: Some(12),
        decode_errors: 0,
        kernel_read_errors: 0,
        flow_map_full: 0,
        events_filtered: 0,
        flows_seen: 3,
        flows_evicted: 0,
        udp: None,
    }
}

/// A small session: host facts, sample batches and ticks, and the end.
pub(crate) fn entries(ticks: u64) -> Vec<Entry> {
    let mut env = Environment { host_netns: 7, ..Environment::default() };
    env.netns_pids.insert(4_026_531_833, 1);
    env.netns_names.insert(4_026_532_000, "lab".into());
    env.netns_cc.insert(4_026_532_000, "cubic".into());
    env.cgroups.insert(1234, crate::analysis::container::CgroupInfo { path: "/system.slice".into(), container: None });
    let mut out = vec![Entry::Host { env }];
    for t in 0..ticks {
        let now = 1_000_000_000 + t * 1_000_000_000;
        out.push(Entry::Samples { samples: (0..3).map(|c| sample(c, now / 1_000_000)).collect() });
        out.push(Entry::Tick { now_ns: now, counters: SourceCounters { received: 3 * (t + 1), ..Default::default() } });
    }
    out.push(Entry::End { summary: summary(), dropped_entries: 0 });
    out
}

/// Record `entries` after the header, closing a frame after each (as a second-long session
/// would), and return the file's bytes.
pub(crate) fn record(entries: &[Entry]) -> Vec<u8> {
    let buf = SharedBuf::default();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut w = RecordWriter::spawn(Box::new(buf.clone()), "test.cctrace".into(), &header()).expect("writer");
    for e in entries {
        w.write(e.clone());
    }
    rt.block_on(w.close()).expect("closed");
    buf.bytes()
}

pub(crate) fn with_header(entries: &[Entry]) -> Vec<Entry> {
    let mut all = vec![Entry::Header(header())];
    all.extend_from_slice(entries);
    all
}

#[test]
fn round_trip() {
    let entries = entries(5);
    let bytes = record(&entries);
    assert_eq!(&bytes[..4], &0x184D_2A5Cu32.to_le_bytes());
    let (read, end) = read_all(&bytes);
    assert_eq!(end.expect("no error"), None, "ended cleanly");
    assert_eq!(read, with_header(&entries));
    // zstd sees the same lines (the skippable frame is skipped).
    let text = zstd::stream::decode_all(&bytes[..]).expect("plain zstd");
    let first: serde_json::Value =
        serde_json::from_slice(text.split(|&b| b == b'\n').next().expect("a line")).expect("json");
    assert_eq!(first["type"], "header");
    assert_eq!(first["format"], "cctrace-recording");
}

#[test]
fn many_frames_a_big_frame_and_a_recompressed_file() {
    // Enough samples for frames of FRAME_BYTES and lines across zstd blocks.
    let mut entries: Vec<Entry> =
        (0..400).map(|i| Entry::Samples { samples: (0..20).map(|c| sample(c, i * 10)).collect() }).collect();
    entries.push(Entry::End { summary: summary(), dropped_entries: 0 });
    let bytes = record(&entries);
    let (read, end) = read_all(&bytes);
    assert_eq!(end.expect("no error"), None);
    assert_eq!(read.len(), entries.len() + 1);
    assert_eq!(read, with_header(&entries));
    // `zstdcat FILE | zstd` keeps it readable: one frame, lines not aligned to anything.
    let plain = zstd::stream::decode_all(&bytes[..]).expect("decodes");
    let again = zstd::stream::encode_all(&plain[..], 19).expect("encodes");
    let (reread, end) = read_all(&again);
    assert_eq!(end.expect("no error"), None);
    assert_eq!(reread, read);
}

#[test]
fn a_file_cut_at_any_byte_yields_a_prefix_and_says_truncated() {
    let entries = with_header(&entries(4));
    let bytes = record(&entries[1..]);
    let mut seen_counts = std::collections::BTreeSet::new();
    for cut in 0..bytes.len() {
        let (read, end) = read_all(&bytes[..cut]);
        let end = end.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(end, Some(cut as u64), "cut at {cut} says where");
        // (A cut in the last frame's checksum still yields every entry.)
        assert!(read.len() <= entries.len(), "cut at {cut}");
        assert_eq!(read[..], entries[..read.len()], "cut at {cut}: a prefix");
        seen_counts.insert(read.len());
    }
    // Nothing before the header's frame, the header after it, everything once the last is whole.
    assert!(seen_counts.contains(&0) && seen_counts.contains(&1), "{seen_counts:?}");
    assert_eq!(seen_counts.last(), Some(&entries.len()), "{seen_counts:?}");
}

#[test]
fn a_cut_inside_a_frame_still_gives_its_complete_blocks() {
    // One frame of many blocks (a quarter MiB of lines), cut in its middle.
    let entries: Vec<Entry> =
        (0..300).map(|i| Entry::Samples { samples: (0..20).map(|c| sample(c, i * 10)).collect() }).collect();
    let buf = SharedBuf::default();
    let w = RecordWriter::spawn(Box::new(buf.clone()), "t".into(), &header()).expect("writer");
    for e in &entries {
        w.write(e.clone());
    }
    drop(w);
    let bytes = buf.bytes();
    let (all, _) = read_all(&bytes);
    let (read, end) = read_all(&bytes[..bytes.len() - 10]);
    assert!(end.expect("no error").is_some());
    assert!(read.len() > all.len() / 2, "{} of {}", read.len(), all.len());
}

#[test]
fn flipped_bytes_are_errors_or_prefixes_never_panics() {
    let entries = with_header(&entries(3));
    let bytes = record(&entries[1..]);
    let mut errors = 0;
    for at in 0..bytes.len() {
        for flip in [0xFF_u8, 0x01] {
            let mut damaged = bytes.clone();
            damaged[at] ^= flip;
            let (read, end) = read_all(&damaged);
            match end {
                Err(e) => {
                    errors += 1;
                    let text = e.to_string();
                    assert!(!text.contains('\n'), "one line: {text}");
                }
                Ok(None) => assert_eq!(read, entries, "flip at {at} read as complete"),
                Ok(Some(_)) => assert!(read.len() < entries.len(), "flip at {at}"),
            }
        }
    }
    assert!(errors > bytes.len(), "most damage is reported: {errors} errors in {} flips", 2 * bytes.len());
}

#[test]
fn damage_says_where() {
    let garbage = b"GIF89a this is not a recording at all".to_vec();
    let (_, end) = read_all(&garbage);
    assert!(matches!(end, Err(ReadError::NotARecording(_))), "{end:?}");
    let bytes = record(&entries(2));
    // A frame's compressed bytes damaged: a zstd error naming the frame's offset.
    let mut damaged = bytes.clone();
    let mid = bytes.len() / 2;
    for b in &mut damaged[mid..mid + 8] {
        *b ^= 0x5A;
    }
    let (_, end) = read_all(&damaged);
    let e = end.expect_err("damaged");
    assert!(e.to_string().contains("zstd frame at byte"), "{e}");
    // A line that is not an entry: its line number.
    let mut file = super::writer::magic_frame().to_vec();
    let mut text = serde_json::to_vec(&Entry::Header(header())).expect("json");
    text.extend_from_slice(b"\n{\"type\":\"tick\",\"now_ns\":\"soon\"}\n");
    file.extend(zstd::bulk::compress(&text, 3).expect("compress"));
    let (read, end) = read_all(&file);
    assert_eq!(read.len(), 1);
    let e = end.expect_err("not an entry");
    assert!(e.to_string().contains("line 2"), "{e}");
    // A newer format is refused by its magic.
    let mut newer = bytes.clone();
    newer[20] = 99;
    assert!(matches!(read_all(&newer).1, Err(ReadError::NotARecording(_))));
}

#[test]
fn an_endless_line_is_refused_in_bounded_memory() {
    let mut file = super::writer::magic_frame().to_vec();
    let mut text = serde_json::to_vec(&Entry::Header(header())).expect("json");
    text.push(b'\n');
    text.resize(text.len() + super::reader::MAX_LINE + 10, b' ');
    file.extend(zstd::bulk::compress(&text, 1).expect("compress"));
    let (read, end) = read_all(&file);
    assert_eq!(read.len(), 1);
    assert!(end.expect_err("too long").to_string().contains("longer than"));
}

/// The fuzz target's corpus (fuzz/corpus/reader): every file reads without a panic, and the
/// seeds say what they should.
#[test]
fn fuzz_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/reader");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("the corpus directory") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("readable");
        let (read, end) = read_all(&bytes);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        match name.as_str() {
            "valid.cctrace" => assert!(matches!(end, Ok(None)) && read.len() > 2, "{name}: {end:?}"),
            "truncated.cctrace" => assert!(matches!(end, Ok(Some(_))) && !read.is_empty(), "{name}: {end:?}"),
            "garbage" => assert!(end.is_err(), "{name}"),
            _ => {}
        }
        n += 1;
    }
    assert!(n >= 3, "the seeds are in {}", dir.display());
}

/// Writes the corpus's seed files (run once by hand: `cargo test -p tracer --lib
/// write_fuzz_seeds -- --ignored`).
#[test]
#[ignore = "writes fuzz/corpus/reader"]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/reader");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let bytes = record(&entries(2));
    std::fs::write(dir.join("valid.cctrace"), &bytes).expect("write");
    std::fs::write(dir.join("truncated.cctrace"), &bytes[..bytes.len() * 2 / 3]).expect("write");
    std::fs::write(dir.join("garbage"), b"\x28\xb5\x2f\xfd garbage after a zstd magic").expect("write");
}

/// A deep-mode loss response of flow `cookie` at `ts_ns`.
pub(crate) fn cut(cookie: u64, ts_ns: u64) -> crate::analysis::deep_decisions::Decision {
    use crate::analysis::deep_decisions::{Decision, DecisionKind, TwinAlgo};
    Decision {
        ts_ns,
        cookie,
        algo: TwinAlgo::Cubic,
        ca_state: crate::analysis::sample::CaState::Disorder,
        srtt_us: 31_000,
        mss: 1448,
        kind: DecisionKind::SsthreshCut { cwnd_before: 68, cwnd_after: 47, ssthresh_before: 90, ssthresh_after: 47 },
    }
}

/// A recording made before samples carried the kernel's loss signals (the fuzz seed, written by
/// the cctrace of that time) still replays: its samples read with every signal unknown, not 0,
/// and the analysis judges its flows as before.
#[test]
fn a_recording_from_before_the_loss_signals_still_replays() {
    use crate::analysis::diagnosis::DiagnosisConfig;
    use crate::analysis::flow_table::TableConfig;
    use crate::analysis::loss_signals::LossSignals;
    use crate::analysis::Analysis;

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/reader/valid.cctrace");
    let bytes = std::fs::read(&path).expect("the seed recording");
    let text = zstd::decode_all(&bytes[..]).expect("zstd frames");
    assert!(String::from_utf8_lossy(&text).contains("\"samples\""), "the seed holds samples");
    assert!(!String::from_utf8_lossy(&text).contains("dsack_dups"), "the seed must predate the loss signals");
    let (entries, end) = read_all(&bytes);
    assert!(matches!(end, Ok(None)), "{end:?}");
    let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Default::default());
    let mut samples = 0;
    for entry in &entries {
        match entry {
            Entry::Samples { samples: batch } => {
                for s in batch {
                    assert_eq!(s.signals, LossSignals::default());
                    analysis.ingest(s);
                    samples += 1;
                }
            }
            Entry::Tick { now_ns, .. } => {
                analysis.tick(*now_ns);
            }
            _ => {}
        }
    }
    assert!(samples > 0, "the seed has samples");
    assert!(analysis.table.flows().count() > 0, "its flows are in the table");
}
