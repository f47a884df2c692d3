//! Named network namespaces owned by this process, deleted when dropped.
//!
//! Namespaces are named `cct-<pid>-<counter>-<role>` so a later run can tell
//! which ones a crashed run left behind ([`cleanup_stale`]) without ever
//! touching namespaces that belong to a live process.

use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Once};
use std::thread::{self, JoinHandle};

use anyhow::{bail, Context, Result};

use crate::cmd;
use crate::error::LabError;

/// Where `ip netns` keeps its bind mounts.
const NETNS_RUN_DIR: &str = "/run/netns";
const NAME_PREFIX: &str = "cct-";
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// Checks that this process may create and enter network namespaces
/// (CAP_NET_ADMIN for links/addresses, CAP_SYS_ADMIN for the bind mount and
/// setns). Tests call this to skip cleanly when run unprivileged.
pub fn check_privileges() -> std::result::Result<(), LabError> {
    let cap_eff = procfs::process::Process::myself()
        .and_then(|p| p.status())
        .map_err(|e| LabError::NotPrivileged(format!("cannot read /proc/self/status: {e}")))?
        .capeff;
    for (bit, name) in [(CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN")] {
        if cap_eff & (1 << bit) == 0 {
            return Err(LabError::NotPrivileged(format!("{name} missing")));
        }
    }
    Ok(())
}

/// Owns the `/run/netns/NAME` registration; dropping it deletes the namespace.
/// Kept separate from [`Netns`] so a half-built namespace is still removed.
#[derive(Debug)]
struct Registration {
    name: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Err(e) = delete_named(&self.name) {
            // A leftover namespace is harmless to this run and is reclaimed by
            // cleanup_stale() in the next one, so warn instead of panicking.
            log::warn!("could not delete network namespace {}: {e:#}", self.name);
        }
    }
}

/// Deletes a named namespace with `ip netns del`, falling back to doing what
/// it does (detach the bind mount, remove the file) if `ip` fails.
fn delete_named(name: &str) -> Result<()> {
    let Err(ip_err) = cmd::run(Command::new("ip").args(["netns", "del", name])) else { return Ok(()) };
    let path = Path::new(NETNS_RUN_DIR).join(name);
    if !path.exists() {
        return Ok(());
    }
    // EINVAL (not a mount point) is fine: the unlink below still runs.
    let _ = rustix::mount::unmount(&path, rustix::mount::UnmountFlags::DETACH);
    std::fs::remove_file(&path)
        .map_err(|e| ip_err.context(format!("fallback removal of {} failed too: {e}", path.display())))
}

/// A network namespace created by this process.
///
/// Dropping it deletes the name (`ip netns del`); the kernel frees the
/// namespace itself once no process, socket or fd references it any more.
#[derive(Debug)]
pub struct Netns {
    // Field order matters: the fd is closed before the registration is
    // deleted, so the namespace can be freed right away.
    fd: OwnedFd,
    inode: u64,
    path: PathBuf,
    registration: Registration,
}

impl Netns {
    /// Creates `cct-<pid>-<counter>-<role>` with loopback up.
    ///
    /// `role` is a short tag such as `snd` or `rcv` (letters, digits, `_`, `-`).
    pub fn create(role: &str) -> Result<Netns> {
        if role.is_empty()
            || role.len() > 24
            || !role.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(LabError::InvalidArgument(format!("bad namespace role {role:?}")).into());
        }
        check_privileges()?;

