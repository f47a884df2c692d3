//! What each kernel hook costs, when the kernel measures it: the BPF run statistics (`run_cnt`,
//! `run_time_ns` in the program fd's fdinfo) count only while `kernel.bpf_stats_enabled` is 1
//! (or someone holds a `BPF_ENABLE_STATS` fd), since measuring costs a little on every run.
//! cctrace does not turn them on; it exposes them once they count. The metrics exporter gets
//! [`reader`] from the command that started the kernel source, never the kernel itself.

use crate::kernel::HookProgram;
use crate::source::{HookCost, HookCostReader};

/// `run_cnt` and `run_time_ns` from a program fd's fdinfo, if it is the program `prog_id` (an
/// fd number may name another file once the program is gone).
pub fn parse_fdinfo(text: &str, prog_id: u32) -> Option<(u64, u64)> {
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    if field("prog_id:")?.parse::<u32>().ok()? != prog_id {
        return None;
    }
    Some((field("run_cnt:")?.parse().ok()?, field("run_time_ns:")?.parse().ok()?))
}

/// Each hook's cost so far; empty while the kernel has counted no run of any of them.
pub fn read(programs: &[HookProgram]) -> Vec<HookCost> {
    let costs: Vec<HookCost> = programs
        .iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", p.fd)).ok()?;
            let (runs, run_ns) = parse_fdinfo(&text, p.prog_id)?;
            Some(HookCost { hook: p.hook.clone(), runs, run_ns })
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

    const FDINFO: &str = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2069\nprog_type:\t26\nprog_jited:\t1\n\
        prog_tag:\t3b185187f1855c4c\nmemlock:\t4096\nprog_id:\t1234\nrun_time_ns:\t987654\nrun_cnt:\t321\n\
        recursion_misses:\t0\nverified_insns:\t200\n";

    #[test]
    fn reads_the_run_statistics_of_the_right_program() {
        assert_eq!(parse_fdinfo(FDINFO, 1234), Some((321, 987_654)));
        assert_eq!(parse_fdinfo(FDINFO, 99), None, "another program under a reused fd number");
        assert_eq!(parse_fdinfo("pos:\t0\nflags:\t02\n", 1234), None, "not a BPF program");
    }

    #[test]
    fn the_programs_of_this_process_are_read_from_its_fds() {
        // A file that is not a program: nothing to report.
        let file = std::fs::File::open("/proc/self/status").expect("opens");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        assert!(read(&[HookProgram { hook: "tcp:tcp_probe".into(), prog_id: 1, fd }]).is_empty());
    }
}
