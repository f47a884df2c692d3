//! The terminal UI: a live table of TCP flows, heavy and flagged ones first, with a detail view
//! per flow (history charts, CA-state timeline, verdict, fix).
//!
//! A tree of layers, each file importing only from those below it (`layers_test` checks):
//! 1. `format`, `origin`, [`terminal`]: words, where a flow comes from, the terminal;
//! 2. [`state`]: what the UI knows and remembers, copied from the analysis once per frame;
//! 3. `order`, `panels`: pure functions of the state (the table's order; what panels show);
//! 4. [`update`] (keys and frames to state changes) beside [`view`] (draws the state);
//! 5. this file: [`TuiFrontEnd`] plugs them into the [`crate::pipeline`]: its tick draws a frame
//!    from state and never waits on the kernel, and keys are an input of their own that a flood
//!    of samples cannot starve.

mod format;
mod order;
mod origin;
mod panels;
pub mod state;
pub mod terminal;
pub mod update;
pub mod view;

#[cfg(test)]
pub(crate) mod feed;
#[cfg(test)]
mod frame_tests;
#[cfg(test)]
mod layers_test;
#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;

use std::io;
use std::time::Duration;

use anyhow::{Context, Result};
use crossterm::event::{Event, EventStream, KeyEvent};
use futures_util::{Stream, StreamExt};
use ratatui::backend::Backend;
use ratatui::Terminal;

use crate::analysis::filter::FilterControl;
use crate::analysis::fix_plan::commands::FIX_CC;
use crate::analysis::fix_plan::FixControl;
use crate::analysis::schema::{ActionRecord, SummaryRecord};
use crate::analysis::Analysis;
use crate::frontend::stack::{stack, Extras};
use crate::pipeline::{self, Control, FrontEnd, PipelineOptions, Status, StopSignal};
use crate::side_job::SideJob;
use crate::source::EventSource;

pub use state::{AppState, Column, HeaderInfo, SortDir, View};
pub use update::{handle_key, parse_filter_spec, parse_seek_time, Action, PlaybackCommand};
pub use view::draw;

#[derive(Clone, Debug)]
pub struct TuiOptions {
    /// How often a frame is drawn.
    pub frame_interval: Duration,
    /// Start with all flows listed rather than heavy ones only.
    pub show_all: bool,
}

impl Default for TuiOptions {
    fn default() -> Self {
        // Once a second, as the analysis judges and its rates are measured (four frames a
        // second drew the same verdicts and rates four times: most of the UI's cost); keys
        // and resizes draw at once.
        Self { frame_interval: Duration::from_secs(1), show_all: false }
    }
}

/// The kernel filter's control, when the front end may change it (`None`: the prompt says the
/// filter cannot be changed here).
pub type FilterControlBox = Box<dyn FilterControl + Send>;

/// The host side of a fix, when the front end may apply one (`None`: `f` says it cannot).
pub type FixControlBox = Box<dyn FixControl + Send>;

/// What a key may change outside the UI: the kernel filter and the fix.
#[derive(Default)]
pub struct Controls<'a> {
    pub kernel_filter: Option<&'a mut dyn FilterControl>,
    pub fixer: Option<&'a mut dyn FixControl>,
}

/// Apply a key, then bring the rows and the detail copy up to date with it (a re-sort, a new
/// detail flow, a resume); a kernel filter typed in goes to the filter control, a fix asked
/// for or confirmed to the fix control. What the front end does with every key; tests do the
/// same.
pub fn apply_key(state: &mut AppState, analysis: &Analysis, controls: Controls<'_>, key: KeyEvent) -> Action {
    let mut action = handle_key(state, key);
    let env = &analysis.env;
    let no_fixer = || "this source cannot change the host".to_string();
    match action {
        Action::SetKernelFilter(spec) => {
            let result = match controls.kernel_filter {
                Some(control) => control.apply(&spec, env),
                None => Err("this source has no kernel filter to change".into()),
            };
            state.kernel_filter_applied(spec, result);
            action = Action::None;
        }
        Action::PlanFix { cookie, netns, flagged } => {
            let plan = controls.fixer.map_or_else(|| Err(no_fixer()), |f| f.plan(env, netns, FIX_CC));
            state.fix_planned(cookie, flagged, plan);
            action = Action::None;
        }
        Action::ApplyFix => {
            if let Some((cookie, plan)) = state.confirmed_plan() {
                let done = controls.fixer.map_or_else(|| Err(no_fixer()), |f| f.apply(env, &plan));
                state.fix_done(Some(cookie), done);
            }
            action = Action::None;
        }
        Action::UndoFix { netns } => {
            let done = controls.fixer.map_or_else(|| Err(no_fixer()), |f| f.undo(env, netns));
            state.fix_done(None, done);
            action = Action::None;
        }
        _ => {}
    }
    state.refresh(analysis);
    action
}

