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

use super::attach::{error_chain, short};
use crate::analysis::sample::{decode, DecodeContext, Sample};

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

/// Samples read from the iterators per batch handed to the pipeline.
const LISTING_BATCH: usize = 1024;
/// Batches read ahead of the pipeline: the listing's memory stays bounded however many sockets
/// the host has.
const LISTING_QUEUE: usize = 4;
/// Bytes asked of an iterator per read: whole samples.
const READ_CHUNK: usize = 256 * tracer_common::FLOW_SAMPLE_SIZE;

/// The start-up listing under way: one `cct_iter_tcp` iterator per network namespace, created
/// at start (an iterator walks the namespace it was created in) and read on a thread of its own
/// while the ring buffer is drained, its samples handed over in bounded batches. Nothing goes
/// through the ring, so nothing of the listing is lost however many sockets there are.
pub(super) struct ListingWalk {
    pub report: ListingReport,
    pub batches: tokio::sync::mpsc::Receiver<Vec<Sample>>,
}

/// Create `cct_iter_tcp`'s iterator in every network namespace of the host and start reading
/// them in the background. The program is unloaded here; the iterators keep it alive until
/// they are read to the end.
pub(super) fn start_listing(ebpf: &mut Ebpf, btf: &Btf, ctx: DecodeContext) -> Result<ListingWalk, ListingError> {
    let prog: &mut Iter = ebpf
        .program_mut("cct_iter_tcp")
        .ok_or(ListingError::ProgramMissing)?
        .try_into()
        .map_err(|e| ListingError::Load(short(&error_chain(&e))))?;
    prog.load("tcp", btf).map_err(|e| {
        let whole = error_chain(&e);
        log::info!("loading cct_iter_tcp failed: {whole}");
        ListingError::Load(short(&whole))
    })?;
    let (report, iterators) =
        walk_each(&crate::host::netns_paths(), |netns, path| create_iter_in(prog, netns, path, crate::host::setns_net));
    let _ = prog.unload();
    let (tx, batches) = tokio::sync::mpsc::channel(LISTING_QUEUE);
    let spawned = std::thread::Builder::new()
        .name("cct-listing".into())
        .spawn(move || read_iterators(iterators, &ctx, |batch| tx.blocking_send(batch).is_ok()));
    if let Err(e) = spawned {
        return Err(ListingError::Load(format!("starting the listing thread: {e}")));
    }
    Ok(ListingWalk { report, batches })
}

/// Read every iterator to its end in chunks of whole samples, handing them to `send` in batches
/// of [`LISTING_BATCH`] until it says the receiver is gone. A record that does not decode is
/// skipped; a read that fails ends that namespace's walk.
fn read_iterators<R: io::Read>(iterators: Vec<R>, ctx: &DecodeContext, mut send: impl FnMut(Vec<Sample>) -> bool) {
    let mut batch = Vec::with_capacity(LISTING_BATCH);
    let mut buf = vec![0u8; READ_CHUNK];
    for mut iter in iterators {
        let mut filled = 0;
        loop {
            let n = match iter.read(&mut buf[filled..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            filled += n;
            let whole = filled - filled % tracer_common::FLOW_SAMPLE_SIZE;
            for record in buf[..whole].chunks_exact(tracer_common::FLOW_SAMPLE_SIZE) {
                if let Ok(sample) = decode(record, ctx) {
                    batch.push(sample);
                }
                if batch.len() == LISTING_BATCH
                    && !send(std::mem::replace(&mut batch, Vec::with_capacity(LISTING_BATCH)))
                {
                    return;
                }
            }
            buf.copy_within(whole..filled, 0);
            filled -= whole;
        }
    }
    if !batch.is_empty() {
        send(batch);
    }
}

/// Walk every namespace with `walk`, counting what it did, keeping what it returned and why it
/// failed.
fn walk_each<T>(
    namespaces: &[(u32, PathBuf)],
    mut walk: impl FnMut(u32, &Path) -> Result<T, NetnsWalkError>,
) -> (ListingReport, Vec<T>) {
    let mut report = ListingReport { namespaces: namespaces.len(), ..ListingReport::default() };
    let mut walked = Vec::new();
    for (netns, path) in namespaces {
        match walk(*netns, path) {
            Ok(t) => {
                report.walked += 1;
                walked.push(t);
            }
            Err(error) => report.failures.push(NetnsWalkFailure { netns: *netns, path: path.clone(), error }),
        }
    }
    (report, walked)
}

/// Attach the loaded `iter/tcp` program `prog` and create its iterator on a thread inside
/// network namespace `netns` (opened at `path`, entered with `enter`), so that reading it walks
/// that namespace's sockets.
fn create_iter_in(
    prog: &mut Iter,
    netns: u32,
    path: &Path,
    enter: fn(&File) -> io::Result<()>,
) -> Result<File, NetnsWalkError> {
    let link =
        prog.attach().and_then(|id| prog.take_link(id)).map_err(|e| NetnsWalkError::Attach(short(&error_chain(&e))))?;
    // A thread of its own: entering a namespace changes the thread for good.
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                in_namespace(netns, path, enter, || {
                    link.into_file().map_err(|e| NetnsWalkError::CreateIterator(short(&error_chain(&e))))
                })
            })
            .join()
            .unwrap_or(Err(NetnsWalkError::Panicked))
    })
}

