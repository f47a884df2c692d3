//! The terminal UI: a live table of TCP flows, heavy and flagged ones first, with a detail view
//! per flow (history charts, CA-state timeline, verdict, fix).
//!
//! Split as ratatui applications usually are: [`state`] holds what is shown, [`update`] turns
//! keys into state changes, [`view`] and `detail` draw the state and nothing else,
//! [`terminal`] owns the terminal. [`run`] ties them to an [`EventSource`]: intake, keys and
//! frames are separate arms of one `select!`, so a frame is drawn from state on a fixed tick and
//! never waits on the kernel, and a flood of samples cannot starve the keyboard.

mod detail;
mod format;
pub mod state;
pub mod terminal;
pub mod update;
pub mod view;

#[cfg(test)]
mod feed;
#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::io;
use std::time::Duration;

use anyhow::{Context, Result};
use crossterm::event::{Event, EventStream};
use futures_util::{Stream, StreamExt};
use ratatui::backend::Backend;
use ratatui::Terminal;

use crate::analysis::diagnosis::{DiagnosisConfig, Environment};
use crate::analysis::event::Sample;
use crate::analysis::model::TableConfig;
use crate::analysis::Analysis;
use crate::clock::WallClock;
use crate::source::EventSource;

pub use state::{AppState, Column, HeaderInfo, SortDir, View};
pub use update::{handle_key, Action};
pub use view::draw;

/// Which clock "now" is for ageing flows and judging them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeBase {
    /// CLOCK_MONOTONIC (the clock live kernel samples carry), or the newest sample's time when
    /// that runs ahead: idle flows are seen idle. The JSON output judges the same way.
    #[default]
    Monotonic,
    /// The newest sample's timestamp only: for a replay whose times lie in the past.
    Samples,
}

#[derive(Clone, Debug)]
pub struct TuiOptions {
    /// How often a frame is drawn (and the analysis ticked).
    pub frame_interval: Duration,
    pub time_base: TimeBase,
    /// Samples ingested before input and frames get a turn again.
    pub max_samples_per_turn: usize,
    /// Start with all flows listed rather than heavy ones only.
    pub show_all: bool,
    pub table: TableConfig,
    pub diagnosis: DiagnosisConfig,
    /// Re-read host facts (namespaces come and go) every few seconds, when given; e.g.
    /// `Some(crate::host::environment)`.
    pub env_refresh: Option<fn() -> Environment>,
}

impl Default for TuiOptions {
    fn default() -> Self {
        Self {
            frame_interval: Duration::from_millis(250),
            time_base: TimeBase::Monotonic,
            max_samples_per_turn: 4096,
            show_all: false,
            table: TableConfig::default(),
            diagnosis: DiagnosisConfig::default(),
            env_refresh: None,
        }
    }
}

/// Take over the terminal and show `source` live until q, Ctrl-C or `stop` (e.g. SIGTERM).
/// The terminal is restored before this returns, also on error, so the caller may print.
pub async fn run(
    source: &mut dyn EventSource,
    header: HeaderInfo,
    env: Environment,
    opts: TuiOptions,
    stop: impl Future<Output = ()>,
) -> Result<()> {
    let analysis = Analysis::new(opts.table.clone(), opts.diagnosis.clone(), env).with_env_refresh(opts.env_refresh);
    let mut state = AppState::new(analysis, header).with_show_all(opts.show_all);
    let mut guard = terminal::TerminalGuard::enter()?;
    let keys = EventStream::new();
    let result = run_with_terminal(guard.terminal(), keys, source, &mut state, &opts, stop).await;
    let restored = guard.leave();
    result.and(restored)
}

/// The loop of [`run`] on any backend and key stream: the seam tests drive with a
/// `TestBackend` and a scripted stream. Returns on quit, on `stop`, or on an error; a source
/// that ends (a recording) leaves the last state on screen until the user quits.
pub async fn run_with_terminal<B, K>(
    terminal: &mut Terminal<B>,
    mut keys: K,
    source: &mut dyn EventSource,
    state: &mut AppState,
    opts: &TuiOptions,
    stop: impl Future<Output = ()>,
) -> Result<()>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    K: Stream<Item = io::Result<Event>> + Unpin,
{
    let clock = WallClock::now();
    let now = |state: &AppState| match opts.time_base {
        TimeBase::Monotonic => clock.monotonic_now_ns().max(state.latest_sample_ns()),
        TimeBase::Samples => state.latest_sample_ns(),
    };
    let cap = opts.max_samples_per_turn.max(1);
    let mut frames = tokio::time::interval(opts.frame_interval.max(Duration::from_millis(10)));
    frames.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(stop);
    // A batch larger than `cap` is ingested in slices, one per turn of the loop.
    let mut backlog: Vec<Sample> = Vec::new();
    let mut backlog_at = 0;
    let mut keys_open = true;
    let mut source_open = true;

    loop {
        let has_backlog = backlog_at < backlog.len();
        // Biased: stop, keys and frames are polled before intake, every turn.
        tokio::select! {
            biased;
            () = &mut stop => break,
            key = keys.next(), if keys_open => match key {
                Some(Ok(Event::Key(k))) => {
                    if handle_key(state, k) == Action::Quit {
                        break;
                    }
                    draw_frame(terminal, state)?;
                }
                Some(Ok(Event::Resize(..))) => draw_frame(terminal, state)?,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e).context("reading terminal input"),
                // No more input (not a terminal): keep showing until `stop`.
                None => keys_open = false,
            },
            _ = frames.tick() => {
                state.tick(now(state), source.counters());
                draw_frame(terminal, state)?;
            }
            () = std::future::ready(()), if has_backlog => {
                let end = (backlog_at + cap).min(backlog.len());
                state.ingest(&backlog[backlog_at..end]);
                backlog_at = end;
                if backlog_at == backlog.len() {
                    backlog.clear();
                    backlog_at = 0;
                }
                // Let the runtime's timer and I/O drivers run between slices of a flood.
                tokio::task::yield_now().await;
            }
            batch = source.next_batch(), if source_open && !has_backlog => {
                match batch.context("reading samples")? {
                    Some(batch) if batch.len() <= cap => state.ingest(&batch),
                    Some(batch) => {
                        backlog = batch;
                        backlog_at = 0;
                    }
                    None => {
                        source_open = false;
                        state.set_source_ended();
                    }
                }
                tokio::task::yield_now().await;
            }
        }
    }
    Ok(())
}

fn draw_frame<B>(terminal: &mut Terminal<B>, state: &AppState) -> Result<()>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
{
    terminal.draw(|f| draw(f, state)).context("drawing the terminal")?;
    Ok(())
}
