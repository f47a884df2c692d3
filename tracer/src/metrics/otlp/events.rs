//! What is worth telling a collector the moment it happens: a flow flagged or cleared, a heavy
//! flow's `limited_by` changing, a fix applied or undone. Pure: found by comparing each
//! evaluation's verdicts with the last, on the [`Analysis`] alone.
//!
//! An event carries the record it is about as JSON: the flow's [`FlowRecord`] (its identity,
//! placement, verdict, evidence and fix, as `--json` prints it) or the [`ActionRecord`]. The
//! encoder turns every field of it into an attribute, so a field added to those records reaches
//! the events without anything here changing.

use std::collections::HashMap;

use serde_json::Value;

use crate::analysis::diagnosis::LimitedBy;
use crate::analysis::flow_table::Flow;
use crate::analysis::schema::{ActionKind, ActionRecord, FlowRecord};
use crate::analysis::time::WallClock;
use crate::analysis::Analysis;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A flow's verdict became flagged.
    Flagged,
    /// A flagged flow is no longer: its verdict changed, or it closed or left the table.
    Cleared,
    /// A heavy flow's verdict names another limit (neither unknown), for two evaluations in a
    /// row.
    LimitedByChanged,
    FixApplied,
    FixUndone,
}

/// OpenTelemetry's severity numbers for the kinds used here.
pub const SEVERITY_INFO: i32 = 9;
pub const SEVERITY_WARN: i32 = 13;

impl EventKind {
    /// The `event.name` (OpenTelemetry's events are log records named so).
    pub fn name(self) -> &'static str {
        match self {
            Self::Flagged => "cctrace.flow.flagged",
            Self::Cleared => "cctrace.flow.cleared",
            Self::LimitedByChanged => "cctrace.flow.limited_by_changed",
            Self::FixApplied => "cctrace.fix.applied",
            Self::FixUndone => "cctrace.fix.undone",
        }
    }

    /// A flag asks for someone's attention; the rest tells what changed.
    pub fn severity(self) -> (i32, &'static str) {
        match self {
            Self::Flagged => (SEVERITY_WARN, "WARN"),
            _ => (SEVERITY_INFO, "INFO"),
        }
    }
}

/// One event.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub kind: EventKind,
    /// When, on the samples' clock (monotonic ns).
    pub ts_ns: u64,
    /// In words: the verdict, or the action's headline.
    pub body: String,
    /// The record it is about, as `--json` writes it.
    pub record: Value,
    /// What the record cannot say: the limit before, why a flag was cleared.
    pub extra: Vec<(&'static str, Value)>,
}

/// What the last evaluation said of a flow worth watching (heavy or flagged).
#[derive(Clone, Copy, Debug)]
struct Known {
    flagged: bool,
    limited_by: LimitedBy,
    /// Another limit seen once: it becomes an event if the next evaluation says it again.
    pending: Option<LimitedBy>,
}

/// Finds the events of each evaluation; remembers only the heavy and flagged flows.
#[derive(Debug, Default)]
pub struct FlowEvents {
    known: HashMap<u64, Known>,
    evaluated_ns: u64,
    /// Actions heard since the last look, told with the flows they switched.
    actions: Vec<ActionRecord>,
}

fn record_of(flow: &Flow, analysis: &Analysis, clock: &WallClock) -> Value {
    serde_json::to_value(FlowRecord::of(flow, analysis.verdict(flow), clock, &analysis.env)).unwrap_or(Value::Null)
}

impl FlowEvents {
    /// Actions taken on the host: told at the next [`FlowEvents::take`].
    pub fn push_actions(&mut self, actions: &[ActionRecord]) {
        self.actions.extend_from_slice(actions);
    }

    /// The events since the last call: the actions heard, and, when the analysis evaluated
    /// since, what its verdicts changed.
    pub fn take(&mut self, analysis: &Analysis, clock: &WallClock) -> Vec<Event> {
        let mut out: Vec<Event> = self.actions.drain(..).map(|a| action_event(&a, analysis, clock)).collect();
        let evaluated = analysis.last_evaluation_ns();
        if evaluated == self.evaluated_ns {
            return out;
        }
        self.evaluated_ns = evaluated;
        let cfg = analysis.diagnoser.config();
        for flow in analysis.table.open_flows() {
            let verdict = analysis.verdict(flow);
            let flagged = verdict.is_some_and(|v| v.flagged);
            let limited_by = verdict.map_or(LimitedBy::Unknown, |v| v.limited_by);
            let heavy = cfg.flow_is_heavy(flow, verdict);
            let said = match self.known.get_mut(&flow.cookie()) {
                Some(known) => known.update(flagged, limited_by, heavy),
                None if heavy || flagged => {
                    self.known.insert(flow.cookie(), Known { flagged, limited_by, pending: None });
                    if flagged {
                        vec![(EventKind::Flagged, Vec::new())]
                    } else {
                        Vec::new()
                    }
                }
                None => continue,
            };
            if !heavy && !flagged {
                self.known.remove(&flow.cookie());
            }
            out.extend(said.into_iter().map(|(kind, extra)| Event {
                kind,
                ts_ns: evaluated,
                body: verdict.map_or_else(|| limited_by.describe().to_string(), |v| v.text.clone()),
                record: record_of(flow, analysis, clock),
                extra,
            }));
        }
        self.departed(analysis, clock, &mut out);
        out
    }

