//! The one pipeline every front end runs on: source -> analysis -> clock -> front end.
//!
//! [`run`] reads batches from an [`EventSource`], feeds them to the [`Analysis`], ticks it on
//! the chosen clock, and hands both to a [`FrontEnd`] (JSON Lines, the terminal UI, a headless
//! run; the recorder, the metrics exporter and the kernel filter's upkeep ride beside it as side
//! jobs, `side_job::Beside`). It also owns what every front end needs the same way: stopping
//! on a signal, `--duration`, a quit key or a closed output; slicing floods so input and ticks
//! keep their turn; the final drain of what the kernel already queued; and the summary.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::analysis::deep_decisions::Decision;
use crate::analysis::sample::Sample;
use crate::analysis::schema::{ActionRecord, SummaryRecord};
use crate::analysis::udp::SocketReadings;
use crate::analysis::Analysis;
use crate::source::{EventSource, SourceCounters, SourceItem};

/// How long the front end may take to finish after a stop signal: the last state of every
/// flow and the summary must get out (tens of thousands of flows at start-up are megabytes of
/// JSON, more than a second's work in a debug build), while a reader that stopped reading must
/// not keep a signalled process alive for long. A second signal ends the wait at once.
const FINISH_AFTER_SIGNAL: Duration = Duration::from_secs(5);

/// Which clock "now" is for ageing flows and judging them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeBase {
    /// CLOCK_MONOTONIC (the clock live kernel samples carry), or the newest sample's time when
    /// that runs ahead: idle flows are seen idle.
    #[default]
    Monotonic,
    /// The newest sample's timestamp only: for a replay whose times lie in the past.
    Samples,
}

#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// How often the front end's [`FrontEnd::on_tick`] runs (the analysis re-judges flows at
    /// most once a second of sample time, whatever this is).
    pub tick: Duration,
    /// Samples ingested before stop, input and ticks get a turn again.
    pub max_samples_per_turn: usize,
    /// Stop after this long.
    pub duration: Option<Duration>,
    pub time_base: TimeBase,
    /// After stopping, how long to keep reading what the source already queued.
    pub final_drain: Duration,
    /// Scripted (a replay): no timer; the analysis and the front end tick at the source's
    /// [`SourceItem::Tick`]s, at their times, and "now" is the last of those. Nothing is read
    /// after a stop.
    pub scripted: bool,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(1),
            max_samples_per_turn: crate::source::MAX_BATCH,
            duration: None,
            time_base: TimeBase::Monotonic,
            final_drain: Duration::from_millis(300),
            scripted: false,
        }
    }
}

/// What the pipeline should do next, as a front end sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Continue,
    /// End the run (the user quit, the output was closed): drain, summarise, return.
    Stop,
}

/// What a tick tells the front end besides the analysis.
#[derive(Clone, Debug)]
pub struct Status {
    /// The time the analysis was judged at (monotonic ns).
    pub now_ns: u64,
    pub counters: SourceCounters,
    /// The source has no more samples (a recording or feed ran out).
    pub source_ended: bool,
    /// Where a played-back recording is (`None` live).
    pub playback: Option<crate::source::Playback>,
}

/// A consumer of the pipeline: JSON Lines, the terminal UI, a recorder.
///
/// The async methods run inside the pipeline's loop; a stop (signal, `--duration`) cancels
/// whichever is pending, so a front end blocked on a full pipe cannot hold the process.
#[allow(async_fn_in_trait)] // used with concrete types on one thread; no Send bound needed
pub trait FrontEnd {
    /// Samples just fed to `analysis`, in arrival order.
    async fn on_batch(&mut self, _analysis: &Analysis, _batch: &[Sample]) -> Result<Control> {
        Ok(Control::Continue)
    }

    /// Deep mode's decision events just fed to `analysis`, in arrival order.
    async fn on_decisions(&mut self, _analysis: &Analysis, _batch: &[Decision]) -> Result<Control> {
        Ok(Control::Continue)
    }

    /// Readings of heavy UDP sockets, just fed to `analysis`.
    async fn on_sockets(&mut self, _analysis: &Analysis, _readings: &SocketReadings) -> Result<Control> {
        Ok(Control::Continue)
    }

    /// Once per [`PipelineOptions::tick`], after the analysis was ticked.
    async fn on_tick(&mut self, analysis: &Analysis, status: &Status) -> Result<Control>;

