//! `cctrace fix`: apply the fix to one network namespace, switch its running flows live, and
//! undo it. The plan, the state and the messages are built in [`crate::analysis::fix_plan`];
//! this is the part that reads the host, asks, acts and logs every action.

use std::fs::File;
use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::analysis::container::Runtime;
use crate::analysis::environment::Environment;
use crate::analysis::filter::{resolve, FilterSpec, HostLookup};
use crate::analysis::fix_plan::{
    refusal, socket_refusal, state_file_name, valid_cc_name, FixControl, Persist, Plan, State, Step, SwitchedCookie,
    Target, STATE_DIR, STATE_VERSION,
};
use crate::analysis::schema::{ActionKind, ActionRecord, SwitchedFlow};
use crate::kernel::listing::enter_netns;
use crate::kernel::switch::Switcher;
use crate::live_filter::HostPaths;

const DEFAULT_CC: &str = "/proc/sys/net/ipv4/tcp_congestion_control";

/// The command line of `cctrace fix`.
#[derive(Clone, Debug, Default)]
pub struct FixArgs {
    /// `--netns` terms (exactly one of these and `containers` in all).
    pub netns: Vec<String>,
    pub containers: Vec<String>,
    pub cc: String,
    pub live: bool,
    pub persist: bool,
    pub yes: bool,
    pub host_namespace: bool,
    pub undo: bool,
}

/// Run `cctrace fix` (or `--undo`) to the end; what it did is printed on stdout and logged.
pub fn run(args: &FixArgs) -> Result<()> {
    let env = crate::host::environment();
    let target = match resolve_target(args, &env) {
        Ok(t) => t,
        // A namespace deleted after its fix leaves state behind: let undo clear it.
        Err(e) if args.undo => return undo_gone(args, e),
        Err(e) => return Err(e),
    };
    if target.host && !args.host_namespace {
        bail!(
            "{} is the host's own network namespace: its default is every host connection's; add \
             --host-namespace (and --yes or a confirmation) to change it",
            target.reached
        );
    }
    let mut switcher = LazySwitcher::default();
    let mut say = |line: &str| println!("cctrace: {line}");
    if args.undo {
        let undo = match prepare_undo(&target)? {
            UndoPrep::Nothing(why) => {
                say(&why);
                return Ok(());
            }
            UndoPrep::Ready(undo) => undo,
        };
        for line in undo.lines() {
            println!("{line}");
        }
        confirm(args.yes)?;
        log::info!("undo of the fix of {} (inode {}) confirmed: {:?}", target.reached, target.netns, undo.lines());
        carry_out_undo(&undo, &env, &mut switcher, &mut say)?;
    } else {
        let plan = prepare_fix(&target, &args.cc, args.live, args.persist, &env, &mut switcher)?;
        for line in plan.lines() {
            println!("{line}");
        }
        confirm(args.yes)?;
        log::info!(
            "fix of network namespace {} (inode {}) confirmed: {:?}",
            target.reached,
            target.netns,
            plan.lines()
        );
        carry_out_fix(&plan, &env, &mut switcher, &mut say)?;
    }
    Ok(())
}

/// The fix as the terminal UI drives it: plan, apply and undo by namespace inode, the lines
/// it says collected into the action instead of printed.
#[derive(Default)]
pub struct HostFixer {
    switcher: LazySwitcher,
}

impl FixControl for HostFixer {
    // The UI's host facts may be seconds old; an action on the host reads them again (a
    // namespace made or removed since must be seen as it is now).
    fn plan(&mut self, _shown: &Environment, netns: u32, cc: &str) -> Result<Plan, String> {
        let env = crate::host::environment();
        let args = FixArgs { netns: vec![netns.to_string()], cc: cc.to_string(), ..FixArgs::default() };
        let target = resolve_target(&args, &env).map_err(|e| format!("{e:#}"))?;
        prepare_fix(&target, cc, true, false, &env, &mut self.switcher).map_err(|e| format!("{e:#}"))
    }

