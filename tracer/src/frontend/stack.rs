//! The one front-end stack every mode runs through the pipeline: a front end (the terminal UI,
//! JSON Lines, or [`Headless`]), a side job beside it (the kernel filter's upkeep), the
//! recorder around that and the metrics exporter outermost, each optional. Live tracing, a
//! recording session, `cctrace serve` and a replay differ only in which of them they give. What
//! a side job is, the wrapper that runs one beside a front end and `NoJob` are in
//! [`crate::side_job`], below the layers whose jobs implement it.

use anyhow::Result;

use crate::analysis::schema::SummaryRecord;
use crate::analysis::Analysis;
use crate::metrics::{MetricsService, WithMetrics};
use crate::pipeline::{Control, FrontEnd, Status};
use crate::recording::{Recorder, Recording};
use crate::side_job::{Beside, SideJob};

/// What runs around a front end; `Extras::default()` is none of it.
pub struct Extras<J> {
    /// Work beside the front end on the same samples and ticks.
    pub job: Option<J>,
    pub recorder: Option<Recorder>,
    pub metrics: Option<MetricsService>,
}

impl<J> Default for Extras<J> {
    fn default() -> Self {
        Self { job: None, recorder: None, metrics: None }
    }
}

/// `front` with its job, recorder and metrics around it, outermost last: the metrics sees
/// what the recorder saw, and the recorder takes the front end's actions through the job.
pub type Stack<F, J> = WithMetrics<Recording<Beside<F, J>>>;

/// Build the stack around `front`.
pub fn stack<F: FrontEnd, J: SideJob>(front: F, extras: Extras<J>) -> Stack<F, J> {
    WithMetrics::new(Recording::new(Beside::new(front, extras.job), extras.recorder), extras.metrics)
}

/// A front end that shows nothing: `cctrace record` and `cctrace serve`.
pub struct Headless;

impl FrontEnd for Headless {
    async fn on_tick(&mut self, _analysis: &Analysis, _status: &Status) -> Result<Control> {
        Ok(Control::Continue)
    }

    async fn finish(&mut self, _analysis: &Analysis, _summary: &SummaryRecord) -> Result<()> {
        Ok(())
    }
}