    /// Input of the front end's own (keys); resolves when there is some. Never, by default.
    /// The analysis may be changed from here (e.g. which flow keeps a long history).
    async fn input(&mut self, _analysis: &mut Analysis) -> Result<Control> {
        std::future::pending().await
    }

    /// The source ran out. Stop (the default), or keep showing what there is until the user
    /// quits (the terminal UI).
    fn on_source_end(&mut self) -> Control {
        Control::Stop
    }

    /// Something cctrace did to the host, as a recording played back says (live, the front
    /// end that did it knows).
    async fn on_action(&mut self, _analysis: &Analysis, _action: &ActionRecord) -> Result<Control> {
        Ok(Control::Continue)
    }

    /// Actions this front end took on the host since last asked (a fix from the terminal UI),
    /// for a recorder to keep.
    fn take_actions(&mut self) -> Vec<ActionRecord> {
        Vec::new()
    }

    /// The run is over: everything queued has been read; print or show the summary.
    async fn finish(&mut self, analysis: &Analysis, summary: &SummaryRecord) -> Result<()>;
}

/// What says "stop" (SIGINT or SIGTERM, live): awaited while the run goes on, and again while
/// the front end finishes, so a second signal ends a finish stuck on a stalled output.
#[allow(async_fn_in_trait)]
pub trait StopSignal {
    async fn wait(&mut self);
}

/// Never says stop: runs end by `--duration`, the source or the front end.
pub struct NoStop;

impl StopSignal for NoStop {
    async fn wait(&mut self) {
        std::future::pending::<()>().await;
    }
}

/// The summary of a run so far.
pub fn summary(source: &dyn EventSource, analysis: &Analysis) -> SummaryRecord {
    let evicted = analysis.table.evicted();
    SummaryRecord::new(source.describe(), source.counters(), analysis.table.len() as u64 + evicted, evicted)
}

/// Run `source` through `analysis` into `front` until the source ends (and the front end
/// agrees to stop), `duration` passes, the front end stops, or `stop` resolves. Returns the
/// summary the front end was given.
pub async fn run<F: FrontEnd>(
    source: &mut dyn EventSource,
    analysis: &mut Analysis,
    front: &mut F,
    opts: &PipelineOptions,
    now_monotonic: impl Fn() -> u64,
    stop: &mut impl StopSignal,
) -> Result<SummaryRecord> {
    let mut run = Run {
        source,
        analysis,
        front,
        stop,
        opts,
        now_monotonic,
        cap: opts.max_samples_per_turn.max(1),
        latest_ns: 0,
        script_ns: 0,
        backlog: Vec::new(),
        backlog_at: 0,
        source_open: true,
        signalled: false,
    };
    run.turns().await?;
    // From here on the counters must be final: the source stops producing (a live kernel
    // detaches its programs), so received + lost accounts for everything it emitted.
    let stopped = run.source.stop_producing();
    if let Err(e) = run.final_drain().await {
        // Neither error may vanish (deep mode's flows left on a twin is one to act on).
        return Err(match stopped {
            Ok(()) => e,
            Err(also) => anyhow::anyhow!("{e:#}; {also:#}"),
        });
    }
    let summary = run.finish().await?;
    // Only now: the front end has had the summary and given the terminal back.
    stopped?;
    Ok(summary)
}

/// One run of the pipeline: what it reads from, feeds and tells, and where it is.
struct Run<'r, F, S, N> {
    source: &'r mut dyn EventSource,
    analysis: &'r mut Analysis,
    front: &'r mut F,
    stop: &'r mut S,
    opts: &'r PipelineOptions,
    now_monotonic: N,
    /// Samples ingested per turn at most.
    cap: usize,
    /// The newest sample's time.
    latest_ns: u64,
    /// The time of the last scripted tick.
    script_ns: u64,
    /// A batch larger than `cap` is ingested in slices, one per turn of the loop.
    backlog: Vec<Sample>,
    backlog_at: usize,
    source_open: bool,
    /// A stop signal arrived (not the front end's own stop, nor the deadline).
    signalled: bool,
}