    fn apply(&mut self, _shown: &Environment, plan: &Plan) -> Result<ActionRecord, String> {
        log::info!(
            "fix of network namespace {} (inode {}) confirmed in the terminal UI: {:?}",
            plan.target.reached,
            plan.target.netns,
            plan.lines()
        );
        let env = crate::host::environment();
        carry_out_fix(plan, &env, &mut self.switcher, &mut |_| {}).map_err(|e| format!("{e:#}"))
    }

    fn undo(&mut self, _shown: &Environment, netns: u32) -> Result<ActionRecord, String> {
        let env = crate::host::environment();
        let args = FixArgs { netns: vec![netns.to_string()], ..FixArgs::default() };
        let target = resolve_target(&args, &env).map_err(|e| format!("{e:#}"))?;
        let undo = match prepare_undo(&target).map_err(|e| format!("{e:#}"))? {
            UndoPrep::Nothing(why) => return Err(why),
            UndoPrep::Ready(undo) => undo,
        };
        log::info!("undo of the fix of {} (inode {}) asked in the terminal UI", target.reached, target.netns);
        carry_out_undo(&undo, &env, &mut self.switcher, &mut |_| {}).map_err(|e| format!("{e:#}"))
    }
}

/// The switcher, loaded the first time a walk needs it and kept for the next.
#[derive(Default)]
struct LazySwitcher(Option<Switcher>);

impl LazySwitcher {
    fn get(&mut self) -> Result<&mut Switcher> {
        if self.0.is_none() {
            self.0 = Some(Switcher::load()?);
        }
        Ok(self.0.as_mut().expect("loaded above"))
    }
}

fn state_path(netns: u32) -> PathBuf {
    Path::new(STATE_DIR).join(state_file_name(netns))
}

/// Everything a fix of `target` will do, read from the host without changing it: the
/// namespace's default and, when `live`, its established connections as they are now.
fn prepare_fix(
    target: &Target,
    cc: &str,
    live: bool,
    persist: bool,
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
    let current = in_netns(target, read_default)
        .map_err(|e| anyhow::anyhow!(refusal(Step::Enter, e, cc, target, &env.allowed_cc)))?
        .map_err(|e| {
            anyhow::anyhow!("reading {DEFAULT_CC} in {}: {}", target.reached, std::io::Error::from_raw_os_error(e))
        })?;
    let established = if live { switcher.get()?.list(target.netns, Path::new(&target.path))? } else { Vec::new() };
    Ok(Plan::new(target.clone(), cc, &current, &env.available_cc, live, &established, persist, &|p| {
        Path::new(p).exists()
    }))
}

