//! The replay loop, written once: a recording's entries fed through [`Analysis`] exactly as the
//! live pipeline fed it (samples ingested in their batches' order, a tick at each recorded tick,
//! the host facts from each `Host` entry on), so rates and verdicts come out as they were live.
//!
//! Every exporter is a visitor of [`Step`]s. Once the pipeline's scripted mode (a recording as
//! an `EventSource` with its ticks) exists, it should become the one driver and this loop go.

use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::event::Sample;
use crate::analysis::model::TableConfig;
use crate::analysis::schema::{ActionRecord, SummaryRecord};
use crate::analysis::Analysis;
use crate::recording::entry::{Entry, Header};
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
    /// New host facts are in `analysis.env`.
    Host,
    Action(&'a ActionRecord),
    End(&'a SummaryRecord),
}

/// A fresh analysis as a live run starts one (no host reads: the facts come from the recording).
pub fn new_analysis(diagnosis: DiagnosisConfig) -> Analysis {
    Analysis::new(TableConfig::default(), diagnosis, Default::default())
}

/// Drive `analysis` through `entries`, calling `on_step` after each step is applied.
pub fn replay(
    entries: impl IntoIterator<Item = Entry>,
    analysis: &mut Analysis,
    mut on_step: impl FnMut(&Analysis, Step<'_>),
) {
    for entry in entries {
        match entry {
            Entry::Header(h) => on_step(analysis, Step::Header(&h)),
            Entry::Samples { samples } => {
                for s in &samples {
                    analysis.ingest(s);
                    on_step(analysis, Step::Sample(s));
                }
            }
            Entry::Decisions { decisions } => decisions.iter().for_each(|d| analysis.ingest_decision(d)),
            Entry::Tick { now_ns, counters } => {
                let evaluated = analysis.tick(now_ns);
                on_step(analysis, Step::Tick { now_ns, counters: &counters, evaluated });
            }
            Entry::Host { env } => {
                analysis.env = env;
                on_step(analysis, Step::Host);
            }
            Entry::Sockets { readings } => analysis.ingest_sockets(&readings),
            Entry::Action(record) => on_step(analysis, Step::Action(&record)),
            Entry::End { summary, .. } => on_step(analysis, Step::End(&summary)),
        }
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