        // A crashed earlier run must not break this one: reclaim its
        // namespaces once per process, before we add our own.
        static CLEANUP: Once = Once::new();
        CLEANUP.call_once(|| {
            if let Err(e) = cleanup_stale() {
                log::warn!("stale namespace cleanup failed: {e:#}");
            }
        });

        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let pid = std::process::id();
        let mut attempt = 0;
        let registration = loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = format!("{NAME_PREFIX}{pid}-{n}-{role}");
            let path = Path::new(NETNS_RUN_DIR).join(&name);
            match cmd::run(Command::new("ip").args(["netns", "add", &name])) {
                Ok(_) => break Registration { name },
                // A dead process that had our pid left this exact name
                // behind; skip to the next counter value.
                Err(_) if path.exists() && attempt < 16 => attempt += 1,
                Err(e) => return Err(e.context(format!("creating network namespace {name}"))),
            }
        };

        let path = Path::new(NETNS_RUN_DIR).join(&registration.name);
        let file = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let inode = file.metadata().with_context(|| format!("stat {}", path.display()))?.ino();
        let ns = Netns { fd: OwnedFd::from(file), inode, path, registration };
        cmd::run(Command::new("ip").args(["-n", ns.name(), "link", "set", "lo", "up"]))
            .with_context(|| format!("bringing up lo in {}", ns.name()))?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.registration.name
    }

    /// `/run/netns/NAME`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace's inode number (what `stat /run/netns/NAME` and
    /// `/proc/PID/ns/net` of a process inside report; the eBPF side sees it
    /// as `net->ns.inum`).
    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// `ip netns exec NAME program`; add arguments to the returned command.
    /// Wait until something in this namespace listens on TCP `port` (`ss -tlnH`), for at
    /// most `timeout`: the readiness of a server started as a separate process.
    pub fn wait_listening(&self, port: u16, timeout: std::time::Duration) -> Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let out = cmd::run(self.command("ss").args(["-tlnH", &format!("sport = :{port}")]))?;
            if !out.trim().is_empty() {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!("nothing listens on TCP port {port} in {} after {timeout:?}", self.name());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.name(), program]);
        cmd
    }

    /// Runs `ip -n NAME args...` and returns its stdout.
    pub(crate) fn ip(&self, args: &[&str]) -> Result<String> {
        cmd::run(Command::new("ip").args(["-n", self.name()]).args(args))
            .with_context(|| format!("in namespace {}", self.name()))
    }

    /// Sets a sysctl inside this namespace only, e.g.
    /// `sysctl_set("net.ipv4.tcp_congestion_control", "bbr")`.
    pub fn sysctl_set(&self, key: &str, value: &str) -> Result<()> {
        let path = sysctl_path(key)?;
        if key == "net.ipv4.tcp_congestion_control" {
            ensure_congestion_control(value);
        }
        self.run_inside(|| std::fs::write(&path, value))
            .and_then(|r| r.map_err(anyhow::Error::from))
            .with_context(|| format!("sysctl {key}={value} in {}", self.name()))
    }

    /// Reads a sysctl as seen inside this namespace (trimmed).
    pub fn sysctl_get(&self, key: &str) -> Result<String> {
        let path = sysctl_path(key)?;
        self.run_inside(|| std::fs::read_to_string(&path))
            .and_then(|r| r.map_err(anyhow::Error::from))
            .map(|s| s.trim().to_owned())
            .with_context(|| format!("sysctl {key} in {}", self.name()))
    }

    /// Runs `f` on a short-lived thread inside the namespace. /proc/sys/net
    /// resolves against the *calling thread's* namespace, and using a scratch
    /// thread means the caller's own thread never changes namespace.
    pub(crate) fn run_inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        thread::scope(|s| {
            s.spawn(|| -> Result<T> {
                let _guard = self.enter_current_thread()?;
                Ok(f())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("namespace helper thread panicked"))?
        })
    }

    /// Moves the calling thread into this namespace until the guard drops.
    /// Sockets created meanwhile belong to this namespace for their lifetime.
    pub fn enter_current_thread(&self) -> Result<NetnsGuard> {
        let prev = File::open("/proc/thread-self/ns/net").context("opening /proc/thread-self/ns/net")?;
        setns(&self.fd).with_context(|| format!("setns into {}", self.name()))?;
        Ok(NetnsGuard { prev: OwnedFd::from(prev), _not_send: PhantomData })
    }

    /// Spawns a named std thread that enters this namespace before running
    /// `f`. Returns only once the thread is inside (or failed to get there).
    pub fn spawn_thread<F, T>(&self, name: &str, f: F) -> Result<NsThread<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let fd = self.fd.try_clone().context("duplicating namespace fd")?;
        let (tx, rx) = mpsc::sync_channel::<io::Result<()>>(1);
        let handle = thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let entered = setns(&fd);
                drop(fd);
                let ok = entered.is_ok();
                // The receiver only disappears if spawn_thread itself is gone.
                let _ = tx.send(entered);
                ok.then(f)
            })
            .with_context(|| format!("spawning thread {name}"))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(NsThread { inner: handle }),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(anyhow::Error::from(e).context(format!("thread {name} entering {}", self.name())))
            }
            Err(_) => {
                let _ = handle.join();
                bail!("thread {name} died before entering {}", self.name())
            }
        }
    }
}

/// Moves the calling thread (only it) into the network namespace `fd` opens.
fn setns(fd: &impl AsFd) -> io::Result<()> {
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    Ok(move_into_link_name_space(fd.as_fd(), Some(LinkNameSpaceType::Network))?)
}

