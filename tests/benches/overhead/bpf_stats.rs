//! In-kernel run time per program from the kernel's own statistics. Statistics are switched on
//! with `BPF_ENABLE_STATS`, which keeps them on only while its fd is open: the host's
//! `kernel.bpf_stats_enabled` setting is not touched and nothing is left on if the run dies.

use std::collections::BTreeMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

const BPF_ENABLE_STATS: libc::c_long = 32;
const BPF_STATS_RUN_TIME: u32 = 0;

/// Run-time statistics on while this lives.
pub(crate) struct StatsOn(#[allow(dead_code)] OwnedFd);

pub(crate) fn enable() -> Result<StatsOn> {
    let attr: [u32; 2] = [BPF_STATS_RUN_TIME, 0];
    // SAFETY: bpf(BPF_ENABLE_STATS) reads `attr` (its `enable_stats.type` first) of the given size.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_ENABLE_STATS, attr.as_ptr(), std::mem::size_of_val(&attr)) };
    if fd < 0 {
        bail!("BPF_ENABLE_STATS: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a new fd the kernel just returned, owned by nobody else.
    Ok(StatsOn(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

/// Runs and run time of one program.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Runs {
    pub(crate) count: u64,
    pub(crate) ns: u64,
}

/// The programs process `pid` holds open (its fds' `prog_id`), by name.
pub(crate) fn programs_of(pid: u32) -> Result<BTreeMap<String, Runs>> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))? {
        let Ok(text) = std::fs::read_to_string(entry?.path()) else { continue };
        if let Some(id) = text.lines().find_map(|l| l.strip_prefix("prog_id:")) {
            ids.push(id.trim().parse::<u64>()?);
        }
    }
    let out = Command::new("bpftool").args(["-j", "prog", "show"]).output().context("running bpftool")?;
    let all: Value = serde_json::from_slice(&out.stdout).context("bpftool's JSON")?;
    let mut runs = BTreeMap::new();
    for p in all.as_array().into_iter().flatten() {
        if p["id"].as_u64().is_some_and(|id| ids.contains(&id)) {
            let name = p["name"].as_str().unwrap_or("?").to_string();
            let r = Runs { count: p["run_cnt"].as_u64().unwrap_or(0), ns: p["run_time_ns"].as_u64().unwrap_or(0) };
            runs.insert(name, r);
        }
    }
    Ok(runs)
}

/// What ran between two readings.
pub(crate) fn delta(before: &BTreeMap<String, Runs>, after: &BTreeMap<String, Runs>) -> BTreeMap<String, Runs> {
    after
        .iter()
        .map(|(name, a)| {
            let b = before.get(name).copied().unwrap_or_default();
            (name.clone(), Runs { count: a.count - b.count.min(a.count), ns: a.ns - b.ns.min(a.ns) })
        })
        .collect()
}
