//! The targets, one per measure: what the figures page judges each row against. A bench that
//! measures one of these judges its row with it ([`super::Row::judged`]); the page's table of
//! targets is written from this list, so a target is stated in one place only.

/// Which way a figure must lie.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    AtMost(f64),
    Below(f64),
    AtLeast(f64),
}

/// One measure's target.
#[derive(Debug, PartialEq)]
pub struct Target {
    /// What is measured, as the page's table of targets names it.
    pub measure: &'static str,
    pub bound: Bound,
    /// The unit the bound is in, as written after the number ("%", "ms/s", "MB", "s").
    pub unit: &'static str,
    /// The page section (its id) whose rows are judged against it.
    pub section: &'static str,
}

impl Target {
    /// Whether `value` (in the target's unit) meets it. For a mean with an interval, pass the
    /// interval's end on the target's side: its upper end for an upper bound.
    pub fn met_by(&self, value: f64) -> bool {
        match self.bound {
            Bound::AtMost(limit) => value <= limit,
            Bound::Below(limit) => value < limit,
            Bound::AtLeast(limit) => value >= limit,
        }
    }

    /// The bound as the page writes it: "≤ 1 %".
    pub fn text(&self) -> String {
        let (sign, limit) = match self.bound {
            Bound::AtMost(l) => ("≤", l),
            Bound::Below(l) => ("<", l),
            Bound::AtLeast(l) => ("≥", l),
        };
        let sep = if self.unit.is_empty() || self.unit.starts_with('/') { "" } else { " " };
        format!("{sign} {}{sep}{}", super::number(limit), self.unit)
    }
}

/// The observer's share of the machine's busy CPU over a saturating transfer (issue 24's
/// measure), the upper end of its 95 % interval; cctrace must also stay below its two peers.
pub const OBSERVER_SHARE: Target = Target {
    measure: "cctrace's share of busy CPU beside a saturating transfer",
    bound: Bound::AtMost(1.0),
    unit: "%",
    section: "observer",
};
/// cctrace's share over each peer's (the bpftrace per-flow script, `ss -tni` every 100 ms),
/// paired within a round: the upper end of its interval.
pub const BELOW_PEERS: Target = Target {
    measure: "cctrace's share over each peer's (bpftrace per-flow script, ss -tni every 100 ms)",
    bound: Bound::Below(1.0),
    unit: "",
    section: "observer",
};
/// cctrace's process at rest and with one saturating flow, and what each further busy flow adds.
pub const PROCESS_AT_REST: Target =
    Target { measure: "cctrace's process CPU at rest", bound: Bound::AtMost(1.0), unit: "ms/s", section: "selfcost" };
pub const PROCESS_ONE_FLOW: Target = Target {
    measure: "cctrace's process CPU with one saturating flow",
    bound: Bound::AtMost(2.0),
    unit: "ms/s",
    section: "selfcost",
};
pub const PROCESS_PER_FLOW: Target = Target {
    measure: "cctrace's process CPU per busy flow beyond the first",
    bound: Bound::AtMost(0.2),
    unit: "ms/s",
    section: "selfcost",
};
/// Peak resident memory, in every scenario that holds many flows (start-up with 100,000
/// sockets, churn). One target: the pages once said 150 MB in one place and 200 in another.
pub const PEAK_MEMORY: Target = Target {
    measure: "cctrace's peak resident memory (100,000 sockets; churn)",
    bound: Bound::AtMost(150.0),
    unit: "MB",
    section: "startup",
};
/// Start-up with 100,000 existing sockets in 5 namespaces: the last one listed.
pub const STARTUP_ALL_LISTED: Target = Target {
    measure: "start-up, 100,000 sockets: every one listed",
    bound: Bound::AtMost(5.0),
    unit: "s",
    section: "startup",
};
/// Churn of 5,000 connections a second: cctrace's share of one core.
pub const CHURN_CORE_SHARE: Target = Target {
    measure: "cctrace's share of a core under 5,000 connections a second",
    bound: Bound::AtMost(25.0),
    unit: "%",
    section: "churn",
};
/// One run of `tcp_probe`'s program, statistics on (issue 24).
pub const PROBE_RUN: Target = Target {
    measure: "one run of cct_probe (tcp_probe)",
    bound: Bound::AtMost(100.0),
    unit: "ns",
    section: "throughput",
};
/// The terminal UI's mean frame with 10,000 flows.
pub const FRAME_10K: Target = Target {
    measure: "terminal UI frame, 10,000 flows (mean)",
    bound: Bound::AtMost(20.0),
    unit: "ms",
    section: "frame",
};
/// The whole suite (`cargo xtask test` on a fresh 2-core clone), after set-up.
pub const SUITE_TIME: Target = Target {
    measure: "the suite on a fresh 2-core clone, after set-up",
    bound: Bound::AtMost(1080.0),
    unit: "s",
    section: "suite",
};

/// Every target, in the order the page lists them.
pub const TARGETS: &[&Target] = &[
    &OBSERVER_SHARE,
    &BELOW_PEERS,
    &PROCESS_AT_REST,
    &PROCESS_ONE_FLOW,
    &PROCESS_PER_FLOW,
    &PEAK_MEMORY,
    &STARTUP_ALL_LISTED,
    &CHURN_CORE_SHARE,
    &PROBE_RUN,
    &FRAME_10K,
    &SUITE_TIME,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_is_met_at_its_limit_and_written_with_its_unit() {
        assert!(OBSERVER_SHARE.met_by(1.0));
        assert!(!OBSERVER_SHARE.met_by(1.01));
        assert_eq!(OBSERVER_SHARE.text(), "≤ 1 %");
        assert_eq!(PROCESS_AT_REST.text(), "≤ 1 ms/s");
        let rate = Target { bound: Bound::AtLeast(5000.0), unit: "/s", ..OBSERVER_SHARE };
        assert!(rate.met_by(5000.0) && !rate.met_by(4999.0));
        assert_eq!(rate.text(), "≥ 5,000/s");
    }

    #[test]
    fn one_target_per_measure() {
        for (i, a) in TARGETS.iter().enumerate() {
            assert!(TARGETS[i + 1..].iter().all(|b| b.measure != a.measure), "{} twice", a.measure);
        }
    }
}
