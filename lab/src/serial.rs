//! One test at a time on this machine. Tests that load eBPF programs or build labs count
//! programs with bpftool, change host-wide sysctls and measure timing on a 2-core machine: they
//! must not overlap, whether they share a process (libtest's threads) or not (two test binaries
//! at once, or a runner that starts a process per test, such as cargo-nextest).

use std::fs::File;
use std::io::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use anyhow::{Context, Result};

/// The lock file every process's tests share: /run/lock is a tmpfs on every systemd host, so a
/// lock never outlives a reboot, and the kernel drops it when its holder dies however it ends.
const LOCK_FILE: &str = "/run/lock/cctrace-tests.lock";

/// The variable naming a file where each test appends how long it held the lock
/// (`name<TAB>seconds`): the suite (`cargo xtask test`) names the slowest tests from it. What a
/// test costs the run is the time it held the machine, not the time it waited for it.
pub const TIMES_ENV: &str = "CCTRACE_TEST_TIMES";

/// Held while one test runs: this process's mutex first (a second `flock` from the same process
/// on another open file would block against itself), then the machine-wide file lock.
#[derive(Debug)]
pub struct Serial {
    _file: File,
    _thread: MutexGuard<'static, ()>,
    since: Instant,
}

impl Drop for Serial {
    fn drop(&mut self) {
        let Some(log) = std::env::var_os(TIMES_ENV) else { return };
        let test = std::thread::current().name().unwrap_or("a test").to_string();
        let line = format!("{test}\t{:.3}\n", self.since.elapsed().as_secs_f64());
        let written =
            File::options().create(true).append(true).open(&log).and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("could not record the test's time in {}: {e}", log.to_string_lossy());
        }
    }
}

/// Wait until no other test on this machine holds the lock, then hold it until the guard drops.
pub fn serial() -> Result<Serial> {
    static LOCK: Mutex<()> = Mutex::new(());
    let thread = LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = std::path::Path::new(LOCK_FILE).parent().unwrap_or(std::path::Path::new("/tmp"));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .with_context(|| format!("opening {LOCK_FILE}"))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .map_err(std::io::Error::from)
        .with_context(|| format!("locking {LOCK_FILE}"))?;
    Ok(Serial { _file: file, _thread: thread, since: Instant::now() })
}
