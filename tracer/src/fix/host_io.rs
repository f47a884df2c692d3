//! What the fix reads and writes on the host: its state files, the namespace's default
//! congestion control, entering the namespace, and asking the user.

use std::fs::File;
use std::io::{self, BufRead, IsTerminal, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use crate::analysis::environment::{BufferLimits, Environment};
use crate::analysis::fix_plan::{refusal, State, Step, Target};
use crate::analysis::state_dir::STATE_DIR;

pub(super) const DEFAULT_CC: &str = "/proc/sys/net/ipv4/tcp_congestion_control";

pub(super) fn confirm(yes: bool) -> Result<()> {
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
pub(super) fn write_state(path: &Path, state: &State) -> Result<()> {
    crate::host::create_state_dir(Path::new(STATE_DIR)).with_context(|| format!("creating {STATE_DIR}"))?;
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

/// The namespace's default congestion control, read from inside it.
pub(super) fn read_default() -> io::Result<String> {
    std::fs::read_to_string(DEFAULT_CC).map(|s| s.trim().to_string())
}

/// Set `target`'s default congestion control to `cc`; a refusal is the one line saying why
/// and what to do about it.
pub(super) fn set_default(target: &Target, cc: &str, env: &Environment) -> Result<()> {
    inside(target, cc, env, || std::fs::write(DEFAULT_CC, cc))?.map_err(|e| {
        log::info!("setting the default of {} to {cc} refused: errno {}", target.reached, errno_of(&e));
        anyhow!(refusal(Step::SetDefault, errno_of(&e), cc, target, &env.allowed_cc))
    })
}

/// Set `net.ipv4.KEY` (a buffer triple) of `target`'s namespace to `limits`; the error is the
/// one line to show.
pub(super) fn set_buffer_sysctl(target: &Target, key: &str, limits: BufferLimits, env: &Environment) -> Result<()> {
    let write = || std::fs::write(format!("/proc/sys/net/ipv4/{key}"), limits.sysctl_value());
    inside(target, "", env, write)?
        .with_context(|| format!("setting net.ipv4.{key} of {} to {}", target.reached, limits.sysctl_value()))
}

/// A path that leads into network namespace `netns`, as a fix target: its `ip netns` name, or
/// a process living in it.
pub(super) fn target_into(netns: u32, env: &Environment) -> Option<Target> {
    let path = crate::host::path_into_netns(env, netns)?;
    let named = env.netns_names.get(&netns);
    Some(Target {
        netns,
        reached: match named {
            Some(name) => format!("ip netns {name}"),
            None => format!("network namespace {netns} ({path})"),
        },
        path,
        host: netns == env.host_netns,
        ip_netns: named.is_some(),
        runtime_sysctl: None,
    })
}

/// Run `f` on a thread inside the target namespace (entered by its path, checked by inode, so
/// a path that now leads elsewhere is "gone"). The error is that of getting there.
pub(super) fn in_netns<T: Send>(target: &Target, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                crate::host::enter_netns(target.netns, Path::new(&target.path))?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the thread that entered the namespace panicked")))
    })
}

/// [`in_netns`], with not getting there said in [`refusal`]'s words (`cc`, the algorithm the
/// step is about, for its advice).
pub(super) fn inside<T: Send>(target: &Target, cc: &str, env: &Environment, f: impl FnOnce() -> T + Send) -> Result<T> {
    in_netns(target, f).map_err(|e| anyhow!(refusal(Step::Enter, errno_of(&e), cc, target, &env.allowed_cc)))
}

/// The errno [`refusal`] words an error by: the kernel's, or EIO for one that carries none (the
/// namespace's thread panicked, a file was not text).
pub(super) fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The state at `path` when the namespace it is about no longer opens at the path it was
/// reached by (a namespace inode can be reused by a new namespace once the old one is gone).
/// Only `ip netns` namespaces are judged: their path is their name, which outlives any one
/// process (a container's is reached through a process, which may end while it lives on).
pub(super) fn stale_state(path: &Path) -> Option<State> {
    let state = State::from_json(&std::fs::read_to_string(path).ok()?).ok()?;
    if state.target.host || !state.target.ip_netns {
        return None;
    }
    let same = File::open(&state.target.path)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.ino() == u64::from(state.target.netns));
    (!same).then_some(state)
}
