//! The suite's checks that need no test binary to wait for them: lints, the doc tests, the
//! kernel matrix, the dist check, and arm64's cross build and guest. They run in a second
//! process, at idle priority (SCHED_IDLE), while the test binaries run one after another.
//!
//! Why this pays on a 2-core machine: most test binaries wait on emulated paths (the diagnosis
//! tests use under half a core on average) and leave a core idle for minutes, while these steps
//! are CPU work that waits on nothing (clippy, a static link, qemu's software emulation). Why
//! idle priority: the emulated paths must be served the moment a packet is due, and a
//! SCHED_IDLE task yields to any normal one at once, where a second lane of ordinary priority
//! made the emulator release 9-36 % of packets late. Nothing here touches what the tests share
//! (namespaces, sysctls, cgroups): the lints build in the suite's target directory once its
//! build is done (the eBPF crate's in a directory of its own), the guests are qemu's.
//!
//! Two gates order the work against the suite: the kernel matrix needs the suite's cctrace (a
//! copy, since the dist check relinks target/debug/cctrace statically), and that relink must
//! wait until the tracer package's own tests, which run target/debug/cctrace by path, are done.
//! One hand-over goes the other way: the dist build's container image, which a test of the test
//! lane loads and runs (it waits for it).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::suite::Tally;

/// What the suite tells the checks beside it, as files in one directory (they are separate
/// processes).
pub(crate) struct Gates {
    dir: PathBuf,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Gate {
    /// The suite's test build is done and its cctrace copied to [`Gates::suite_binary`].
    BinaryReady,
    /// The tracer package's test binaries have run: target/debug/cctrace may be relinked.
    TracerTestsDone,
    /// The test binaries no emulator may run beside have run: the guests may boot.
    QuietTestsDone,
}

impl Gate {
    fn file_name(self) -> &'static str {
        match self {
            Gate::BinaryReady => "binary-ready",
            Gate::TracerTestsDone => "tracer-tests-done",
            Gate::QuietTestsDone => "quiet-tests-done",
        }
    }
}

impl Gates {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The cctrace the suite's tests and the kernel matrix run.
    pub(crate) fn suite_binary(&self) -> PathBuf {
        self.dir.join("cctrace")
    }

    /// Where the dist build hands its container image to the test that runs it, which waits
    /// for this file, or for `cctrace.oci.failed` beside it saying why there is none (both
    /// written by [`Gates::hand_over_image`]).
    pub(crate) fn image_archive(&self) -> PathBuf {
        self.dir.join("cctrace.oci.tar")
    }