fn play(player: &crate::recording::player::Player, command: PlaybackCommand) {
    match command {
        PlaybackCommand::TogglePause => player.toggle_pause(),
        PlaybackCommand::Step => player.step(),
        PlaybackCommand::SeekBy(secs) => player.seek_by(secs),
        PlaybackCommand::SeekTo(secs) => player.seek_to(std::time::Duration::from_secs(secs)),
        PlaybackCommand::Faster => player.faster(),
        PlaybackCommand::Slower => player.slower(),
    }
}

/// The terminal UI as a front end of the pipeline, on any backend and key stream (tests use a
/// `TestBackend` and a scripted stream).
pub struct TuiFrontEnd<'t, B: Backend, K> {
    terminal: &'t mut Terminal<B>,
    keys: K,
    keys_open: bool,
    /// Changes the kernel filter (the `F` prompt); `None` where there is none to change.
    kernel_filter: Option<FilterControlBox>,
    /// Applies and undoes the fix (`f`, `u`); `None` where the host is not to be changed.
    fixer: Option<FixControlBox>,
    /// A recording in progress, shown in the header.
    recording: Option<crate::recording::RecordingStatus>,
    /// Moves the playback of a replayed recording.
    player: Option<crate::recording::player::Player>,
    pub state: AppState,
    /// What the last frame drew from; a tick with nothing new draws no frame.
    drawn_from: Option<FrameInputs>,
}

/// Everything outside the keys that a frame shows: while none of it changes (an idle host),
/// a frame would draw the same screen, so none is drawn.
#[derive(Clone, Debug, PartialEq)]
struct FrameInputs {
    /// Samples, socket readings or decisions arrived, or an action, since the last frame.
    fed: bool,
    counters: crate::source::SourceCounters,
    verdicts: u64,
    flows: usize,
    departed: u64,
    source_ended: bool,
    playback: Option<crate::source::Playback>,
    recording: Option<String>,
}

impl<'t, B, K> TuiFrontEnd<'t, B, K>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    K: Stream<Item = io::Result<Event>> + Unpin,
{
    /// A front end drawing `state` on `terminal`, reading `keys`, changing the kernel filter
    /// through `kernel_filter` (its filter in force is the one the UI starts with).
    pub fn new(
        terminal: &'t mut Terminal<B>,
        keys: K,
        state: AppState,
        kernel_filter: Option<FilterControlBox>,
    ) -> Self {
        let state = match &kernel_filter {
            Some(f) => {
                let mut state = state.with_kernel_filter(f.current());
                if state.header.filters.is_empty() {
                    state.header.filters = f.current().describe();
                }
                state
            }
            None => state,
        };
        Self {
            terminal,
            keys,
            keys_open: true,
            kernel_filter,
            fixer: None,
            recording: None,
            player: None,
            state,
            drawn_from: None,
        }
    }

    /// Let `f` and `u` apply and undo the fix through `fixer`.
    pub fn with_fixer(mut self, fixer: Option<FixControlBox>) -> Self {
        self.state.can_fix = fixer.is_some();
        self.fixer = fixer;
        self
    }

    /// Steer `player` with the replay keys.
    pub fn with_player(mut self, player: Option<crate::recording::player::Player>) -> Self {
        self.state.replay = player.is_some();
        self.player = player;
        self
    }

    /// Show `status` (time and size so far) in the header while recording.
    pub fn with_recording(mut self, status: Option<crate::recording::RecordingStatus>) -> Self {
        self.recording = status;
        self
    }

    /// Something arrived that the next frame must show.
    fn fed(&mut self) {
        if let Some(drawn) = &mut self.drawn_from {
            drawn.fed = true;
        }
    }

    fn draw(&mut self) -> Result<()> {
        let state = &self.state;
        self.terminal.draw(|f| draw(f, state)).context("drawing the terminal")?;
        Ok(())
    }
}

impl<B, K> FrontEnd for TuiFrontEnd<'_, B, K>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    K: Stream<Item = io::Result<Event>> + Unpin,
{
    async fn on_batch(&mut self, _analysis: &Analysis, _batch: &[crate::analysis::sample::Sample]) -> Result<Control> {
        self.fed();
        Ok(Control::Continue)
    }

    async fn on_decisions(
        &mut self,
        _analysis: &Analysis,
        _batch: &[crate::analysis::deep_decisions::Decision],
    ) -> Result<Control> {
        self.fed();
        Ok(Control::Continue)
    }

    async fn on_sockets(
        &mut self,
        _analysis: &Analysis,
        _readings: &crate::analysis::udp::SocketReadings,
    ) -> Result<Control> {
        self.fed();
        Ok(Control::Continue)
    }

    async fn on_tick(&mut self, analysis: &Analysis, status: &Status) -> Result<Control> {
        // Reading ahead to a seek target: nothing worth drawing until it is reached.
        if status.playback.is_some_and(|p| p.catching_up) {
            return Ok(Control::Continue);
        }
        let recording = self.recording.as_ref().map(crate::recording::RecordingStatus::badge);
        let inputs = FrameInputs {
            fed: false,
            counters: status.counters,
            verdicts: analysis.diagnoser.generation(),
            flows: analysis.table.len(),
            departed: analysis.table.departed(),
            source_ended: status.source_ended,
            playback: status.playback,
            recording: recording.clone(),
        };
        if self.drawn_from.as_ref() == Some(&inputs) {
            return Ok(Control::Continue);
        }
        self.state.header.recording = recording;
        self.state.sync(analysis, status);
        self.draw()?;
        self.drawn_from = Some(inputs);
        Ok(Control::Continue)
    }