impl<F: FrontEnd, S: StopSignal, N: Fn() -> u64> Run<'_, F, S, N> {
    /// "Now" for ageing and judging flows, on the clock [`PipelineOptions`] chose.
    fn now(&self) -> u64 {
        match self.opts.time_base {
            _ if self.opts.scripted => self.script_ns,
            TimeBase::Monotonic => (self.now_monotonic)().max(self.latest_ns),
            TimeBase::Samples => self.latest_ns,
        }
    }

    /// Turn after turn until a stop, the deadline, or the front end says stop.
    async fn turns(&mut self) -> Result<()> {
        let mut ticks = tokio::time::interval(self.opts.tick.max(Duration::from_millis(10)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let duration = self.opts.duration;
        let deadline = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        loop {
            let has_backlog = self.backlog_at < self.backlog.len();
            // Biased: stop, the deadline, input and ticks are polled before intake, every
            // turn, so a flood of samples cannot starve them.
            let control = tokio::select! {
                biased;
                () = self.stop.wait() => {
                    self.signalled = true;
                    break;
                }
                () = &mut deadline => break,
                control = self.front.input(&mut *self.analysis) => control?,
                _ = ticks.tick(), if !self.opts.scripted => self.timer_tick(has_backlog).await?,
                () = std::future::ready(()), if has_backlog => self.backlog_slice().await?,
                item = self.source.next_item(), if self.source_open && !has_backlog => {
                    let control = self.item(item.context("reading samples")?).await?;
                    tokio::task::yield_now().await;
                    control
                }
            };
            if control == Control::Stop || self.signalled {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The timer's tick (live): what the source holds ready, then the analysis and the front
    /// end ticked at one "now" (a recorder writes it down).
    async fn timer_tick(&mut self, has_backlog: bool) -> Result<Control> {
        let ready = self.source.take_ready();
        let mut control = Control::Continue;
        for action in &ready.actions {
            if control == Control::Continue {
                control = self.action(action).await?;
            }
        }
        if let Some(readings) = ready.sockets.filter(|_| control == Control::Continue) {
            control = self.sockets(&readings).await?;
        }
        // Behind a backlog (or more than a turn's worth) the samples wait their turn.
        if has_backlog || ready.samples.len() > self.cap {
            self.backlog.extend(ready.samples);
        } else if !ready.samples.is_empty() && control == Control::Continue {
            control = self.ingest(&ready.samples).await?;
        }
        if control == Control::Stop || self.signalled {
            return Ok(Control::Stop);
        }
        let status = Status {
            now_ns: self.now(),
            counters: self.source.counters(),
            source_ended: !self.source_open,
            playback: self.source.playback(),
        };
        self.tick(&status).await
    }

    /// The next slice of a flood, then the runtime's timer and I/O drivers get a turn.
    async fn backlog_slice(&mut self) -> Result<Control> {
        let end = (self.backlog_at + self.cap).min(self.backlog.len());
        let slice = std::mem::take(&mut self.backlog);
        let control = self.ingest(&slice[self.backlog_at..end]).await;
        self.backlog = slice;
        self.backlog_at = end;
        if self.backlog_at == self.backlog.len() {
            self.backlog.clear();
            self.backlog_at = 0;
        }
        tokio::task::yield_now().await;
        control
    }

    /// One item the source yielded (`None`: it ended).
    async fn item(&mut self, item: Option<SourceItem>) -> Result<Control> {
        Ok(match item {
            Some(SourceItem::Batch(batch)) if batch.len() <= self.cap => self.ingest(&batch).await?,
            Some(SourceItem::Batch(batch)) => {
                self.backlog = batch;
                self.backlog_at = 0;
                Control::Continue
            }
            Some(SourceItem::Decisions(batch)) => {
                for d in &batch {
                    self.analysis.ingest_decision(d);
                }
                let told = self.front.on_decisions(self.analysis, &batch);
                raced(self.stop, &mut self.signalled, told).await?
            }
            Some(SourceItem::Tick { now_ns, counters }) => {
                self.script_ns = now_ns;
                let status = Status { now_ns, counters, source_ended: false, playback: self.source.playback() };
                self.tick(&status).await?
            }
            Some(SourceItem::Sockets(readings)) => self.sockets(&readings).await?,
            Some(SourceItem::Host(env)) => {
                self.analysis.set_env(*env);
                Control::Continue
            }
            Some(SourceItem::Action(action)) => self.action(&action).await?,
            Some(SourceItem::Restart) => {
                self.analysis.restart();
                self.latest_ns = 0;
                self.script_ns = 0;
                Control::Continue
            }
            None => {
                self.source_open = false;
                self.front.on_source_end()
            }
        })
    }

    /// Tick the analysis at `status.now_ns`, then the front end; a stop cancels the front end.
    async fn tick(&mut self, status: &Status) -> Result<Control> {
        self.analysis.tick(status.now_ns);
        let told = self.front.on_tick(self.analysis, status);
        raced(self.stop, &mut self.signalled, told).await
    }

    /// Feed `batch` to the analysis, then the front end; a stop cancels the front end.
    async fn ingest(&mut self, batch: &[Sample]) -> Result<Control> {
        for s in batch {
            self.latest_ns = self.latest_ns.max(s.ts_ns);
            self.analysis.ingest(s);
        }
        let told = self.front.on_batch(self.analysis, batch);
        raced(self.stop, &mut self.signalled, told).await
    }

    /// Readings of heavy UDP sockets to the analysis, then the front end; a stop cancels the
    /// front end.
    /// An action taken on the host (recorded, or by another process), told to the front end.
    async fn action(&mut self, action: &ActionRecord) -> Result<Control> {
        let told = self.front.on_action(self.analysis, action);
        raced(self.stop, &mut self.signalled, told).await
    }

    async fn sockets(&mut self, readings: &SocketReadings) -> Result<Control> {
        self.analysis.ingest_sockets(readings);
        let told = self.front.on_sockets(self.analysis, readings);
        raced(self.stop, &mut self.signalled, told).await
    }

    /// What was sliced off but not yet ingested, then what the source already queued: bounded,
    /// since under live traffic the queue never runs dry. The front end's error ends the run
    /// with it; its stop ends the drain.
    async fn final_drain(&mut self) -> Result<()> {
        let drain_until = tokio::time::Instant::now() + self.opts.final_drain;
        let mut pending = self.backlog.split_off(self.backlog_at);
        loop {
            if !pending.is_empty() {
                for s in &pending {
                    self.latest_ns = self.latest_ns.max(s.ts_ns);
                    self.analysis.ingest(s);
                }
                // Out of time, the front end misses these samples; the analysis has them.
                if let Ok(control) =
                    tokio::time::timeout_at(drain_until, self.front.on_batch(self.analysis, &pending)).await
                {
                    if control.context("at the final drain")? == Control::Stop {
                        return Ok(());
                    }
                }
            }
            // The deadline is checked here too: a source that is always ready (a flood) would
            // otherwise win every `timeout_at`, which polls its future before the clock.
            if !self.source_open
                || self.opts.scripted
                || self.source.drained()
                || tokio::time::Instant::now() >= drain_until
            {
                return Ok(());
            }
            match tokio::time::timeout_at(drain_until, self.source.next_batch()).await {
                Ok(Ok(Some(batch))) => pending = batch,
                _ => return Ok(()),
            }
        }
    }

    /// The analysis judged one last time and the summary handed to the front end.
    async fn finish(&mut self) -> Result<SummaryRecord> {
        self.analysis.tick(self.now());
        let summary = summary(self.source, self.analysis);
        let finishing = self.front.finish(self.analysis, &summary);
        if self.signalled {
            // Asked to stop: the summary gets a moment to reach the output, no more (a reader
            // that stopped reading must not keep a signalled process alive).
            tokio::select! {
                biased;
                () = self.stop.wait() => {}
                finished = tokio::time::timeout(FINISH_AFTER_SIGNAL, finishing) => {
                    if let Ok(finished) = finished {
                        finished?;
                    }
                }
            }
        } else {
            // The run ended by itself: the output gets everything, unless a signal says stop.
            tokio::select! {
                biased;
                () = self.stop.wait() => {}
                finished = finishing => finished?,
            }
        }
        Ok(summary)
    }
}

/// What the front end says in `told`, unless a stop comes first: then it is cancelled (a front
/// end blocked on a full pipe cannot hold a stop) and the run stops.
async fn raced(
    stop: &mut impl StopSignal,
    signalled: &mut bool,
    told: impl std::future::Future<Output = Result<Control>>,
) -> Result<Control> {
    tokio::select! {
        biased;
        () = stop.wait() => {
            *signalled = true;
            Ok(Control::Stop)
        }
        control = told => control,
    }
}

#[cfg(test)]
mod tests;