    /// Hand the dist build's image over to the tests (a hard link, renamed into place whole),
    /// or tell them why there is none.
    fn hand_over_image(&self, built: std::result::Result<&Path, String>) -> Result<()> {
        let target = self.image_archive();
        let failed = |why: &str| std::fs::write(target.with_extension("failed"), why);
        let image = match built {
            Ok(image) => image,
            Err(why) => return failed(&why).context("writing why there is no image"),
        };
        let partial = target.with_extension("partial");
        let _ = std::fs::remove_file(&partial);
        let linked = std::fs::hard_link(image, &partial).or_else(|_| std::fs::copy(image, &partial).map(drop));
        match linked.and_then(|()| std::fs::rename(&partial, &target)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = failed(&format!("handing over {}: {e}", image.display()));
                Err(e).with_context(|| format!("handing {} over to the tests", image.display()))
            }
        }
    }

    pub(crate) fn open(&self, gate: Gate) -> Result<()> {
        let path = self.dir.join(gate.file_name());
        File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(())
    }

    /// Wait for `gate`; give up when the process that opens it is gone.
    fn wait(&self, gate: Gate, parent: u32) -> Result<()> {
        let path = self.dir.join(gate.file_name());
        while !path.exists() {
            if std::os::unix::process::parent_id() != parent {
                bail!("the suite ended before opening {}", gate.file_name());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(())
    }
}

/// The running checks, seen from the suite.
pub(crate) struct Beside {
    child: Option<Child>,
    log: PathBuf,
    gates: Gates,
}

fn beside_dir(root: &Path) -> PathBuf {
    root.join("target/beside")
}

/// Start the checks at idle priority; their output goes to a log printed by [`Beside::finish`].
pub(crate) fn start(root: &Path) -> Result<Beside> {
    let dir = beside_dir(root);
    let gates_dir = dir.join("gates");
    let _ = std::fs::remove_dir_all(&gates_dir);
    std::fs::create_dir_all(&gates_dir).with_context(|| format!("creating {}", gates_dir.display()))?;
    let log = dir.join("log.txt");
    let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let exe = std::env::current_exe().context("finding the xtask executable")?;
    let mut cmd = Command::new("chrt");
    // A process group of its own, so that stopping it stops qemu and cargo under it too.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd
        .args(["--idle", "0"])
        .arg(exe)
        .arg("beside")
        .arg("--gates")
        .arg(&gates_dir)
        .env("PATH", crate::tool_path())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("starting the checks beside the suite (chrt, from util-linux)")?;
    Ok(Beside { child: Some(child), log, gates: Gates::new(gates_dir) })
}

impl Beside {
    pub(crate) fn gates(&self) -> &Gates {
        &self.gates
    }

    /// Wait for the checks and print what they said; the doc tests' counts. When the suite
    /// failed (`suite_ok` false) they are stopped instead: the run has failed, and a gate they
    /// wait on may never open.
    pub(crate) fn finish(mut self, suite_ok: bool) -> Result<Checked> {
        let Some(mut child) = self.child.take() else { return Ok(Checked::default()) };
        let status =
            if suite_ok { child.wait().context("waiting for the checks beside the suite")? } else { stop(&mut child) };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        println!("     Checks beside the suite (lints, doc tests, kernel matrix, dist):");
        print!("{log}");
        check_status(status, suite_ok)?;
        Ok(Checked { tally: Tally::of(&log), lane_secs: lane_secs(&log) })
    }
}

/// What the checks beside the suite said: their doc tests' counts, and how long the lane took
/// from its start (with the suite's test build) to its last step.
#[derive(Default)]
pub(crate) struct Checked {
    pub(crate) tally: Tally,
    pub(crate) lane_secs: Option<f64>,
}

/// The lane's closing line ("checks beside the suite: N s", written by [`run`]).
fn lane_secs(log: &str) -> Option<f64> {
    log.lines().rev().find_map(|l| l.strip_prefix(LANE_DONE)?.strip_suffix(" s")?.parse().ok())
}

const LANE_DONE: &str = "xtask: checks beside the suite: ";

fn check_status(status: ExitStatus, suite_ok: bool) -> Result<()> {
    if suite_ok && !status.success() {
        bail!("checks beside the suite failed ({status}): see their output above");
    }
    Ok(())
}

fn stop(child: &mut Child) -> ExitStatus {
    let group = format!("-{}", child.id());
    let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
    child.wait().unwrap_or_else(|_| std::os::unix::process::ExitStatusExt::from_raw(1))
}

impl Drop for Beside {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop(&mut child);
        }
    }
}

