//! How the terminal UI's per-frame work grows with the number of flows: ingest one sample per
//! flow, tick the analysis (it re-judges every flow once a second, so on one frame in four),
//! re-derive the rows and draw a 120x40 frame, for 10,000 and 100,000 flows against a baseline
//! of 100 flows measured in the same run. Prints the mean frame, the frame that re-judged, and
//! where the time goes; asserts nothing.
//!
//! `cargo bench -p tracer --bench frame`

mod synthetic;

use std::hint::black_box;
use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use tracer::analysis::diagnosis::DiagnosisConfig;
use tracer::analysis::environment::Environment;
use tracer::analysis::flow_table::TableConfig;
use tracer::analysis::sample::Sample;
use tracer::analysis::Analysis;
use tracer::pipeline::Status;
use tracer::source::SourceCounters;
use tracer::tui::{draw, AppState, HeaderInfo};

/// Flow `cookie`'s sample in frame `round`.
fn sample(cookie: u64, ts_ns: u64, round: u64) -> Sample {
    synthetic::sample(cookie, ts_ns, round * (cookie % 1000 + 1) * 10_000)
}

/// Time spent per frame, by part.
#[derive(Clone, Copy, Default)]
struct Parts {
    /// Decoding the samples and taking them into the flow table.
    ingest: Duration,
    /// The analysis' tick: expiry and, once a second, every flow re-judged.
    tick: Duration,
    /// The UI: rows re-derived, filtered and ordered, and the frame drawn.
    ui: Duration,
}

impl Parts {
    fn total(&self) -> Duration {
        self.ingest + self.tick + self.ui
    }
}

struct Measured {
    mean: Parts,
    /// The frames whose tick re-judged every flow.
    judging: Parts,
    /// The UI's part on frames that did not.
    ui_between: Duration,
}

/// Frames with `flows` flows, after a warm-up that gives every flow history and a verdict.
fn measure(flows: u64, frames: u64) -> Measured {
    // Room for every flow: the table's default bound is 50,000.
    let table =
        TableConfig { max_flows: TableConfig::default().max_flows.max(2 * flows as usize), ..Default::default() };
    let mut analysis = Analysis::new(table, DiagnosisConfig::default(), Environment::default());
    let mut state = AppState::new(HeaderInfo::live("bench".into(), "6.18".into(), "bench")).with_show_all(true);
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).expect("test backend");
    let mut all = Parts::default();
    let (mut judging, mut judged) = (Parts::default(), 0u32);
    let mut ui_between = Duration::ZERO;
    for round in 0..5 + frames {
        // Warm-up: five seconds, a verdict each; then four frames per second, as the UI draws.
        let ts = if round < 5 { 1_000_000_000 * (round + 1) } else { 1_000_000_000 * 5 + round * 250_000_000 };
        let start = Instant::now();
        for cookie in 0..flows {
            analysis.ingest(&sample(cookie, ts, round));
        }
        let ingested = Instant::now();
        let evaluated = analysis.tick(ts);
        let ticked = Instant::now();
        let counters = SourceCounters { received: round * flows, ..Default::default() };
        state.sync(&analysis, &Status { now_ns: ts, counters, source_ended: false, playback: None });
        terminal.draw(|f| draw(f, &state)).expect("draw");
        black_box(terminal.backend());
        let drawn = Instant::now();
        if round < 5 {
            continue;
        }
        let parts = Parts { ingest: ingested - start, tick: ticked - ingested, ui: drawn - ticked };
        all.ingest += parts.ingest;
        all.tick += parts.tick;
        all.ui += parts.ui;
        if evaluated {
            judged += 1;
            judging.ingest += parts.ingest;
            judging.tick += parts.tick;
            judging.ui += parts.ui;
        } else {
            ui_between += parts.ui;
        }
    }
    let per = |p: Parts, n: u32| Parts { ingest: p.ingest / n.max(1), tick: p.tick / n.max(1), ui: p.ui / n.max(1) };
    Measured {
        mean: per(all, frames as u32),
        judging: per(judging, judged),
        ui_between: ui_between / (frames as u32 - judged).max(1),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() -> anyhow::Result<()> {
    use cctrace_lab::figures::{number, targets, Row, Section};
    let mut section = Section::new("frame", "The terminal UI: a frame").about(
        "`cargo bench -p tracer --bench frame`: the real analysis and terminal UI on a 120x40 test backend, \
         every flow given a sample a frame, four frames a second after five seconds of warm-up; a frame is \
         the ingest, the analysis' tick and the UI's own drawing; once a second the tick re-judges every flow.",
    );
    let runs: Vec<(u64, Measured)> = [(100, 40), (10_000, 40), (100_000, 8)]
        .into_iter()
        .map(|(flows, frames)| (flows, measure(flows, frames)))
        .collect();
    let baseline = runs[0].1.mean.total();
    for (flows, m) in &runs {
        println!(
            "{flows:>7} flows: frame {} mean ({:.1}x the 100-flow baseline), {} when re-judging; \
             ingest {} · tick {} · UI {} (UI between evaluations {}, with one {})",
            ms(m.mean.total()),
            m.mean.total().as_secs_f64() / baseline.as_secs_f64(),
            ms(m.judging.total()),
            ms(m.mean.ingest),
            ms(m.mean.tick),
            ms(m.mean.ui),
            ms(m.ui_between),
            ms(m.judging.ui),
        );
        let mean_ms = m.mean.total().as_secs_f64() * 1e3;
        let row = Row::new(
            format!("a frame, {} flows (mean)", number(*flows as f64)),
            format!(
                "{} ({} re-judging every flow; the UI's own part {})",
                ms(m.mean.total()),
                ms(m.judging.total()),
                ms(m.mean.ui)
            ),
        )
        .how(format!("{} frames", if *flows >= 100_000 { 8 } else { 40 }));
        section.row(if *flows == 10_000 { row.judged(&targets::FRAME_10K, mean_ms) } else { row });
    }
    let budget = runs[1].1.mean.total().as_secs_f64() * 400.0;
    println!("budget at 4 frames/s with 10,000 flows: {budget:.0}% of one core");
    section.row(Row::new("the terminal UI at 4 frames a second, 10,000 flows", format!("{budget:.0} % of a core")));
    section.write().map(drop)
}
