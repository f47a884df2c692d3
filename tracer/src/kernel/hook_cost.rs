//! What each kernel hook costs, when the kernel measures it: the BPF run statistics (run count
//! and run time, as aya's [`ProgramInfo`] gives them) count only while
//! `kernel.bpf_stats_enabled` is 1 (or someone holds a `BPF_ENABLE_STATS` fd), since measuring
//! costs a little on every run. cctrace does not turn them on; it exposes them once they count.
//! The metrics exporter gets [`reader`] from the command that started the kernel source, never
//! the kernel itself.

use std::collections::HashMap;
use std::time::Duration;

use aya::programs::ProgramInfo;

use crate::kernel::HookProgram;
use crate::source::{HookCost, HookCostReader};

/// What the kernel measured of one program's runs so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunStats {
    pub run_time: Duration,
    pub run_count: u64,
}

impl From<&ProgramInfo> for RunStats {
    fn from(info: &ProgramInfo) -> Self {
        Self { run_time: info.run_time(), run_count: info.run_count() }
    }
}

/// The run statistics of those of the programs `ids` still loaded, by id. The reader lives
/// apart from the `Ebpf` that owns the programs (in the metrics exporter), and aya gives a
/// program's [`ProgramInfo`] only through its `Program` or by walking the loaded programs, as
/// `bpftool prog show` does: so it walks. An id is never reused, so a program gone is simply
/// not found.
pub fn run_stats(ids: &[u32]) -> HashMap<u32, RunStats> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|info| ids.contains(&info.id()))
        .map(|info| (info.id(), RunStats::from(&info)))
        .collect()
}

/// Each hook's cost so far; empty while the kernel has counted no run of any of them.
pub fn read(programs: &[HookProgram]) -> Vec<HookCost> {
    let ids: Vec<u32> = programs.iter().map(|p| p.prog_id).collect();
    costs(programs, &run_stats(&ids))
}

/// The costs of `programs` from their statistics `stats` (by program id), in `programs`' order.
fn costs(programs: &[HookProgram], stats: &HashMap<u32, RunStats>) -> Vec<HookCost> {
    let costs: Vec<HookCost> = programs
        .iter()
        .filter_map(|p| {
            let s = stats.get(&p.prog_id)?;
            let run_ns = u64::try_from(s.run_time.as_nanos()).unwrap_or(u64::MAX);
            Some(HookCost { hook: p.hook.clone(), runs: s.run_count, run_ns })
        })
        .collect();
    if costs.iter().any(|c| c.runs > 0) {
        costs
    } else {
        Vec::new()
    }
}

/// What a front end calls to read the attached programs' costs now.
pub fn reader(programs: Vec<HookProgram>) -> HookCostReader {
    Box::new(move || read(&programs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(hook: &str, prog_id: u32) -> HookProgram {
        HookProgram { hook: hook.into(), prog_id }
    }

    #[test]
    fn costs_are_those_of_the_hooks_programs_once_any_ran() {
        let programs = [program("tcp:tcp_probe", 7), program("tcp:tcp_retransmit_skb", 9)];
        let ran = |run_count, ns| RunStats { run_time: Duration::from_nanos(ns), run_count };
        let stats = HashMap::from([(7, ran(321, 987_654)), (9, ran(0, 0)), (8, ran(5, 5))]);
        let got = costs(&programs, &stats);
        assert_eq!(
            got,
            [
                HookCost { hook: "tcp:tcp_probe".into(), runs: 321, run_ns: 987_654 },
                HookCost { hook: "tcp:tcp_retransmit_skb".into(), runs: 0, run_ns: 0 }
            ]
        );
        let none_ran = HashMap::from([(7, ran(0, 0)), (9, ran(0, 0))]);
        assert!(costs(&programs, &none_ran).is_empty(), "no run counted: the kernel does not measure");
    }

    #[test]
    fn a_program_no_longer_loaded_costs_nothing() {
        // Ids count up from 1 and are never reused: this one names no program.
        assert!(read(&[program("tcp:tcp_probe", u32::MAX)]).is_empty());
    }
}