/// When the suite's process is gone (a Ctrl-C reaches only its process group, and a killed
/// process runs no destructor), stop this process group too: qemu and cargo under it included.
fn stop_with(parent: u32) {
    std::thread::spawn(move || {
        while std::os::unix::process::parent_id() == parent {
            std::thread::sleep(Duration::from_millis(500));
        }
        // [`start`] made this process its group's leader.
        let group = format!("-{}", std::process::id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        std::process::exit(1);
    });
}

/// Each step says when it began (seconds into the suite's run) and, through `step`, how long
/// it took: at idle priority a step is as slow as the test binaries beside it are busy. A
/// failed step is remembered and the next one runs.
struct Steps {
    started: Instant,
    failed: Vec<String>,
}

impl Steps {
    fn record(&mut self, what: &str, f: &mut dyn FnMut() -> Result<()>) {
        crate::say(&format!("{what}: starting {:.0} s into the run", self.started.elapsed().as_secs_f64()));
        if let Err(e) = crate::step(what, f) {
            println!("xtask: {what} failed: {e:#}");
            self.failed.push(what.to_string());
        }
    }
}

/// The checks themselves, in the process [`start`] spawned. Every step runs even when an
/// earlier one failed, so one run reports every failure.
pub(crate) fn run(root: &Path, gates_dir: PathBuf) -> Result<()> {
    let gates = Gates::new(gates_dir);
    let parent = std::os::unix::process::parent_id();
    stop_with(parent);
    let mut steps = Steps { started: Instant::now(), failed: Vec::new() };
    // Nothing starts before the suite's build is done: both are CPU work, so clippy beside the
    // build only shares the cores it needs (the build took 108-129 s with or without it), and
    // after it the build's time is its own.
    if let Err(e) = gates.wait(Gate::BinaryReady, parent) {
        steps.record("checks beside the suite", &mut || Err(anyhow::anyhow!("{e:#}")));
        bail!("failed beside the suite: the suite's build never finished");
    }
    // Nor before the tracer package's tests are done: they run target/debug/cctrace by its path,
    // and clippy's pass over every target may link that file again (a fresh clone's docs test
    // found it missing, 10 s into the tests). They take about 20 s.
    if let Err(e) = gates.wait(Gate::TracerTestsDone, parent) {
        steps.record("checks beside the suite", &mut || Err(anyhow::anyhow!("{e:#}")));
        bail!("failed beside the suite: the tracer package's tests never finished");
    }
    lints(&mut steps, root);
    guests(&mut steps, root, &gates, parent);
    eprintln!("{LANE_DONE}{:.0} s", steps.started.elapsed().as_secs_f64());
    if !steps.failed.is_empty() {
        bail!("failed beside the suite: {}", steps.failed.join(", "));
    }
    Ok(())
}

/// Clippy on both sides, the doc tests.
fn lints(steps: &mut Steps, root: &Path) {
    steps.record("clippy", &mut || clippy_verdict(root));
    // The eBPF crate builds for its own target with nightly: a directory of its own.
    let own_target = beside_dir(root).join("target");
    steps.record("clippy (eBPF)", &mut || {
        crate::run(crate::ebpf_clippy().env("CARGO_TARGET_DIR", &own_target)).context("clippy on the eBPF programs")
    });
    // In the suite's own target directory, now that its build has released that directory's
    // lock (the test binaries take none).
    let doc_args: Vec<&str> = ["test"].into_iter().chain(crate::SUITE_ARGS.iter().copied()).chain(["--doc"]).collect();
    steps.record("doc tests", &mut || crate::run(&mut crate::suite_cargo(&doc_args)?));
}

/// Clippy's verdict, as `cargo clippy --all-targets -- -D warnings` gives it: the suite's test
/// build compiled the workspace's crates with clippy's driver (`suite_cargo`), so this builds
/// only the targets it left out (the benches) and has cargo replay what the others said. Any
/// warning of the workspace's crates, clippy's or the compiler's, fails it.
fn clippy_verdict(root: &Path) -> Result<()> {
    let args: Vec<&str> = ["test"]
        .into_iter()
        .chain(crate::SUITE_ARGS.iter().copied())
        .chain(["--all-targets", "--no-run", "--message-format=json"])
        .collect();
    let mut cargo = crate::suite_cargo(&args)?;
    let shown = format!("{cargo:?}");
    let out = cargo
        .current_dir(root)
        .env("PATH", crate::tool_path())
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("starting {shown}"))?;
    let messages: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let mut found = 0;
    for message in messages.iter().filter(|m| m["reason"] == "compiler-message").map(|m| &m["message"]) {
        print!("{}", message["rendered"].as_str().unwrap_or_default());
        found += usize::from(is_finding(message));
    }
    if !out.status.success() {
        bail!("{shown} failed ({})", out.status);
    }
    if found > 0 {
        bail!("clippy: {found} warnings in the workspace's crates (the suite denies them all, as -D warnings does)");
    }
    Ok(())
}

/// A warning or error about the code: a lint (it has a code) or anything pointing at a line,
/// not the compiler's closing count ("2 warnings emitted").
fn is_finding(message: &serde_json::Value) -> bool {
    matches!(message["level"].as_str(), Some("warning" | "error"))
        && (!message["code"].is_null() || message["spans"].as_array().is_some_and(|s| !s.is_empty()))
}

