//! A deep-mode session: the twins registered, the selected namespaces' flows moved onto the
//! twin of the algorithm they run, new flows picked up by a rescan, and everything put back on
//! the way out.
//!
//! Flows are moved (at start, when a sample shows a new one, and once a second) one by one with `bpf_setsockopt(TCP_CONGESTION)` from `iter/tcp` in their
//! namespace (the switcher `cctrace fix --live` uses); the namespaces' defaults are never
//! changed, so nothing new lands on a twin by itself and a crash cannot leave a default naming
//! an algorithm that is gone. Moving a flow restarts its algorithm's state (the kernel calls the
//! new algorithm's `init`), as any change of congestion control does.
//!
//! Exit paths: [`DeepSession::finish`] (quit, Ctrl-C, SIGTERM: the pipeline returns, and Drop
//! covers errors and panics) moves every flow back to the original and then unregisters the
//! twins. SIGKILL runs nothing: the link fds close, so the kernel unregisters the twins (they
//! leave tcp_available_congestion_control at once), but a socket holds a reference to its
//! congestion control, so flows on a twin keep running it, programs and maps included, until
//! they close or are switched; their decision events go to a ring buffer nobody reads. The
//! next live cctrace start ([`restore_if_left`]; `--deep` or not) reads the state file this
//! session wrote and switches those flows back to the original, which frees the twins for good.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::Twins;
use crate::analysis::deep_decisions::TwinAlgo;
use crate::analysis::fix_plan::Switched;
use crate::analysis::state_dir::STATE_DIR;
use crate::host::fs_kind::netns_file_inode;
use crate::kernel::switch::Switcher;

/// The state file of the running (or a killed) deep session.
pub const STATE_FILE: &str = "deep.json";

/// One network namespace deep mode works in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeepNamespace {
    pub netns: u32,
    /// A path that enters it (`/run/netns/NAME`, `/proc/PID/ns/net`).
    pub path: String,
}

/// What a session leaves in [`STATE_DIR`] while it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeepState {
    pub pid: u32,
    pub namespaces: Vec<DeepNamespace>,
}

fn state_path() -> PathBuf {
    Path::new(STATE_DIR).join(STATE_FILE)
}

fn onto_twins() -> Vec<(&'static str, &'static str)> {
    TwinAlgo::ALL.iter().map(|a| (a.original(), a.twin())).collect()
}

fn back_from_twins() -> Vec<(&'static str, &'static str)> {
    TwinAlgo::ALL.iter().map(|a| (a.twin(), a.original())).collect()
}

/// The start-up line after flows a killed session left were put back.
pub fn restored_line(flows: usize) -> String {
    format!("moved {flows} flows a killed cctrace --deep had left on its twins back to their algorithm")
}

/// What moving flows did, for the log and the start-up line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    pub switched: usize,
    /// Sockets the kernel refused to switch (errno, sport, dport), e.g. mid-teardown.
    pub refused: Vec<Switched>,
}

fn tally(into: &mut Moved, touched: Vec<Switched>) {
    for s in touched {
        if s.result == 0 {
            into.switched += 1;
        } else {
            into.refused.push(s);
        }
    }
}

/// Whether `pid` is a live process that is a cctrace.
fn alive_cctrace(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "cctrace")
}

/// Put back what a killed session left: its flows still on a twin go back to the original.
/// Returns how many were switched; `Ok(0)` when there was nothing to restore.
pub fn restore_killed_run(switcher: &mut Switcher) -> Result<usize> {
    let path = state_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let state: DeepState =
        serde_json::from_str(&text).with_context(|| format!("{} is not a deep state", path.display()))?;
    if state.pid != std::process::id() && alive_cctrace(state.pid) {
        bail!("cctrace --deep runs already (pid {}, state in {})", state.pid, path.display());
    }
    let mut restored = Moved::default();
    for ns in &state.namespaces {
        // A namespace that is gone took its flows with it; a reused inode is another namespace
        // whose flows are on no twin of ours unless they are (and then they go back too).
        let opens = netns_file_inode(Path::new(&ns.path));
        if opens != Some(ns.netns) {
            continue;
        }
        match switcher.switch_names(ns.netns, Path::new(&ns.path), &back_from_twins()) {
            Ok(touched) => tally(&mut restored, touched),
            Err(e) => log::info!("restoring flows in network namespace {}: {e:#}", ns.netns),
        }
    }
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    log::info!("restored {} flows a killed cctrace --deep (pid {}) left on twins", restored.switched, state.pid);
    Ok(restored.switched)
}

