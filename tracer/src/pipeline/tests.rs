//! The pipeline's own promises, on fakes: a stop is never held by a front end that stalls,
//! and the final drain's error and stop are not lost.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::Result;

use super::{run, Control, FrontEnd, PipelineOptions, Status, StopSignal};
use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::TableConfig;
use crate::analysis::sample::Sample;
use crate::analysis::schema::{ActionRecord, SummaryRecord};
use crate::analysis::udp::SocketReadings;
use crate::analysis::Analysis;
use crate::source::{BoxFuture, EventSource, Ready, SourceCounters, SourceItem};
use crate::test_support::feed;

/// Says stop at an instant of the test's clock (and at once from then on).
struct StopAt(tokio::time::Instant);

impl StopSignal for StopAt {
    async fn wait(&mut self) {
        tokio::time::sleep_until(self.0).await;
    }
}

fn stop_after(ms: u64) -> StopAt {
    StopAt(tokio::time::Instant::now() + Duration::from_millis(ms))
}

/// A live-like source: its items, then nothing until told to stop producing; after that,
/// what it still had queued (`after_stop`), one batch per read.
#[derive(Default)]
struct Items {
    items: VecDeque<SourceItem>,
    /// Socket readings the next tick takes ready.
    ready_sockets: Option<SocketReadings>,
    /// Host actions the next tick takes ready.
    ready_actions: Vec<ActionRecord>,
    after_stop: VecDeque<Vec<Sample>>,
    stopped: bool,
    reads_after_stop: usize,
}

impl EventSource for Items {
    fn next_batch(&mut self) -> BoxFuture<'_, Result<Option<Vec<Sample>>>> {
        Box::pin(async move {
            if !self.stopped {
                return std::future::pending().await;
            }
            self.reads_after_stop += 1;
            Ok(self.after_stop.pop_front())
        })
    }

    fn next_item(&mut self) -> BoxFuture<'_, Result<Option<SourceItem>>> {
        Box::pin(async move {
            match self.items.pop_front() {
                Some(item) => Ok(Some(item)),
                None => std::future::pending().await,
            }
        })
    }

    fn take_ready(&mut self) -> Ready {
        Ready {
            samples: Vec::new(),
            sockets: self.ready_sockets.take(),
            actions: std::mem::take(&mut self.ready_actions),
        }
    }

    fn counters(&self) -> SourceCounters {
        SourceCounters::default()
    }

    fn describe(&self) -> String {
        "test items".into()
    }

    fn stop_producing(&mut self) -> Result<()> {
        self.stopped = true;
        Ok(())
    }
}

/// A front end whose reader stopped reading where `stalls` says, and whose batches get
/// `on_batch`'s answer.
struct Front {
    stalls_on_sockets: bool,
    stalls_on_action: bool,
    on_batch: fn() -> Result<Control>,
    batches: usize,
    actions: usize,
}

impl Front {
    fn stalling(on_sockets: bool, on_action: bool) -> Self {
        Self {
            stalls_on_sockets: on_sockets,
            stalls_on_action: on_action,
            on_batch: || Ok(Control::Continue),
            batches: 0,
            actions: 0,
        }
    }

    fn answering(on_batch: fn() -> Result<Control>) -> Self {
        Self { on_batch, ..Self::stalling(false, false) }
    }
}

impl FrontEnd for Front {
    async fn on_batch(&mut self, _analysis: &Analysis, _batch: &[Sample]) -> Result<Control> {
        self.batches += 1;
        (self.on_batch)()
    }

    async fn on_sockets(&mut self, _analysis: &Analysis, _readings: &SocketReadings) -> Result<Control> {
        if self.stalls_on_sockets {
            std::future::pending::<()>().await;
        }
        Ok(Control::Continue)
    }

    async fn on_tick(&mut self, _analysis: &Analysis, _status: &Status) -> Result<Control> {
        Ok(Control::Continue)
    }

    async fn on_action(&mut self, _analysis: &Analysis, _action: &ActionRecord) -> Result<Control> {
        self.actions += 1;
        if self.stalls_on_action {
            std::future::pending::<()>().await;
        }
        Ok(Control::Continue)
    }

