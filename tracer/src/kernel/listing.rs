//! The start-up listing of sockets that already exist: the `iter/tcp` program run once in every
//! network namespace, so flows that are idle when cctrace starts show at once. An iterator walks
//! the sockets of the namespace of the thread that creates it, so each walk happens on a thread
//! that entered that namespace (`setns`, which needs CAP_SYS_ADMIN). What could not be walked is
//! reported, typed, so the user learns which flows will only appear when they next send.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use aya::programs::Iter;
use aya::{Btf, Ebpf};

use super::{error_chain, short};

/// Why the listing did not run at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListingError {
    #[error("kernel BTF unavailable")]
    BtfUnavailable,
    #[error("program cct_iter_tcp missing from the eBPF object")]
    ProgramMissing,
    #[error("loading iter/tcp: {0}")]
    Load(String),
}

/// An OS error number, shown as the C library words it stands for ("Operation not permitted").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub(crate) fn of(e: &io::Error) -> Self {
        Self(e.raw_os_error().unwrap_or(0))
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = io::Error::from_raw_os_error(self.0).to_string();
        // std appends " (os error N)": the words are what a person reads.
        let words = text.rsplit_once(" (os error").map_or(text.as_str(), |(w, _)| w);
        f.write_str(words)
    }
}

/// Why one network namespace was not walked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetnsWalkError {
    #[error("attaching iter/tcp: {0}")]
    Attach(String),
    #[error("opening the namespace: {0}")]
    Open(Errno),
    #[error("setns: {0}{hint}", hint = if .0.0 == libc::EPERM { ": needs CAP_SYS_ADMIN" } else { "" })]
    Enter(Errno),
    #[error("creating the iterator: {0}")]
    CreateIterator(String),
    #[error("reading the iterator: {0}")]
    Read(Errno),
    #[error("the walking thread panicked")]
    Panicked,
}

/// One namespace the listing skipped, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetnsWalkFailure {
    /// Inode of the namespace.
    pub netns: u32,
    /// The path it was to be entered through.
    pub path: PathBuf,
    pub error: NetnsWalkError,
}

/// What the listing did: namespaces found, walked, and the ones it skipped with their reasons.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListingReport {
    pub namespaces: usize,
    pub walked: usize,
    pub failures: Vec<NetnsWalkFailure>,
}

/// Distinct reasons named in the one-line summary; more are counted, not listed.
const REASONS_SHOWN: usize = 2;

impl ListingReport {
    /// One line (without the `cctrace: ` prefix) when some namespaces were skipped, e.g.
    /// `start-up listing skipped 3 of 4 network namespaces (setns: Operation not permitted:
    /// needs CAP_SYS_ADMIN); their idle flows appear when they next send`.
    pub fn skipped_line(&self) -> Option<String> {
        if self.failures.is_empty() {
            return None;
        }
        let mut reasons: Vec<String> = Vec::new();
        for f in &self.failures {
            let reason = f.error.to_string();
            if !reasons.contains(&reason) {
                reasons.push(reason);
            }
        }
        let more = reasons.len().saturating_sub(REASONS_SHOWN);
        reasons.truncate(REASONS_SHOWN);
        let mut why = reasons.join("; ");
        if more > 0 {
            why.push_str(&format!("; {more} other reason{}", if more == 1 { "" } else { "s" }));
        }
        Some(format!(
            "start-up listing skipped {} of {} network namespaces ({why}); their idle flows appear when they next send",
            self.failures.len(),
            self.namespaces
        ))
    }
}

/// Run `cct_iter_tcp` once in every network namespace of the host; its samples go through the
/// ring buffer like any other. The program is unloaded afterwards.
pub(super) fn list_existing_sockets(ebpf: &mut Ebpf, btf: &Btf) -> Result<ListingReport, ListingError> {
    let prog: &mut Iter = ebpf
        .program_mut("cct_iter_tcp")
        .ok_or(ListingError::ProgramMissing)?
        .try_into()
        .map_err(|e| ListingError::Load(short(&error_chain(&e))))?;
    prog.load("tcp", btf).map_err(|e| ListingError::Load(short(&error_chain(&e))))?;
    let report = walk_each(&crate::host::netns_paths(), |netns, path| walk_one(prog, netns, path, enter_netns));
    let _ = prog.unload();
    Ok(report)
}

/// Walk every namespace with `walk`, counting what it did and keeping why it failed.
fn walk_each(
    namespaces: &[(u32, PathBuf)],
    mut walk: impl FnMut(u32, &Path) -> Result<(), NetnsWalkError>,
) -> ListingReport {
    let mut report = ListingReport { namespaces: namespaces.len(), ..ListingReport::default() };
    for (netns, path) in namespaces {
        match walk(*netns, path) {
            Ok(()) => report.walked += 1,
            Err(error) => report.failures.push(NetnsWalkFailure { netns: *netns, path: path.clone(), error }),
        }
    }
    report
}