/// The dist build, the kernel matrix, the dist check and the arm64 build and guest, each once
/// its gate opens.
fn guests(steps: &mut Steps, root: &Path, gates: &Gates, parent: u32) {
    // What users install, built unoptimised (the release build is `cargo xtask dist`, minutes
    // more). Built before the kernel matrix and checked after it: the test lane's image test
    // waits for the container image this writes (it reaches that test minutes after the lints
    // above are done), and the build only moves ahead of the matrix, it adds nothing.
    let mut host_dist = None;
    let waited = gates.wait(Gate::TracerTestsDone, parent);
    // The shipped binary without the demo must build too (it does not link the lab). A build,
    // not a check: for tracer alone cargo resolves other features than for the workspace's
    // tests, and the dist build right after compiles that same graph, which it then finds
    // built. It needs no eBPF object: AYA_BUILD_SKIP leaves this feature set's empty rather than
    // compile the programs again. (It writes target/debug/cctrace, as the dist build does:
    // hence after the tracer package's tests.)
    steps.record("build without the demo", &mut || match &waited {
        Ok(()) => {
            let mut build = crate::suite_cargo(&["build", "-p", "tracer", "--no-default-features"])?;
            crate::run(build.env("AYA_BUILD_SKIP", "1"))
        }
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    });
    steps.record("dist build", &mut || {
        let built = match &waited {
            Ok(()) => crate::dist::build(root, crate::dist::Profile::Check, crate::Arch::host()),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        };
        gates.hand_over_image(built.as_ref().map(|a| a.image.as_path()).map_err(|e| format!("{e:#}")))?;
        host_dist = Some(built?);
        Ok(())
    });
    // No guest boots before the tests that judge the kernel's cost of attaching have run (see
    // suite.rs's NO_EMULATOR_BESIDE): in CI they are done long before the lints above are.
    match gates.wait(Gate::QuietTestsDone, parent) {
        Ok(()) => steps.record("kernel matrix", &mut || {
            crate::kernels::run(root, &gates.suite_binary(), &[], None, crate::kernels::Scope::Suite)
        }),
        Err(e) => steps.record("kernel matrix", &mut || Err(anyhow::anyhow!("{e:#}"))),
    }
    // Checked the way users meet it: static, packaged, the image read back, booted with busybox
    // only.
    steps.record("dist", &mut || match &host_dist {
        Some(artifacts) => crate::dist::check(root, crate::dist::Profile::Check, artifacts, true),
        None => Err(anyhow::anyhow!("nothing to check: the dist build failed")),
    });
    // arm64: the same dist cross-built (its own target directory, everything for aarch64 from
    // nothing: the longest build of the run, at idle priority) and checked, then booted as the
    // kernel matrix's arm64 row. After the host's dist, whose package the arm64 one must match.
    let mut arm64_binary = None;
    steps.record("cross build (aarch64)", &mut || {
        let artifacts = crate::dist::build(root, crate::dist::Profile::Check, crate::Arch::Aarch64)?;
        crate::dist::check(root, crate::dist::Profile::Check, &artifacts, false)?;
        arm64_binary = Some(artifacts.binary);
        Ok(())
    });
    steps.record("arm64 guest", &mut || match &arm64_binary {
        Some(binary) => crate::kernels::arm64::run(
            root,
            binary,
            crate::kernels::arm64::SUITE_KERNELS,
            crate::kernels::arm64::SUITE_HOOKS,
        ),
        None => Err(anyhow::anyhow!("no aarch64 cctrace: its cross build failed")),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_handed_over_whole_or_the_reason_why_not() {
        let dir = std::env::temp_dir().join(format!("xtask-gates-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ok")).unwrap();
        std::fs::create_dir_all(dir.join("failed")).unwrap();
        let built = dir.join("built.oci.tar");
        std::fs::write(&built, "an image").unwrap();

        let gates = Gates::new(dir.join("ok"));
        gates.hand_over_image(Ok(&built)).unwrap();
        assert_eq!(std::fs::read_to_string(gates.image_archive()).unwrap(), "an image");
        assert!(!gates.image_archive().with_extension("partial").exists());
        assert!(!gates.image_archive().with_extension("failed").exists());

        let gates = Gates::new(dir.join("failed"));
        gates.hand_over_image(Err("cargo deb failed".into())).unwrap();
        assert!(!gates.image_archive().exists());
        assert_eq!(
            std::fs::read_to_string(gates.image_archive().with_extension("failed")).unwrap(),
            "cargo deb failed"
        );
        // The name the test waits on: tests/src/runtimes/image.rs derives the failure's the same way.
        assert_eq!(gates.image_archive().with_extension("failed").file_name().unwrap(), "cctrace.oci.failed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_lane_time_is_read_from_its_closing_line() {
        let log = "xtask: clippy: 30 s\nxtask: checks beside the suite: 612 s\n";
        assert_eq!(super::lane_secs(log), Some(612.0));
        assert_eq!(super::lane_secs("xtask: clippy: 30 s\n"), None);
    }

    #[test]
    fn lints_and_located_errors_are_findings_the_closing_count_is_not() {
        let lint = serde_json::json!({"level": "warning", "code": {"code": "clippy::iter_count"}, "spans": [{}]});
        let error = serde_json::json!({"level": "error", "code": null, "spans": [{}]});
        let count = serde_json::json!({"level": "warning", "code": null, "spans": [], "message": "2 warnings emitted"});
        let note = serde_json::json!({"level": "note", "code": null, "spans": [{}]});
        assert!(is_finding(&lint) && is_finding(&error));
        assert!(!is_finding(&count) && !is_finding(&note));
    }
}