    async fn input(&mut self, analysis: &mut Analysis) -> Result<Control> {
        if !self.keys_open {
            return std::future::pending().await;
        }
        match self.keys.next().await {
            Some(Ok(Event::Key(k))) => {
                let controls = Controls {
                    kernel_filter: self.kernel_filter.as_deref_mut().map(|f| f as &mut dyn FilterControl),
                    fixer: self.fixer.as_deref_mut().map(|f| f as &mut dyn FixControl),
                };
                match apply_key(&mut self.state, analysis, controls, k) {
                    Action::Quit => return Ok(Control::Stop),
                    Action::Playback(command) => {
                        if let Some(player) = &self.player {
                            play(player, command);
                        }
                        // The badge follows the key at once, not at the next tick.
                        self.state.playback = self.player.as_ref().map(crate::recording::player::Player::playback);
                    }
                    _ => {}
                }
                // The flow in the detail view keeps its full chart history, busy or not.
                analysis.table.keep_history(self.state.detail_cookie());
                self.draw()?;
            }
            Some(Ok(Event::Resize(..))) => self.draw()?,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e).context("reading terminal input"),
            // No more input (not a terminal): keep showing until stopped.
            None => self.keys_open = false,
        }
        Ok(Control::Continue)
    }

    /// A replayed fix: marked on the charts of the flows it switched, as it was live.
    async fn on_action(&mut self, _analysis: &Analysis, action: &ActionRecord) -> Result<Control> {
        self.fed();
        self.state.action_replayed(action.clone());
        Ok(Control::Continue)
    }

    fn take_actions(&mut self) -> Vec<ActionRecord> {
        self.state.take_actions()
    }

    /// A recording that ran out stays on screen until the user quits.
    fn on_source_end(&mut self) -> Control {
        self.state.set_source_ended();
        Control::Continue
    }

    /// The caller prints the summary once the terminal is restored.
    async fn finish(&mut self, _analysis: &Analysis, _summary: &SummaryRecord) -> Result<()> {
        Ok(())
    }
}

/// What the terminal UI runs with, besides its source and analysis.
pub struct TuiRun<J> {
    /// What the header says: the host, the source, the filter.
    pub header: HeaderInfo,
    pub options: TuiOptions,
    /// A replay's (scripted) ticks, `--duration`; live, the frame interval is the tick.
    pub pipeline: PipelineOptions,
    /// Lets the user change the kernel filter (`F`).
    pub kernel_filter: Option<FilterControlBox>,
    /// Lets `f` and `u` apply and undo the fix.
    pub fixer: Option<FixControlBox>,
    /// What runs around the UI in the one front-end stack: the recorder (which the header
    /// shows) and the metrics service.
    pub extras: Extras<J>,
    /// Moves a replayed recording's playback (the replay keys).
    pub player: Option<crate::recording::player::Player>,
}

impl<J> TuiRun<J> {
    /// The default options, no kernel filter to change, no fix, no playback.
    pub fn new(header: HeaderInfo, pipeline: PipelineOptions, extras: Extras<J>) -> Self {
        Self {
            header,
            options: TuiOptions::default(),
            pipeline,
            kernel_filter: None,
            fixer: None,
            extras,
            player: None,
        }
    }
}

/// Take over the terminal and show `source` until q, Ctrl-C, `--duration` or `stop`
/// (SIGTERM), as `ui` says. The terminal is restored before this returns, also on error, so
/// the caller may print the summary it returns.
pub async fn run<J: SideJob>(
    source: &mut dyn EventSource,
    analysis: &mut Analysis,
    ui: TuiRun<J>,
    stop: &mut impl StopSignal,
) -> Result<SummaryRecord> {
    let TuiRun { header, options, pipeline, kernel_filter, fixer, extras, player } = ui;
    let mut guard = terminal::TerminalGuard::enter()?;
    let state = AppState::new(header).with_show_all(options.show_all);
    let status = extras.recorder.as_ref().map(crate::recording::Recorder::status);
    let tui = TuiFrontEnd::new(guard.terminal(), EventStream::new(), state, kernel_filter)
        .with_recording(status)
        .with_fixer(fixer)
        .with_player(player);
    let mut front = stack(tui, extras);
    // A replay ticks where the recording did; live, a frame is drawn at every tick.
    let pipeline =
        if pipeline.scripted { pipeline } else { PipelineOptions { tick: options.frame_interval, ..pipeline } };
    let result = pipeline::run(source, analysis, &mut front, &pipeline, crate::clock::monotonic_now_ns, stop).await;
    drop(front);
    let restored = guard.leave();
    let summary = result?;
    restored?;
    Ok(summary)
}
