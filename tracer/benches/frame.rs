//! How the terminal UI's per-frame work grows with the number of flows: ingest one sample per
//! flow, re-judge, re-derive the rows and draw a 120x40 frame, for 10,000 flows against a
//! baseline of 100 flows measured in the same run. Prints times and the ratio; asserts nothing.
//!
//! `cargo bench -p tracer --bench frame`

mod synthetic;

use std::hint::black_box;
use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use tracer::analysis::diagnosis::{DiagnosisConfig, Environment};
use tracer::analysis::event::Sample;
use tracer::analysis::model::TableConfig;
use tracer::analysis::Analysis;
use tracer::pipeline::Status;
use tracer::source::SourceCounters;
use tracer::tui::{draw, AppState, HeaderInfo};

/// Flow `cookie`'s sample in frame `round`.
fn sample(cookie: u64, ts_ns: u64, round: u64) -> Sample {
    synthetic::sample(cookie, ts_ns, round * (cookie % 1000 + 1) * 10_000)
}

/// What the pipeline and the UI do per frame: ingest, tick the analysis, sync the rows.
fn frame(analysis: &mut Analysis, state: &mut AppState, batch: &[Sample], now_ns: u64, counters: SourceCounters) {
    for s in batch {
        analysis.ingest(s);
    }
    analysis.tick(now_ns);
    state.sync(analysis, &Status { now_ns, counters, source_ended: false, playback: None });
}

/// Mean time of one frame with `flows` flows.
fn frame_time(flows: u64, frames: u64) -> Duration {
    let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default());
    let mut state = AppState::new(HeaderInfo::this_host("bench")).with_show_all(true);
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).expect("test backend");
    let mut batch = Vec::with_capacity(flows as usize);
    // Warm up: give every flow history and a verdict.
    for round in 0..5 {
        let ts = 1_000_000_000 * (round + 1);
        batch.clear();
        batch.extend((0..flows).map(|c| sample(c, ts, round)));
        frame(&mut analysis, &mut state, &batch, ts, SourceCounters::default());
    }
    let start = Instant::now();
    for round in 5..5 + frames {
        // Four frames per second of samples, as the UI draws.
        let ts = 1_000_000_000 * 5 + round * 250_000_000;
        batch.clear();
        batch.extend((0..flows).map(|c| sample(c, ts, round)));
        frame(&mut analysis, &mut state, &batch, ts, SourceCounters { received: round * flows, ..Default::default() });
        terminal.draw(|f| draw(f, &state)).expect("draw");
        black_box(terminal.backend());
    }
    start.elapsed() / frames as u32
}

fn main() {
    let baseline = frame_time(100, 40);
    let large = frame_time(10_000, 40);
    println!("frame with    100 flows: {baseline:?} (baseline)");
    println!("frame with 10,000 flows: {large:?}");
    println!(
        "ratio: {:.1}x the baseline for 100x the flows; budget at 4 frames/s: {:.0}% of one core",
        large.as_secs_f64() / baseline.as_secs_f64(),
        large.as_secs_f64() * 4.0 * 100.0
    );
}
