//! The UI's test harness over the shared feed ([`crate::test_support::feed`]): the analysis and
//! the UI state driven together, as the pipeline and the front end drive them.

use crossterm::event::KeyEvent;

use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::TableConfig;
use crate::analysis::sample::Sample;
use crate::analysis::Analysis;
use crate::pipeline::Status;
use crate::source::SourceCounters;
pub(crate) use crate::test_support::feed::*;

use super::state::{AppState, HeaderInfo};
use super::{apply_key, Action, Controls};

pub(crate) fn header() -> HeaderInfo {
    HeaderInfo {
        host: "edge-07".into(),
        kernel: "6.8.0-45-generic".into(),
        source: "live kernel (6/6 hooks)".into(),
        recording: None,
        filters: Vec::new(),
    }
}

/// The analysis and the UI state together, driven as the pipeline and the front end drive them.
pub(crate) struct Scene {
    pub analysis: Analysis,
    pub state: AppState,
    pub kernel: FakeFilter,
    pub fixer: FakeFixer,
}

impl Scene {
    pub(crate) fn new() -> Self {
        Self::on_host(env())
    }

    /// A scene on a host described by `env`.
    pub(crate) fn on_host(env: Environment) -> Self {
        Self {
            analysis: Analysis::new(TableConfig::default(), DiagnosisConfig::default(), env),
            state: AppState::new(header()).with_fixing(true),
            kernel: FakeFilter::default(),
            fixer: FakeFixer { established: vec![(CUBIC, "cubic"), (BBR, "bbr")], ..FakeFixer::default() },
        }
    }

    pub(crate) fn ingest(&mut self, batch: &[Sample]) {
        for s in batch {
            self.analysis.ingest(s);
        }
    }

    /// One frame: the analysis ticked at `now_ns`, the state synced from it.
    pub(crate) fn tick(&mut self, now_ns: u64, counters: SourceCounters) {
        self.analysis.tick(now_ns);
        let status = Status { now_ns, counters, source_ended: false, playback: None };
        self.state.sync(&self.analysis, &status);
    }

    /// A key, as the front end applies it.
    pub(crate) fn key(&mut self, key: KeyEvent) -> Action {
        let controls = Controls { kernel_filter: Some(&mut self.kernel), fixer: Some(&mut self.fixer) };
        apply_key(&mut self.state, &self.analysis, controls, key)
    }

    pub(crate) fn refresh(&mut self) {
        self.state.refresh(&self.analysis);
    }
}

impl std::ops::Deref for Scene {
    type Target = AppState;
    fn deref(&self) -> &AppState {
        &self.state
    }
}

impl std::ops::DerefMut for Scene {
    fn deref_mut(&mut self) -> &mut AppState {
        &mut self.state
    }
}

/// A scene fed `secs` seconds of `make`, ticked once per second as the pipeline would.
pub(crate) fn state_with(secs: u64, lost: u64, make: impl Fn(u64) -> Vec<Sample>) -> Scene {
    state_in(env(), secs, lost, make)
}

/// As [`state_with`], on a host described by `env`.
pub(crate) fn state_in(env: Environment, secs: u64, lost: u64, make: impl Fn(u64) -> Vec<Sample>) -> Scene {
    let mut scene = Scene::on_host(env);
    let mut received = 0;
    for tick in 0..=secs * 10 {
        let b = make(tick);
        received += b.len() as u64;
        scene.ingest(&b);
        if tick % 10 == 0 {
            scene.tick(ts_ns(tick), SourceCounters { received, lost, ..SourceCounters::default() });
        }
    }
    scene
}

/// The standard scene: 12 s of the five flows.
pub(crate) fn scene() -> Scene {
    state_with(12, 0, batch)
}
