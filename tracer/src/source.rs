//! The one interface every producer of samples implements: the live kernel, a recording, a
//! test feed. Consumers (JSON output, TUI, recorder) depend only on this.

use std::future::Future;
use std::pin::Pin;

use crate::analysis::deep_decisions::Decision;
use crate::analysis::environment::Environment;
use crate::analysis::sample::Sample;
use crate::analysis::schema::ActionRecord;
/// The counters every source reports are a record of the schema (recordings keep them).
pub use crate::analysis::schema::SourceCounters;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a source yields: samples, and, from a scripted source (a recording), the instants the
/// pipeline ticks at and the host facts in force from a point on.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceItem {
    Batch(Vec<Sample>),
    /// Decision events of deep mode's congestion-control twins, in arrival order.
    Decisions(Vec<Decision>),
    /// Readings of heavy UDP sockets and TCP routes.
    Sockets(crate::analysis::udp::SocketReadings),
    /// Tick the analysis and the front end at `now_ns` (the pipeline's scripted mode).
    Tick {
        now_ns: u64,
        counters: SourceCounters,
    },
    /// Host facts from here on.
    Host(Box<Environment>),
    /// Something cctrace did to the host, at this point of the recording.
    Action(ActionRecord),
    /// Everything so far is void: the source starts again from its beginning (a replay seeking
    /// backwards), so the analysis starts over too.
    Restart,
}

/// Where a played-back recording is, for the header and the keys that move it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Playback {
    /// Recorded time since the recording began, ns.
    pub position_ns: u64,
    /// 1 to 64 times the recorded pace.
    pub speed: f64,
    pub paused: bool,
    /// Reading ahead to a seek target without pacing: not worth drawing.
    pub catching_up: bool,
}

/// A kernel hook's program runs and the time they took, since it was loaded (while the kernel
/// counts them: `kernel.bpf_stats_enabled`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookCost {
    pub hook: String,
    pub runs: u64,
    pub run_ns: u64,
}

/// Reads the live source's hook costs on demand (a scrape); empty while nothing counts.
pub type HookCostReader = Box<dyn Fn() -> Vec<HookCost> + Send + Sync>;

/// What a source holds ready at a tick, taken without waiting (see [`EventSource::take_ready`]).
#[derive(Debug, Default)]
pub struct Ready {
    pub samples: Vec<Sample>,
    /// Readings of heavy UDP sockets, when due.
    pub sockets: Option<crate::analysis::udp::SocketReadings>,
    /// Actions other processes took on the host since the last tick (see [`WithHostActions`]).
    pub actions: Vec<ActionRecord>,
}

/// Records a source hands over per read at most, and the pipeline takes per turn: a busy ring
/// buffer is read in bounded batches, so ticks and a stop are not held behind one read.
pub const MAX_BATCH: usize = 4096;

/// A stream of sample batches.
pub trait EventSource: Send {
    /// The next batch; `Ok(None)` when the source has ended (a recording, a finite feed).
    /// Cancel-safe: the pipeline drops this future whenever another event wins the turn, so a
    /// source must not consume anything before the future completes.
    fn next_batch(&mut self) -> BoxFuture<'_, anyhow::Result<Option<Vec<Sample>>>>;
    /// The next item: by default the next batch. Cancel-safe like [`EventSource::next_batch`].
    fn next_item(&mut self) -> BoxFuture<'_, anyhow::Result<Option<SourceItem>>> {
        let batch = self.next_batch();
        Box::pin(async move { Ok(batch.await?.map(SourceItem::Batch)) })
    }
    /// What the source holds ready now, taken without waiting: the pipeline takes it just
    /// before each (unscripted) tick. A source that wakes the pipeline only when its queue
    /// fills (the live kernel: a wake-up per sample, or a timer to look for them, cost more
    /// than the samples) hands its samples over here, so the tick judges what was written by
    /// then without any timer of the source's own. None by default.
    fn take_ready(&mut self) -> Ready {
        Ready::default()
    }
    fn counters(&self) -> SourceCounters;
    /// A played-back recording's position; `None` for live and finite sources.
    fn playback(&self) -> Option<Playback> {
        None
    }
    /// One line saying what this source is, for headers and logs.
    fn describe(&self) -> String;
    /// Stop producing new samples; what is already queued can still be read. A consumer that
    /// ends calls this before its final drain, so the counters it reports are final: a live
    /// kernel otherwise keeps writing samples between that drain and reading the counters.
    /// An error is something the source could not undo on the host (deep mode's flows left on
    /// a twin): the pipeline finishes its drain and summary, then returns it, so it is printed
    /// after the front end has given the terminal back.
    fn stop_producing(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// After [`EventSource::stop_producing`]: whether everything the producer made has been
    /// delivered or counted lost, so the final drain can end without waiting out its deadline.
    /// `false` when the source cannot tell.
    fn drained(&self) -> bool {
        false
    }
}