/// Attach the loaded `iter/tcp` program `prog`, create its iterator inside network namespace
/// `netns` (see [`create_iter_in`]) and return everything the program wrote (`bpf_seq_write`).
pub(super) fn read_iter_in(
    prog: &mut Iter,
    netns: u32,
    path: &Path,
    enter: fn(&File) -> io::Result<()>,
) -> Result<Vec<u8>, NetnsWalkError> {
    let mut iter = create_iter_in(prog, netns, path, enter)?;
    let mut out = Vec::new();
    io::Read::read_to_end(&mut iter, &mut out).map_err(|e| NetnsWalkError::Read(Errno::of(&e)))?;
    Ok(out)
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
        let (report, walked) =
            walk_each(
                &namespaces,
                |netns, _| {
                    if netns == 1 {
                        Ok(netns)
                    } else {
                        Err(NetnsWalkError::Enter(Errno(libc::EPERM)))
                    }
                },
            );
        assert_eq!(walked, [1]);
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
        assert_eq!(walk_each(&namespaces, |_, _| Ok(())).0.skipped_line(), None);
    }

    /// Hands out its bytes in reads of uneven sizes, as a seq_file may.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl io::Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.bytes.len() - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            self.step = self.step % 700 + 97;
            Ok(n)
        }
    }

    #[test]
    fn iterator_output_read_in_uneven_pieces_yields_every_sample_in_bounded_batches() {
        use crate::test_support::wire::{raw_bytes, raw_sample_template};
        let ctx = DecodeContext { hz: 250 };
        let iterator = |first: u64, n: u64| Trickle {
            bytes: (first..first + n)
                .flat_map(|cookie| {
                    let mut raw = raw_sample_template();
                    raw.cookie = cookie;
                    raw_bytes(&raw)
                })
                .collect(),
            at: 0,
            step: 1,
        };
        let mut batches = Vec::new();
        read_iterators(vec![iterator(1, 1500), iterator(10_000, 700)], &ctx, |b| {
            batches.push(b);
            true
        });
        assert!(batches.iter().all(|b| b.len() <= LISTING_BATCH));
        let cookies: Vec<u64> = batches.iter().flatten().map(|s| s.cookie).collect();
        let want: Vec<u64> = (1..1501).chain(10_000..10_700).collect();
        assert_eq!(cookies, want);

        // A receiver that has gone stops the reading at once.
        let mut sent = 0;
        read_iterators(vec![iterator(1, 5000)], &ctx, |_| {
            sent += 1;
            false
        });
        assert_eq!(sent, 1);
    }

    #[test]
    fn many_reasons_are_counted_not_listed() {
        let namespaces: Vec<(u32, PathBuf)> = (1..=4).map(|i| (i, PathBuf::from("/x"))).collect();
        let (report, _) = walk_each(&namespaces, |netns, _| -> Result<(), _> {
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