/// Carry out a confirmed `plan`, saying each step to `say` (and the log); what was done.
fn carry_out_fix(
    plan: &Plan,
    env: &Environment,
    switcher: &mut LazySwitcher,
    say: &mut dyn FnMut(&str),
) -> Result<ActionRecord> {
    let (target, cc) = (&plan.target, plan.cc.as_str());
    let mut messages = Vec::new();
    let mut say = |line: String| {
        say(&line);
        messages.push(line);
    };
    let state_path = state_path(target.netns);
    if let Some(module) = &plan.load_module {
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
        say(format!("loaded {module}"));
    }
    let current = plan.current_default.as_str();
    let default_changed = current != cc;
    if default_changed {
        in_netns(target, || write_default(cc))
            .map_err(|e| anyhow::anyhow!(refusal(Step::Enter, e, cc, target, &env.allowed_cc)))?
            .map_err(|e| {
                log::info!("setting the default of {} to {cc} refused: errno {e}", target.reached);
                anyhow::anyhow!(refusal(Step::SetDefault, e, cc, target, &env.allowed_cc))
            })?;
        log::info!(
            "default congestion control of {} (inode {}) set from {current} to {cc}",
            target.reached,
            target.netns
        );
        say(format!("default congestion control of {} set from {current} to {cc}", target.reached));
    }
    let mut state = State {
        version: STATE_VERSION,
        target: target.clone(),
        cc: cc.to_string(),
        previous_default: current.to_string(),
        default_changed,
        switched: Vec::new(),
        files: Vec::new(),
    };
    // Kept from the first change on, so an error below still leaves something to undo.
    write_state(&state_path, &state)?;

    let mut failed = 0;
    let mut switched = Vec::new();
    if plan.live && !plan.to_switch.is_empty() {
        let chosen: Vec<(u64, String)> = plan.to_switch.iter().map(|c| (c.cookie, cc.to_string())).collect();
        let touched = switcher.get()?.switch_cookies(target.netns, Path::new(&target.path), &chosen)?;
        for s in &touched {
            if s.result == 0 {
                log::info!(
                    "switched socket {} (:{} -> :{}) from {} to {}",
                    s.cookie,
                    s.sport,
                    s.dport,
                    s.old_cc,
                    s.new_cc
                );
                say(format!(
                    "switched connection :{} -> :{} (cookie {}) from {} to {}",
                    s.sport, s.dport, s.cookie, s.old_cc, s.new_cc
                ));
                state.switched.push(SwitchedCookie { cookie: s.cookie, old_cc: s.old_cc.clone() });
                switched.push(SwitchedFlow { cookie: s.cookie, from: s.old_cc.clone(), to: s.new_cc.clone() });
            } else {
                failed += 1;
                log::info!("socket {} (:{} -> :{}) not switched: errno {}", s.cookie, s.sport, s.dport, -s.result);
                say(format!(
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
            say(format!("{closed} connection(s) of the plan closed before they could be switched"));
        }
        write_state(&state_path, &state)?;
    }
    let ts_ns = crate::clock::monotonic_now_ns();

    match &plan.persist {
        Persist::No => {}
        Persist::Nothing(why) => say(format!("nothing to persist: {why}")),
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
                        say(format!("wrote {path}"));
                        state.files.push(path.clone());
                        write_state(&state_path, &state)?;
                    }
                    Err(e) => bail!("writing {path}: {e}"),
                }
            }
        }
    }
    say(format!(
        "{} fixed ({} connection{} switched{}); undo with cctrace fix --undo",
        target.reached,
        state.switched.len(),
        if state.switched.len() == 1 { "" } else { "s" },
        if failed > 0 { format!(", {failed} could not be") } else { String::new() }
    ));
    Ok(ActionRecord {
        ts_ns,
        action: ActionKind::Fix,
        netns: target.netns,
        target: target.reached.clone(),
        cc: cc.to_string(),
        default_before: current.to_string(),
        default_after: cc.to_string(),
        switched,
        messages,
    })
}

/// What an undo of a namespace will do, or why there is nothing to undo.
enum UndoPrep {
    Nothing(String),
    Ready(Box<Undo>),
}

struct Undo {
    target: Target,
    state: State,
    state_path: PathBuf,
}

impl Undo {
    fn lines(&self) -> Vec<String> {
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
        for f in &state.files {
            plan.push(format!("  remove {f} (written by cctrace fix --persist)"));
        }
        plan
    }
}