/// Reads actions other processes took on the host since it was last called (the fix journal).
pub type ActionPoll = Box<dyn FnMut() -> Vec<ActionRecord> + Send>;

/// A live source with the actions other processes take on the host merged in: `poll` is
/// asked at each of the pipeline's ticks (with what the source holds ready), so reading the
/// journal wakes nothing of its own.
pub struct WithHostActions<'a> {
    inner: &'a mut dyn EventSource,
    poll: ActionPoll,
}

impl<'a> WithHostActions<'a> {
    pub fn new(inner: &'a mut dyn EventSource, poll: ActionPoll) -> Self {
        Self { inner, poll }
    }
}

impl EventSource for WithHostActions<'_> {
    fn next_batch(&mut self) -> BoxFuture<'_, anyhow::Result<Option<Vec<Sample>>>> {
        self.inner.next_batch()
    }

    fn next_item(&mut self) -> BoxFuture<'_, anyhow::Result<Option<SourceItem>>> {
        self.inner.next_item()
    }

    fn take_ready(&mut self) -> Ready {
        let mut ready = self.inner.take_ready();
        ready.actions.extend((self.poll)());
        ready
    }

    fn counters(&self) -> SourceCounters {
        self.inner.counters()
    }

    fn playback(&self) -> Option<Playback> {
        self.inner.playback()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn stop_producing(&mut self) -> anyhow::Result<()> {
        self.inner.stop_producing()
    }

    fn drained(&self) -> bool {
        self.inner.drained()
    }
}

/// A finite, in-memory feed: deterministic input for tests and snapshots.
pub struct FeedSource {
    batches: std::collections::VecDeque<Vec<Sample>>,
    received: u64,
    lost: u64,
}

impl FeedSource {
    pub fn new(batches: Vec<Vec<Sample>>) -> Self {
        Self { batches: batches.into(), received: 0, lost: 0 }
    }

    /// Pretend the producer lost `n` samples (to exercise lost-event reporting).
    pub fn with_lost(mut self, n: u64) -> Self {
        self.lost = n;
        self
    }
}

impl EventSource for FeedSource {
    fn next_batch(&mut self) -> BoxFuture<'_, anyhow::Result<Option<Vec<Sample>>>> {
        // Taken when polled, not when the future is made: a future dropped unpolled loses nothing.
        Box::pin(async move {
            let next = self.batches.pop_front();
            if let Some(b) = &next {
                self.received += b.len() as u64;
            }
            Ok(next)
        })
    }

    fn counters(&self) -> SourceCounters {
        SourceCounters { received: self.received, lost: self.lost, ..SourceCounters::default() }
    }

    fn describe(&self) -> String {
        "test feed".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::feed;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn actions_polled_from_the_host_come_with_what_the_source_holds_at_a_tick() {
        let action = feed::undo_action();
        let mut inner = FeedSource::new((0..3).map(feed::batch).collect());
        let mut polls = 0;
        let once = action.clone();
        let poll: ActionPoll = Box::new(move || {
            polls += 1;
            if polls == 1 {
                vec![once.clone()]
            } else {
                Vec::new()
            }
        });
        let mut source = WithHostActions::new(&mut inner, poll);
        assert_eq!(source.take_ready().actions, [action], "the first tick's poll");
        assert!(source.take_ready().actions.is_empty(), "each action once");
        let mut items = Vec::new();
        while let Some(item) = source.next_item().await.expect("reads") {
            items.push(item);
        }
        assert_eq!(items.len(), 3, "{items:?}");
        assert!(items.iter().all(|i| matches!(i, SourceItem::Batch(_))), "the source's own items, untouched");
        assert_eq!(source.counters().received, (0..3).map(|t| feed::batch(t).len() as u64).sum::<u64>());
    }
}
