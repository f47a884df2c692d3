//! The one pipeline every front end runs on: source -> analysis -> clock -> front end.
//!
//! [`run`] reads batches from an [`EventSource`], feeds them to the [`Analysis`], ticks it on
//! the chosen clock, and hands both to a [`FrontEnd`] (JSON Lines, the terminal UI, later the
//! recorder and the exporter). It also owns what every front end needs the same way: stopping
//! on a signal, `--duration`, a quit key or a closed output; slicing floods so input and ticks
//! keep their turn; the final drain of what the kernel already queued; and the summary.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::analysis::decisions::Decision;
use crate::analysis::event::Sample;
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
    let mut latest_ns = 0u64;
    // The time of the last scripted tick.
    let mut script_ns = 0u64;
    let now = |latest_ns: u64, script_ns: u64| match opts.time_base {
        _ if opts.scripted => script_ns,
        TimeBase::Monotonic => now_monotonic().max(latest_ns),
        TimeBase::Samples => latest_ns,
    };
    let cap = opts.max_samples_per_turn.max(1);
    let mut ticks = tokio::time::interval(opts.tick.max(Duration::from_millis(10)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let deadline = async {
        match opts.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    // A batch larger than `cap` is ingested in slices, one per turn of the loop.
    let mut backlog: Vec<Sample> = Vec::new();
    let mut backlog_at = 0;
    let mut source_open = true;
    let mut signalled = false;

    loop {
        let has_backlog = backlog_at < backlog.len();
        // Biased: stop, the deadline, input and ticks are polled before intake, every turn, so
        // a flood of samples cannot starve them.
        let control = tokio::select! {
            biased;
            () = stop.wait() => {
                signalled = true;
                break;
            }
            () = &mut deadline => break,
            control = front.input(&mut *analysis) => control?,
            _ = ticks.tick(), if !opts.scripted => {
                let ready = source.take_ready();
                let mut control = Control::Continue;
                if let Some(readings) = ready.sockets {
                    analysis.ingest_sockets(&readings);
                    control = front.on_sockets(analysis, &readings).await?;
                }
                // Behind a backlog (or more than a turn's worth) the samples wait their turn.
                if has_backlog || ready.samples.len() > cap {
                    backlog.extend(ready.samples);
                } else if !ready.samples.is_empty() && control == Control::Continue {
                    control = ingest(analysis, front, &ready.samples, &mut latest_ns, stop, &mut signalled).await?;
                }
                if control == Control::Stop || signalled {
                    break;
                }
                // One "now" for the analysis and the front end (a recorder writes it down).
                let now_ns = now(latest_ns, script_ns);
                let status = Status {
                    now_ns,
                    counters: source.counters(),
                    source_ended: !source_open,
                    playback: source.playback(),
                };
                tick(analysis, front, &status, stop, &mut signalled).await?
            }
            () = std::future::ready(()), if has_backlog => {
                let end = (backlog_at + cap).min(backlog.len());
                let control = ingest(analysis, front, &backlog[backlog_at..end], &mut latest_ns, stop, &mut signalled).await?;
                backlog_at = end;
                if backlog_at == backlog.len() {
                    backlog.clear();
                    backlog_at = 0;
                }
                // Let the runtime's timer and I/O drivers run between slices of a flood.
                tokio::task::yield_now().await;
                control
            }
            item = source.next_item(), if source_open && !has_backlog => {
                let control = match item.context("reading samples")? {
                    Some(SourceItem::Batch(batch)) if batch.len() <= cap => {
                        ingest(analysis, front, &batch, &mut latest_ns, stop, &mut signalled).await?
                    }
                    Some(SourceItem::Batch(batch)) => {
                        backlog = batch;
                        backlog_at = 0;
                        Control::Continue
                    }
                    Some(SourceItem::Decisions(batch)) => {
                        for d in &batch {
                            analysis.ingest_decision(d);
                        }
                        tokio::select! {
                            biased;
                            () = stop.wait() => {
                                signalled = true;
                                Control::Stop
                            }
                            control = front.on_decisions(analysis, &batch) => control?,
                        }
                    }
                    Some(SourceItem::Tick { now_ns, counters }) => {
                        script_ns = now_ns;
                        let status = Status { now_ns, counters, source_ended: false, playback: source.playback() };
                        tick(analysis, front, &status, stop, &mut signalled).await?
                    }
                    Some(SourceItem::Sockets(readings)) => {
                        analysis.ingest_sockets(&readings);
                        front.on_sockets(analysis, &readings).await?
                    }
                    Some(SourceItem::Host(env)) => {
                        analysis.set_env(*env);
                        Control::Continue
                    }
                    Some(SourceItem::Action(action)) => front.on_action(analysis, &action).await?,
                    Some(SourceItem::Restart) => {
                        analysis.restart();
                        latest_ns = 0;
                        script_ns = 0;
                        Control::Continue
                    }
                    None => {
                        source_open = false;
                        front.on_source_end()
                    }
                };
                tokio::task::yield_now().await;
                control
            }
        };
        if control == Control::Stop || signalled {
            break;
        }
    }

    // From here on the counters must be final: the source stops producing (a live kernel
    // detaches its programs), so received + lost accounts for everything it emitted.
    let stopped = source.stop_producing();
    // What was sliced off but not yet ingested, then what the source already queued: bounded,
    // since under live traffic the queue never runs dry. A second signal ends the drain.
    let drain_until = tokio::time::Instant::now() + opts.final_drain;
    let mut pending = backlog.split_off(backlog_at);
    loop {
        if !pending.is_empty() {
            for s in &pending {
                latest_ns = latest_ns.max(s.ts_ns);
                analysis.ingest(s);
            }
            let _ = tokio::time::timeout_at(drain_until, front.on_batch(analysis, &pending)).await;
        }
        // The deadline is checked here too: a source that is always ready (a flood) would
        // otherwise win every `timeout_at`, which polls its future before the clock.
        if !source_open || opts.scripted || source.drained() || tokio::time::Instant::now() >= drain_until {
            break;
        }
        match tokio::time::timeout_at(drain_until, source.next_batch()).await {
            Ok(Ok(Some(batch))) => pending = batch,
            _ => break,
        }
    }
    analysis.tick(now(latest_ns, script_ns));
    let summary = summary(source, analysis);
    if signalled {
        // Asked to stop: the summary gets a moment to reach the output, no more (a reader that
        // stopped reading must not keep a signalled process alive).
        tokio::select! {
            biased;
            () = stop.wait() => {}
            finished = tokio::time::timeout(FINISH_AFTER_SIGNAL, front.finish(analysis, &summary)) => {
                if let Ok(finished) = finished {
                    finished?;
                }
            }
        }
    } else {
        // The run ended by itself: the output gets everything, unless a signal says stop.
        tokio::select! {
            biased;
            () = stop.wait() => {}
            finished = front.finish(analysis, &summary) => finished?,
        }
    }
    // Only now: the front end has had the summary and given the terminal back.
    stopped?;
    Ok(summary)
}

/// Tick the analysis at `status.now_ns`, then the front end; a stop cancels the front end.
async fn tick<F: FrontEnd>(
    analysis: &mut Analysis,
    front: &mut F,
    status: &Status,
    stop: &mut impl StopSignal,
    signalled: &mut bool,
) -> Result<Control> {
    analysis.tick(status.now_ns);
    tokio::select! {
        biased;
        () = stop.wait() => {
            *signalled = true;
            Ok(Control::Stop)
        }
        control = front.on_tick(analysis, status) => control,
    }
}

async fn ingest<F: FrontEnd>(
    analysis: &mut Analysis,
    front: &mut F,
    batch: &[Sample],
    latest_ns: &mut u64,
    stop: &mut impl StopSignal,
    signalled: &mut bool,
) -> Result<Control> {
    for s in batch {
        *latest_ns = (*latest_ns).max(s.ts_ns);
        analysis.ingest(s);
    }
    tokio::select! {
        biased;
        () = stop.wait() => {
            *signalled = true;
            Ok(Control::Stop)
        }
        control = front.on_batch(analysis, batch) => control,
    }
}
