//! `cctrace fix`, the host's half of the fix: apply it to one network namespace, switch its
//! running flows live, and undo it. The plan, the state and the messages are built in
//! [`crate::analysis::fix_plan`]; this is the part that reads the host, asks, acts and logs every
//! action, in the log and in the host's [`journal`] every running cctrace reads.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::analysis::container::Runtime;
use crate::analysis::environment::Environment;
use crate::analysis::filter::{resolve, FilterSpec, HostLookup};
use crate::analysis::fix_plan::{FixControl, Plan, Target};
use crate::analysis::schema::ActionRecord;
use crate::kernel::filter::live::HostPaths;

mod apply;
mod host_io;
pub mod journal;
mod undo;

use apply::*;
use host_io::*;
use undo::*;

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
        carry_out_undo(&undo, &env, &mut switcher, &mut say).inspect(journal::append)?;
    } else {
        let plan = prepare_fix(&target, &args.cc, args.live, args.persist, args.host_namespace, &env, &mut switcher)?;
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
        carry_out_fix(&plan, &env, &mut switcher, &mut say).inspect(journal::append)?;
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
        // A receiving end in the host's own namespace needs its own confirmation, which the
        // panel asks only for a fix of the host's namespace itself.
        prepare_fix(&target, cc, true, false, false, &env, &mut self.switcher).map_err(|e| format!("{e:#}"))
    }

    fn apply(&mut self, _shown: &Environment, plan: &Plan) -> Result<ActionRecord, String> {
        log::info!(
            "fix of network namespace {} (inode {}) confirmed in the terminal UI: {:?}",
            plan.target.reached,
            plan.target.netns,
            plan.lines()
        );
        let env = crate::host::environment();
        carry_out_fix(plan, &env, &mut self.switcher, &mut |_| {})
            .inspect(journal::append)
            .map_err(|e| format!("{e:#}"))
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
        carry_out_undo(&undo, &env, &mut self.switcher, &mut |_| {})
            .inspect(journal::append)
            .map_err(|e| format!("{e:#}"))
    }
}

/// The namespace `--netns` or `--container` names, with a path that enters it.
fn resolve_target(args: &FixArgs, env: &Environment) -> Result<Target> {
    if args.netns.len() + args.containers.len() != 1 {
        bail!("name one network namespace: --netns NAME|PATH|INODE or --container NAME");
    }
    let lookup = HostPaths { cgroup_root: crate::cgroups::cgroup2_mount() };
    let host = crate::host::host_netns();
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
