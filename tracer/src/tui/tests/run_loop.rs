//! The run loop on a `TestBackend`: the pipeline feeds, the front end draws, keys and the
//! stop signal end it.

use crossterm::event::{Event, KeyCode};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::key;
use crate::pipeline::{self, PipelineOptions, StopSignal, TimeBase};
use crate::source::{FeedSource, SourceCounters};
use crate::tui::feed::{self, Scene};
use crate::tui::state::AppState;
use crate::tui::TuiFrontEnd;

fn key_event(c: char) -> std::io::Result<Event> {
    Ok(Event::Key(key(KeyCode::Char(c))))
}

/// Keys arriving at given times (tokio time), then silence.
fn scripted(
    script: Vec<(u64, std::io::Result<Event>)>,
) -> impl futures_util::Stream<Item = std::io::Result<Event>> + Unpin {
    let stream = futures_util::stream::unfold((script.into_iter(), 0u64), |(mut it, at)| async move {
        match it.next() {
            Some((ms, ev)) => {
                tokio::time::sleep(std::time::Duration::from_millis(ms.saturating_sub(at))).await;
                Some((ev, (it, ms)))
            }
            None => std::future::pending().await,
        }
    });
    Box::pin(stream)
}

/// Says stop at a given instant of the test's clock (every wait until then, after it at once).
struct StopAt(Option<tokio::time::Instant>);

impl StopSignal for StopAt {
    async fn wait(&mut self) {
        match self.0 {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_pipeline_ingests_draws_and_quits_on_q() {
    let batches: Vec<_> = (0..=120).map(feed::batch).collect();
    let fed: usize = batches.iter().map(Vec::len).sum();
    let mut source = FeedSource::new(batches).with_lost(3);
    let mut scene = Scene::new();
    let mut terminal = Terminal::new(TestBackend::new(100, 20)).expect("terminal");
    let opts = PipelineOptions {
        tick: std::time::Duration::from_millis(250),
        time_base: TimeBase::Samples,
        max_samples_per_turn: 3,
        ..PipelineOptions::default()
    };
    let keys = scripted(vec![(1_000, key_event('a')), (2_000, key_event('q'))]);
    let mut front = TuiFrontEnd::new(&mut terminal, keys, AppState::new(feed::header()), None);
    let summary = pipeline::run(&mut source, &mut scene.analysis, &mut front, &opts, || 0, &mut StopAt(None))
        .await
        .expect("runs");
    assert!(front.state.source_ended());
    assert!(front.state.shows_all());
    assert_eq!(scene.analysis.table.len(), 5);
    assert_eq!(summary.events_lost, 3);
    assert_eq!(summary.events_received, fed as u64);
    let screen = terminal.backend().to_string();
    assert!(screen.contains("lost 3"), "{screen}");
    assert!(screen.contains("(ended)"), "{screen}");
    assert!(screen.contains("iperf3"), "{screen}");
}

// Real time: a source that is always ready never lets a paused clock auto-advance.
#[tokio::test(flavor = "current_thread")]
async fn the_pipeline_stops_on_the_stop_signal_even_with_endless_input() {
    // A source that never ends and keys that never come: only the stop ends the run.
    struct Endless(u64);
    impl crate::source::EventSource for Endless {
        fn next_batch(
            &mut self,
        ) -> crate::source::BoxFuture<'_, anyhow::Result<Option<Vec<crate::analysis::sample::Sample>>>> {
            self.0 += 1;
            let b = feed::batch(self.0 % 100);
            Box::pin(async move { Ok(Some(b)) })
        }
        fn counters(&self) -> SourceCounters {
            SourceCounters { received: self.0, ..SourceCounters::default() }
        }
        fn describe(&self) -> String {
            "endless".into()
        }
    }
    let mut source = Endless(0);
    let mut scene = Scene::new();
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
    let opts = PipelineOptions {
        tick: std::time::Duration::from_millis(250),
        time_base: TimeBase::Samples,
        ..PipelineOptions::default()
    };
    let keys = scripted(Vec::new());
    let mut front = TuiFrontEnd::new(&mut terminal, keys, AppState::new(feed::header()), None);
    let mut stop = StopAt(Some(tokio::time::Instant::now() + std::time::Duration::from_millis(600)));
    let run = pipeline::run(&mut source, &mut scene.analysis, &mut front, &opts, || 0, &mut stop);
    tokio::time::timeout(std::time::Duration::from_secs(20), run).await.expect("stopped in time").expect("runs");
    drop(front);
    // Frames were drawn while the source flooded the loop.
    assert!(terminal.backend().to_string().contains("cctrace"));
}
