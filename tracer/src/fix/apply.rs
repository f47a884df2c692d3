//! Applying the fix to one namespace: read what it will change (its default, and with `--live`
//! its established connections), then change it, saying each step and keeping the state that
//! `--undo` needs.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::analysis::environment::Environment;
use crate::analysis::fix_plan::{
    buffer_steps, refusal, socket_refusal, state_file_name, valid_cc_name, Persist, Plan, State, Step, SwitchedCookie,
    SysctlStep, Target, STATE_VERSION,
};
use crate::analysis::schema::{ActionKind, ActionRecord, SwitchedFlow};
use crate::analysis::state_dir::STATE_DIR;
use crate::kernel::switch::Switcher;

use super::host_io::*;

/// The switcher, loaded the first time a walk needs it and kept for the next.
#[derive(Default)]
pub(super) struct LazySwitcher(Option<Switcher>);

impl LazySwitcher {
    pub(super) fn get(&mut self) -> Result<&mut Switcher> {
        if self.0.is_none() {
            self.0 = Some(Switcher::load()?);
        }
        Ok(self.0.as_mut().expect("loaded above"))
    }
}

pub(super) fn state_path(netns: u32) -> PathBuf {
    Path::new(STATE_DIR).join(state_file_name(netns))
}

/// Everything a fix of `target` will do, read from the host without changing it: the
/// namespace's default and, when `live`, its established connections as they are now.
pub(super) fn prepare_fix(
    target: &Target,
    cc: &str,
    live: bool,
    persist: bool,
    host_allowed: bool,
    env: &Environment,
    switcher: &mut LazySwitcher,
) -> Result<Plan> {
    if !valid_cc_name(cc) {
        bail!("{cc:?} is not a congestion control name (lower-case letters, digits and _, at most 15)");
    }
    let state_path = state_path(target.netns);
    if let Some(stale) = stale_state(&state_path) {
        // Inodes are reused: the namespace this state was about is gone, this is another one.
        std::fs::remove_file(&state_path).with_context(|| format!("removing {}", state_path.display()))?;
        log::info!("removed {}: its namespace {} is gone", state_path.display(), stale.target.reached);
    }
    if state_path.exists() {
        bail!(
            "network namespace {} was fixed by cctrace already (state in {}): undo that first with cctrace fix --undo",
            target.reached,
            state_path.display()
        );
    }
    let current = inside(target, cc, env, read_default)?
        .with_context(|| format!("reading {DEFAULT_CC} in {}", target.reached))?;
    let (established, switch_note) = if live {
        let switcher = switcher.get()?;
        (switcher.list(target.netns, Path::new(&target.path))?, switcher.note())
    } else {
        (Vec::new(), None)
    };
    let exists = |p: &str| Path::new(p).exists();
    let mut plan = Plan::new(target.clone(), cc, &current, &env.available_cc, live, &established, persist, &exists);
    plan.switch_note = switch_note;
    let (steps, notes) = buffers_of(target, host_allowed, env, switcher);
    Ok(plan.with_buffers(steps, notes, &exists))
}

/// The buffer maxima a fix of `target` raises, from one sample of every socket of the host (the
/// start-up listing's walk); a receiving end in the host's own namespace only with
/// `host_allowed`. When the sockets cannot be walked, no step, and a note saying why.
fn buffers_of(
    target: &Target,
    host_allowed: bool,
    env: &Environment,
    switcher: &mut LazySwitcher,
) -> (Vec<SysctlStep>, Vec<String>) {
    let started = std::time::Instant::now();
    let namespaces = crate::host::netns_paths();
    let samples = match switcher.get().and_then(|s| s.snapshot(&namespaces)) {
        Ok(samples) => samples,
        Err(e) => return (Vec::new(), vec![format!("buffers not examined: {e:#}")]),
    };
    log::info!(
        "buffers: {} sockets of {} network namespaces read in {:?}",
        samples.len(),
        namespaces.len(),
        started.elapsed()
    );
    let (mut steps, mut notes) = buffer_steps(target, &samples, env, &|netns| target_into(netns, env));
    steps.retain(|s| {
        let keep = !s.target.host || target.host || host_allowed;
        if !keep {
            notes.push(format!(
                "the receiving end is in the host's own namespace: its net.ipv4.{} max is every host connection's; \
                 add --host-namespace to raise it to {}",
                s.key, s.to.max
            ));
        }
        keep
    });
    (steps, notes)
}

