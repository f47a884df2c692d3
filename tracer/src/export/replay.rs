//! A recording's entries through the one pipeline driver ([`crate::pipeline::run`] in its
//! scripted mode, on an [`EntriesSource`]), exactly as `cctrace replay` and the live run feed
//! the analysis (samples ingested in their batches' order, a tick at each recorded tick, the
//! host facts from each `Host` entry on), so rates and verdicts come out as they were live.
//!
//! Every export is a visitor of [`Step`]s: `Steps` is the front end that turns the driver's
//! calls into them, so an export needs no async runtime of its own.

use anyhow::Result;

use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::flow_table::TableConfig;
use crate::analysis::sample::Sample;
use crate::analysis::schema::{ActionRecord, SummaryRecord};
use crate::analysis::Analysis;
use crate::pipeline::{self, Control, FrontEnd, NoStop, PipelineOptions, Status};
use crate::recording::entry::{Entry, Header};
use crate::recording::EntriesSource;
use crate::source::SourceCounters;

/// What just happened to the analysis, seen after it was applied.
#[derive(Debug)]
pub enum Step<'a> {
    Header(&'a Header),
    /// One sample, just ingested.
    Sample(&'a Sample),
    /// The recorded tick at `now_ns`; `evaluated`: the flows were re-judged (at most once a second).
    Tick {
        now_ns: u64,
        counters: &'a SourceCounters,
        evaluated: bool,
    },
    Action(&'a ActionRecord),
    /// The recorded run's summary, after everything else.
    End(&'a SummaryRecord),
}

/// A fresh analysis as a live run starts one (no host reads: the facts come from the recording).
pub fn new_analysis(diagnosis: DiagnosisConfig) -> Analysis {
    Analysis::new(TableConfig::default(), diagnosis, Default::default())
}

/// The front end of a replay: each call of the driver as [`Step`]s for `on_step`.
struct Steps<F> {
    on_step: F,
    /// When the analysis last re-judged the flows, as of the previous tick.
    evaluated_ns: u64,
}

impl<F: FnMut(&Analysis, Step<'_>)> FrontEnd for Steps<F> {
    async fn on_batch(&mut self, analysis: &Analysis, batch: &[Sample]) -> Result<Control> {
        for s in batch {
            (self.on_step)(analysis, Step::Sample(s));
        }
        Ok(Control::Continue)
    }

    async fn on_tick(&mut self, analysis: &Analysis, status: &Status) -> Result<Control> {
        let evaluated = analysis.last_evaluation_ns() != self.evaluated_ns;
        self.evaluated_ns = analysis.last_evaluation_ns();
        (self.on_step)(analysis, Step::Tick { now_ns: status.now_ns, counters: &status.counters, evaluated });
        Ok(Control::Continue)
    }

    async fn on_action(&mut self, analysis: &Analysis, action: &ActionRecord) -> Result<Control> {
        (self.on_step)(analysis, Step::Action(action));
        Ok(Control::Continue)
    }

    async fn finish(&mut self, _analysis: &Analysis, _summary: &SummaryRecord) -> Result<()> {
        Ok(())
    }
}

/// Drive `analysis` through `entries`, calling `on_step` after each step is applied: the
/// header first, the recorded summary last.
pub fn replay(
    entries: impl IntoIterator<Item = Entry>,
    analysis: &mut Analysis,
    mut on_step: impl FnMut(&Analysis, Step<'_>),
) {
    let mut source = EntriesSource::new(entries);
    if let Some(h) = source.header() {
        on_step(analysis, Step::Header(h));
    }
    let opts = PipelineOptions { scripted: true, final_drain: std::time::Duration::ZERO, ..PipelineOptions::default() };
    let mut front = Steps { on_step: &mut on_step, evaluated_ns: analysis.last_evaluation_ns() };
    // The scripted driver never waits on a clock or a socket: a runtime on this thread only
    // polls it to its end.
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a current-thread runtime starts");
    // An in-memory source and a front end that cannot fail: the driver returns no error.
    let _ = runtime.block_on(pipeline::run(&mut source, analysis, &mut front, &opts, || 0, &mut NoStop));
    if let Some(summary) = source.recorded_summary() {
        on_step(analysis, Step::End(summary));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::environment::Environment;
    use crate::recording::fixture;
    use crate::recording::tests::{cut, entries, record};

    #[test]
    fn replay_judges_as_live_and_sees_every_sample_and_tick() {
        let entries = fixture::entries();
        let (mut samples, mut ticks, mut flagged) = (0, 0, false);
        let mut analysis = new_analysis(DiagnosisConfig::default());
        replay(entries.clone(), &mut analysis, |a, step| match step {
            Step::Sample(_) => samples += 1,
            Step::Tick { .. } => {
                ticks += 1;
                flagged |= a.table.get(fixture::CUBIC).and_then(|f| a.verdict(f)).is_some_and(|v| v.flagged);
            }
            _ => {}
        });
        assert_eq!(samples, fixture::sample_count(&entries));
        assert_eq!(ticks, entries.iter().filter(|e| matches!(e, Entry::Tick { .. })).count());
        assert!(flagged, "the lossy CUBIC flow is flagged on replay as it is live");
    }

    #[test]
    fn decisions_are_kept_and_replayed_into_the_analysis() {
        let mut entries = entries(3);
        entries.insert(2, Entry::Decisions { decisions: vec![cut(1, 1_500_000_000), cut(2, 1_600_000_000)] });
        let bytes = record(&entries);
        let (read, end) = crate::recording::reader::read_all(&bytes);
        assert_eq!(end.expect("no error"), None);
        assert_eq!(read, crate::recording::tests::with_header(&entries));
        let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default());
        replay(read, &mut analysis, |_, _| {});
        assert_eq!(analysis.decisions.total(), 2);
        assert_eq!(analysis.decisions.loss_responses(1), 1);
        let text = analysis.decisions.of(2).next().expect("kept").describe();
        assert_eq!(text, "loss: ssthresh 47, cwnd 68 → 47");
    }
}
