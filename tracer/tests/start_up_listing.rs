//! The start-up listing of existing sockets with and without CAP_SYS_ADMIN, on the real kernel.
//! Without it (CAP_BPF and CAP_PERFMON are enough to trace) `setns` into other network
//! namespaces is refused: the listing must say which namespaces it skipped and why instead of
//! skipping them silently.
//!
//! The loader runs in a child process (this test binary again, under `setpriv`), because
//! capabilities dropped in the test process could not be regained by the other tests.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::process::Command;

use tracer::kernel::{KernelOptions, KernelSource};

/// Set in the child: run the loader and print what the listing did.
const CHILD_ENV: &str = "CCTRACE_LISTING_CHILD";
/// Marks the child's report lines in its output.
const TAG: &str = "@cct-listing ";

/// Why this machine cannot run the test, if it cannot. In CI (`CI=true`) that is a failure.
fn skip_reason() -> Option<String> {
    if let Some(why) = cctrace_lab::skip::missing_root_or_btf() {
        return Some(why);
    }
    if Command::new("setpriv").arg("--version").output_within(CHILD_DEADLINE).is_err() {
        return Some("needs setpriv (util-linux) to drop CAP_SYS_ADMIN".into());
    }
    None
}

fn require_kernel() -> bool {
    let Some(why) = skip_reason() else { return true };
    cctrace_lab::skip::skip(&why);
    false
}

/// What the child printed: namespaces found and walked, the inodes skipped with their reason,
/// and the one line for the user.
#[derive(Debug, Default)]
struct ChildReport {
    namespaces: usize,
    walked: usize,
    skipped: Vec<(u64, String)>,
    line: Option<String>,
}

fn run_child(drop_sys_admin: bool) -> ChildReport {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = if drop_sys_admin {
        let mut c = Command::new("setpriv");
        c.args(["--inh-caps=-sys_admin", "--bounding-set=-sys_admin"]).arg(exe);
        c
    } else {
        Command::new(exe)
    };
    let out = cmd
        .args(["--exact", "listing_in_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output_within(CHILD_DEADLINE)
        .expect("running the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let mut report = ChildReport::default();
    // The harness prints "test NAME ... " in front of the first line of output.
    for l in stdout.lines().filter_map(|l| l.split_once(TAG).map(|(_, rest)| rest)) {
        if let Some(rest) = l.strip_prefix("listing: ") {
            let mut w = rest.split_whitespace();
            report.namespaces = w.next().and_then(|v| v.parse().ok()).expect("namespaces");
            report.walked = w.next().and_then(|v| v.parse().ok()).expect("walked");
        } else if let Some(rest) = l.strip_prefix("skipped: ") {
            let (ino, why) = rest.split_once(' ').expect("inode and reason");
            report.skipped.push((ino.parse().expect("inode"), why.to_string()));
        } else if let Some(line) = l.strip_prefix("line: ") {
            report.line = Some(line.to_string());
        }
    }
    assert!(report.namespaces > 0, "the child printed no listing: {stdout}");
    report
}

#[test]
fn without_cap_sys_admin_the_listing_names_what_it_skipped() {
    if !require_kernel() {
        return;
    }
    // A namespace other than ours, so there is one to be refused.
    let other = cctrace_lab::Netns::create("listing").expect("creating a network namespace");

    let full = run_child(false);
    eprintln!("with CAP_SYS_ADMIN: {full:?}");
    assert!(
        !full.skipped.iter().any(|(ino, _)| *ino == other.inode()),
        "root walks every namespace, {} included: {full:?}",
        other.inode()
    );

    let limited = run_child(true);
    eprintln!("without CAP_SYS_ADMIN: {limited:?}");
    let refused = limited.skipped.iter().find(|(ino, _)| *ino == other.inode()).expect("the lab namespace skipped");
    assert_eq!(refused.1, "setns: Operation not permitted: needs CAP_SYS_ADMIN");
    // Our own namespace needs no setns: it is still walked.
    assert!(limited.walked >= 1, "{limited:?}");
    assert_eq!(limited.walked + limited.skipped.len(), limited.namespaces);
    let line = limited.line.expect("a line for the user");
    assert!(
        line.starts_with(&format!(
            "start-up listing skipped {} of {} network namespaces (",
            limited.skipped.len(),
            limited.namespaces
        )) && line.contains("setns: Operation not permitted: needs CAP_SYS_ADMIN")
            && line.ends_with("their idle flows appear when they next send"),
        "{line}"
    );
}

/// The child's half: load and attach, then print what the listing did. Only runs when the
/// parent above starts it.
#[test]
#[ignore = "run by without_cap_sys_admin_the_listing_names_what_it_skipped in a child process"]
fn listing_in_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let source = KernelSource::start(&KernelOptions::default(), &tracer::kernel::btf_file::KernelBtf::Kernel)
            .expect("loading cctrace's programs");
        let info = source.info();
        let report = info.snapshot.as_ref().expect("the listing ran");
        println!("{TAG}listing: {} {}", report.namespaces, report.walked);
        for f in &report.failures {
            println!("{TAG}skipped: {} {}", f.netns, f.error);
        }
        if let Some(line) = info.start_up_listing_line() {
            println!("{TAG}line: {line}");
        }
        // The kernel's own counters reach the consumer through the one source interface.
        use tracer::source::EventSource;
        // The programs stay attached and the host's other TCP traffic goes on: the count read
        // through the interface lies between two direct reads around it.
        let before = source.emitted();
        let counters = source.counters();
        let after = source.emitted();
        let kernel = source.kernel_counters();
        let emitted = counters.kernel_emitted.expect("a live source counts what the kernel emitted");
        assert!((before..=after).contains(&emitted), "{before} <= {emitted} <= {after}");
        assert_eq!(counters.kernel_read_errors, kernel["read_errors"]);
        assert_eq!(counters.flow_map_full, kernel["flow_map_full"]);
        eprintln!("counters after the listing: {counters:?}");
    });
}
