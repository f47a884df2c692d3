//! Work that runs beside a front end without showing anything: recording, the metrics
//! exporter, keeping the kernel filter on the host's containers.
//!
//! The stack every mode runs, these around a front end, is put together in `frontend::stack`.
//! The two cannot be one module: the kernel filter's upkeep (kernel layer) and the recorder
//! (recording layer) implement [`SideJob`], so it sits below them, here; the stack names the
//! recorder and the metrics exporter, so it sits above them, with the front ends.
//!
//! Each such job implements [`SideJob`] (only the callbacks it needs) and runs inside
//! [`Beside`], the one wrapper that forwards every [`FrontEnd`] callback to the front end it
//! wraps. A callback added to `FrontEnd` is forwarded here once, for every job: a job cannot
//! silently swallow it, as hand-written wrappers did when deep mode's decisions and the fix's
//! actions were added.

use anyhow::Result;

use crate::analysis::deep_decisions::Decision;
use crate::analysis::sample::Sample;
use crate::analysis::schema::{ActionRecord, SummaryRecord};
use crate::analysis::udp::SocketReadings;
use crate::analysis::Analysis;
use crate::pipeline::{Control, FrontEnd, Status};

/// What a job beside a front end sees; it sees each item before the front end does. An error
/// ends the run as the front end's own would.
#[allow(async_fn_in_trait)] // used with concrete types on one thread, as FrontEnd is
pub trait SideJob {
    fn on_batch(&mut self, _analysis: &Analysis, _batch: &[Sample]) -> Result<()> {
        Ok(())
    }

    fn on_decisions(&mut self, _analysis: &Analysis, _batch: &[Decision]) -> Result<()> {
        Ok(())
    }

    fn on_sockets(&mut self, _analysis: &Analysis, _readings: &SocketReadings) -> Result<()> {
        Ok(())
    }

    fn on_tick(&mut self, _analysis: &Analysis, _status: &Status) -> Result<()> {
        Ok(())
    }

    /// Actions on the host: the ones the front end just took (a fix from the terminal UI), or
    /// one a played-back recording holds.
    fn on_actions(&mut self, _actions: &[ActionRecord]) -> Result<()> {
        Ok(())
    }

    /// The run is over; runs before the front end's own finish, and its error is reported
    /// after the front end finished (what the front end shows still gets out).
    async fn finish(&mut self, _analysis: &Analysis, _summary: &SummaryRecord) -> Result<()> {
        Ok(())
    }
}

/// A front end with a job beside it (none when `job` is `None`).
pub struct Beside<F, J> {
    pub inner: F,
    pub job: Option<J>,
    /// Actions taken from `inner` for the job, kept for whoever wraps this (another job).
    actions: Vec<ActionRecord>,
}

impl<F, J> Beside<F, J> {
    pub fn new(inner: F, job: Option<J>) -> Self {
        Self { inner, job, actions: Vec::new() }
    }
}

impl<F: FrontEnd, J: SideJob> FrontEnd for Beside<F, J> {
    async fn on_batch(&mut self, analysis: &Analysis, batch: &[Sample]) -> Result<Control> {
        if let Some(job) = &mut self.job {
            job.on_batch(analysis, batch)?;
        }
        self.inner.on_batch(analysis, batch).await
    }

    async fn on_decisions(&mut self, analysis: &Analysis, batch: &[Decision]) -> Result<Control> {
        if let Some(job) = &mut self.job {
            job.on_decisions(analysis, batch)?;
        }
        self.inner.on_decisions(analysis, batch).await
    }

    async fn on_sockets(&mut self, analysis: &Analysis, readings: &SocketReadings) -> Result<Control> {
        if let Some(job) = &mut self.job {
            job.on_sockets(analysis, readings)?;
        }
        self.inner.on_sockets(analysis, readings).await
    }

    async fn on_tick(&mut self, analysis: &Analysis, status: &Status) -> Result<Control> {
        if let Some(job) = &mut self.job {
            job.on_tick(analysis, status)?;
        }
        self.inner.on_tick(analysis, status).await
    }

    async fn input(&mut self, analysis: &mut Analysis) -> Result<Control> {
        let control = self.inner.input(analysis).await;
        // What the user just did to the host reaches the job at once, error or not.
        let actions = self.inner.take_actions();
        if !actions.is_empty() {
            if let Some(job) = &mut self.job {
                job.on_actions(&actions)?;
            }
            self.actions.extend(actions);
        }
        control
    }

    fn on_source_end(&mut self) -> Control {
        self.inner.on_source_end()
    }

    async fn on_action(&mut self, analysis: &Analysis, action: &ActionRecord) -> Result<Control> {
        if let Some(job) = &mut self.job {
            job.on_actions(std::slice::from_ref(action))?;
        }
        self.inner.on_action(analysis, action).await
    }