/// Before a live run without --deep: put back what a killed deep session left, if it left
/// anything (the switcher is loaded only then). Returns how many flows went back.
pub fn restore_if_left() -> Result<usize> {
    let Ok(text) = std::fs::read_to_string(state_path()) else { return Ok(0) };
    // A deep session that runs now keeps its flows.
    if serde_json::from_str::<DeepState>(&text).is_ok_and(|s| alive_cctrace(s.pid)) {
        return Ok(0);
    }
    let mut switcher = Switcher::load()?;
    restore_killed_run(&mut switcher)
}

pub struct DeepSession {
    // Drop order: the switcher must outlive the twins' unregistration only in `finish`, which
    // runs first; fields drop after it.
    twins: Option<Twins>,
    switcher: Switcher,
    namespaces: Vec<DeepNamespace>,
    finished: bool,
    /// Flows a killed earlier run left on twins, switched back at start.
    pub restored_at_start: usize,
}

impl DeepSession {
    /// Restore what a killed run left, register the twins, and move the flows of `namespaces`
    /// that run CUBIC, Reno or BBR onto their twins.
    pub fn start(namespaces: Vec<DeepNamespace>) -> Result<(Self, Moved)> {
        if namespaces.is_empty() {
            bail!("--deep needs --netns: it moves the flows of the named network namespaces onto the twins");
        }
        super::check_support()?;
        let mut switcher = Switcher::load()?;
        let restored_at_start = restore_killed_run(&mut switcher)?;
        let twins = Twins::register()?;
        // From here on a SIGKILL leaves flows on twins: the state says where.
        write_state(&DeepState { pid: std::process::id(), namespaces: namespaces.clone() })?;
        let mut session = Self { twins: Some(twins), switcher, namespaces, finished: false, restored_at_start };
        let moved = session.rescan()?;
        Ok((session, moved))
    }

    pub fn twins(&self) -> Option<&Twins> {
        self.twins.as_ref()
    }

    pub fn namespaces(&self) -> &[DeepNamespace] {
        &self.namespaces
    }

    /// Move the flows that are not on a twin yet (new since the last scan) onto theirs.
    pub fn rescan(&mut self) -> Result<Moved> {
        let mut moved = Moved::default();
        for ns in &self.namespaces {
            let touched = self
                .switcher
                .switch_names(ns.netns, Path::new(&ns.path), &onto_twins())
                .with_context(|| format!("moving the flows of network namespace {} onto the twins", ns.netns))?;
            tally(&mut moved, touched);
        }
        Ok(moved)
    }

    /// Move every flow back to its original algorithm, then unregister the twins and remove
    /// the state. Idempotent.
    pub fn finish(&mut self) -> Result<Moved> {
        if self.finished {
            return Ok(Moved::default());
        }
        let mut moved = Moved::default();
        let mut failed = None;
        for ns in &self.namespaces {
            match self.switcher.switch_names(ns.netns, Path::new(&ns.path), &back_from_twins()) {
                Ok(touched) => tally(&mut moved, touched),
                Err(e) => failed = Some(e.context(format!("moving flows of network namespace {} back", ns.netns))),
            }
        }
        // Unregister even when a namespace could not be walked: nothing new can join a twin.
        drop(self.twins.take());
        self.finished = true;
        if let Some(e) = failed {
            // The state stays: the next start retries the namespaces that failed.
            return Err(e);
        }
        let path = state_path();
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e).with_context(|| format!("removing {}", path.display()));
            }
        }
        Ok(moved)
    }
}

impl Drop for DeepSession {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            eprintln!("cctrace: putting flows back from the deep-mode twins: {e:#}");
        }
    }
}

fn write_state(state: &DeepState) -> Result<()> {
    crate::host::create_state_dir(Path::new(STATE_DIR)).with_context(|| format!("creating {STATE_DIR}"))?;
    let path = state_path();
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(state)?).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}