fn prepare_undo(target: &Target) -> Result<UndoPrep> {
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

fn carry_out_undo(
    undo: &Undo,
    env: &Environment,
    switcher: &mut LazySwitcher,
    say: &mut dyn FnMut(&str),
) -> Result<ActionRecord> {
    let (target, state) = (&undo.target, &undo.state);
    let mut messages = Vec::new();
    let mut say = |line: String| {
        say(&line);
        messages.push(line);
    };
    let prev = state.previous_default.as_str();
    if state.default_changed {
        in_netns(target, || write_default(prev))
            .map_err(|e| anyhow::anyhow!(refusal(Step::Enter, e, prev, target, &env.allowed_cc)))?
            .map_err(|e| anyhow::anyhow!(refusal(Step::SetDefault, e, prev, target, &env.allowed_cc)))?;
        log::info!("default congestion control of {} set back from {} to {prev}", target.reached, state.cc);
        say(format!("default congestion control of {} set back to {prev}", target.reached));
    }
    let mut switched = Vec::new();
    if !state.switched.is_empty() {
        let cookies: Vec<(u64, String)> = state.switched.iter().map(|s| (s.cookie, s.old_cc.clone())).collect();
        let touched = switcher.get()?.switch_cookies(target.netns, Path::new(&target.path), &cookies)?;
        for s in &touched {
            if s.result == 0 {
                log::info!("switched socket {} back from {} to {}", s.cookie, s.old_cc, s.new_cc);
                say(format!(
                    "switched connection :{} -> :{} (cookie {}) back to {}",
                    s.sport, s.dport, s.cookie, s.new_cc
                ));
                switched.push(SwitchedFlow { cookie: s.cookie, from: s.old_cc.clone(), to: s.new_cc.clone() });
            } else {
                log::info!("socket {} not switched back: errno {}", s.cookie, -s.result);
                say(format!(
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
            say(format!("{closed} switched connection(s) closed meanwhile"));
        }
    }
    let ts_ns = crate::clock::monotonic_now_ns();
    for f in &state.files {
        match std::fs::remove_file(f) {
            Ok(()) => {
                log::info!("removed {f}");
                say(format!("removed {f}"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("removing {f}: {e}"),
        }
    }
    std::fs::remove_file(&undo.state_path).with_context(|| format!("removing {}", undo.state_path.display()))?;
    log::info!("removed {}", undo.state_path.display());
    say(format!("the fix of {} is undone", target.reached));
    Ok(ActionRecord {
        ts_ns,
        action: ActionKind::Undo,
        netns: target.netns,
        target: target.reached.clone(),
        cc: state.cc.clone(),
        default_before: if state.default_changed { state.cc.clone() } else { prev.to_string() },
        default_after: prev.to_string(),
        switched,
        messages,
    })
}

/// `--undo` for a namespace that no longer exists: nothing in it to restore, but the files
/// `--persist` wrote and the state go. Without a state naming it, `not_found` is the error.
fn undo_gone(args: &FixArgs, not_found: anyhow::Error) -> Result<()> {
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
        for f in &state.files {
            match std::fs::remove_file(f) {
                Ok(()) => log::info!("removed {f}"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => bail!("removing {f}: {e}"),
            }
        }
        std::fs::remove_file(entry.path()).with_context(|| format!("removing {}", entry.path().display()))?;
        log::info!("removed the state of gone network namespace {} ({})", state.target.reached, entry.path().display());
        println!("cctrace: the state of {} is removed", state.target.reached);
        return Ok(());
    }
    Err(not_found)
}

/// The state at `path` when the namespace it is about no longer opens at the path it was
/// reached by (a namespace inode can be reused by a new namespace once the old one is gone).
/// Only `ip netns` namespaces are judged: their path is their name, which outlives any one
/// process (a container's is reached through a process, which may end while it lives on).
fn stale_state(path: &Path) -> Option<State> {
    let state = State::from_json(&std::fs::read_to_string(path).ok()?).ok()?;
    if state.target.host || !state.target.ip_netns {
        return None;
    }
    let same = File::open(&state.target.path)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.ino() == u64::from(state.target.netns));
    (!same).then_some(state)
}

fn confirm(yes: bool) -> Result<()> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        bail!("not confirmed, nothing changed: run it on a terminal to be asked, or pass --yes");
    }
    print!("Go ahead? [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if matches!(answer.trim().to_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        bail!("not confirmed, nothing changed")
    }
}

/// Write `state` to `path` readable by root only, replacing the previous one atomically.
fn write_state(path: &Path, state: &State) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(STATE_DIR)
        .with_context(|| format!("creating {STATE_DIR}"))?;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(state.to_json().as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    log::info!("state written to {}", path.display());
    Ok(())
}

fn read_default() -> Result<String, i32> {
    std::fs::read_to_string(DEFAULT_CC).map(|s| s.trim().to_string()).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

fn write_default(cc: &str) -> Result<(), i32> {
    std::fs::write(DEFAULT_CC, cc).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// Run `f` on a thread inside the target namespace (entered by its path, checked by inode, so
/// a path that now leads elsewhere is "gone"). The outer error is the errno of getting there.
fn in_netns<T: Send>(target: &Target, f: impl FnOnce() -> T + Send) -> Result<T, i32> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let ns = File::open(&target.path).map_err(|e| e.raw_os_error().unwrap_or(libc::ENOENT))?;
                if ns.metadata().map(|m| m.ino()).ok() != Some(u64::from(target.netns)) {
                    return Err(libc::ENOENT);
                }
                enter_netns(&ns).map_err(|e| e.raw_os_error().unwrap_or(libc::EPERM))?;
                Ok(f())
            })
            .join()
            .unwrap_or(Err(libc::EIO))
    })
}

/// The namespace `--netns` or `--container` names, with a path that enters it.
fn resolve_target(args: &FixArgs, env: &Environment) -> Result<Target> {
    if args.netns.len() + args.containers.len() != 1 {
        bail!("name one network namespace: --netns NAME|PATH|INODE or --container NAME");
    }
    let lookup = HostPaths { cgroup_root: crate::cgroups::cgroup2_mount() };
    let host = crate::host::netns_inode("/proc/1/ns/net").or_else(|| crate::host::netns_inode("/proc/self/ns/net"));
    if let Some(given) = args.netns.first() {
        let spec = FilterSpec { netns: vec![given.clone()], ..FilterSpec::default() };
        let resolved = resolve(&spec, env, &lookup)?;
        let netns = *resolved.netns.iter().next().context("the namespace resolved to nothing")?;
        let is_host = Some(netns) == host;
        let named = env.netns_names.get(&netns);
        let path = if lookup.netns_inode(given) == Some(netns) {
            given.clone()
        } else if let Some(path) = crate::host::path_into_netns(env, netns) {
            path
        } else {
            bail!("no path leads into network namespace {netns}: no process lives in it and ip netns does not name it");
        };
        let reached = match named {
            Some(name) if !is_host => format!("ip netns {name}"),
            _ => given.clone(),
        };
        return Ok(Target { netns, path, reached, host: is_host, ip_netns: named.is_some(), runtime_sysctl: None });
    }
    let given = &args.containers[0];
    let spec = FilterSpec { containers: vec![given.clone()], ..FilterSpec::default() };
    let resolved = resolve(&spec, env, &lookup)?;
    let root = lookup.cgroup_root.clone().context("no cgroup v2 mount: containers cannot be found")?;
    for id in &resolved.cgroup_ids {
        let Some(info) = env.cgroups.get(id) else { continue };
        let dir = root.join(info.path.trim_start_matches('/'));
        let Some(pid) = first_pid(&dir) else { continue };
        let Some(netns) = crate::host::netns_inode(&format!("/proc/{pid}/ns/net")) else { continue };
        let is_host = Some(netns) == host;
        let runtime_sysctl = info.container.as_ref().and_then(|c| {
            let run = match c.runtime {
                Runtime::Docker => "docker run",
                Runtime::Podman => "podman run",
                Runtime::Containerd => "nerdctl run",
                _ => return None,
            };
            Some(format!("{run} --sysctl net.ipv4.tcp_congestion_control={}", args.cc))
        });
        return Ok(Target {
            netns,
            path: format!("/proc/{pid}/ns/net"),
            reached: format!(
                "container {given} (pid {pid}){}",
                if is_host { ", the host's own namespace" } else { "" }
            ),
            host: is_host,
            ip_netns: false,
            runtime_sysctl: if is_host { None } else { runtime_sysctl },
        });
    }
    bail!("container {given} has no running process: its network namespace cannot be entered")
}

/// The first process in cgroup directory `dir` or below it.
fn first_pid(dir: &Path) -> Option<u32> {
    if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        if let Some(pid) = procs.lines().find_map(|l| l.trim().parse().ok()) {
            return Some(pid);
        }
    }
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| first_pid(&e.path()))
}
