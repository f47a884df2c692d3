//! Undoing a fix: read the state the fix kept, put the namespace's default and the connections
//! it switched back, and say so; a namespace gone since is reported, its state removed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::analysis::environment::Environment;
use crate::analysis::fix_plan::{socket_refusal, State, Target};
use crate::analysis::schema::{ActionKind, ActionRecord, SwitchedFlow};
use crate::analysis::state_dir::STATE_DIR;

use super::apply::*;
use super::host_io::*;
use super::FixArgs;

/// What an undo of a namespace will do, or why there is nothing to undo.
pub(super) enum UndoPrep {
    Nothing(String),
    Ready(Box<Undo>),
}

pub(super) struct Undo {
    target: Target,
    state: State,
    state_path: PathBuf,
}

impl Undo {
    pub(super) fn lines(&self) -> Vec<String> {
        let (target, state) = (&self.target, &self.state);
        let mut plan = vec![format!(
            "cctrace fix --undo: network namespace {} ({}, inode {})",
            target.reached, target.path, target.netns
        )];
        if state.default_changed {
            plan.push(format!(
                "  set its default congestion control back from {} to {}",
                state.cc, state.previous_default
            ));
        }
        if !state.switched.is_empty() {
            plan.push(format!(
                "  switch the {} connection(s) cctrace switched back, those still open",
                state.switched.len()
            ));
        }
        for s in &state.sysctls {
            plan.push(format!(
                "  set net.ipv4.{} of {} back to {} (it was raised to {})",
                s.key,
                s.target.reached,
                s.from.sysctl_value(),
                s.to.sysctl_value()
            ));
        }
        for f in &state.files {
            plan.push(format!("  remove {f} (written by cctrace fix --persist)"));
        }
        plan
    }
}

pub(super) fn prepare_undo(target: &Target) -> Result<UndoPrep> {
    let state_path = state_path(target.netns);
    let text = match std::fs::read_to_string(&state_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(UndoPrep::Nothing(format!(
                "nothing to undo for network namespace {}: no state in {STATE_DIR}",
                target.reached
            )));
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", state_path.display())),
    };
    let state = State::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", state_path.display()))?;
    if stale_state(&state_path).is_some() {
        std::fs::remove_file(&state_path).with_context(|| format!("removing {}", state_path.display()))?;
        log::info!("removed {}: its namespace {} is gone", state_path.display(), state.target.reached);
        return Ok(UndoPrep::Nothing(format!(
            "nothing to undo for network namespace {}: the fix was of {}, which is gone",
            target.reached, state.target.reached
        )));
    }
    if state.target.netns != target.netns {
        bail!("{} is for network namespace {}, not {}", state_path.display(), state.target.netns, target.netns);
    }
    Ok(UndoPrep::Ready(Box::new(Undo { target: target.clone(), state, state_path })))
}

/// Carry out a confirmed undo, saying each step to `say` (and the log); what was done.
pub(super) fn carry_out_undo(
    undo: &Undo,
    env: &Environment,
    switcher: &mut LazySwitcher,
    say: &mut dyn FnMut(&str),
) -> Result<ActionRecord> {
    let (target, state) = (&undo.target, &undo.state);
    let mut said = Said::new(say);
    let prev = state.previous_default.as_str();
    if state.default_changed {
        set_default(target, prev, env)?;
        log::info!("default congestion control of {} set back from {} to {prev}", target.reached, state.cc);
        said.line(format!("default congestion control of {} set back to {prev}", target.reached));
    }
    let sysctls = restore_buffers(state, env, &mut said)?;
    let switched = if state.switched.is_empty() { Vec::new() } else { switch_back(undo, switcher, &mut said)? };
    let ts_ns = crate::clock::monotonic_now_ns();
    remove_persisted(&state.files, &mut said)?;
    std::fs::remove_file(&undo.state_path).with_context(|| format!("removing {}", undo.state_path.display()))?;
    log::info!("removed {}", undo.state_path.display());
    said.line(format!("the fix of {} is undone", target.reached));
    Ok(ActionRecord {
        ts_ns,
        action: ActionKind::Undo,
        netns: target.netns,
        target: target.reached.clone(),
        cc: state.cc.clone(),
        default_before: if state.default_changed { state.cc.clone() } else { prev.to_string() },
        default_after: prev.to_string(),
        switched,
        messages: said.messages,
        sysctls,
    })
}