/// `setns(fd, CLONE_NEWNET)` on the calling thread.
pub(crate) fn enter_netns(ns: &File) -> io::Result<()> {
    // SAFETY: setns on the calling thread only, with an open namespace fd it borrows.
    if unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(ns), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn walk_one(
    prog: &mut Iter,
    netns: u32,
    path: &Path,
    enter: fn(&File) -> io::Result<()>,
) -> Result<(), NetnsWalkError> {
    read_iter_in(prog, netns, path, enter).map(drop)
}

/// Attach the loaded `iter/tcp` program `prog`, create its iterator on a thread inside network
/// namespace `netns` (opened at `path`, entered with `enter`) so it walks that namespace's
/// sockets, and return everything the program wrote (`bpf_seq_write`).
pub(super) fn read_iter_in(
    prog: &mut Iter,
    netns: u32,
    path: &Path,
    enter: fn(&File) -> io::Result<()>,
) -> Result<Vec<u8>, NetnsWalkError> {
    let link =
        prog.attach().and_then(|id| prog.take_link(id)).map_err(|e| NetnsWalkError::Attach(short(&error_chain(&e))))?;
    // A thread of its own: entering a namespace changes the thread for good.
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                in_namespace(netns, path, enter, || {
                    let mut iter =
                        link.into_file().map_err(|e| NetnsWalkError::CreateIterator(short(&error_chain(&e))))?;
                    let mut out = Vec::new();
                    io::Read::read_to_end(&mut iter, &mut out).map_err(|e| NetnsWalkError::Read(Errno::of(&e)))?;
                    Ok(out)
                })
            })
            .join()
            .unwrap_or(Err(NetnsWalkError::Panicked))
    })
}

/// Run `walk` on the calling thread inside namespace `netns` (opened at `path`, entered with
/// `enter`). The thread's own namespace needs no `setns`, so without CAP_SYS_ADMIN that one is
/// still walked.
pub(crate) fn in_namespace<T>(
    netns: u32,
    path: &Path,
    enter: fn(&File) -> io::Result<()>,
    walk: impl FnOnce() -> Result<T, NetnsWalkError>,
) -> Result<T, NetnsWalkError> {
    if crate::host::netns_inode("/proc/thread-self/ns/net") != Some(netns) {
        let ns = File::open(path).map_err(|e| NetnsWalkError::Open(Errno::of(&e)))?;
        enter(&ns).map_err(|e| NetnsWalkError::Enter(Errno::of(&e)))?;
    }
    walk()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_permitted(_: &File) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }

    #[test]
    fn a_refused_setns_is_reported_with_its_reason_and_nothing_is_walked() {
        // Another namespace (an inode that is not this thread's), reachable by path.
        let other = crate::host::netns_inode("/proc/thread-self/ns/net").unwrap_or(0).wrapping_add(1);
        let mut walked = false;
        let result = in_namespace(other, Path::new("/proc/self/ns/net"), not_permitted, || {
            walked = true;
            Ok(())
        });
        assert_eq!(result, Err(NetnsWalkError::Enter(Errno(libc::EPERM))));
        assert!(!walked, "no walk in the wrong namespace");
        assert_eq!(result.expect_err("refused").to_string(), "setns: Operation not permitted: needs CAP_SYS_ADMIN");
    }

    #[test]
    fn the_threads_own_namespace_needs_no_setns() {
        let Some(here) = crate::host::netns_inode("/proc/thread-self/ns/net") else { return };
        let mut walked = false;
        let result = in_namespace(here, Path::new("/proc/self/ns/net"), not_permitted, || {
            walked = true;
            Ok(())
        });
        assert_eq!(result, Ok(()));
        assert!(walked);
    }

    #[test]
    fn skipped_namespaces_make_one_line_with_the_distinct_reasons() {
        let namespaces: Vec<(u32, PathBuf)> =
            (1..=4).map(|i| (i, PathBuf::from(format!("/proc/{}/ns/net", 100 + i)))).collect();
        // The first is this thread's namespace; the others refuse setns.
        let report =
            walk_each(
                &namespaces,
                |netns, _| {
                    if netns == 1 {
                        Ok(())
                    } else {
                        Err(NetnsWalkError::Enter(Errno(libc::EPERM)))
                    }
                },
            );
        assert_eq!(report.namespaces, 4);
        assert_eq!(report.walked, 1);
        assert_eq!(report.failures.len(), 3);
        assert_eq!(report.failures[0].netns, 2);
        assert_eq!(report.failures[0].path, PathBuf::from("/proc/102/ns/net"));
        assert_eq!(
            report.skipped_line().as_deref(),
            Some(
                "start-up listing skipped 3 of 4 network namespaces (setns: Operation not permitted: needs \
                 CAP_SYS_ADMIN); their idle flows appear when they next send"
            )
        );
        assert_eq!(walk_each(&namespaces, |_, _| Ok(())).skipped_line(), None);
    }

    #[test]
    fn many_reasons_are_counted_not_listed() {
        let namespaces: Vec<(u32, PathBuf)> = (1..=4).map(|i| (i, PathBuf::from("/x"))).collect();
        let report = walk_each(&namespaces, |netns, _| {
            Err(match netns {
                1 => NetnsWalkError::Open(Errno(libc::ENOENT)),
                2 => NetnsWalkError::Enter(Errno(libc::EINVAL)),
                3 => NetnsWalkError::Attach("EBUSY".into()),
                _ => NetnsWalkError::Panicked,
            })
        });
        let line = report.skipped_line().expect("a line");
        assert!(line.starts_with("start-up listing skipped 4 of 4 network namespaces (opening the namespace: No such file or directory; setns: Invalid argument; 2 other reasons)"), "{line}");
    }
}
