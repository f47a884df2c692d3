//! The flow table and the diagnoser driven together: what every front end (JSON, TUI, replay)
//! feeds samples into and reads flows and verdicts out of.

use crate::diagnosis::{Diagnoser, DiagnosisConfig, Environment, Verdict};
use crate::event::Sample;
use crate::model::{Flow, FlowTable, Ingested, TableConfig};

const EVALUATE_EVERY_NS: u64 = 1_000_000_000;

pub struct Analysis {
    pub table: FlowTable,
    pub diagnoser: Diagnoser,
    pub env: Environment,
    last_evaluation_ns: u64,
}

impl Analysis {
    pub fn new(table: TableConfig, diagnosis: DiagnosisConfig, env: Environment) -> Self {
        Self { table: FlowTable::new(table), diagnoser: Diagnoser::new(diagnosis), env, last_evaluation_ns: 0 }
    }

    pub fn ingest(&mut self, sample: &Sample) -> Ingested {
        self.table.ingest(sample)
    }

    /// Age out old flows and re-judge every flow, at most once per second of `now_ns`
    /// (monotonic, the samples' clock). Returns whether an evaluation ran.
    pub fn tick(&mut self, now_ns: u64) -> bool {
        if self.last_evaluation_ns != 0 && now_ns.saturating_sub(self.last_evaluation_ns) < EVALUATE_EVERY_NS {
            return false;
        }
        self.last_evaluation_ns = now_ns;
        self.table.expire(now_ns);
        self.diagnoser.evaluate(&self.table, &self.env, now_ns);
        true
    }

    pub fn verdict(&self, flow: &Flow) -> Option<&Verdict> {
        self.diagnoser.verdict(flow.cookie())
    }
}