/// Put every buffer maximum the fix raised back to the exact triple it found; the action's lines.
fn restore_buffers(state: &State, env: &Environment, said: &mut Said<'_>) -> Result<Vec<String>> {
    let mut sysctls = Vec::new();
    for s in &state.sysctls {
        set_buffer_sysctl(&s.target, &s.key, s.from, env)?;
        let line = format!("net.ipv4.{} of {} set back to {}", s.key, s.target.reached, s.from.sysctl_value());
        log::info!("{line}");
        said.line(line);
        sysctls.push(s.record(s.to, s.from));
    }
    Ok(sysctls)
}

/// Switch the connections the fix switched, those still open, back to what they were on.
fn switch_back(undo: &Undo, switcher: &mut LazySwitcher, said: &mut Said<'_>) -> Result<Vec<SwitchedFlow>> {
    let (target, state) = (&undo.target, &undo.state);
    let mut switched = Vec::new();
    let cookies: Vec<(u64, String)> = state.switched.iter().map(|s| (s.cookie, s.old_cc.clone())).collect();
    let touched = switcher.get()?.switch_cookies(target.netns, Path::new(&target.path), &cookies)?;
    for s in &touched {
        if s.result == 0 {
            log::info!("switched socket {} back from {} to {}", s.cookie, s.old_cc, s.new_cc);
            said.line(format!(
                "switched connection :{} -> :{} (cookie {}) back to {}",
                s.sport, s.dport, s.cookie, s.new_cc
            ));
            switched.push(SwitchedFlow { cookie: s.cookie, from: s.old_cc.clone(), to: s.new_cc.clone() });
        } else {
            log::info!("socket {} not switched back: errno {}", s.cookie, -s.result);
            said.line(format!(
                "connection :{} -> :{} (cookie {}) stays on {}: {}",
                s.sport,
                s.dport,
                s.cookie,
                s.old_cc,
                socket_refusal(s.result)
            ));
        }
    }
    let closed = state.switched.len().saturating_sub(touched.len());
    if closed > 0 {
        said.line(format!("{closed} switched connection(s) closed meanwhile"));
    }
    Ok(switched)
}

/// Remove the files `--persist` wrote (one already gone is no error).
fn remove_persisted(files: &[String], said: &mut Said<'_>) -> Result<()> {
    for f in files {
        match std::fs::remove_file(f) {
            Ok(()) => {
                log::info!("removed {f}");
                said.line(format!("removed {f}"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("removing {f}: {e}"),
        }
    }
    Ok(())
}

/// `--undo` for a namespace that no longer exists: nothing in it to restore, but the files
/// `--persist` wrote and the state go. Without a state naming it, `not_found` is the error.
pub(super) fn undo_gone(args: &FixArgs, not_found: anyhow::Error) -> Result<()> {
    let given = args.netns.first().or(args.containers.first()).cloned().unwrap_or_default();
    let names_it = |t: &Target| {
        t.path == given
            || t.netns.to_string() == given
            || t.reached == format!("ip netns {given}")
            || t.reached.starts_with(&format!("container {given} "))
    };
    let Ok(dir) = std::fs::read_dir(STATE_DIR) else { return Err(not_found) };
    for entry in dir.flatten() {
        let Ok(state) =
            std::fs::read_to_string(entry.path()).map_err(|e| e.to_string()).and_then(|t| State::from_json(&t))
        else {
            continue;
        };
        if !names_it(&state.target) {
            continue;
        }
        println!(
            "cctrace fix --undo: network namespace {} (inode {}) is gone: nothing to restore in it",
            state.target.reached, state.target.netns
        );
        for f in &state.files {
            println!("  remove {f} (written by cctrace fix --persist)");
        }
        println!("  remove the state {}", entry.path().display());
        confirm(args.yes)?;
        remove_persisted(&state.files, &mut Said::new(&mut |_| {}))?;
        std::fs::remove_file(entry.path()).with_context(|| format!("removing {}", entry.path().display()))?;
        log::info!("removed the state of gone network namespace {} ({})", state.target.reached, entry.path().display());
        println!("cctrace: the state of {} is removed", state.target.reached);
        return Ok(());
    }
    Err(not_found)
}