/// What a fix or an undo says: each line to the caller's `say` as it happens, and all of them
/// for the action's record.
pub(super) struct Said<'a> {
    say: &'a mut dyn FnMut(&str),
    pub(super) messages: Vec<String>,
}

impl<'a> Said<'a> {
    pub(super) fn new(say: &'a mut dyn FnMut(&str)) -> Self {
        Self { say, messages: Vec::new() }
    }

    pub(super) fn line(&mut self, line: String) {
        (self.say)(&line);
        self.messages.push(line);
    }
}

/// The state of a fix being carried out, written again after every change so an error part
/// way still leaves everything done so far to undo.
struct Kept {
    path: PathBuf,
    state: State,
}

impl Kept {
    fn save(&self) -> Result<()> {
        write_state(&self.path, &self.state)
    }
}

/// Carry out a confirmed `plan`, saying each step to `say` (and the log); what was done.
pub(super) fn carry_out_fix(
    plan: &Plan,
    env: &Environment,
    switcher: &mut LazySwitcher,
    say: &mut dyn FnMut(&str),
) -> Result<ActionRecord> {
    let (target, cc) = (&plan.target, plan.cc.as_str());
    let mut said = Said::new(say);
    if let Some(module) = &plan.load_module {
        load_module(module, cc, target, env)?;
        said.line(format!("loaded {module}"));
    }
    let current = plan.current_default.as_str();
    let default_changed = current != cc;
    if default_changed {
        set_default(target, cc, env)?;
        log::info!(
            "default congestion control of {} (inode {}) set from {current} to {cc}",
            target.reached,
            target.netns
        );
        said.line(format!("default congestion control of {} set from {current} to {cc}", target.reached));
    }
    let state = State {
        version: STATE_VERSION,
        target: target.clone(),
        cc: cc.to_string(),
        previous_default: current.to_string(),
        default_changed,
        switched: Vec::new(),
        files: Vec::new(),
        sysctls: Vec::new(),
    };
    let mut kept = Kept { path: state_path(target.netns), state };
    // Kept from the first change on, so an error below still leaves something to undo.
    kept.save()?;
    let sysctls = raise_buffers(plan, env, &mut kept, &mut said)?;
    let (switched, failed) = if plan.live && !plan.to_switch.is_empty() {
        switch_live(plan, switcher, &mut kept, &mut said)?
    } else {
        (Vec::new(), 0)
    };
    let ts_ns = crate::clock::monotonic_now_ns();
    write_persisted(&plan.persist, &mut kept, &mut said)?;
    said.line(fixed_line(&target.reached, &kept.state, failed));
    Ok(ActionRecord {
        ts_ns,
        action: ActionKind::Fix,
        netns: target.netns,
        target: target.reached.clone(),
        cc: cc.to_string(),
        default_before: current.to_string(),
        default_after: cc.to_string(),
        switched,
        messages: said.messages,
        sysctls,
    })
}