    async fn finish(&mut self, _analysis: &Analysis, _summary: &SummaryRecord) -> Result<()> {
        Ok(())
    }
}

fn analysis() -> Analysis {
    Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default())
}

/// `source` through a front end that stalls as `front` says, stopped after 200 ms: the run
/// must end (well within the 10 s the test gives it).
async fn stops_despite(mut source: Items, mut front: Front, scripted: bool) -> Front {
    let opts = PipelineOptions { tick: Duration::from_millis(50), scripted, ..PipelineOptions::default() };
    let mut analysis = analysis();
    let mut stop = stop_after(200);
    let run = run(&mut source, &mut analysis, &mut front, &opts, || 0, &mut stop);
    tokio::time::timeout(Duration::from_secs(10), run).await.expect("a stalled front end held the stop").expect("runs");
    front
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_front_end_stalled_on_replayed_socket_readings_cannot_hold_a_stop() {
    let items = [SourceItem::Sockets(SocketReadings::default())].into();
    stops_despite(Items { items, ..Items::default() }, Front::stalling(true, false), true).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_front_end_stalled_on_socket_readings_at_a_tick_cannot_hold_a_stop() {
    let source = Items { ready_sockets: Some(SocketReadings::default()), ..Items::default() };
    stops_despite(source, Front::stalling(true, false), false).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_front_end_stalled_on_a_replayed_action_cannot_hold_a_stop() {
    let items = [SourceItem::Action(feed::undo_action())].into();
    stops_despite(Items { items, ..Items::default() }, Front::stalling(false, true), true).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_front_end_stalled_on_a_host_action_at_a_tick_cannot_hold_a_stop() {
    let source = Items { ready_actions: vec![feed::undo_action()], ..Items::default() };
    stops_despite(source, Front::stalling(false, true), false).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn host_actions_taken_at_a_tick_reach_the_front_end_once() {
    let source = Items { ready_actions: vec![feed::undo_action(), feed::undo_action()], ..Items::default() };
    let front = stops_despite(source, Front::stalling(false, false), false).await;
    assert_eq!(front.actions, 2);
}

/// A source with nothing during the run and `queued` batches waiting when it stops: what
/// the final drain reads, with no deadline to cut it short.
async fn drain(queued: usize, front: &mut Front) -> (Result<SummaryRecord>, Items) {
    let mut source = Items { after_stop: (0..queued as u64).map(feed::batch).collect(), ..Items::default() };
    let opts = PipelineOptions { final_drain: Duration::from_secs(3600), ..PipelineOptions::default() };
    let mut analysis = analysis();
    let mut stop = stop_after(200);
    let run = run(&mut source, &mut analysis, front, &opts, || 0, &mut stop);
    let result = tokio::time::timeout(Duration::from_secs(10), run).await.expect("the run ended");
    (result, source)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_error_at_the_final_drain_ends_the_run_with_it() {
    let mut front = Front::answering(|| anyhow::bail!("the output is gone"));
    let (result, _) = drain(2, &mut front).await;
    let e = result.expect_err("the drain's error vanished");
    assert_eq!(format!("{e:#}"), "at the final drain: the output is gone");
    assert_eq!(front.batches, 1, "the drain went on after an error");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_stop_at_the_final_drain_ends_the_drain() {
    let mut front = Front::answering(|| Ok(Control::Stop));
    let (result, source) = drain(3, &mut front).await;
    result.expect("a stop is no error");
    assert_eq!((front.batches, source.reads_after_stop), (1, 1), "the drain read on after the front end said stop");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_final_drain_reads_what_was_queued_while_the_front_end_goes_on() {
    // The two tests above, checked against the drain they cut short.
    let mut front = Front::answering(|| Ok(Control::Continue));
    let (result, source) = drain(3, &mut front).await;
    assert_eq!(result.expect("runs").events_received, 0);
    assert_eq!((front.batches, source.reads_after_stop), (3, 4));
}