/// Maps `net.ipv4.tcp_rmem` to `/proc/sys/net/ipv4/tcp_rmem`, rejecting keys
/// that could escape /proc/sys.
fn sysctl_path(key: &str) -> Result<PathBuf> {
    let ok = !key.is_empty()
        && !key.contains("..")
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if !ok {
        return Err(LabError::InvalidArgument(format!("bad sysctl key {key:?}")).into());
    }
    Ok(PathBuf::from("/proc/sys").join(key.replace('.', "/")))
}

/// Best effort: load `tcp_<algo>` if the kernel does not offer `algo` yet.
/// Failure is fine (built in, or no modprobe); the later setsockopt/sysctl
/// reports a clear error if the algorithm really is unavailable.
pub(crate) fn ensure_congestion_control(algo: &str) {
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap_or_default();
    if available.split_whitespace().any(|a| a == algo) {
        return;
    }
    if algo.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        let _ = cmd::run(Command::new("modprobe").arg(format!("tcp_{algo}")));
    }
}

/// Restores the thread's previous namespace on drop. Not `Send`: namespace
/// membership is per thread, so the guard must die where it was made.
#[derive(Debug)]
pub struct NetnsGuard {
    prev: OwnedFd,
    _not_send: PhantomData<*const ()>,
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if let Err(e) = setns(&self.prev) {
            // Cannot happen short of fd exhaustion games; if it does, the
            // thread stays in the lab namespace, which is confined anyway.
            log::error!("restoring previous network namespace failed: {e}");
        }
    }
}

/// A thread started inside a namespace by [`Netns::spawn_thread`].
#[derive(Debug)]
pub struct NsThread<T> {
    // `None` only when entering the namespace failed, which spawn_thread
    // already turned into an error, so a returned NsThread always has Some.
    inner: JoinHandle<Option<T>>,
}

impl<T> NsThread<T> {
    /// Waits for the thread; `Err` carries a panic payload like `JoinHandle`.
    pub fn join(self) -> thread::Result<T> {
        match self.inner.join() {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(Box::new("thread never entered its namespace")),
            Err(p) => Err(p),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    pub fn thread(&self) -> &thread::Thread {
        self.inner.thread()
    }
}

/// Names listed by `ip netns list` (all namespaces, not only ours), for
/// tests and diagnostics.
pub fn list_namespaces() -> Result<Vec<String>> {
    let out = cmd::run(Command::new("ip").args(["netns", "list"]))?;
    Ok(out.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_owned).collect())
}

/// Parses `cct-<pid>-<counter>-<role>` and returns the pid.
fn owner_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let mut parts = rest.splitn(3, '-');
    let pid = parts.next()?.parse::<i32>().ok()?;
    parts.next()?.parse::<u64>().ok()?;
    parts.next().filter(|role| !role.is_empty())?;
    (pid > 0).then_some(pid)
}

fn pid_alive(pid: i32) -> bool {
    // Signal 0 only checks existence and permission; nothing is sent.
    let Some(pid) = rustix::process::Pid::from_raw(pid) else { return false };
    rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH)
}

/// Deletes `cct-<pid>-*` namespaces whose process no longer exists, returning
/// their names. Namespaces of live processes (ours included) are untouched.
pub fn cleanup_stale() -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(NETNS_RUN_DIR) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).context(format!("listing {NETNS_RUN_DIR}")),
    };
    let own = std::process::id() as i32;
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {NETNS_RUN_DIR}"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        if pid == own || pid_alive(pid) {
            continue;
        }
        delete_named(&name).with_context(|| format!("deleting stale namespace {name}"))?;
        removed.push(name);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_owner_pid() {
        assert_eq!(owner_pid("cct-123-4-snd"), Some(123));
        assert_eq!(owner_pid("cct-123-4-my-role"), Some(123));
        assert_eq!(owner_pid("cct-123-x-snd"), None);
        assert_eq!(owner_pid("cct-123-4-"), None);
        assert_eq!(owner_pid("cct-123"), None);
        assert_eq!(owner_pid("other-123-4-snd"), None);
    }

    #[test]
    fn sysctl_keys_are_confined() {
        assert_eq!(sysctl_path("net.ipv4.tcp_rmem").ok(), Some(PathBuf::from("/proc/sys/net/ipv4/tcp_rmem")));
        assert!(sysctl_path("../../etc/passwd").is_err());
        assert!(sysctl_path("net ipv4").is_err());
        assert!(sysctl_path("").is_err());
    }
}
