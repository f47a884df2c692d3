//! cctrace run from its container image looks at the host's files, not the container's.
//!
//! The image sets [`ENTER_HOST_MOUNTS_ENV`]. Started with the host's processes in view
//! (`docker run --pid host`), cctrace finds the nearest of its ancestors that lives in another
//! mount namespace: the container runtime's shim (`containerd-shim`, Podman's `conmon`), which
//! runs on the host. Joining that process's mount namespace makes every path the host's, as if
//! cctrace had been started there: the cgroup hierarchy and the runtimes' files that name
//! containers (wherever a runtime keeps them), `/run/netns`, the state directory
//! `/run/cctrace` that a later `fix --undo` reads, a writable `/proc/sys` (read-only in a
//! container) for the fix, `/etc/sysctl.d` for `--persist`, tracefs, `modprobe`. Paths given on
//! the command line are the host's too. Its cgroup and UTS namespaces are joined as well (cgroup
//! paths and the host name as the host has them); the network namespace, the cgroup cctrace runs
//! in and its capabilities stay the container's. That process also stands for the host's network
//! namespace ([`super::host_netns`]).
//!
//! Why an ancestor and not pid 1: pid 1 of a host is not always readable (a sandbox's init was
//! not, even to root), while the shim that started this container is the runtime's own child.
//! It must happen while the process has one thread: the kernel refuses to move a thread into
//! another mount namespace while other threads share its root and working directory (EINVAL).

use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::sync::OnceLock;

use rustix::thread::LinkNameSpaceType;

/// The variable the image sets (`1`) to ask for the host's mounts.
pub const ENTER_HOST_MOUNTS_ENV: &str = "CCTRACE_ENTER_HOST_MOUNTS";

/// The process whose mount namespace was entered: it stands for the host.
static HOST_PROCESS: OnceLock<u32> = OnceLock::new();

/// Whose files cctrace sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostMounts {
    /// Not asked for: the process's own mount namespace, as always.
    Own,
    /// The host's: entered the mount namespace of this process (the runtime's shim).
    Entered { pid: u32, comm: String },
    /// Asked for, but the container's own files are all cctrace sees: why, and what to add.
    Refused(String),
}

/// Join the host's mount namespace when [`ENTER_HOST_MOUNTS_ENV`] asks for it. Call before any
/// second thread exists.
pub fn enter_if_asked() -> HostMounts {
    if std::env::var_os(ENTER_HOST_MOUNTS_ENV).is_none_or(|v| v != "1") {
        return HostMounts::Own;
    }
    match enter_outer_mounts() {
        Ok((pid, comm)) => {
            let _ = HOST_PROCESS.set(pid);
            HostMounts::Entered { pid, comm }
        }
        Err(why) => HostMounts::Refused(why),
    }
}

/// The process standing for the host once its mount namespace was entered.
pub fn host_process() -> Option<u32> {
    HOST_PROCESS.get().copied()
}

/// Move this thread into namespace `kind` (`mnt`, `cgroup`) of `pid` when it is not already
/// there; `needs` names the capabilities a refusal lacks.
fn enter(pid: u32, kind: &str, space: LinkNameSpaceType, needs: &str) -> Result<(), String> {
    let path = format!("/proc/{pid}/ns/{kind}");
    let ns = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    let own = std::fs::metadata(format!("/proc/self/ns/{kind}")).map(|m| m.ino()).ok();
    if own == Some(ns.metadata().map_err(|e| format!("{path}: {e}"))?.ino()) {
        return Ok(());
    }
    rustix::thread::move_into_link_name_space(ns.as_fd(), Some(space)).map_err(|e| match e {
        rustix::io::Errno::PERM => format!("entering the host's {kind} namespace needs {needs}"),
        other => format!("entering the host's {kind} namespace: {other}"),
    })
}

/// Walk up from the parent to the first process in another mount namespace and enter its mount,
/// cgroup and UTS namespaces. The cgroup namespace because in a container's own one
/// (`--cgroupns private`, the default on cgroup v2 hosts) mountinfo shows the host's cgroup v2
/// mount as a subtree (`/../..`), not as the whole hierarchy cctrace names containers from; the
/// UTS namespace for the host's name (the header, OTLP's `host.name`), not the container's.
fn enter_outer_mounts() -> Result<(u32, String), String> {
    let own = std::fs::metadata("/proc/self/ns/mnt").map_err(|e| format!("/proc/self/ns/mnt: {e}"))?.ino();
    // 0: the parent is outside this pid namespace.
    let mut pid = std::os::unix::process::parent_id();
    while pid != 0 {
        let stat = procfs::process::Process::new(pid as i32)
            .and_then(|p| p.stat())
            .map_err(|e| format!("reading /proc/{pid}/stat: {e}"))?;
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/mnt")).map_err(|e| {
            format!("cannot open the namespaces of {} (pid {pid}): {e}; give the container CAP_SYS_PTRACE", stat.comm)
        })?;
        let ino = ns.metadata().map_err(|e| format!("/proc/{pid}/ns/mnt: {e}"))?.ino();
        if ino != own {
            // The mount namespace first: the one that also needs CAP_SYS_CHROOT, so a refusal
            // leaves the others as they were.
            let entered = enter(pid, "mnt", LinkNameSpaceType::Mount, "CAP_SYS_ADMIN and CAP_SYS_CHROOT")
                .and_then(|()| enter(pid, "cgroup", LinkNameSpaceType::ControlGroup, "CAP_SYS_ADMIN"))
                .and_then(|()| enter(pid, "uts", LinkNameSpaceType::HostNameAndNISDomainName, "CAP_SYS_ADMIN"));
            return entered.map(|()| (pid, stat.comm.clone())).map_err(|e| format!("{e} ({} is pid {pid})", stat.comm));
        }
        pid = u32::try_from(stat.ppid).unwrap_or(0);
    }
    Err("no process of the host is in view: run the container with --pid host".into())
}