    /// Forget the flows that closed or left the table since: a flag they had is cleared.
    fn departed(&mut self, analysis: &Analysis, clock: &WallClock, out: &mut Vec<Event>) {
        self.known.retain(|&cookie, known| {
            let flow = analysis.table.get(cookie);
            if flow.is_some_and(|f| !f.is_closed()) {
                return true;
            }
            if known.flagged {
                let (record, because, body) = match flow {
                    Some(f) => (record_of(f, analysis, clock), "closed", "the flow closed"),
                    None => (serde_json::json!({ "cookie": cookie }), "gone", "the flow left the flow table"),
                };
                out.push(Event {
                    kind: EventKind::Cleared,
                    ts_ns: self.evaluated_ns,
                    body: body.into(),
                    record,
                    extra: vec![("cctrace.cleared_because", because.into())],
                });
            }
            false
        });
    }
}

impl Known {
    /// Take this evaluation's verdict; what is worth telling about the change.
    fn update(
        &mut self,
        flagged: bool,
        limited_by: LimitedBy,
        heavy: bool,
    ) -> Vec<(EventKind, Vec<(&'static str, Value)>)> {
        let mut said = Vec::new();
        match (self.flagged, flagged) {
            (false, true) => said.push((EventKind::Flagged, Vec::new())),
            (true, false) => said.push((EventKind::Cleared, vec![("cctrace.cleared_because", "verdict".into())])),
            _ => {}
        }
        self.flagged = flagged;
        // "Not known yet" (a young or idle flow) is no limit to change from or to; a new limit
        // is told once a second evaluation says it too.
        if limited_by == LimitedBy::Unknown {
            self.pending = None;
        } else if self.limited_by == LimitedBy::Unknown {
            self.limited_by = limited_by;
        } else if !heavy || limited_by == self.limited_by {
            self.pending = None;
        } else if self.pending == Some(limited_by) {
            said.push((
                EventKind::LimitedByChanged,
                vec![("cctrace.previous_limited_by", self.limited_by.name().into())],
            ));
            self.limited_by = limited_by;
            self.pending = None;
        } else {
            self.pending = Some(limited_by);
        }
        said
    }
}

/// The flow identity of a switched connection: its endpoints and placement.
const IDENTITY: [&str; 7] = ["src", "sport", "dst", "dport", "netns", "cgroup", "container"];

/// An action's event: the record, each switched connection with its flow's identity where the
/// table still has it, and, when it switched one, that flow's identity on the event itself.
fn action_event(action: &ActionRecord, analysis: &Analysis, clock: &WallClock) -> Event {
    let mut record = serde_json::to_value(action).unwrap_or(Value::Null);
    let identities: Vec<Option<serde_json::Map<String, Value>>> = action
        .switched
        .iter()
        .map(|s| {
            let Value::Object(flow) = record_of(analysis.table.get(s.cookie)?, analysis, clock) else { return None };
            Some(flow.into_iter().filter(|(k, _)| IDENTITY.contains(&k.as_str())).collect())
        })
        .collect();
    if let Some(Value::Array(switched)) = record.get_mut("switched") {
        for (entry, identity) in switched.iter_mut().zip(&identities) {
            if let (Value::Object(entry), Some(identity)) = (entry, identity) {
                entry.extend(identity.clone());
            }
        }
    }
    if let ([Some(identity)], Value::Object(top)) = (identities.as_slice(), &mut record) {
        for (k, v) in identity {
            top.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Event {
        // Any other kind of action is a fix of something.
        kind: if action.action == ActionKind::Undo { EventKind::FixUndone } else { EventKind::FixApplied },
        ts_ns: action.ts_ns,
        body: action.headline(),
        record,
        extra: Vec::new(),
    }
}