    fn take_actions(&mut self) -> Vec<ActionRecord> {
        let mut actions = std::mem::take(&mut self.actions);
        actions.extend(self.inner.take_actions());
        actions
    }

    async fn finish(&mut self, analysis: &Analysis, summary: &SummaryRecord) -> Result<()> {
        let job = match &mut self.job {
            Some(job) => job.finish(analysis, summary).await,
            None => Ok(()),
        };
        self.inner.finish(analysis, summary).await?;
        job
    }
}

/// A side job that does nothing: for stacks with no job beside the front end.
pub struct NoJob;

impl SideJob for NoJob {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnosis::DiagnosisConfig;
    use crate::analysis::flow_table::TableConfig;
    use crate::analysis::schema::ActionKind;
    use crate::pipeline::{NoStop, PipelineOptions, TimeBase};
    use crate::source::FeedSource;
    use crate::test_support::feed;

    /// Counts what it is shown.
    #[derive(Default)]
    struct Tally {
        samples: usize,
        ticks: usize,
        actions: usize,
        finished: bool,
    }

    impl SideJob for Tally {
        fn on_batch(&mut self, _analysis: &Analysis, batch: &[Sample]) -> Result<()> {
            self.samples += batch.len();
            Ok(())
        }
        fn on_tick(&mut self, _analysis: &Analysis, _status: &Status) -> Result<()> {
            self.ticks += 1;
            Ok(())
        }
        fn on_actions(&mut self, actions: &[ActionRecord]) -> Result<()> {
            self.actions += actions.len();
            Ok(())
        }
        async fn finish(&mut self, _analysis: &Analysis, _summary: &SummaryRecord) -> Result<()> {
            self.finished = true;
            Ok(())
        }
    }

    /// A front end that counts too, takes one action on its first input and keeps going after
    /// the feed ends until its third tick.
    #[derive(Default)]
    struct Shown {
        samples: usize,
        ticks: usize,
        acted: bool,
        pending: Vec<ActionRecord>,
        finished: bool,
    }

    impl FrontEnd for Shown {
        async fn on_batch(&mut self, _analysis: &Analysis, batch: &[Sample]) -> Result<Control> {
            self.samples += batch.len();
            Ok(Control::Continue)
        }
        /// Stops after three ticks, whenever the feed ends: every run ticks.
        async fn on_tick(&mut self, _analysis: &Analysis, _status: &Status) -> Result<Control> {
            self.ticks += 1;
            Ok(if self.ticks >= 3 { Control::Stop } else { Control::Continue })
        }
        fn on_source_end(&mut self) -> Control {
            Control::Continue
        }
        async fn input(&mut self, _analysis: &mut Analysis) -> Result<Control> {
            if self.acted {
                return std::future::pending().await;
            }
            self.acted = true;
            self.pending.push(ActionRecord {
                ts_ns: feed::ts_ns(1),
                action: ActionKind::Fix,
                netns: 4026532999,
                target: "ip netns cct-1".into(),
                cc: "bbr".into(),
                default_before: "cubic".into(),
                default_after: "bbr".into(),
                switched: Vec::new(),
                messages: Vec::new(),
                sysctls: Vec::new(),
            });
            Ok(Control::Continue)
        }
        fn take_actions(&mut self) -> Vec<ActionRecord> {
            std::mem::take(&mut self.pending)
        }
        async fn finish(&mut self, _analysis: &Analysis, _summary: &SummaryRecord) -> Result<()> {
            self.finished = true;
            Ok(())
        }
    }

    #[tokio::test]
    async fn every_job_in_a_stack_sees_what_the_front_end_sees_and_its_actions() {
        let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), feed::env());
        let mut source = FeedSource::new((0..40).map(feed::batch).collect());
        let options = PipelineOptions {
            tick: std::time::Duration::from_millis(5),
            max_samples_per_turn: 5,
            time_base: TimeBase::Samples,
            final_drain: std::time::Duration::ZERO,
            ..PipelineOptions::default()
        };
        let mut front = Beside::new(Beside::new(Shown::default(), Some(Tally::default())), Some(Tally::default()));
        crate::pipeline::run(&mut source, &mut analysis, &mut front, &options, || 0, &mut NoStop).await.expect("runs");
        let inner_job = front.inner.job.as_ref().expect("inner job");
        let outer_job = front.job.as_ref().expect("outer job");
        let shown = &front.inner.inner;
        assert_eq!(shown.ticks, 3);
        assert!(shown.samples > 0 && shown.finished);
        for job in [inner_job, outer_job] {
            assert_eq!(job.samples, shown.samples);
            assert_eq!(job.ticks, shown.ticks);
            assert!(job.finished);
            assert_eq!(job.actions, 1, "the front end's action reaches every job once");
        }
    }
}