/// Load the algorithm's `module` on the host; still not available is the one line saying why.
fn load_module(module: &str, cc: &str, target: &Target, env: &Environment) -> Result<()> {
    // modprobe's own complaint goes to the log: the refusal below is the one line shown.
    let out = std::process::Command::new("modprobe").arg(module).output();
    match &out {
        Ok(o) if o.status.success() => log::info!("modprobe {module}: loaded"),
        Ok(o) => log::info!("modprobe {module} failed: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => log::info!("modprobe {module} could not run: {e}"),
    }
    if !crate::host::available_congestion_controls().iter().any(|a| a == cc) {
        bail!(refusal(Step::LoadModule, libc::ENOENT, cc, target, &env.allowed_cc));
    }
    Ok(())
}

/// Raise the plan's buffer maxima one by one, keeping each in the state; the action's lines.
fn raise_buffers(plan: &Plan, env: &Environment, kept: &mut Kept, said: &mut Said<'_>) -> Result<Vec<String>> {
    let mut sysctls = Vec::new();
    for step in &plan.buffers {
        set_buffer_sysctl(&step.target, &step.key, step.to, env)?;
        let line = format!(
            "net.ipv4.{} of {} set from {} to {}",
            step.key,
            step.target.reached,
            step.from.sysctl_value(),
            step.to.sysctl_value()
        );
        log::info!("{line}");
        said.line(line);
        sysctls.push(step.record(step.from, step.to));
        kept.state.sysctls.push(step.clone());
        kept.save()?;
    }
    Ok(sysctls)
}

/// Switch the plan's established connections now; those switched, and how many refused.
fn switch_live(
    plan: &Plan,
    switcher: &mut LazySwitcher,
    kept: &mut Kept,
    said: &mut Said<'_>,
) -> Result<(Vec<SwitchedFlow>, usize)> {
    let (target, cc) = (&plan.target, plan.cc.as_str());
    let mut failed = 0;
    let mut switched = Vec::new();
    let chosen: Vec<(u64, String)> = plan.to_switch.iter().map(|c| (c.cookie, cc.to_string())).collect();
    let touched = switcher.get()?.switch_cookies(target.netns, Path::new(&target.path), &chosen)?;
    for s in &touched {
        if s.result == 0 {
            log::info!("switched socket {} (:{} -> :{}) from {} to {}", s.cookie, s.sport, s.dport, s.old_cc, s.new_cc);
            said.line(format!(
                "switched connection :{} -> :{} (cookie {}) from {} to {}",
                s.sport, s.dport, s.cookie, s.old_cc, s.new_cc
            ));
            kept.state.switched.push(SwitchedCookie { cookie: s.cookie, old_cc: s.old_cc.clone() });
            switched.push(SwitchedFlow { cookie: s.cookie, from: s.old_cc.clone(), to: s.new_cc.clone() });
        } else {
            failed += 1;
            log::info!("socket {} (:{} -> :{}) not switched: errno {}", s.cookie, s.sport, s.dport, -s.result);
            said.line(format!(
                "connection :{} -> :{} (cookie {}) stays on {}: {} ({})",
                s.sport,
                s.dport,
                s.cookie,
                s.old_cc,
                socket_refusal(s.result),
                std::io::Error::from_raw_os_error(-s.result)
            ));
        }
    }
    let closed = plan.to_switch.len().saturating_sub(touched.len());
    if closed > 0 {
        said.line(format!("{closed} connection(s) of the plan closed before they could be switched"));
    }
    kept.save()?;
    Ok((switched, failed))
}

/// Write the files `--persist` asked for, each only where none is (never over one), keeping
/// each in the state so undo removes exactly those.
fn write_persisted(persist: &Persist, kept: &mut Kept, said: &mut Said<'_>) -> Result<()> {
    match persist {
        Persist::No => {}
        Persist::Nothing(why) => said.line(format!("nothing to persist: {why}")),
        Persist::HostFiles(files) => {
            for (path, contents) in files {
                let written = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(path)
                    .and_then(|mut f| f.write_all(contents.as_bytes()));
                match written {
                    Ok(()) => {
                        log::info!("wrote {path}");
                        said.line(format!("wrote {path}"));
                        kept.state.files.push(path.clone());
                        kept.save()?;
                    }
                    Err(e) => bail!("writing {path}: {e}"),
                }
            }
        }
    }
    Ok(())
}

/// The fix's last line: what it did, and how to undo it.
fn fixed_line(reached: &str, state: &State, failed: usize) -> String {
    format!(
        "{} fixed ({} connection{} switched{}{}); undo with cctrace fix --undo",
        reached,
        state.switched.len(),
        if state.switched.len() == 1 { "" } else { "s" },
        if failed > 0 { format!(", {failed} could not be") } else { String::new() },
        match state.sysctls.len() {
            0 => String::new(),
            n => format!(", {n} buffer limit{} raised", if n == 1 { "" } else { "s" }),
        }
    )
}
